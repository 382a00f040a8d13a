// Kernels of vector_add.cu (also compiled into libvector_add_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_VECTOR_ADD_KERNELS_CUH_
#define REVENANT_TESTS_APPS_VECTOR_ADD_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void vector_add(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

#endif  // REVENANT_TESTS_APPS_VECTOR_ADD_KERNELS_CUH_
