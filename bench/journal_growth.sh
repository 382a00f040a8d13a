#!/bin/bash
# Journal size and cost on the training job (host backend):
#  - journal bytes at the end of a run of SHORT and of LONG iterations (the
#    journal must not grow with the number of iterations: goal ratio <= 1.1);
#  - step time with the journal on vs off, measured in the same run: REPS
#    interleaved repetitions of each, step time = (wall(STEPS) - wall(WARM)) /
#    (STEPS - WARM) so that start-up and teardown cancel; median printed
#    (goal ratio <= 1.02);
#  - the journal's per-record append cost in one process (journal_bench).
#   bash bench/journal_growth.sh [SHORT=100] [LONG=10000] [RANKS=1] [REPS=5] [STEPS=2000]
#   BIN=/tmp/dir bash bench/journal_growth.sh ...   # binaries copied there, no build
set -euo pipefail
cd "$(dirname "$0")/.."
short="${1:-100}"; long="${2:-10000}"; ranks="${3:-1}"; reps="${4:-5}"; steps="${5:-2000}"
warm=200
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
if [ -n "${BIN:-}" ]; then
  # BIN=dir: binaries copied there before (flat: revenant-run, revenant-agent, ...).
  cp -L "$BIN"/{revenant-run,revenant-agent,librevenant_shim.so,train_mlp.bin,libtrain_mlp_host_kernels.so,journal_bench} "$tmp/"
else
  bazel build //tools:revenant-run //agent:revenant-agent //shim:librevenant_shim.so \
    //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels //journal:journal_bench \
    >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; exit 1; }
  B="$(bazel info bazel-bin 2>/dev/null)"
  # Private copies: bazel-bin may be rewritten by other builds while this runs.
  cp -L "$B/tools/revenant-run" "$B/agent/revenant-agent" "$B/shim/librevenant_shim.so" \
    "$B/tests/apps/train_mlp.bin" "$B/tests/apps/libtrain_mlp_host_kernels.so" \
    "$B/journal/journal_bench" "$tmp/"
fi
echo "machine: $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
run() {  # iters journal -> prints "<journal bytes> <ns>"
  local start=$(date +%s%N)
  "$tmp/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 --journal="$2" \
    --host_kernels="$tmp/libtrain_mlp_host_kernels.so" -- "$tmp/train_mlp.bin" \
    --iters "$1" --hidden 64 --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  local ns=$(( $(date +%s%N) - start ))
  local bytes=$(sed -n 's/.*\[a0\].*journal at exit: setup \([0-9]*\) bytes.*minibatch \([0-9]*\) bytes.*/\1 \2/p' "$tmp/log" | awk '{print $1 + $2}')
  echo "${bytes:-0} $ns"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
read b_short _ < <(run "$short" true)
read b_long _ < <(run "$long" true)
echo "journal bytes after $short iterations: $b_short"
echo "journal bytes after $long iterations: $b_long"
awk -v a="$b_long" -v b="$b_short" 'BEGIN { printf "size ratio (%s / %s iterations): %.3f (goal <= 1.1)\n", "'"$long"'", "'"$short"'", a / b }'

: >"$tmp/on"; : >"$tmp/off"; : >"$tmp/ratio"
for r in $(seq "$reps"); do
  # Alternate the order so that drifting load does not favour one side.
  if (( r % 2 )); then order="true false"; else order="false true"; fi
  for j in $order; do
    read _ t0 < <(run "$warm" "$j")
    read _ t1 < <(run "$steps" "$j")
    awk -v a="$t0" -v b="$t1" -v n=$((steps - warm)) 'BEGIN { printf "%.6f\n", (b - a) / n / 1e6 }' \
      >>"$tmp/$([ "$j" = true ] && echo on || echo off)"
  done
  on=$(tail -1 "$tmp/on"); off=$(tail -1 "$tmp/off")
  awk -v on="$on" -v off="$off" 'BEGIN { printf "%.4f\n", on / off }' >>"$tmp/ratio"
  echo "  rep $r: step time journal on $on ms, off $off ms, ratio $(tail -1 "$tmp/ratio")"
done
m_on=$(median <"$tmp/on"); m_off=$(median <"$tmp/off"); m_ratio=$(median <"$tmp/ratio")
echo "step time (median of $reps, $((steps - warm)) steps each): journal on $m_on ms, off $m_off ms"
echo "step time ratio journal on / off: median $m_ratio (per-rep ratios: $(tr '\n' ' ' <"$tmp/ratio")) (goal <= 1.02)"
echo "per-record append cost (journal_bench, one process):"
"$tmp/journal_bench" --launches | sed 's/^/  /'
