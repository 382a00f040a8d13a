#!/bin/bash
# cuDNN's legacy API under the shim on the host backend (no cuDNN there).
#   cudnn_legacy_host_test.sh RUN APP
# 1. cudnn_legacy --descriptors (pooling, dropout, RNN, RNN data, CTC loss,
#    spatial transformer descriptors: create, set, get, destroy, bad input),
#    run natively too (the real libcudnn needs no GPU for these): every answer
#    the shim and agent give themselves equals the real library's (null
#    out-pointers, null descriptors, unknown enum values: CUDNN_STATUS_BAD_PARAM;
#    destroying null: success); setting and reading them is refused on the
#    host backend (3000); --after-destroy: destroyed and wrong-kind handles
#    and a null out-pointer answer CUDNN_STATUS_BAD_PARAM.
# 2. The same with the agent killed at several points: the replacement
#    rebuilds every descriptor from the setup log, every answer as without
#    the kill.
# 3. cudnn_legacy --refusals: every computation and query (convolutions,
#    batch norm, pooling, dropout, RNN, CTC loss, spatial transformer,
#    workspace sizes, heuristics, searches) refused with
#    CUDNN_STATUS_NOT_SUPPORTED and one log line per function,
#    cudnnGetLastErrorString saying why; bad input first gets cuDNN's code
#    (null handle, unknown algorithm, a filter passed as a tensor, a zero
#    algorithm count, an unset CTC probabilities descriptor, a destroyed
#    pooling descriptor: CUDNN_STATUS_BAD_PARAM); also across a kill.
# 4. The computation loop is refused cleanly (an exit with the reason, not a
#    hang or a crash).
set -u
run="$1"; app="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(-n 1 --backend=host --timeout=60)
failed=0
fail() { echo "FAIL: $*"; failed=1; }

# 1. Descriptors, against the real library.
"$app" --descriptors >"$tmp/native.log" 2>&1 || { cat "$tmp/native.log"; fail "cudnn_legacy --descriptors natively"; }
n=$(grep -c "^CODE " "$tmp/native.log")
[ "$n" -eq 36 ] || fail "$n native CODE lines, expected 36"
"$run" "${common[@]}" -- "$app" --descriptors --after-destroy >"$tmp/desc.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS cudnn_legacy descriptors" "$tmp/desc.log" || {
  cat "$tmp/desc.log"; fail "cudnn_legacy --descriptors under the shim: rc $rc"; }
refused=0; same=0
while read -r _ case want; do
  got="$(sed -n "s/^\[r0\] CODE $case \(-\?[0-9]*\)$/\1/p" "$tmp/desc.log")"
  if [ "$got" = 3000 ] && [ "$want" != 3000 ]; then
    refused=$((refused + 1))  # needs the library: the host backend refuses
  elif [ "$got" = "$want" ]; then
    same=$((same + 1))
  else
    fail "descriptors $case answered '$got' under the shim, '$want' natively"
  fi
done < <(grep "^CODE " "$tmp/native.log")
[ "$same" -eq 24 ] && [ "$refused" -eq 12 ] ||
  fail "descriptors: $same answers as native, $refused refused (expected 24 and 12)"
for case in pooling_set pooling_get ctc_set_v9 ctc_get_v9 spatial_set rnn_data_set rnn_set rnn_get; do
  grep -q "^\[r0\] CODE $case 3000$" "$tmp/desc.log" || fail "$case is not refused with 3000"
done
n=$(sed -n 's/^\[r0\] CODE \(pooling_destroy_twice\|pooling_set_destroyed\|rnn_data_set_destroyed\|rnn_set_pooling_as_dropout\|ctc_destroy_spatial\|pooling_get_null_out\) 2000$/x/p' "$tmp/desc.log" | wc -l)
[ "$n" -eq 6 ] || fail "descriptors: $n of 6 destroyed, wrong-kind and null-out cases answered CUDNN_STATUS_BAD_PARAM"
n=$(grep -c "cudnnSetPooling2dDescriptor: the host backend has no cuDNN" "$tmp/desc.log")
[ "$n" -eq 1 ] || fail "$n log lines for the refused cudnnSetPooling2dDescriptor calls, expected 1"
[ "$failed" -eq 0 ] && echo "ok: descriptors: $same answers as the real library's, $refused refused by the host backend"

# 2. Kills: the replacement rebuilds the descriptors from the setup log.
grep "^\[r0\] CODE " "$tmp/desc.log" >"$tmp/ref.codes"
for calls in 5 20 35; do
  log="$tmp/chaos$calls.log"
  "$run" "${common[@]}" --chaos="rank=0,calls=$calls,point=after_execute" -- \
    "$app" --descriptors --after-destroy >"$log" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] || ! grep -q "replacement agent for rank 0" "$log" || \
     ! grep -q "^\[r0\] PASS cudnn_legacy descriptors" "$log"; then
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

# 3. Computations and queries refused.
"$run" "${common[@]}" -- "$app" --refusals >"$tmp/refusals.log" 2>&1
rc=$?
[ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS cudnn_legacy refusals" "$tmp/refusals.log" || {
  cat "$tmp/refusals.log"; fail "cudnn_legacy --refusals: rc $rc"; }
while read -r case want; do
  got="$(sed -n "s/^\[r0\] CODE $case \(-\?[0-9]*\)$/\1/p" "$tmp/refusals.log")"
  [ "$got" = "$want" ] || fail "refusals $case answered '$got', expected $want"
done <<'CODES'
conv_forward 3000
conv_backward_data 3000
conv_backward_filter 3000
conv_bias_activation 3000
batchnorm_training 3000
batchnorm_backward 3000
batchnorm_inference 3000
pooling_forward 3000
dropout_forward 3000
rnn_forward 3000
rnn_backward_data 3000
rnn_backward_weights 3000
ctc_loss_v8 3000
spatial_grid_forward 3000
spatial_grid_backward 3000
spatial_sampler_forward 3000
spatial_sampler_backward 3000
conv_forward_workspace 3000
conv_forward_v7 3000
conv_forward_find 3000
dropout_states_size 3000
dropout_set 3000
rnn_weight_space_size 3000
rnn_temp_space_sizes 3000
rnn_weight_params 3000
ctc_workspace_v8 3000
batchnorm_reserve_size 3000
conv_forward_null_handle 2000
conv_forward_unknown_algo 2000
conv_forward_filter_as_tensor 2000
conv_forward_v7_zero_count 2000
ctc_loss_unset_probs 2000
pooling_forward_destroyed 2000
CODES
n=$(grep -c "^\[r0\] CODE " "$tmp/refusals.log")
[ "$n" -eq 33 ] || fail "$n refusal CODE lines, expected 33"
n=$(grep -c "cudnnConvolutionForward: the host backend has no cuDNN" "$tmp/refusals.log")
[ "$n" -eq 1 ] || fail "$n log lines for the refused cudnnConvolutionForward, expected 1"
grep -q "^\[r0\] last error string: cudnnGetBatchNormalizationTrainingExReserveSpaceSize: the host backend has no cuDNN" \
  "$tmp/refusals.log" || fail "cudnnGetLastErrorString does not say why"
grep "^\[r0\] CODE " "$tmp/refusals.log" >"$tmp/ref.codes"
log="$tmp/refusals.chaos.log"
"$run" "${common[@]}" --chaos="rank=0,calls=30,point=after_execute" -- "$app" --refusals >"$log" 2>&1
rc=$?
grep "^\[r0\] CODE " "$log" >"$tmp/got.codes"
if [ "$rc" -eq 0 ] && grep -q "replacement agent for rank 0" "$log" && ! grep -q "diverged" "$log" &&
   diff "$tmp/ref.codes" "$tmp/got.codes" >/dev/null; then
  echo "ok: refusals answered the same across a kill"
else
  cat "$log"; fail "refusals with a kill after 30 calls: rc $rc"
fi
[ "$failed" -eq 0 ] && echo "ok: computations and queries refused with the reason, bad input with cuDNN's codes"

# 4. The computation loop: refused with the reason.
timeout 90 "$run" "${common[@]}" -- "$app" >"$tmp/loop.log" 2>&1
rc=$?
if [ "$rc" -eq 1 ] && grep -q "CUDNN_STATUS_NOT_SUPPORTED.*the host backend has no cuDNN" "$tmp/loop.log"; then
  echo "ok: the computation loop is refused with the reason"
else
  cat "$tmp/loop.log"; fail "the loop on the host backend: rc $rc, expected 1 with the reason"
fi

[ "$failed" -eq 0 ] && echo PASS
exit "$failed"
