// Kernels of errors.cu (also in liberrors_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_ERRORS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_ERRORS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void fill_value(int* x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}

#endif  // REVENANT_TESTS_APPS_ERRORS_KERNELS_CUH_
