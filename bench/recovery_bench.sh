#!/bin/bash
# Recovery time of the training job on the host backend: kill -> the
# application resumes (from the job's events), for two model sizes and two
# kill points, to show it does not grow with the iteration count (the journal
# holds the setup state and one minibatch, not history).
#   bash bench/recovery_bench.sh [RANKS=2] [EARLY=100] [LATE=10000] [SPARES=0] [FLAGS]
# SPARES=1: revenant-run --spares 1 (the replacement is a pre-started spare
# agent, not a new process); with SPARES=0 the replacement starts at the
# death (--warm_replacement), or, with FLAGS=--warm_replacement=false, as a
# new process after the death window. FLAGS: more revenant-run flags. RANKS=1: the lone rank is recovered from its
# boundary snapshot; the snapshot cost per boundary is printed too.
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-2}"; early="${2:-100}"; late="${3:-10000}"; spares="${4:-0}"; flags="${5:-}"
bazel build //tools:revenant-run //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels >/dev/null 2>&1
B="$(bazel info bazel-bin 2>/dev/null)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
# Private copies: bazel-bin is rewritten by other builds.
mkdir -p "$tmp/bin"
# revenant-agent-testing: the --chaos kills (revenant-run picks it).
cp "$B/tools/revenant-run" "$B/agent/revenant-agent" "$B/agent/revenant-agent-testing" \
  "$B/shim/librevenant_shim.so" "$B/tests/apps/train_mlp.bin" "$B/tests/apps/libtrain_mlp_host_kernels.so" "$tmp/bin/"
victim=$(( ranks > 1 ? 1 : 0 ))
echo "ranks=$ranks spares=$spares ${flags:+flags $flags }host backend; recovery = agent killed -> application resumed (ms)"
# ready_ms: replacement started (or spare assigned) -> it took the rank's
# connection back (backend up, listening, handshake done).
printf "%-7s %-8s %-12s %-9s %-12s %-36s %-24s %s\n" hidden kill_at recovery_ms ready_ms path \
  replay snapshot_per_boundary final_checksum
for hidden in 64 512; do
  for at in "$early" "$late"; do
    ev="$tmp/events-$hidden-$at.jsonl"
    "$tmp/bin/revenant-run" -n "$ranks" --spares "$spares" $flags --backend=host --quiet --timeout=3600 \
      --host_kernels="$tmp/bin/libtrain_mlp_host_kernels.so" --events_file="$ev" \
      --chaos="rank=$victim,minibatch=$at,calls=8" -- "$tmp/bin/train_mlp.bin" \
      --iters $((at + 3)) --hidden "$hidden" --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    died=$(grep '"agent_died"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    resumed=$(grep '"application_resumed"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    started=$(grep '"replacement_started"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    ready=$(grep '"replacement_replay_started"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    replayed=$(grep '"replacement_replay_done"' "$ev" | head -1 | sed 's/.*"detail":"\([^"]*\)".*/\1/')
    path=$(grep '"replacement_started"' "$ev" | head -1 | sed 's/.*"detail":"\([a-z ]*\),.*/\1/')
    snap=$(grep -o "snapshots at exit: .*" "$tmp/log" | head -1 |
           sed 's/snapshots at exit: [0-9]* boundaries, \([0-9.]*\) MiB per boundary, \([0-9.]*\) ms mean.*/\1 MiB, \2 ms/' || true)
    sum=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/log")
    printf "%-7s %-8s %-12s %-9s %-12s %-36s %-24s %s\n" "$hidden" "$at" \
      "$(( (resumed - died) / 1000 ))" "$(( (ready - started) / 1000 ))" "$path" "$replayed" \
      "${snap:--}" "$sum"
  done
done
if [ "$ranks" -eq 1 ]; then
  # What snapshots cost a fault-free run: wall time with them on vs off, the
  # fastest of 3 runs each (the VM's noise is large).
  echo "fault-free 1-rank run, $late iterations: snapshots on vs off (wall ms, fastest of 3)"
  for hidden in 64 512; do
    for mode in off on; do
      best=""
      for _ in 1 2 3; do
        t0=$(date +%s%N)
        "$tmp/bin/revenant-run" -n 1 --snapshots=$mode --backend=host --quiet --timeout=3600 \
          --host_kernels="$tmp/bin/libtrain_mlp_host_kernels.so" -- "$tmp/bin/train_mlp.bin" \
          --iters "$late" --hidden "$hidden" --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
        t=$(( ($(date +%s%N) - t0) / 1000000 ))
        if [ -z "$best" ] || [ "$t" -lt "$best" ]; then best=$t; fi
      done
      eval "t_$mode=$best"
    done
    echo "  hidden $hidden: off ${t_off} ms, on ${t_on} ms, ratio $(awk "BEGIN{printf \"%.3f\", $t_on/$t_off}")"
  done
fi
