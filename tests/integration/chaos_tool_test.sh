#!/bin/bash
# revenant-chaos aimed at a running job by its id: the agent of rank 1 of a
# 2-rank training job is killed from outside while it trains; the job must
# recover and end with the fault-free final checksum.
set -u
run="$1"; chaos="$2"; app="$3"; kernels="$4"
tmp="$(mktemp -d)"; trap 'kill $job_pid 2>/dev/null; rm -rf "$tmp"' EXIT
common=(-n 2 --backend=host --timeout=120 --host_kernels="$kernels")
"$run" "${common[@]}" -- "$app" --iters 300 >"$tmp/ref.log" 2>&1 || { cat "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
"$run" "${common[@]}" -- "$app" --iters 300 >"$tmp/run.log" 2>&1 &
job_pid=$!
for _ in $(seq 200); do grep -q "^\[revenant-run\] job " "$tmp/run.log" && break; sleep 0.05; done
job=$(sed -n 's/^\[revenant-run\] job \([0-9a-f]*\): .*/\1/p' "$tmp/run.log" | head -1)
[ -n "$job" ] || { echo "FAIL: no job id"; cat "$tmp/run.log"; exit 1; }
# Let it train for a second (its output is buffered), then kill rank 1's
# agent from outside.
"$chaos" --job="$job" --rank=1 --delay_ms=1000 || { echo "FAIL: revenant-chaos failed"; exit 1; }
wait "$job_pid"; rc=$?
cat "$tmp/run.log" | grep -E "revenant-run|checksum"
[ "$rc" -eq 0 ] || { echo "FAIL: the job exited with $rc"; exit 1; }
grep -q "replacement agent for rank 1" "$tmp/run.log" || { echo "FAIL: no recovery happened"; exit 1; }
[ "$(grep -c "final checksum $ref\$" "$tmp/run.log")" -eq 2 ] || { echo "FAIL: checksum differs from $ref"; exit 1; }
echo "ok: killed from outside, recovered, final checksum $ref on both ranks"
