#!/bin/bash
# One rank, default snapshots (--snapshot_every=auto): journal boundaries
# that keep the minibatch log inside its first chunk (agent/session.h,
# kLogChunkBoundaryFactor; docs/performance.md, "The minibatch log kept in
# its first chunk"). train_mlp on the host backend with the minibatch log's
# first chunk set to 1 MiB (REVENANT_JOURNAL_MINIBATCH_CHUNK_KIB, so that a
# short run fills it many times). Checks:
# - fault-free: the agent placed such boundaries, the live minibatch log at
#   exit is below the chunk, and the result is bitwise that of a run with
#   --snapshots=off;
# - with --snapshot_every=1000 (an explicit cadence: the rule is off) none
#   are placed and the log grows past the chunk (the quantity the first
#   check counts is the rule's);
# - kills at seeded request counts and points: the replacement restores the
#   last of these boundaries' snapshots and replays, bitwise.
#   log_chunk_boundary_test.sh RUN APP KERNELS [TRIALS=4] [SEED=20261206]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-4}"; seed="${5:-20261206}"
iters=1500
common=(-n 1 --backend=host --timeout=150 --recovery_timeout=30 --host_kernels="$kernels")
export REVENANT_JOURNAL_MINIBATCH_CHUNK_KIB=1024
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
checksum() { sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$1"; }

"$run" "${common[@]}" --snapshots=off -- "$app" --iters "$iters" >"$tmp/off.log" 2>&1 || {
  echo "FAIL: the run with --snapshots=off failed"; tail -30 "$tmp/off.log"; exit 1; }
ref=$(checksum "$tmp/off.log")
[ -n "$ref" ] || { echo "FAIL: no checksum with --snapshots=off"; exit 1; }

# The rule's time condition (at least REVENANT_JOURNAL_LOG_CHUNK_BOUNDARY,
# default 100, times the last such boundary's duration since it) depends on
# the machine's load; factor 1 leaves the count to the log's bytes.
REVENANT_JOURNAL_LOG_CHUNK_BOUNDARY=1 REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/auto.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; grep -v "submit seq" "$tmp/auto.log" | tail -30; exit 1; }
total=$(grep -c "submit seq" "$tmp/auto.log")
snap=$(grep -o "snapshots at exit.*" "$tmp/auto.log")
journal=$(grep -o "journal at exit.*" "$tmp/auto.log")
kept=$(echo "$snap" | sed -n 's/.*; \([0-9]*\) journal boundaries keeping the minibatch log.*/\1/p')
log_bytes=$(echo "$journal" | sed -n 's/.*, minibatch \([0-9]*\) bytes,.*/\1/p')
echo "fault-free, $iters steps: $total requests, checksum $(checksum "$tmp/auto.log") (--snapshots=off: $ref)"
echo "  $snap"
echo "  $journal"
[ "$(checksum "$tmp/auto.log")" = "$ref" ] || {
  echo "FAIL: the default snapshots changed the result"; fails=$((fails + 1)); }
if [ "${kept:-0}" -lt 5 ] || [ "${log_bytes:-1048576}" -ge 1048576 ]; then
  echo "FAIL: expected at least 5 journal boundaries keeping the log in its 1 MiB chunk and a log below it at exit (boundaries: ${kept:-?}, log: ${log_bytes:-?} bytes)"
  fails=$((fails + 1))
fi

"$run" "${common[@]}" --snapshot_every=1000 -- "$app" --iters "$iters" >"$tmp/every.log" 2>&1 || {
  echo "FAIL: the run with --snapshot_every=1000 failed"; tail -30 "$tmp/every.log"; exit 1; }
every_kept=$(grep -o "snapshots at exit.*" "$tmp/every.log" |
  sed -n 's/.*; \([0-9]*\) journal boundaries keeping the minibatch log.*/\1/p')
every_log=$(grep -o "journal at exit.*" "$tmp/every.log" | sed -n 's/.*, minibatch \([0-9]*\) bytes,.*/\1/p')
echo "--snapshot_every=1000: ${every_kept:-?} such boundaries, minibatch log ${every_log:-?} bytes at exit"
[ "$(checksum "$tmp/every.log")" = "$ref" ] || {
  echo "FAIL: --snapshot_every=1000 changed the result"; fails=$((fails + 1)); }
if [ "${every_kept:-1}" -ne 0 ] || [ "${every_log:-0}" -lt 1048576 ]; then
  echo "FAIL: with an explicit cadence expected no such boundary and a log past the chunk"
  fails=$((fails + 1))
fi

echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
for t in $(seq 1 "$trials"); do
  c=$((total / 2 + RANDOM % (total / 3))); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$iters" >"$tmp/trial.log" 2>&1
  rc=$?
  replayed=$(sed -n 's/.*recovered: replayed \([0-9]*\) requests.*/\1/p' "$tmp/trial.log" | head -1)
  if [ "$rc" -eq 0 ] && [ "$(checksum "$tmp/trial.log")" = "$ref" ] && [ -n "$replayed" ]; then
    echo "ok   trial $t [$spec]: bitwise equal, $replayed requests replayed"
  else
    echo "FAIL trial $t [$spec]: rc=$rc, replayed: ${replayed:-none}, checksum $(checksum "$tmp/trial.log")"
    grep -v "revenant hostkernel\|snapshot of minibatch\|submit seq" "$tmp/trial.log" | tail -40
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
