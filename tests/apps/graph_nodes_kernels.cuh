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

#endif  // REVENANT_TESTS_APPS_GRAPH_NODES_KERNELS_CUH_
