#!/bin/bash
# The shim's dlopen/dlmopen keep the caller: a library that loads a
# dependency by name through its own RUNPATH ($ORIGIN/sub, as libcudnn loads
# its parts and libtorch_cuda finds libnvrtc) still finds it with the shim
# preloaded, while a load of libcuda.so.1 from the same library is answered
# with the shim itself.
set -u
shim="$(realpath "$1")"; caller="$2"; target="$3"
dir="$(mktemp -d)"; trap 'rm -rf "$dir"' EXIT
mkdir -p "$dir/sub"
cp "$caller" "$dir/libdlopen_caller.so"
cp "$target" "$dir/sub/libdlopen_target.so"
probe() {
  REVENANT_LOG_LEVEL=error python3 - "$dir" <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1] + "/libdlopen_caller.so")
lib.revenant_test_dlopen.restype = ctypes.c_void_p
lib.revenant_test_dlmopen.restype = ctypes.c_void_p
libc = ctypes.CDLL(None)
libc.dlsym.restype = ctypes.c_void_p
libc.dlsym.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
ok = True
for how in ("dlopen", "dlmopen"):
    h = getattr(lib, "revenant_test_" + how)(b"libdlopen_target.so")
    print(how, "of a RUNPATH dependency:", "found" if h else "not found")
    ok = ok and bool(h)
h = lib.revenant_test_dlopen(b"libcuda.so.1")
shim = bool(h) and bool(libc.dlsym(h, b"revenantMarkStep"))
print("dlopen of libcuda.so.1 answered by the shim:", shim)
print("result:", "ok" if ok else "broken", "shim" if shim else "no-shim")
PY
}
native="$(probe)"; echo "$native"
grep -q "result: ok" <<<"$native" || { echo "FAIL: the caller's RUNPATH does not work even without the shim"; exit 1; }
shimmed="$(LD_PRELOAD="$shim" probe)"; echo "$shimmed"
grep -q "result: ok shim" <<<"$shimmed" || { echo "FAIL: under the shim"; exit 1; }
echo "ok: the shim's dlopen keeps the caller's RUNPATH and answers the driver"
