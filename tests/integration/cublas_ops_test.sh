#!/bin/bash
# cuBLAS under the shim (host backend: OpenBLAS in the agent).
#   cublas_ops_test.sh RUN APP
# 1. Every case of cublas_ops (real and complex GEMM, strided batched,
#    GemmEx, SgemmEx, GEMV, dot, triangular solves, both pointer modes,
#    cuBLAS's error codes) matches the program's CPU reference.
# 2. Its training-like loop keeps a setup log of constant size (attribute
#    setters overwrite each other) and recovers from agent kills mid-GEMM
#    (and around the dot's reply, and at a setter) with final weights bitwise
#    equal to the fault-free run's.
set -u
run="$1"; app="$2"
iters=8
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(-n 1 --backend=host --timeout=120)
# CUBLAS_TEST_EXTRA_ARGS: further revenant-run options (the journal-thread
# variants).
if [ -n "${CUBLAS_TEST_EXTRA_ARGS:-}" ]; then
  read -r -a extra_args <<<"$CUBLAS_TEST_EXTRA_ARGS"
  common+=("${extra_args[@]}")
  echo "extra revenant-run options: ${extra_args[*]}"
fi

"$run" "${common[@]}" -- "$app" >"$tmp/cases.log" 2>&1
rc=$?
cat "$tmp/cases.log"
[ "$rc" -eq 0 ] || { echo "FAIL: cublas_ops exited with $rc under the shim"; exit 1; }
grep -q "^\[r0\] PASS cublas_ops" "$tmp/cases.log" || { echo "FAIL: no PASS line"; exit 1; }
results=$(grep -c "^\[r0\] RESULT " "$tmp/cases.log")
# 26 cases in each pointer mode (the 4 triangular solves print their
# solution's checksum too), then the error cases.
[ "$results" -eq 61 ] || { echo "FAIL: $results RESULT lines, expected 61"; exit 1; }
echo "ok: $results cuBLAS cases match the CPU reference under the shim"

"$run" "${common[@]}" -- "$app" --iters "$iters" >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free loop failed"; cat "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free loop"; cat "$tmp/ref.log"; exit 1; }
echo "fault-free loop: $iters iterations, final checksum $ref"

# Each iteration sets the pointer mode twice: the setup log keeps only the
# latest call per handle and attribute, so twice the iterations leave as many
# live setup entries.
live() { sed -n 's/.*journal at exit: setup [0-9]* bytes (\([0-9]*\) live entries).*/\1/p' "$1"; }
"$run" "${common[@]}" -- "$app" --iters $((2 * iters)) >"$tmp/long.log" 2>&1 || {
  echo "FAIL: the longer loop failed"; cat "$tmp/long.log"; exit 1; }
short_live=$(live "$tmp/ref.log"); long_live=$(live "$tmp/long.log")
if [ -z "$short_live" ] || [ "$short_live" != "$long_live" ]; then
  echo "FAIL: live setup entries $short_live after $iters iterations, $long_live after $((2 * iters))"
  exit 1
fi
echo "ok: $short_live live setup entries after $iters and after $((2 * iters)) iterations"

failed=0
# The kills below run with REVENANT_SHIM_ANSWERS=0 (ANSWERS), so that the
# program's cublasGetMathMode at every iteration reaches the agent: its check
# is then a check of the replacement's state. Calls of an iteration: 1 input
# copy, 2-3 math mode get/set, 4-5 pointer mode set/get, 6 strided batched
# GEMM, 7 GEMV, 8-9 pointer mode, 10-11 update GEMMs, 12 dot, 13 loss copy,
# 14 synchronize (with the shim's answers, the get is answered by the shim and
# the rest move up by one).
ANSWERS=0
trial() {  # name chaos-spec [iterations reference]
  local name="$1" spec="$2" log="$tmp/trial.log" n="${3:-$iters}" ref="${4:-$ref}"
  REVENANT_SHIM_ANSWERS=$ANSWERS "$run" "${common[@]}" --chaos="$spec" -- "$app" --iters "$n" \
    >"$log" 2>&1
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
trial "mid strided batched GEMM" "rank=0,minibatch=3,calls=6,point=after_execute"
trial "before an update GEMM"    "rank=0,minibatch=5,calls=10,point=before_append"
trial "after the dot's reply"    "rank=0,minibatch=4,calls=12,point=after_reply"
trial "at a pointer-mode setter" "rank=0,minibatch=6,calls=8,point=after_execute"
trial "at the math-mode setter"  "rank=0,minibatch=2,calls=3,point=after_execute"
ANSWERS=1
trial "math mode answered by the shim, kill at its setter" "rank=0,minibatch=3,calls=2,point=after_execute"
ANSWERS=0

# A long run, whose setup log is compacted (the setters' calls of earlier
# minibatches dropped): a kill after the compaction must find the handle's
# attributes as the application left them.
long_iters=7000
"$run" "${common[@]}" -- "$app" --iters "$long_iters" >"$tmp/long_ref.log" 2>&1 || {
  echo "FAIL: the long fault-free loop failed"; tail -20 "$tmp/long_ref.log"; exit 1; }
long_ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/long_ref.log")
compactions=$(sed -n 's/.*journal at exit: .*, \([0-9]*\) compactions,.*/\1/p' "$tmp/long_ref.log")
echo "long loop: $long_iters iterations, $compactions setup-log compaction(s), final checksum $long_ref"
[ "${compactions:-0}" -ge 1 ] || { echo "FAIL: the long loop's setup log was never compacted"; exit 1; }
# Two consecutive minibatches: one of them starts with the math mode that an
# earlier minibatch's call set (what compaction must keep).
for m in $((long_iters - 21)) $((long_iters - 20)); do
  trial "after compaction, iteration start" "rank=0,minibatch=$m,calls=2,point=before_append" \
    "$long_iters" "$long_ref"
done
trial "after compaction, mid GEMM" "rank=0,minibatch=$((long_iters - 11)),calls=10,point=after_execute" \
  "$long_iters" "$long_ref"
[ "$failed" -eq 0 ] || exit 1
echo "ok: every kill recovered to the fault-free result"
