# GPU section: the performance table of docs/performance.md ("Where each goal
# stands") in three parts, each within one device call (<= 600 s; run them
# back to back on one machine for the table of one build and one machine).
# Sourced by .gpu/run_gpu.sh with MODE, G, LOGS and record; each part runs
# other modes of the runner with the settings below, every one bounded so
# that the part ends within PERF_S seconds (default 570), and prints their
# figures at the end.
#
#   perf1: the cuda backend's GPU checks (mode backend; PERF1_BACKEND=0:
#          skipped), the one-rank rows: train_mlp bursts (journal on / off / default
#          snapshots against native), shim_bench pairs with PERF1_BENCH_ARM
#          as a third arm (default REVENANT_HASH_PIECES=0: held uploads
#          hashed whole, what the pieces give), the launch cost and the
#          round-trip rows in short pairs, the one-rank all-reduce in short
#          pairs (with PERF1_AR_ARM as a third run, default
#          REVENANT_NCCL_ONE_RANK_KERNEL=0: cudaMemcpyAsync instead of the
#          copy kernel),
#          PyTorch mlp_ddp (1200 steps) and gpt_amp (300) in 3 pairs each
#          with PERF1_TORCH_ARM as a third run (default none), device and
#          host memory (PyTorch's in MEM_TORCH_PAIRS pairs, default 3, of 1200 steps).  ~430 s
#   perf2: the multi-rank rows: 2-rank nccl_bench, 4-rank busbw pairs (6:
#          3 left one or no pair on one time-slice level, ~37 s), with
#          PERF2_MPS=1 4 more under a private MPS daemon (no time slices,
#          NB_BW_MPS; +100 s), 4-rank train_mlp step pairs, 4-rank PyTorch
#          pairs.                                                        ~510 s
#   perf3: recovery over real NCCL at 4 ranks: the named kills and
#          PERF_KILLS seeded random kills (default 25, seed PERF_SEED,
#          default 20261201; run twice with two seeds for the 50-kill row),
#          recovery times printed per job and per recovery, and
#          PERF_WARM_PAIRS (3) pairs of one kill with and without warm
#          replacements.                                          up to PERF_S
if [ "$MODE" = perf1 ] || [ "$MODE" = perf2 ] || [ "$MODE" = perf3 ]; then
  echo
  echo "=== the performance table, part $MODE"
  perf_end=$(($(date +%s) + ${PERF_S:-570}))
  perf_parts=()
  # perf_run NAME MODE LIMIT VAR=VALUE...: the runner in MODE with the
  # settings, at most LIMIT seconds (less if the part's time runs out).
  perf_run() {
    local name=$1 mode=$2 limit=$3 left rc failed
    shift 3
    left=$((perf_end - $(date +%s)))
    [ "$limit" -gt "$left" ] && limit=$left
    if [ "$limit" -lt 25 ]; then
      record "perf $name" "NOT RUN (the part's time ran out)" /dev/null
      return
    fi
    echo "   $(date -u +%T) $name: $mode, $* (at most $limit s)"
    env GPU_LOGS_TGZ= "$@" timeout "$limit" bash "$G/run_gpu.sh" "$mode" >"$LOGS/perf.$name.txt" 2>&1
    rc=$?
    perf_parts+=("$name")
    failed=$(sed -n 's/^passed [0-9]*, failed \([0-9]*\)$/\1/p' "$LOGS/perf.$name.txt" | tail -1)
    if [ $rc -eq 124 ]; then s="FAIL (cut at $limit s)"
    elif [ $rc -ne 0 ]; then s="FAIL (rc=$rc)"
    elif [ "${failed:-0}" -gt 0 ]; then s="FAIL ($failed of its items failed)"
    else s=PASS; fi
    record "perf $name" "$s" "$LOGS/perf.$name.txt"
  }
  case $MODE in
    perf1)
      # The backend's checks first (the held uploads' hash pieces among
      # them: the bench's held uploads use them).
      [ "${PERF1_BACKEND:-1}" = 1 ] && perf_run backend backend 150
      perf_run one one_pairs 300 ONE_STEP_ROUNDS=3 ONE_BENCH_PAIRS=3 \
        "ONE_BENCH_ARM=${PERF1_BENCH_ARM-REVENANT_HASH_PIECES=0}" ONE_LAT_PAIRS=15 ONE_AR_PAIRS=8 \
        "ONE_AR_ARM=${PERF1_AR_ARM-REVENANT_NCCL_ONE_RANK_KERNEL=0}"
      # mlp_ddp runs 1200 steps: with the log's bound by its 554 MiB of
      # state, an asynchronous snapshot comes every ~370 of its steps, so 300
      # would measure none after the first.
      perf_run torch1 torch1_pairs 300 "TORCH_ONE=mlp_ddp gpt_amp" TORCH1_PAIRS=3 TORCH_STEPS=300 \
        TORCH1_STEPS_mlp_ddp=1200 "TORCH1_ARM=${PERF1_TORCH_ARM:-}"
      perf_run memory memory 150
      ;;
    perf2)
      perf_run nb2 nccl_multi_bench 100 NB_SIZES=2 NB_STEP=8 NB_STEPTIME=0
      perf_run bw4 nccl_multi_bench 100 NB_SIZES=0 NB_STEPTIME=0 NB_STEP=8 NB_BW_PAIRS=6 \
        NB_BW_ONLY=16mib,256mib
      # Under MPS only when asked (supplementary; with it the part needs
      # ~610 s and the PyTorch pairs last were cut).
      [ "${PERF2_MPS:-0}" = 1 ] && perf_run bw4mps nccl_multi_bench 100 NB_SIZES=0 NB_STEPTIME=0 NB_STEP=8 \
        NB_BW_PAIRS=4 NB_BW_ONLY=16mib,256mib NB_BW_MPS=1
      perf_run st4 nccl_multi_bench 110 NB_SIZES=0 NB_BW_PAIRS=0 NB_PAIRS=3 NB_ITERS=120
      perf_run torch4 torch4_pairs 200 TORCH4_PAIRS=2
      ;;
    perf3)
      perf_run recovery nccl_multi "${PERF_S:-570}" NM_BENCH=0 NM_TRIALS="${PERF_KILLS:-25}" \
        NM_SEED="${PERF_SEED:-20261201}" NM_WARM_PAIRS="${PERF_WARM_PAIRS:-3}"
      ;;
  esac
  echo "   --- the parts' figures"
  for name in "${perf_parts[@]}"; do
    grep -hE "round [0-9]+:|the same with|bursts [a-z]+/native|\| [a-z0-9_]+ +pairs|median of the pairs|mean step|level|same level|ratio of the means|busbw|algbw|PASS$|FAIL|peak|resident|recovery|seed=" \
      "$LOGS/perf.$name.txt" | grep -v "^\[" | cut -c1-220 | sed "s/^/   $name | /"
  done
fi
