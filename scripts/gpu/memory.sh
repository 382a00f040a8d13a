# GPU section: what memory a job loses to Revenant (runs for MODE "all" or
# "memory"; sourced by .gpu/run_gpu.sh with MODE, G, RUN, LOGS and the helpers
# record, native, now, calc).
#
# train_mlp with 50 MiB of state (--hidden 4096 --batch 1024), 1 rank, natively
# and under revenant-run --backend=cuda (default snapshots, journal on): the
# device memory in use sampled by nvidia-smi every 50 ms (peak minus the idle
# reading before the job), and from the agent's own exit lines its host memory
# (resident and peak), journal bytes and snapshot bytes per boundary (the
# live allocations it wrote). The same for PyTorch's mlp_ddp where the
# machine has torch (its live bytes put the snapshots' device spare at its
# default bound), in MEM_TORCH_PAIRS pairs (default 3; the row is the median
# of the pairs' differences), with MEM_TORCH_ARM's revenant-run flags as a
# third run in each pair where set. Last, bench/map_piece_bench: what one
# munmap of a resident 684 MiB file makes another thread's mmap wait,
# against the agent's unmapping in pieces.
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
  mem_row() {  # WHAT LOG NRC NBASE NPEAK RRC RBASE RPEAK: prints and records one comparison
    local what=$1 log=$2 extra s
    extra=$(( ($8 - $7) - ($5 - $4) ))
    printf '   %sdevice memory in use, peak: native %d MiB, revenant %d MiB: %+d MiB (%.2f %% of %d MiB)\n' \
      "${what:+$what, }" "$(($5 - $4))" "$(($8 - $7))" "$extra" "$(calc "100 * $extra / $gpu_total")" "$gpu_total"
    if [ "$3" -eq 0 ] && [ "$6" -eq 0 ] && [ "$extra" -le 512 ] &&
       [ "$(calc "($extra * 100 <= $gpu_total) ? 1 : 0")" = 1 ]; then s=PASS
    else s="FAIL (rc $3/$6, $extra MiB more than native)"; fi
    local label="memory: device memory lost to Revenant"
    [ -n "$what" ] && label="memory: $what device memory lost"
    record "$label <= 512 MiB and <= 1 %" "$s" "$log"
  }
  margs=(--iters 300 --hidden 4096 --batch 1024)
  read -r nrc nbase npeak < <(peak_of "$LOGS/memory.native.log" \
    env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + RANDOM % 20000)) \
    timeout 150 "$G/apps/train_mlp.bin" "${margs[@]}")
  read -r rrc rbase rpeak < <(peak_of "$LOGS/memory.cuda.log" \
    timeout 200 $RUN -n 1 --backend=cuda --timeout=180 -- "$G/apps/train_mlp.bin" "${margs[@]}")
  mem_row "" "$LOGS/memory.cuda.log" "$nrc" "$nbase" "$npeak" "$rrc" "$rbase" "$rpeak"
  grep -E "host memory at exit|journal at exit|snapshots at exit|snapshot memory at exit|snapshot files without the spare|captured uploads at exit" \
    "$LOGS/memory.cuda.log" | sed 's/^/   | /'
  # The same for PyTorch (tests/torch/mlp_ddp.py, 1 rank, 300 steps: ~550-680
  # MiB live, so the snapshots' device spare is at its default bound), where
  # the GPU machine has it.
  PY="${TORCH_PYTHON:-python3}"
  if "$PY" -c 'import torch' 2>/dev/null; then
    sp=$("$PY" -c 'import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))')
    tlib="$LD_LIBRARY_PATH"
    for d in "$sp"/nvidia/cu13/lib "$sp"/nvidia/cudnn/lib "$sp"/nvidia/cublas/lib; do
      [ -d "$d" ] && tlib="$tlib:$d"
    done
    # MEM_TORCH_STEPS (default 1200): long enough for the asynchronous
    # snapshots of the steady state (their device spare), which a 300-step run
    # no longer reaches with the log's bound by the state (554 MiB: the first
    # from ~415 MiB of input, ~375 steps); a Revenant run without one fails
    # the row (not the steady state's memory).
    targs=("$G/torch/mlp_ddp.py" --steps "${MEM_TORCH_STEPS:-1200}")
    # MEM_TORCH_PAIRS pairs (default 3): PyTorch's own peak moves by ~130 MiB
    # from run to run (native 1803 and 1933 MiB on one machine), so the row
    # takes the median of the pairs' differences. MEM_TORCH_ARM: revenant-run
    # flags of a third run in each pair (printed, not recorded).
    pairs=${MEM_TORCH_PAIRS:-3}
    [ "$pairs" -ge 1 ] 2>/dev/null || pairs=1
    extras=(); rc_ok=1; async_ok=1
    for p in $(seq 1 "$pairs"); do
      read -r nrc nbase npeak < <(peak_of "$LOGS/memory.torch.native.$p.log" \
        env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 \
        MASTER_PORT=$((20000 + RANDOM % 20000)) timeout 200 "$PY" "${targs[@]}")
      read -r rrc rbase rpeak < <(peak_of "$LOGS/memory.torch.cuda.$p.log" \
        env LD_LIBRARY_PATH="$tlib" timeout 250 $RUN -n 1 --backend=cuda --timeout=220 -- "$PY" "${targs[@]}")
      e=$(( (rpeak - rbase) - (npeak - nbase) ))
      extras+=("$e")
      { [ "$nrc" -eq 0 ] && [ "$rrc" -eq 0 ]; } || rc_ok=0
      na=$(sed -n 's/.*; \([0-9]*\) asynchronous (inside.*/\1/p' "$LOGS/memory.torch.cuda.$p.log" | tail -n 1)
      [ "${na:-0}" -ge 1 ] 2>/dev/null || async_ok=0
      printf '   PyTorch mlp_ddp pair %d: device memory in use, peak: native %d MiB, revenant %d MiB: %+d MiB (rc %d/%d; %s asynchronous snapshots)\n' \
        "$p" "$((npeak - nbase))" "$((rpeak - rbase))" "$e" "$nrc" "$rrc" "${na:-?}"
      if [ -n "${MEM_TORCH_ARM:-}" ]; then
        read -r xrc xbase xpeak < <(peak_of "$LOGS/memory.torch.arm.$p.log" \
          env LD_LIBRARY_PATH="$tlib" timeout 250 $RUN -n 1 --backend=cuda --timeout=220 $MEM_TORCH_ARM \
          -- "$PY" "${targs[@]}")
        printf '   PyTorch mlp_ddp pair %d [%s]: revenant %d MiB: %+d MiB against the pair'"'"'s native (rc %d)\n' \
          "$p" "$MEM_TORCH_ARM" "$((xpeak - xbase))" "$(( (xpeak - xbase) - (npeak - nbase) ))" "$xrc"
      fi
    done
    med=$(printf '%s\n' "${extras[@]}" | median)
    printf '   PyTorch mlp_ddp, device memory lost, median of %d pair(s): %+.0f MiB (%.2f %% of %d MiB)\n' \
      "$pairs" "$med" "$(calc "100 * $med / $gpu_total")" "$gpu_total"
    if [ "$rc_ok" = 1 ] && [ "$async_ok" = 1 ] &&
       [ "$(calc "($med <= 512 && $med * 100 <= $gpu_total) ? 1 : 0")" = 1 ]; then s=PASS
    else s="FAIL (median $med MiB more than native; every run rc 0: $rc_ok; an asynchronous snapshot in every Revenant run: $async_ok)"; fi
    record "memory: PyTorch mlp_ddp device memory lost <= 512 MiB and <= 1 % (median of pairs)" "$s" \
      "$LOGS/memory.torch.cuda.1.log"
    grep -E "device spare|snapshot memory at exit|snapshot files without the spare" "$LOGS/memory.torch.cuda.1.log" | sed 's/^/   | /'
  else
    echo "   PyTorch mlp_ddp: not measured (no torch for $PY)"
  fi
  # What dropping a snapshot-sized mapping whole makes another thread wait,
  # against in pieces (the agent's way, common/populate.h), on this host.
  timeout 120 "$G/bench/map_piece_bench" --mib 684 --rounds 3 >"$LOGS/map_piece.log" 2>&1; rc=$?
  if [ $rc -eq 0 ] && grep -q "RESULT map_piece_unmap_worst_ratio" "$LOGS/map_piece.log"; then s=PASS
  else s="FAIL (rc=$rc)"; fi
  record "memory: a 684 MiB mapping dropped whole and in pieces (map_piece_bench)" "$s" "$LOGS/map_piece.log"
  sed 's/^/   | /' "$LOGS/map_piece.log"
fi
