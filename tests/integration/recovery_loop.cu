// A single-rank program without a training loop's boundaries: allocations,
// uploads, many kernel launches, pinned copies, events and host callbacks.
// Run under revenant-run while its agent is killed at random points: every
// result must still be exactly right (the replacement rebuilds the device
// state from the journal). Prints "progress <i>" as it goes.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

static void CountCallback(void* user_data) { ++*static_cast<int*>(user_data); }

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  const int sleep_ms = argc > 2 ? std::atoi(argv[2]) : 5;
  const int n = 4096;
  int* a = nullptr;
  int* scratch = nullptr;
  CHECK_CUDA(cudaMalloc(&a, n * sizeof(int)));
  std::vector<int> init(n);
  for (int i = 0; i < n; ++i) init[i] = i;
  CHECK_CUDA(cudaMemcpy(a, init.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  int* pinned = nullptr;
  CHECK_CUDA(cudaMallocHost(&pinned, n * sizeof(int)));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  cudaEvent_t e;
  CHECK_CUDA(cudaEventCreate(&e));
  int callbacks = 0;
  for (int step = 1; step <= steps; ++step) {
    // Allocation churn: a temporary buffer per step (compacted in the journal).
    CHECK_CUDA(cudaMalloc(&scratch, 256 * sizeof(int)));
    add_one<<<(n + 255) / 256, 256, 0, s>>>(a, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaMemsetAsync(scratch, 0, 256 * sizeof(int), s));
    CHECK_CUDA(cudaEventRecord(e, s));
    CHECK_CUDA(cudaLaunchHostFunc(s, CountCallback, &callbacks));
    if (step % 10 == 0) {
      CHECK_CUDA(cudaMemcpyAsync(pinned, a, n * sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      for (int i = 0; i < n; i += 511) {
        EXPECT_APP(pinned[i] == i + step, "step %d: a[%d] = %d, expected %d", step, i, pinned[i],
                   i + step);
      }
      std::printf("progress %d\n", step);
      std::fflush(stdout);
    }
    CHECK_CUDA(cudaFree(scratch));
    std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  }
  CHECK_CUDA(cudaEventSynchronize(e));
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<int> out(n);
  CHECK_CUDA(cudaMemcpy(out.data(), a, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(out[i] == i + steps, "a[%d] = %d, expected %d", i, out[i], i + steps);
  }
  EXPECT_APP(callbacks == steps, "%d host callbacks ran, expected %d (none lost or doubled)",
             callbacks, steps);
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(a));
  std::printf("PASS recovery_loop\n");
  return 0;
}
