#!/bin/bash
# Held uploads whose source the device changes behind the agent's back
# (docs/recovery.md, "Held uploads": the device's hash). upload_loop's
# `hidden` mode scribbles over its pinned batch after each fold with a kernel
# that finds the batch's pointer in device memory, which neither the shim nor
# the agent sees coming. Checks, host backend, default flags (uploads held):
# - fault-free: the job passes, the next step's write into the batch copies
#   the held upload out, finds its bytes changed (the device's hash differs)
#   and the agent captures every later upload instead (its warning and exit
#   lines say so);
# - killed right after the first scribble inside the journal's minibatch
#   (request KILL_EARLY, step 1's synchronize): the shim copies the held
#   upload out for the replacement, finds it changed, and the replacement
#   refuses the recovery with DATA_LOSS naming the entry, instead of
#   replaying bytes the device never received (the old behaviour: a wrong
#   accumulator, which upload_loop reports);
# - the same kill with --upload_hold=false: recovered bitwise (captured);
# - killed after the detection (request KILL_LATE): recovered bitwise, the
#   uploads since captured.
# HOLD_TEST_BACKEND_ARGS replaces the host backend's options (the GPU
# runner: "--backend=cuda", KERNELS none).
#   recovery_hold_changed_test.sh RUN APP KERNELS [KILL_EARLY=18] [KILL_LATE=38]
set -u
run="$1"; app="$2"; kernels="$3"; early="${4:-18}"; late="${5:-38}"
read -r -a backend_args <<<"${HOLD_TEST_BACKEND_ARGS:---backend=host --host_kernels=$kernels}"
echo "backend: ${backend_args[*]}"
common=(-n 1 "${backend_args[@]}" --timeout=120 --recovery_timeout=20)
args=(8 4 hidden)
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
show() { grep -v "revenant hostkernel" "$1" | tail -25; }

"$run" "${common[@]}" -- "$app" "${args[@]}" >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; show "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
held=$(grep -o "held uploads at exit.*" "$tmp/ref.log")
captured=$(sed -n 's/.*captured uploads at exit: \([0-9]*\) uploads journaled.*/\1/p' "$tmp/ref.log")
changed=$(echo "$held" | sed -n 's/.*, \([0-9]*\) sources found changed.*/\1/p')
hashed=$(echo "$held" | sed -n 's/.*; \([0-9]*\) hashed by the device.*/\1/p')
echo "fault-free: checksum ${ref:-none}"
echo "  $held"
echo "  captured uploads: ${captured:-0}"
[ -n "$ref" ] || fail "fault-free: no checksum"
[ "${changed:-0}" -ge 1 ] && [ "${hashed:-0}" -ge 1 ] ||
  fail "fault-free: no held upload was found changed (hashed ${hashed:-?}, changed ${changed:-?})"
grep -q "uploads are captured by the device from now on" "$tmp/ref.log" ||
  fail "fault-free: the agent did not say it captures from now on"
# 7 uploads in the minibatch log (the first is in the setup log): all but the
# first two held ones (the changed one and the one whose copy out found it)
# are captured.
[ "${captured:-0}" -ge 5 ] || fail "fault-free: only ${captured:-0} uploads captured after the change"

"$run" "${common[@]}" --upload_hold=false -- "$app" "${args[@]}" >"$tmp/cap.log" 2>&1 ||
  { fail "fault-free with --upload_hold=false"; show "$tmp/cap.log"; }
grep -q "^\[r0\] final checksum $ref\$" "$tmp/cap.log" || fail "--upload_hold=false: another checksum"

# kill NAME CALLS FLAGS...: a run killed at request CALLS (after it ran).
kill_run() {
  local name="$1" calls="$2"
  shift 2
  "$run" "${common[@]}" "$@" --chaos="rank=0,calls=$calls,point=after_execute" -- \
    "$app" "${args[@]}" >"$tmp/$name.log" 2>&1
  echo $?
}
rc=$(kill_run early "$early")
grep -q "chaos: killing this agent at request $early" "$tmp/early.log" || fail "early: no kill"
if [ "$rc" -ne 0 ] && grep -q "DATA_LOSS: journal entry [0-9]*: held upload .*its source had changed" "$tmp/early.log" &&
   grep -q "refused us: recovery failed: DATA_LOSS" "$tmp/early.log" &&
   ! grep -q "acc\[" "$tmp/early.log"; then
  echo "ok   killed at request $early, held: recovery refused: $(grep -o 'DATA_LOSS: journal entry [0-9]*: held upload' "$tmp/early.log" | head -1)"
else
  fail "killed at request $early, held: rc=$rc, expected a refused recovery (DATA_LOSS, source changed)"
  show "$tmp/early.log"
fi
for spec in "early_captured $early --upload_hold=false" "late $late"; do
  read -r name calls flags <<<"$spec"
  rc=$(kill_run "$name" "$calls" $flags)
  if [ "$rc" -eq 0 ] && grep -q "chaos: killing this agent at request $calls" "$tmp/$name.log" &&
     grep -q "^\[r0\] final checksum $ref\$" "$tmp/$name.log" &&
     grep -q "recovered: replayed" "$tmp/$name.log"; then
    echo "ok   killed at request $calls ${flags:-(held)}: recovered, bitwise equal"
  else
    fail "killed at request $calls ${flags:-(held)}: rc=$rc, expected a bitwise recovery"
    show "$tmp/$name.log"
  fi
done
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
