# GPU section "chaos" (only for MODE chaos: it takes most of a device call):
# the seeded random recovery trials of scripts/chaos.sh on the H200 — the
# 4-rank training job on the one GPU over real NCCL (an NCCL_HOSTID per rank,
# NCCL_ALGO=Ring NCCL_PROTO=Simple for bitwise-equal reductions), each trial
# killing one or two agents at a random request and crash point (mid
# all-reduce among them), sometimes a second one during the first one's
# recovery, and checking every rank's final parameters against a fault-free
# run. Sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS and record.
#   CHAOS_TRIALS (34)  trials per batch
#   CHAOS_SEEDS ("20261203 20261204 20261205")  one batch per seed, side by side
#                      (each batch is its own 4-rank job at a time)
#   CHAOS_ITERS (12)   iterations of the job
#   CHAOS_MODE (random) random_host_fn: the job with a host function ending
#                      each iteration (scripts/chaos.sh's MODE)
# Each batch prints its seed, one line per trial and a summary line (trials,
# hangs, mismatches, median and max recovery time); the batches' logs are
# $LOGS/chaos.SEED.log.
if [ "$MODE" = chaos ]; then
  echo; echo "=== chaos: seeded random kills, 4 ranks on one GPU over real NCCL"
  export NCCL_NVLS_ENABLE=0 NCCL_ALGO=Ring NCCL_PROTO=Simple
  export REVENANT_COLLECTIVE_TIMEOUT_S=30
  trials=${CHAOS_TRIALS:-34}; iters=${CHAOS_ITERS:-12}
  seeds=${CHAOS_SEEDS:-"20261203 20261204 20261205"}
  echo "   seeds: $seeds; $trials trials each; $iters iterations; batches side by side"
  pids=()
  for seed in $seeds; do
    RECOVERY_TEST_BACKEND_ARGS="--shim=$G/librevenant_shim.so --backend=cuda --collectives=nccl --gpus=1" \
      bash "$G/recovery_train_test.sh" "$G/revenant-run" "$G/apps/train_mlp.bin" none 4 "$iters" "${CHAOS_MODE:-random}" \
      "$trials" "$seed" >"$LOGS/chaos.$seed.log" 2>&1 &
    pids+=($!)
  done
  i=0
  for seed in $seeds; do
    wait "${pids[$i]}"; rc=$?; i=$((i + 1))
    grep -E "^(seed=|fault-free|summary)" "$LOGS/chaos.$seed.log" | sed 's/^/   /'
    grep -E "^FAIL" "$LOGS/chaos.$seed.log" | head -5 | sed 's/^/   /'
    if [ $rc -eq 0 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "chaos: seed $seed, $trials trials" "$s" "$LOGS/chaos.$seed.log"
  done
fi
