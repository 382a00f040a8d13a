// Kernels of symbol_loop.cu (also compiled into libsymbol_loop_host_kernels.so).
#ifndef REVENANT_TESTS_INTEGRATION_SYMBOL_LOOP_KERNELS_CUH_
#define REVENANT_TESTS_INTEGRATION_SYMBOL_LOOP_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__device__ int sl_weight;

// acc[i] += in[i] * sl_weight
__global__ void sl_step(int* acc, const int* in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += in[i] * sl_weight;
}

#endif  // REVENANT_TESTS_INTEGRATION_SYMBOL_LOOP_KERNELS_CUH_
