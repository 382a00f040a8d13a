#!/bin/bash
# The application process under the shim never maps libcuda: not through the
# runtime, and not when it loads the driver itself (dlopen of libcuda.so.1 by
# name and of libcuda.so by path), even where a loadable libcuda.so.1 is on
# the library path (the toolkit's stub library stands in for a real driver;
# the test first shows the plain loader would map it).
set -u
run="$1"; probe="$2"; kernels="$3"; stub="${4:-/usr/local/cuda/lib64/stubs/libcuda.so}"
[ -r "$stub" ] || { echo "FAIL: no driver stub at $stub"; exit 1; }
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
ln -s "$stub" "$dir/libcuda.so.1"
python3 - "$dir" <<'PY' || { echo "FAIL: the stand-in libcuda.so.1 does not load natively"; exit 1; }
import ctypes, os, sys
os.environ["LD_LIBRARY_PATH"] = sys.argv[1]
ctypes.CDLL(os.path.join(sys.argv[1], "libcuda.so.1"))
assert "libcuda.so" in open("/proc/self/maps").read()
PY
out="$dir/out"
LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$run" -n 1 --backend=host --timeout=60 --host_kernels="$kernels" -- "$probe" "$stub" >"$out" 2>&1
rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: probe exited with $rc"; exit 1; }
grep -q "^\[r0\] driver loads answered: 3" "$out" || { echo "FAIL: the driver loads were not answered"; exit 1; }
grep -q "^\[r0\] libcuda mapped: no" "$out" || { echo "FAIL: libcuda was loaded in the application"; exit 1; }
echo "ok: libcuda never loaded in the application process"
