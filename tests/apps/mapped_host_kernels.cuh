// Kernels of mapped_host.cu (also in libmapped_host_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_MAPPED_HOST_KERNELS_CUH_
#define REVENANT_TESTS_APPS_MAPPED_HOST_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// out[i] = 3 * i through a device pointer to mapped host memory.
__global__ void fill_mapped(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * i;
}

// One step: acc += in * weight (weight read from mapped host memory), and
// the new acc written back to mapped host memory (zero-copy output).
__global__ void mapped_step(float* acc, const float* in, const float* weight, float* host_out,
                            int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    acc[i] += in[i] * weight[i];
    host_out[i] = acc[i];
  }
}

#endif  // REVENANT_TESTS_APPS_MAPPED_HOST_KERNELS_CUH_
