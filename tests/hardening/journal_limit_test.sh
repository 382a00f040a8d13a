#!/bin/bash
# A journal that reaches its size limit, as on a full file system: an
# application whose calls never reach a minibatch boundary keeps every call
# in its journal. The agent warns as the journal grows (16 KiB, then each
# doubling), and at the limit (64 KiB; REVENANT_JOURNAL_MAX_KIB, which fails
# appends exactly as ENOSPC does) it stops taking requests: the application
# gets cudaErrorDevicesUnavailable at once with the reason, the agent exits
# with status 70, and the journal left behind verifies clean, holding the
# calls the application was told succeeded and nothing half-written.
# Then the same under revenant-run, where recovery is on: an agent that stops
# this way is not replaced, so the application's call in flight must fail at
# once too, not wait out the recovery timeout for a replacement.
#   journal_limit_test.sh <revenant-agent> <librevenant_shim.so> <misbehave_app> <revenant-journal> <revenant-run>
set -u
agent="$1"; shim="$2"; app="$3"; rj="$4"; run="$5"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
root="$(mktemp -d /dev/shm/rvjlimit-XXXXXX)"
agent_pid=
cleanup() { [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$root"; }
trap cleanup EXIT

rank_dir="$root/rank0"
mkdir -m 0700 "$rank_dir"
sock="$rank_dir/agent.sock"
REVENANT_JOURNAL_WARN_KIB=16 REVENANT_JOURNAL_MAX_KIB=64 \
  "$agent" --socket="$sock" --job_dir="$rank_dir" --rank=0 --backend=host >"$root/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$root/agent.log"; echo "FAIL: the agent did not listen within 10 s"; exit 1; }

start=$(date +%s)
REVENANT_AGENT_SOCKET="$sock" REVENANT_JOB_DIR="$rank_dir" LD_PRELOAD="$shim" \
  timeout 120 "$app" mallocs 20000 >"$root/app.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
failed_at=$(grep -o 'FAIL cudaMalloc [0-9]*' "$root/app.out" | grep -o '[0-9]*$')
if [ $rc -eq 1 ] && [ -n "$failed_at" ] && grep -q "cudaErrorDevicesUnavailable" "$root/app.out"; then
  ok "the application's cudaMalloc $failed_at failed with cudaErrorDevicesUnavailable (after ${took} s)"
else
  fail "the application: rc $rc: $(tail -3 "$root/app.out" | tr '\n' ' ')"
fi
if grep -q "dropped this process: the agent of rank 0 cannot journal and stops taking requests: RESOURCE_EXHAUSTED: journal in .* is full" "$root/app.out"; then
  ok "the application was told why: $(grep -m1 -o 'dropped this process.*is full' "$root/app.out")"
else
  fail "no reason in the application's output: $(grep shim "$root/app.out" | tail -2 | tr '\n' ' ')"
fi
[ "$took" -le 30 ] && ok "the application was not left waiting (${took} s)" ||
  fail "the application took ${took} s"

# The agent stopped (status 70) and logged the warnings and the reason.
for _ in $(seq 100); do kill -0 "$agent_pid" 2>/dev/null || break; sleep 0.1; done
wait "$agent_pid"; arc=$?; agent_pid=
[ $arc -eq 70 ] && ok "the agent stopped with status 70" || fail "the agent's status: $arc"
warnings=$(grep -c "no minibatch boundary yet" "$root/agent.log")
# 16, 32 and 64 KiB: the warnings at 16 and 32 KiB come before the limit.
[ "$warnings" -ge 2 ] && grep -q "the agent stops at its limit of 65536 bytes" "$root/agent.log" &&
  ok "$warnings warnings as the journal grew: $(grep -m1 -o 'holds [0-9]* bytes.*yet' "$root/agent.log")" ||
  fail "warnings: $warnings; $(grep journal "$root/agent.log" | head -3 | tr '\n' ' ')"
grep -q "journaling failed, stopping: .*RESOURCE_EXHAUSTED" "$root/agent.log" &&
  ok "the agent logged why it stopped" || fail "no reason in the agent's log"

# The journal: clean, every call the application was told succeeded, and no
# more than the one whose outcome could not be journaled.
out=$("$rj" verify "$rank_dir/journal" 2>&1); vrc=$?
[ $vrc -eq 0 ] && ok "revenant-journal verify: $out" || fail "verify: rc $vrc: $out"
journaled=$("$rj" dump "$rank_dir/journal" 2>/dev/null | grep -c " api=cudaMalloc ")
told=$(( ${failed_at:-1} - 1 ))
if [ "$journaled" -eq "$told" ] || [ "$journaled" -eq $((told + 1)) ]; then
  ok "the journal holds $journaled cudaMalloc requests; the application was told $told succeeded"
else
  fail "the journal holds $journaled cudaMalloc requests; the application was told $told succeeded"
fi

# Under revenant-run (recovery on, --recovery_timeout=60): the call in flight
# when the agent stopped fails at once, and the job ends with the reason.
mkdir -m 0700 "$root/job"
start=$(date +%s)
REVENANT_JOURNAL_WARN_KIB=16 REVENANT_JOURNAL_MAX_KIB=64 \
  timeout 120 "$run" -n 1 --backend=host --timeout=100 --recovery_timeout=60 \
  --job_root="$root/job" -- "$app" mallocs 20000 >"$root/run.out" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "FAIL cudaMalloc [0-9]*.*cudaErrorDevicesUnavailable\|cudaErrorDevicesUnavailable" "$root/run.out" &&
   [ "$took" -le 30 ]; then
  ok "under revenant-run the application failed at once (rc $rc after ${took} s)"
else
  fail "under revenant-run: rc $rc after ${took} s: $(grep -E 'shim|revenant-run' "$root/run.out" | tail -4 | tr '\n' ' ')"
fi
[ "$fails" -eq 0 ] || { echo "--- agent log:"; tail -20 "$root/agent.log"; echo "FAIL: $fails check(s)"; exit 1; }
echo "ok: the journal's limit stops the agent cleanly"
