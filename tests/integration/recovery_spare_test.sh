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
# Without --spares a dead agent's replacement starts at its death, as a
# spare on the rank's device (--warm_replacement, the default), and takes
# the rank when the death window ends:
#   4. 2 ranks, rank 1 killed: one warm replacement takes it;
#   5. 3 ranks, two killed together: one warm replacement each;
#   6. the same as 4 with --warm_replacement=false: a new process;
#   7. a warm replacement that fails before its assignment (an agent
#      wrapper whose spares exit at once): the rank goes to a new process;
#   8. one that cannot take the rank it was handed (the wrapper's spares
#      read their assignment, then exit with status 75): a new process.
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

# case_ name ranks ref chaos expected-spare-takes expected-new-processes
#       [expected-warm-replacements [revenant-run flags, default --spares 1]]
case_() {
  local name="$1" ranks="$2" ref="$3" spec="$4" want_spare="$5" want_new="$6" want_warm="${7:-0}"
  local flags="${8:---spares 1}" log="$tmp/case.log"
  "$run" -n "$ranks" $flags --backend=host --timeout=90 --host_kernels="$kernels" \
    --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  local rc=$?
  local same=$(grep -c "^\[r[0-9]*\] final checksum $ref\$" "$log")
  local by_spare=$(grep -c "replacement_started *spare, pid" "$log")
  local by_new=$(grep -c "replacement_started *new process, pid" "$log")
  local by_warm=$(grep -c "replacement_started *warm process, pid" "$log")
  local warm_started=$(grep -c "spare_started *pid [0-9]*, warm replacement" "$log")
  local assigned=$(grep -c "spare_assigned" "$log")
  local restarted=$(grep -c "spare_started" "$log")
  local want_started=1
  [ "$want_spare" -eq 0 ] && want_started=$want_warm
  if [ "$rc" -eq 0 ] && [ "$same" -eq "$ranks" ] && [ "$by_spare" -eq "$want_spare" ] &&
     [ "$by_new" -eq "$want_new" ] && [ "$by_warm" -eq "$want_warm" ] &&
     [ "$warm_started" -eq "$want_warm" ] && [ "$assigned" -eq $((want_spare + want_warm)) ] &&
     [ "$restarted" -ge "$want_started" ]; then
    echo "ok   $name [$spec]: $ranks/$ranks ranks bitwise equal; $by_spare by a spare, $by_warm by a warm replacement, $by_new by a new process"
    grep -E "agent_died|replacement_started|spare_assigned|spare_started|snapshot_loaded|application_resumed" "$log" | sed 's/^/       /'
  else
    echo "FAIL $name [$spec]: rc=$rc, $same/$ranks equal, $by_spare by a spare (want $want_spare), $by_warm warm (want $want_warm; $warm_started started), $by_new new (want $want_new), $assigned assigned, $restarted spare starts in the timeline"
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
case_ "warm replacement" 2 "$ref2" "rank=1,minibatch=4,calls=8" 0 0 1 " "
case_ "two deaths, warm replacements" 3 "$ref3" "rank=1,minibatch=5,calls=8;rank=2,minibatch=5,calls=8" 0 0 2 " "
case_ "no warm replacement" 2 "$ref2" "rank=1,minibatch=4,calls=8" 0 1 0 "--warm_replacement=false"
# Cases 7 and 8: rank 1 of 2 killed, the agents behind a wrapper (the
# testing agent, whose spares misbehave as each case says).
real_agent="$(dirname "$run")/../agent/revenant-agent-testing"
log="$tmp/case.log"
spec="rank=1,minibatch=4,calls=8"
# wrapped WRAPPER [FLAGS...]: runs the job; sets rc, same and the timeline's counts.
wrapped() {
  local wrapper="$1"
  shift
  "$run" -n 2 --agent="$wrapper" "$@" --backend=host --timeout=90 \
    --host_kernels="$kernels" --chaos="$spec" -- "$app" --iters "$iters" >"$log" 2>&1
  rc=$?
  same=$(grep -c "^\[r[0-9]*\] final checksum $ref2\$" "$log")
  warm_started=$(grep -c "spare_started *pid [0-9]*, warm replacement" "$log")
  spare_failed=$(grep -c "spare agent s[0-9]* exited (status 3)" "$log")
  takeover_failed=$(grep -c "replacement_failed" "$log")
  by_new=$(grep -c "replacement_started *new process, pid" "$log")
  by_warm=$(grep -c "replacement_started *warm process, pid" "$log")
}
# verdict NAME OK: prints the case's line (and the timeline, or the log's tail).
verdict() {
  if [ "$2" = 1 ]; then
    echo "ok   $1 [$spec]: 2/2 ranks bitwise equal; a new process took the rank"
    grep -E "agent_died|replacement_|spare_started|exited \(status|could not take|application_resumed" \
      "$log" | sed 's/^/       /'
  else
    echo "FAIL $1 [$spec]: rc=$rc, $same/2 equal, $warm_started warm started, $spare_failed spares failed, $takeover_failed takeovers failed, $by_new by a new process, $by_warm by a warm one"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
}
# 7: spares that fail at once (status 3), before the (long) window ends.
cat >"$tmp/agent.sh" <<WRAP
#!/bin/bash
for a in "\$@"; do [ "\$a" = --spare ] && { echo "agent wrapper: this spare fails" >&2; exit 3; }; done
exec "$real_agent" "\$@"
WRAP
chmod +x "$tmp/agent.sh"
wrapped "$tmp/agent.sh" --death_window_ms=1000
ok=0
[ "$rc" -eq 0 ] && [ "$same" -eq 2 ] && [ "$warm_started" -eq 1 ] && [ "$spare_failed" -eq 1 ] &&
  [ "$by_new" -eq 1 ] && [ "$by_warm" -eq 0 ] && ok=1
verdict "failed warm replacement" "$ok"
# 8: spares that read their assignment and then cannot take it (status 75).
cat >"$tmp/agent75.sh" <<WRAP
#!/bin/bash
for a in "\$@"; do
  if [ "\$a" = --spare ]; then
    while read -r line; do [ "\$line" = end ] && { echo "agent wrapper: cannot take it" >&2; exit 75; }; done
    exit 0
  fi
done
exec "$real_agent" "\$@"
WRAP
chmod +x "$tmp/agent75.sh"
wrapped "$tmp/agent75.sh"
ok=0
[ "$rc" -eq 0 ] && [ "$same" -eq 2 ] && [ "$by_warm" -eq 1 ] && [ "$takeover_failed" -eq 1 ] &&
  [ "$by_new" -eq 1 ] && ok=1
verdict "warm replacement that cannot take the rank" "$ok"
echo "$((8 - fails)) of 8 spare cases as expected"
[ "$fails" -eq 0 ]
