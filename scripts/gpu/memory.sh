# GPU section: what memory a job loses to Revenant (runs for MODE "all" or
# "memory"; sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS and the helpers
# record, native, now, calc).
#
# train_mlp with 50 MiB of state (--hidden 4096 --batch 1024), 1 rank, natively
# and under revenant-run --backend=cuda (default snapshots, journal on): the
# device memory in use sampled by nvidia-smi every 50 ms (peak minus the idle
# reading before the job), and from the agent's own exit lines its host memory
# (resident and peak), journal bytes and snapshot bytes per boundary (the
# live allocations it wrote).
if [ "$MODE" = all ] || [ "$MODE" = memory ]; then
  echo
  echo "=== memory: device memory in use (nvidia-smi), agent host memory, journal and snapshot bytes"
  export NCCL_NVLS_ENABLE=0
  gpu_used() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -n 1; }
  gpu_total=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
  peak_of() {  # LOG CMD...: runs CMD, prints the peak device memory used (MiB) while it ran
    local log=$1 base peak v pid; shift
    base=$(gpu_used); peak=$base
    "$@" >"$log" 2>&1 &
    pid=$!
    while kill -0 "$pid" 2>/dev/null; do
      v=$(gpu_used); [ -n "$v" ] && [ "$v" -gt "$peak" ] && peak=$v
      sleep 0.05
    done
    wait "$pid"; echo "$? $base $peak"
  }
  margs=(--iters 300 --hidden 4096 --batch 1024)
  read -r nrc nbase npeak < <(peak_of "$LOGS/memory.native.log" \
    env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) \
    timeout 150 "$G/apps/train_mlp.bin" "${margs[@]}")
  read -r rrc rbase rpeak < <(peak_of "$LOGS/memory.cuda.log" \
    timeout 200 $RUN -n 1 --backend=cuda --timeout=180 -- "$G/apps/train_mlp.bin" "${margs[@]}")
  nused=$((npeak - nbase)); rused=$((rpeak - rbase)); extra=$((rused - nused))
  printf '   device memory in use, peak: native %d MiB, revenant %d MiB: %+d MiB (%.2f %% of %d MiB)\n' \
    "$nused" "$rused" "$extra" "$(calc "100 * $extra / $gpu_total")" "$gpu_total"
  grep -E "host memory at exit|journal at exit|snapshots at exit|captured uploads at exit" \
    "$LOGS/memory.cuda.log" | sed 's/^/   | /'
  if [ "$nrc" -eq 0 ] && [ "$rrc" -eq 0 ] && [ "$extra" -le 512 ] &&
     [ "$(calc "($extra * 100 <= $gpu_total) ? 1 : 0")" = 1 ]; then s=PASS
  else s="FAIL (rc $nrc/$rrc, $extra MiB more than native)"; fi
  record "memory: device memory lost to Revenant <= 512 MiB and <= 1 %" "$s" "$LOGS/memory.cuda.log"
fi
