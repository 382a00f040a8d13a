#!/bin/bash
# A private etcd on loopback for tests (Debian's etcd-server, etcd 3.4).
#   endpoint=$(bash scripts/etcd_local.sh start DIR)   # prints 127.0.0.1:PORT
#   bash scripts/etcd_local.sh stop DIR
#   bash scripts/etcd_local.sh restart DIR SECONDS   # killed, down SECONDS, back
# DIR (created if missing) holds its data directory, log, pid and ports; the
# ports are free ones the OS picked. `start` returns once etcd answers
# (bounded: 30 s), else prints its log and fails; `stop` ends it (SIGTERM,
# then SIGKILL after 5 s) and removes DIR; `restart` kills it (SIGKILL),
# waits, and starts it again on the same ports and data (tests of an etcd
# that goes away mid-job).
set -uo pipefail
cmd="${1:-}"; dir="${2:-}"
[ -n "$cmd" ] && [ -n "$dir" ] || { echo "usage: $0 start|stop DIR" >&2; exit 2; }
launch() {  # client-port peer-port: starts etcd, waits until it answers
  local client="$1" peer="$2"
  ETCD_UNSUPPORTED_ARCH= etcd --name "revenant-test" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$client" --advertise-client-urls "http://127.0.0.1:$client" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "revenant-test=http://127.0.0.1:$peer" --log-outputs stderr \
    >>"$dir/log" 2>&1 </dev/null &
  echo $! >"$dir/pid"
  echo "$client $peer" >"$dir/ports"
  for _ in $(seq 300); do
    if python3 - "$client" <<'PY' 2>/dev/null; then
import sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:%s/v3/kv/range" % sys.argv[1], data=b'{"key":"AA=="}',
                             headers={"Content-Type": "application/json"})
urllib.request.urlopen(req, timeout=1).read()
PY
      echo "127.0.0.1:$client"
      return 0
    fi
    kill -0 "$(cat "$dir/pid")" 2>/dev/null || break
    sleep 0.1
  done
  echo "etcd_local: etcd did not start on 127.0.0.1:$client; its log:" >&2
  cat "$dir/log" >&2
  kill -9 "$(cat "$dir/pid")" 2>/dev/null
  return 1
}

case "$cmd" in
start)
  command -v etcd >/dev/null || { echo "etcd_local: etcd is not installed (apt-get install etcd-server)" >&2; exit 1; }
  mkdir -p "$dir" || exit 1
  # The ports are free when picked, not when etcd binds them: another test
  # may take one meanwhile. Then new ones, at most 5 times.
  for try in 1 2 3 4 5; do
    read -r client peer < <(python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
    launch "$client" "$peer" && exit 0
    grep -q "address already in use" "$dir/log" || exit 1
    echo "etcd_local: a port was taken before etcd bound it; new ports (try $try of 5)" >&2
    rm -rf "$dir/data" "$dir/log"
  done
  exit 1
  ;;
restart)
  down="${3:-1}"
  [ -f "$dir/ports" ] || { echo "etcd_local: no etcd in $dir" >&2; exit 1; }
  read -r client peer <"$dir/ports"
  pid=$(cat "$dir/pid")
  kill -9 "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  sleep "$down"
  launch "$client" "$peer" >/dev/null
  ;;
stop)
  if [ -f "$dir/pid" ]; then
    pid=$(cat "$dir/pid")
    kill "$pid" 2>/dev/null
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
  fi
  rm -rf "$dir"
  ;;
*) echo "usage: $0 start|stop DIR | restart DIR SECONDS" >&2; exit 2 ;;
esac
