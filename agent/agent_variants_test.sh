#!/bin/bash
# The product agent and its testing variant (docs/design.md, "The testing
# variant"): revenant-agent lists only product knobs, refuses the crash
# points' flags naming revenant-agent-testing and ignores the testing knobs;
# revenant-agent-testing lists and reads them.
#   agent_variants_test.sh <revenant-agent> <revenant-agent-testing>
set -uo pipefail
agent="$1"; testing="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*"; exit 1; }

"$agent" --help >"$tmp/help" 2>&1
grep -q "REVENANT_COLLECTIVE_TIMEOUT_S" "$tmp/help" || fail "revenant-agent --help lacks the product knobs"
grep -qE "REVENANT_SPIN_US|REVENANT_JOURNAL_THREAD_DELAY_US|REVENANT_INLINE_IMAGE_KIB" "$tmp/help" &&
  fail "revenant-agent --help lists a testing knob"
grep -q "chaos_" "$tmp/help" && fail "revenant-agent --help lists a chaos flag"
"$agent" --helpfull >"$tmp/helpfull" 2>&1
grep -q "chaos_" "$tmp/helpfull" && fail "revenant-agent --helpfull lists a chaos flag"

"$testing" --help >"$tmp/thelp" 2>&1
for k in REVENANT_COLLECTIVE_TIMEOUT_S REVENANT_SPIN_US REVENANT_JOURNAL_THREAD_DELAY_US; do
  grep -q "$k" "$tmp/thelp" || fail "revenant-agent-testing --help lacks $k"
done
"$testing" --helpfull >"$tmp/thelpfull" 2>&1
grep -q "chaos_point" "$tmp/thelpfull" || fail "revenant-agent-testing --helpfull lacks --chaos_point"

for flag in --chaos_after_calls=3 --chaos_in_recovery -chaos_point=after_reply --nochaos_corrupt_snapshot; do
  "$agent" --socket="$tmp/s" --job_dir="$tmp" "$flag" </dev/null >"$tmp/refused" 2>&1
  rc=$?
  [ "$rc" -eq 2 ] || fail "revenant-agent $flag: rc=$rc, not 2"
  grep -q "testing variant, revenant-agent-testing" "$tmp/refused" ||
    { cat "$tmp/refused"; fail "revenant-agent $flag: the refusal does not name the testing variant"; }
done

# A spare without an assignment (stdin closed) starts and leaves at once:
# the product warns that it ignores a testing knob, the testing variant reads it.
REVENANT_SPIN_US=20 REVENANT_JOURNAL_THREAD_DELAY_US=5 REVENANT_COLLECTIVE_TIMEOUT_S=7 \
  timeout 60 "$agent" --spare --spare_wait_s=5 --backend=host </dev/null >"$tmp/p.log" 2>&1 ||
  { cat "$tmp/p.log"; fail "the product spare failed"; }
for k in REVENANT_SPIN_US REVENANT_JOURNAL_THREAD_DELAY_US; do
  grep -q "$k ignored: a testing knob, read only by revenant-agent-testing" "$tmp/p.log" ||
    { cat "$tmp/p.log"; fail "revenant-agent did not say it ignores $k"; }
done
grep -q "REVENANT_COLLECTIVE_TIMEOUT_S ignored" "$tmp/p.log" && fail "a product knob was ignored"
REVENANT_SPIN_US=20 timeout 60 "$testing" --spare --spare_wait_s=5 --backend=host </dev/null \
  >"$tmp/t.log" 2>&1 || { cat "$tmp/t.log"; fail "the testing spare failed"; }
grep -q "ignored" "$tmp/t.log" && { cat "$tmp/t.log"; fail "revenant-agent-testing ignored a knob"; }
echo "PASS agent_variants"
