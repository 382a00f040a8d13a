#!/bin/bash
# A snapshot due while its next file is still being made waits for it
# (docs/recovery.md, "The next file's lead"): in a 1-rank training job (host
# backend, --snapshot_every=auto) the store's thread is slowed by
# REVENANT_NEXT_FILE_DELAY_MS before each next file, so that every timed
# snapshot comes due while its file is being made. Checks: the due snapshots
# waited (steps skipped) and none made its own file without pages; the
# checksum equals a run with synchronous snapshots; with a wait cap (half the
# timed interval) shorter than the delay, the snapshots stop waiting and make
# their own files, and the checksum is still equal; agents killed at seeded
# request counts while snapshots wait for their files recover bitwise equal.
#   snapshot_next_file_wait_test.sh RUN APP KERNELS [TRIALS=2] [SEED=20261207]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-2}"; seed="${5:-20261207}"
iters=2000
common=(-n 1 --backend=host --timeout=90 --host_kernels="$kernels")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" --snapshot_async=false -- "$app" --iters "$iters" \
  >"$tmp/sync.log" 2>&1 || {
  echo "FAIL: the synchronous run failed"; tail -30 "$tmp/sync.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/sync.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the synchronous run"; exit 1; }
total=$(grep -c "submit seq" "$tmp/sync.log")
echo "synchronous snapshots: checksum $ref, $total requests"

fails=0
# run_arm NAME MIN_INTERVAL_MS -> sets sum, waits, steps, late
run_arm() {
  local name="$1" interval="$2" log="$tmp/$1.log" line
  REVENANT_NEXT_FILE_DELAY_MS=100 "$run" "${common[@]}" --snapshot_min_interval_ms="$interval" \
    -- "$app" --iters "$iters" >"$log" 2>&1 || {
    echo "FAIL: the $name run failed"; tail -30 "$log"; fails=$((fails + 1)); return 1; }
  sum=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
  line=$(grep -o "snapshot files without the spare.*" "$log")
  echo "$name (next files 100 ms late, --snapshot_min_interval_ms=$interval):"
  echo "  $(grep -o "snapshots at exit: [0-9]* boundaries.*asynchronous (inside" "$log")"
  echo "  $line"
  late=$(sed -n 's/.*; \([0-9]*\) snapshots found theirs still being made.*/\1/p' <<<"$line")
  waits=$(sed -n 's/.*; \([0-9]*\) waited for theirs over \([0-9]*\) steps.*/\1/p' <<<"$line")
  steps=$(sed -n 's/.*; \([0-9]*\) waited for theirs over \([0-9]*\) steps.*/\2/p' <<<"$line")
  if [ "$sum" != "$ref" ]; then
    echo "FAIL: $name: checksum ${sum:-none}, expected $ref"; fails=$((fails + 1)); return 1
  fi
}

# The cap (300 ms) is three times the delay: every due snapshot waits.
if run_arm wait 600; then
  if [ "${waits:-0}" -lt 2 ] || [ "${steps:-0}" -lt "${waits:-0}" ] || [ "${late:-x}" != 0 ]; then
    echo "FAIL: expected the due snapshots to wait for their files (waits: ${waits:-?}, steps: ${steps:-?}, found still being made: ${late:-?})"
    fails=$((fails + 1))
  fi
fi
# The cap (10 ms) is a tenth of the delay: waits end unmet.
if run_arm capped 20; then
  if [ "${waits:-0}" -lt 1 ] || [ "${late:-0}" -lt 1 ]; then
    echo "FAIL: expected capped waits and snapshots that made their own files (waits: ${waits:-?}, found still being made: ${late:-?})"
    fails=$((fails + 1))
  fi
fi
# Kills at seeded request counts while snapshots wait (a third of the run
# waits: the store's thread 200 ms late, a wait capped at 250 ms).
echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
lo=$((total / 4)); span=$((total / 2))
for t in $(seq 1 "$trials"); do
  c=$((lo + RANDOM % span)); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  log="$tmp/trial.log"
  REVENANT_NEXT_FILE_DELAY_MS=200 "$run" "${common[@]}" --recovery_timeout=20 \
    --snapshot_min_interval_ms=500 --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  rc=$?
  loaded=$(grep -o "replacement_snapshot_loaded .*" "$log" | head -1)
  waited=$(grep -o "[0-9]* waited for theirs over [0-9]* steps" "$log" | tail -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref\$" "$log" && [ -n "$loaded" ]; then
    echo "ok   trial $t [$spec]: bitwise equal; $loaded; the replacement: ${waited:-no wait line}"
  else
    echo "FAIL trial $t [$spec]: rc=$rc, snapshot loaded: ${loaded:-no}"
    grep -v "revenant hostkernel" "$log" | tail -30
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] || exit 1
echo "PASS snapshot_next_file_wait_test"
