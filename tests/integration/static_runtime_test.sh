#!/bin/bash
# Programs linked with the static CUDA runtime are refused at start under the
# shim, with a message saying why and what to do: exit status 1, no output
# of the program itself (tests/apps vector_add_static, and stripped).
set -u
run="$1"; shift
fails=0
for app in "$@"; do
  out="$(mktemp)"
  timeout 60 "$run" -n 1 --backend=host --timeout=30 -- "$app" >"$out" 2>&1
  rc=$?
  if [ "$rc" -ne 0 ] && grep -q "is linked with the static CUDA runtime" "$out" &&
     grep -q "Rebuild it with \`nvcc -cudart shared\`" "$out" && ! grep -q "PASS vector_add" "$out"; then
    echo "ok: $(basename "$app") refused ($(grep -o 'static): [^.]*' "$out" | head -1))"
  else
    echo "FAIL: $(basename "$app") not refused as expected (rc=$rc)"; cat "$out"
    fails=$((fails + 1))
  fi
  rm -f "$out"
done
exit "$fails"
