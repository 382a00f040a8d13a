# GPU section: the journal's cost on the cuda backend (sourced by
# .gpu/run_gpu.sh with MODE, G, RUN, LOGS and the helpers record, native,
# revrun, walltime, now, calc; runs for MODE "all" or "journal").
#
#   1. train_mlp, 1 rank (real NCCL): bench/journal_step.sh, JSTEP_PAIRS
#      (default 8) rounds in which the journal-on, journal-off and the other
#      arms run at once, taking turns in bursts of 1000 steps
#      (ALTERNATE=1000: bursts of different arms lie next to each other in
#      time, so the VM's drifting load, +-15 % between runs, cancels in the
#      burst ratios), each timing its steady state, plus native.
#      Boundary snapshots are off in both arms (the ratio is the journal's
#      alone). The "on" arm is the default (auto: write-behind on this
#      machine); extra arms: the executor journaling inline, journal-ahead,
#      and two measurement-only ones (REVENANT_JOURNAL_THREAD_DRY): "dry", the
#      thread writing nothing, and "nopayload", its records without the
#      captured input bytes -- they split write-behind's remaining cost
#      between the protocol, the records and the input capture; "nohandoff",
#      the executor placing every minibatch boundary itself
#      (REVENANT_JOURNAL_BOUNDARY_HANDOFF=0).
#      Goal: journal on / off <= 1.02. REVENANT_JOURNAL_TIMING=1 in one
#      extra run gives the executor's time inside the journal per call.
#   1b. the same benchmark for larger steps (JSTEP_CURVE_PAIRS pairs, default
#      3): train_mlp with a wider layer and larger batches (32 KiB input, stored
#      inline; 256 KiB input, stored out of line), to show how the journal's
#      fixed cost per step weighs as the step grows.
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
  ALTERNATE=1000 NATIVE=1 EXTRA_ARM="inline --journal_thread=off; nohandoff REVENANT_JOURNAL_BOUNDARY_HANDOFF=0; dry REVENANT_JOURNAL_THREAD_DRY=1; nopayload REVENANT_JOURNAL_THREAD_DRY=payload" bash "$G/bench/journal_step.sh" "${JSTEP_PAIRS:-8}" 20000 2000 \
    $RUN -n 1 --backend=cuda --snapshots=off --timeout=180 -- "$G/apps/train_mlp.bin" \
    >"$LOGS/journal_step.log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "RESULT journal_step_ratio" "$LOGS/journal_step.log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "journal: step benchmark (train_mlp, on/off pairs)" "$s" "$LOGS/journal_step.log"
  sed 's/^/   | /' "$LOGS/journal_step.log"
  for cfg in "--hidden 1024 --batch 128" "--hidden 4096 --batch 1024"; do
    tag=$(echo "$cfg" | tr -d ' -')
    case $cfg in *4096*) burst=40;; *) burst=400;; esac
    ALTERNATE=$burst bash "$G/bench/journal_step.sh" "${JSTEP_CURVE_PAIRS:-3}" 4000 400 \
      $RUN -n 1 --backend=cuda --snapshots=off --timeout=180 -- "$G/apps/train_mlp.bin" $cfg \
      >"$LOGS/journal_step.$tag.log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && grep -q "RESULT journal_step_ratio" "$LOGS/journal_step.$tag.log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "journal: step benchmark (train_mlp $cfg)" "$s" "$LOGS/journal_step.$tag.log"
    grep -E "^  pair|^  round|^step time|^ratio|^bursts" "$LOGS/journal_step.$tag.log" | sed "s/^/   | $cfg: /"
  done
  REVENANT_JOURNAL_TIMING=1 jrun "$LOGS/jstep.timing.log" "--journal=true --snapshots=off" \
    "$G/apps/train_mlp.bin" --iters 20000 --time_after 2000
  grep -h -A12 "RESULT\|journal time at exit\|journal thread" "$LOGS/jstep.timing.log" | grep -v "iter \|checksum\|PASS" | sed 's/^/   | timing run: /'
  REVENANT_JOURNAL_TIMING=1 jrun "$LOGS/jstep.timing_inline.log" "--journal=true --snapshots=off --journal_thread=off" \
    "$G/apps/train_mlp.bin" --iters 20000 --time_after 2000
  grep -h -A8 "RESULT\|journal time at exit" "$LOGS/jstep.timing_inline.log" | grep -v "iter \|checksum\|PASS" | sed 's/^/   | timing run, inline: /'

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
