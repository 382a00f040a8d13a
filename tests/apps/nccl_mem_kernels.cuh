// Kernels of nccl_mem.cu (also in libnccl_mem_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_NCCL_MEM_KERNELS_CUH_
#define REVENANT_TESTS_APPS_NCCL_MEM_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// acc[i] += scale * x[i]
__global__ void accumulate(float* acc, const float* x, float scale, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += scale * x[i];
}

#endif  // REVENANT_TESTS_APPS_NCCL_MEM_KERNELS_CUH_
