# GPU section: the NCCL path on the cuda backend (sourced by .gpu/run_gpu.sh
# with MODE, G, RUN, LOGS and the helpers record, native, revrun, checksum,
# now, calc; runs for MODE "all" or "nccl", after the main NCCL section).
#
#   1. start agreement: two ranks on the one GPU (revenant-run --gpus=1, real
#      NCCL) with one NCCL_HOSTID exported to both (an accidental duplicate:
#      without it each agent gets its own, scripts/gpu/nccl_multi.sh) must
#      be refused on both ranks with ncclInvalidUsage and a log line naming
#      ranks 0 and 1 ("use the same GPU"), within the bound
#      (REVENANT_COLLECTIVE_TIMEOUT_S=20: the job must end in < 60 s);
#   2. the agreement and warm-up lines of a 1-rank job (the agent logs the
#      verdict; no warm-up failure);
#   3. a 1-rank chaos kill with real NCCL in the first minibatch (request 38:
#      the second gradient all-reduce of iteration 0): the replacement
#      re-creates the communicator with a fresh unique id, replays the
#      collectives for real, and the final checksum equals the native run's;
#   4. the same past a minibatch boundary (minibatch 4, 8 calls in; needs
#      the boundary snapshots of a 1-rank job): recovered, checksum equal;
#   5. collectives_bad with one rank, natively and under the cuda backend:
#      NCCL's codes at the call for bad input, and (under Revenant) the
#      agent's error deferred to the next synchronous NCCL call, never CUDA's.
if [ "$MODE" = all ] || [ "$MODE" = nccl ]; then
  echo
  echo "=== NCCL path: start agreement, warm-up, 1-rank recovery over real NCCL"
  export NCCL_NVLS_ENABLE=0

  # 1. Two ranks on one GPU with the same NCCL_HOSTID.
  log="$LOGS/nccl_start.same_gpu.log"
  if $G/revenant-run --help 2>&1 | grep -q -- "--gpus"; then
    t0=$(now)
    NCCL_HOSTID=revenant-same-host REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 120 \
      $RUN -n 2 --backend=cuda --gpus=1 \
      --collectives=nccl --timeout=90 -- "$G/apps/collectives_all.bin" >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    named=$(grep -c "ranks 0, 1 use the same GPU" "$log")
    refused=$(grep -cE "ncclCommInitRank.*returned 5|invalid usage" "$log")
    printf '   same GPU: rc=%s after %.1f s, %s agent line(s) naming ranks 0 and 1, %s refusal(s) seen by the ranks\n' \
      "$rc" "$el" "$named" "$refused"
    grep -E "start agreement|same GPU|FAIL|PASS" "$log" | head -12 | sed 's/^/   | /'
    if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && [ "$named" -ge 2 ] && [ "$refused" -ge 1 ] &&
       [ "$(calc "($el < 60) ? 1 : 0")" = 1 ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "NCCL start agreement refuses 2 ranks/1 GPU, one NCCL_HOSTID" "$s" "$log"
  else
    record "NCCL start agreement refuses 2 ranks/1 GPU, one NCCL_HOSTID" "NOT RUN (revenant-run has no --gpus)" /dev/null
  fi

  # 2. One rank: the verdict and the warm-up.
  log="$LOGS/nccl_start.1rank.log"
  timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/train_mlp.bin" --iters 20 \
    >"$log" 2>&1; rc=$?
  grep -E "start agreement|warm-up" "$log" | head -4 | sed 's/^/   | /'
  if [ $rc -eq 0 ] && grep -q "PASS train_mlp" "$log" && grep -q "NCCL start agreement: 1 rank" "$log" &&
     ! grep -q "warm-up all-reduce failed" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "NCCL 1 rank: agreement + warm-up" "$s" "$log"

  # 3./4. Recovery of a 1-rank job over real NCCL.
  nlog="$LOGS/nccl_recover.native.log"
  native 1 "$nlog" "$G/apps/train_mlp.bin" --iters 40; rc=$?
  ref=$(checksum "$nlog")
  echo "   native checksum (40 iterations): ${ref:-none} (rc=$rc)"
  for point in "calls=38" "minibatch=4,calls=8"; do
    tag=$(echo "$point" | tr ',=' '__')
    log="$LOGS/nccl_recover.$tag.log"
    t0=$(now)
    REVENANT_COLLECTIVE_TIMEOUT_S=20 timeout 170 $RUN -n 1 --backend=cuda --timeout=150 \
      --chaos="rank=0,$point" -- "$G/apps/train_mlp.bin" --iters 40 >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    got=$(checksum "$log")
    printf '   chaos %s: rc=%s after %.1f s, checksum %s (native %s)\n' "$point" "$rc" "$el" \
      "${got:-none}" "${ref:-none}"
    grep -iE "chaos|recover|replay|fresh unique id|refus|diverged|epoch|snapshot" "$log" | head -16 |
      sed 's/^/   | /'
    if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$got" = "$ref" ] &&
       grep -q "fresh unique id" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "NCCL 1 rank recovered, chaos $point" "$s" "$log"
  done

  # 5. Bad input with real NCCL, one rank.
  if [ -x "$G/apps/collectives_bad.bin" ]; then
    nlog="$LOGS/collectives_bad.n1.native.log"; rlog="$LOGS/collectives_bad.n1.cuda.log"
    native 1 "$nlog" "$G/apps/collectives_bad.bin"; rc=$?
    if [ $rc -eq 0 ] && grep -q "PASS collectives_bad" "$nlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "collectives_bad native, 1 rank" "$s" "$nlog"
    timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/apps/collectives_bad.bin" \
      >"$rlog" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "PASS collectives_bad" "$rlog" &&
       grep -q "deferred NCCL error: reported once" "$rlog"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "collectives_bad revenant cuda, 1 rank" "$s" "$rlog"
  else
    record "collectives_bad, 1 rank" "NOT RUN (not packed)" /dev/null
  fi
fi
