#!/bin/bash
# Uploads from pageable host memory under one-rank synchronous snapshots
# (tests/integration/upload_loop.cu `pageable`, host backend): a 1 MiB
# batch travels inside the request, and its bytes are journaled as the
# entry's payload, not inside its args (agent/journaling.h,
# InlineCopyArgs); a 3 MiB batch goes through the staging area in chunks.
# A journal boundary every few steps (REVENANT_JOURNAL_BOUNDARY_KIB) makes
# new minibatch segments, whose payload file is the previous segment's,
# written over (journal::SparePayload). Checks:
# - fault-free: the result is bitwise the host's, and payload files were
#   reused;
# - kills at seeded request counts and points: the replacement replays the
#   uploads since the last snapshot from the journal's payloads, bitwise.
#   recovery_pageable_upload_test.sh RUN APP KERNELS [TRIALS=5] [SEED=20261209]
set -u
run="$1"; app="$2"; kernels="$3"; trials="${4:-5}"; seed="${5:-20261209}"
steps=48
# Synchronous snapshots only: asynchronous ones would release the payloads
# behind them (recovery_payload_release_test.sh covers that), and the
# journal would then rarely grow by REVENANT_JOURNAL_BOUNDARY_KIB.
common=(-n 1 --backend=host --timeout=120 --recovery_timeout=20 --host_kernels="$kernels"
        --snapshot_async=false)
export REVENANT_JOURNAL_BOUNDARY_KIB=1024
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0

for mib in 1 3; do
  REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" "$steps" "$mib" pageable \
    >"$tmp/ref$mib.log" 2>&1 || {
    echo "FAIL: the fault-free run of $mib MiB failed"; grep -v "submit seq" "$tmp/ref$mib.log" | tail -30
    exit 1; }
  grep -q "^\[r0\] PASS upload_loop" "$tmp/ref$mib.log" || { echo "FAIL: no PASS ($mib MiB)"; exit 1; }
  line=$(grep -o "journal at exit.*" "$tmp/ref$mib.log")
  reused=$(echo "$line" | sed -n 's/.*payload files reused \([0-9]*\).*/\1/p')
  echo "fault-free, $steps pageable uploads of $mib MiB: $(grep -c "submit seq" "$tmp/ref$mib.log") requests, $line"
  if [ "${reused:-0}" -lt 1 ]; then
    echo "FAIL: $mib MiB: no minibatch segment reused the payload file before it"
    fails=$((fails + 1))
  fi
done
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref1.log")
total=$(grep -c "submit seq" "$tmp/ref1.log")
ref3=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref3.log")
total3=$(grep -c "submit seq" "$tmp/ref3.log")

check() {  # check NAME LOG RC REF
  local name="$1" log="$2" rc="$3" want="$4" replayed
  replayed=$(sed -n 's/.*recovered: replayed \([0-9]*\) requests.*/\1/p' "$log" | head -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] PASS upload_loop" "$log" &&
     grep -q "^\[r0\] final checksum $want\$" "$log" && [ -n "$replayed" ]; then
    echo "ok   $name: bitwise equal, $replayed requests replayed"
  else
    echo "FAIL $name: rc=$rc, replayed: ${replayed:-none}"
    grep -v "revenant hostkernel\|snapshot " "$log" | tail -40
    fails=$((fails + 1))
  fi
}

echo "seed=$seed trials=$trials"
RANDOM=$seed
points=(before_append after_append after_execute after_reply)
for t in $(seq 1 "$trials"); do
  # Past the first journal boundaries (the payload file reused by then).
  c=$((total / 2 + RANDOM % (total / 3))); p=${points[$((RANDOM % 4))]}
  spec="rank=0,calls=$c,point=$p"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" "$steps" 1 pageable >"$tmp/trial.log" 2>&1
  check "1 MiB, trial $t [$spec]" "$tmp/trial.log" "$?" "$ref"
done
c=$((total3 * 2 / 3)); spec="rank=0,calls=$c,point=after_execute"
"$run" "${common[@]}" --chaos="$spec" -- "$app" "$steps" 3 pageable >"$tmp/trial3.log" 2>&1
check "3 MiB [$spec]" "$tmp/trial3.log" "$?" "$ref3"
[ "$fails" -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "PASS"
