#!/bin/bash
# Recovery of a data-parallel training job (host backend, Gloo): the agent
# of a rank is killed at chosen and at seeded random points; every run must
# end with all ranks printing the final parameter checksum of a fault-free
# run of the same job (bitwise equal), and none may hang.
#   recovery_train_test.sh RUN APP KERNELS RANKS ITERS MODE [TRIALS SEED]
# (the host backend unless RECOVERY_TEST_BACKEND_ARGS says otherwise, below)
# MODE: scenarios (the named kill points), random (TRIALS seeded trials),
# host_fn (the application ends each iteration with a host function, which
# must run exactly once per iteration across a recovery: kills around it) or
# random_host_fn (seeded random trials of the host_fn job: kills anywhere in
# its 16-request minibatches, the host function's among them).
set -u
run="$1"; app="$2"; kernels="$3"; ranks="$4"; iters="$5"; mode="$6"
trials="${7:-50}"; seed="${8:-20261129}"
common=(-n "$ranks" --timeout=150)
# RECOVERY_TEST_BACKEND_ARGS: another backend's revenant-run options (the GPU
# runner: "--backend=cuda --collectives=gloo --gpus=1"); KERNELS is unused then.
if [ -n "${RECOVERY_TEST_BACKEND_ARGS:-}" ]; then
  read -r -a backend_args <<<"$RECOVERY_TEST_BACKEND_ARGS"
  common+=("${backend_args[@]}")
else
  common+=(--backend=host --host_kernels="$kernels")
fi
# RECOVERY_TEST_EXTRA_ARGS: further revenant-run options for every run (the
# journal-thread variants: "--journal_thread=ahead", "--journal_thread=behind";
# REVENANT_JOURNAL_THREAD_DELAY_US in the environment slows the thread down so
# that the kills find requests that ran before they were journaled).
if [ -n "${RECOVERY_TEST_EXTRA_ARGS:-}" ]; then
  read -r -a extra_args <<<"$RECOVERY_TEST_EXTRA_ARGS"
  common+=("${extra_args[@]}")
  echo "extra revenant-run options: ${extra_args[*]}"
fi
# RECOVERY_TEST_EXPECT_CAPTURES=1: uploads captured by the device
# (--upload_hold=false); RECOVERY_TEST_EXPECT_HOLDS=1: held (the default), and
# every hold must have been hashed with none found changed.
[ -n "${RECOVERY_TEST_EXPECT_CAPTURES:-}" ] && common+=(--upload_hold=false)
[ -n "${REVENANT_JOURNAL_THREAD_DELAY_US:-}" ] &&
  echo "REVENANT_JOURNAL_THREAD_DELAY_US=$REVENANT_JOURNAL_THREAD_DELAY_US"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
app_args=()
[ "$mode" = host_fn ] || [ "$mode" = random_host_fn ] && app_args=(--host_fn)
# RECOVERY_TEST_APP_ARGS: further options of the application (the captured
# uploads variant: "--batch 4096", a 1 MiB pinned input upload per step).
if [ -n "${RECOVERY_TEST_APP_ARGS:-}" ]; then
  read -r -a more_app_args <<<"$RECOVERY_TEST_APP_ARGS"
  app_args+=("${more_app_args[@]}")
  echo "application options: ${more_app_args[*]}"
fi

"$run" "${common[@]}" -- "$app" --iters "$iters" "${app_args[@]}" >"$tmp/ref.log" 2>&1 || {
  echo "FAIL: the fault-free run failed"; cat "$tmp/ref.log"; exit 1; }
ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
[ -n "$ref" ] || { echo "FAIL: no checksum in the fault-free run"; cat "$tmp/ref.log"; exit 1; }
echo "fault-free: $ranks ranks, $iters iterations, final checksum $ref"
if [ -z "${RECOVERY_TEST_BACKEND_ARGS:-}" ]; then
  # The host backend holds launches back as the cuda backend does (docs/design.md,
  # "Calls"): the kills below must find launches held, else the executor's
  # flush rules are not what this job ran.
  held=$(sed -n 's/.*launches at exit: [0-9]* queued in \([0-9]*\) batches held back.*/\1/p' "$tmp/ref.log" |
    awk '{ s += $1 } END { print s + 0 }')
  echo "batches of launches held back in the fault-free run: $held"
  [ "$held" -gt 0 ] || { echo "FAIL: no launch was held back"; cat "$tmp/ref.log"; exit 1; }
fi
if [ -n "${RECOVERY_TEST_EXPECT_CAPTURES:-}" ]; then
  # The uploads must have been journaled by the device, else this variant
  # tests nothing new.
  captured=$(sed -n 's/.*captured uploads at exit: \([0-9]*\) uploads.*/\1/p' "$tmp/ref.log" |
    awk '{ s += $1 } END { print s + 0 }')
  echo "uploads captured by the device in the fault-free run: $captured"
  [ "$captured" -gt 0 ] || { echo "FAIL: no upload was captured"; cat "$tmp/ref.log"; exit 1; }
fi
if [ -n "${RECOVERY_TEST_EXPECT_HOLDS:-}" ]; then
  # Held, hashed by the device, and never found changed (the device's hash
  # and the copy out's agree).
  held_n=$(sed -n 's/.*held uploads at exit: \([0-9]*\) uploads held.*/\1/p' "$tmp/ref.log" |
    awk '{ s += $1 } END { print s + 0 }')
  hashed_n=$(sed -n 's/.*; \([0-9]*\) hashed by the device.*/\1/p' "$tmp/ref.log" |
    awk '{ s += $1 } END { print s + 0 }')
  echo "uploads held in the fault-free run: $held_n, hashed by the device: $hashed_n"
  if [ "$held_n" -eq 0 ] || [ "$hashed_n" -ne "$held_n" ] ||
     grep -q " [1-9][0-9]* sources found changed" "$tmp/ref.log"; then
    echo "FAIL: expected every upload held and hashed, none found changed"; cat "$tmp/ref.log"; exit 1
  fi
fi
if [[ " ${common[*]} " == *" --journal_thread=ahead "* || " ${common[*]} " == *" --journal_thread=behind "* ]]; then
  # The thread must have journaled requests (not left them all to the
  # executors), and write-behind must have run requests before they were
  # journaled: else the variant would test nothing new.
  by_thread=$(sed -n 's/.*journal thread: \([0-9]*\) requests journaled by it.*/\1/p' "$tmp/ref.log" |
    awk '{ s += $1 } END { print s + 0 }')
  echo "journal threads journaled $by_thread requests in the fault-free run"
  [ "$by_thread" -gt 0 ] || { echo "FAIL: the journal thread journaled nothing"; cat "$tmp/ref.log"; exit 1; }
  if [[ " ${common[*]} " == *" --journal_thread=behind "* ]]; then
    early=$(sed -n 's/.*, \([0-9]*\) of them had run before.*/\1/p' "$tmp/ref.log" |
      awk '{ s += $1 } END { print s + 0 }')
    echo "write-behind: $early requests ran before they were journaled in the fault-free run"
    by_thread_b=$(sed -n 's/.*boundaries placed by the thread \([0-9]*\), by the executor.*/\1/p' "$tmp/ref.log" |
      awk '{ s += $1 } END { print s + 0 }')
    by_exec_b=$(sed -n 's/.*boundaries placed by the thread [0-9]*, by the executor \([0-9]*\).*/\1/p' "$tmp/ref.log" |
      awk '{ s += $1 } END { print s + 0 }')
    echo "write-behind: minibatch boundaries placed by the threads $by_thread_b, by the executors $by_exec_b"
    # An executor that ran out of requests while the thread was behind left
    # the rest to it and ran the next request as it came (printed only: a
    # training step ends with a synchronous request, whose reply catches the
    # journal up first, so these runs seldom find it idle with a backlog;
    # idle_handoff_behind_test checks it).
    idle=$(sed -n "s/.*the idle executor left the thread's backlog to it \([0-9]*\) times.*/\1/p" "$tmp/ref.log" |
      awk '{ s += $1 } END { print s + 0 }')
    echo "write-behind: idle executors left the thread's backlog to it $idle times"
    if [ -n "${REVENANT_JOURNAL_THREAD_DELAY_US:-}" ]; then
      [ "$early" -gt 0 ] || { echo "FAIL: write-behind ran nothing ahead of the journal"; cat "$tmp/ref.log"; exit 1; }
    fi
    if [ "${RECOVERY_TEST_EXPECT_THREAD_BOUNDARIES:-0}" = 1 ]; then
      [ "$by_thread_b" -gt 0 ] || { echo "FAIL: no journal thread placed a boundary"; cat "$tmp/ref.log"; exit 1; }
    fi
  fi
fi

fails=0 hangs=0 mismatches=0 captures_replayed=0
recovery_ms=()
# Microseconds of the first (or last) EVENT in an events file.
event_us() {  # EVENTS EVENT first|last
  if [ "$3" = first ]; then grep "\"$2\"" "$1" | head -1; else grep "\"$2\"" "$1" | tail -1; fi |
    sed -n 's/.*"t_us":\([0-9]*\).*/\1/p'
}
trial() {  # name chaos-spec
  local name="$1" spec="$2" log="$tmp/trial.log" ev="$tmp/trial.events"
  rm -f "$ev"
  local t0=$(date +%s%N)
  # timeout(1) as well: a job revenant-run could not stop is a hang too.
  timeout 200 "$run" "${common[@]}" --events_file="$ev" --chaos="$spec" -- "$app" --iters "$iters" \
    "${app_args[@]}" >"$log" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local same=$(grep -c "^\[r[0-9]*\] final checksum $ref\$" "$log")
  local sums=$(grep -c "^\[r[0-9]*\] final checksum " "$log")
  local recoveries=$(grep -c "replacement agent for rank" "$log")
  # Recovery time: the first agent's death to the last application resumed.
  local died=$(event_us "$ev" agent_died first) resumed=$(event_us "$ev" application_resumed last)
  local rec=none
  if [ -n "$died" ] && [ -n "$resumed" ] && [ "$resumed" -ge "$died" ]; then
    rec=$(( (resumed - died) / 1000 ))
  fi
  # Uploads journaled as captures that a replacement replayed: read from the
  # capture, or (capture not completed when the agent died) from the source.
  local read_captures=$(sed -n 's/.*captured uploads for the replay: \([0-9]*\) read from capture files, \([0-9]*\) not completed.*/\1 \2/p' "$log" |
    awk '{ s += $1 + $2 } END { print s + 0 }')
  captures_replayed=$((captures_replayed + read_captures))
  # Every rank's journal ends at the same minibatch: a replacement whose
  # journal counted a boundary twice would send a later replacement of that
  # rank to another minibatch than its peers.
  local minibatches=$(sed -n 's/^\[a\([0-9]*\)\] .*journal at exit: .*, minibatch \([0-9]*\), payload.*/\1 \2/p' "$log" |
    awk '{ last[$1] = $2 } END { for (r in last) print last[r] }' | sort -u | tr '\n' ' ')
  local mb_ok=1
  [ "$(echo $minibatches | wc -w)" -le 1 ] || mb_ok=0
  if [ "$rc" -eq 0 ] && [ "$same" -eq "$ranks" ] && [ "$recoveries" -ge 1 ] && [ "$mb_ok" = 1 ]; then
    echo "ok   $name [$spec]: $recoveries replacement(s), $ranks/$ranks ranks bitwise equal, recovery ${rec} ms, job ${ms} ms"
    [ "$rec" != none ] && recovery_ms+=("$rec")
  else
    local kind=failed
    if [ "$rc" -eq 124 ] || grep -q "timeout after .* s: stopping the job" "$log"; then
      kind=HANG; hangs=$((hangs + 1))
    elif [ "$sums" -gt "$same" ]; then
      kind=MISMATCH; mismatches=$((mismatches + 1))
    fi
    [ "$mb_ok" = 1 ] || kind="MINIBATCH MISMATCH (the ranks' journals end at minibatches $minibatches)"
    echo "FAIL $name [$spec]: $kind: rc=$rc, $same/$ranks ranks equal ($sums checksums), $recoveries replacement(s), job ${ms} ms"
    grep -v "revenant hostkernel" "$log" | tail -40
    fails=$((fails + 1))
  fi
}

if [ "$mode" = scenarios ]; then
  # Request numbers within a minibatch of train_mlp: 1 input copy, 2 label
  # copy, 3-9 forward/backward kernels, 10-13 gradient all-reduces, 14 SGD,
  # 15 the next iteration's stream synchronize (minibatches without a loss read).
  trial "iteration start"        "rank=1,minibatch=3,calls=1,point=before_append"
  # The boundary placed, its first request run but (write-behind, the thread
  # slowed) not yet journaled: the minibatch log holds only the marker.
  trial "boundary placed only"   "rank=2,minibatch=4,calls=1,point=after_execute"
  trial "mid-backward"           "rank=2,minibatch=4,calls=8"
  trial "mid-all-reduce"         "rank=3,minibatch=5,calls=11,point=after_execute"
  trial "mid-optimizer-step"     "rank=1,minibatch=6,calls=13,point=after_execute"
  trial "after the step"         "rank=1,minibatch=6,calls=15,point=before_append"
  trial "after a wait's reply"   "rank=2,minibatch=6,calls=15,point=after_reply"
  trial "during recovery"        "rank=1,minibatch=4,calls=5;rank=2,recovery=1"
  trial "two ranks at once"      "rank=1,minibatch=4,calls=8;rank=2,minibatch=4,calls=8"
  # Rank 2 killed after minibatch 3's optimizer step (before its boundary),
  # rank 1 during that recovery, in minibatch 4: the replacements are a
  # minibatch apart, and only rank 2's skips the rest of its minibatch.
  trial "recovery a minibatch apart" "rank=2,minibatch=3,calls=15,point=before_append;rank=1,recovery=1"
  total=10
elif [ "$mode" = host_fn ]; then
  # With --host_fn a minibatch is 16 requests: 15 the host function (after
  # the SGD kernel), 16 the next iteration's synchronize. The application
  # fails if its host function did not run exactly once per iteration.
  trial "host function journaled"   "rank=1,minibatch=5,calls=15,point=after_append"
  trial "host function enqueued"    "rank=2,minibatch=5,calls=15,point=after_execute"
  trial "after the host function"   "rank=3,minibatch=6,calls=16,point=before_append"
  trial "boundary journaled only"   "rank=1,minibatch=4,calls=1,point=after_append"
  trial "mid-backward"              "rank=0,minibatch=3,calls=8"
  trial "two ranks, host function"  "rank=1,minibatch=6,calls=15,point=after_execute;rank=2,minibatch=6,calls=14"
  # After the next minibatch's first two requests ran: under write-behind
  # with a slowed thread the journal holds that minibatch's boundary (the
  # executor places it when it starts the minibatch) but not yet the
  # requests, which the replacement runs again from the ring.
  trial "next minibatch started"    "rank=1,minibatch=5,calls=2,point=after_execute"
  total=7
else
  echo "seed=$seed trials=$trials"
  RANDOM=$seed
  points=(before_append after_append after_execute)
  # Requests per minibatch: 15, 16 with the host function (request 15).
  per=15; [ "$mode" = random_host_fn ] && per=16
  for t in $(seq 1 "$trials"); do
    r1=$((RANDOM % ranks)); m=$((1 + RANDOM % (iters - 2))); c=$((1 + RANDOM % per))
    p=${points[$((RANDOM % 3))]}
    spec="rank=$r1,minibatch=$m,calls=$c,point=$p"
    k=$((RANDOM % 10))
    r2=$(( (r1 + 1 + RANDOM % (ranks - 1)) % ranks ))
    if [ $k -lt 2 ]; then  # a second rank in the same minibatch
      spec="$spec;rank=$r2,minibatch=$m,calls=$((1 + RANDOM % per))"
    elif [ $k -eq 2 ]; then  # a second rank during the first one's recovery
      spec="$spec;rank=$r2,recovery=1"
    fi
    trial "random $t" "$spec"
  done
  total=$trials
fi
echo "$((total - fails)) of $total recoveries bitwise equal to the fault-free run"
if [ ${#recovery_ms[@]} -gt 0 ]; then
  read -r median max < <(printf '%s\n' "${recovery_ms[@]}" | sort -n |
    awk '{ a[NR] = $1 } END { m = NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2; print m, a[NR] }')
  echo "summary: $total trials, $hangs hangs, $mismatches mismatches, $((fails - hangs - mismatches)) other failures; recovery (agent death to the last application resumed) median ${median} ms, max ${max} ms over ${#recovery_ms[@]} recoveries"
else
  echo "summary: $total trials, $hangs hangs, $mismatches mismatches, $((fails - hangs - mismatches)) other failures"
fi
if [ -n "${RECOVERY_TEST_EXPECT_CAPTURES:-}${RECOVERY_TEST_EXPECT_HOLDS:-}" ]; then
  echo "captured or held uploads replayed by replacements: $captures_replayed"
  if [ "$captures_replayed" -eq 0 ]; then
    echo "FAIL: no replacement replayed an upload journaled as a capture"
    fails=$((fails + 1))
  fi
fi
[ "$fails" -eq 0 ]
