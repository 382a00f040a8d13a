#!/bin/bash
# Boundary snapshots taken at some step boundaries only (revenant-run
# --snapshot_every, docs/recovery.md "Boundary snapshots"): the steps between
# two snapshots stay in one journal minibatch, and a replacement restores the
# last snapshot and replays every step since. A 1-rank training job (host
# backend) is killed at seeded request counts (not minibatch counts, which
# would make every step a snapshot) with --snapshot_every=4 and with the
# default (auto); every run must end with the fault-free checksum and load a
# snapshot; the fault-free --snapshot_every=4 run must have taken about a
# quarter of its step boundaries as snapshots.
#   recovery_snapshot_every_test.sh RUN APP KERNELS [TRIALS=6] [SEED=20261202] [ITERS=24]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-6}"; seed="${5:-20261202}"; iters="${6:-24}"
common=(-n 1 --backend=host --timeout=90 --recovery_timeout=20 --host_kernels="$kernels")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" --snapshot_every=4 -- "$app" --iters "$iters" \
  >"$tmp/ref.log" 2>&1 || { echo "FAIL: the fault-free run failed"; tail -30 "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; exit 1; }
total=$(grep -c "submit seq" "$tmp/ref.log")
line=$(grep -o "snapshots at exit.*" "$tmp/ref.log")
echo "fault-free (--snapshot_every=4): $iters iterations, $total requests, checksum $ref"
echo "$line"
taken=$(echo "$line" | sed -n 's/snapshots at exit: \([0-9]*\) boundaries.*/\1/p')
between=$(echo "$line" | sed -n 's/.*per boundary, \([0-9]*\) steps between.*/\1/p')
# Step boundaries: the first snapshot, then every 4th.
if [ -z "$taken" ] || [ -z "$between" ] || [ "$between" -lt $((2 * taken)) ] || [ "$taken" -lt 2 ]; then
  echo "FAIL: --snapshot_every=4 took $taken snapshots with ${between:-?} steps between them"
  exit 1
fi
"$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/auto.log" 2>&1 || {
  echo "FAIL: the fault-free auto run failed"; exit 1; }
grep -q "^\[r0\] final checksum $ref\$" "$tmp/auto.log" || { echo "FAIL: auto run checksum differs"; exit 1; }
echo "fault-free (auto): $(grep -o "snapshots at exit.*" "$tmp/auto.log")"
# auto's pace: with --snapshot_min_interval_ms=0 the snapshots' own duration
# sets it (a snapshot of this little state takes ~0.1 ms: 38-43 in the run
# alone, 4 while six heavy tests shared the 2 CPUs with it); by default a
# timed one comes at least a second after the last.
pace_iters=400
for m in 0 default; do
  arg=(); [ "$m" = 0 ] && arg=(--snapshot_min_interval_ms=0)
  "$run" "${common[@]}" "${arg[@]}" -- "$app" --iters "$pace_iters" >"$tmp/pace_$m.log" 2>&1 || {
    echo "FAIL: the fault-free auto run ($m) failed"; tail -30 "$tmp/pace_$m.log"; exit 1; }
done
n_fast=$(sed -n 's/.*snapshots at exit: \([0-9]*\) boundaries.*/\1/p' "$tmp/pace_0.log")
n_paced=$(sed -n 's/.*snapshots at exit: \([0-9]*\) boundaries.*/\1/p' "$tmp/pace_default.log")
# Whole seconds of "after 1.234s", or 0 for a run under a second ("after 987ms").
secs=$(sed -n -e 's/.*finished with status 0 after \([0-9]*\)\..*/\1/p' \
  -e 's/.*finished with status 0 after \([0-9]*\)s$/\1/p' \
  -e 's/.*finished with status 0 after [0-9]*ms$/0/p' "$tmp/pace_default.log")
echo "auto, $pace_iters iterations: $n_fast snapshots with --snapshot_min_interval_ms=0, $n_paced by default in ${secs:-?}.x s"
if [ -z "$n_fast" ] || [ -z "$n_paced" ] || [ -z "$secs" ] || [ "$n_fast" -lt 3 ] ||
   [ "$n_fast" -le "$n_paced" ] || [ "$n_paced" -gt $((secs + 2)) ]; then
  echo "FAIL: auto's timed snapshots are not paced by --snapshot_min_interval_ms"; exit 1
fi

fails=0
echo "seed=$seed trials=$trials per mode"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
lo=$((total / 4)); span=$((total * 2 / 3))
for mode in 4 auto; do
  for t in $(seq 1 "$trials"); do
    c=$((lo + RANDOM % span)); p=${points[$((RANDOM % 4))]}
    spec="rank=0,calls=$c,point=$p"
    log="$tmp/trial.log"
    "$run" "${common[@]}" --snapshot_every=$mode --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
    rc=$?
    loaded=$(grep -o "replacement_snapshot_loaded .*" "$log" | head -1)
    replayed=$(grep -o "replayed [0-9]* requests[^;]*" "$log" | head -1)
    if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref\$" "$log" && [ -n "$loaded" ]; then
      echo "ok   every=$mode trial $t [$spec]: bitwise equal; ${loaded}; ${replayed:-}"
    else
      echo "FAIL every=$mode trial $t [$spec]: rc=$rc, snapshot loaded: ${loaded:-no}"
      grep -v "revenant hostkernel" "$log" | tail -40
      fails=$((fails + 1))
    fi
  done
done
[ "$fails" -eq 0 ] || { echo "$fails trial(s) failed"; exit 1; }
echo "PASS"
