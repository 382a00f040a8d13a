// Kernels of callbacks.cu (also in libcallbacks_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_CALLBACKS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_CALLBACKS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void iota_times(int* x, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = factor * i;
}

#endif  // REVENANT_TESTS_APPS_CALLBACKS_KERNELS_CUH_
