// Kernels of multithread.cu (also in libmultithread_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_MULTITHREAD_KERNELS_CUH_
#define REVENANT_TESTS_APPS_MULTITHREAD_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void affine(int* x, int mul, int add, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * mul + add;
}

#endif  // REVENANT_TESTS_APPS_MULTITHREAD_KERNELS_CUH_
