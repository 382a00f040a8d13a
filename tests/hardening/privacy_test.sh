#!/bin/bash
# Privacy of a job: what it makes on disk is its owner's only (every
# directory 0700, every file and socket 0600, the job directory named at
# random, a communicator's rendezvous inside it, not in /dev/shm), the agent
# talks only to its own uid, nothing listens beyond loopback, and the NCCL
# unique id's token never reaches a log. Needs root for the other-uid part
# (CI runs tests as root); without root that part fails, it does not skip.
#   privacy_test.sh <revenant-run> <revenant-agent> <peer_probe>
#                   <load app> <load host kernels> <nccl app> <nccl host kernels>
# The load app (tests/hardening/load.cu) keeps pinned memory and its channel
# for a few seconds; the NCCL app (tests/apps/train_mlp) brings up Gloo.
set -u
run="$1"; agent="$2"; probe="$3"; load_app="$4"; load_kernels="$5"
nccl_app="$6"; nccl_kernels="$7"
NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
root="$(mktemp -d /dev/shm/rvpriv-XXXXXX)"
agent_pid=
cleanup() { [ -n "$agent_pid" ] && kill "$agent_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$root"; }
trap cleanup EXIT
[ "$(id -u)" -eq 0 ] || { echo "FAIL: run as root (switches to uid 65534 for the other-uid checks)"; exit 1; }
command -v setpriv >/dev/null || { echo "FAIL: setpriv (util-linux) is needed"; exit 1; }

# --- 1. The control socket: mode 0600 in a 0700 directory, peer uid checked.
rank_dir="$root/agent/rank0"
mkdir -p -m 0700 "$root/agent" "$rank_dir"
sock="$rank_dir/agent.sock"
"$agent" --socket="$sock" --job_dir="$rank_dir" --rank=0 --backend=host --journal=false \
  >"$root/agent.log" 2>&1 &
agent_pid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { cat "$root/agent.log"; echo "FAIL: the agent did not listen within 10 s"; exit 1; }
mode=$(stat -c %a "$sock")
[ "$mode" = 600 ] && ok "control socket mode 0600" || fail "control socket mode $mode, not 600"

# Positive control: our own uid gets as far as the hello check.
reply=$("$probe" "$sock" 2>&1); rc=$?
if [ $rc -eq 0 ] && echo "$reply" | grep -q "not in this job's directory"; then
  ok "same uid reaches the hello check ($reply)"
else
  fail "same-uid probe: rc $rc, '$reply'"
fi

# Another uid cannot even reach the socket: the job directory is 0700.
reply=$("${NOBODY[@]}" "$probe" "$sock" 2>&1); rc=$?
if [ $rc -eq 3 ] && echo "$reply" | grep -qi "permission denied"; then
  ok "uid 65534 cannot reach the socket through the 0700 directory"
else
  fail "uid 65534 through the 0700 directory: rc $rc, '$reply'"
fi

# Made reachable on purpose (directories 0711, socket 0666): the agent itself
# must refuse the other uid (SO_PEERCRED), before reading its hello.
chmod 0711 "$root" "$root/agent" "$rank_dir"; chmod 0666 "$sock"
reply=$("${NOBODY[@]}" "$probe" "$sock" 2>&1); rc=$?
chmod 0700 "$root" "$root/agent" "$rank_dir"; chmod 0600 "$sock"
if [ $rc -eq 0 ] && echo "$reply" | grep -q "op=refused" && ! echo "$reply" | grep -q "job's directory"; then
  ok "the agent refuses uid 65534 by its peer credentials ($reply)"
else
  fail "uid 65534 on a reachable socket: rc $rc, '$reply'"
fi
grep -q "refused a connection" "$root/agent.log" && ok "the agent logged the refusal" ||
  fail "no refusal in the agent's log"
kill "$agent_pid"; wait "$agent_pid" 2>/dev/null; agent_pid=
# What the standalone agent made in its directory (agent.pid, the socket).
bad=$(find "$root/agent" -mindepth 1 -perm /077 -printf '%m %P\n')
[ -z "$bad" ] && [ -e "$rank_dir/agent.pid" ] && ok "standalone agent: agent.pid and socket 0600" ||
  fail "standalone agent's files with group/other bits (or no agent.pid): $bad"

# --- 2. Jobs under revenant-run: modes of everything in the job directory,
# TCP listeners of the agents, the NCCL token in logs.
# Watches a running job (pid $1, job root $2) until it ends (bounded by the
# job's own --timeout). Every 50 ms: the mode of everything the job directory
# holds (any group/other bit fails: directories 0700, files and sockets
# 0600), the names of /dev/shm (a communicator's rendezvous must not be
# there), whether another uid can list the job directory, and the journal
# (for the NCCL token). Every 10 ms,
# in a second loop: the agents' listening TCP sockets (Gloo's listeners live
# only while a communicator connects).
watch_job() {
  local pid="$1" jroot="$2" tag="$3"
  : >"$root/$tag.bad"; : >"$root/$tag.note"; : >"$root/$tag.seen"; : >"$root/$tag.listen"
  : >"$root/$tag.tokens"; : >"$root/$tag.jobtokens"; : >"$root/$tag.shmnames"
  : >"$root/$tag.jobnames"; : >"$root/$tag.other"
  (
    while kill -0 "$pid" 2>/dev/null; do
      for p in $(cat "$jroot"/revenant-*/rank*/agent.pid 2>/dev/null); do
        inodes=$(ls -l "/proc/$p/fd" 2>/dev/null | grep -o 'socket:\[[0-9]*\]' | grep -o '[0-9]*' |
          tr '\n' ' ')
        [ -n "$inodes" ] || continue
        # Listening TCP sockets (state 0A) of this agent, with their local address.
        awk -v inodes=" $inodes" '$4 == "0A" && index(inodes, " " $10 " ") { print FILENAME, $2 }' \
          /proc/net/tcp /proc/net/tcp6 >>"$root/$tag.listen"
      done
      sleep 0.01
    done
  ) &
  local sampler=$!
  while kill -0 "$pid" 2>/dev/null; do
    find "$jroot" -mindepth 1 -perm /077 -printf '%y %m %P\n' 2>/dev/null >>"$root/$tag.bad"
    find "$jroot" -mindepth 1 -printf '%f\n' 2>/dev/null | sed 's/[0-9]\+/N/g' >>"$root/$tag.seen"
    find "$jroot" -mindepth 1 -maxdepth 1 -printf '%f\n' 2>/dev/null >>"$root/$tag.jobnames"
    # Rendezvous directories: in the job directory (wanted), in /dev/shm (not).
    find "$jroot" -mindepth 2 -maxdepth 2 -name 'collectives-*' -printf '%f\n' 2>/dev/null |
      sed 's/^collectives-//; s/-e[0-9]*$//' >>"$root/$tag.jobtokens"
    ls /dev/shm 2>/dev/null >>"$root/$tag.shmnames"
    for d in "$jroot"/revenant-*; do
      [ -d "$d" ] || continue
      "${NOBODY[@]}" ls "$d" >/dev/null 2>&1 && echo "listed $d" >>"$root/$tag.other"
      "${NOBODY[@]}" cat "$d"/rank0/journal/setup-000001.log >/dev/null 2>&1 &&
        echo "read $d/rank0/journal/setup-000001.log" >>"$root/$tag.other"
    done
    # The journal holds the ncclCommInitRank request, id included (replay needs it).
    cp -r "$jroot"/revenant-*/rank0/journal "$root/$tag.journal.tmp" 2>/dev/null &&
      { rm -rf "$root/$tag.journal"; mv "$root/$tag.journal.tmp" "$root/$tag.journal"; }
    rm -rf "$root/$tag.journal.tmp"
    sleep 0.05
  done
  wait "$sampler"
}
check_job() {
  local tag="$1"
  shift
  sort -u "$root/$tag.bad" | sed "s|^|$tag: |" >"$root/$tag.bad.u"
  [ -s "$root/$tag.bad.u" ] &&
    fail "group/other bits in the $tag job directory: $(head -20 "$root/$tag.bad.u" | tr '\n' ';')" ||
    ok "$tag: every directory of the job 0700, every file and socket 0600 ($(sort -u "$root/$tag.seen" | wc -l) kinds of names seen)"
  [ -s "$root/$tag.other" ] && fail "$tag: uid 65534 could $(sort -u "$root/$tag.other" | head -3)" ||
    ok "$tag: uid 65534 can neither list the job directory nor read a journal"
  # The job directory's name is random (16 hex digits), not a pid or a time.
  local names
  names=$(sort -u "$root/$tag.jobnames")
  if [ -n "$names" ] && ! echo "$names" | grep -qvE '^revenant-[0-9a-f]{16}$'; then
    ok "$tag: job directory named by 8 random bytes ($names)"
  else
    fail "$tag: job directory names not of the form revenant-<16 hex>: $names"
  fi
  for want in "$@"; do
    grep -qx "$want" "$root/$tag.seen" ||
      fail "$tag: never saw a file like '$want' (the mode check would be vacuous)"
  done
}

# 2a. The channel (chan-*) and pinned memory (host-*): the load program, one
# rank, 3 s.
mkdir -m 0700 "$root/job1"
"$run" -n 1 --backend=host --timeout=120 --job_root="$root/job1" --host_kernels="$load_kernels" \
  -- "$load_app" 3 >"$root/job1.out" 2>&1 &
job=$!
watch_job "$job" "$root/job1" pinned
wait "$job"; rc=$?
[ $rc -eq 0 ] || { cat "$root/job1.out"; fail "the load job exited with $rc"; }
check_job pinned "chan-N" "host-N-N" "journal"

# 2b. NCCL through Gloo: two ranks.
# Gloo's listeners live only until their peer connects, so rank 1's
# application waits (through a wrapper, up to 25 s, within the job's 30 s
# collective timeout) until the sampler has seen rank 0's listener and the
# rendezvous: rank 0's agent sits in the communicator's rendezvous meanwhile,
# however loaded the machine is (holding rank 1's agent with SIGSTOP raced
# with the ranks' own rendezvous under a full test run).
mkdir -m 0700 "$root/job2"
cat >"$root/hold_rank1.sh" <<EOS
#!/bin/bash
if [ "\$RANK" = 1 ]; then
  for _ in \$(seq 250); do [ -e "$root/go" ] && break; sleep 0.1; done
fi
exec "$nccl_app" "\$@"
EOS
chmod 0700 "$root/hold_rank1.sh"
REVENANT_COLLECTIVE_TIMEOUT_S=30 "$run" -n 2 --backend=host --timeout=120 \
  --job_root="$root/job2" --host_kernels="$nccl_kernels" --events_file="$root/events.jsonl" \
  -- "$root/hold_rank1.sh" --iters 20 --hidden 64 >"$root/job2.out" 2>&1 &
job=$!
(
  for _ in $(seq 200); do
    [ -s "$root/nccl.listen" ] && [ -s "$root/nccl.jobtokens" ] && break
    sleep 0.1
  done
  sleep 0.2
  touch "$root/go"
) &
holder=$!
watch_job "$job" "$root/job2" nccl
wait "$holder"
wait "$job"; rc=$?
[ $rc -eq 0 ] || { cat "$root/job2.out"; fail "the NCCL job exited with $rc"; }
check_job nccl "chan-N" "journal"
n_listen=$(sort -u "$root/nccl.listen" | wc -l)
beyond=$(sort -u "$root/nccl.listen" | awk '
  $1 ~ /tcp6$/ { if ($2 !~ /^00000000000000000000000001000000:/) print }
  $1 ~ /tcp$/  { if ($2 !~ /^0100007F:/) print }')
if [ "$n_listen" -eq 0 ]; then
  fail "saw no TCP listener of the NCCL job's agents (the listener check would be vacuous)"
elif [ -n "$beyond" ]; then
  fail "agents listen beyond loopback: $beyond"
else
  ok "the agents' $n_listen TCP listener(s) are all on 127.0.0.1"
fi
# The token: 16 bytes after the id's magic "RVNTNCCL", hex as the agent names it.
for f in "$root"/nccl.journal/*; do
  for off in $(grep -obUa RVNTNCCL "$f" 2>/dev/null | cut -d: -f1); do
    od -An -tx1 -j $((off + 8)) -N16 "$f" | tr -d ' \n' >>"$root/nccl.tokens"
    echo >>"$root/nccl.tokens"
  done
done
tokens=$(sort -u "$root/nccl.tokens" | grep -E '^[0-9a-f]{32}$' | grep -v '^0*$')
if [ -z "$tokens" ]; then
  fail "never saw the NCCL unique id's token (the log check would be vacuous)"
else
  # Rank 1's agent is held in its rendezvous (above), so rank 0's is seen.
  if sort -u "$root/nccl.jobtokens" | grep -qxF "$tokens"; then
    ok "the communicator's rendezvous is in the job directory (collectives-${tokens:0:6}...)"
  else
    fail "never saw the rendezvous collectives-<token> in the job directory" \
      "(seen: $(sort -u "$root/nccl.jobtokens" | tr '\n' ' '))"
  fi
  for t in $tokens; do
    hits=$(grep -l -r -F "$t" "$root/job2.out" "$root/events.jsonl" "$root/job1.out" 2>/dev/null)
    [ -z "$hits" ] && ok "the NCCL token ${t:0:6}... appears in no log" ||
      fail "the NCCL token appears in: $hits"
    # The rendezvous is named after the token: it must be in the job
    # directory (seen there, else the check is vacuous), never in /dev/shm.
    grep -F "$t" "$root/nccl.shmnames" | sort -u | sed 's/^/in \/dev\/shm: /' >"$root/nccl.shmhits"
    [ -s "$root/nccl.shmhits" ] && fail "the NCCL token names /dev/shm entries: $(cat "$root/nccl.shmhits")" ||
      ok "the NCCL token ${t:0:6}... names nothing in /dev/shm"
  done
fi

[ "$fails" -eq 0 ] || { echo "FAIL: $fails privacy check(s) failed"; exit 1; }
echo "ok: privacy checks passed"
