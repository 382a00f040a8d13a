// Whether a program carries the CUDA runtime statically (nvcc's default,
// `-cudart static`), read from its ELF file.
//
//   std::string why = StaticRuntimeReason("/proc/self/exe");
//   if (!why.empty()) { /* refuse: its CUDA calls can never reach the agent */ }
//
// Such a program's runtime calls bind to its own copy of libcudart, never to
// the shim's exports: under the shim that copy finds no driver (the shim
// answers its dlopen of libcuda.so.1) and fails, so nothing would run in
// the agent. Signs, any of them: the program holds CUDA modules (a
// .nvFatBinSegment section) but does not import __cudaRegisterFatBinary
// (its registration calls are internal); or its symbol table, where not
// stripped, defines __cudaRegisterFatBinary or cudaMalloc.
// Shared libraries are not checked: cuBLAS and cuDNN carry the runtime
// statically and are taken over at their own APIs (docs/design.md).
#ifndef REVENANT_SHIM_STATIC_RUNTIME_H_
#define REVENANT_SHIM_STATIC_RUNTIME_H_

#include <string>

namespace revenant {
namespace shim {

// "" when `path` is no ELF file, imports the runtime or carries no CUDA;
// else what shows the static runtime. Reads only section headers and symbol
// tables. Cost: a few reads of the file (its symbol tables, if any).
std::string StaticRuntimeReason(const std::string& path);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_STATIC_RUNTIME_H_
