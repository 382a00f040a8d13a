// Kernels of idle_answers.cu (also in libidle_answers_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_IDLE_ANSWERS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_IDLE_ANSWERS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// One thread works through `rounds` dependent steps (so the kernel takes a
// while), then writes the result and `tag` to *out (mapped host memory: the
// host sees the write without a CUDA call).
__global__ void slow_tag(volatile int* out, int rounds, int tag) {
  unsigned v = 1;
  for (int r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
  out[1] = static_cast<int>(v & 0x7fffffff);
  out[0] = tag;
}

#endif  // REVENANT_TESTS_APPS_IDLE_ANSWERS_KERNELS_CUH_
