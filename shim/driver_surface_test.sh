#!/bin/bash
# The shim's driver surface without an agent: every CUresult of cuda.h has
# its name and a string; the entry-point lookups answer by base name and
# version with the shim's own exports; the stand-in primary context and the
# per-thread context stack behave as the driver's.
set -u
shim="$1"
header=/usr/local/cuda/include/cuda.h
[ -r "$header" ] || { echo "FAIL: no $header"; exit 1; }
REVENANT_LOG_LEVEL=error python3 - "$shim" "$header" <<'PY'
import ctypes, re, sys
lib = ctypes.CDLL(sys.argv[1])
text = open(sys.argv[2]).read()
enum = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", text, re.S).group(1)
codes = re.findall(r"^\s*(CUDA_[A-Z0-9_]+)\s*=\s*(\d+)", enum, re.M)
assert len(codes) > 90, len(codes)
failures = []
def check(cond, what):
    if not cond:
        failures.append(what)
p = ctypes.c_char_p()
for name, value in codes:
    r = lib.cuGetErrorName(int(value), ctypes.byref(p))
    check(r == 0 and p.value == name.encode(), "cuGetErrorName(%s) = %d %r" % (name, r, p.value))
    r = lib.cuGetErrorString(int(value), ctypes.byref(p))
    check(r == 0 and p.value, "cuGetErrorString(%s) = %d" % (name, r))
check(lib.cuGetErrorName(12345, ctypes.byref(p)) == 1 and p.value is None, "unknown CUresult")
check(lib.cuGetErrorString(2, ctypes.byref(p)) == 0 and p.value == b"out of memory", "string of 2")
print("error names and strings:", len(codes))

# Entry points.
fn = ctypes.c_void_p()
st = ctypes.c_int(-1)
addr = lambda name: ctypes.cast(getattr(lib, name), ctypes.c_void_p).value
r = lib.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(fn), 12000, 0, ctypes.byref(st))
check(r == 0 and st.value == 0 and fn.value == addr("cuMemAlloc_v2"), "cuMemAlloc at 12.0")
r = lib.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(fn), 3000, 0, ctypes.byref(st))
check(r == 0 and st.value == 0 and fn.value == addr("cuMemAlloc"), "cuMemAlloc at 3.0")
r = lib.cuGetProcAddress_v2(b"cuMemAllocAsync", ctypes.byref(fn), 11000, 0, ctypes.byref(st))
check(r == 0 and st.value == 2 and fn.value is None, "cuMemAllocAsync at 11.0: %d %d" % (r, st.value))
r = lib.cuGetProcAddress_v2(b"cuNoSuchFunction", ctypes.byref(fn), 12000, 0, ctypes.byref(st))
check(r == 0 and st.value == 1 and fn.value is None, "unknown name")
check(lib.cuGetProcAddress_v2(b"cuMemAlloc", ctypes.byref(fn), 12000, 4, None) == 1, "bad flags")
check(lib.cuGetProcAddress_v2(None, ctypes.byref(fn), 12000, 0, None) == 1, "null symbol")
r = lib.cuGetProcAddress(b"cuDeviceGet", ctypes.byref(fn), 12000, 0)
check(r == 0 and fn.value == addr("cuDeviceGet"), "the CUDA 11.3 form")
r = lib.cudaGetDriverEntryPointByVersion(b"cuStreamWriteValue32", ctypes.byref(fn), 12000, 0,
                                          ctypes.byref(st))
check(r == 0 and st.value == 0 and fn.value == addr("cuStreamWriteValue32_v2"), "runtime lookup")
r = lib.cudaGetDriverEntryPoint(b"cuTexRefCreate", ctypes.byref(fn), 0, ctypes.byref(st))
check(r == 0 and st.value == 0 and fn.value == addr("cuTexRefCreate"), "a refused function")
check(ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)(fn.value)(None) == 801, "refused call")
check(lib.cudaGetDriverEntryPointByVersion(b"cuInit", ctypes.byref(fn), 12000, 9, None) == 1,
      "runtime lookup, bad flags")
tab = ctypes.c_void_p(1)
uuid = (ctypes.c_char * 16)()
check(lib.cuGetExportTable(ctypes.byref(tab), uuid) == 801 and tab.value is None,
      "no private driver tables")
print("entry points checked")

# Initialization and the primary context, no agent: inactive until retained.
check(lib.cuInit(0) == 0 and lib.cuInit(1) == 1, "cuInit flags")
flags, active = ctypes.c_uint(9), ctypes.c_int(9)
check(lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0
      and active.value == 0, "inactive before use")
check(lib.cuDevicePrimaryCtxGetState(1, ctypes.byref(flags), ctypes.byref(active)) == 101,
      "device 1")
ctx, cur = ctypes.c_void_p(), ctypes.c_void_p()
check(lib.cuCtxGetCurrent(ctypes.byref(cur)) == 0 and cur.value is None, "no current context")
check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0 and ctx.value, "retain")
ctx2 = ctypes.c_void_p()
check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(ctx2), 0) == 0 and ctx2.value == ctx.value,
      "one stand-in context")
check(lib.cuDevicePrimaryCtxGetState(0, ctypes.byref(flags), ctypes.byref(active)) == 0
      and active.value == 1, "active once retained")
check(lib.cuCtxGetCurrent(ctypes.byref(cur)) == 0 and cur.value == ctx.value, "current")
check(lib.cuCtxSetCurrent(ctypes.c_void_p(0x1234)) == 201, "a context that is not the primary")
popped = ctypes.c_void_p()
check(lib.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 0 and popped.value == ctx.value, "pop")
check(lib.cuCtxGetCurrent(ctypes.byref(cur)) == 0 and cur.value is None, "none after the pop")
dev = ctypes.c_int(-1)
check(lib.cuCtxGetDevice(ctypes.byref(dev)) == 201, "no context, no device")
check(lib.cuCtxPopCurrent_v2(ctypes.byref(popped)) == 201, "pop of nothing")
check(lib.cuCtxPushCurrent_v2(ctx) == 0, "push")
check(lib.cuCtxGetDevice(ctypes.byref(dev)) == 0 and dev.value == 0, "device of the context")
check(lib.cuCtxGetDevice_v2(ctypes.byref(dev), ctypes.c_void_p(0x1234)) == 201, "v2, bad context")
api = ctypes.c_uint()
check(lib.cuCtxGetApiVersion(ctx, ctypes.byref(api)) == 0 and api.value == 3020, "API version")
check(lib.cuDevicePrimaryCtxRelease_v2(0) == 0 and lib.cuDevicePrimaryCtxRelease_v2(0) == 0,
      "two releases")
check(lib.cuDevicePrimaryCtxRelease_v2(0) == 201, "a release too many")
d = ctypes.c_int(-1)
check(lib.cuDeviceGet(ctypes.byref(d), 0) == 0 and d.value == 0, "device 0")
check(lib.cuDeviceGet(ctypes.byref(d), 1) == 101, "device 1 does not exist")
word = ctypes.c_uint()
check(lib.cuPointerGetAttribute(ctypes.byref(word), 2, ctypes.addressof(word)) == 1,
      "host memory the shim does not know")
print("contexts checked")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("ok")
PY
