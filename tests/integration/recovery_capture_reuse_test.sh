#!/bin/bash
# Captured uploads under the one-rank default snapshots (docs/recovery.md,
# "Captured uploads between snapshots"): a loop of 33 MiB pinned uploads
# into one device buffer (tests/integration/upload_loop.cu, host backend;
# 33 MiB: one capture per 64 MiB capture file, so that a file filled again
# too early overwrites a capture a replay still needs). Most step boundaries
# stay inside the journal's minibatch there, and every upload used to need
# a new capture file until a rare journal boundary. Checks:
# - fault-free with the defaults, and with `--snapshot_every=1000` (only the
#   bytes captured since the last snapshot make one due): every upload is
#   captured by the device, within the bound the agent prints (at most
#   twice the bound held, in a few files filled again many times), and the
#   result is bitwise the host's;
# - kills while the M-th asynchronous snapshot is in flight or finished but
#   not renamed (the next upload placed by then), and at seeded
#   request counts: the replacement replays the uploads since the last
#   finished snapshot from capture files, several of them filled again
#   before, and the result is still bitwise the host's.
# With UPLOAD_HOLD=1 the uploads are held instead (revenant-run
# --upload_hold; docs/recovery.md, "Held uploads"): every upload must be
# held, the loop's writes into its pinned buffer copy them out (user-mode
# faults; with APP_MODE=pread the kernel's writes, with APP_MODE=download
# or kernel the agent before the device writes it by a copy or a kernel
# given its mapped pointer), the kills' shims copy the rest
# out before the replacement reads them, and the same checks hold.
#   recovery_capture_reuse_test.sh RUN APP KERNELS [TRIALS=4] [SEED=20261207] [STEPS=32] [MIB=33]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-4}"; seed="${5:-20261207}"
steps="${6:-32}"; mib="${7:-33}"
common=(-n 1 --backend=host --timeout=120 --recovery_timeout=20 --host_kernels="$kernels")
if [ -n "${RECOVERY_TEST_EXTRA_ARGS:-}" ]; then
  read -r -a extra_args <<<"$RECOVERY_TEST_EXTRA_ARGS"
  common+=("${extra_args[@]}")
  echo "extra revenant-run options: ${extra_args[*]}"
fi
hold="${UPLOAD_HOLD:-0}"
# APP_MODE: upload_loop's third argument (pread: the kernel fills the pinned
# batch; download: the device writes it after each fold).
app_mode="${APP_MODE:-}"
[ -n "$app_mode" ] && echo "upload_loop mode: $app_mode"
if [ "$hold" = 1 ]; then
  common+=(--upload_hold)
  echo "held uploads: revenant-run --upload_hold"
else
  common+=(--upload_hold=false)
  echo "captured uploads: revenant-run --upload_hold=false"
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0

# check_captures NAME LOG: the exit line's counts against the bound.
check_captures() {
  local name="$1" log="$2" line n made reused bound most
  line=$(grep -o "captured uploads at exit.*" "$log")
  echo "  $line"
  n=$(echo "$line" | sed -n 's/.*at exit: \([0-9]*\) uploads journaled.*/\1/p')
  if [ "$hold" = 1 ]; then
    # Held, not captured; the loop's writes copied them out.
    local held app
    held=$(grep -o "held uploads at exit.*" "$log")
    echo "  $held"
    n=$(echo "$held" | sed -n 's/.*at exit: \([0-9]*\) uploads held.*/\1/p')
    app=$(echo "$held" | sed -n 's/.*copied out: \([0-9]*\) by the application.*/\1/p')
    [ "$app_mode" = download ] || [ "$app_mode" = kernel ] &&
      app=$(echo "$held" | sed -n 's/.*, \([0-9]*\) by the agent.*/\1/p')
    if [ "${app:-0}" -lt $((steps / 2)) ]; then
      echo "FAIL $name: the loop's writes (${app_mode:-user-mode}) copied out only ${app:-0} held uploads"
      fails=$((fails + 1))
    fi
  fi
  made=$(echo "$line" | sed -n 's/.*, \([0-9]*\) capture files made.*/\1/p')
  reused=$(echo "$line" | sed -n 's/.*, \([0-9]*\) times one was filled again.*/\1/p')
  bound=$(echo "$line" | sed -n 's/.*a snapshot once \([0-9]*\)[.0-9]* MiB were captured.*/\1/p')
  # Held: up to twice the bound since the last finished snapshot began, one
  # upload past it, and the file being filled.
  most=$((2 * ${bound:-0} / mib + 2))
  if [ "${n:-0}" -ne $((steps - 1)) ] || [ -z "$bound" ] || [ "${made:-999}" -gt "$most" ] ||
     [ "${reused:-0}" -lt $(((steps - 1) / 2)) ]; then
    echo "FAIL $name: expected $((steps - 1)) uploads captured in at most $most files, filled again at least $(((steps - 1) / 2)) times (uploads: ${n:-?}, files made: ${made:-?}, filled again: ${reused:-?}, bound: ${bound:-?} MiB)"
    fails=$((fails + 1))
  fi
}

REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" "$steps" "$mib" ${app_mode} >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; grep -v "submit seq" "$tmp/ref.log" | tail -30; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
total=$(grep -c "submit seq" "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; exit 1; }
echo "fault-free, default snapshots: $steps uploads of $mib MiB, $total requests, checksum $ref"
echo "  $(grep -o "snapshots at exit.*" "$tmp/ref.log")"
check_captures "default snapshots" "$tmp/ref.log"

bound_only=(--snapshot_every=1000)
"$run" "${common[@]}" "${bound_only[@]}" -- "$app" "$steps" "$mib" ${app_mode} >"$tmp/bound.log" 2>&1 || {
  echo "FAIL: the fault-free run with --snapshot_every=1000 failed"; tail -30 "$tmp/bound.log"; exit 1; }
line=$(grep -o "snapshots at exit.*" "$tmp/bound.log")
inside=$(echo "$line" | sed -n 's/.*; \([0-9]*\) asynchronous.*/\1/p')
echo "fault-free, --snapshot_every=1000: $line"
grep -q "^\[r0\] final checksum $ref\$" "$tmp/bound.log" || {
  echo "FAIL: --snapshot_every=1000 changed the checksum"; fails=$((fails + 1)); }
check_captures "--snapshot_every=1000" "$tmp/bound.log"
# Held bytes count half toward the bound: half as many snapshots.
want_inside=$((steps / 8)); [ "$hold" = 1 ] && want_inside=$((steps / 16))
if [ "${inside:-0}" -lt "$want_inside" ]; then
  echo "FAIL: the captured bytes made only ${inside:-0} asynchronous snapshots due"
  fails=$((fails + 1))
fi

if [ "$app_mode" = kernel ]; then
  # A replay runs the kernels since the snapshot again, and these write the
  # application's pinned buffer through its mapped pointer: stale bytes over
  # newer ones (docs/recovery.md, "Limits": kernels that write shared host
  # memory), with held
  # uploads or without. So this mode checks the fault-free runs only.
  echo "kills: not run with APP_MODE=kernel (a replay re-runs kernels that write mapped host memory)"
  [ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
  echo "PASS"
  exit 0
fi

replayed=0
check() {  # check NAME LOG RC
  local name="$1" log="$2" rc="$3" loaded read
  loaded=$(grep -o "boundary snapshot loaded: .*" "$log" | head -1)
  read=$(sed -n 's/.*captured uploads for the replay: \([0-9]*\) read from capture files.*/\1/p' \
    "$log" | awk '{ s += $1 } END { print s + 0 }')
  replayed=$((replayed + read))
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS upload_loop" "$log" &&
     grep -q "^\[r0\] final checksum $ref\$" "$log" && [ -n "$loaded" ]; then
    echo "ok   $name: bitwise equal, $read uploads replayed from capture files; $loaded"
  else
    echo "FAIL $name: rc=$rc, snapshot loaded: ${loaded:-no}"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
}

# The M-th asynchronous snapshot comes once the same bytes were captured in
# every run: by then capture files were filled again.
for point in snapshot_inflight snapshot_finish; do
  m=5; [ "$hold" = 1 ] && m=2
  log="$tmp/$point.log"
  "$run" "${common[@]}" "${bound_only[@]}" --chaos="rank=0,minibatch=$m,point=$point" -- \
    "$app" "$steps" "$mib" ${app_mode} >"$log" 2>&1
  rc=$?
  grep -q "chaos: killing this agent with asynchronous snapshot $m" "$log" || {
    echo "FAIL $point M=$m: the kill did not happen"; grep -v "revenant hostkernel" "$log" | tail -20
    fails=$((fails + 1)); continue; }
  check "$point M=$m" "$log" "$rc"
done

echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
lo=$((total / 2)); span=$((total / 3))
for t in $(seq 1 "$trials"); do
  c=$((lo + RANDOM % span)); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  log="$tmp/trial.log"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" "$steps" "$mib" ${app_mode} >"$log" 2>&1
  check "trial $t [$spec]" "$log" "$?"
done
echo "uploads replayed from capture files: $replayed"
if [ "$replayed" -eq 0 ]; then
  echo "FAIL: no replacement replayed an upload from a capture file"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
