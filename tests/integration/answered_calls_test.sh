#!/bin/bash
# Calls the shim sends without waiting or answers itself, on the host
# backend at 2 ranks:
#   answered_calls_test.sh RUN APP
# The program (tests/apps/answered_calls.cu) passes with REVENANT_SHIM_ANSWERS
# on (the default) and off; with it on, its 64 event creations per rank go
# without waiting (0 sent synchronously) and of its 200 ncclCommGetAsyncError
# polls per rank only the first waits, and those more than 100 ms after the
# last one the agent ran reach it without waiting, and its 35 stream capture mode exchanges
# go without waiting; with it off, every one waits.
set -u
run="$1"; app="$2"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
common=(-n 2 --backend=host --timeout=120)
for arm in on off; do
  v=1; [ "$arm" = off ] && v=0
  REVENANT_SHIM_ANSWERS=$v REVENANT_DIAGNOSTICS=1 "$run" "${common[@]}" -- "$app" \
    >"$tmp/$arm.log" 2>&1
  rc=$?
  passes=$(grep -c "PASS answered_calls" "$tmp/$arm.log")
  if [ "$rc" -ne 0 ] || [ "$passes" -ne 2 ]; then
    echo "FAIL: REVENANT_SHIM_ANSWERS=$v: rc=$rc, $passes of 2 ranks passed"
    grep -vE "submit seq|reply seq" "$tmp/$arm.log" | tail -30
    exit 1
  fi
done
count() { grep -cE "submit seq [0-9]* $2 \([0-9]* bytes, $3\)" "$1"; }
on_sync_ev=$(( $(count "$tmp/on.log" cudaEventCreate sync) + $(count "$tmp/on.log" cudaEventCreateWithFlags sync) ))
on_async_ev=$(( $(count "$tmp/on.log" cudaEventCreate async) + $(count "$tmp/on.log" cudaEventCreateWithFlags async) ))
off_sync_ev=$(( $(count "$tmp/off.log" cudaEventCreate sync) + $(count "$tmp/off.log" cudaEventCreateWithFlags sync) ))
on_polls=$(count "$tmp/on.log" ncclCommGetAsyncError sync)
on_polls_behind=$(count "$tmp/on.log" ncclCommGetAsyncError async)
off_polls=$(count "$tmp/off.log" ncclCommGetAsyncError sync)
on_modes_async=$(count "$tmp/on.log" cudaThreadExchangeStreamCaptureMode async)
on_modes_sync=$(count "$tmp/on.log" cudaThreadExchangeStreamCaptureMode sync)
off_modes_sync=$(count "$tmp/off.log" cudaThreadExchangeStreamCaptureMode sync)
echo "event creations: $on_async_ev without waiting, $on_sync_ev waiting (answers on); $off_sync_ev waiting (off)"
echo "capture mode exchanges: $on_modes_async without waiting, $on_modes_sync waiting (answers on); $off_modes_sync waiting (off)"
echo "ncclCommGetAsyncError sent: $on_polls waiting and $on_polls_behind without waiting (answers on), $off_polls waiting (off)"
# Per rank: 64 valid creations, plus the two invalid ones that always wait.
if [ "$on_async_ev" -ne 128 ] || [ "$on_sync_ev" -ne 4 ] || [ "$off_sync_ev" -ne 132 ]; then
  echo "FAIL: event creations: expected 128 without waiting and 4 waiting with answers on, 132 waiting off"
  exit 1
fi
# With the answers on, only each rank's first poll waits; a poll more than
# 100 ms after the last one the agent ran goes without waiting: at least the
# one after the program's 150 ms pause on each rank (the loop alone may take
# less than 100 ms), at most one per 100 ms of a run.
if [ "$off_polls" -ne 400 ] || [ "$on_polls" -ne 2 ] || [ "$on_polls_behind" -lt 2 ] ||
   [ "$on_polls_behind" -gt 100 ]; then
  echo "FAIL: polls: expected 400 waiting with answers off; 2 waiting and 2..100 without waiting with them on"
  exit 1
fi
# Per rank: 32 guard exchanges, 2 more and one on another thread.
if [ "$on_modes_async" -ne 70 ] || [ "$on_modes_sync" -ne 0 ] || [ "$off_modes_sync" -ne 70 ]; then
  echo "FAIL: capture mode exchanges: expected 70 without waiting and none waiting with answers on, 70 waiting off"
  exit 1
fi
echo "ok: the shim assigned $on_async_ev events and answered $((400 - on_polls)) of 400 polls ($on_polls_behind sent on without waiting)"
