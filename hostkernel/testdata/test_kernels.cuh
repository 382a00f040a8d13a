// Kernels for the host kernel tests. Compiled twice: by g++ into
// libtest_host_kernels.so (test_host_kernels.cc) and by nvcc
// (test_kernels.cu) to check that both produce the same mangled names.
#ifndef REVENANT_HOSTKERNEL_TESTDATA_TEST_KERNELS_CUH_
#define REVENANT_HOSTKERNEL_TESTDATA_TEST_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void saxpy(int n, float a, const float* __restrict__ x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// One partial sum per block through static shared memory and barriers.
__global__ void block_sum(const float* in, float* out, int n) {
  __shared__ float partial[256];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + t;
  partial[t] = i < n ? in[i] : 0.0f;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (t < stride) partial[t] += partial[t + stride];
    __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = partial[0];
}

struct Mixed {
  char c;
  double d;
  int3 v;
};

// Parameter layout with every alignment step: 0, 8, 40, 48, 64 (72 bytes).
__global__ void mixed_params(char tag, Mixed m, short s, double2 dd, double* out) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  out[0] = tag;
  out[1] = m.c;
  out[2] = m.d;
  out[3] = m.v.x + 10 * m.v.y + 100 * m.v.z;
  out[4] = s;
  out[5] = dd.x + dd.y;
}

// Reverses each block's tile through dynamic shared memory.
__global__ void reverse_tiles(int* data) {
  REVENANT_DYNAMIC_SHARED(int, tile);
  unsigned t = threadIdx.x;
  unsigned base = blockIdx.x * blockDim.x;
  tile[t] = data[base + t];
  __syncthreads();
  data[base + t] = tile[blockDim.x - 1 - t];
}

struct AtomicTotals {
  int count;
  unsigned max_id;
  float fsum;
  double dsum;
  unsigned long long big;
  int exch;
  int cas_winners;
  int cas_word;
};

__global__ void atomics(AtomicTotals* t) {
  unsigned id = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&t->count, 1);
  atomicMax(&t->max_id, id);
  atomicAdd(&t->fsum, 0.5f);
  atomicAdd(&t->dsum, 0.25);
  atomicAdd(&t->big, 1ull << 33);
  atomicExch(&t->exch, 7);
  if (atomicCAS(&t->cas_word, 0, 1) == 0) atomicAdd(&t->cas_winners, 1);
}

namespace rvtest {
__global__ void scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

template <typename T>
__global__ void fill(T* x, T value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = value;
}
// Instantiated here so the nvcc object registers it too.
template __global__ void fill<int>(int*, int, int);
}  // namespace rvtest

// Every thread writes, the whole grid synchronizes, every thread reads its
// neighbour's value, which lives in another block for block edges.
__global__ void grid_rotate(int* data, int* out) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  unsigned long long id = grid.thread_rank();
  data[id] = static_cast<int>(id) * 3;
  grid.sync();
  out[id] = data[(id + 1) % grid.size()];
}

// Threads past n leave before the barrier; exited threads no longer count
// for __syncthreads, so the others must not wait for them.
__global__ void early_exit_sum(const int* in, int* out, int n) {
  __shared__ int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  if (static_cast<int>(threadIdx.x) >= n) return;
  atomicAdd(&total, in[threadIdx.x]);
  __syncthreads();
  if (threadIdx.x == 0) *out = total;
}

// Records every thread's coordinates at its linear id, to check the x, y, z
// order of threads and blocks.
__global__ void index_3d(uint4* out) {
  unsigned block = (blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
  unsigned thread = (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
  unsigned id = block * blockDim.x * blockDim.y * blockDim.z + thread;
  out[id] = make_uint4(block, thread, threadIdx.y, blockIdx.z);
}

// Touches 128 KiB of stack from the top down: more than a host fiber's
// default 64 KiB, so the host run must fault on the guard page.
__global__ void stack_hog(int* out) {
  volatile char big[128 * 1024];
  for (int i = static_cast<int>(sizeof(big)) - 1; i >= 0; i -= 512) big[i] = 1;
  *out = big[0];
}

#endif  // REVENANT_HOSTKERNEL_TESTDATA_TEST_KERNELS_CUH_
