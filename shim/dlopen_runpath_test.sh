#!/bin/bash
# The shim's dlopen answers libcuda.so.1 itself and hands every other request
# to the real dlopen as a tail call, so the loader still sees the real caller:
# a library that dlopens a name found only through its own RUNPATH
# ($ORIGIN/sub) must keep finding it under the shim. Builds the two tiny
# libraries with the system C compiler at test time.
set -u
shim="$1"
d="$(mktemp -d)"; trap 'rm -rf "$d"' EXIT
mkdir -p "$d/sub"
cat >"$d/a.c" <<'C'
#include <dlfcn.h>
int probe(void) {
  void* h = dlopen("librp_b.so", RTLD_NOW);
  if (!h) return -1;
  int (*f)(void) = (int (*)(void))dlsym(h, "b_value");
  return f ? f() : -2;
}
void* driver_init(void) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW);
  return h ? dlsym(h, "cuInit") : 0;
}
C
echo 'int b_value(void) { return 42; }' >"$d/b.c"
cc -shared -fPIC -o "$d/sub/librp_b.so" "$d/b.c" || { echo "FAIL: cc"; exit 1; }
cc -shared -fPIC -o "$d/librp_a.so" "$d/a.c" -Wl,-rpath,'$ORIGIN/sub' -Wl,--enable-new-dtags -ldl ||
  { echo "FAIL: cc"; exit 1; }
readelf -d "$d/librp_a.so" | grep -q 'RUNPATH.*\$ORIGIN/sub' || { echo "FAIL: no RUNPATH"; exit 1; }
probe='
import ctypes, sys
a = ctypes.CDLL(sys.argv[1])
a.driver_init.restype = ctypes.c_void_p
cu = a.driver_init()
shim = ctypes.CDLL(sys.argv[2]) if len(sys.argv) > 2 else None
own = ctypes.cast(shim.cuInit, ctypes.c_void_p).value if shim else None
print("probe", a.probe(), "cuInit_is_shim", int(cu is not None and cu == own))
'
native="$(python3 -c "$probe" "$d/librp_a.so" 2>&1 | tail -1)"
echo "native: $native"
[[ "$native" == "probe 42 "* ]] || { echo "FAIL: the library does not find its RUNPATH neighbour natively"; exit 1; }
under="$(LD_PRELOAD="$shim" python3 -c "$probe" "$d/librp_a.so" "$shim" 2>&1 | tail -1)"
echo "under the shim: $under"
[ "$under" = "probe 42 cuInit_is_shim 1" ] ||
  { echo "FAIL: under the shim the RUNPATH lookup or the libcuda answer broke"; exit 1; }
echo "PASS dlopen_runpath_test"
