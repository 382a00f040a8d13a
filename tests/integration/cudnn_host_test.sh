#!/bin/bash
# cuDNN under the shim on the host backend (no cuDNN there).
#   cudnn_host_test.sh RUN APP
# 1. cudnn_conv --errors --after-destroy: handle and descriptor lifecycle,
#    bad input answered with cuDNN 9.19's codes (bad counts, null arrays and
#    elements, unknown attribute and descriptor types, null handles and
#    descriptors; destroyed and made-up ones, also inside descriptor arrays:
#    CUDNN_STATUS_BAD_PARAM), the host backend's refusals
#    (CUDNN_STATUS_NOT_SUPPORTED, one log line per function), and the agent
#    still serving afterwards.
# 2. The same with the agent killed at several points: the replacement
#    rebuilds the handles and descriptors from the setup log (every replayed
#    call answering as it did), so every answer equals the fault-free run's.
# 3. The convolution itself is refused cleanly (an exit with the reason,
#    not a hang or a crash).
# 4. cudnn_conv --legacy (tensor, filter, convolution and activation
#    descriptors): run natively too (the real libcudnn needs no GPU for
#    these), every answer the shim and agent give themselves equals the real
#    library's; setting and reading them is refused on the host backend
#    (3000); destroyed, null and wrong-kind handles answer CUDNN_STATUS_BAD_PARAM.
set -u
run="$1"; app="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(-n 1 --backend=host --timeout=60)
failed=0
fail() { echo "FAIL: $*"; failed=1; }

"$run" "${common[@]}" -- "$app" --errors --after-destroy >"$tmp/errors.log" 2>&1
rc=$?
cat "$tmp/errors.log"
[ "$rc" -eq 0 ] || fail "cudnn_conv --errors exited with $rc"
grep -q "^\[r0\] PASS cudnn_conv errors" "$tmp/errors.log" || fail "no PASS line"
# Expected answers: cuDNN 9.19's codes (read off the real library), except
# where the host backend, having no cuDNN, refuses (3000: NOT_SUPPORTED);
# after_destroy cases are only defined under Revenant.
while read -r case want; do
  got="$(sed -n "s/^\[r0\] CODE $case \(-\?[0-9]*\)$/\1/p" "$tmp/errors.log")"
  [ "$got" = "$want" ] || fail "$case answered '$got', expected $want"
done <<'CODES'
create_null 2000
destroy_null_handle 0
set_stream_null_handle 2000
create_descriptor_unknown_type 4003
destroy_null_descriptor 2002
finalize_null_descriptor 2002
set_null_descriptor 2002
set_unknown_attribute_type 2010
set_negative_count 2000
set_wrong_attribute_type 3000
set_null_array 2000
set_null_array_zero_count 2000
set_null_element 2000
finalize_incomplete 3000
execute_null_handle 2000
set_data_type 3000
set_dims 3000
set_strides 3000
set_uid 3000
set_alignment 3000
finalize_complete 3000
finalize_twice 3000
set_after_finalize 3000
get_negative_count 2000
get_unknown_attribute_type 2010
get_wrong_attribute_type 3000
get_null_descriptor 2000
get_two_of_four 3000
get_count_only 3000
get_without_count 3000
create_descriptor_null_out 2002
get_stream_null_out 2000
destroy_twice 2000
set_destroyed 2000
get_destroyed 2000
finalize_destroyed 2000
set_destroyed_element 2000
set_made_up_descriptor 2000
get_made_up_element 2000
set_stream_destroyed_handle 2000
destroy_handle_twice 2000
execute_destroyed_plan 2000
set_handle_made_up_element 2000
CODES
n=$(grep -c "^\[r0\] CODE " "$tmp/errors.log")
[ "$n" -eq 43 ] || fail "$n CODE lines, expected 43"
n=$(grep -c "cudnnBackendSetAttribute: the host backend has no cuDNN" "$tmp/errors.log")
[ "$n" -eq 1 ] || fail "$n log lines for the refused cudnnBackendSetAttribute calls, expected 1"
grep -q "^\[r0\] last error string: cudnnBackendFinalize: the host backend has no cuDNN" \
  "$tmp/errors.log" || fail "cudnnGetLastErrorString does not say why"
[ "$failed" -eq 0 ] && echo "ok: lifecycle and bad input answered with cuDNN's codes"

grep "^\[r0\] CODE " "$tmp/errors.log" >"$tmp/ref.codes"
for calls in 6 15 30; do
  log="$tmp/chaos$calls.log"
  "$run" "${common[@]}" --chaos="rank=0,calls=$calls,point=after_execute" -- \
    "$app" --errors --after-destroy >"$log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "replacement agent for rank 0" "$log" || \
     ! grep -q "^\[r0\] PASS cudnn_conv errors" "$log"; then
    cat "$log"; fail "agent killed after $calls calls: rc $rc, no recovery or no PASS"; continue
  fi
  if grep -q "diverged" "$log"; then
    grep "diverged" "$log"; fail "the replay after a kill after $calls calls diverged"; continue
  fi
  grep "^\[r0\] CODE " "$log" >"$tmp/got.codes"
  if diff "$tmp/ref.codes" "$tmp/got.codes" >"$tmp/diff"; then
    echo "ok: agent killed after $calls calls, replaced, every answer as without the kill"
  else
    cat "$tmp/diff"; fail "answers differ after a kill after $calls calls"
  fi
done

timeout 90 "$run" "${common[@]}" -- "$app" >"$tmp/conv.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "CUDNN_STATUS_NOT_SUPPORTED.*the host backend has no cuDNN" "$tmp/conv.log"; then
  echo "ok: the convolution is refused with the reason"
else
  cat "$tmp/conv.log"; fail "the convolution on the host backend: rc $rc, expected 1 with the reason"
fi
"$app" --legacy >"$tmp/legacy.native" 2>&1 || { cat "$tmp/legacy.native"; fail "cudnn_conv --legacy natively"; }
"$run" "${common[@]}" -- "$app" --legacy --after-destroy >"$tmp/legacy.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS cudnn_conv legacy" "$tmp/legacy.log" || {
  cat "$tmp/legacy.log"; fail "cudnn_conv --legacy under the shim: rc $rc"; }
refused=0; same=0
while read -r _ case want; do
  got="$(sed -n "s/^\[r0\] CODE $case \(-\?[0-9]*\)$/\1/p" "$tmp/legacy.log")"
  if [ "$got" = 3000 ] && [ "$want" != 3000 ]; then
    refused=$((refused + 1))  # needs the library: the host backend refuses
  elif [ "$got" = "$want" ]; then
    same=$((same + 1))
  else
    fail "legacy $case answered '$got' under the shim, '$want' natively"
  fi
done < <(grep "^CODE " "$tmp/legacy.native")
# activation_set_unknown and convolution_math_unknown (enum values no mode
# names) are answered at decode, CUDNN_STATUS_BAD_PARAM as natively.
[ "$same" -eq 15 ] && [ "$refused" -eq 10 ] || fail "legacy: $same answers as native, $refused refused (expected 15 and 10)"
n=$(sed -n 's/^\[r0\] CODE \(tensor_set_null_dims\|filter_set_null_dims\|convolution_set_null_pads\|tensor_get_null_out\|tensor_destroy_twice\|tensor_set_destroyed\|tensor_set_filter\|activation_destroy_convolution\) 2000$/x/p' "$tmp/legacy.log" | wc -l)
[ "$n" -eq 8 ] || fail "legacy: $n of 8 null, destroyed and wrong-kind handles answered CUDNN_STATUS_BAD_PARAM"
[ "$failed" -eq 0 ] && echo "ok: legacy descriptors: $same answers as the real library's, $refused refused by the host backend"

[ "$failed" -eq 0 ] && echo PASS
exit "$failed"
