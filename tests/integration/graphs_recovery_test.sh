#!/bin/bash
# tests/apps/graphs on the host backend with its agent killed at requests
# 40..48 (the explicit graph with a host node: built, launched twice, then
# the stream synchronize that must see both host-node runs) and 66 (after
# the graph memory nodes). Each run must pass and must have recovered: a
# replayed host node must have run, in the application, before the reply
# that follows it (the synchronize) reaches the application.
#   graphs_recovery_test.sh RUN APP KERNELS [random TRIALS SEED]
# random: TRIALS seeded kills instead, at a random request of the program
# (1-70: its streams, events, host functions, the captured and the explicit
# graph with its host node, the graph memory nodes) and a random crash point.
set -u
run="$1"; app="$2"; kernels="$3"
fail=0
specs=()
if [ "${4:-}" = random ]; then
  trials="${5:-20}"; seed="${6:-20261208}"
  echo "seed=$seed trials=$trials"
  RANDOM=$seed
  points=(before_append after_append after_execute after_reply)
  for t in $(seq 1 "$trials"); do
    specs+=("$((1 + RANDOM % 70)),point=${points[$((RANDOM % 4))]}")
  done
else
  specs=(40 41 42 43 44 45 46 47 48 66)
fi
# trial CALLS WHAT [NAME=VALUE...]: one job killed at request CALLS (the
# environment words for revenant-run in front); it must recover and pass.
trial() {
  local calls=$1 what=$2 out rc
  shift 2
  out="$(mktemp)"
  env "$@" timeout 150 "$run" --recover --chaos="rank=0,calls=$calls" -n 1 --backend=host \
    --timeout=120 --host_kernels="$kernels" -- "$app" >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS graphs" "$out" && grep -q "recovered: replayed" "$out"; then
    echo "ok: killed at request $calls$what, recovered, PASS"
  else
    echo "FAIL: killed at request $calls$what (rc=$rc)"
    grep -E "FAIL|ERROR|chaos|recovered" "$out" | head -8 | sed 's/^/  | /'
    fail=1
  fi
  rm -f "$out"
}
for calls in "${specs[@]}"; do trial "$calls" ""; done
# A host node the replay ran while it was still going (the replacement ends
# its replay 200 ms late), slow in the application (300 ms): the stream
# synchronize after the launch must still return only once it ran.
if [ "${4:-}" != random ]; then
  trial 46 ", a replayed host node slow to run" REVENANT_REPLAY_END_DELAY_MS=200 \
    GRAPHS_HOST_NODE_SLEEP_MS=300
fi
[ $fail -eq 0 ] && echo "PASS graphs_recovery_test"
exit $fail
