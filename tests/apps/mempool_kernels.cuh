// Kernels of mempool.cu (also in libmempool_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_MEMPOOL_KERNELS_CUH_
#define REVENANT_TESTS_APPS_MEMPOOL_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void square(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * x[i];
}

// Sums each block's slice through dynamic shared memory (size from the launch).
__global__ void block_sums(const int* in, long long* out, int per_block) {
  REVENANT_DYNAMIC_SHARED(int, tile);
  const int* slice = in + static_cast<long long>(blockIdx.x) * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = slice[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    long long sum = 0;
    for (int i = 0; i < per_block; ++i) sum += tile[i];
    out[blockIdx.x] = sum;
  }
}

// Every thread writes its rank, the grid synchronizes, then every thread
// reads the value of the next rank (in another block at block edges).
__global__ void grid_exchange(int* data, int* out) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  unsigned long long rank = grid.thread_rank();
  data[rank] = static_cast<int>(rank) + 1;
  grid.sync();
  out[rank] = data[(rank + 1) % grid.size()];
}

#endif  // REVENANT_TESTS_APPS_MEMPOOL_KERNELS_CUH_
