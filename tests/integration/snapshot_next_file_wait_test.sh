#!/bin/bash
# A snapshot due while its next file is still being made waits for it
# (docs/recovery.md, "The next file's lead"): in a 1-rank training job (host
# backend, --snapshot_every=auto) the store's thread is slowed by
# REVENANT_NEXT_FILE_DELAY_MS before each next file, so that every timed
# snapshot comes due while its file is being made. Checks: the due snapshots
# waited (steps skipped) and none made its own file without pages; the
# checksum equals a run with synchronous snapshots; with a wait cap (half the
# timed interval) shorter than the delay, the snapshots stop waiting and make
# their own files, and the checksum is still equal.
#   snapshot_next_file_wait_test.sh RUN APP KERNELS
set -u
run="$1"; app="$2"; kernels="$3"
iters=2000
common=(-n 1 --backend=host --timeout=90 --host_kernels="$kernels")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$run" "${common[@]}" --snapshot_async=false -- "$app" --iters "$iters" >"$tmp/sync.log" 2>&1 || {
  echo "FAIL: the synchronous run failed"; tail -30 "$tmp/sync.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/sync.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the synchronous run"; exit 1; }
echo "synchronous snapshots: checksum $ref"

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
[ "$fails" -eq 0 ] || exit 1
echo "PASS snapshot_next_file_wait_test"
