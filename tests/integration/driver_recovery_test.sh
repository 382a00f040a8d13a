#!/bin/bash
# The driver surface under recovery (host backend): driver_api is killed at
# points spread over its driver calls -- after its driver memsets, between a
# stream wait-on-value and the write that releases it, around its PTX module
# load and the launches through cuLaunchKernel -- and each time a replacement
# agent rebuilds its state (driver allocations are cudaMalloc's, the module
# is the kernel resolution's) and the program passes with the checksum of
# the run without a kill.
set -u
run="$1"; app="$2"; kernels="$3"
out="$(mktemp)"; trap 'rm -f "$out"' EXIT
"$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" -- "$app" >"$out" 2>&1
ref=$(sed -n 's/^\[r0\] driver_api checksum=\([0-9a-f]*\)$/\1/p' "$out")
[ -n "$ref" ] && grep -q "^\[r0\] PASS driver_api" "$out" || { cat "$out"; echo "FAIL: no reference run"; exit 1; }
fails=0
for calls in 15 25 27 29 40 51 56; do
  "$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" --chaos="rank=0,calls=$calls" \
    -- "$app" >"$out" 2>&1
  rc=$?
  got=$(sed -n 's/^\[r0\] driver_api checksum=\([0-9a-f]*\)$/\1/p' "$out")
  if [ "$rc" -eq 0 ] && [ "$got" = "$ref" ] && grep -q "^\[r0\] PASS driver_api" "$out" &&
     grep -q "replacement agent for rank 0 started" "$out"; then
    echo "ok: killed after $calls calls, recovered, checksum $got"
  else
    grep -v hostkernel "$out" | tail -30
    echo "FAIL: killed after $calls calls: rc $rc, checksum '$got' (want '$ref')"
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] || exit 1
echo "ok: driver_api recovers from every kill"
