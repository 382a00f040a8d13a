# GPU section: the one-rank rows of docs/performance.md's goal table measured
# in interleaved pairs (sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS and
# the helpers record, calc, median; runs for MODE "one_pairs" only). This VM moves a
# whole run's figures by up to a third between runs of one binary, so a row is
# shown only by pairs run next to each other in time.
#
#   1. train_mlp, 1 rank, real NCCL: bench/journal_step.sh with the native
#      arm, ONE_STEP_ROUNDS rounds (default 6) in which the arms run at once
#      taking turns in bursts of 1000 steps: "on" (journal on,
#      --snapshots=off: a journal boundary per step), "off" (journal off) and
#      "snap" (journal on, the one-rank default snapshots). Printed: each
#      round, and each arm's bursts against native's (goals: on <= 1.05,
#      snap <= 1.10). ONE_STEP_ARMS: the arms beside on, off and native
#      (bench/journal_step.sh's EXTRA_ARM; default "snap --snapshots=auto").
#      ONE_STEP_ROUNDS=0 skips this part.
#      An arm with a measurement knob runs the agent's testing variant
#      (revenant-run picks it when one is set): compare such arms with each
#      other, each knob given explicitly.
#   2. shim_bench, ONE_BENCH_PAIRS pairs (default 4) of a native run and a
#      run under the shim (journal on, default snapshots, --h2d_iters
#      ONE_H2D_ITERS, default 24), the order alternating: each metric's ratio
#      per pair, the median of the pairs' ratios and the goal. ONE_BENCH_ARM
#      (environment assignments, e.g. "REVENANT_CAPTURE_MAX_MIB=0"): a
#      third run in every pair under the shim with them set, its ratios
#      against the same pair's native run summarized apart.
#      ONE_BENCH_ARM_FLAGS (revenant-run options, e.g. "--upload_hold=false"): the
#      same third run with these options (with or without ONE_BENCH_ARM).
#   3. The launch cost and the round-trip rows again (4 B D2H, empty stream
#      sync, event record + query) in ONE_LAT_PAIRS short pairs (default 15;
#      shim_bench --latency_only, under a second each, the order
#      alternating): a process's placement on the CPUs moves these rows by
#      +-15 % from one run to the next (the launch cost by up to 2x), so
#      their median over many pairs is the row's figure.
#   4. The one-rank all-reduce (real NCCL) in ONE_AR_PAIRS short pairs
#      (default 6; nccl_bench --only=1mib,16mib,256mib --scale=1000: ten
#      times the bursts, 2000 all-reduces of 1 MiB in ~10 ms, the order
#      alternating): algbw per size, the pairs' ratios and their median
#      (goal >= 0.98 each), and per pair the native and Revenant figures of
#      the rows matching ONE_RAW_ROWS (default ^allreduce_1mib, the row
#      that spreads most). ONE_AR_ARM (environment assignments, e.g.
#      "REVENANT_NCCL_ONE_RANK_KERNEL=0"): a third run in every pair under
#      the shim with them set, summarized apart against the same native runs.
if [ "$MODE" = one_pairs ]; then
  echo
  echo "=== one rank, interleaved pairs"
  export NCCL_NVLS_ENABLE=0
  log="$LOGS/one_step.log"
  if [ "${ONE_STEP_ROUNDS:-6}" = 0 ]; then
    echo "   train_mlp bursts: none asked for (ONE_STEP_ROUNDS=0)"
  else
  ALTERNATE=1000 NATIVE=1 EXTRA_ARM="${ONE_STEP_ARMS:-snap --snapshots=auto}" bash "$G/bench/journal_step.sh" \
    "${ONE_STEP_ROUNDS:-6}" 20000 2000 \
    $RUN -n 1 --backend=cuda --snapshots=off --timeout=180 -- "$G/apps/train_mlp.bin" \
    >"$log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "RESULT journal_step_burst_ratio_snap_native" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
  record "one rank: train_mlp step, native / journal on / off / default snapshots" "$s" "$log"
  grep -E "^  round|^step time|^bursts|^ratio|^geometric" "$log" | sed 's/^/   | /'
  [ "$s" = PASS ] || tail -20 "$log" | sed 's/^/   | /'
  fi  # ONE_STEP_ROUNDS

  pairs=${ONE_BENCH_PAIRS:-4}; iters=${ONE_H2D_ITERS:-24}
  : >"$LOGS/one_bench.ratios"
  : >"$LOGS/one_bench_arm.ratios"
  arm="${ONE_BENCH_ARM:-}"
  [ -z "$arm" ] && [ -n "${ONE_BENCH_ARM_FLAGS:-}" ] && arm="ONE_BENCH_ARM_FLAGS=${ONE_BENCH_ARM_FLAGS}"
  ok=1
  [ "$pairs" -gt 0 ] || echo "   shim_bench pairs: none asked for (ONE_BENCH_PAIRS=0)"
  bn() { timeout 200 "$G/bench/shim_bench.bin" --h2d_iters "$iters" >"$nlog" 2>&1; }
  bs() { timeout 260 $RUN -n 1 --backend=cuda --timeout=240 -- "$G/bench/shim_bench.bin" --h2d_iters "$iters" >"$slog" 2>&1; }
  ba() { timeout 260 env $arm $RUN -n 1 --backend=cuda --timeout=240 ${ONE_BENCH_ARM_FLAGS:-} -- "$G/bench/shim_bench.bin" --h2d_iters "$iters" >"$alog" 2>&1; }
  # ratios LOG FILE TITLE: pair $p's ratios of LOG to $nlog appended to FILE
  # (compare.sh: metric native revenant unit ratio goal ("<= 0.10" or "-")
  # met) and printed.
  ratios() {
    bash "$G/bench/compare.sh" "$nlog" "$1" |
      awk -v p="$p" 'NR > 2 && NF >= 7 { if ($6 == "-") print p, $1, $5, "-", "-"; else print p, $1, $5, $6, $7 }' \
      >>"$2"
    echo "   $3: $(awk -v p="$p" '$1 == p { printf "%s %.3f  ", $2, $3 }' "$2")"
  }
  # summarize RATIOS: per metric the pairs' ratios, their median, the goal.
  summarize() {
    awk '{ r[$2] = r[$2] " " $3; g[$2] = $4 " " $5; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
      END { for (i = 1; i <= n; i++) print order[i], g[order[i]], r[order[i]] }' "$1" |
      while read -r m op goal rest; do
        med=$(echo "$rest" | tr ' ' '\n' | median)
        met=-
        case $op in
          "<=") met=$(awk -v a="$med" -v b="$goal" 'BEGIN { print (a <= b) ? "met" : "not met" }') ;;
          ">=") met=$(awk -v a="$med" -v b="$goal" 'BEGIN { print (a >= b) ? "met" : "not met" }') ;;
        esac
        printf '   | %-26s pairs %-40s median %.3f  goal %s %s: %s\n' "$m" "$rest" "$med" "$op" "$goal" "$met"
      done
  }
  for p in $(seq 1 "$pairs"); do
    nlog="$LOGS/one_bench.native.$p.log"; slog="$LOGS/one_bench.cuda.$p.log"
    if [ $((p % 2)) = 1 ]; then bn; nrc=$?; bs; src=$?; else bs; src=$?; bn; nrc=$?; fi
    if [ $nrc -ne 0 ] || [ $src -ne 0 ] || ! grep -q "^PASS shim_bench" "$nlog" || ! grep -q "PASS shim_bench" "$slog"; then
      ok=0; echo "   shim_bench pair $p: rc native $nrc, revenant $src"; tail -5 "$slog" | sed 's/^/   | /'
      continue
    fi
    ratios "$slog" "$LOGS/one_bench.ratios" "shim_bench pair $p"
    if [ -n "$arm" ]; then
      alog="$LOGS/one_bench.arm.$p.log"
      ba; arc=$?
      if [ $arc -ne 0 ] || ! grep -q "PASS shim_bench" "$alog"; then
        ok=0; echo "   shim_bench pair $p, arm $arm: rc $arc"; tail -5 "$alog" | sed 's/^/   | /'
        continue
      fi
      ratios "$alog" "$LOGS/one_bench_arm.ratios" "shim_bench pair $p, arm $arm"
    fi
  done
  if [ "$pairs" -gt 0 ]; then
    echo "   shim_bench, $pairs pair(s): per metric the pairs' ratios (revenant / native), their median, the goal"
    summarize "$LOGS/one_bench.ratios"
  fi
  if [ -n "$arm" ]; then
    echo "   shim_bench with $arm, the same pairs' native runs:"
    summarize "$LOGS/one_bench_arm.ratios"
    grep -h "captured uploads at exit\|held uploads at exit" "$LOGS"/one_bench.arm.*.log 2>/dev/null | head -4 | sed 's/^/   | arm agent /'
    grep -h "h2d iteration" "$LOGS"/one_bench.arm.1.log 2>/dev/null | tr '\n' ' ' | sed 's/^/   | arm pair 1 /'; echo
  fi
  grep -h "captured uploads at exit\|snapshots at exit" "$LOGS"/one_bench.cuda.*.log 2>/dev/null | head -4 | sed 's/^/   | agent /'
  [ "$ok" = 1 ] && s=PASS || s=FAIL
  [ "$pairs" -gt 0 ] && record "one rank: shim_bench pairs" "$s" "$LOGS/one_bench.cuda.$pairs.log"

  # short_pairs NAME COUNT APP TITLE ARGS...: COUNT pairs of a native run of
  # APP ARGS and one under the shim, the order alternating; each pair's
  # ratios (compare.sh) into $LOGS/one_NAME.ratios, then their medians.
  # SP_ARM (environment assignments): a third run in every pair under the
  # shim with them set, its ratios against the same pair's native run
  # summarized apart.
  short_pairs() {
    local name=$1 count=$2 app=$3 title=$4 p nrc src arc
    shift 4
    local nlog="$LOGS/one_$name.native.log" slog="$LOGS/one_$name.cuda.log" ok=1
    local alog="$LOGS/one_$name.arm.log"
    : >"$LOGS/one_$name.ratios"
    : >"$LOGS/one_$name.arm.ratios"
    sp_n() { native 1 "$nlog" "$G/bench/$app.bin" "$@"; }
    sp_s() { timeout 150 $RUN -n 1 --backend=cuda --timeout=120 -- "$G/bench/$app.bin" "$@" >"$slog" 2>&1; }
    sp_a() { timeout 150 env $SP_ARM $RUN -n 1 --backend=cuda --timeout=120 -- "$G/bench/$app.bin" "$@" >"$alog" 2>&1; }
    # sp_pair LOG KEY LABEL: pair $p's ratios of LOG to $nlog (compare.sh)
    # appended to $LOGS/one_KEY.ratios, and the raw figures of the rows that
    # spread most from pair to pair (ONE_RAW_ROWS, a regular expression),
    # native and LABEL's.
    sp_pair() {
      bash "$G/bench/compare.sh" "$nlog" "$1" >"$LOGS/one_$2.pair"
      awk -v p="$p" 'NR > 2 && NF >= 7 { if ($6 == "-") print p, $1, $5, "-", "-"; else print p, $1, $5, $6, $7 }' \
        "$LOGS/one_$2.pair" >>"$LOGS/one_$2.ratios"
      awk -v p="$p" -v l="$3" -v re="${ONE_RAW_ROWS:-^allreduce_1mib}" 'NR > 2 && $1 ~ re {
        printf "   pair %d %s: native %s, %s %s %s\n", p, $1, $2, l, $3, $4 }' "$LOGS/one_$2.pair"
    }
    for p in $(seq 1 "$count"); do
      if [ $((p % 2)) = 1 ]; then sp_n "$@"; nrc=$?; sp_s "$@"; src=$?; else sp_s "$@"; src=$?; sp_n "$@"; nrc=$?; fi
      if [ $nrc -ne 0 ] || [ $src -ne 0 ] || ! grep -q "PASS $app" "$nlog" || ! grep -q "PASS $app" "$slog"; then
        ok=0; echo "   $name pair $p: rc native $nrc, revenant $src"; tail -5 "$slog" | sed 's/^/   | /'
        continue
      fi
      sp_pair "$slog" "$name" revenant
      if [ -n "${SP_ARM:-}" ]; then
        sp_a "$@"; arc=$?
        if [ $arc -ne 0 ] || ! grep -q "PASS $app" "$alog"; then
          ok=0; echo "   $name pair $p, arm $SP_ARM: rc $arc"; tail -5 "$alog" | sed 's/^/   | /'
          continue
        fi
        sp_pair "$alog" "$name.arm" arm
      fi
    done
    echo "   $title, $count short pair(s) ($app $*): the pairs' ratios, their median, the goal"
    summarize "$LOGS/one_$name.ratios"
    if [ -n "${SP_ARM:-}" ]; then
      echo "   the same with $SP_ARM, against the same pairs' native runs:"
      summarize "$LOGS/one_$name.arm.ratios"
      grep -h "one-rank collectives" "$alog" 2>/dev/null | head -1 | sed 's/^/   | arm agent /'
    fi
    [ "$ok" = 1 ] && s=PASS || s=FAIL
    record "one rank: $title in short pairs" "$s" "$slog"
  }
  if [ "${ONE_LAT_PAIRS:-15}" -gt 0 ]; then
    short_pairs lat "${ONE_LAT_PAIRS:-15}" shim_bench "launch cost and round-trip rows" --latency_only
  fi
  if [ "${ONE_AR_PAIRS:-6}" -gt 0 ]; then
    SP_ARM="${ONE_AR_ARM:-}" short_pairs ar "${ONE_AR_PAIRS:-6}" nccl_bench "all-reduce algbw, 1 rank, real NCCL" --only=1mib,16mib,256mib --scale=1000
  fi
fi
