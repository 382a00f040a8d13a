#!/bin/bash
# Kills the agent of a single-rank program at seeded random requests, at
# each crash point (before the journal append, after it before executing,
# after executing), and expects every run to finish with exactly the right
# results: the replacement rebuilds the state from the journal and the ring.
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-6}"; seed="${5:-20261129}"
echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute)
fails=0
for t in $(seq 1 "$trials"); do
  calls=$((20 + RANDOM % 280))
  point=${points[$((t % 3))]}
  out="$(mktemp)"
  "$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" \
    --chaos="rank=0,calls=$calls,point=$point" -- "$app" 60 0 >"$out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS recovery_loop" "$out" && grep -q "recovered: replayed" "$out"; then
    echo "trial $t: kill at request $calls ($point): recovered, results exact ($(grep -o 'replayed [0-9]* requests.*' "$out" | head -1))"
  else
    echo "trial $t: kill at request $calls ($point): FAILED (rc=$rc)"; cat "$out"; fails=$((fails + 1))
  fi
done
echo "$((trials - fails)) of $trials trials recovered exactly"
[ "$fails" -eq 0 ]
