# GPU section: the CUDA runtime names PyTorch imports beyond the basics
# (sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS, record and native;
# runs for MODE "all" or "runtime_names").
#
# The main runner already runs tests/apps/runtime_names natively and under
# the cuda backend (MODE all). This section adds:
#   1. (MODE runtime_names only) the same pair, so the section runs alone;
#   2. runtime_names under the cuda backend with REVENANT_DIAGNOSTICS=1: on a
#      failure the last submissions and the agent's warnings name the row;
#   3. runtime_names under the cuda backend with its agent killed right after
#      the cudaLaunchKernelExC launches and the one with a launch-completion
#      event (request 47 on the cuda backend), recovered by a
#      replacement (symbol copies replayed by name, launch attributes
#      replayed);
#   4. symbol_loop natively, under the cuda backend, and killed in minibatch
#      6 (the replacement restores the __device__ variable the host set two
#      steps before from the setup log; the result must be exact);
#   5. nccl_group_sim with one rank natively (NCCL simulates a group and
#      estimates its time) and under the cuda backend (empty and nested
#      groups as NCCL; a group with an all-reduce refused, then run).
if [ "$MODE" = all ] || [ "$MODE" = runtime_names ]; then
  echo
  echo "=== runtime names (symbols, cudaLaunchKernelExC, peers, graphs, IPC)"
  if [ "$MODE" = runtime_names ]; then
    log="$LOGS/runtime_names.native.log"
    timeout 120 "$G/apps/runtime_names.bin" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "^PASS runtime_names" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "runtime_names native" "$s" "$log"
    sed 's/^/   | /' "$log" | head -n 12
    log="$LOGS/runtime_names.cuda.log"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/runtime_names.bin" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS runtime_names" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "runtime_names revenant --backend=cuda" "$s" "$log"
  fi
  log="$LOGS/runtime_names.cuda.diag.log"
  REVENANT_DIAGNOSTICS=1 timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- \
    "$G/apps/runtime_names.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS runtime_names" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "runtime_names cuda, REVENANT_DIAGNOSTICS=1" "$s" "$log"
  if [ "$s" != PASS ]; then
    echo "   last submissions before the failure:"
    grep "submit seq" "$log" | tail -n 12 | sed 's/^/   | /'
    grep -E "FAIL|not supported|WARNING|ERROR| E\]| W\]" "$log" | grep -v "submit seq" | head -n 12 |
      sed 's/^/   | /'
  fi

  log="$LOGS/runtime_names.cuda.chaos47.log"
  timeout 150 $RUN --chaos="rank=0,calls=47" -n 1 --backend=cuda --timeout=120 -- \
    "$G/apps/runtime_names.bin" >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS runtime_names" "$log" && grep -q "recovered: replayed" "$log"
  then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "runtime_names cuda, agent killed at request 47" "$s" "$log"
  grep -E "chaos: killing|recovered: replayed" "$log" | head -n 2 | sed 's/^/   | /'

  log="$LOGS/symbol_loop.native.log"
  timeout 120 "$G/apps/symbol_loop.bin" 24 >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^PASS symbol_loop" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "symbol_loop native" "$s" "$log"
  log="$LOGS/symbol_loop.cuda.chaos.log"
  timeout 150 $RUN --chaos="rank=0,minibatch=6,calls=3" -n 1 --backend=cuda --timeout=120 -- \
    "$G/apps/symbol_loop.bin" 24 >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "^\[r0\] PASS symbol_loop" "$log" && grep -q "recovered: replayed" "$log"
  then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "symbol_loop cuda, agent killed in minibatch 6" "$s" "$log"
  grep -E "chaos: killing|recovered: replayed" "$log" | head -n 2 | sed 's/^/   | /'

  log="$LOGS/nccl_group_sim.native.log"
  native 1 "$log" "$G/apps/nccl_group_sim.bin"; rc=$?
  if [ $rc -eq 0 ] && grep -q "PASS nccl_group_sim" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "nccl_group_sim native, 1 rank" "$s" "$log"
  grep -E "group with|FAIL" "$log" | sed 's/^/   | /'
  log="$LOGS/nccl_group_sim.cuda.log"
  revrun 1 "$log" "$G/apps/nccl_group_sim.bin"; rc=$?
  if [ $rc -eq 0 ] && grep -q "PASS nccl_group_sim" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "nccl_group_sim revenant --backend=cuda, 1 rank" "$s" "$log"
  grep -E "group with|FAIL" "$log" | sed 's/^/   | /'
fi
