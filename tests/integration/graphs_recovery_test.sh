#!/bin/bash
# tests/apps/graphs on the host backend with its agent killed at requests
# 40..48 (the explicit graph with a host node: built, launched twice, then
# the stream synchronize that must see both host-node runs) and 66 (after
# the graph memory nodes). Each run must pass and must have recovered: a
# replayed host node must have run, in the application, before the reply
# that follows it (the synchronize) reaches the application.
set -u
run="$1"; app="$2"; kernels="$3"
fail=0
for calls in 40 41 42 43 44 45 46 47 48 66; do
  out="$(mktemp)"
  timeout 150 "$run" --recover --chaos="rank=0,calls=$calls" -n 1 --backend=host --timeout=120 \
    --host_kernels="$kernels" -- "$app" >"$out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS graphs" "$out" && grep -q "recovered: replayed" "$out"; then
    echo "ok: killed at request $calls, recovered, PASS"
  else
    echo "FAIL: killed at request $calls (rc=$rc)"
    grep -E "FAIL|ERROR|chaos|recovered" "$out" | head -8 | sed 's/^/  | /'
    fail=1
  fi
  rm -f "$out"
done
[ $fail -eq 0 ] && echo "PASS graphs_recovery_test"
exit $fail
