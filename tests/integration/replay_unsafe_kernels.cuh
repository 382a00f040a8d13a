// Kernels of replay_unsafe.cu (also compiled into
// libreplay_unsafe_host_kernels.so). One thread per element, no atomics:
// bitwise reproducible.
#ifndef REVENANT_TESTS_INTEGRATION_REPLAY_UNSAFE_KERNELS_CUH_
#define REVENANT_TESTS_INTEGRATION_REPLAY_UNSAFE_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// acc[i] = acc[i] / 2 + x[i] * scale[i].
__global__ void ru_accumulate(const float* x, const float* scale, float* acc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  acc[i] = acc[i] * 0.5f + x[i] * scale[i];
}

// params[i] -= lr * total[i].
__global__ void ru_update(float* params, const float* total, float lr, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  params[i] -= lr * total[i];
}

#endif  // REVENANT_TESTS_INTEGRATION_REPLAY_UNSAFE_KERNELS_CUH_
