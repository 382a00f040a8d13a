#!/bin/bash
# The journal validator (revenant-run --validate_every=K, docs/recovery.md
# "Validator") under the host backend, N ranks:
#   - replay_unsafe (kernel reads managed memory the host rewrites every step):
#     every validated minibatch is reported on every rank (validation_failed
#     events, an ERROR line naming the allocation and first differing offset);
#   - replay_unsafe --safe (same values through a journaled copy) and
#     train_mlp: every validated minibatch passes, nothing reported;
#   - in every case the job still passes with the same final checksum as
#     without the validator (the device is left as the real run left it);
#   - the same with boundaries only from revenantMarkStep (--minibatch=manual);
#   - minibatches that create and destroy an event are skipped, not reported;
#   - --safe with 2 MiB pageable uploads per step (staged copies): silent;
#   - (2+ ranks) train_mlp with rank 1's agent killed: recovery still ends
#     bitwise equal to the fault-free run, the replacement validates too.
#
#   validator_test.sh RUN UNSAFE_APP UNSAFE_KERNELS MLP_APP MLP_KERNELS N
set -u
run="$1"; unsafe="$2"; unsafe_kernels="$3"; mlp="$4"; mlp_kernels="$5"; n="$6"
seed=20261129
iters=9
every=2
# Detected boundaries: minibatch m is iteration m (the boundary sits before
# each input upload from iteration 1 on); m = 2, 4, 6 are validated (m = 8
# has no end boundary). Marked boundaries (one per iteration, from iteration
# 0): minibatch m is iteration m - 1; m = 2, 4, 6, 8 are validated.
auto_validated=3
marked_validated=4
echo "validator test: $n rank(s), seed $seed, $iters iterations, --validate_every=$every"
# VALIDATOR_TEST_EXTRA_ARGS: further revenant-run options for the validated
# jobs (the write-behind variant: "--journal_thread=behind").
[ -n "${VALIDATOR_TEST_EXTRA_ARGS:-}" ] && echo "extra revenant-run options: $VALIDATOR_TEST_EXTRA_ARGS"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

# run_job NAME APP KERNELS VALIDATE BOUNDARIES -- ARGS: runs, checks exit 0 and
# PASS lines; sets $sum to rank 0's final checksum, leaves events in
# $tmp/NAME.events.
run_job() {
  local name="$1" app="$2" kernels="$3" validate="$4" boundaries="$5"; shift 6
  local out="$tmp/$name.out" events="$tmp/$name.events"
  local app_name; app_name="$(basename "$app" .bin)"
  : >"$events"
  REVENANT_COLLECTIVE_TIMEOUT_S=30 "$run" -n "$n" --backend=host --timeout=180 \
    --host_kernels="$kernels" --validate_every="$validate" --minibatch="$boundaries" \
    --events_file="$events" ${VALIDATOR_TEST_EXTRA_ARGS:-} \
    -- "$app" "$@" >"$out" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then cat "$out"; echo "FAIL: $name exited $rc"; exit 1; fi
  local r
  for ((r = 0; r < n; r++)); do
    if ! grep -q "^\[r$r\] PASS $app_name\$" "$out"; then
      cat "$out"; echo "FAIL: $name: rank $r printed no 'PASS $app_name'"; exit 1
    fi
  done
  sum="$(grep -o '^\[r0\] final checksum [0-9a-f]*' "$out" | awk '{print $4}')"
  if [ -z "$sum" ]; then cat "$out"; echo "FAIL: $name: no final checksum"; exit 1; fi
}

count() {  # EVENT FILE [RANK]
  if [ $# -ge 3 ]; then
    grep -c "\"event\":\"$1\",\"rank\":$3," "$2"
  else
    grep -c "\"event\":\"$1\"" "$2"
  fi
}

expect_silent() {  # NAME VALIDATED: every due minibatch passed on every rank, nothing else
  local name="$1" validated="$2" ev="$tmp/$1.events" r
  for ((r = 0; r < n; r++)); do
    local p; p="$(count validation_passed "$ev" "$r")"
    if [ "$p" -ne "$validated" ]; then
      cat "$tmp/$name.out" "$ev"
      echo "FAIL: $name: rank $r passed $p validations, expected $validated"; exit 1
    fi
  done
  for e in validation_failed validation_mismatch validation_skipped; do
    if [ "$(count "$e" "$ev")" -ne 0 ]; then
      cat "$tmp/$name.out" "$ev"; echo "FAIL: $name: unexpected $e events"; exit 1
    fi
  done
  if grep -q "does not replay" "$tmp/$name.out"; then
    cat "$tmp/$name.out"; echo "FAIL: $name: the validator reported a safe program"; exit 1
  fi
}

expect_reported() {  # NAME VALIDATED: every due minibatch failed on every rank
  local name="$1" validated="$2" ev="$tmp/$1.events" r
  for ((r = 0; r < n; r++)); do
    local f; f="$(count validation_failed "$ev" "$r")"
    if [ "$f" -ne "$validated" ]; then
      cat "$tmp/$name.out" "$ev"
      echo "FAIL: $name: rank $r reported $f failed validations, expected $validated"; exit 1
    fi
    if [ "$(count validation_passed "$ev" "$r")" -ne 0 ]; then
      cat "$ev"; echo "FAIL: $name: rank $r passed a validation"; exit 1
    fi
    if ! grep -q "^\[a$r\].*does not replay to the same state: allocation 0x[0-9a-f]* ([0-9]* bytes) differs from byte [0-9]*" "$tmp/$name.out"; then
      cat "$tmp/$name.out"; echo "FAIL: $name: no mismatch line from agent $r"; exit 1
    fi
  done
  if [ "$(count validation_mismatch "$ev")" -lt $((validated * n)) ]; then
    cat "$ev"; echo "FAIL: $name: too few validation_mismatch events"; exit 1
  fi
  echo "ok: $name reported on every rank ($(count validation_mismatch "$ev") mismatches in $((validated * n)) validations), checksum $sum as without the validator"
  grep -m1 "does not replay" "$tmp/$name.out"
}

same_sum() {  # NAME REF
  if [ "$sum" != "$2" ]; then
    echo "FAIL: $1: final checksum $sum with the validator, $2 without"; exit 1
  fi
}

# --- replay_unsafe: reported ------------------------------------------------------
run_job unsafe_ref "$unsafe" "$unsafe_kernels" 0 auto -- --iters "$iters" --seed "$seed"
ref="$sum"
unsafe_ref="$sum"
run_job unsafe "$unsafe" "$unsafe_kernels" "$every" auto -- --iters "$iters" --seed "$seed"
same_sum unsafe "$ref"
expect_reported unsafe "$auto_validated"
run_job unsafe_marked "$unsafe" "$unsafe_kernels" "$every" manual -- \
  --iters "$iters" --seed "$seed" --mark_steps
same_sum unsafe_marked "$ref"
expect_reported unsafe_marked "$marked_validated"

# --- replay_unsafe --safe: silent ---------------------------------------------------
run_job safe_ref "$unsafe" "$unsafe_kernels" 0 auto -- --iters "$iters" --seed "$seed" --safe
ref="$sum"
run_job safe "$unsafe" "$unsafe_kernels" "$every" auto -- --iters "$iters" --seed "$seed" --safe
same_sum safe "$ref"
expect_silent safe "$auto_validated"
echo "ok: replay_unsafe --safe: $auto_validated validations passed per rank, checksum $sum"
run_job safe_marked "$unsafe" "$unsafe_kernels" "$every" manual -- \
  --iters "$iters" --seed "$seed" --safe --mark_steps
same_sum safe_marked "$ref"
expect_silent safe_marked "$marked_validated"
echo "ok: replay_unsafe --safe --mark_steps: $marked_validated validations passed per rank"
# 2 MiB uploads from pageable memory go through the staging area, which the
# application reuses: the journal keeps their bytes (the validator found they
# were replayed from whatever the staging area held).
run_job safe_big "$unsafe" "$unsafe_kernels" "$every" auto -- \
  --iters "$iters" --seed "$seed" --safe --big_pageable
same_sum safe_big "$ref"
expect_silent safe_big "$auto_validated"
echo "ok: replay_unsafe --safe --big_pageable: $auto_validated validations passed per rank"

# --- state-class requests inside the minibatch: skipped, never misreported ------------
run_job events "$unsafe" "$unsafe_kernels" "$every" auto -- \
  --iters "$iters" --seed "$seed" --event_each_step
same_sum events "$unsafe_ref"
ev="$tmp/events.events"
for ((r = 0; r < n; r++)); do
  k="$(count validation_skipped "$ev" "$r")"
  if [ "$k" -ne "$auto_validated" ] || [ "$(count validation_failed "$ev" "$r")" -ne 0 ] ||
     [ "$(count validation_passed "$ev" "$r")" -ne 0 ]; then
    cat "$tmp/events.out" "$ev"
    echo "FAIL: events: rank $r skipped $k of $auto_validated validations"; exit 1
  fi
done
if ! grep -q "state-class requests (cudaEvent" "$ev"; then
  cat "$ev"; echo "FAIL: events: the skip does not say why"; exit 1
fi
echo "ok: minibatches with state-class requests skipped ($(count validation_skipped "$ev") events)"

# --- train_mlp: silent ----------------------------------------------------------------
run_job mlp_ref "$mlp" "$mlp_kernels" 0 auto -- --iters "$iters" --hidden 64 --batch 16
ref="$sum"
run_job mlp "$mlp" "$mlp_kernels" "$every" auto -- --iters "$iters" --hidden 64 --batch 16
same_sum train_mlp "$ref"
expect_silent mlp "$auto_validated"
echo "ok: train_mlp: $auto_validated validations passed per rank, checksum $sum"
grep "validation_passed" "$tmp/mlp.events" | head -2

# --- with recovery: rank 1's agent killed in minibatch 4 (validated: 3, 6, 9) ---------
if [ "$n" -ge 2 ]; then
  run_job mlp_kill_ref "$mlp" "$mlp_kernels" 0 auto -- --iters 12 --hidden 64 --batch 16
  ref="$sum"
  out="$tmp/mlp_kill.out" ev="$tmp/mlp_kill.events"
  REVENANT_COLLECTIVE_TIMEOUT_S=30 "$run" -n "$n" --backend=host --timeout=180 \
    --host_kernels="$mlp_kernels" --validate_every=3 --chaos=rank=1,minibatch=4,calls=10 \
    --events_file="$ev" -- "$mlp" --iters 12 --hidden 64 --batch 16 >"$out" 2>&1 ||
    { cat "$out"; echo "FAIL: mlp_kill exited non-zero"; exit 1; }
  sums="$(grep -o '^\[r[0-9]*\] final checksum [0-9a-f]*' "$out" | awk '{print $4}' | sort -u)"
  if [ "$sums" != "$ref" ] || [ "$(count replacement_replay_done "$ev")" -lt 1 ]; then
    cat "$out" "$ev"; echo "FAIL: mlp_kill: checksums '$sums' (want $ref) or no recovery"; exit 1
  fi
  for ((r = 0; r < n; r++)); do
    if [ "$(count validation_passed "$ev" "$r")" -ne 3 ]; then
      cat "$out" "$ev"; echo "FAIL: mlp_kill: rank $r did not pass 3 validations"; exit 1
    fi
  done
  for e in validation_failed validation_mismatch validation_skipped; do
    if [ "$(count "$e" "$ev")" -ne 0 ]; then cat "$ev"; echo "FAIL: mlp_kill: $e"; exit 1; fi
  done
  echo "ok: train_mlp with rank 1's agent killed: recovered, checksum $ref, 3 validations passed per rank"
fi
echo "PASS validator_test ($n rank(s))"
