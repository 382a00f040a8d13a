#!/bin/bash
# Journal size and cost on the training job (host backend):
#  - journal bytes at the end of a run of SHORT and of LONG iterations (the
#    journal must not grow with the number of iterations: goal ratio <= 1.1);
#  - step time with the journal on vs off, measured in the same run: REPS
#    interleaved repetitions of each, step time = (wall(STEPS) - wall(WARM)) /
#    (STEPS - WARM) so that start-up and teardown cancel; median printed
#    (goal ratio <= 1.02);
#  - CPU time per step (user + system, all processes of the job): less
#    sensitive than wall time to other load on the machine;
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
# The journal alone: boundary snapshots (docs/recovery.md), which only run
# with the journal, are off in both arms; SNAPSHOTS=1 adds a third arm with
# them at their default (auto) to show their cost separately.
run() {  # iters journal [snapshots] -> prints "<journal bytes> <wall ns> <cpu ns>"
  local start=$(date +%s%N)
  /usr/bin/time -o "$tmp/time" -f "%U %S" \
    "$tmp/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 --journal="$2" \
    --snapshots="${3:-off}" \
    --host_kernels="$tmp/libtrain_mlp_host_kernels.so" -- "$tmp/train_mlp.bin" \
    --iters "$1" --hidden 64 --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
  local ns=$(( $(date +%s%N) - start ))
  local cpu=$(awk '{ printf "%d", ($1 + $2) * 1e9 }' "$tmp/time")
  local bytes=$(sed -n 's/.*\[a0\].*journal at exit: setup \([0-9]*\) bytes.*minibatch \([0-9]*\) bytes.*/\1 \2/p' "$tmp/log" | awk '{print $1 + $2}')
  echo "${bytes:-0} $ns $cpu"
}
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
read b_short _ < <(run "$short" true)
# The long run also reports the executor's time inside the journal (the
# agent's REVENANT_JOURNAL_TIMING=1; not a timed run).
export REVENANT_JOURNAL_TIMING=1
read b_long _ < <(run "$long" true)
unset REVENANT_JOURNAL_TIMING
jt_ms=$(sed -n 's/.*\[a0\].*journal time at exit: \([0-9.]*\) ms in \([0-9]*\) calls.*/\1 \2/p' "$tmp/log")
echo "journal bytes after $short iterations: $b_short"
echo "journal bytes after $long iterations: $b_long"
awk -v a="$b_long" -v b="$b_short" 'BEGIN { printf "size ratio (%s / %s iterations): %.3f (goal <= 1.1)\n", "'"$long"'", "'"$short"'", a / b }'
[ -n "$jt_ms" ] && echo "$jt_ms" | awk -v n="$long" '{ printf "executor time in the journal (%d iterations): %.1f ms in %d calls, %.2f us per call, %.1f us per step\n", n, $1, $2, $1 * 1e3 / $2, $1 * 1e3 / n }'

: >"$tmp/on"; : >"$tmp/off"; : >"$tmp/ratio"; : >"$tmp/cpu_ratio"; : >"$tmp/snap"
arms="on off"; [ -n "${SNAPSHOTS:-}" ] && arms="on off snap"
for r in $(seq "$reps"); do
  # Alternate the order so that drifting load does not favour one side.
  if (( r % 2 )); then order="$arms"; else order="$(echo $arms | tr ' ' '\n' | tac | tr '\n' ' ')"; fi
  for arm in $order; do
    case $arm in on) j=true; sn=off;; off) j=false; sn=off;; snap) j=true; sn=auto;; esac
    read _ t0 c0 < <(run "$warm" "$j" "$sn")
    read _ t1 c1 < <(run "$steps" "$j" "$sn")
    awk -v a="$t0" -v b="$t1" -v ca="$c0" -v cb="$c1" -v n=$((steps - warm)) \
      'BEGIN { printf "%.6f %.6f\n", (b - a) / n / 1e6, (cb - ca) / n / 1e6 }' >>"$tmp/$arm"
  done
  read on con < <(tail -1 "$tmp/on"); read off coff < <(tail -1 "$tmp/off")
  awk -v on="$on" -v off="$off" 'BEGIN { printf "%.4f\n", on / off }' >>"$tmp/ratio"
  awk -v on="$con" -v off="$coff" 'BEGIN { printf "%.4f\n", on / off }' >>"$tmp/cpu_ratio"
  echo "  rep $r: step time journal on $on ms, off $off ms, ratio $(tail -1 "$tmp/ratio");" \
    "CPU per step on $con ms, off $coff ms, ratio $(tail -1 "$tmp/cpu_ratio")" \
    "$([ -s "$tmp/snap" ] && echo "; journal + snapshots $(tail -1 "$tmp/snap" | cut -d' ' -f1) ms")"
done
col() { cut -d' ' -f"$1" <"$2" | median; }
m_on=$(col 1 "$tmp/on"); m_off=$(col 1 "$tmp/off"); m_ratio=$(median <"$tmp/ratio")
echo "step time (median of $reps, $((steps - warm)) steps each): journal on $m_on ms, off $m_off ms"
echo "step time ratio journal on / off: median $m_ratio (per-rep ratios: $(tr '\n' ' ' <"$tmp/ratio")) (goal <= 1.02)"
echo "CPU time per step (all processes, median): journal on $(col 2 "$tmp/on") ms, off $(col 2 "$tmp/off") ms, ratio median $(median <"$tmp/cpu_ratio")"
[ -s "$tmp/snap" ] && echo "journal + boundary snapshots (auto): step time median $(col 1 "$tmp/snap") ms, ratio to off $(awk -v a="$(col 1 "$tmp/snap")" -v b="$m_off" 'BEGIN { printf "%.4f", a / b }')"
echo "per-record append cost (journal_bench, one process; mapped logs, then write(2) logs):"
for i in 1 2 3; do
  "$tmp/journal_bench" --launches | grep RESULT | sed 's/^/  mapped   /'
  "$tmp/journal_bench" --launches --write | grep RESULT | sed 's/^/  write(2) /'
done
