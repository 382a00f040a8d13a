#!/bin/bash
# Journal size and cost on the training job (host backend):
#  - journal bytes at the end of a run of SHORT and of LONG iterations (the
#    journal must not grow with the number of iterations: goal ratio <= 1.1);
#  - step time with the journal on vs off, measured in the same run.
#   bash bench/journal_growth.sh [SHORT=100] [LONG=10000] [RANKS=1]
set -euo pipefail
cd "$(dirname "$0")/.."
short="${1:-100}"; long="${2:-10000}"; ranks="${3:-1}"
bazel build //tools:revenant-run //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels >/dev/null 2>&1
B="$(bazel info bazel-bin 2>/dev/null)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
run() {  # iters journal -> prints "<journal bytes> <seconds>"
  local start=$(date +%s%N)
  "$B/tools/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 --journal="$2" \
    --host_kernels="$B/tests/apps/libtrain_mlp_host_kernels.so" -- "$B/tests/apps/train_mlp.bin" \
    --iters "$1" --hidden 64 --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  local ns=$(( $(date +%s%N) - start ))
  local bytes=$(sed -n 's/.*\[a0\].*journal at exit: setup \([0-9]*\) bytes.*minibatch \([0-9]*\) bytes.*/\1 \2/p' "$tmp/log" | awk '{print $1 + $2}')
  echo "${bytes:-0} $ns"
}
read b_short t_short < <(run "$short" true)
read b_long t_long < <(run "$long" true)
read _ t_long_off < <(run "$long" false)
echo "journal bytes after $short iterations: $b_short"
echo "journal bytes after $long iterations: $b_long"
awk -v a="$b_long" -v b="$b_short" 'BEGIN { printf "size ratio (%s / %s iterations): %.3f (goal <= 1.1)\n", "'"$long"'", "'"$short"'", a / b }'
awk -v on="$t_long" -v off="$t_long_off" -v n="$long" 'BEGIN { printf "step time, journal on: %.3f ms, off: %.3f ms, ratio %.3f\n", on / n / 1e6, off / n / 1e6, on / off }'
