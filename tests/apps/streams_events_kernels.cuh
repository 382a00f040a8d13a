// Kernels of streams_events.cu (also in libstreams_events_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_STREAMS_EVENTS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_STREAMS_EVENTS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// a[i] = i + rounds, one add at a time, so the producer takes a while.
__global__ void produce(int* a, int n, int rounds) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = i;
  for (int r = 0; r < rounds; ++r) v += 1;
  a[i] = v;
}

// b[i] = 2 * a[i]: correct only if it runs after produce().
__global__ void consume(const int* a, int* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = 2 * a[i];
}

#endif  // REVENANT_TESTS_APPS_STREAMS_EVENTS_KERNELS_CUH_
