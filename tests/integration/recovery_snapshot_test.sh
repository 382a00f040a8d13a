#!/bin/bash
# Recovery of a rank without a replica past its first minibatch boundary
# (boundary snapshots, docs/recovery.md): a 1-rank training job (host
# backend) is killed at seeded points past the first boundary -- inside a
# minibatch at every crash point, and at the boundary itself (snapshot
# written but not renamed, renamed but the journal's boundary not recorded,
# recorded but the older snapshot not deleted). Every run must end with the
# final checksum of a fault-free run and show the snapshot was loaded. Then:
# a corrupted snapshot makes the recovery refuse with a data-loss error and
# the application fail cleanly (bounded); with snapshots off the replacement
# refuses clearly instead of waiting for peers that do not exist. Last, a
# 2-rank job with both ranks killed at once: recovered from their snapshots
# with --snapshots=on, refused at once without.
#   recovery_snapshot_test.sh RUN APP KERNELS [TRIALS=8] [SEED=20261129] [ITERS=12]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-8}"; seed="${5:-20261129}"; iters="${6:-12}"
common=(-n 1 --backend=host --timeout=60 --recovery_timeout=15 --host_kernels="$kernels")
# RECOVERY_TEST_EXTRA_ARGS: further revenant-run options for the 1-rank runs
# (the write-behind variant: "--journal_thread=behind").
if [ -n "${RECOVERY_TEST_EXTRA_ARGS:-}" ]; then
  read -r -a extra_args <<<"$RECOVERY_TEST_EXTRA_ARGS"
  common+=("${extra_args[@]}")
  echo "extra revenant-run options: ${extra_args[*]} (REVENANT_JOURNAL_THREAD_DELAY_US=${REVENANT_JOURNAL_THREAD_DELAY_US:-})"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; cat "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; cat "$tmp/ref.log"; exit 1; }
grep -q "snapshots at exit" "$tmp/ref.log" || {
  echo "FAIL: a 1-rank job did not take boundary snapshots (--snapshots=auto)"; exit 1; }
echo "fault-free: 1 rank, $iters iterations, final checksum $ref"
grep -o "snapshots at exit.*" "$tmp/ref.log"

fails=0
echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute snapshot_partial after_snapshot after_boundary)
for t in $(seq 1 "$trials"); do
  # Minibatch >= 2: the journal is past its first boundary when the kill hits
  # (a snapshot_partial kill at boundary 2 leaves the journal at minibatch 1).
  m=$((2 + RANDOM % (iters - 3))); c=$((1 + RANDOM % 15)); p=${points[$((t % 6))]}
  spec="rank=0,minibatch=$m,calls=$c,point=$p"
  log="$tmp/trial.log"
  t0=$(date +%s%N)
  "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  loaded=$(grep -o "replacement_snapshot_loaded .*" "$log" | head -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref\$" "$log" && [ -n "$loaded" ]; then
    echo "ok   trial $t [$spec]: bitwise equal; ${loaded}; ${ms} ms"
  else
    echo "FAIL trial $t [$spec]: rc=$rc, snapshot loaded: ${loaded:-no}"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
done

# A corrupt snapshot is refused, never loaded; the application's calls fail
# cleanly and the job ends (bounded by --timeout, far from reached).
log="$tmp/corrupt.log"
t0=$(date +%s%N)
"$run" "${common[@]}" --chaos="rank=0,minibatch=5,point=after_boundary,corrupt_snapshot=1" \
  -- "$app" --iters "$iters" >"$log" 2>&1
rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] &&
   grep -q "cannot recover rank 0: DATA_LOSS: .*snapshot .* is corrupt" "$log" &&
   grep -q "cudaErrorDevicesUnavailable" "$log" && ! grep -q "PASS train_mlp" "$log" &&
   ! grep -q "replacement_snapshot_loaded" "$log"; then
  echo "ok   corrupt snapshot: refused ($(grep -o 'is corrupt: .*' "$log" | head -1)), application failed cleanly, rc=$rc, ${ms} ms"
else
  echo "FAIL corrupt snapshot: rc=$rc"
  grep -v "revenant hostkernel" "$log" | tail -30
  fails=$((fails + 1))
fi

# Snapshots off: past the first boundary a lone rank cannot be recovered;
# the replacement says so at once (no wait for peers).
log="$tmp/off.log"
t0=$(date +%s%N)
"$run" "${common[@]}" --snapshots=off --chaos="rank=0,minibatch=5,calls=8" \
  -- "$app" --iters "$iters" >"$log" 2>&1
rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "cannot recover rank 0: .*--snapshots=on" "$log" &&
   ! grep -q "PASS train_mlp" "$log" && [ "$ms" -lt 15000 ]; then
  echo "ok   snapshots off: refused clearly, rc=$rc, ${ms} ms"
else
  echo "FAIL snapshots off: rc=$rc, ${ms} ms"
  grep -v "revenant hostkernel" "$log" | tail -30
  fails=$((fails + 1))
fi

# A data-parallel job (2 ranks) whose ranks all die at once: with snapshots
# on, every replacement restores its own snapshot and they replay together;
# without, the replacements refuse at once (no survivor holds the state).
"$run" -n 2 --backend=host --timeout=60 --host_kernels="$kernels" -- "$app" --iters "$iters" \
  >"$tmp/ref2.log" 2>&1 || { echo "FAIL: the fault-free 2-rank run failed"; exit 1; }
ref2=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref2.log")
both="rank=0,minibatch=5,calls=8;rank=1,minibatch=5,calls=8"
log="$tmp/both.log"
"$run" -n 2 --backend=host --timeout=60 --recovery_timeout=15 --host_kernels="$kernels" \
  --snapshots=on --chaos="$both" -- "$app" --iters "$iters" >"$log" 2>&1
rc=$?
if [ "$rc" -eq 0 ] && [ "$(grep -c "^\[r[01]\] final checksum $ref2\$" "$log")" -eq 2 ] &&
   [ "$(grep -c "every member restored minibatch 5 from its boundary snapshot" "$log")" -ge 2 ]; then
  echo "ok   2 ranks killed at once, snapshots on: both restored their snapshots, 2/2 bitwise equal ($ref2)"
else
  echo "FAIL 2 ranks killed at once, snapshots on: rc=$rc"
  grep -v "revenant hostkernel" "$log" | tail -30
  fails=$((fails + 1))
fi
log="$tmp/both_off.log"
t0=$(date +%s%N)
"$run" -n 2 --backend=host --timeout=60 --recovery_timeout=15 --host_kernels="$kernels" \
  --chaos="$both" -- "$app" --iters "$iters" >"$log" 2>&1
rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "cannot recover rank .*no survivor holds" "$log" &&
   ! grep -q "PASS train_mlp" "$log" && [ "$ms" -lt 15000 ]; then
  echo "ok   2 ranks killed at once, snapshots off: refused (no survivor), rc=$rc, ${ms} ms"
else
  echo "FAIL 2 ranks killed at once, snapshots off: rc=$rc, ${ms} ms"
  grep -v "revenant hostkernel" "$log" | tail -30
  fails=$((fails + 1))
fi

total=$((trials + 4))
echo "$((total - fails)) of $total cases as expected"
[ "$fails" -eq 0 ]
