// Proves that a kernel launch returns before the kernel runs: the kernel
// waits for a flag in mapped host memory that the host sets only after the
// launch returned. Natively and under the shim the kernel must see it.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main() {
  int* flag = nullptr;
  CHECK_CUDA(cudaHostAlloc(&flag, sizeof(int), cudaHostAllocMapped));
  *flag = 0;
  int* flag_dev = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&flag_dev), flag, 0));
  int* saw = nullptr;
  CHECK_CUDA(cudaMalloc(&saw, sizeof(int)));
  CHECK_CUDA(cudaMemset(saw, 0xff, sizeof(int)));
  CHECK_CUDA(cudaDeviceSynchronize());

  const auto t0 = std::chrono::steady_clock::now();
  // ~10 s of polling at most on the host backend, far less on a GPU.
  wait_for_flag<<<1, 1>>>(flag_dev, saw, 2000000000LL);
  const double launch_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  CHECK_CUDA(cudaGetLastError());
  // The kernel cannot have finished: it is waiting for this store.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  *reinterpret_cast<volatile int*>(flag) = 1;
  CHECK_CUDA(cudaDeviceSynchronize());
  int host_saw = -1;
  CHECK_CUDA(cudaMemcpy(&host_saw, saw, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_APP(host_saw == 1, "the kernel did not see the flag set after the launch returned (%d)",
             host_saw);
  std::printf("launch returned after %.1f us, before the kernel ran\n", launch_us);
  CHECK_CUDA(cudaFree(saw));
  CHECK_CUDA(cudaFreeHost(flag));
  std::printf("PASS async_launch\n");
  return 0;
}
