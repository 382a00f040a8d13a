// Kernels and device variables of runtime_names.cu (also compiled into
// libruntime_names_host_kernels.so, whose REVENANT_HOST_DEVICE_VARIABLE lines
// give the host backend the variables' storage).
#ifndef REVENANT_TESTS_APPS_RUNTIME_NAMES_KERNELS_CUH_
#define REVENANT_TESTS_APPS_RUNTIME_NAMES_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

constexpr int kTableSize = 64;

__device__ int rn_table[kTableSize];
__device__ float rn_scale;

namespace rn {
__device__ unsigned long long counter;
}  // namespace rn

// out[i] = table[i] * scale + i (reads both variables).
__global__ void rn_use_table(float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = rn_table[i % kTableSize] * rn_scale + i;
}

// Adds `delta` to every table entry and counts the calls (writes variables).
__global__ void rn_bump_table(int delta) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kTableSize) rn_table[i] += delta;
  if (i == 0) rn::counter += 1;
}

// Reads through a pointer (cudaGetSymbolAddress's).
__global__ void rn_read_ptr(const int* p, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = p[i];
}

#endif  // REVENANT_TESTS_APPS_RUNTIME_NAMES_KERNELS_CUH_
