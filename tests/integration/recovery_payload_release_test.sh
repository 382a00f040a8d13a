#!/bin/bash
# Journal payloads released behind a one-rank job's finished snapshots
# (docs/journal_format.md, "Released payloads"): a loop of 3 MiB uploads from
# pageable memory (tests/integration/upload_loop.cu `pageable`, host backend),
# whose bytes are journaled as payloads in the minibatch log, under the
# default snapshots with a small --snapshot_max_log_mib. Checks:
# - fault-free: the agent writes release markers and frees payload pages
#   behind its asynchronous snapshots, and the result is bitwise equal to a
#   run whose snapshots are all synchronous (no releases there);
# - with --snapshot_every=1000 (no timed snapshots), the payloads alone make
#   asynchronous snapshots due from three quarters of the bound, and the bound
#   forces few journal boundaries;
# - kills at seeded request counts past the first releases: the replacement
#   reads a minibatch log with release markers, skips the released entries
#   (they precede the snapshot it loads), replays the rest, bitwise equal.
#   recovery_payload_release_test.sh RUN APP KERNELS [TRIALS=5] [SEED=20261212]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-5}"; seed="${5:-20261212}"
steps=64; mib=3
common=(-n 1 --backend=host --timeout=120 --recovery_timeout=20 --host_kernels="$kernels"
        --snapshot_max_log_mib=16)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0

REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" "$steps" "$mib" pageable \
  >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; grep -v "submit seq" "$tmp/ref.log" | tail -30; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
total=$(grep -c "submit seq" "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; exit 1; }
line=$(grep -o "journal at exit.*" "$tmp/ref.log")
markers=$(echo "$line" | sed -n 's/.*release markers \([0-9]*\).*/\1/p')
freed=$(echo "$line" | sed -n 's/.*payload pages freed behind snapshots \([0-9]*\) MiB.*/\1/p')
echo "fault-free, $steps pageable uploads of $mib MiB: $total requests, checksum $ref"
echo "  $line"
echo "  $(grep -o "snapshots at exit.*" "$tmp/ref.log")"
if [ "${markers:-0}" -lt 2 ] || [ "${freed:-0}" -lt "$mib" ]; then
  echo "FAIL: expected release markers and freed payload pages (markers: ${markers:-?}, freed: ${freed:-?} MiB)"
  fails=$((fails + 1))
fi

"$run" "${common[@]}" --snapshot_async=false -- "$app" "$steps" "$mib" pageable \
  >"$tmp/sync.log" 2>&1 || { echo "FAIL: the run with synchronous snapshots failed"; tail -30 "$tmp/sync.log"; exit 1; }
sync_markers=$(grep -o "journal at exit.*" "$tmp/sync.log" | sed -n 's/.*release markers \([0-9]*\).*/\1/p')
echo "synchronous snapshots only: release markers ${sync_markers:-?}"
grep -q "^\[r0\] final checksum $ref\$" "$tmp/sync.log" || {
  echo "FAIL: synchronous snapshots only changed the checksum"; fails=$((fails + 1)); }
[ "${sync_markers:-1}" -eq 0 ] || {
  echo "FAIL: synchronous snapshots released payloads"; fails=$((fails + 1)); }

# Only the payloads make snapshots due: asynchronous ones from three quarters of the
# bound (12 MiB of 3 MiB batches: about every fourth step), each releasing.
"$run" "${common[@]}" --snapshot_every=1000 -- "$app" "$steps" "$mib" pageable \
  >"$tmp/every.log" 2>&1 || { echo "FAIL: the run with --snapshot_every=1000 failed"; tail -30 "$tmp/every.log"; exit 1; }
line=$(grep -o "snapshots at exit.*" "$tmp/every.log")
count=$(echo "$line" | sed -n 's/.*at exit: \([0-9]*\) boundaries.*/\1/p')
inside=$(echo "$line" | sed -n 's/.*; \([0-9]*\) asynchronous.*/\1/p')
every_markers=$(grep -o "journal at exit.*" "$tmp/every.log" | sed -n 's/.*release markers \([0-9]*\).*/\1/p')
echo "--snapshot_every=1000: $line; release markers ${every_markers:-?}"
grep -q "^\[r0\] final checksum $ref\$" "$tmp/every.log" || {
  echo "FAIL: --snapshot_every=1000 changed the checksum"; fails=$((fails + 1)); }
# 192 MiB of payloads, one asynchronous snapshot per ~12 MiB: at least 12,
# and at most a third of all synchronous (without releases the bound forces
# a journal boundary every ~5 steps, ~12 of ~13; the bound still forces one
# when a slow snapshot is still in flight as the bound is reached, as on a
# loaded machine).
# The snapshots the bytes made due count toward the journal boundary every
# 8th snapshot (what no snapshot releases, the records, grows until one): the
# first boundary and at least one more.
sync=$(( ${count:-0} - ${inside:-0} ))
if [ "${inside:-0}" -lt 12 ] || [ $(( 3 * sync )) -gt "${count:-0}" ] || [ "$sync" -lt 2 ] ||
   [ "${every_markers:-0}" -lt 12 ]; then
  echo "FAIL: expected the payloads to make at least 12 asynchronous snapshots due and between 2 and a third of the snapshots synchronous (snapshots: ${count:-?}, asynchronous: ${inside:-?}, release markers: ${every_markers:-?})"
  fails=$((fails + 1))
fi

released_seen=0
echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
for t in $(seq 1 "$trials"); do
  c=$((total / 3 + RANDOM % (total / 2))); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" "$steps" "$mib" pageable >"$tmp/trial.log" 2>&1
  rc=$?
  replayed=$(sed -n 's/.*recovered: replayed \([0-9]*\) requests.*/\1/p' "$tmp/trial.log" | head -1)
  released=$(sed -n 's/.*payloads released behind the snapshot: \([0-9]*\).*/\1/p' "$tmp/trial.log" | head -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS upload_loop" "$tmp/trial.log" &&
     grep -q "^\[r0\] final checksum $ref\$" "$tmp/trial.log" && [ -n "$replayed" ]; then
    echo "ok   trial $t [$spec]: bitwise equal, $replayed requests replayed, ${released:-0} released entries skipped"
    released_seen=$((released_seen + ${released:-0}))
  else
    echo "FAIL trial $t [$spec]: rc=$rc, replayed: ${replayed:-none}"
    grep -v "revenant hostkernel\|snapshot \|submit seq" "$tmp/trial.log" | tail -40
    fails=$((fails + 1))
  fi
done
if [ "$released_seen" -eq 0 ]; then
  echo "FAIL: no replacement read a journal with released payloads"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
