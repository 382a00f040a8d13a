// mempool: stream-ordered allocation from the default pool, function
// attributes, opt-in dynamic shared memory, occupancy and a cooperative launch
// with grid-wide synchronization.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/mempool_kernels.cuh"

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Stream-ordered allocation; keep freed memory in the pool.
  cudaMemPool_t pool;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t threshold = UINT64_MAX;
  CHECK_CUDA(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  const int n = 1 << 16;
  std::vector<int> h(n), out(n);
  for (int i = 0; i < n; ++i) h[i] = i % 1000 - 500;
  for (int round = 0; round < 3; ++round) {
    int* d = nullptr;
    CHECK_CUDA(cudaMallocAsync(&d, n * sizeof(int), s));
    CHECK_CUDA(cudaMemcpyAsync(d, h.data(), n * sizeof(int), cudaMemcpyHostToDevice, s));
    square<<<(n + 255) / 256, 256, 0, s>>>(d, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemcpyAsync(out.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaFreeAsync(d, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) {
      EXPECT_APP(out[i] == h[i] * h[i], "round %d: out[%d] = %d", round, i, out[i]);
    }
  }

  // Function attributes and 64 KiB of opt-in dynamic shared memory.
  cudaFuncAttributes attr;
  CHECK_CUDA(cudaFuncGetAttributes(&attr, block_sums));
  EXPECT_APP(attr.maxThreadsPerBlock >= 256, "maxThreadsPerBlock %d", attr.maxThreadsPerBlock);
  const int per_block = 16384;  // ints: 64 KiB, above the 48 KiB default
  CHECK_CUDA(cudaFuncSetAttribute(block_sums, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  per_block * static_cast<int>(sizeof(int))));
  CHECK_CUDA(cudaFuncGetAttributes(&attr, block_sums));
  EXPECT_APP(attr.maxDynamicSharedSizeBytes == per_block * static_cast<int>(sizeof(int)),
             "maxDynamicSharedSizeBytes %d", attr.maxDynamicSharedSizeBytes);
  const int blocks = n / per_block;
  int* din;
  long long* dsums;
  CHECK_CUDA(cudaMalloc(&din, n * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&dsums, blocks * sizeof(long long)));
  CHECK_CUDA(cudaMemcpy(din, h.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  block_sums<<<blocks, 256, per_block * sizeof(int), s>>>(din, dsums, per_block);
  CHECK_CUDA(cudaGetLastError());
  std::vector<long long> sums(blocks);
  CHECK_CUDA(cudaMemcpyAsync(sums.data(), dsums, blocks * sizeof(long long),
                             cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int b = 0; b < blocks; ++b) {
    long long expect = 0;
    for (int i = b * per_block; i < (b + 1) * per_block; ++i) expect += h[i];
    EXPECT_APP(sums[b] == expect, "block %d sum %lld, expected %lld", b, sums[b], expect);
  }

  // Occupancy, then a cooperative launch sized to be co-resident.
  const int threads = 128;
  int per_sm = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
      &per_sm, grid_exchange, threads, 0, cudaOccupancyDefault));
  EXPECT_APP(per_sm >= 1, "occupancy %d blocks per SM", per_sm);
  int cooperative = 0, sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  EXPECT_APP(cooperative == 1, "device does not support cooperative launches");
  const int grid = std::min(per_sm * sms, 8);
  const int total = grid * threads;
  int *ddata, *dout;
  CHECK_CUDA(cudaMalloc(&ddata, total * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&dout, total * sizeof(int)));
  void* args[] = {&ddata, &dout};
  CHECK_CUDA(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(grid_exchange), dim3(grid),
                                         dim3(threads), args, 0, s));
  std::vector<int> exchanged(total);
  CHECK_CUDA(cudaMemcpyAsync(exchanged.data(), dout, total * sizeof(int),
                             cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int r = 0; r < total; ++r) {
    const int expect = (r + 1) % total + 1;
    EXPECT_APP(exchanged[r] == expect, "rank %d read %d, expected %d", r, exchanged[r], expect);
  }

  CHECK_CUDA(cudaFree(din));
  CHECK_CUDA(cudaFree(dsums));
  CHECK_CUDA(cudaFree(ddata));
  CHECK_CUDA(cudaFree(dout));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS mempool\n");
  return 0;
}
