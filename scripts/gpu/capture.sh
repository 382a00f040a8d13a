# GPU section: uploads journaled by the device (agent/upload_capture.h;
# docs/journal_format.md, "Captured uploads"). Sourced by .gpu/run_gpu.sh
# with MODE, G, RUN, LOGS and the helpers; runs for MODE "all" or "capture".
# 1. train_mlp with a 16 MiB pinned input per step (--batch 65536), 1 rank
#    over real NCCL: native and under the shim with --upload_hold=false,
#    final checksums equal, and the agent says its uploads were captured by
#    the device.
# 2. The same job with its agent killed mid-step in minibatch 4 and at the
#    input upload itself (the 1-rank recovery from the boundary snapshot and
#    the journal): checksums equal to native, the replay read captures.
# 3. 4 ranks on the one GPU over the Gloo staging (--batch 4096, 1 MiB per
#    step): the recovery suite's named kills and 12 seeded random kills
#    (tests/integration/recovery_train_test.sh), every run bitwise equal.
# 4. Held uploads (the default; also alone: MODE "hold"): 1 and 2 again
#    with the uploads held instead of captured; the agent must say they were
#    held, hashed by the device and none found changed (the device's hash
#    equals the CPU's at every copy out); then
#    80 MiB a step (every upload copied and hashed in pieces), fault-free
#    and killed at an upload's execution, equal to native; then
#    tests/integration/recovery_hold_changed_test.sh on the GPU (a kernel
#    changing a held source through a pointer in device memory: found at
#    the copy out, captured from then on, a replay needing it refused).
if [ "$MODE" = all ] || [ "$MODE" = capture ]; then
  echo; echo "=== captured uploads (the device journals large uploads)"
  nlog="$LOGS/capture.native.log"; rlog="$LOGS/capture.cuda.log"
  native 1 "$nlog" "$G/apps/train_mlp.bin" --iters 24 --batch 65536; rc=$?
  if [ $rc -eq 0 ] && grep -q 'PASS train_mlp' "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "capture: train_mlp 16 MiB/step native" "$s" "$nlog"
  ref=$(checksum "$nlog")
  timeout 200 $RUN -n 1 --backend=cuda --timeout=180 --upload_hold=false -- \
    "$G/apps/train_mlp.bin" --iters 24 --batch 65536 >"$rlog" 2>&1; rc=$?
  got=$(checksum "$rlog")
  grep -E "captured uploads at exit|final checksum" "$rlog" | sed 's/^/   /'
  if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$ref" = "$got" ] &&
     grep -q "captured uploads at exit: [1-9]" "$rlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "capture: 16 MiB/step under the shim, checksum, captured" "$s" "$rlog"
  for spec in "rank=0,minibatch=4,calls=8" "rank=0,minibatch=5,calls=1,point=after_execute" \
              "rank=0,minibatch=6,calls=2,point=before_append"; do
    klog="$LOGS/capture.kill.${spec//[^a-z0-9]/_}.log"
    timeout 300 $RUN -n 1 --backend=cuda --timeout=240 --recovery_timeout=60 --upload_hold=false \
      --chaos="$spec" -- "$G/apps/train_mlp.bin" --iters 24 --batch 65536 >"$klog" 2>&1; rc=$?
    got=$(checksum "$klog")
    grep -E "captured uploads for the replay|replacement agent for rank|final checksum" "$klog" |
      head -6 | sed 's/^/   /'
    if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$ref" = "$got" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "capture: 1 rank killed [$spec]" "$s" "$klog"
  done
  for what in "scenarios" "random 12 20261203"; do
    set -- $what
    log="$LOGS/capture.suite.$1.log"
    RECOVERY_TEST_BACKEND_ARGS="--backend=cuda --collectives=gloo --gpus=1" \
    RECOVERY_TEST_APP_ARGS="--batch 4096" RECOVERY_TEST_EXPECT_CAPTURES=1 timeout 500 \
      bash "$G/recovery_train_test.sh" "$G/revenant-run" "$G/apps/train_mlp.bin" none 4 12 "$@" \
      >"$log" 2>&1; rc=$?
    grep -E "^(ok|FAIL) |^seed=|bitwise equal to the fault-free|^fault-free|captured" "$log" |
      sed 's/^/   /'
    if [ $rc -eq 0 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "capture: recovery suite, 4 ranks cuda+gloo, 1 MiB/step: $what" "$s" "$log"
  done
fi

if [ "$MODE" = all ] || [ "$MODE" = capture ] || [ "$MODE" = hold ]; then
  echo; echo "=== held uploads (the shim write-protects large uploads' sources)"
  # hold_runs NAME BATCH WHAT NEED_FAULT_FREE NEED_EVERY SPEC...: train_mlp
  # natively and under --upload_hold with each chaos SPEC (none: fault-free),
  # checksums equal to native, no source found changed; the fault-free run's
  # log must match NEED_FAULT_FREE and every run's NEED_EVERY (empty: none).
  hold_runs() {
    local name=$1 batch=$2 what=$3 need_free=$4 need_every=$5 spec nlog klog ref got rc chaos s
    shift 5
    nlog="$LOGS/$name.native.log"
    native 1 "$nlog" "$G/apps/train_mlp.bin" --iters 24 --batch "$batch"
    ref=$(checksum "$nlog")
    for spec in "$@"; do
      klog="$LOGS/$name.${spec//[^a-z0-9]/_}.log"
      chaos=(); [ "$spec" != none ] && chaos=(--chaos="$spec")
      timeout 300 $RUN -n 1 --backend=cuda --timeout=240 --recovery_timeout=60 --upload_hold \
        "${chaos[@]}" -- "$G/apps/train_mlp.bin" --iters 24 --batch "$batch" >"$klog" 2>&1; rc=$?
      got=$(checksum "$klog")
      grep -E "held uploads|captured uploads for the replay|final checksum" "$klog" |
        head -6 | cut -c1-200 | sed 's/^/   /'
      if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$ref" = "$got" ] &&
         { [ "$spec" != none ] || [ -z "$need_free" ] || grep -q "$need_free" "$klog"; } &&
         { [ -z "$need_every" ] || grep -q "$need_every" "$klog"; } &&
         ! grep -q " [1-9][0-9]* sources found changed" "$klog"; then
        s=PASS; else s="FAIL (rc=$rc)"; fi
      record "hold: train_mlp $what [$spec]" "$s" "$klog"
    done
  }
  hold_runs hold 65536 "16 MiB/step, --upload_hold" \
    "held uploads at exit: [1-9].*; [1-9][0-9]* hashed by the device, 0 sources found changed" "" \
    none "rank=0,minibatch=4,calls=8" "rank=0,minibatch=5,calls=1,point=after_execute" \
    "rank=0,minibatch=6,calls=2,point=before_append"
  # 80 MiB a step: every upload copied and hashed in pieces (64 MiB and
  # more, the default); fault-free and killed at the upload's execution.
  hold_runs hold80 327680 "80 MiB/step, hashed in pieces" "" \
    "held uploads: hashed by the device, from 64 MiB in pieces" \
    none "rank=0,minibatch=5,calls=1,point=after_execute"
  log="$LOGS/hold.changed.log"
  HOLD_TEST_BACKEND_ARGS="--backend=cuda" timeout 300 bash "$G/recovery_hold_changed_test.sh" \
    "$G/revenant-run" "$G/apps/upload_loop.bin" none >"$log" 2>&1; rc=$?
  grep -E "^(ok|FAIL)|held uploads at exit|fault-free" "$log" | cut -c1-200 | sed 's/^/   /'
  if [ $rc -eq 0 ] && grep -q "^PASS" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "hold: a held source changed by the device behind the agent (found, refused, captured after)" "$s" "$log"
fi
