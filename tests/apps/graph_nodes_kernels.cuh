// Kernels of graph_nodes.cu (also in libgraph_nodes_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_GRAPH_NODES_KERNELS_CUH_
#define REVENANT_TESTS_APPS_GRAPH_NODES_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// y[i] = a * x[i] + y[i]
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// out[i] = in[i] + 1, through scratch memory the graph allocates.
__global__ void plus_one(const float* in, float* tmp, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tmp[i] = in[i] + 1.0f;
}

// The step's input, written on another stream than the graph runs on.
__global__ void fill_step(int* v, int step, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] = (i * 7 + step) % 11 - 5;
}

// acc[i] += v[i]
__global__ void add_into(int* acc, const int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) acc[i] += v[i];
}

// out[i] = 3 * acc[i] + 1 (the child graph's kernel).
__global__ void triple_plus(const int* acc, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 3 * acc[i] + 1;
}

// dst[i] = src[i]
__global__ void copy_int(const int* src, int* dst, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dst[i] = src[i];
}

// The while loop's body: x[i] += acc[i] % 7 ...
__global__ void loop_add(int* x, const int* acc, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += acc[i] % 7;
}

// ... then one thread counts the iteration and says whether to go on.
__global__ void loop_step(cudaGraphConditionalHandle handle, int* iter, const int* limit) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const int k = ++*iter;
    cudaGraphSetConditional(handle, k < *limit ? 1u : 0u);
  }
}

#endif  // REVENANT_TESTS_APPS_GRAPH_NODES_KERNELS_CUH_
