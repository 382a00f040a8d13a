# GPU section "nccl_multi": real NCCL with several ranks on the one GPU and
# recovery through real NCCL communicators (agent/backends/cuda/cuda_nccl.h,
# docs/recovery.md "Over real NCCL"). Sourced by .gpu/run_gpu.sh with MODE,
# G, RUN, LOGS and the helpers record, now, calc; runs for MODE "all" or
# "nccl_multi".
#
# Every process gets an NCCL_HOSTID of its own: natively this script sets it
# (NCCL then treats the ranks as separate hosts and connects them over its
# socket transport on the loopback interface), under revenant-run the agents
# set it themselves (--gpus=1 with more ranks than GPUs). NCCL_ALGO=Ring and
# NCCL_PROTO=Simple are fixed for every run so that native runs, runs under
# the shim and runs whose communicator was re-formed after a death reduce in
# the same order (bitwise equal checksums).
#
#   1. at 2 and 4 ranks: train_mlp --iters 40 natively and under revenant-run
#      (every rank PASS, one checksum per job, the same natively and under
#      the shim; the agents' start agreement says the ranks share the GPU),
#      collectives_all natively and under revenant-run (every rank PASS);
#   2. recovery at 4 ranks (train_mlp --iters 40, reference: the fault-free
#      run under revenant-run, which must equal the native one): rank 3
#      killed mid all-reduce, rank 1 mid optimizer step, ranks 1 and 2 at
#      once, rank 2 during rank 1's recovery, then NM_TRIALS (10) seeded
#      random kills (seed NM_SEED, printed); at 2 ranks one kill mid
#      all-reduce. Each job must have a replacement and end with every
#      rank's checksum equal to the reference; the recovery time (first
#      agent_died -> last application_resumed, from --events_file) is
#      printed per job.
# MODE nccl_spares: the 4-rank train_mlp reference (native and under the
# shim), then kills with pre-started spare agents (--spares=K) beside the same
# kill without one, for the recovery time with spares.
# NM_APP_ARGS: more train_mlp arguments for every job of the section (e.g.
# --out_of_place: its gradient all-reduces stay in flight under the
# deferred collective fence, so the kills land on units in flight).
# Every job is bounded by revenant-run --timeout and timeout(1); when a
# fault-free job hangs, the rest is skipped (NOT RUN).
if [ "$MODE" = all ] || [ "$MODE" = nccl_multi ] || [ "$MODE" = nccl_spares ]; then
  echo
  echo "=== real NCCL, several ranks on one GPU (an NCCL_HOSTID per rank), and its recovery"
  export NCCL_NVLS_ENABLE=0
  export NCCL_ALGO=Ring NCCL_PROTO=Simple
  export REVENANT_COLLECTIVE_TIMEOUT_S=30
  echo "   NCCL_ALGO=$NCCL_ALGO NCCL_PROTO=$NCCL_PROTO (fixed for bitwise-equal reductions); train_mlp arguments: ${NM_APP_ARGS:-none}"
  NM_RUN="$RUN --backend=cuda --collectives=nccl --gpus=1"
  NM_ITERS=40
  nm_sums() { sed -n 's/^\[r[0-9]*\] final checksum \([0-9a-f]*\)$/\1/p' "$1" | sort -u; }
  nm_nsums() { grep -c "^\[r[0-9]*\] final checksum " "$1"; }
  nm_diag() {
    grep -E "cuda-nccl|ERROR|FAIL|error|timeout|diverg|refus|replacement|epoch" "$1" |
      grep -v "revenant hostkernel" | head -"${2:-30}" | sed 's/^/   | /'
  }
  # nm_native N LOG CMD...: N processes on GPU 0, each with its own NCCL_HOSTID.
  nm_native() { NATIVE_HOSTIDS=1 native "$@"; }
  # nm_ok LOG N APP: every rank passed and (train_mlp) one checksum.
  nm_ok() {
    [ "$(grep -c "PASS $3" "$1")" -eq "$2" ] || return 1
    [ "$3" = train_mlp ] || return 0
    [ "$(nm_nsums "$1")" -eq "$2" ] && [ "$(nm_sums "$1" | wc -l)" -eq 1 ]
  }
  nm_hung() { [ "$1" -eq 124 ] || [ "$1" -eq 137 ] || grep -q "timeout after" "$2"; }
  nm_t() {  # EVENTS EVENT first|last -> t_us
    if [ "$3" = first ]; then grep "\"$2\"" "$1" | head -1; else grep "\"$2\"" "$1" | tail -1; fi |
      sed 's/.*"t_us":\([0-9]*\).*/\1/'
  }

  # nm_recoveries EVENTS: the job's recoveries in ms, one per line.
  nm_recoveries() {
    grep -E '"(agent_died|application_resumed)"' "$1" |
      sed 's/^{"t_us":\([0-9]*\),"event":"\([a-z_]*\)".*/\1 \2/' | sort -n |
      awk '$2 == "agent_died" { if (open && last) { print int((last - start) / 1000); open = 0 }
                                if (!open) { open = 1; start = $1; last = 0 } }
           $2 == "application_resumed" && open { last = $1 }
           END { if (open && last) print int((last - start) / 1000) }'
  }
  # nm_summary NAME VALUES...: count, median (the runner's) and maximum of VALUES (ms).
  nm_summary() {
    local name=$1
    shift
    printf '   recovery %s: %d, median %s ms, max %s ms, over 2 s: %d\n' "$name" $# \
      "$(printf '%s\n' "$@" | median)" "$(printf '%s\n' "$@" | sort -g | tail -1)" \
      "$(printf '%s\n' "$@" | awk '$1 > 2000' | wc -l)"
  }
  nm_stop=0
  declare -A nm_ref
  [ "$MODE" = nccl_spares ] && nm_sizes=4 || nm_sizes="2 4"
  for n in $nm_sizes; do
    [ "$nm_stop" = 1 ] && break
    echo "   --- $n ranks"
    # train_mlp, native.
    log="$LOGS/nccl_multi.train.n$n.native.log"
    t0=$(now); nm_native "$n" "$log" "$G/apps/train_mlp.bin" --iters $NM_ITERS ${NM_APP_ARGS:-}; rc=$?
    printf '   train_mlp native: rc=%s after %.1f s, checksums: %s\n' "$rc" "$(calc "$(now) - $t0")" \
      "$(nm_sums "$log" | tr '\n' ' ')"
    if [ $rc -eq 0 ] && nm_ok "$log" "$n" train_mlp; then s=PASS; else s="FAIL (rc=$rc)"; grep -iE "nccl|fail|error" "$log" | head -12 | sed 's/^/   | /'; fi
    record "nccl_multi train_mlp native, $n ranks/1 GPU" "$s" "$log"
    native_sum=$([ "$s" = PASS ] && nm_sums "$log")
    if nm_hung "$rc" "$log"; then nm_stop=1; break; fi
    # train_mlp under revenant-run.
    log="$LOGS/nccl_multi.train.n$n.cuda.log"
    t0=$(now)
    timeout 150 $NM_RUN -n "$n" --timeout=130 -- "$G/apps/train_mlp.bin" --iters $NM_ITERS ${NM_APP_ARGS:-} \
      >"$log" 2>&1; rc=$?
    rev_sum=$(nm_sums "$log" | head -1)
    shared=$(grep -c "share a GPU, each with its own NCCL_HOSTID" "$log")
    printf '   train_mlp revenant: rc=%s after %.1f s, checksums: %s; %s agent(s) agreed on a shared GPU\n' \
      "$rc" "$(calc "$(now) - $t0")" "$(nm_sums "$log" | tr '\n' ' ')" "$shared"
    grep -m2 -E "NCCL_HOSTID=|NCCL start agreement" "$log" | sed 's/^/   | /'
    if [ $rc -eq 0 ] && nm_ok "$log" "$n" train_mlp && [ "$shared" -ge "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; nm_diag "$log"; fi
    record "nccl_multi train_mlp revenant, $n ranks/1 GPU" "$s" "$log"
    if nm_hung "$rc" "$log"; then nm_stop=1; break; fi
    echo "   checksums: native ${native_sum:-none}, revenant ${rev_sum:-none}"
    if [ -n "$native_sum" ] && [ "$native_sum" = "$rev_sum" ]; then s=PASS; else s=FAIL; fi
    record "nccl_multi train_mlp checksums native = revenant, $n ranks" "$s" "$log"
    [ "$s" = PASS ] && nm_ref[$n]=$rev_sum
    [ "$MODE" = nccl_spares ] && continue
    # collectives_all.
    log="$LOGS/nccl_multi.coll.n$n.native.log"
    nm_native "$n" "$log" "$G/apps/collectives_all.bin"; rc=$?
    if [ $rc -eq 0 ] && nm_ok "$log" "$n" collectives_all; then s=PASS; else s="FAIL (rc=$rc)"; grep -iE "fail|error" "$log" | head -12 | sed 's/^/   | /'; fi
    record "nccl_multi collectives_all native, $n ranks" "$s" "$log"
    log="$LOGS/nccl_multi.coll.n$n.cuda.log"
    timeout 150 $NM_RUN -n "$n" --timeout=130 -- "$G/apps/collectives_all.bin" >"$log" 2>&1; rc=$?
    if [ $rc -eq 0 ] && nm_ok "$log" "$n" collectives_all; then s=PASS; else s="FAIL (rc=$rc)"; nm_diag "$log"; fi
    record "nccl_multi collectives_all revenant, $n ranks" "$s" "$log"
    if nm_hung "$rc" "$log"; then nm_stop=1; break; fi
  done

  # nm_trial N NAME SPEC: a chaos job; PASS when recovered bitwise equal.
  nm_times=(); nm_recs=()
  nm_trial() {
    local n=$1 name=$2 spec=$3 tag log ev rc same repl died resumed ms t0
    tag=$(echo "n$n.$name" | tr -c 'a-zA-Z0-9.\n' '_')
    log="$LOGS/nccl_multi.chaos.$tag.log"; ev="$log.events"
    rm -f "$ev"
    t0=$(now)
    timeout 200 $NM_RUN ${NM_EXTRA:-} -n "$n" --timeout=170 --chaos="$spec" --events_file="$ev" -- \
      "$G/apps/train_mlp.bin" --iters $NM_ITERS ${NM_APP_ARGS:-} >"$log" 2>&1; rc=$?
    same=$(grep -c "^\[r[0-9]*\] final checksum ${nm_ref[$n]:-none}\$" "$log")
    repl=$(grep -cE "replacement agent for rank|spare agent pid [0-9]+ takes rank" "$log")
    died=$(nm_t "$ev" agent_died first); resumed=$(nm_t "$ev" application_resumed last)
    ms=none
    if [ -n "$died" ] && [ -n "$resumed" ]; then ms=$(( (resumed - died) / 1000 )); nm_times+=("$n:$ms"); fi
    nm_last_ms=$ms
    # Each recovery of the job on its own: an agent_died with no recovery
    # open starts one; one that comes after application_resumed events ends
    # the open one at the last of them (a kill in the replay of the first
    # recovery makes a second); two deaths before any resume are one.
    nm_recs+=($([ -s "$ev" ] && nm_recoveries "$ev"))
    printf '   chaos %s [%s]: rc=%s after %.1f s, %s replacement(s), %s/%s ranks equal to %s, recovery %s ms\n' \
      "$name" "$spec" "$rc" "$(calc "$(now) - $t0")" "$repl" "$same" "$n" "${nm_ref[$n]:-none}" "$ms"
    grep -E "recovery epoch .* re-formed|state of .* (read|received)|taken from the survivors|cannot be recovered|did not form" "$log" |
      head -8 | sed 's/^/   | /'
    if [ $rc -eq 0 ] && [ -n "${nm_ref[$n]:-}" ] && [ "$same" -eq "$n" ] && [ "$repl" -ge 1 ] &&
       [ "$ms" != none ]; then
      s=PASS
    else
      s="FAIL (rc=$rc)"; nm_diag "$log" 40
      [ -s "$ev" ] && head -30 "$ev" | sed 's/^/   | /'
    fi
    record "nccl_multi chaos n$n $name" "$s" "$log"
  }
  if [ "$nm_stop" = 1 ] || [ -z "${nm_ref[4]:-}" ]; then
    echo "   a fault-free job hung or failed: the chaos kills are skipped"
    results+=("$(printf '%-40s %s' "nccl_multi chaos kills" "NOT RUN (no fault-free 4-rank reference)")")
  elif [ "$MODE" = nccl_spares ]; then
    nm_trial 4 "mid all-reduce, no spare" "rank=3,minibatch=5,calls=11,point=after_execute"
    NM_EXTRA=--spares=1 nm_trial 4 "mid all-reduce, 1 spare" "rank=3,minibatch=5,calls=11,point=after_execute"
    NM_EXTRA=--spares=1 nm_trial 4 "mid optimizer step, 1 spare" "rank=1,minibatch=6,calls=13,point=after_execute"
    NM_EXTRA=--spares=2 nm_trial 4 "two ranks at once, 2 spares" "rank=1,minibatch=4,calls=8;rank=2,minibatch=4,calls=8"
  else
    # Request numbers within a minibatch of train_mlp: 1-2 input copies,
    # 3-9 forward/backward, 10-13 the gradient all-reduces, 14 the SGD
    # kernel, 15 the next iteration's synchronize.
    nm_trial 4 "mid all-reduce" "rank=3,minibatch=5,calls=11,point=after_execute"
    nm_trial 4 "mid optimizer step" "rank=1,minibatch=6,calls=13,point=after_execute"
    nm_trial 4 "two ranks at once" "rank=1,minibatch=4,calls=8;rank=2,minibatch=4,calls=8"
    nm_trial 4 "during recovery" "rank=1,minibatch=4,calls=5;rank=2,recovery=1"
    seed=${NM_SEED:-20261201}; trials=${NM_TRIALS:-10}
    echo "   random kills: seed=$seed trials=$trials (NM_SEED, NM_TRIALS)"
    RANDOM=$seed
    points=(before_append after_append after_execute)
    for t in $(seq 1 "$trials"); do
      r1=$((RANDOM % 4)); m=$((1 + RANDOM % (NM_ITERS - 2))); c=$((1 + RANDOM % 15))
      p=${points[$((RANDOM % 3))]}
      spec="rank=$r1,minibatch=$m,calls=$c,point=$p"
      if [ $((RANDOM % 5)) -eq 0 ]; then
        r2=$(( (r1 + 1 + RANDOM % 3) % 4 ))
        spec="$spec;rank=$r2,minibatch=$m,calls=$((1 + RANDOM % 15))"
      fi
      nm_trial 4 "random $t" "$spec"
    done
  fi
  if [ -n "${nm_ref[2]:-}" ] && [ "$MODE" != nccl_spares ]; then
    nm_trial 2 "mid all-reduce" "rank=1,minibatch=5,calls=11,point=after_execute"
  fi
  echo "   recovery times (ranks:ms): ${nm_times[*]:-none}"
  [ ${#nm_times[@]} -gt 0 ] && nm_summary "per job (first kill -> last resume)" "${nm_times[@]#*:}"
  [ ${#nm_recs[@]} -gt 0 ] && nm_summary "per recovery (a kill in a replay starts another)" "${nm_recs[@]}"
  # NM_WARM_PAIRS=K: K pairs of the same 4-rank kill with the default warm
  # replacement (its process started at the death) and with
  # --warm_replacement=false (a new process after the 800 ms window), the
  # order alternating; each path's recovery times and median (after the
  # summaries above, which they do not enter).
  if [ "${NM_WARM_PAIRS:-0}" -gt 0 ] && [ -n "${nm_ref[4]:-}" ]; then
    nm_warm=(); nm_cold=()
    wspec="rank=3,minibatch=5,calls=11,point=after_execute"
    for p in $(seq 1 "$NM_WARM_PAIRS"); do
      for arm in $([ $((p % 2)) = 1 ] && echo "warm cold" || echo "cold warm"); do
        if [ "$arm" = warm ]; then
          nm_trial 4 "warm replacement $p" "$wspec"; [ "$nm_last_ms" != none ] && nm_warm+=("$nm_last_ms")
        else
          NM_EXTRA="${NM_EXTRA:-} --warm_replacement=false" nm_trial 4 "no warm replacement $p" "$wspec"
          [ "$nm_last_ms" != none ] && nm_cold+=("$nm_last_ms")
        fi
      done
    done
    [ ${#nm_warm[@]} -gt 0 ] && nm_summary "with warm replacements (${nm_warm[*]} ms)" "${nm_warm[@]}"
    [ ${#nm_cold[@]} -gt 0 ] && nm_summary "with --warm_replacement=false (${nm_cold[*]} ms)" "${nm_cold[@]}"
  fi
  unset NCCL_ALGO NCCL_PROTO REVENANT_COLLECTIVE_TIMEOUT_S
fi

# Several ranks on one GPU, benchmarks (MODE nccl_multi_bench, or with
# nccl_multi): bench/nccl_bench (all-reduce algbw/busbw, 4 KiB latency, issue
# cost) at 2 and 4 ranks natively (an NCCL_HOSTID each) and under the shim,
# ratios in the same run; and the 4-rank train_mlp step time (rank 0's mean
# step of iterations 20.. by its own clock, --time_after 20), native vs shim.
# NB_STEP=K: nccl_bench marks a step every K all-reduces (default 1: every
# one is a step of its own); NB_TRAIN_ARGS: more train_mlp arguments for the
# step time (e.g. --out_of_place); NB_SIZES: the rank counts of nccl_bench
# (default "2 4"; 0: none); NB_STEPTIME=0: without the train_mlp step time;
# NB_PAIRS, NB_ITERS: how many pairs of step-time runs (default 1) of how
# many iterations (default 2020); NB_RUN_ARGS: more revenant-run arguments of
# the shim's runs (e.g. --journal=false). NM_BENCH=0: MODE nccl_multi without
# these benchmarks. NB_BW_PAIRS=P: P pairs of short nccl_bench runs (native
# and shim, the order alternating; --only=NB_BW_ONLY, default all three
# sizes, --scale=NB_BW_SCALE, default 10 percent of the iterations) at
# NB_BW_N ranks (default 4), each pair's busbw printed, then the means and
# their ratio per size: ranks time-sharing the GPU land run by run on
# multiples of a time slice (at 4 ranks a 1 MiB all-reduce took 13.5, 27
# or 40.5 ms natively in successive runs), so single pairs say little; the
# pairs whose two runs landed on the same level are compared on their own,
# and all runs grouped by level (`levels`, .gpu/run_gpu.sh).
if [ "$MODE" = all ] || { [ "$MODE" = nccl_multi ] && [ "${NM_BENCH:-1}" = 1 ]; } ||
   [ "$MODE" = nccl_multi_bench ]; then
  echo
  echo "=== real NCCL, several ranks on one GPU: benchmarks (ratio = revenant / native, same run)"
  export NCCL_NVLS_ENABLE=0
  NB_RUN="$RUN --backend=cuda --collectives=nccl --gpus=1 ${NB_RUN_ARGS:-}"
  [ -n "${NB_RUN_ARGS:-}" ] && echo "   revenant-run arguments of the shim's runs: $NB_RUN_ARGS (NB_RUN_ARGS)"
  for n in ${NB_SIZES:-2 4}; do
    [ "$n" = 0 ] && continue  # NB_SIZES=0: no nccl_bench
    nlog="$LOGS/nccl_multi.bench.n$n.native.log"; rlog="$LOGS/nccl_multi.bench.n$n.cuda.log"
    # A step every NB_STEP all-reduces of the bursts (revenantMarkStep; a no-op
    # natively), so that kept results are reused as in a training loop; 4 ranks
    # over sockets on one GPU: the shorter run, inside native's 150 s limit.
    nb_args=--mark_steps=${NB_STEP:-1}
    [ "$n" -eq 4 ] && nb_args="$nb_args --quick"
    NATIVE_HOSTIDS=1 native "$n" "$nlog" "$G/bench/nccl_bench.bin" $nb_args; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c 'PASS nccl_bench' "$nlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "nccl_multi nccl_bench native, $n ranks/1 GPU" "$s" "$nlog"
    [ "$s" = PASS ] || tail -5 "$nlog".r* 2>/dev/null | sed 's/^/   | /'
    timeout 200 $NB_RUN -n "$n" --timeout=180 -- "$G/bench/nccl_bench.bin" $nb_args >"$rlog" 2>&1; rc=$?
    if [ $rc -eq 0 ] && [ "$(grep -c 'PASS nccl_bench' "$rlog")" -eq "$n" ]; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "nccl_multi nccl_bench revenant, $n ranks/1 GPU" "$s" "$rlog"
    grep "^\[r0\] RESULT" "$nlog" >"$nlog.r0"
    # With the agents' journal lines, so that compare.sh says whether they journaled.
    grep -E "^\[r0\] RESULT|^\[a0\] .*journal at exit" "$rlog" >"$rlog.r0"
    echo "   --- nccl_bench, $n ranks on one GPU (rank 0's figures; a step every ${NB_STEP:-1} all-reduce(s))"
    bash "$G/bench/compare.sh" "$nlog.r0" "$rlog.r0" | tee "$LOGS/nccl_multi.bench.n$n.table.txt" | sed 's/^/   /'
  done
  if [ "${NB_BW_PAIRS:-0}" -gt 0 ]; then
    n=${NB_BW_N:-4}; bw_only=${NB_BW_ONLY:-1mib,16mib,256mib}
    bw_args="--mark_steps=${NB_STEP:-1} --only=$bw_only --scale=${NB_BW_SCALE:-10}"
    echo "   --- busbw, $n ranks, ${NB_BW_PAIRS} pair(s) of short runs (nccl_bench $bw_args), rank 0's figures"
    # NB_BW_MPS=1: the pairs under a private MPS control daemon (its own
    # pipe and log folders, quit after the pairs), so that the ranks' kernels
    # run side by side instead of in time slices; the GPU's settings are not
    # touched. Without the daemon the pairs run as they are, said so.
    bw_mps=0
    if [ "${NB_BW_MPS:-0}" = 1 ]; then
      if command -v nvidia-cuda-mps-control >/dev/null; then
        export CUDA_MPS_PIPE_DIRECTORY="$LOGS/mps.pipe" CUDA_MPS_LOG_DIRECTORY="$LOGS/mps.log"
        mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
        if nvidia-cuda-mps-control -d; then bw_mps=1; echo "   under MPS (a private control daemon)"
        else echo "   MPS: the control daemon did not start; the pairs run without it"
             unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY; fi
      else echo "   MPS: no nvidia-cuda-mps-control on this machine; the pairs run without it"; fi
    fi
    bw_ok=1; : >"$LOGS/nccl_multi.bw.pairs"
    bw_run() {  # native|shim LOG
      local log=$2 rc
      if [ "$1" = native ]; then
        NATIVE_HOSTIDS=1 native "$n" "$log" "$G/bench/nccl_bench.bin" $bw_args; rc=$?
      else
        timeout 200 $NB_RUN -n "$n" --timeout=180 -- "$G/bench/nccl_bench.bin" $bw_args >"$log" 2>&1; rc=$?
      fi
      [ $rc -eq 0 ] && [ "$(grep -c 'PASS nccl_bench' "$log")" -eq "$n" ] || { bw_ok=0; tail -3 "$log" | sed 's/^/   | /'; }
    }
    bw_get() { sed -n "s/^\[r0\] RESULT allreduce_$2_busbw \([0-9.]*\) .*/\1/p" "$1"; }
    for p in $(seq 1 "$NB_BW_PAIRS"); do
      if [ $((p % 2)) = 1 ]; then bw_run native "$LOGS/nccl_multi.bw.native.log"; bw_run shim "$LOGS/nccl_multi.bw.cuda.log"
      else bw_run shim "$LOGS/nccl_multi.bw.cuda.log"; bw_run native "$LOGS/nccl_multi.bw.native.log"; fi
      bw_line=""
      for z in $(echo "$bw_only" | tr ',' ' '); do
        a=$(bw_get "$LOGS/nccl_multi.bw.native.log" "$z"); b=$(bw_get "$LOGS/nccl_multi.bw.cuda.log" "$z")
        bw_line="$bw_line $z $a/$b"
        [ -n "$a" ] && echo "native $z $a" >>"$LOGS/nccl_multi.bw.pairs"
        [ -n "$b" ] && echo "shim $z $b" >>"$LOGS/nccl_multi.bw.pairs"
        # Both runs on the same level: their ratio (levels seen at 4 ranks,
        # 256 MiB: ~0.62, ~0.92, ~1.10 GB/s, 1.19x and 1.5x apart; within 10 %).
        [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v z="$z" \
          'BEGIN { r = b / a; if (r > 0.9 && r < 1.1) print "same", z, r }' >>"$LOGS/nccl_multi.bw.pairs"
      done
      echo "   pair $p:$bw_line (native/revenant GB/s)"
    done
    for z in $(echo "$bw_only" | tr ',' ' '); do
      awk -v z="$z" '$2 == z && $1 == "native" { n += $3; nn++ } $2 == z && $1 == "shim" { r += $3; rn++ }
        $1 == "same" && $2 == z { q += $3; if (!qn || $3 < lo) lo = $3; if (!qn || $3 > hi) hi = $3; qn++ }
        END { if (nn && rn) printf "   busbw %s, %d ranks: mean native %.4f GB/s (%d runs), mean revenant %.4f GB/s (%d runs), ratio of the means %.3f; pairs on the same level: %d, mean of their ratios %s\n", z, '"$n"', n / nn, nn, r / rn, rn, (r / rn) / (n / nn), qn, qn ? sprintf("%.3f (%.3f-%.3f)", q / qn, lo, hi) : "-" }' \
        "$LOGS/nccl_multi.bw.pairs"
      awk -v z="$z" '$2 == z && ($1 == "native" || $1 == "shim") { print $1, $3 }' \
        "$LOGS/nccl_multi.bw.pairs" | levels
    done
    if [ "$bw_mps" = 1 ]; then
      echo quit | timeout 20 nvidia-cuda-mps-control
      tail -3 "$CUDA_MPS_LOG_DIRECTORY/control.log" 2>/dev/null | sed 's/^/   mps | /'
      unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    fi
    if [ "$bw_ok" = 1 ]; then s=PASS; else s=FAIL; fi
    record "nccl_multi busbw pairs, $n ranks${NB_BW_MPS:+ (NB_BW_MPS=$NB_BW_MPS, daemon $bw_mps)}" "$s" "$LOGS/nccl_multi.bw.cuda.log"
  fi
  n=4
  if [ "${NB_STEPTIME:-1}" = 1 ]; then
  # NB_PAIRS=P pairs of runs (native and shim, the order alternating), each
  # run's step the mean of its iterations 20.. (train_mlp --time_after 20,
  # rank 0's clock): several ranks time-sharing one GPU land run by run on
  # multiples of a time slice, so one pair says little; the means over the
  # pairs, and the pairs whose two runs landed on the same level, are the
  # figures.
  iters=${NB_ITERS:-2020}; pairs=${NB_PAIRS:-1}; nats=(); revs=(); sames=()
  nb_step() { sed -n 's/^\[r0\] RESULT train_step_us \([0-9.]*\) .*/\1/p' "$1"; }
  nb_native() {
    NATIVE_HOSTIDS=1 native $n "$LOGS/nccl_multi.step.native.N" "$G/apps/train_mlp.bin" \
      --iters "$iters" --time_after 20 ${NB_TRAIN_ARGS:-} >/dev/null 2>&1
    nb_step "$LOGS/nccl_multi.step.native.N"
  }
  nb_shim() {
    timeout 300 $NB_RUN -n $n --timeout=280 -- "$G/apps/train_mlp.bin" --iters "$iters" \
      --time_after 20 ${NB_TRAIN_ARGS:-} >"$LOGS/nccl_multi.step.cuda.N.log" 2>&1
    nb_step "$LOGS/nccl_multi.step.cuda.N.log"
  }
  step_ok=1
  for p in $(seq 1 "$pairs"); do
    if [ $((p % 2)) = 1 ]; then nat=$(nb_native); rev=$(nb_shim); else rev=$(nb_shim); nat=$(nb_native); fi
    [ "$(grep -c "PASS train_mlp" "$LOGS/nccl_multi.step.native.N")" -eq $n ] || step_ok=0
    [ "$(grep -c "PASS train_mlp" "$LOGS/nccl_multi.step.cuda.N.log")" -eq $n ] || step_ok=0
    if [ -z "$nat" ] || [ -z "$rev" ]; then
      step_ok=0; echo "   train_mlp step, pair $p of $pairs: no step time (native '${nat}', revenant '${rev}')"
      continue
    fi
    nats+=("$nat"); revs+=("$rev")
    r=$(calc "$rev / $nat")
    # Both runs on the same level (levels seen: ~58, ~110, ~167 ms, 1.5x and
    # more apart; within 10 %): their ratio.
    awk -v r="$r" 'BEGIN { exit !(r > 0.9 && r < 1.1) }' && sames+=("$r")
    printf '   train_mlp step (%s), 4 ranks on one GPU, pair %d of %d: native %.1f us, revenant %.1f us, ratio %.3f\n' \
      "${NB_TRAIN_ARGS:-in place}" "$p" "$pairs" "$nat" "$rev" "$r"
  done
  if [ "${#nats[@]}" -gt 0 ]; then
    mn=$(printf '%s\n' "${nats[@]}" | awk '{ s += $1 } END { print s / NR }')
    mr=$(printf '%s\n' "${revs[@]}" | awk '{ s += $1 } END { print s / NR }')
    ms=$(printf '%s\n' "${sames[@]}" | awk 'NF { s += $1; if (!k || $1 < lo) lo = $1; if (!k || $1 > hi) hi = $1; k++ }
      END { print k ? sprintf("%.3f (%.3f-%.3f)", s / k, lo, hi) : "-" }')
    printf '   train_mlp step, 4 ranks, %d pair(s) of %d iterations: mean native %.1f us, mean revenant %.1f us, ratio of the means %.3f; pairs on the same level: %d, mean of their ratios %s\n' \
      "${#nats[@]}" "$iters" "$mn" "$mr" "$(calc "$mr / $mn")" "${#sames[@]}" "$ms"
    { printf 'native %s\n' "${nats[@]}"; printf 'shim %s\n' "${revs[@]}"; } | levels
  fi
  if [ "$step_ok" = 1 ]; then s=PASS; else s=FAIL; fi
  record "nccl_multi train_mlp step time, 4 ranks" "$s" "$LOGS/nccl_multi.step.cuda.N.log"
  fi  # NB_STEPTIME
fi
