# GPU section: graphs on the cuda backend (sourced by .gpu/run_gpu.sh with MODE,
# G, RUN, LOGS and record; runs for MODE "all" or "graphs").
#
# The main runner already runs tests/apps/graphs natively and under the cuda
# backend. This section adds:
#   1. the same run under the cuda backend with REVENANT_DIAGNOSTICS=1 (every
#      submission logged by the agent); on failure it prints the last
#      submissions and the agent's warnings, so the failing row is named;
#   2. the same run with the agent's journal off (tells a graph failure of the
#      backend from one of the journal);
#   3. a chaos kill of the agent at two points of the program, recovered by a
#      replacement agent (the journal replayed on the GPU);
#   4. the cuda backend's GPU test in graphs mode only (MODE all runs it in the
#      main runner): graph memory from the fixed range, same addresses in a
#      second agent (the graph_alloc lines).
if [ "$MODE" = all ] || [ "$MODE" = graphs ]; then
  echo
  echo "=== graphs on the cuda backend"
  log="$LOGS/graphs.cuda.diag.log"
  REVENANT_DIAGNOSTICS=1 timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- \
    "$G/apps/graphs.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS graphs" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "graphs cuda, REVENANT_DIAGNOSTICS=1" "$s" "$log"
  if [ "$s" != PASS ]; then
    echo "   last submissions before the failure:"
    grep "submit seq" "$log" | tail -n 12 | sed 's/^/   | /'
    echo "   failures and agent warnings:"
    grep -E "FAIL|not supported|WARNING|ERROR|error" "$log" | grep -v "submit seq" | head -n 12 |
      sed 's/^/   | /'
  fi
  echo "   submissions logged: $(grep -c "submit seq" "$log" || true); graph rows among them:"
  grep "submit seq" "$log" | grep -o "cudaGraph[A-Za-z0-9]*" | sort | uniq -c | sed 's/^/   | /'

  log="$LOGS/graphs.cuda.nojournal.log"
  timeout 150 $RUN --journal=false -n 1 --backend=cuda --timeout=120 -- \
    "$G/apps/graphs.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS graphs" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "graphs cuda, agent journal off" "$s" "$log"

  # Recovery: the agent is killed at requests 40-48 (the explicit graph with
  # a host node: built, launched twice, then the synchronize that must see
  # both host-node runs; as //tests/integration:graphs_recovery_test on the
  # host backend) and 66 (after the alloc/free nodes: the replacement must place the graph
  # memory at the address the application baked into its kernel node) and a
  # replacement replays the journal. Passes only if the kill happened.
  # GRAPHS_RANDOM=N adds N seeded random kills (GRAPHS_SEED, default
  # 20261208) at requests 1-70 and random crash points, as
  # //tests/integration:graphs_random_recovery_test does on the host backend.
  graph_kills="40 42 44 45 46 48 66"
  if [ "${GRAPHS_RANDOM:-0}" -gt 0 ]; then
    RANDOM=${GRAPHS_SEED:-20261208}
    echo "   graphs random kills: seed ${GRAPHS_SEED:-20261208}, ${GRAPHS_RANDOM} trials"
    gpoints=(before_append after_append after_execute after_reply)
    for t in $(seq 1 "$GRAPHS_RANDOM"); do
      graph_kills="$graph_kills $((1 + RANDOM % 70)),point=${gpoints[$((RANDOM % 4))]}"
    done
  fi
  for calls in $graph_kills; do
    log="$LOGS/graphs.cuda.chaos$calls.log"
    timeout 150 $RUN --recover --chaos="rank=0,calls=$calls" -n 1 --backend=cuda --timeout=120 -- \
      "$G/apps/graphs.bin" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS graphs" "$log" && grep -q "recovered: replayed" "$log"
    then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "graphs cuda, agent killed at request $calls" "$s" "$log"
    grep -E "chaos: killing|recovered: replayed" "$log" | head -n 2 | sed 's/^/   | /'
  done

  if [ "$MODE" = graphs ]; then
    log="$LOGS/cuda_backend_gpu_test.graphs.log"
    timeout 240 "$G/cuda_backend_gpu_test" --fatbin="$G/gpu_test_kernels.fatbin" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^PASS cuda_backend_gpu_test" "$log"; then s=PASS
    else s="FAIL (rc=$rc)"; fi
    record "cuda_backend_gpu_test (graph memory, same addresses)" "$s" "$log"
    grep -E "^ADDR graph|^ADDR after_graph|same device|^FAIL" "$log" | head -n 12 | sed 's/^/   | /'
  fi
fi
