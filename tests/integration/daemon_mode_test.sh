#!/bin/bash
# Standalone agents for jobs started by other launchers: `revenant-agent
# --gpu I` listens at a per-user path; an application with only the shim
# preloaded and LOCAL_RANK=I finds it (no Revenant environment), and
# REVENANT_DIAGNOSTICS=1 logs every submission.
set -u
agent="$1"; shim="$2"; app="$3"; kernels="$4"
root="$(mktemp -d /dev/shm/revenant-daemon-test-XXXXXX)"
trap 'kill $a0 $a1 2>/dev/null; rm -rf "$root"' EXIT
export REVENANT_DAEMON_ROOT="$root"
REVENANT_DIAGNOSTICS=1 "$agent" --gpu=0 --backend=host --host_kernels="$kernels" 2>"$root/a0.log" &
a0=$!
REVENANT_DIAGNOSTICS=1 "$agent" --gpu=1 --backend=host --host_kernels="$kernels" 2>"$root/a1.log" &
a1=$!
dir0="$root/revenant-daemon-$(id -u)/gpu0"; dir1="$root/revenant-daemon-$(id -u)/gpu1"
for _ in $(seq 200); do [ -S "$dir0/agent.sock" ] && [ -S "$dir1/agent.sock" ] && break; sleep 0.05; done
[ -S "$dir1/agent.sock" ] || { echo "FAIL: agents did not start"; cat "$root"/a*.log; exit 1; }
[ "$(stat -c %a "$root/revenant-daemon-$(id -u)")" = 700 ] || { echo "FAIL: daemon dir not 0700"; exit 1; }
env -u REVENANT_AGENT_SOCKET -u REVENANT_JOB_DIR LOCAL_RANK=1 LD_PRELOAD="$shim" "$app" >"$root/app.log" 2>&1
rc=$?
cat "$root/app.log"
[ "$rc" -eq 0 ] || { echo "FAIL: the application failed ($rc)"; cat "$root"/a*.log; exit 1; }
grep -q "PASS vector_add" "$root/app.log" || { echo "FAIL: no PASS"; exit 1; }
grep -q "submit seq .* cudaMalloc" "$root/a1.log" || { echo "FAIL: the agent of gpu1 did not serve it"; cat "$root/a1.log"; exit 1; }
if grep -q "submit seq" "$root/a0.log"; then echo "FAIL: the agent of gpu0 served LOCAL_RANK=1"; exit 1; fi
echo "ok: LOCAL_RANK=1 found the standalone agent of gpu1; diagnostics logged $(grep -c 'submit seq' "$root/a1.log") submissions"
