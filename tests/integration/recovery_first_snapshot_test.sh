#!/bin/bash
# The first boundary snapshot's file made ahead (docs/recovery.md, "Files"):
# in a 1-rank training job (host backend, --snapshot_every=auto) the first
# step boundary begins the snapshot's file on the snapshot store's thread and
# the snapshot is taken at a later step boundary that finds it ready, into
# it; a spare for the second is made the same way. Checks:
# - fault-free: the checksum of a run with --snapshot_spare_ahead=false; the
#   agent says the first snapshot waited for a file made ahead and went into
#   the spare file; the run without says neither;
# - kills before the first snapshot (the boundaries it waited stay inside
#   minibatch 0: replayed from the start) and at seeded request counts after
#   it recover bitwise.
#   recovery_first_snapshot_test.sh RUN APP KERNELS [TRIALS=4] [SEED=20261204] [ITERS=24]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-4}"; seed="${5:-20261204}"; iters="${6:-24}"
common=(-n 1 --backend=host --timeout=90 --recovery_timeout=20 --host_kernels="$kernels")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" --snapshot_spare_ahead=false -- "$app" --iters "$iters" \
  >"$tmp/off.log" 2>&1 || {
  echo "FAIL: the fault-free run without spares made ahead failed"; tail -30 "$tmp/off.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/off.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; exit 1; }
total=$(grep -c "submit seq" "$tmp/off.log")
echo "without spares made ahead: checksum $ref, $total requests"
grep -o "snapshot of minibatch 1: .*" "$tmp/off.log" | head -1 | sed 's/^/  /'
if grep -q "first snapshot after" "$tmp/off.log" ||
   ! grep -q "snapshot of minibatch 1: .*into a new file" "$tmp/off.log"; then
  echo "FAIL: without spares made ahead the first snapshot should make its own file at once"
  exit 1
fi

"$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/on.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; tail -30 "$tmp/on.log"; exit 1; }
echo "spares made ahead (the default):"
grep -oE "first snapshot after .*|snapshot of minibatch 1: .*|snapshot memory at exit.*" "$tmp/on.log" |
  sed 's/^/  /'
grep -q "^\[r0\] final checksum $ref\$" "$tmp/on.log" || {
  echo "FAIL: the checksum differs from the run without spares made ahead"; exit 1; }
grep -qE "first snapshot after [1-9][0-9]* step boundaries, [0-9.]+ ms: its file was made ahead" \
  "$tmp/on.log" || { echo "FAIL: the first snapshot did not wait for a file made ahead"; exit 1; }
grep -q "snapshot of minibatch 1: .*into the spare file" "$tmp/on.log" || {
  echo "FAIL: the first snapshot did not go into the file made ahead"; exit 1; }

fails=0
check() {  # check NAME LOG RC
  local name="$1" log="$2" rc="$3"
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref\$" "$log" &&
     grep -q "replacement agent for rank 0" "$log"; then
    echo "ok   $name: bitwise equal; $(grep -oE "recovered: replayed [0-9]+ requests \(minibatch [0-9]+\)" "$log" | head -1)"
  else
    echo "FAIL $name: rc=$rc"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
}
# Before the first snapshot: the first step boundaries (the file being made).
for c in $((total / iters)) $((2 * total / iters)); do
  log="$tmp/early-$c.log"
  "$run" "${common[@]}" --chaos="rank=0,calls=$c,point=after_execute" -- "$app" --iters "$iters" \
    >"$log" 2>&1
  check "kill at request $c (around the first step boundaries)" "$log" "$?"
done
echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
lo=$((total / 4)); span=$((total / 2))
for t in $(seq 1 "$trials"); do
  c=$((lo + RANDOM % span)); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  log="$tmp/trial.log"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  check "trial $t [$spec]" "$log" "$?"
done
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
