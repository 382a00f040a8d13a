# GPU section: recovery time on the cuda backend (sourced by .gpu/run_gpu.sh
# with MODE, G, RUN, LOGS and record; runs for MODE "all" or "recovery").
# As bench/recovery_bench.sh on the host backend: the training job's agent
# is killed mid-backward at minibatch EARLY and LATE, for two model sizes;
# printed: kill -> application resumed (from the job's events), the
# replacement's ready time (started -> it took the rank's connection) and its
# path. Data parallel: 2 ranks, Gloo staged on one GPU (rank 1 killed); lone
# rank: real NCCL, restored from its boundary snapshot. Every run must end
# with the final checksum of a fault-free run of the same job.
if [ "$MODE" = all ] || [ "$MODE" = recovery ]; then
  echo; echo "=== recovery time, cuda backend (kill -> application resumed)"
  early=100; late=10000
  printf '   %-22s %-7s %-8s %-12s %-9s %s\n' job hidden kill_at recovery_ms ready_ms path
  rec_t() {  # EVENTS EVENT -> t_us of its first line
    grep "\"$2\"" "$1" | head -1 | sed 's/.*"t_us":\([0-9]*\).*/\1/'
  }
  for job in "2 ranks gloo" "1 rank nccl"; do
    case "$job" in
      2*) n=2; victim=1; flags="--collectives=gloo --gpus=1" ;;
      *)  n=1; victim=0; flags="" ;;
    esac
    for hidden in 64 512; do
      ref="$LOGS/recovery.ref.n$n.h$hidden.log"
      timeout 200 $RUN -n $n --backend=cuda --timeout=180 $flags -- "$G/apps/train_mlp.bin" \
        --iters $((late + 3)) --hidden $hidden --batch 8 >"$ref" 2>&1
      want=$(grep -m1 "^\[r0\] final checksum" "$ref" | awk '{print $4}')
      for at in $early $late; do
        log="$LOGS/recovery.n$n.h$hidden.at$at.log"; ev="$log.events"
        timeout 200 $RUN -n $n --backend=cuda --timeout=180 $flags --events_file="$ev" \
          --chaos="rank=$victim,minibatch=$at,calls=8" -- "$G/apps/train_mlp.bin" \
          --iters $((late + 3)) --hidden $hidden --batch 8 >"$log" 2>&1; rc=$?
        got=$(grep -m1 "^\[r0\] final checksum" "$log" | awk '{print $4}')
        died=$(rec_t "$ev" agent_died); resumed=$(rec_t "$ev" application_resumed)
        started=$(rec_t "$ev" replacement_started); ready=$(rec_t "$ev" replacement_replay_started)
        path=$(grep '"replacement_started"' "$ev" | head -1 | sed 's/.*"detail":"\([a-z ]*\),.*/\1/')
        if [ -n "$died" ] && [ -n "$resumed" ] && [ -n "$started" ] && [ -n "$ready" ]; then
          ms=$(( (resumed - died) / 1000 )); rdy=$(( (ready - started) / 1000 ))
        else ms="-"; rdy="-"; fi
        printf '   %-22s %-7s %-8s %-12s %-9s %s\n' "$job" $hidden $at "$ms" "$rdy" "$path"
        if [ $rc -eq 0 ] && [ -n "$want" ] && [ "$got" = "$want" ] && [ "$ms" != "-" ]; then
          s=PASS; else s="FAIL (rc=$rc, checksum ${got:-none} vs ${want:-none})"; fi
        record "recovery time: $job, hidden $hidden, minibatch $at" "$s" "$log"
      done
    done
  done
fi
