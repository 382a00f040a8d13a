#!/bin/bash
# A corrupt journal is never replayed: the agent of a single-rank program is
# killed after its journal was damaged on purpose; the replacement must
# refuse to recover with a data-loss error, and the program's calls must
# fail cleanly (cudaErrorDevicesUnavailable), bounded, without wrong results.
set -u
run="$1"; chaos="$2"; app="$3"; kernels="$4"
tmp="$(mktemp -d)"; trap 'kill $job_pid 2>/dev/null; rm -rf "$tmp"' EXIT
"$run" -n 1 --backend=host --timeout=60 --recovery_timeout=10 --host_kernels="$kernels" \
  -- "$app" 400 10 >"$tmp/run.log" 2>&1 &
job_pid=$!
for _ in $(seq 200); do grep -q "^\[revenant-run\] job " "$tmp/run.log" && break; sleep 0.05; done
job=$(sed -n 's/^\[revenant-run\] job \([0-9a-f]*\): .*/\1/p' "$tmp/run.log" | head -1)
[ -n "$job" ] || { echo "FAIL: no job id"; cat "$tmp/run.log"; exit 1; }
sleep 1
log=$(ls /dev/shm/revenant-"$job"/rank0/journal/setup-*.log | head -1)
[ -f "$log" ] || { echo "FAIL: no setup log"; exit 1; }
# Flip one byte inside the first block's records (past the segment header).
size=$(stat -c %s "$log")
off=$(( size > 600 ? 400 : size / 2 ))
printf '\xff' | dd of="$log" bs=1 seek="$off" conv=notrunc status=none
"$chaos" --job="$job" --rank=0 || { echo "FAIL: revenant-chaos failed"; exit 1; }
wait "$job_pid"; rc=$?
grep -E "revenant-run|cannot recover|DATA_LOSS|FAIL|PASS" "$tmp/run.log" | head -20
[ "$rc" -ne 0 ] || { echo "FAIL: the job succeeded on a corrupt journal"; exit 1; }
grep -q "cannot recover rank 0: DATA_LOSS" "$tmp/run.log" || { echo "FAIL: no data-loss refusal"; exit 1; }
grep -q "cudaErrorDevicesUnavailable" "$tmp/run.log" || { echo "FAIL: the application did not get a clear error"; exit 1; }
if grep -q "PASS recovery_loop" "$tmp/run.log"; then echo "FAIL: the program passed"; exit 1; fi
echo "ok: corrupt journal refused (data loss), application failed cleanly with rc=$rc"
