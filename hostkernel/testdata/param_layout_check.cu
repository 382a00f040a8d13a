// GPU check: for every kernel of test_kernels.cuh, the driver's parameter
// layout (cuFuncGetParamInfo) and name (cuFuncGetName) of the nvcc-compiled
// kernel equal what the host kernel library's table reports.
//
// Usage (on a GPU machine): param_layout_check.bin <libtest_host_kernels.so>
#include <cuda.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "hostkernel/host_kernel_abi.h"
#include "hostkernel/testdata/test_kernels.cuh"

#define CHECK_RT(call)                                                          \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) {                                                    \
      std::fprintf(stderr, "FAIL %s:%d %s: %s\n", __FILE__, __LINE__, #call,     \
                   cudaGetErrorName(e_));                                       \
      return 1;                                                                 \
    }                                                                           \
  } while (0)

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <host kernel .so>\n", argv[0]);
    return 2;
  }
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "FAIL dlopen: %s\n", dlerror());
    return 1;
  }
  auto table_fn = reinterpret_cast<RevenantHostKernelTableFn>(
      dlsym(lib, REVENANT_HOST_KERNEL_TABLE_SYMBOL));
  if (table_fn == nullptr) {
    std::fprintf(stderr, "FAIL no table\n");
    return 1;
  }
  const RevenantHostKernelTable* table = table_fn();
  const void* kernels[] = {
      reinterpret_cast<const void*>(saxpy),        reinterpret_cast<const void*>(block_sum),
      reinterpret_cast<const void*>(mixed_params), reinterpret_cast<const void*>(reverse_tiles),
      reinterpret_cast<const void*>(atomics),      reinterpret_cast<const void*>(rvtest::scale),
      reinterpret_cast<const void*>(rvtest::fill<int>),
      reinterpret_cast<const void*>(grid_rotate),
      reinterpret_cast<const void*>(early_exit_sum),
      reinterpret_cast<const void*>(index_3d)};
  CHECK_RT(cudaSetDevice(0));
  int failures = 0;
  for (const void* k : kernels) {
    cudaFunction_t f;
    CHECK_RT(cudaGetFuncBySymbol(&f, k));
    const char* name = nullptr;
    if (cuFuncGetName(&name, reinterpret_cast<CUfunction>(f)) != CUDA_SUCCESS) {
      std::fprintf(stderr, "FAIL cuFuncGetName\n");
      return 1;
    }
    const RevenantHostKernelDesc* desc = nullptr;
    for (uint32_t i = 0; i < table->num_kernels; ++i) {
      if (std::strcmp(table->kernels[i].name, name) == 0) desc = &table->kernels[i];
    }
    if (desc == nullptr) {
      std::fprintf(stderr, "FAIL %s: not in the host kernel library\n", name);
      ++failures;
      continue;
    }
    for (size_t p = 0;; ++p) {
      size_t offset = 0, size = 0;
      CUresult r = cuFuncGetParamInfo(reinterpret_cast<CUfunction>(f), p, &offset, &size);
      if (r == CUDA_ERROR_INVALID_VALUE) {  // past the last parameter
        if (p != desc->num_params) {
          std::fprintf(stderr, "FAIL %s: driver has %zu params, host %u\n", name, p,
                       desc->num_params);
          ++failures;
        }
        break;
      }
      if (r != CUDA_SUCCESS) {
        std::fprintf(stderr, "FAIL cuFuncGetParamInfo(%s, %zu) = %d\n", name, p, r);
        return 1;
      }
      if (p >= desc->num_params || desc->param_offsets[p] != offset ||
          desc->param_sizes[p] != size) {
        std::fprintf(stderr, "FAIL %s param %zu: driver (%zu, %zu), host (%zu, %zu)\n", name, p,
                     offset, size, p < desc->num_params ? desc->param_offsets[p] : 0,
                     p < desc->num_params ? desc->param_sizes[p] : 0);
        ++failures;
      }
    }
    std::printf("%s: %u params checked\n", name, desc->num_params);
  }
  if (failures > 0) return 1;
  std::printf("PASS param_layout_check\n");
  return 0;
}
