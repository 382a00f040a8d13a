#!/bin/bash
# Spare agents (revenant-run --spares): a dead agent's rank goes to a
# pre-started spare instead of a new process. Each case must end with every
# rank's final checksum equal to a fault-free run's, and the recovery
# timeline must show which path each replacement took:
#   1. 2 ranks, 1 spare, rank 1 killed mid-backward: the spare takes rank 1,
#      a new spare is started to keep one;
#   2. 3 ranks, 1 spare, two ranks killed together: one gets the spare, the
#      other a new process;
#   3. 1 rank, 1 spare, killed past its first boundary: the spare restores
#      the boundary snapshot.
#   recovery_spare_test.sh RUN APP KERNELS [ITERS=12]
set -u
run="$1"; app="$2"; kernels="$3"; iters="${4:-12}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fails=0

reference() {  # ranks -> checksum
  "$run" -n "$1" --backend=host --timeout=60 --host_kernels="$kernels" -- "$app" --iters "$iters" \
    >"$tmp/ref$1.log" 2>&1 || { echo "FAIL: the fault-free $1-rank run failed"; cat "$tmp/ref$1.log"; exit 1; }
  sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref$1.log"
}

case_() {  # name ranks ref chaos expected-spare-takes expected-new-processes
  local name="$1" ranks="$2" ref="$3" spec="$4" want_spare="$5" want_new="$6" log="$tmp/case.log"
  "$run" -n "$ranks" --spares 1 --backend=host --timeout=90 --host_kernels="$kernels" \
    --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  local rc=$?
  local same=$(grep -c "^\[r[0-9]*\] final checksum $ref\$" "$log")
  local by_spare=$(grep -c "replacement_started *spare, pid" "$log")
  local by_new=$(grep -c "replacement_started *new process, pid" "$log")
  local assigned=$(grep -c "spare_assigned" "$log")
  local restarted=$(grep -c "spare_started" "$log")
  if [ "$rc" -eq 0 ] && [ "$same" -eq "$ranks" ] && [ "$by_spare" -eq "$want_spare" ] &&
     [ "$by_new" -eq "$want_new" ] && [ "$assigned" -eq "$want_spare" ] && [ "$restarted" -ge 1 ]; then
    echo "ok   $name [$spec]: $ranks/$ranks ranks bitwise equal; $by_spare by a spare, $by_new by a new process"
    grep -E "replacement_started|spare_assigned|spare_started|snapshot_loaded|application_resumed" "$log" | sed 's/^/       /'
  else
    echo "FAIL $name [$spec]: rc=$rc, $same/$ranks equal, $by_spare by a spare (want $want_spare), $by_new new (want $want_new), $assigned assigned, $restarted spare starts in the timeline"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
}

ref2=$(reference 2); ref3=$(reference 3); ref1=$(reference 1)
echo "fault-free checksums: 2 ranks $ref2, 3 ranks $ref3, 1 rank $ref1"
case_ "spare takes a rank" 2 "$ref2" "rank=1,minibatch=4,calls=8" 1 0
case_ "two deaths, one spare" 3 "$ref3" "rank=1,minibatch=5,calls=8;rank=2,minibatch=5,calls=8" 1 1
case_ "lone rank, snapshot" 1 "$ref1" "rank=0,minibatch=6,calls=8" 1 0
grep -q "replacement_snapshot_loaded" "$tmp/case.log" || {
  echo "FAIL: the lone rank's spare did not load the boundary snapshot"; fails=$((fails + 1)); }
echo "$((3 - fails)) of 3 spare cases as expected"
[ "$fails" -eq 0 ]
