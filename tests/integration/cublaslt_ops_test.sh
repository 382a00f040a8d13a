#!/bin/bash
# cuBLASLt under the shim (host backend: OpenBLAS in the agent).
#   cublaslt_ops_test.sh RUN APP
# 1. Every case of cublaslt_ops (fp32/fp64 matmuls, transposes, padded
#    leading dimensions, in place, strided batches, the bias/ReLU/GELU
#    epilogues, host and device scalars, the getters, cuBLASLt's error codes
#    and the calls only Revenant refuses) matches the program's CPU reference.
# 2. Its training-like loop, which makes and drops its descriptors at every
#    matmul as PyTorch does, keeps a setup log of constant size, and recovers
#    from agent kills (mid-matmul, after the heuristic's reply, at a setter,
#    at a descriptor's creation and destruction, and after the setup log's
#    compaction) with final weights bitwise equal to the fault-free run's.
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

failed=0
# Calls of an iteration: 1 input copy; the forward layer: 2 descriptor
# create, 3-6 its setters (transposes, epilogue, bias), 7-9 layouts,
# 10-11 preference and its setter, 12 heuristic, 13 preference destroy,
# 14 matmul, 15-18 destroys; the update: 19 create, 20-23 setters (pointer
# mode device), 24-26 layouts, 27-28 preference, 29 heuristic, 30, 31
# matmul, 32-35 destroys; 36 loss copy, 37 synchronize.
trial() {  # name chaos-spec [iterations reference]
  local name="$1" spec="$2" log="$tmp/trial.log" n="${3:-$iters}" ref="${4:-$ref}"
  "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$n" >"$log" 2>&1
  local rc=$?
  local got=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$log")
  local recoveries=$(grep -c "replacement agent for rank" "$log")
  if [ "$rc" -eq 0 ] && [ "$got" = "$ref" ] && [ "$recoveries" -ge 1 ]; then
    echo "ok   $name [$spec]: $recoveries replacement(s), final checksum equal"
  else
    echo "FAIL $name [$spec]: rc=$rc, checksum '$got' (want $ref), $recoveries replacement(s)"
    tail -40 "$log"
    failed=1
  fi
}
trial "mid forward matmul"        "rank=0,minibatch=3,calls=14,point=after_execute"
trial "mid update matmul"         "rank=0,minibatch=5,calls=31,point=after_execute"
trial "after the heuristic reply" "rank=0,minibatch=4,calls=12,point=after_reply"
trial "at the bias setter"        "rank=0,minibatch=2,calls=6,point=after_execute"
trial "at a pointer-mode setter"  "rank=0,minibatch=6,calls=22,point=before_append"
trial "at a descriptor create"    "rank=0,minibatch=3,calls=19,point=after_reply"
trial "at a descriptor destroy"   "rank=0,minibatch=5,calls=18,point=after_execute"

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
trial "after compaction, mid matmul" "rank=0,minibatch=$((long_iters - 11)),calls=14,point=after_execute" \
  "$long_iters" "$long_ref"
[ "$failed" -eq 0 ] || exit 1
echo "ok: every kill recovered to the fault-free result"
