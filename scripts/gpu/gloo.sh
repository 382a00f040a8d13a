# GPU section "gloo": the cuda backend with the NCCL rows through Gloo staged
# in pinned host memory (agent/backends/cuda/cuda_gloo.h), 4 ranks sharing
# the one GPU, and recovery over it. Sourced by .gpu/run_gpu.sh with MODE, G,
# RUN, LOGS and the helpers record, now, calc; runs for MODE "all" or "gloo".
#
#   1. train_mlp --iters 40, 4 ranks on GPU 0, twice: every rank PASS, all 4
#      final checksums equal within a run, and equal across the two runs;
#   2. collectives_all, 4 ranks: every rank PASS;
#   3. chaos kills (train_mlp --iters 200): rank 1's agent killed mid-backward
#      of minibatch 4, rank 3's mid-all-reduce of minibatch 5, ranks 1 and 2
#      at once mid-backward of minibatch 6; each job
#      must recover (a replacement agent) and end with all 4 checksums equal
#      to the fault-free 4-rank run's; the recovery timeline is printed.
# Every job is bounded (revenant-run --timeout and timeout(1): 100 s for the
# 40-iteration runs and collectives_all, 150 s for the 200-iteration ones);
# when the first train_mlp run hangs, the rest is skipped (NOT RUN) so that a
# broken build costs little device time.
if [ "$MODE" = all ] || [ "$MODE" = gloo ]; then
  echo
  echo "=== Gloo on the cuda backend: 4 ranks on one GPU (--collectives=gloo --gpus=1)"
  GLOO_RUN="$RUN -n 4 --backend=cuda --collectives=gloo --gpus=1"
  export REVENANT_COLLECTIVE_TIMEOUT_S=30
  # gloo_sums LOG: the distinct final checksums of a job's ranks.
  gloo_sums() { sed -n 's/^\[r[0-9]*\] final checksum \([0-9a-f]*\)$/\1/p' "$1" | sort -u; }
  gloo_nsums() { grep -c "^\[r[0-9]*\] final checksum " "$1"; }
  # What the agents said about staging, collectives and recovery.
  gloo_diag() {
    grep -E "cuda-gloo|nccl .*(rank|epoch|state)|ERROR|FAIL|error|timeout|diverg|refus|replacement|epoch" "$1" |
      grep -v "revenant hostkernel" | head -"${2:-30}" | sed 's/^/   | /'
  }
  gloo_train() {  # LOG ITERS [extra revenant-run flags...]: runs train_mlp, prints a line
    local log=$1 iters=$2 t0 el rc bound=100
    shift 2
    [ "$iters" -gt 40 ] && bound=150
    t0=$(now)
    timeout $((bound + 20)) $GLOO_RUN --timeout=$bound "$@" -- "$G/apps/train_mlp.bin" \
      --iters "$iters" >"$log" 2>&1; rc=$?
    el=$(calc "$(now) - $t0")
    printf '   %s: rc=%s after %.1f s, %s/4 PASS, %s checksum line(s), distinct: %s\n' \
      "$(basename "$log")" "$rc" "$el" "$(grep -c 'PASS train_mlp' "$log")" \
      "$(gloo_nsums "$log")" "$(gloo_sums "$log" | tr '\n' ' ')"
    return $rc
  }

  gloo_hung=0
  # 0. The backend alone (no shim): a 1-rank in-place all-reduce through the
  #    staging and the stream gate, results copied back.
  log="$LOGS/gloo.cuda_backend_test.log"
  if [ -x "$G/cuda_backend_test" ]; then
    timeout 60 "$G/cuda_backend_test" --gtest_filter='*Gloo*' >"$log" 2>&1; rc=$?
    grep -E "^\[ +(OK|FAILED|RUN) +\]|Failure|cuda-gloo" "$log" | head -12 | sed 's/^/   | /'
    if [ $rc -eq 0 ] && grep -q "PASSED.*2 tests" "$log"; then s=PASS; else s="FAIL (rc=$rc)"; fi
    record "gloo cuda backend test (1 rank, no shim)" "$s" "$log"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then gloo_hung=1; fi
  else
    record "gloo cuda backend test (1 rank, no shim)" "NOT RUN (not packed)" /dev/null
  fi

  # 1. train_mlp twice (determinism).
  gloo_ref=()
  for round in 1 2; do
    [ "$gloo_hung" = 1 ] && break
    log="$LOGS/gloo.train40.$round.log"
    gloo_train "$log" 40; rc=$?
    gloo_ref[$round]=$(gloo_sums "$log" | head -1)
    if [ $rc -eq 0 ] && [ "$(grep -c 'PASS train_mlp' "$log")" -eq 4 ] &&
       [ "$(gloo_nsums "$log")" -eq 4 ] && [ "$(gloo_sums "$log" | wc -l)" -eq 1 ]; then
      s=PASS
    else
      s="FAIL (rc=$rc)"; gloo_diag "$log"
    fi
    record "gloo cuda train_mlp 4 ranks/1 GPU, run $round" "$s" "$log"
    if [ $rc -eq 124 ] || [ $rc -eq 137 ] || grep -q "timeout after" "$log"; then
      gloo_hung=1; break
    fi
  done
  if [ "$gloo_hung" = 1 ]; then
    echo "   a job hung: the rest of the gloo section is skipped"
    for item in "train_mlp deterministic (2 runs)" "collectives_all 4 ranks/1 GPU" \
                "chaos kills recovered"; do
      results+=("$(printf '%-40s %s' "gloo cuda $item" "NOT RUN (an earlier job hung)")")
    done
  else
  echo "   checksums: run 1 ${gloo_ref[1]:-none}, run 2 ${gloo_ref[2]:-none}"
  if [ -n "${gloo_ref[1]}" ] && [ "${gloo_ref[1]}" = "${gloo_ref[2]}" ]; then s=PASS; else s=FAIL; fi
  record "gloo cuda train_mlp deterministic (2 runs)" "$s" "$LOGS/gloo.train40.2.log"
  grep -m3 "cuda-gloo" "$LOGS/gloo.train40.1.log" | sed 's/^/   | /'

  # 2. collectives_all.
  log="$LOGS/gloo.collectives_all.log"
  t0=$(now)
  timeout 120 $GLOO_RUN --timeout=100 -- "$G/apps/collectives_all.bin" >"$log" 2>&1; rc=$?
  printf '   collectives_all: rc=%s after %.1f s, %s/4 PASS\n' "$rc" "$(calc "$(now) - $t0")" \
    "$(grep -c 'PASS collectives_all' "$log")"
  if [ $rc -eq 0 ] && [ "$(grep -c 'PASS collectives_all' "$log")" -eq 4 ]; then
    s=PASS
  else
    s="FAIL (rc=$rc)"; gloo_diag "$log"
  fi
  record "gloo cuda collectives_all 4 ranks/1 GPU" "$s" "$log"

  # 3. Chaos kills against the fault-free 200-iteration run.
  log="$LOGS/gloo.train200.ref.log"
  gloo_train "$log" 200; rc=$?
  ref=$(gloo_sums "$log")
  if [ $rc -eq 0 ] && [ "$(gloo_nsums "$log")" -eq 4 ] && [ "$(echo "$ref" | wc -l)" -eq 1 ] &&
     [ -n "$ref" ]; then
    s=PASS
  else
    s="FAIL (rc=$rc)"; ref=""; gloo_diag "$log"
  fi
  record "gloo cuda train_mlp 200 iterations (reference)" "$s" "$log"
  for spec in "rank=1,minibatch=4,calls=8" "rank=3,minibatch=5,calls=11,point=after_execute" \
              "rank=1,minibatch=6,calls=8;rank=2,minibatch=6,calls=8"; do
    tag=$(echo "$spec" | tr ',=;' '___')
    log="$LOGS/gloo.chaos.$tag.log"
    events="$LOGS/gloo.chaos.$tag.events.jsonl"
    gloo_train "$log" 200 --chaos="$spec" --events_file="$events"; rc=$?
    same=$(grep -c "^\[r[0-9]*\] final checksum ${ref:-none}\$" "$log")
    repl=$(grep -c "replacement agent for rank" "$log")
    echo "   chaos $spec: $repl replacement(s), $same/4 ranks equal to the reference ${ref:-none}"
    echo "   recovery timeline:"
    grep -iE "timeline|detected|agent_died|epoch|replacement|state|replay|resumed|joined| ms" "$log" |
      grep -v "revenant hostkernel" | head -30 | sed 's/^/   | /'
    if [ -s "$events" ]; then
      echo "   events ($events):"; head -40 "$events" | sed 's/^/   | /'
    fi
    if [ $rc -eq 0 ] && [ -n "$ref" ] && [ "$same" -eq 4 ] && [ "$repl" -ge 1 ]; then
      s=PASS
    else
      s="FAIL (rc=$rc)"; gloo_diag "$log" 40
    fi
    record "gloo cuda chaos $spec recovered, checksums equal" "$s" "$log"
  done
  fi  # not hung
  unset REVENANT_COLLECTIVE_TIMEOUT_S
fi
