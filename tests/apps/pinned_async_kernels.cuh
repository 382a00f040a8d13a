// Kernels of pinned_async.cu (also in libpinned_async_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_PINNED_ASYNC_KERNELS_CUH_
#define REVENANT_TESTS_APPS_PINNED_ASYNC_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void add_scalar(int* x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += value;
}

// Writes through a device pointer that maps host memory (zero-copy).
__global__ void write_mapped(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * i;
}

__global__ void set_flag(int* flag, int value) {
  if (threadIdx.x == 0 && blockIdx.x == 0) *flag = value;
}

#endif  // REVENANT_TESTS_APPS_PINNED_ASYNC_KERNELS_CUH_
