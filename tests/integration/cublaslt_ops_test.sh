#!/bin/bash
# cuBLASLt under the shim (host backend: OpenBLAS in the agent).
#   cublaslt_ops_test.sh RUN APP
# 1. Every case of cublaslt_ops (fp32/fp64 matmuls, transposes, padded
#    leading dimensions, in place, strided batches, the bias/ReLU/GELU
#    epilogues, host and device scalars, the getters, cuBLASLt's error codes
#    and the calls only Revenant refuses) matches the program's CPU reference.
# 2. Its training-like loop, which makes and drops its descriptors at every
#    matmul as PyTorch does: the creations go without waiting and the
#    heuristic reaches the agent once per distinct matmul (same bits as with
#    REVENANT_SHIM_ANSWERS=0), keeps a setup log of constant size, and recovers
#    from agent kills (mid-matmul, after the heuristic's reply, at a setter,
#    at a descriptor's creation and destruction, and after the setup log's
#    compaction) with final weights bitwise equal to the fault-free run's;
#    with asynchronous snapshots inside one journal minibatch the setup log
#    stays small too, and kills recover from them (three at asynchronous
#    snapshots, twelve seeded: seed printed).
set -u
run="$1"; app="$2"
iters=8
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(-n 1 --backend=host --timeout=120)
# CUBLASLT_TEST_EXTRA_ARGS: further revenant-run options (the journal-thread
# variants).
if [ -n "${CUBLASLT_TEST_EXTRA_ARGS:-}" ]; then
  read -r -a extra_args <<<"$CUBLASLT_TEST_EXTRA_ARGS"
  common+=("${extra_args[@]}")
  echo "extra revenant-run options: ${extra_args[*]}"
fi

"$run" "${common[@]}" -- "$app" >"$tmp/cases.log" 2>&1
rc=$?
cat "$tmp/cases.log"
[ "$rc" -eq 0 ] || { echo "FAIL: cublaslt_ops exited with $rc under the shim"; exit 1; }
grep -q "^\[r0\] PASS cublaslt_ops" "$tmp/cases.log" || { echo "FAIL: no PASS line"; exit 1; }
grep -q "^\[r0\] revenant-only error cases ok" "$tmp/cases.log" || {
  echo "FAIL: the error cases only Revenant answers did not run"; exit 1; }
results=$(grep -c "^\[r0\] RESULT " "$tmp/cases.log")
# 11 matmuls in each pointer mode, one on a cuBLAS handle, then the error
# cases.
[ "$results" -eq 24 ] || { echo "FAIL: $results RESULT lines, expected 24"; exit 1; }
echo "ok: $results cuBLASLt cases match the CPU reference under the shim"

"$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free loop failed"; cat "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free loop"; cat "$tmp/ref.log"; exit 1; }
echo "fault-free loop: $iters iterations, final checksum $ref"

# Each iteration creates, sets up and destroys two matmul descriptors, six
# layouts and two preferences: the setup log drops them with their setters
# (and the setters' outcomes), so twice the iterations leave as many live
# setup entries. (--snapshot_every=1: every step a journal minibatch, as the
# comparison needs; with auto the steps between snapshots share one.)
live() { sed -n 's/.*journal at exit: setup [0-9]* bytes (\([0-9]*\) live entries).*/\1/p' "$1"; }
"$run" "${common[@]}" --snapshot_every=1 -- "$app" --iters "$iters" >"$tmp/short.log" 2>&1 || {
  echo "FAIL: the loop failed"; cat "$tmp/short.log"; exit 1; }
"$run" "${common[@]}" --snapshot_every=1 -- "$app" --iters $((2 * iters)) >"$tmp/long.log" 2>&1 || {
  echo "FAIL: the longer loop failed"; cat "$tmp/long.log"; exit 1; }
short_live=$(live "$tmp/short.log"); long_live=$(live "$tmp/long.log")
if [ -z "$short_live" ] || [ "$short_live" != "$long_live" ]; then
  echo "FAIL: live setup entries $short_live after $iters iterations, $long_live after $((2 * iters))"
  exit 1
fi
echo "ok: $short_live live setup entries after $iters and after $((2 * iters)) iterations"

# With asynchronous snapshots (the one-rank default, here every second step)
# the steps between two journal boundaries share one journal minibatch; each
# finished snapshot moves where a replay starts, and the setup log drops the
# descriptors destroyed before it and the setters it superseded
# (RequestJournal::ReplayStartsAt). The growth per iteration inside one
# minibatch is measured (one journal boundary, no snapshot after it: 8 and
# 14 iterations); 14 iterations with asynchronous snapshots leave at most a
# few iterations' worth above the run with a boundary at every step (without
# the replay start: all 13 iterations' worth). Kills then recover from the
# asynchronous snapshots bitwise.
"$run" "${common[@]}" --snapshot_every=1000 -- "$app" --iters 8 >"$tmp/one8.log" 2>&1 &&
"$run" "${common[@]}" --snapshot_every=1000 -- "$app" --iters 14 >"$tmp/one14.log" 2>&1 &&
"$run" "${common[@]}" --snapshot_every=1 -- "$app" --iters 14 >"$tmp/each14.log" 2>&1 &&
# A snapshot chaos point that never fires (the 1000th asynchronous snapshot)
# makes each due step wait for the snapshot in flight instead of skipping
# it: the snapshots fall on the same steps however loaded the machine is.
"$run" "${common[@]}" --snapshot_every=2 --chaos="rank=0,minibatch=1000,point=snapshot_finish" -- \
  "$app" --iters 14 >"$tmp/async14.log" 2>&1 || {
  echo "FAIL: a loop of the asynchronous-snapshot comparison failed"; tail -20 "$tmp"/*14.log; exit 1; }
one8=$(live "$tmp/one8.log"); one14=$(live "$tmp/one14.log")
each14=$(live "$tmp/each14.log"); async14=$(live "$tmp/async14.log")
ref14=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/each14.log")
asyncs=$(sed -n 's/.*; \([0-9]*\) asynchronous (inside.*/\1/p' "$tmp/async14.log")
per_iter=$(( (one14 - one8) / 6 ))
echo "live setup entries: one minibatch $one8 after 8 and $one14 after 14 iterations ($per_iter per iteration); 14 iterations with a boundary at every step $each14, with ${asyncs:-?} asynchronous snapshots $async14"
if [ "$per_iter" -lt 10 ] || [ "${asyncs:-0}" -lt 6 ] || [ "$async14" -gt $((each14 + 3 * per_iter)) ]; then
  echo "FAIL: want >= 10 entries per iteration inside a minibatch, 6 asynchronous snapshots and at most $((each14 + 3 * per_iter)) live entries with them"
  exit 1
fi
grep -q "^\[r0\] final checksum $ref14\$" "$tmp/async14.log" || {
  echo "FAIL: the asynchronous run's checksum differs from the one with a boundary at every step"; exit 1; }
# The journal's bound (--snapshot_max_log_mib, here 1 MiB; no timed
# snapshots): the minibatch log's records and the setup log's descriptor
# calls count, and from three quarters of it an asynchronous snapshot is due
# once they grew past what the last one left. What a snapshot cannot release
# (this loop's records and inline batches) made every step due before: ~55
# asynchronous snapshots in 300 iterations, one after another until the
# bound forced a journal boundary; now a few per journal boundary (6-7 made
# due by the bytes alone on 2 CPUs, 2 with another test's agent beside it:
# a snapshot still in flight lets the bytes reach the bound).
# The bound here is the flag's alone (--snapshot_log_state_ratio=0): this
# loop's 4 MiB of state would raise it to 4 MiB; that rule is checked below.
"$run" "${common[@]}" --snapshot_every=1 -- "$app" --iters 300 >"$tmp/each300.log" 2>&1 &&
"$run" "${common[@]}" --snapshot_min_interval_ms=600000 --snapshot_max_log_mib=1 \
  --snapshot_log_state_ratio=0 -- "$app" --iters 300 >"$tmp/bound300.log" 2>&1 || {
  echo "FAIL: a 300-iteration loop failed"; tail -20 "$tmp"/*300.log; exit 1; }
ref300=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/each300.log")
b_async=$(sed -n 's/.*; \([0-9]*\) asynchronous (inside.*/\1/p' "$tmp/bound300.log")
b_due=$(sed -n "s/.*; \([0-9]*\) made due by the journal's bytes.*/\1/p" "$tmp/bound300.log")
b_live=$(live "$tmp/bound300.log")
echo "the journal's bound, 300 iterations: ${b_async:-?} asynchronous snapshots, ${b_due:-?} made due by the journal's bytes, $b_live live setup entries at exit"
if [ -z "$ref300" ] || ! grep -q "^\[r0\] final checksum $ref300\$" "$tmp/bound300.log" ||
   [ "${b_due:-0}" -lt 2 ] || [ "${b_async:-99}" -gt 24 ] || [ "${b_live:-99999}" -gt $((each14 + 120 * per_iter)) ]; then
  echo "FAIL: want the checksum of a boundary at every step, >= 2 snapshots made due by the bound, <= 24 asynchronous snapshots, <= $((each14 + 120 * per_iter)) live setup entries"
  exit 1
fi
# A bound below the state's bytes is raised to them (one rank, the default
# --snapshot_log_state_ratio=1, at most 4x the flag): with 2 MiB asked and
# ~4 MiB of state, the exit line reports the state's bound, and the loop
# still ends with the checksum of a boundary at every step. The agent's own
# journal boundary (REVENANT_JOURNAL_BOUNDARY_KIB, here the flag's 2 MiB, as
# the defaults are equal) is raised with it (to an eighth above the bound:
# the bound's own journal boundary comes at a step first): left at 2 MiB, it
# came before the bound's asynchronous snapshots (from 3 MiB), two
# synchronous boundaries and no asynchronous snapshot in this loop.
REVENANT_JOURNAL_BOUNDARY_KIB=2048 "$run" "${common[@]}" --snapshot_min_interval_ms=600000 \
  --snapshot_max_log_mib=2 -- "$app" --iters 300 >"$tmp/state300.log" 2>&1 || {
  echo "FAIL: the 300-iteration loop with the state's bound failed"; tail -20 "$tmp/state300.log"; exit 1; }
state_mib=$(sed -n 's/.*boundaries, \([0-9.]*\) MiB per boundary.*/\1/p' "$tmp/state300.log")
s_bound=$(sed -n "s/.*made due by the journal's bytes (bound \([0-9.]*\) MiB.*/\1/p" "$tmp/state300.log")
s_due=$(sed -n "s/.*; \([0-9]*\) made due by the journal's bytes.*/\1/p" "$tmp/state300.log")
s_own=$(grep -c "placed the boundary of minibatch" "$tmp/state300.log")
echo "the state's bound, 300 iterations, --snapshot_max_log_mib=2: ${state_mib:-?} MiB per snapshot, bound ${s_bound:-?} MiB, ${s_due:-?} snapshots made due by the journal's bytes, $s_own boundaries the agent placed"
if [ -z "$state_mib" ] || [ -z "$s_bound" ] ||
   ! awk -v s="$state_mib" -v b="$s_bound" 'BEGIN { exit !(s > 2.5 && b > 2.5 && b - s < 0.1 && s - b < 0.1) }' ||
   [ "${s_due:-0}" -lt 1 ] || [ "$s_own" -ne 0 ] ||
   ! grep -q "^\[r0\] final checksum $ref300\$" "$tmp/state300.log"; then
  echo "FAIL: want a bound equal to the state's bytes (over 2.5 MiB), >= 1 snapshot made due by the bound, no boundary placed by the agent, and the checksum of a boundary at every step"
  exit 1
fi
# Kills at the M-th asynchronous snapshot (in flight, or finished but not
# renamed): the replacement starts from the one before it, an asynchronous
# snapshot itself (M >= 2), whose replay start dropped the entries before it.
for spec in "4 snapshot_inflight" "3 snapshot_finish" "5 snapshot_finish"; do
  read -r m point <<<"$spec"
  "$run" "${common[@]}" --snapshot_every=2 --chaos="rank=0,minibatch=$m,point=$point" -- \
    "$app" --iters 14 >"$tmp/async_kill.log" 2>&1
  rc=$?
  from=$(sed -n 's/.*replacement_snapshot_loaded .* from request \([0-9]*\),.*/\1/p' "$tmp/async_kill.log" | head -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref14\$" "$tmp/async_kill.log" &&
     grep -q "chaos: killing this agent with asynchronous snapshot $m" "$tmp/async_kill.log" &&
     [ "${from:-0}" -gt 100 ]; then
    echo "ok   asynchronous snapshots, killed at snapshot $m ($point): the snapshot of request $from loaded, final checksum equal"
  else
    echo "FAIL asynchronous snapshots, killed at snapshot $m ($point): rc=$rc, snapshot loaded from request ${from:-none}"
    tail -30 "$tmp/async_kill.log"; exit 1
  fi
done
# Seeded kills at random requests of 20 iterations (before or after the
# journal append), asynchronous snapshots every second step: every one
# recovers bitwise.
seed=20261205
RANDOM=$seed
"$run" "${common[@]}" --snapshot_every=1 -- "$app" --iters 20 >"$tmp/each20.log" 2>&1 || {
  echo "FAIL: the 20-iteration loop failed"; tail -20 "$tmp/each20.log"; exit 1; }
ref20=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/each20.log")
echo "seeded kills with asynchronous snapshots (seed $seed):"
for t in $(seq 1 12); do
  at=$((100 + RANDOM % 600))
  point=after_execute; [ $((RANDOM % 2)) = 0 ] && point=before_append
  "$run" "${common[@]}" --snapshot_every=2 --chaos="rank=0,calls=$at,point=$point" -- \
    "$app" --iters 20 >"$tmp/seeded.log" 2>&1
  rc=$?
  from=$(sed -n 's/.*replacement_snapshot_loaded .* from request \([0-9]*\),.*/\1/p' "$tmp/seeded.log" | head -1)
  if [ "$rc" -eq 0 ] && grep -q "^\[r0\] final checksum $ref20\$" "$tmp/seeded.log" &&
     grep -q "replacement agent for rank" "$tmp/seeded.log"; then
    echo "ok   killed at request $at ($point): the snapshot of request ${from:-?} loaded, final checksum equal"
  else
    echo "FAIL killed at request $at ($point): rc=$rc"; tail -30 "$tmp/seeded.log"; exit 1
  fi
done

# Round trips: the descriptors' creations go without waiting (handles the
# shim assigns), and the heuristic reaches the agent once per distinct
# matmul (the forward's and the update's): later iterations ask it again of
# descriptors of the same contents, which the shim answers. With
# REVENANT_SHIM_ANSWERS=0 each creation and heuristic waits for the agent;
# the results are the same bits.
submits() { grep -c "submit seq [0-9]* $2 ([0-9]* bytes, $3)" "$1"; }
REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/answers.log" 2>&1 || {
  echo "FAIL: the loop failed with REVENANT_DIAGNOSTICS=1"; tail -20 "$tmp/answers.log"; exit 1; }
REVENANT_SHIM_ANSWERS=0 REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" --iters "$iters" \
  >"$tmp/noanswers.log" 2>&1 || {
  echo "FAIL: the loop failed with REVENANT_SHIM_ANSWERS=0"; tail -20 "$tmp/noanswers.log"; exit 1; }
on_heur=$(submits "$tmp/answers.log" cublasLtMatmulAlgoGetHeuristic sync)
off_heur=$(submits "$tmp/noanswers.log" cublasLtMatmulAlgoGetHeuristic sync)
on_sync_creates=$(grep -cE "submit seq [0-9]* cublasLt(MatmulDesc|MatrixLayout|MatmulPreference)Create \([0-9]* bytes, sync\)" "$tmp/answers.log")
on_async_creates=$(grep -cE "submit seq [0-9]* cublasLt(MatmulDesc|MatrixLayout|MatmulPreference)Create \([0-9]* bytes, async\)" "$tmp/answers.log")
off_sync_creates=$(grep -cE "submit seq [0-9]* cublasLt(MatmulDesc|MatrixLayout|MatmulPreference)Create \([0-9]* bytes, sync\)" "$tmp/noanswers.log")
on_sum=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/answers.log")
off_sum=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/noanswers.log")
echo "heuristics sent: $on_heur (shim answers on), $off_heur (off); descriptor creations: $on_async_creates without waiting, $on_sync_creates waiting (on), $off_sync_creates waiting (off)"
if [ "$on_heur" -ne 2 ] || [ "$off_heur" -ne $((2 * iters)) ] || [ "$on_sync_creates" -ne 0 ] ||
   [ "$on_async_creates" -ne $((10 * iters)) ] || [ "$off_sync_creates" -ne $((10 * iters)) ]; then
  echo "FAIL: want 2 and $((2 * iters)) heuristics sent, $((10 * iters)) creations without waiting and $((10 * iters)) waiting"
  exit 1
fi
if [ -z "$on_sum" ] || [ "$on_sum" != "$ref" ] || [ "$off_sum" != "$ref" ]; then
  echo "FAIL: checksums $on_sum (answers on), $off_sum (off), want $ref"; exit 1
fi
echo "ok: the shim answered $((2 * iters - on_heur)) heuristics and assigned $on_async_creates descriptors; checksums equal"

failed=0
# Calls of an iteration (after the first, whose heuristics reach the agent
# after each preference's setter): 1 input copy; the forward layer: 2
# descriptor create, 3-6 its setters (transposes, epilogue, bias), 7-9
# layouts, 10-11 preference and its setter (the heuristic answered by the
# shim), 12 preference destroy, 13 matmul, 14-17 destroys; the update: 18
# create, 19-22 setters (pointer mode device), 23-25 layouts, 26-27
# preference, 28 preference destroy, 29 matmul, 30-33 destroys; 34 loss
# copy, 35 synchronize. The first iteration's heuristics (before the first
# boundary) are the job's requests 23 and 40.
trial() {  # name chaos-spec API [iterations reference]
  local name="$1" spec="$2" api="$3" log="$tmp/trial.log" n="${4:-$iters}" ref="${5:-$ref}"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$n" >"$log" 2>&1
  local rc=$?
  local got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
  local recoveries=$(grep -c "replacement agent for rank" "$log")
  local at=$(grep -o "chaos: killing this agent at request [0-9]* ([A-Za-z0-9_]*" "$log" | head -1 |
    sed 's/.*(//')
  if [ "$rc" -eq 0 ] && [ "$got" = "$ref" ] && [ "$recoveries" -ge 1 ] && [ "$at" = "$api" ]; then
    echo "ok   $name [$spec]: killed at $at, $recoveries replacement(s), final checksum equal"
  else
    echo "FAIL $name [$spec]: rc=$rc, killed at '$at' (want $api), checksum '$got' (want $ref), $recoveries replacement(s)"
    tail -40 "$log"
    failed=1
  fi
}
trial "mid forward matmul"        "rank=0,minibatch=3,calls=13,point=after_execute" cublasLtMatmul
trial "mid update matmul"         "rank=0,minibatch=5,calls=29,point=after_execute" cublasLtMatmul
trial "after the heuristic reply" "rank=0,calls=23,point=after_reply" \
  cublasLtMatmulAlgoGetHeuristic
trial "at the bias setter"        "rank=0,minibatch=2,calls=6,point=after_execute" \
  cublasLtMatmulDescSetAttribute
trial "at a pointer-mode setter"  "rank=0,minibatch=6,calls=21,point=before_append" \
  cublasLtMatmulDescSetAttribute
trial "at a descriptor create"    "rank=0,minibatch=3,calls=18,point=after_reply" \
  cublasLtMatmulDescCreate
trial "at a layout create"        "rank=0,minibatch=4,calls=8,point=after_execute" \
  cublasLtMatrixLayoutCreate
trial "at a descriptor destroy"   "rank=0,minibatch=5,calls=17,point=after_execute" \
  cublasLtMatmulDescDestroy

# A long run, whose setup log is compacted: a kill after the compaction must
# find the handle as the application left it. A snapshot every 50 steps (every
# 8th of them a journal boundary, where the setup log is compacted): with
# auto the boundaries depend on how long the snapshots took.
long_iters=1500
common+=(--snapshot_every=50)
"$run" "${common[@]}" -- "$app" --iters "$long_iters" >"$tmp/long_ref.log" 2>&1 || {
  echo "FAIL: the long fault-free loop failed"; tail -20 "$tmp/long_ref.log"; exit 1; }
long_ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/long_ref.log")
compactions=$(sed -n 's/.*journal at exit: .*, \([0-9]*\) compactions,.*/\1/p' "$tmp/long_ref.log")
echo "long loop: $long_iters iterations, $compactions setup-log compaction(s), final checksum $long_ref"
[ "${compactions:-0}" -ge 1 ] || { echo "FAIL: the long loop's setup log was never compacted"; exit 1; }
trial "after compaction, mid matmul" "rank=0,minibatch=$((long_iters - 11)),calls=13,point=after_execute" \
  cublasLtMatmul "$long_iters" "$long_ref"
[ "$failed" -eq 0 ] || exit 1
echo "ok: every kill recovered to the fault-free result"
