#!/bin/bash
# A conformance program (tests/apps) on the host backend with its agents
# killed at chosen points: every run must pass, must have recovered (a
# replacement agent replayed the journal) and, where the program prints a
# "final checksum", must end with the checksum of the fault-free run.
#   conform_recovery_test.sh RUN APP KERNELS NAME RANKS SPECS [APP ARGS...]
# SPECS: revenant-run --chaos specs separated by ';'
# ("rank=0,calls=20;rank=0,minibatch=6,calls=3"), or "none": the fault-free
# run alone.
# TEST_RUN_PREFIX: a command every revenant-run runs under ("setarch -R").
set -u
prefix=()
[ -n "${TEST_RUN_PREFIX:-}" ] && read -r -a prefix <<<"$TEST_RUN_PREFIX"
run="$1"; app="$2"; kernels="$3"; name="$4"; ranks="$5"; specs="$6"; shift 6
common=(-n "$ranks" --backend=host --timeout=120 --host_kernels="$kernels")
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
passed() {  # log
  local r
  for ((r = 0; r < ranks; r++)); do grep -q "^\[r$r\] PASS $name\$" "$1" || return 1; done
}
REVENANT_COLLECTIVE_TIMEOUT_S=30 timeout 150 "${prefix[@]}" "$run" "${common[@]}" -- "$app" "$@" >"$tmp/ref.log" 2>&1
rc=$?
if [ "$rc" -ne 0 ] || ! passed "$tmp/ref.log"; then
  echo "FAIL: the fault-free run failed (rc=$rc)"; grep -v hostkernel "$tmp/ref.log" | tail -30; exit 1
fi
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
echo "fault-free: $ranks rank(s), final checksum ${ref:-(none printed)}"
fails=0
[ "$specs" = none ] && specs=""
IFS=';' read -r -a spec_list <<<"$specs"
for spec in "${spec_list[@]}"; do
  log="$tmp/trial.log"
  REVENANT_COLLECTIVE_TIMEOUT_S=30 timeout 150 "${prefix[@]}" "$run" "${common[@]}" --chaos="$spec" -- "$app" "$@" \
    >"$log" 2>&1
  rc=$?
  why=""
  [ "$rc" -eq 0 ] || why="exit status $rc"
  passed "$log" || why="${why:+$why, }no PASS $name from every rank"
  grep -q "chaos: killing" "$log" || why="${why:+$why, }no agent was killed"
  grep -q "recovered: replayed" "$log" || why="${why:+$why, }no recovery"
  if [ -n "$ref" ]; then
    same=$(grep -c "^\[r[0-9]*\] final checksum $ref\$" "$log")
    [ "$same" -eq "$ranks" ] || why="${why:+$why, }$same of $ranks ranks end with checksum $ref"
  fi
  if [ -z "$why" ]; then
    echo "ok   [$spec]: $(grep -o 'killing this agent at request [0-9]*[^)]*)' "$log" | head -1), $(grep -o 'replayed [0-9]* requests' "$log" | head -1)"
  else
    echo "FAIL [$spec]: $why"; grep -v hostkernel "$log" | tail -30
    fails=$((fails + 1))
  fi
done
[ "$fails" -eq 0 ] && echo "PASS $name recovery ($ranks rank(s))"
exit "$fails"
