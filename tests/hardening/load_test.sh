#!/bin/bash
# Load test: 4 ranks (host backend) x 8 application threads x mixed calls for
# a fixed time, then a burst larger than the request ring. Fails when a
# request is lost, duplicated or reordered (the program checks on the
# device), when the job does not finish within --timeout (a deadlock), or
# when an agent's resident memory or a rank's journal keeps growing under
# steady load.
#   load_test.sh <revenant-run> <load program> <host kernels> [seconds] [ranks]
set -u
run="$1"; app="$2"; kernels="$3"; seconds="${4:-10}"; ranks="${5:-4}"
# Bounds during the steady phase (3 s into the load to 1 s before its end).
# The working set (rings, staging, device pages touched) is in place after the
# first second: measured growth is under 100 kB, so 8 MiB is far below a leak
# of a few bytes per call (~50k calls/s per agent). Each thread of the
# program marks a minibatch boundary every 256 of its steps, so each rank's
# journal (on tmpfs, i.e. memory) holds only the current minibatch: measured
# < 1 MiB of records (du also counts the mapped logs' preallocated chunks).
max_growth_kb=$((8 * 1024))
max_journal_growth_kb=$((16 * 1024))
max_journal_kb=$((48 * 1024))
root="$(mktemp -d /dev/shm/rvload-XXXXXX)"
out="$root.out"
# The ranks' programs start their steady phase together when sync/go
# exists and leave it (after `seconds`) only once sync/end does: the samples
# below are steady-state ones however late this script runs on a loaded
# machine. sync/burst appears when a rank leaves it.
sync="$root.sync"
mkdir -p "$sync"
cleanup() { [ -n "${job_pid:-}" ] && kill "$job_pid" 2>/dev/null; rm -rf "$root" "$out" "$sync"; }
trap cleanup EXIT
echo "load: $ranks ranks x 8 threads for ${seconds}s (job root $root)"
# The job runs niced: its 8 threads a rank and its agents keep both CPUs
# busy, and this script's samples (a fork each) should come near their time.
nice -n 10 "$run" -n "$ranks" --backend=host --timeout=$((seconds * 6 + 60)) --job_root="$root" \
  --host_kernels="$kernels" -- "$app" "$seconds" --sync_dir="$sync" >"$out" 2>&1 &
job_pid=$!

# The agent's anonymous memory (heap, stacks): what a leak grows. Its mapped
# journal and shared channel pages (tmpfs: RssShmem) come and go with the
# journal's segments and are bounded by the journal check below.
rss_kb() { awk '/^RssAnon:/ {print $2}' "/proc/$1/status" 2>/dev/null; }
journal_kb() { for d in "$root"/revenant-*/rank*/journal; do du -sk "$d" | cut -f1; done | sort -n | tail -1; }
agent_pids() { cat "$root"/revenant-*/rank*/agent.pid 2>/dev/null; }
# Every wait is bounded: 30 s for the agents to appear.
for _ in $(seq 300); do [ "$(agent_pids | wc -l)" -ge "$ranks" ] && break; sleep 0.1; done
pids=$(agent_pids)
[ "$(echo "$pids" | wc -w)" -ge "$ranks" ] || { cat "$out"; echo "FAIL: agents did not start"; exit 1; }
# Every rank's program up (60 s at most), then all start together.
n_ready() { ls "$sync" | grep -c '^ready\.'; }
for _ in $(seq 600); do [ "$(n_ready)" -ge "$ranks" ] && break; sleep 0.1; done
[ "$(n_ready)" -ge "$ranks" ] || { cat "$out"; echo "FAIL: $(n_ready) of $ranks programs came up in 60 s"; exit 1; }
touch "$sync/go"
# Samples inside the steady phase: 3 s after the start and 1 s before the
# load's end (or later: the programs stay steady until sync/end).
t0=$(date +%s%N)
ms_since() { echo $(( ($(date +%s%N) - t0) / 1000000 )); }
sample() {  # $1: the array to fill with each agent's RSS; then the journal
  local -n into="$1"
  for p in $pids; do into[$p]=$(rss_kb "$p"); done
  sampled_journal_kb=$(journal_kb)
  sampled_ms=$(ms_since)
}
declare -A early last
while [ "$(ms_since)" -lt 3000 ]; do sleep 0.1; done
sample early; journal_early_kb=$sampled_journal_kb; early_ms=$sampled_ms
echo "load: agent anonymous RSS at $early_ms ms (kB): $(for p in $pids; do echo -n "${early[$p]} "; done)"
echo "load: largest rank journal at $early_ms ms: ${journal_early_kb:-?} kB"
while [ "$(ms_since)" -lt $(( (seconds - 1) * 1000 )) ] && kill -0 "$job_pid" 2>/dev/null; do
  sleep 0.1
done
sample last; journal_kb=$sampled_journal_kb
echo "load: largest rank journal at $sampled_ms ms: ${journal_kb:-?} kB"
echo "load: agent anonymous RSS at $sampled_ms ms (kB): $(for p in $pids; do echo -n "${last[$p]:-?} "; done)"
# A burst before this point would make the samples meaningless.
[ -e "$sync/burst" ] && { echo "FAIL: a rank left the steady phase before it was sampled"; exit 1; }
touch "$sync/end"
wait "$job_pid"; rc=$?; job_pid=
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: the job exited with $rc"; exit 1; }
n_pass=$(grep -c "^\[r[0-9]*\] PASS hardening_load" "$out")
[ "$n_pass" -eq "$ranks" ] || { echo "FAIL: $n_pass of $ranks ranks passed"; exit 1; }
[ -e "$sync/burst" ] || { echo "FAIL: no rank marked its burst ($sync/burst)"; exit 1; }
for p in $pids; do
  e=${early[$p]:-}; l=${last[$p]:-}
  [ -n "$e" ] && [ -n "$l" ] || { echo "FAIL: no RSS samples for agent $p"; exit 1; }
  if [ $((l - e)) -gt "$max_growth_kb" ]; then
    echo "FAIL: agent $p grew from $e kB to $l kB under steady load"; exit 1
  fi
done
# The journal in steady state: no growth beyond one large minibatch between the
# samples (a journal that keeps every call grows by tens of MiB in those
# 6 s), and never more than the absolute bound (du counts the mapped logs'
# preallocated chunks: a minibatch log and its spare take 16 MiB each, and it spills into 16 MiB chunks when one
# minibatch is large).
[ -n "$journal_kb" ] && [ -n "$journal_early_kb" ] ||
  { echo "FAIL: no journal size samples"; exit 1; }
[ $((journal_kb - journal_early_kb)) -le "$max_journal_growth_kb" ] ||
  { echo "FAIL: a rank's journal grew from $journal_early_kb kB to $journal_kb kB under steady load (bound $max_journal_growth_kb kB)"; exit 1; }
[ "$journal_kb" -le "$max_journal_kb" ] ||
  { echo "FAIL: a rank's journal holds $journal_kb kB in steady state (bound $max_journal_kb kB)"; exit 1; }
awk -v ranks="$ranks" '/LOAD calls=/ {
    for (i = 1; i <= NF; ++i) { split($i, kv, "="); v[kv[1]] = kv[2] }
    calls += v["calls"]; if (v["seconds"] > secs) secs = v["seconds"]; threads = v["threads"] }
  END { printf "load: %d calls in %.2f s = %.0f calls/s (%d ranks x %d threads)\n",
        calls, secs, calls / secs, ranks, threads }' "$out"
echo "ok: no request lost, duplicated or reordered; ring-sized bursts blocked and arrived; agent RSS and journal bounded"
