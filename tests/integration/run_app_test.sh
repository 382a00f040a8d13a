#!/bin/bash
# Runs one CUDA test program under revenant-run (host backend) and expects
# it to pass: exit status 0 and its "PASS <name>" line.
set -u
run="$1"; app="$2"; kernels="$3"; name="$4"
out="$(mktemp)"
"$run" -n 1 --backend=host --timeout=120 --host_kernels="$kernels" -- "$app" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$rc" -ne 0 ]; then echo "FAIL: $name exited with $rc under revenant-run"; exit 1; fi
if ! grep -q "^\[r0\] PASS $name" "$out"; then echo "FAIL: no 'PASS $name' line"; exit 1; fi
echo "ok: $name passes under the shim (host backend)"
