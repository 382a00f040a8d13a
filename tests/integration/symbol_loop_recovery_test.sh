#!/bin/bash
# symbol_loop (host backend) with its agent killed in minibatches that
# follow the last write of its __device__ variable by one to three steps:
# the job must pass with the exact result, recovered by a replacement.
set -u
run="$1"; app="$2"; kernels="$3"
fails=0
# Minibatches 6, 7, 10, 15: the variable was last set 1 to 3 steps before.
for spec in 6:3 7:2 10:2 15:3; do
  mb=${spec%%:*}; calls=${spec##*:}
  out="$(mktemp)"
  timeout 120 "$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" \
    --chaos="rank=0,minibatch=$mb,calls=$calls" -- "$app" 24 >"$out" 2>&1
  rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS symbol_loop" "$out" &&
     grep -q "recovered: replayed" "$out" && grep -q "chaos: killing" "$out"; then
    echo "kill in minibatch $mb (call $calls): recovered, result exact"
  else
    echo "kill in minibatch $mb (call $calls): FAILED (rc=$rc)"; grep -v hostkernel "$out" | tail -30
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ]
