// Kernels for host_backend_test, compiled by g++ into a host kernel library
// (backend_test_kernels.cc).
#ifndef REVENANT_AGENT_BACKENDS_HOST_TESTDATA_BACKEND_TEST_KERNELS_CUH_
#define REVENANT_AGENT_BACKENDS_HOST_TESTDATA_BACKEND_TEST_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}

// grid.sync() is only legal in a cooperative launch: a plain launch fails
// while running (cudaErrorLaunchFailure), which the tests use as an
// asynchronous error.
__global__ void needs_cooperative(int* out) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  out[grid.thread_rank()] = 1;
  grid.sync();
}

// A __device__ variable the host backend serves through GetSymbol.
__device__ int bt_values[8];

__global__ void copy_values(int* out) {
  int i = threadIdx.x;
  if (i < 8) out[i] = bt_values[i];
}

// A while loop's last body node: decrements *n and goes on while it is
// positive.
__global__ void count_down(cudaGraphConditionalHandle handle, int* n) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(handle, --*n > 0 ? 1u : 0u);
}

#endif  // REVENANT_AGENT_BACKENDS_HOST_TESTDATA_BACKEND_TEST_KERNELS_CUH_
