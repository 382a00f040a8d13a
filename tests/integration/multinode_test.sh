#!/bin/bash
# A job spanning "nodes": two revenant-run processes (node 0 and node 1) of
# 2 ranks each on the host backend, coordinated through etcd on loopback,
# their agents' Gloo collectives meeting through it.
#   multinode_test.sh MODE RUN APP KERNELS ETCD_LOCAL
# MODE:
#   join           the start agreement: a node whose peer never comes ends
#                  within --rdzv_timeout naming it; SIGTERM while waiting ends
#                  it at once; a node rank taken twice is refused (once the
#                  holder's lease outlived a TTL: it is alive)
#   env            each rank's torchrun environment (RANK, LOCAL_RANK,
#                  WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
#                  MASTER_PORT the same on both nodes)
#   equal          train_mlp on 2 nodes x 2 ranks ends bitwise equal to the
#                  4-rank single-node run; the job's keys are gone after it
#   agent_kill     agents killed (on node 1, on node 0, one on each node at
#                  once: two coordinators claiming epochs; on node 1 with a
#                  spare there) are replaced on their node; every run ends
#                  bitwise equal
#   launcher_term  node 1's launcher is stopped (SIGTERM, a scheduler's
#                  preemption) mid-run: it records its failure in etcd and
#                  node 0 ends at once, naming node 1 and the reason
#   launcher_kill  node 1's launcher is killed (SIGKILL) mid-run: node 0 ends
#                  with an error naming node 1's ranks once its lease
#                  expires, bounded, never a hang
#   rejoin         node 1's launcher is killed (SIGKILL) mid-run and started
#                  again with the same --node-rank, twice at once (a
#                  supervisor's restart racing a person's): one wins node rank
#                  1 (compare-and-swap), the other is refused naming it; with
#                  --max-restarts=1 the job moves to round 1, node 0 restarts
#                  its ranks, and every rank ends bitwise equal to the
#                  fault-free run
#   rejoin_refused without --max-restarts a restarted node 1 is refused
#                  with an error saying why and node 0 ends naming node 1's
#                  ranks; with --max-restarts=1 and no node 1 coming back,
#                  node 0 ends within --rdzv_timeout naming it; both bounded
#   rejoin_rank_failure  node 0's ranks fail as soon as node 1's launcher
#                  is killed (before its lease expires); with --max-restarts
#                  node 0 waits a lease for the loss instead of ending, and
#                  every rank starts again with the restarted node 1
#                  (rejoin*: seeded by REVENANT_TEST_SEED, default 20261225:
#                  when the launcher is killed, which restarted one starts first)
#   etcd_restart   etcd is killed and restarted (down 2 s) mid-run: the job
#                  rides through on its retries and ends bitwise equal
#   etcd_lost      etcd is killed for good mid-run: both nodes end with an
#                  error naming etcd within the bound (--rdzv_timeout)
# etcd: REVENANT_TEST_ETCD_ENDPOINT when set (.ci/run's), else a private one
# (ETCD_LOCAL = scripts/etcd_local.sh); the etcd_* modes always start their
# own, since they kill it. Without etcd the test fails (tagged "etcd").
set -u
mode="$1"; run="$2"; app="$3"; kernels="$4"; etcd_local="$5"
tmp="$(mktemp -d)"
etcd_dir="$tmp/etcd"
cleanup() {
  [ -f "$etcd_dir/pid" ] && bash "$etcd_local" stop "$etcd_dir"
  for f in "$tmp"/pid*; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; for f in "$tmp"/*.log; do [ -f "$f" ] && { echo "--- $f"; tail -40 "$f"; }; done; exit 1; }

endpoint="${REVENANT_TEST_ETCD_ENDPOINT:-}"
case "$mode" in etcd_restart|etcd_lost) endpoint="" ;; esac
if [ -z "$endpoint" ]; then
  endpoint=$(bash "$etcd_local" start "$etcd_dir") ||
    fail "no etcd: REVENANT_TEST_ETCD_ENDPOINT is unset and etcd_local.sh could not start one (apt-get install etcd-server)"
fi
echo "etcd at $endpoint"
etcdctl_get() {  # prefix: the keys under it, one a line
  python3 - "$endpoint" "$1" <<'PY'
import base64, json, sys, urllib.request
ep, prefix = sys.argv[1], sys.argv[2].encode()
end = prefix[:-1] + bytes([prefix[-1] + 1])
body = json.dumps({"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode(),
                   "keys_only": True}).encode()
req = urllib.request.Request("http://%s/v3/kv/range" % ep, data=body, headers={"Content-Type": "application/json"})
for kv in json.load(urllib.request.urlopen(req, timeout=5)).get("kvs", []):
    print(base64.b64decode(kv["key"]).decode())
PY
}

host=(--backend=host --host_kernels="$kernels")
seq_id=0
# nodes ITERS [node0 options] -- [node1 options]: starts both launchers in the
# background (logs n0.log, n1.log; pids pid0, pid1) under a fresh job id.
nodes() {
  local iters="$1"; shift
  local o0=() o1=() side=0
  for a in "$@"; do
    if [ "$a" = "--" ]; then side=1; continue; fi
    if [ $side = 0 ]; then o0+=("$a"); else o1+=("$a"); fi
  done
  seq_id=$((seq_id + 1))
  job="mn-$mode-$$-$seq_id-$RANDOM"
  local cmd=("$app" --iters "$iters" --hidden 64)
  # env: the program is `env` itself; each rank prints its environment.
  [ "$mode" = env ] && cmd=("$(command -v env)")
  local k
  for k in 0 1; do
    local extra=()
    if [ $k = 0 ]; then extra=("${o0[@]}"); else extra=("${o1[@]}"); fi
    # Bounded by --timeout (and Bazel's test timeout); $! is the launcher
    # itself (launcher_kill kills it).
    "$run" --nnodes=2 --node-rank=$k --nproc-per-node=2 \
      --rdzv-endpoint="$endpoint" --rdzv-id="$job" "${host[@]}" --timeout=150 "${extra[@]}" \
      -- "${cmd[@]}" >"$tmp/n$k.log" 2>&1 &
    echo $! >"$tmp/pid$k"
  done
}
wait_nodes() {  # sets rc0 rc1
  wait "$(cat "$tmp/pid0")"; rc0=$?
  wait "$(cat "$tmp/pid1")"; rc1=$?
  rm -f "$tmp/pid0" "$tmp/pid1"
}
reference() {  # iters: the 4-rank single-node checksum
  "$run" -n 4 "${host[@]}" --timeout=150 -- "$app" --iters "$1" --hidden 64 >"$tmp/ref.log" 2>&1 ||
    fail "the single-node run failed"
  ref=$(sed -n 's/^\[r0\] final checksum \([0-9a-f]*\)$/\1/p' "$tmp/ref.log")
  [ -n "$ref" ] || fail "no checksum in the single-node run"
  echo "single node, 4 ranks, $1 iterations: final checksum $ref"
}
equal_to_ref() {  # what: every rank of both nodes printed $ref
  local same
  same=$(cat "$tmp/n0.log" "$tmp/n1.log" | grep -c "^\[r[0-3]\] final checksum $ref\$")
  [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "$1: exit statuses $rc0 and $rc1"
  [ "$same" -eq 4 ] || fail "$1: $same of 4 ranks ended with checksum $ref"
  for r in 0 1; do grep -q "^\[r$r\] final checksum" "$tmp/n0.log" || fail "$1: rank $r not on node 0"; done
  for r in 2 3; do grep -q "^\[r$r\] final checksum" "$tmp/n1.log" || fail "$1: rank $r not on node 1"; done
}

case "$mode" in
join)
  job="mn-join-$$-$RANDOM"
  one() {  # node-rank log [options]: node K of 2, alone (call it in a subshell: it execs)
    local k="$1" log="$2"; shift 2
    exec "$run" --nnodes=2 --node-rank="$k" --nproc-per-node=1 --rdzv-endpoint="$endpoint" \
      --rdzv-id="$job" "${host[@]}" "$@" -- "$app" --iters 1 >"$tmp/$log" 2>&1
  }
  t0=$(date +%s%N)
  (one 0 alone.log --rdzv_timeout=2); rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -eq 1 ] || fail "a node without its peer ended with status $rc, want 1"
  grep -q "node(s) 1 did not join within 2s (1 of 2 present" "$tmp/alone.log" || fail "the missing node is not named"
  [ "$ms" -lt 10000 ] || fail "the start agreement took $ms ms with --rdzv_timeout=2"
  echo "ok: alone, node 0 ended in $ms ms: $(grep -o "node(s) 1 did not join[^(]*" "$tmp/alone.log")"
  job="mn-join-$$-$RANDOM"
  one 0 term.log --rdzv_timeout=60 &
  pid=$!
  sleep 1.5
  kill -TERM "$pid"
  t0=$(date +%s%N)
  wait "$pid"; rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -ne 0 ] || fail "SIGTERM while waiting: status 0"
  grep -q "stopped by a signal while waiting for the other nodes" "$tmp/term.log" || fail "SIGTERM while waiting: no reason given"
  [ "$ms" -lt 5000 ] || fail "SIGTERM while waiting: it took $ms ms to stop"
  echo "ok: SIGTERM while waiting for node 1 ended node 0 in $ms ms"
  job="mn-join-$$-$RANDOM"
  one 1 first.log --rdzv_timeout=30 --rdzv_lease=2 &
  pid=$!
  for _ in $(seq 100); do [ -n "$(etcdctl_get "/revenant/$job/nodes/")" ] && break; sleep 0.1; done
  # The second waits out a lease (2 s + 2 s) in case the holder died, then is refused.
  t0=$(date +%s%N)
  (one 1 second.log --rdzv_timeout=30 --rdzv_lease=2); rc=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  kill -TERM "$pid"; wait "$pid"
  [ "$rc" -eq 1 ] || fail "a node rank taken twice: status $rc, want 1"
  grep -q "node rank 1 of job '$job' is held by a live launcher (nproc=1 addr=127.0.0.1" "$tmp/second.log" ||
    fail "a node rank taken twice: not refused clearly"
  grep -q "its lease was still renewed after 4s" "$tmp/second.log" || fail "a node rank taken twice: the wait is not named"
  [ "$ms" -lt 10000 ] || fail "a node rank taken twice: refused after $ms ms"
  echo "ok: node rank 1 taken twice: the second launcher is refused after $ms ms"
  ;;
env)
  nodes 1
  wait_nodes
  [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "env: exit statuses $rc0 and $rc1"
  ports=""
  for r in 0 1 2 3; do
    k=$((r / 2)); l=$((r % 2))
    for want in "RANK=$r" "LOCAL_RANK=$l" "WORLD_SIZE=4" "LOCAL_WORLD_SIZE=2" "GROUP_RANK=$k" \
        "GROUP_WORLD_SIZE=2" "MASTER_ADDR=127.0.0.1" "TORCHELASTIC_RUN_ID=$job"; do
      grep -qx "\[r$r\] $want" "$tmp/n$k.log" || fail "rank $r (node $k) lacks $want"
    done
    ports="$ports $(sed -n "s/^\[r$r\] MASTER_PORT=\([0-9]*\)$/\1/p" "$tmp/n$k.log")"
  done
  [ "$(echo $ports | tr ' ' '\n' | sort -u | wc -l)" -eq 1 ] || fail "MASTER_PORT differs: $ports"
  echo "ok: torchrun's variables on 2 nodes x 2 ranks (MASTER_PORT$ports)"
  ;;
equal)
  reference 12
  nodes 12
  wait_nodes
  equal_to_ref "2 nodes x 2 ranks"
  grep -q "node 1 of 2 joined job '$job'.*ranks 2..3 of 4" "$tmp/n1.log" || fail "node 1 did not say it joined"
  left=$(etcdctl_get "/revenant/$job/")
  [ -z "$left" ] || fail "the job's keys stayed in etcd: $left"
  echo "ok: 2 nodes x 2 ranks bitwise equal to 1 node x 4 ranks; no keys left"
  ;;
agent_kill)
  reference 12
  trial() {  # name node0-chaos node1-chaos [node1 options]
    local c0=() c1=()
    [ -n "$2" ] && c0=(--chaos="$2")
    [ -n "$3" ] && c1=(--chaos="$3")
    [ -n "${4:-}" ] && c1+=($4)
    local t0=$(date +%s%N)
    nodes 12 "${c0[@]}" -- "${c1[@]}"
    wait_nodes
    equal_to_ref "$1"
    local r0 r1
    r0=$(grep -cE "replacement agent for rank|spare agent pid [0-9]+ takes rank" "$tmp/n0.log")
    r1=$(grep -cE "replacement agent for rank|spare agent pid [0-9]+ takes rank" "$tmp/n1.log")
    [ -z "$2" ] || [ "$r0" -ge 1 ] || fail "$1: no replacement on node 0"
    [ -z "$3" ] || [ "$r1" -ge 1 ] || fail "$1: no replacement on node 1"
    [ -n "$2" ] || [ "$r0" -eq 0 ] || fail "$1: a replacement on node 0, whose agents were not killed"
    [ -n "$3" ] || [ "$r1" -eq 0 ] || fail "$1: a replacement on node 1, whose agents were not killed"
    echo "ok   $1: replacements node 0: $r0, node 1: $r1; 4/4 ranks bitwise equal, $(( ($(date +%s%N) - t0) / 1000000 )) ms"
  }
  trial "rank 3 (node 1) mid-all-reduce" "" "rank=3,minibatch=5,calls=11,point=after_execute"
  trial "rank 1 (node 0) mid-backward" "rank=1,minibatch=4,calls=8" ""
  trial "rank 1 and rank 2 at once (both nodes)" "rank=1,minibatch=4,calls=8" "rank=2,minibatch=4,calls=8"
  trial "rank 0 (node 0) after the step" "rank=0,minibatch=6,calls=15,point=before_append" ""
  trial "rank 2 (node 1), a spare waiting there" "" "rank=2,minibatch=4,calls=8" "--spares=1"
  grep -qE "spare agent pid [0-9]+ takes rank 2" "$tmp/n1.log" || fail "the spare of node 1 did not take rank 2"
  ;;
launcher_term)
  nodes 3000
  for _ in $(seq 300); do
    grep -q "agents ready" "$tmp/n1.log" 2>/dev/null && grep -q "agents ready" "$tmp/n0.log" 2>/dev/null && break
    sleep 0.1
  done
  sleep 2
  kill -TERM "$(cat "$tmp/pid1")"
  t0=$(date +%s%N)
  wait_nodes
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc1" -eq 143 ] || fail "node 1 ended with status $rc1 after SIGTERM, want 143"
  [ "$rc0" -ne 0 ] || fail "node 0 ended with status 0 without node 1"
  grep -q "node 1 (ranks 2, 3) of job '$job' ended with a failure: its launcher got signal 15" "$tmp/n0.log" ||
    fail "node 0 did not name node 1's failure"
  [ "$ms" -lt 20000 ] || fail "node 0 took $ms ms to end after node 1 stopped"
  echo "ok: node 1 stopped by SIGTERM; node 0 ended (status $rc0) within ${ms} ms: $(grep -o "node 1 (ranks 2, 3) of job[^;]*" "$tmp/n0.log" | head -1)"
  ;;
launcher_kill)
  nodes 3000 --rdzv_lease=3 -- --rdzv_lease=3
  # Both joined and training: then node 1's launcher goes (its agents and
  # ranks die with it: they are its children).
  for _ in $(seq 300); do
    grep -q "agents ready" "$tmp/n1.log" 2>/dev/null && grep -q "agents ready" "$tmp/n0.log" 2>/dev/null && break
    sleep 0.1
  done
  sleep 2
  kill -9 "$(cat "$tmp/pid1")"
  t0=$(date +%s%N)
  # What the killed launcher could not remove: its job directory and the
  # application's bootstrap directory (tests/apps/collectives_bootstrap.h).
  j1=$(sed -n 's/^\[revenant-run\] job \([0-9a-f]*\): .*/\1/p' "$tmp/n1.log" | head -1)
  p1=$(sed -n 's/.*; master [0-9.]*:\([0-9]*\)$/\1/p' "$tmp/n1.log" | head -1)
  wait "$(cat "$tmp/pid0")"; rc0=$?
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  rm -f "$tmp/pid0" "$tmp/pid1"
  [ -n "$j1" ] && rm -rf "/dev/shm/revenant-$j1"
  [ -n "$p1" ] && rm -rf "/dev/shm/revenant-train-$p1"
  [ "$rc0" -ne 0 ] || fail "node 0 ended with status 0 without node 1"
  grep -q "lost node 1 (ranks 2, 3) of job '$job'" "$tmp/n0.log" || fail "node 0 did not name the lost ranks"
  [ "$ms" -lt 30000 ] || fail "node 0 took $ms ms to end after node 1's launcher died (lease 3 s)"
  echo "ok: node 0 ended (status $rc0) ${ms} ms after node 1's launcher was killed: $(grep -o "lost node 1 (ranks 2, 3)[^;]*" "$tmp/n0.log" | head -1)"
  ;;
rejoin|rejoin_refused|rejoin_rank_failure)
  # Seeded: when node 1's launcher is killed (1.0-2.9 s into the run) and
  # which of the two restarted launchers starts first.
  seed="${REVENANT_TEST_SEED:-20261225}"
  RANDOM=$seed
  kill_after() { d="$((RANDOM % 2 + 1)).$((RANDOM % 10))"; }  # sets d (no subshell: RANDOM goes on)
  echo "seed=$seed"
  ready() {  # both launchers' agents are up, the ranks running
    for _ in $(seq 300); do
      grep -q "agents ready" "$tmp/n1.log" 2>/dev/null && grep -q "agents ready" "$tmp/n0.log" 2>/dev/null && return 0
      sleep 0.1
    done
    fail "the nodes did not start"
  }
  # What a killed launcher cannot remove (its job directory, the application's
  # bootstrap directories, tests/apps/collectives_bootstrap.h): removed at the end.
  leftovers() {
    for f in "$tmp"/n*.log; do
      for j in $(sed -n 's/^\[revenant-run\] job \([0-9a-f]*\): .*/\1/p' "$f"); do rm -rf "/dev/shm/revenant-$j"; done
      for p in $(sed -n 's/.*; master [0-9.]*:\([0-9]*\)$/\1/p' "$f"); do rm -rf "/dev/shm/revenant-train-$p"; done
    done
  }
  restart1() {  # log [options]: node 1's launcher started again (same job, same node rank)
    local log="$1"; shift
    "$run" --nnodes=2 --node-rank=1 --nproc-per-node=2 --rdzv-endpoint="$endpoint" --rdzv-id="$job" \
      "${host[@]}" --timeout=150 "$@" -- "$app" --iters "$iters" --hidden 64 >"$tmp/$log" 2>&1
  }
  if [ "$mode" = rejoin ]; then
    iters=300
    reference $iters
    opts=(--max-restarts=1 --rdzv_lease=3 --rdzv_timeout=60)
    nodes $iters "${opts[@]}" -- "${opts[@]}"
    ready
    kill_after
    sleep "$d"
    kill -9 "$(cat "$tmp/pid1")"
    t0=$(date +%s%N)
    ! grep -q "final checksum" "$tmp/n0.log" "$tmp/n1.log" ||
      fail "the ranks ended before node 1's launcher was killed (raise iters)"
    first=$((RANDOM % 2))
    echo "node 1's launcher killed ${d} s into the run; starting it again twice at once ($([ $first = 0 ] && echo a || echo b) first)"
    if [ $first = 0 ]; then
      restart1 n1a.log "${opts[@]}" & echo $! >"$tmp/pid1a"
      restart1 n1b.log "${opts[@]}" & echo $! >"$tmp/pid1b"
    else
      restart1 n1b.log "${opts[@]}" & echo $! >"$tmp/pid1b"
      restart1 n1a.log "${opts[@]}" & echo $! >"$tmp/pid1a"
    fi
    wait "$(cat "$tmp/pid0")"; rc0=$?
    wait "$(cat "$tmp/pid1a")"; rca=$?
    wait "$(cat "$tmp/pid1b")"; rcb=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    rm -f "$tmp"/pid*
    leftovers
    if [ "$rca" -eq 0 ]; then win=n1a; lose=n1b; rcl=$rcb; else win=n1b; lose=n1a; rcl=$rca; fi
    [ "$rc0" -eq 0 ] || fail "node 0 ended with status $rc0 (want 0: node 1 rejoined)"
    [ "${rca}${rcb}" = "01" ] || [ "${rca}${rcb}" = "10" ] ||
      fail "the two restarted launchers of node 1 ended with $rca and $rcb (want one 0, one 1)"
    grep -q "node rank 1 of job '$job' is held by a live launcher (nproc=2 addr=127.0.0.1" "$tmp/$lose.log" ||
      fail "the losing launcher of node rank 1 was not refused clearly"
    for k in 0 1; do
      f="$tmp/n0.log"; [ $k = 1 ] && f="$tmp/$win.log"
      grep -q "node $k of 2 joined job '$job'.*, round 1 (restart 1 of --max-restarts=1)" "$f" ||
        fail "node $k did not join round 1"
      for r in $((2 * k)) $((2 * k + 1)); do
        [ "$(grep -c "^\[r$r\] final checksum $ref\$" "$f")" -eq 1 ] || fail "rank $r (node $k) did not end with checksum $ref"
      done
    done
    grep -q "node 0 restarts its ranks" "$tmp/n0.log" || fail "node 0 did not restart its ranks"
    [ "$ms" -lt 200000 ] || fail "the rejoin took $ms ms"
    echo "ok: node 1 restarted (one of two launchers won node rank 1); the job restarted in round 1; 4/4 ranks bitwise equal, ${ms} ms after the kill"
    echo "    node 0: $(grep -o "[^]]*stopping this node's ranks[^;]*" "$tmp/n0.log" | head -1)"
    echo "    loser:  $(grep -o "node rank 1 of job.*is held by a live launcher" "$tmp/$lose.log" | head -1)"
    left=$(etcdctl_get "/revenant/$job/")
    [ -z "$left" ] || fail "the job's keys stayed in etcd: $left"
  elif [ "$mode" = rejoin_rank_failure ]; then
    # The program: a script whose round-0 ranks on node 0 fail as soon as
    # node 1's launcher is gone (as ranks do whose peers or MASTER_ADDR store
    # died), before node 1's lease expires; in the next round every rank
    # ends well. TORCHELASTIC_RESTART_COUNT tells the rounds apart.
    cat >"$tmp/app.sh" <<'SH'
echo "round $TORCHELASTIC_RESTART_COUNT of $TORCHELASTIC_MAX_RESTARTS: rank $RANK up"
if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then
  for _ in $(seq 600); do [ -f "$PEER_GONE" ] && { echo "rank $RANK: peers gone"; exit 1; }; sleep 0.1; done
  exit 1
fi
echo "rank $RANK done in round $TORCHELASTIC_RESTART_COUNT"
SH
    export PEER_GONE="$tmp/peer_gone"
    opts=(--max-restarts=1 --rdzv_lease=3 --rdzv_timeout=30)
    script=(-- "$(command -v bash)" "$tmp/app.sh")
    job="mn-$mode-$$-$RANDOM"
    for k in 0 1; do
      "$run" --nnodes=2 --node-rank=$k --nproc-per-node=2 --rdzv-endpoint="$endpoint" --rdzv-id="$job" \
        "${host[@]}" --timeout=60 "${opts[@]}" "${script[@]}" >"$tmp/n$k.log" 2>&1 &
      echo $! >"$tmp/pid$k"
    done
    for _ in $(seq 300); do
      [ "$(cat "$tmp/n0.log" "$tmp/n1.log" | grep -c "round 0 of 1: rank [0-3] up")" -eq 4 ] && break
      sleep 0.1
    done
    [ "$(cat "$tmp/n0.log" "$tmp/n1.log" | grep -c "round 0 of 1: rank [0-3] up")" -eq 4 ] || fail "the ranks did not start"
    kill_after
    sleep "$d"
    kill -9 "$(cat "$tmp/pid1")"
    touch "$PEER_GONE"
    t0=$(date +%s%N)
    echo "node 1's launcher killed ${d} s after the ranks started; node 0's ranks fail at once"
    sleep 1
    "$run" --nnodes=2 --node-rank=1 --nproc-per-node=2 --rdzv-endpoint="$endpoint" --rdzv-id="$job" \
      "${host[@]}" --timeout=60 "${opts[@]}" "${script[@]}" >"$tmp/n1again.log" 2>&1; rc1=$?
    wait "$(cat "$tmp/pid0")"; rc0=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    rm -f "$tmp"/pid*
    leftovers
    [ "$rc0" -eq 0 ] && [ "$rc1" -eq 0 ] || fail "exit statuses $rc0 (node 0) and $rc1 (restarted node 1), want 0 0"
    grep -q "node 0's ranks failed; waiting up to 5 s for a lost node" "$tmp/n0.log" || fail "node 0 did not wait for a lost node"
    grep -q "node 0 restarts its ranks" "$tmp/n0.log" || fail "node 0 did not restart its ranks"
    for r in 0 1; do grep -q "^\[r$r\] rank $r done in round 1$" "$tmp/n0.log" || fail "rank $r did not end in round 1"; done
    for r in 2 3; do grep -q "^\[r$r\] rank $r done in round 1$" "$tmp/n1again.log" || fail "rank $r did not end in round 1"; done
    [ "$ms" -lt 60000 ] || fail "it took $ms ms"
    echo "ok: node 0's ranks failed before node 1's lease expired; node 0 waited, restarted them in round 1 with the restarted node 1, all ended well ${ms} ms after the kill"
  else
    iters=3000
    # 1. No restarts allowed: the restarted launcher is refused, node 0 ends.
    nodes $iters --rdzv_lease=3 -- --rdzv_lease=3
    ready
    kill_after
    echo "killing node 1's launcher ${d} s into the run"
    sleep "$d"
    kill -9 "$(cat "$tmp/pid1")"
    t0=$(date +%s%N)
    restart1 n1again.log --rdzv_lease=3; rc1=$?
    wait "$(cat "$tmp/pid0")"; rc0=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    rm -f "$tmp"/pid*
    leftovers
    [ "$rc1" -eq 1 ] || fail "the restarted node 1 ended with status $rc1, want 1"
    grep -q "node 1 cannot rejoin job '$job': its round 0 started without this launcher" "$tmp/n1again.log" ||
      fail "the restarted node 1 did not say why it cannot rejoin"
    grep -q -- "--max-restarts=0 allows none" "$tmp/n1again.log" || fail "the refusal does not name --max-restarts"
    [ "$rc0" -ne 0 ] || fail "node 0 ended with status 0 without node 1"
    grep -qE "lost node 1 \(ranks 2, 3\) of job '$job'|node 1 \(ranks 2, 3\) of job '$job' ended with a failure: node 1 cannot rejoin" "$tmp/n0.log" ||
      fail "node 0 did not name node 1's ranks"
    [ "$ms" -lt 30000 ] || fail "it took $ms ms"
    echo "ok: --max-restarts=0: the restarted node 1 was refused and node 0 ended (status $rc0) within ${ms} ms"
    echo "    $(grep -o "node 1 cannot rejoin[^(]*" "$tmp/n1again.log" | head -1)"
    # 2. A restart allowed, but node 1 never comes back: bounded by --rdzv_timeout.
    opts=(--max-restarts=1 --rdzv_lease=3 --rdzv_timeout=5)
    nodes $iters "${opts[@]}" -- "${opts[@]}"
    ready
    kill_after
    echo "killing node 1's launcher ${d} s into the run"
    sleep "$d"
    kill -9 "$(cat "$tmp/pid1")"
    t0=$(date +%s%N)
    wait "$(cat "$tmp/pid0")"; rc0=$?
    ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    rm -f "$tmp"/pid*
    leftovers
    [ "$rc0" -eq 1 ] || fail "node 0 ended with status $rc0 without node 1, want 1"
    grep -q "node(s) 1 did not rejoin for restart 1 within 5s" "$tmp/n0.log" || fail "node 0 did not name the node that did not rejoin"
    [ "$ms" -lt 40000 ] || fail "node 0 took $ms ms to end (lease 3 s, rdzv timeout 5 s)"
    echo "ok: --max-restarts=1, node 1 never back: node 0 ended within ${ms} ms: $(grep -o "node(s) 1 did not rejoin[^(]*" "$tmp/n0.log" | head -1)"
  fi
  ;;
etcd_restart)
  reference 150
  nodes 150
  sleep 2.5
  bash "$etcd_local" restart "$etcd_dir" 2 || fail "etcd did not come back"
  echo "etcd restarted (down 2 s) mid-run"
  wait_nodes
  equal_to_ref "etcd restarted mid-run"
  echo "ok: etcd restarted mid-run; 4/4 ranks bitwise equal"
  ;;
etcd_lost)
  nodes 3000 --rdzv_timeout=4 -- --rdzv_timeout=4
  for _ in $(seq 300); do
    grep -q "agents ready" "$tmp/n1.log" 2>/dev/null && grep -q "agents ready" "$tmp/n0.log" 2>/dev/null && break
    sleep 0.1
  done
  sleep 1
  kill -9 "$(cat "$etcd_dir/pid")"
  t0=$(date +%s%N)
  wait_nodes
  ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc0" -ne 0 ] && [ "$rc1" -ne 0 ] || fail "a node ended with status 0 without etcd ($rc0, $rc1)"
  for k in 0 1; do
    grep -q "node $k lost the job's etcd: etcd at http://$endpoint unreachable" "$tmp/n$k.log" ||
      fail "node $k did not name the unreachable etcd"
  done
  [ "$ms" -lt 40000 ] || fail "the nodes took $ms ms to end without etcd (bound 4 s)"
  echo "ok: without etcd both nodes ended in ${ms} ms: $(grep -o "node 0 lost the job's etcd[^;]*" "$tmp/n0.log" | head -1)"
  ;;
*) fail "unknown mode $mode" ;;
esac
