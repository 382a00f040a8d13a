#!/bin/bash
# Multi-rank NCCL programs under revenant-run (host backend, NCCL through the
# Gloo collective engine).
#
#   collectives_test.sh train RUN APP KERNELS N [APP ARGS...]
#     runs APP twice with N ranks; each run must exit 0 with every rank
#     printing "PASS <app>" and the same "final checksum", and both runs must
#     print the same checksum (determinism).
#   collectives_test.sh pass RUN APP N NAME
#     runs APP once with N ranks; exit 0 and "PASS NAME" from every rank.
set -u
mode="$1"; shift
run="$1"; app="$2"; shift 2

run_once() {  # n out [kernels] -- args
  local n="$1" out="$2" kernels="$3"; shift 3
  local extra=()
  [ -n "$kernels" ] && extra=(--host_kernels="$kernels")
  # A bounded run: revenant-run's own timeout, and the engine's.
  REVENANT_COLLECTIVE_TIMEOUT_S=30 "$run" -n "$n" --backend=host --timeout=120 "${extra[@]}" \
    -- "$app" "$@" >"$out" 2>&1
  local rc=$?
  cat "$out"
  return $rc
}

expect_pass_lines() {  # out n name
  local out="$1" n="$2" name="$3" r
  for ((r = 0; r < n; r++)); do
    if ! grep -q "^\[r$r\] PASS $name\$" "$out"; then
      echo "FAIL: rank $r printed no 'PASS $name'"; exit 1
    fi
  done
}

case "$mode" in
  train)
    kernels="$1"; n="$2"; shift 2
    name="$(basename "$app" .bin)"
    sums=()
    for attempt in 1 2; do
      out="$(mktemp)"
      echo "=== run $attempt: $n rank(s)"
      if ! run_once "$n" "$out" "$kernels" "$@"; then
        echo "FAIL: run $attempt exited non-zero"; exit 1
      fi
      expect_pass_lines "$out" "$n" "$name"
      got="$(grep -o '^\[r[0-9]*\] final checksum [0-9a-f]*' "$out" | awk '{print $4}' | sort -u)"
      lines="$(grep -c '^\[r[0-9]*\] final checksum ' "$out")"
      if [ "$lines" -ne "$n" ]; then echo "FAIL: $lines checksum lines for $n ranks"; exit 1; fi
      if [ "$(echo "$got" | wc -l)" -ne 1 ] || [ -z "$got" ]; then
        echo "FAIL: ranks disagree on the final checksum: $got"; exit 1
      fi
      if ! grep -q '^\[r0\] iter 0 loss ' "$out"; then echo "FAIL: no loss line"; exit 1; fi
      sums+=("$got")
    done
    if [ "${sums[0]}" != "${sums[1]}" ]; then
      echo "FAIL: not deterministic: ${sums[0]} then ${sums[1]}"; exit 1
    fi
    echo "ok: $n rank(s) agree on checksum ${sums[0]} in both runs"
    ;;
  pass)
    n="$1"; name="$2"
    out="$(mktemp)"
    if ! run_once "$n" "$out" ""; then echo "FAIL: $name exited non-zero"; exit 1; fi
    expect_pass_lines "$out" "$n" "$name"
    echo "ok: $name passes on $n ranks"
    ;;
  *)
    echo "unknown mode $mode"; exit 2
    ;;
esac
