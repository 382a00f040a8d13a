// A library whose RUNPATH ($ORIGIN/sub) finds what it loads: for
// //shim:dlopen_caller_test (the shim's dlopen must keep the caller's).
// The calls must not be tail calls: the caller glibc sees is the return
// address, which must be in this library.
#include <dlfcn.h>

extern "C" __attribute__((visibility("default"))) void* revenant_test_dlopen(const char* name) {
  void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  __asm__ volatile("" : : "r"(h) : "memory");
  return h;
}

extern "C" __attribute__((visibility("default"))) void* revenant_test_dlmopen(const char* name) {
  void* h = dlmopen(LM_ID_BASE, name, RTLD_NOW | RTLD_LOCAL);
  __asm__ volatile("" : : "r"(h) : "memory");
  return h;
}
