# GPU section "validator": the journal validator (--validate_every, docs/
# recovery.md "Validator") on the cuda backend. Sourced by .gpu/run_gpu.sh with
# MODE, G, RUN, LOGS and the helpers record, now, calc; runs for MODE "all" or
# "validator". Seed 20261129, 9 iterations, --validate_every=2 (minibatches
# 2, 4, 6 validated per rank).
#
#   1. replay_unsafe (a kernel reads managed memory the host rewrites each
#      step), 1 rank: 3 validation_failed events with mismatch lines, final
#      checksum equal to the native run's (the device is left as the real
#      run left it);
#   2. replay_unsafe --safe: 3 validation_passed, nothing reported, checksum
#      equal to native;
#   3. train_mlp 1 rank over real NCCL: every due minibatch skipped (real
#      NCCL keeps no results to replay collectives from), job PASS;
#   4. train_mlp 1 rank and replay_unsafe 2 ranks with --collectives=gloo
#      --gpus=1: passes / reports on every rank, collectives answered from
#      their first run;
#   5. cost figures (wall time with and without, mean time per validation).
# Every job is bounded (revenant-run --timeout and timeout(1)).
if [ "$MODE" = all ] || [ "$MODE" = validator ]; then
  echo
  echo "=== journal validator on the cuda backend (--validate_every=2, seed 20261129)"
  export REVENANT_COLLECTIVE_TIMEOUT_S=30
  val_seed=20261129
  val_sum() { sed -n 's/^\(\[r0\] \)\{0,1\}final checksum \([0-9a-f]*\)$/\2/p' "$1" | head -1; }
  val_count() { grep -c "\"event\":\"$1\"" "$2" 2>/dev/null; }
  # val_job NAME N EXTRA_RUN_FLAGS -- APP ARGS: a revenant-run job with the validator.
  val_job() {
    local name=$1 n=$2 extra=$3; shift 4
    local log="$LOGS/validator.$name.log" ev="$LOGS/validator.$name.events" t0 rc
    rm -f "$ev"
    t0=$(now)
    # shellcheck disable=SC2086
    timeout 200 $RUN -n "$n" --backend=cuda $extra --timeout=180 --validate_every=2 \
      --events_file="$ev" -- "$@" >"$log" 2>&1; rc=$?
    printf '   %s: rc=%s after %.1f s; passed %s, failed %s, mismatches %s, skipped %s; checksum %s\n' \
      "$name" "$rc" "$(calc "$(now) - $t0")" "$(val_count validation_passed "$ev")" \
      "$(val_count validation_failed "$ev")" "$(val_count validation_mismatch "$ev")" \
      "$(val_count validation_skipped "$ev")" "$(val_sum "$log")"
    grep -m2 -E "validator .*(E|W)\]" "$log" | sed 's/^/   | /'
    return $rc
  }

  # Native references (no Revenant).
  log="$LOGS/validator.native_unsafe.log"
  timeout 120 "$G/apps/replay_unsafe.bin" --iters 9 --seed $val_seed >"$log" 2>&1
  val_native=$(val_sum "$log")
  echo "   native replay_unsafe: checksum $val_native"

  # 1. Unsafe: reported, state left as the real run's.
  val_job unsafe 1 "" -- "$G/apps/replay_unsafe.bin" --iters 9 --seed $val_seed; rc=$?
  ev="$LOGS/validator.unsafe.events"
  if [ $rc -eq 0 ] && [ "$(val_count validation_failed "$ev")" -eq 3 ] &&
     [ "$(val_count validation_passed "$ev")" -eq 0 ] &&
     grep -q "does not replay to the same state" "$LOGS/validator.unsafe.log" &&
     [ -n "$val_native" ] && [ "$(val_sum "$LOGS/validator.unsafe.log")" = "$val_native" ]; then
    s=PASS; else
    s="FAIL (rc=$rc, checksum $(val_sum "$LOGS/validator.unsafe.log") vs native $val_native)"; fi
  record "validator: replay_unsafe reported (cuda)" "$s" "$LOGS/validator.unsafe.log"

  # 2. Safe: silent.
  log="$LOGS/validator.native_safe.log"
  timeout 120 "$G/apps/replay_unsafe.bin" --iters 9 --seed $val_seed --safe >"$log" 2>&1
  val_native_safe=$(val_sum "$log")
  val_job safe 1 "" -- "$G/apps/replay_unsafe.bin" --iters 9 --seed $val_seed --safe; rc=$?
  ev="$LOGS/validator.safe.events"
  if [ $rc -eq 0 ] && [ "$(val_count validation_passed "$ev")" -eq 3 ] &&
     [ "$(val_count validation_failed "$ev")" -eq 0 ] &&
     [ "$(val_count validation_skipped "$ev")" -eq 0 ] &&
     [ -n "$val_native_safe" ] && [ "$(val_sum "$LOGS/validator.safe.log")" = "$val_native_safe" ]; then
    s=PASS; else
    s="FAIL (rc=$rc, checksum $(val_sum "$LOGS/validator.safe.log") vs native $val_native_safe)"; fi
  record "validator: replay_unsafe --safe silent (cuda)" "$s" "$LOGS/validator.safe.log"

  # 3. Real NCCL: minibatches with collectives are skipped, the job goes on.
  val_job mlp_nccl 1 "" -- "$G/apps/train_mlp.bin" --iters 9; rc=$?
  ev="$LOGS/validator.mlp_nccl.events"
  if [ $rc -eq 0 ] && grep -q "PASS train_mlp" "$LOGS/validator.mlp_nccl.log" &&
     [ "$(val_count validation_skipped "$ev")" -eq 3 ] &&
     [ "$(val_count validation_failed "$ev")" -eq 0 ]; then
    s=PASS; else s="FAIL (rc=$rc)"; fi
  record "validator: train_mlp over NCCL skipped (cuda)" "$s" "$LOGS/validator.mlp_nccl.log"

  # 4. Gloo on the GPU: collectives answered from their first run.
  val_job mlp_gloo 1 "--collectives=gloo --gpus=1" -- "$G/apps/train_mlp.bin" --iters 9; rc=$?
  ev="$LOGS/validator.mlp_gloo.events"
  if [ $rc -eq 0 ] && grep -q "PASS train_mlp" "$LOGS/validator.mlp_gloo.log" &&
     [ "$(val_count validation_passed "$ev")" -eq 3 ] &&
     [ "$(val_count validation_failed "$ev")" -eq 0 ]; then
    s=PASS; else s="FAIL (rc=$rc)"; fi
  record "validator: train_mlp over gloo silent (cuda)" "$s" "$LOGS/validator.mlp_gloo.log"

  val_job unsafe_gloo2 2 "--collectives=gloo --gpus=1" -- \
    "$G/apps/replay_unsafe.bin" --iters 9 --seed $val_seed; rc=$?
  ev="$LOGS/validator.unsafe_gloo2.events"
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS replay_unsafe' "$LOGS/validator.unsafe_gloo2.log")" -eq 2 ] &&
     [ "$(val_count validation_failed "$ev")" -eq 6 ] &&
     [ "$(val_count validation_passed "$ev")" -eq 0 ]; then
    s=PASS; else s="FAIL (rc=$rc)"; fi
  record "validator: replay_unsafe 2 ranks gloo reported (cuda)" "$s" \
    "$LOGS/validator.unsafe_gloo2.log"

  # 5. Cost (figures for docs/recovery.md): train_mlp --hidden 1024, 60
  #    iterations, 1 rank over Gloo, without the validator and with every
  #    5th minibatch validated; wall times and the mean time per validation.
  val_cost=()
  for every in 0 5; do
    log="$LOGS/validator.cost.$every.log" ev="$LOGS/validator.cost.$every.events"
    rm -f "$ev"
    t0=$(now)
    timeout 200 $RUN -n 1 --backend=cuda --collectives=gloo --gpus=1 --timeout=180 \
      --validate_every=$every --events_file="$ev" -- "$G/apps/train_mlp.bin" --iters 60 \
      --hidden 1024 >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    ms=$(grep -o 'differ, [0-9]* ms' "$ev" 2>/dev/null |
         awk '{s += $2; n++} END {if (n) printf "%.1f ms mean over %d validations", s / n, n}')
    printf '   cost: --validate_every=%s: rc=%s, %.2f s wall %s\n' "$every" "$rc" "$el" "$ms"
    val_cost+=("$rc")
  done
  if [ "${val_cost[0]}" -eq 0 ] && [ "${val_cost[1]}" -eq 0 ] &&
     [ "$(val_count validation_passed "$LOGS/validator.cost.5.events")" -gt 0 ]; then
    s=PASS; else s="FAIL (rc ${val_cost[*]})"; fi
  record "validator: cost figures train_mlp (cuda)" "$s" "$LOGS/validator.cost.5.log"
fi
