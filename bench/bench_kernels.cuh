// Kernels of bench/shim_bench.cu (also compiled into libbench_host_kernels.so
// so the benchmark runs under the host backend, for CPU-side measurements).
#ifndef REVENANT_BENCH_BENCH_KERNELS_CUH_
#define REVENANT_BENCH_BENCH_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void empty_kernel() {}

__global__ void axpy(float* y, const float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

#endif  // REVENANT_BENCH_BENCH_KERNELS_CUH_
