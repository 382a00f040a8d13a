#!/bin/bash
# Kills the agent while the application is blocked in cudaStreamSynchronize:
# the call must return cudaErrorDevicesUnavailable within a bound (no hang,
# no crash), and later calls must fail fast.
set -u
agent="$1"; shim="$2"; app="$3"; kernels="$4"
dir="$(mktemp -d /dev/shm/revenant-test-XXXXXX)"
chmod 700 "$dir"
trap 'kill -9 $apid $agent_pid 2>/dev/null; rm -rf "$dir"' EXIT
"$agent" --socket="$dir/agent.sock" --job_dir="$dir" --host_kernels="$kernels" 2>"$dir/agent.log" &
agent_pid=$!
for _ in $(seq 200); do [ -S "$dir/agent.sock" ] && break; sleep 0.05; done
[ -S "$dir/agent.sock" ] || { echo "FAIL: agent did not start"; cat "$dir/agent.log"; exit 1; }
REVENANT_AGENT_SOCKET="$dir/agent.sock" REVENANT_JOB_DIR="$dir" LD_PRELOAD="$shim" \
  "$app" >"$dir/app.out" 2>&1 &
apid=$!
for _ in $(seq 400); do grep -q blocked "$dir/app.out" 2>/dev/null && break; sleep 0.05; done
grep -q blocked "$dir/app.out" || { echo "FAIL: app never blocked"; cat "$dir/app.out"; exit 1; }
sleep 0.3
kill -9 "$agent_pid"
# The application must finish well within 5 s of the kill.
for _ in $(seq 100); do kill -0 "$apid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$apid" 2>/dev/null; then echo "FAIL: application still blocked 5 s after the agent died"; cat "$dir/app.out"; exit 1; fi
wait "$apid"; rc=$?
cat "$dir/app.out"
[ "$rc" -eq 0 ] || { echo "FAIL: application exited with $rc"; exit 1; }
ms=$(sed -n 's/.*returned cudaErrorDevicesUnavailable after \([0-9]*\) ms.*/\1/p' "$dir/app.out" | head -1)
echo "blocked call returned $ms ms after it started (agent killed ~300 ms in)"
echo "ok"
