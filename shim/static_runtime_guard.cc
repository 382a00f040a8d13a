// Refuses, when the shim is loaded, a program linked with the static CUDA
// runtime (shim/static_runtime.h): its CUDA calls would run in its own copy
// of the runtime, never reach the agent, and fail there for want of a
// driver, far from the cause. Only in librevenant_shim.so (not in the
// libraries tests link the shim's code into).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "shim/static_runtime.h"

namespace {

__attribute__((constructor)) void RefuseStaticRuntime() {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return;
  exe[n] = '\0';
  const std::string why = revenant::shim::StaticRuntimeReason(exe);
  if (why.empty()) return;
  std::fprintf(stderr,
               "[revenant shim %d E] %s is linked with the static CUDA runtime (nvcc's default, "
               "-cudart static): %s. Its CUDA calls would run in its own copy of the runtime and "
               "could never reach the Revenant agent. Rebuild it with `nvcc -cudart shared` (or "
               "link it with -lcudart). Stopping.\n",
               static_cast<int>(getpid()), exe, why.c_str());
  std::fflush(stderr);
  _exit(1);
}

}  // namespace
