#!/bin/bash
# Recovery time of the data-parallel training job on the host backend:
# kill -> the application resumes (from the job's events), for two model
# sizes and two kill points, to show it does not grow with the iteration
# count (the journal holds the setup state and one minibatch, not history).
#   bash bench/recovery_bench.sh [RANKS=2] [EARLY=100] [LATE=10000]
set -euo pipefail
cd "$(dirname "$0")/.."
ranks="${1:-2}"; early="${2:-100}"; late="${3:-10000}"
bazel build //tools:revenant-run //tests/apps:train_mlp //tests/apps:train_mlp_host_kernels >/dev/null 2>&1
B="$(bazel info bazel-bin 2>/dev/null)"
tmp="$(mktemp -d)"; trap 'rm -rf "$tmp"' EXIT
echo "ranks=$ranks host backend; recovery = agent killed -> application resumed (ms)"
printf "%-8s %-10s %-12s %-36s %s\n" hidden kill_at recovery_ms replay final_checksum
for hidden in 64 512; do
  for at in "$early" "$late"; do
    ev="$tmp/events-$hidden-$at.jsonl"
    "$B/tools/revenant-run" -n "$ranks" --backend=host --quiet --timeout=3600 \
      --host_kernels="$B/tests/apps/libtrain_mlp_host_kernels.so" --events_file="$ev" \
      --chaos="rank=1,minibatch=$at,calls=8" -- "$B/tests/apps/train_mlp.bin" \
      --iters $((at + 3)) --hidden "$hidden" --batch 8 >"$tmp/log" 2>&1 || { cat "$tmp/log"; exit 1; }
    died=$(grep '"agent_died"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    resumed=$(grep '"application_resumed"' "$ev" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/')
    replayed=$(grep '"replacement_replay_done"' "$ev" | head -1 | sed 's/.*"detail":"\([^"]*\)".*/\1/')
    sum=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/log")
    printf "%-8s %-10s %-12s %-36s %s\n" "$hidden" "$at" "$(( (resumed - died) / 1000 ))" \
      "$replayed" "$sum"
  done
done
