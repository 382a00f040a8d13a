#!/bin/bash
# A job that never places a minibatch boundary (--minibatch=manual, no
# revenantMarkStep: train_mlp's boundaries are neither detected nor marked)
# keeps every call in its journal. With REVENANT_JOURNAL_BOUNDARY_KIB the
# agent of a one-rank job places a boundary itself, with its boundary
# snapshot, each time the journal grew by that much: the journal stays
# bounded, the agent logs each such boundary, and a replacement recovers from
# them bitwise. A two-rank job cannot (its boundaries must fall at the same
# request on every rank): the agent says so once and places none.
#   journal_bound_test.sh <revenant-run> <train_mlp> <train_mlp host kernels>
set -u
run="$1"; app="$2"; kernels="$3"
iters=100
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(--backend=host --host_kernels="$kernels" --minibatch=manual --timeout=120 --recovery_timeout=30)
job() {  # log ranks boundary_kib [revenant-run options...]
  local log="$1" ranks="$2" kib="$3"
  shift 3
  REVENANT_JOURNAL_BOUNDARY_KIB="$kib" "$run" -n "$ranks" "${common[@]}" "$@" -- \
    "$app" --iters "$iters" >"$log" 2>&1
}
# Journal bytes at exit of rank 0 (setup + minibatch log), from the agent's line.
journal_bytes() {
  sed -n 's/.*\[a0\].*journal at exit: setup \([0-9]*\) bytes.*minibatch \([0-9]*\) bytes.*/\1 \2/p' "$1" |
    awk '{ print $1 + $2 }' | head -1
}
checksum() { sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$1" | head -1; }

# Without the bound (0): no boundary, the journal holds every call.
job "$tmp/off.log" 1 0 || { cat "$tmp/off.log"; echo "FAIL: the job without the bound failed"; exit 1; }
ref=$(checksum "$tmp/off.log")
off=$(journal_bytes "$tmp/off.log")
[ -n "$ref" ] && [ -n "$off" ] || { cat "$tmp/off.log"; echo "FAIL: no checksum or journal size"; exit 1; }
if grep -q "placed the boundary" "$tmp/off.log"; then fail "a boundary was placed with the bound off"; fi
echo "bound off: journal $off bytes at exit, final checksum $ref"

# 32 KiB: boundaries of the agent's own, each logged, the journal bounded.
job "$tmp/on.log" 1 32 || fail "the job with the bound failed: $(tail -5 "$tmp/on.log")"
on=$(journal_bytes "$tmp/on.log")
placed=$(grep -c "placed the boundary of minibatch .* itself, with its snapshot" "$tmp/on.log")
echo "bound 32 KiB: journal $on bytes at exit, $placed boundaries logged (the first three and every 100th)"
grep "placed the boundary" "$tmp/on.log" | head -2
minibatches=$(sed -n 's/.*\[a0\].*journal at exit:.*, minibatch \([0-9]*\), payload files reused.*/\1/p' "$tmp/on.log" | head -1)
snaps=$(sed -n 's/.*\[a0\].*snapshots at exit: \([0-9]*\) boundaries.*/\1/p' "$tmp/on.log" | head -1)
if [ "$placed" -ge 3 ] && [ "${minibatches:-0}" -ge 10 ] && [ "${snaps:-0}" -eq "${minibatches:-0}" ]; then
  ok "the agent placed $minibatches boundaries itself, each with a snapshot ($snaps)"
else
  fail "boundaries: $placed logged, journal minibatch ${minibatches:-none}, snapshots ${snaps:-none}"
fi
# Bounded: the setup before the first boundary and at most about two bounds.
if [ -n "$on" ] && [ "$on" -le $((off / 4)) ] && [ "$on" -le $((256 << 10)) ]; then
  ok "journal $on bytes with the bound, $off without"
else
  fail "journal ${on:-none} bytes with the bound, $off without (expected at most a quarter and 256 KiB)"
fi
[ "$(checksum "$tmp/on.log")" = "$ref" ] && ok "same final checksum" ||
  fail "final checksum $(checksum "$tmp/on.log") with the bound, $ref without"

# A replacement recovers from the agent's own boundaries (their snapshots).
for spec in "rank=0,minibatch=4,calls=10" "rank=0,minibatch=6,point=after_boundary"; do
  job "$tmp/chaos.log" 1 32 --chaos="$spec"
  rc=$?
  sum=$(checksum "$tmp/chaos.log")
  restored=$(grep -c "replacement agent for rank" "$tmp/chaos.log")
  if [ $rc -eq 0 ] && [ "$sum" = "$ref" ] && [ "$restored" -ge 1 ]; then
    ok "killed at [$spec]: recovered, final checksum equal"
  else
    fail "killed at [$spec]: rc $rc, $restored replacement(s), checksum ${sum:-none} (want $ref)"
    tail -20 "$tmp/chaos.log"
  fi
done

# Two ranks: no boundary of its own, one warning per rank saying why.
job "$tmp/two.log" 2 32 --snapshots=on || fail "the two-rank job failed: $(tail -5 "$tmp/two.log")"
warned=$(grep -c "cannot place one of its own: a job of 2 ranks needs its boundaries at the same request on every rank" "$tmp/two.log")
if [ "$warned" -eq 2 ] && ! grep -q "placed the boundary" "$tmp/two.log"; then
  ok "two ranks: no boundary of the agents' own, each agent said why once"
else
  fail "two ranks: $warned warnings (want 2), $(grep -c "placed the boundary" "$tmp/two.log") boundaries placed (want 0)"
fi

[ $fails -eq 0 ] && echo "PASS" || { echo "$fails check(s) failed"; exit 1; }
