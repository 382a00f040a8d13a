#!/bin/bash
# revenant-run takes torchrun's command line: --nproc-per-node (or _), a *.py
# program run with the interpreter, -m MODULE, --no-python, and the program's
# own flags after its name; several nodes without etcd, and bad rendezvous
# flags, are refused clearly (jobs spanning nodes: multinode_test.sh); a failing
# rank stops the job at once with its status.
set -u
run="$1"; script="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
fail=0
check() {  # NAME LOG PATTERN...
  local name="$1" log="$2"; shift 2
  for p in "$@"; do
    if ! grep -q -- "$p" "$log"; then
      echo "FAIL $name: no line matching '$p'"; cat "$log"; fail=1; return
    fi
  done
  echo "ok $name"
}
py="$(command -v python3)" || { echo "FAIL: python3 not found"; exit 1; }

"$run" --quiet --nproc-per-node=2 "$script" --lr 1e-3 -x >"$dir/a.log" 2>&1 \
  || { echo "FAIL script: exit $?"; cat "$dir/a.log"; fail=1; }
check script "$dir/a.log" \
  "\[r0\] launch RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=[0-9]* argv=--lr|1e-3|-x main=__main__" \
  "\[r1\] launch RANK=1 LOCAL_RANK=1 WORLD_SIZE=2 "
[ "$(grep -c '\] launch ' "$dir/a.log")" -eq 2 ] || { echo "FAIL script: not 2 ranks"; fail=1; }

cp "$script" "$dir/show_launch_mod.py"
PYTHONPATH="$dir" "$run" --quiet --nproc_per_node 3 -m show_launch_mod --epochs 2 \
  >"$dir/m.log" 2>&1 || { echo "FAIL module: exit $?"; cat "$dir/m.log"; fail=1; }
check module "$dir/m.log" "\[r2\] launch RANK=2 LOCAL_RANK=2 WORLD_SIZE=3 .*argv=--epochs|2 main=__main__"

{ echo "#!$py"; cat "$script"; } >"$dir/launch_tool"
chmod +x "$dir/launch_tool"
"$run" --quiet --nproc-per-node=1 --no-python "$dir/launch_tool" --flag >"$dir/n.log" 2>&1 \
  || { echo "FAIL no-python: exit $?"; cat "$dir/n.log"; fail=1; }
check no-python "$dir/n.log" "\[r0\] launch RANK=0 .*argv=--flag"

# The classic form still works: flags, --, the program.
"$run" --quiet -n 1 -- "$py" "$script" a b >"$dir/c.log" 2>&1 \
  || { echo "FAIL classic: exit $?"; cat "$dir/c.log"; fail=1; }
check classic "$dir/c.log" "argv=a|b"

# A rank that fails ends the job at once, with its status, as under torchrun:
# its peer (here asleep, as a peer blocked in a collective would be) is stopped.
cat >"$dir/fail_one.py" <<'EOF'
import os, sys, time
if os.environ["RANK"] == "1":
    print("rank 1 fails", flush=True)
    sys.exit(3)
time.sleep(120)
print("rank 0 was not stopped", flush=True)
EOF
t0=$(date +%s)
"$run" --nproc-per-node=2 --timeout=100 "$dir/fail_one.py" >"$dir/f.log" 2>&1; rc=$?
t1=$(date +%s)
if [ "$rc" -ne 3 ]; then echo "FAIL stop-on-failure: exit $rc, want 3"; cat "$dir/f.log"; fail=1; fi
if [ $((t1 - t0)) -gt 30 ]; then echo "FAIL stop-on-failure: took $((t1 - t0)) s"; fail=1; fi
check stop-on-failure "$dir/f.log" "rank 1 failed with status 3: stopping the other ranks"
if grep -q "rank 0 was not stopped" "$dir/f.log"; then echo "FAIL stop-on-failure: rank 0 ran on"; fail=1; fi

"$run" --quiet --nnodes=2 --nproc-per-node=1 "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL nnodes: exit $rc, want 2"; fail=1; fi
check nnodes "$dir/x.log" "a job of several nodes needs --rdzv-endpoint=HOST:PORT (etcd) and --rdzv-id=JOB"

"$run" --quiet --nnodes=2 --rdzv-endpoint=127.0.0.1:1 --nproc-per-node=1 "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL rdzv-id: exit $rc, want 2"; fail=1; fi
check rdzv-id "$dir/x.log" "needs --rdzv-id=JOB"

"$run" --quiet --nnodes=2 --node-rank=2 --rdzv-endpoint=127.0.0.1:1 --rdzv-id=j "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL node-rank: exit $rc, want 2"; fail=1; fi
check node-rank "$dir/x.log" "node-rank=2 must be in 0..1"

"$run" --quiet --nnodes=2 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:1 --rdzv-id=j "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL rdzv-backend: exit $rc, want 2"; fail=1; fi
check rdzv-backend "$dir/x.log" "only etcd is supported"

"$run" --quiet --nnodes=2 --rdzv-endpoint=127.0.0.1:1 --rdzv-id=j --max-restarts=-1 "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL max-restarts: exit $rc, want 2"; fail=1; fi
check max-restarts "$dir/x.log" "--max-restarts must be in 0..1000"

# etcd that is not there: a clear error, bounded (--rdzv_timeout bounds the retries).
t0=$(date +%s)
"$run" --quiet --nnodes=2 --rdzv-endpoint=127.0.0.1:1 --rdzv-id=j --rdzv_timeout=2 "$script" >"$dir/x.log" 2>&1; rc=$?
if [ "$rc" -ne 1 ] || [ $(( $(date +%s) - t0 )) -gt 20 ]; then echo "FAIL no-etcd: exit $rc after $(( $(date +%s) - t0 )) s"; fail=1; fi
check no-etcd "$dir/x.log" "node 0 of job 'j': etcd at http://127.0.0.1:1 unreachable"

"$run" --quiet -n 2 --nproc-per-node=3 "$script" >"$dir/y.log" 2>&1; rc=$?
if [ "$rc" -ne 2 ]; then echo "FAIL disagree: exit $rc, want 2"; fail=1; fi
check disagree "$dir/y.log" "disagree"

[ "$fail" -eq 0 ] && echo "all ok"
exit "$fail"
