#!/bin/bash
# runtime_names under agent kills (host backend). Killed before the program
# calls cudaGetSymbolAddress, the replacement replays the journal -- copies
# to and from __device__ variables name the variable, so they find it in
# the replacement's module -- and the program passes. Killed after it, the
# replacement has the variable at another address than the one the program
# holds: the recovery must refuse, loudly and at once, never run a kernel on
# the stale address.
set -u
run="$1"; app="$2"; kernels="$3"
fails=0
once() {  # calls point out
  timeout 120 "$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" \
    --chaos="rank=0,calls=$1,point=$2" -- "$app" >"$3" 2>&1
}
# Kill points: amid the symbol copies (sync and async), after the
# cudaLaunchKernelExC launches, after the graph launches and pool calls.
for spec in 12:after_append 25:after_execute 43:before_append 79:after_execute 90:after_append; do
  calls=${spec%%:*}; point=${spec##*:}
  out="$(mktemp)"
  once "$calls" "$point" "$out"; rc=$?
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS runtime_names" "$out" &&
     grep -q "recovered: replayed" "$out"; then
    echo "kill at request $calls ($point): recovered ($(grep -o 'replayed [0-9]* requests' "$out" | head -1))"
  else
    echo "kill at request $calls ($point): FAILED (rc=$rc)"; grep -v hostkernel "$out" | tail -40
    fails=$((fails + 1))
  fi
done
# The request that resolves the address (the program's last
# __cudaRegisterVar), from a diagnostic run; the kill comes two later.
out="$(mktemp)"
REVENANT_DIAGNOSTICS=1 timeout 120 "$run" -n 1 --backend=host --timeout=60 \
  --host_kernels="$kernels" -- "$app" >"$out" 2>&1
at=$(grep -o "submit seq [0-9]* __cudaRegisterVar" "$out" | tail -1 | awk '{print $3}')
if [ -z "$at" ]; then echo "no __cudaRegisterVar in the diagnostic run"; exit 1; fi
kill_at=$((at + 2))
once "$kill_at" after_execute "$out"; rc=$?
if [ "$rc" -ne 0 ] && ! grep -q "PASS runtime_names" "$out" &&
   grep -q "cannot be recovered past that call" "$out" && ! grep -q "signal 11" "$out"; then
  echo "kill at request $kill_at, after cudaGetSymbolAddress (request $at): recovery refused as expected"
else
  echo "kill at request $kill_at: expected a refused recovery (rc=$rc)"; grep -v hostkernel "$out" | tail -40
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
