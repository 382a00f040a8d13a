// Kernels of graphs.cu (also in libgraphs_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_GRAPHS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_GRAPHS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void add_value(int* x, int value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += value;
}

__global__ void scale_into(const int* in, int* out, int factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = factor * in[i];
}

#endif  // REVENANT_TESTS_APPS_GRAPHS_KERNELS_CUH_
