#!/bin/bash
# The application process under the shim never maps libcuda.
set -u
run="$1"; probe="$2"; kernels="$3"
out="$(mktemp)"
"$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" -- "$probe" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: probe exited with $rc"; exit 1; }
grep -q "^\[r0\] libcuda mapped: no" "$out" || { echo "FAIL: libcuda was loaded in the application"; exit 1; }
echo "ok: libcuda never loaded in the application process"
