# GPU section: the journal's cost on the cuda backend (sourced by
# .gpu/run_gpu.sh with MODE, G, RUN, LOGS and the helpers record, native,
# revrun, walltime, now, calc; runs for MODE "all" or "journal").
#
#   1. train_mlp, 1 rank: step time under revenant-run with the journal on and
#      off, and native, measured in the same run: (wall(--iters 10020) -
#      wall(--iters 20)) / 10000, the fastest of 3 runs each. Boundary
#      snapshots (which only run with the journal) are off in both revenant
#      arms, so the ratio is the journal's alone; a third arm with snapshots at
#      their default (auto) shows their share. Goal: journal on / off <= 1.02.
#   2. shim_bench under revenant-run, journal on vs off (snapshots off), two
#      interleaved rounds: the launch rows and the training-like step, printed
#      as on / off ratios (the journal's per-launch cost is
#      1/throughput_on - 1/throughput_off).
if [ "$MODE" = all ] || [ "$MODE" = journal ]; then
  echo
  echo "=== journal cost (1 rank, cuda backend)"
  export NCCL_NVLS_ENABLE=0
  jrun() {  # LOG FLAGS CMD...: revenant-run with extra flags
    local log=$1 flags=$2; shift 2
    timeout 200 $RUN -n 1 --backend=cuda $flags --timeout=180 -- "$@" >"$log" 2>&1
  }
  jstep() {  # TAG RUNNER [FLAGS]: the step time in us, into jstep_us
    local tag=$1 a b
    if [ "$2" = native ]; then
      a=$(walltime native 1 "$LOGS/jstep.$tag.20.log" "$G/apps/train_mlp.bin" --iters 20)
      b=$(walltime native 1 "$LOGS/jstep.$tag.10020.log" "$G/apps/train_mlp.bin" --iters 10020)
    else
      a=$(walltime jrun "$LOGS/jstep.$tag.20.log" "$3" "$G/apps/train_mlp.bin" --iters 20)
      b=$(walltime jrun "$LOGS/jstep.$tag.10020.log" "$3" "$G/apps/train_mlp.bin" --iters 10020)
    fi
    if grep -q "PASS train_mlp" "$LOGS/jstep.$tag.10020.log"; then s=PASS; else s=FAIL; fi
    record "journal: train_mlp 10020 iterations, $tag" "$s" "$LOGS/jstep.$tag.10020.log"
    jstep_us=$(calc "($b - $a) * 1e6 / 10000")
  }
  jstep off revrun "--journal=false --snapshots=off"; t_off=$jstep_us
  jstep on revrun "--journal=true --snapshots=off"; t_on=$jstep_us
  jstep snapshots revrun "--journal=true --snapshots=auto"; t_snap=$jstep_us
  jstep native native; t_nat=$jstep_us
  grep -h "journal at exit" "$LOGS/jstep.on.10020.log" | sed 's/^/   | /'
  printf '   train_mlp step (us): native %.2f, journal off %.2f, journal on %.2f, journal + snapshots %.2f\n' \
    "$t_nat" "$t_off" "$t_on" "$t_snap"
  printf 'RESULT journal_step_ratio_on_off %.4f (goal <= 1.02)\n' "$(calc "$t_on / $t_off")"
  printf 'RESULT journal_step_ratio_snapshots_off %.4f\n' "$(calc "$t_snap / $t_off")"
  printf 'RESULT journal_step_ratio_on_native %.4f\n' "$(calc "$t_on / $t_nat")"

  for round in 1 2; do
    for j in true false; do
      log="$LOGS/jbench.$j.$round.log"
      jrun "$log" "--journal=$j --snapshots=off" "$G/bench/shim_bench.bin"; rc=$?
      if [ $rc -eq 0 ] && grep -q "PASS shim_bench" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
      record "journal: shim_bench journal=$j (round $round)" "$s" "$log"
    done
    for m in launch_cost launch_throughput d2h_4b_latency train_step_2000_launches; do
      on=$(grep -h "RESULT $m " "$LOGS/jbench.true.$round.log" | awk '{print $(NF-1)}')
      off=$(grep -h "RESULT $m " "$LOGS/jbench.false.$round.log" | awk '{print $(NF-1)}')
      [ -n "$on" ] && [ -n "$off" ] || continue
      printf '   round %d %-26s on %12.4f  off %12.4f  on/off %.4f\n' "$round" "$m" "$on" "$off" \
        "$(calc "$on / $off")"
      if [ "$m" = launch_throughput ]; then
        printf '   round %d journal cost per launch: %.3f us\n' "$round" "$(calc "1e6 / $on - 1e6 / $off")"
      fi
    done
  done
fi
