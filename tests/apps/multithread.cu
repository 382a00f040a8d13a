// multithread: four host threads, each with its own stream, buffers, kernels
// and copies, at the same time; every thread checks its own result.
#include <cuda_runtime.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/multithread_kernels.cuh"

namespace {

constexpr int kThreads = 4;
constexpr int kN = 1 << 15;
constexpr int kIterations = 20;

void Worker(int id) {
  // The current device is per host thread.
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<int> host(kN);
  for (int i = 0; i < kN; ++i) host[i] = i % 97 + id;
  int* d;
  CHECK_CUDA(cudaMalloc(&d, kN * sizeof(int)));
  CHECK_CUDA(cudaMemcpyAsync(d, host.data(), kN * sizeof(int), cudaMemcpyHostToDevice, s));
  // x -> x * 1 + (id + 1), kIterations times: x + kIterations * (id + 1).
  for (int it = 0; it < kIterations; ++it) {
    affine<<<(kN + 255) / 256, 256, 0, s>>>(d, 1, id + 1, kN);
  }
  affine<<<(kN + 255) / 256, 256, 0, s>>>(d, id + 2, 0, kN);
  CHECK_CUDA(cudaGetLastError());
  std::vector<int> out(kN, -1);
  CHECK_CUDA(cudaMemcpyAsync(out.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) {
    const int expected = (host[i] + kIterations * (id + 1)) * (id + 2);
    EXPECT_APP(out[i] == expected, "thread %d: x[%d] = %d, expected %d", id, i, out[i],
               expected);
  }
  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaStreamDestroy(s));
}

}  // namespace

int main() {
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id) threads.emplace_back(Worker, id);
  for (std::thread& t : threads) t.join();
  // Work from every thread is visible to a device-wide synchronize.
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS multithread\n");
  return 0;
}
