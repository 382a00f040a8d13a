// Fills the request ring: N asynchronous launches (default 200 000, ~20 MB of
// requests against an 8 MiB ring) with no synchronization in between, then
// checks that every one ran exactly once. Under write-behind the agent frees
// ring space only up to the last journaled request; this proves that an
// application blocked on a full ring is never left waiting for the journal.
//
//   ring_pressure [N [BURST PAUSE_US]]: with BURST, the launches come in bursts
//   of BURST with PAUSE_US microseconds of sleep after each (an executor that
//   runs out of requests while the journal thread is behind).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  int* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, sizeof(int)));
  CHECK_CUDA(cudaMemset(d, 0, sizeof(int)));
  const int burst = argc > 2 ? std::atoi(argv[2]) : 0;
  const int pause_us = argc > 3 ? std::atoi(argv[3]) : 0;
  for (int i = 0; i < n; ++i) {
    add_one<<<1, 1>>>(d, 1);
    if (burst > 0 && (i + 1) % burst == 0) usleep(pause_us);
  }
  CHECK_CUDA(cudaGetLastError());
  int h = -1;
  CHECK_CUDA(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_APP(h == n, "%d launches added %d", n, h);
  std::printf("%d launches without a synchronization, each ran once\n", n);
  CHECK_CUDA(cudaFree(d));
  std::printf("PASS ring_pressure\n");
  return 0;
}
