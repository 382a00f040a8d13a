#!/bin/bash
# Journal size and cost on the training job (host backend):
#  - journal bytes at the end of a run of SHORT and of LONG iterations (the
#    journal must not grow with the number of iterations: goal ratio <= 1.1);
#  - the executor's time inside the journal (REVENANT_JOURNAL_TIMING=1);
#  - step time with the journal on vs off: bench/journal_step.sh, REPS
#    interleaved pairs of runs of STEPS iterations, each timing its own steady
#    state (train_mlp --time_after 200: start-up and teardown excluded);
#    median of the per-pair ratios printed (goal <= 1.02);
#  - the journal's per-record append cost in one process (journal_bench).
#   bash bench/journal_growth.sh [SHORT=100] [LONG=10000] [RANKS=1] [REPS=5] [STEPS=2000]
#   BIN=/tmp/dir bash bench/journal_growth.sh ...   # binaries copied there, no build
# SNAPSHOTS=1 adds an arm with boundary snapshots at their default (auto).
set -euo pipefail
cd "$(dirname "$0")/.."
short="${1:-100}"; long="${2:-10000}"; ranks="${3:-1}"; reps="${4:-5}"; steps="${5:-2000}"
warm=200
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
if [ -n "${BIN:-}" ]; then
  # BIN=dir: binaries copied there before (flat: revenant-run, revenant-agent, ...;
  # revenant-agent-testing for REVENANT_JOURNAL_TIMING, which revenant-run picks).
  cp -L "$BIN"/{revenant-run,revenant-agent,revenant-agent-testing,librevenant_shim.so,train_mlp.bin,libtrain_mlp_host_kernels.so,journal_bench} "$tmp/"
else
  bazel build //tools:revenant-run //agent:revenant-agent //agent:revenant-agent-testing \
    //shim:librevenant_shim.so //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels //journal:journal_bench \
    >"$tmp/build.log" 2>&1 || { tail -30 "$tmp/build.log"; exit 1; }
  B="$(bazel info bazel-bin 2>/dev/null)"
  # Private copies: bazel-bin may be rewritten by other builds while this runs.
  cp -L "$B/tools/revenant-run" "$B/agent/revenant-agent" "$B/agent/revenant-agent-testing" \
    "$B/shim/librevenant_shim.so" "$B/tests/apps/train_mlp.bin" "$B/tests/apps/libtrain_mlp_host_kernels.so" \
    "$B/journal/journal_bench" "$tmp/"
fi
echo "machine: $(nproc) cores, $(uname -m), load $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD 2>/dev/null || echo ?)"
# The journal alone: boundary snapshots (docs/recovery.md), which only run
# with the journal, are off in both arms; SNAPSHOTS=1 adds a third arm with
# them at their default (auto) to show their cost separately.
run() {  # iters journal -> prints the journal's bytes at exit (setup + minibatch)
  "$tmp/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 --journal="$2" \
    --snapshots=off --host_kernels="$tmp/libtrain_mlp_host_kernels.so" -- "$tmp/train_mlp.bin" \
    --iters "$1" --hidden 64 --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  local bytes=$(sed -n 's/.*\[a0\].*journal at exit: setup \([0-9]*\) bytes.*minibatch \([0-9]*\) bytes.*/\1 \2/p' "$tmp/log" | awk '{print $1 + $2}')
  echo "${bytes:-0}"
}
b_short=$(run "$short" true)
# The long run also reports the executor's time inside the journal (the
# agent's REVENANT_JOURNAL_TIMING=1; not a timed run).
export REVENANT_JOURNAL_TIMING=1
b_long=$(run "$long" true)
unset REVENANT_JOURNAL_TIMING
jt_ms=$(sed -n 's/.*\[a0\].*journal time at exit: \([0-9.]*\) ms in \([0-9]*\) calls.*/\1 \2/p' "$tmp/log")
echo "journal bytes after $short iterations: $b_short"
echo "journal bytes after $long iterations: $b_long"
awk -v a="$b_long" -v b="$b_short" 'BEGIN { printf "size ratio (%s / %s iterations): %.3f (goal <= 1.1)\n", "'"$long"'", "'"$short"'", a / b }'
[ -n "$jt_ms" ] && echo "$jt_ms" | awk -v n="$long" '{ printf "executor time in the journal (%d iterations): %.1f ms in %d calls, %.2f us per call, %.1f us per step\n", n, $1, $2, $1 * 1e3 / $2, $1 * 1e3 / n }'

extra=""; [ -n "${SNAPSHOTS:-}" ] && extra="snap --snapshots=auto"
# The step benchmark passes --journal=true/false itself; snapshots off in both.
EXTRA_ARM="$extra" bash bench/journal_step.sh "$reps" "$steps" "$warm" \
  "$tmp/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 --snapshots=off \
  --host_kernels="$tmp/libtrain_mlp_host_kernels.so" -- "$tmp/train_mlp.bin" --hidden 64 --batch 8 \
  | grep -v "^  revenant-run\|^  application"
echo "per-record append cost (journal_bench, one process; mapped logs, then write(2) logs):"
for i in 1 2 3; do
  "$tmp/journal_bench" --launches | grep RESULT | sed 's/^/  mapped   /'
  "$tmp/journal_bench" --launches --write | grep RESULT | sed 's/^/  write(2) /'
done
