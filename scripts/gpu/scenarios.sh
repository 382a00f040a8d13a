# GPU section: the CI recovery suite on the cuda backend (sourced by
# .gpu/run_gpu.sh with MODE, G, LOGS and record; runs for MODE "all" or
# "scenarios"). tests/integration/recovery_train_test.sh with 4 ranks of
# train_mlp sharing the one GPU through Gloo staging: the seven named kill
# points of //tests/integration:recovery_train_scenarios_test, then seeded
# random kills (seed printed); every run must end with all ranks' final
# checksums bitwise equal to a fault-free run, none may hang.
if [ "$MODE" = all ] || [ "$MODE" = scenarios ]; then
  echo; echo "=== recovery scenarios, cuda backend, 4 ranks on one GPU (Gloo staging)"
  for what in "scenarios" "random 20 20261129"; do
    set -- $what
    log="$LOGS/scenarios.$1.log"
    RECOVERY_TEST_BACKEND_ARGS="--backend=cuda --collectives=gloo --gpus=1" timeout 400 \
      bash "$G/recovery_train_test.sh" "$G/revenant-run" "$G/apps/train_mlp.bin" none 4 12 "$@" \
      >"$log" 2>&1; rc=$?
    grep -E "^(ok|FAIL) |^seed=|bitwise equal to the fault-free|^fault-free" "$log" | sed 's/^/   /'
    if [ $rc -eq 0 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "recovery suite on cuda+gloo, 4 ranks: $what" "$s" "$log"
  done
fi
