#!/bin/bash
# Runs one CUDA test program under revenant-run (host backend) and expects
# it to pass: exit status 0 and its "PASS <name>" line.
#   run_app_test.sh REVENANT_RUN APP KERNELS NAME [APP ARGS...]
set -u
run="$1"; app="$2"; kernels="$3"; name="$4"
out="$(mktemp)"
# RUN_APP_TEST_EXTRA_ARGS: further revenant-run options; RUN_APP_TEST_EXPECT:
# an extended regular expression the output must also match.
extra=()
[ -n "${RUN_APP_TEST_EXTRA_ARGS:-}" ] && read -r -a extra <<<"$RUN_APP_TEST_EXTRA_ARGS"
# TEST_RUN_PREFIX: a command revenant-run runs under ("setarch -R").
prefix=()
[ -n "${TEST_RUN_PREFIX:-}" ] && read -r -a prefix <<<"$TEST_RUN_PREFIX"
# KERNELS "none": a program without kernels of its own.
kernel_args=(--host_kernels="$kernels")
[ "$kernels" = none ] && kernel_args=()
"${prefix[@]}" "$run" -n 1 --backend=host --timeout=120 "${kernel_args[@]}" "${extra[@]}" -- "$app" "${@:5}" >"$out" 2>&1
rc=$?
grep -v "revenant hostkernel" "$out" | tail -200
if [ "$rc" -ne 0 ]; then echo "FAIL: $name exited with $rc under revenant-run"; exit 1; fi
if ! grep -q "^\[r0\] PASS $name" "$out"; then echo "FAIL: no 'PASS $name' line"; exit 1; fi
if [ -n "${RUN_APP_TEST_EXPECT:-}" ] && ! grep -Eq "$RUN_APP_TEST_EXPECT" "$out"; then
  echo "FAIL: the output does not match '$RUN_APP_TEST_EXPECT'"; exit 1
fi
echo "ok: $name passes under the shim (host backend)"
