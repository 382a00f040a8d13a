// Blocks in cudaStreamSynchronize behind a kernel that never finishes on its
// own, and expects the call to fail cleanly (not hang, not crash) once the
// agent is killed. Prints "blocked" when the test should kill the agent.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main() {
  int* flag = nullptr;
  CHECK_CUDA(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* saw = nullptr;
  CHECK_CUDA(cudaMalloc(&saw, sizeof(int)));
  wait_for_flag<<<1, 1>>>(flag, saw, 1LL << 62);
  CHECK_CUDA(cudaGetLastError());
  std::printf("blocked\n");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  cudaError_t e = cudaStreamSynchronize(nullptr);
  const double waited_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("cudaStreamSynchronize returned %s after %.0f ms\n", cudaGetErrorName(e), waited_ms);
  EXPECT_APP(e == cudaErrorDevicesUnavailable, "expected cudaErrorDevicesUnavailable");
  // Later calls fail fast with the same error instead of hanging.
  const auto t1 = std::chrono::steady_clock::now();
  int* p = nullptr;
  cudaError_t e2 = cudaMalloc(&p, 16);
  const double later_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1).count();
  std::printf("cudaMalloc afterwards returned %s after %.1f ms\n", cudaGetErrorName(e2), later_ms);
  EXPECT_APP(e2 == cudaErrorDevicesUnavailable, "expected cudaErrorDevicesUnavailable");
  EXPECT_APP(later_ms < 100, "a call after the agent's death took %.1f ms", later_ms);
  std::printf("PASS agent_death\n");
  return 0;
}
