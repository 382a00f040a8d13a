// Fills the request ring: N asynchronous launches (default 200 000, ~20 MB of
// requests against an 8 MiB ring) with no synchronization in between, then
// checks that every one ran exactly once. Under write-behind the agent frees
// ring space only up to the last journaled request; this proves that an
// application blocked on a full ring is never left waiting for the journal.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  int* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, sizeof(int)));
  CHECK_CUDA(cudaMemset(d, 0, sizeof(int)));
  for (int i = 0; i < n; ++i) add_one<<<1, 1>>>(d, 1);
  CHECK_CUDA(cudaGetLastError());
  int h = -1;
  CHECK_CUDA(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_APP(h == n, "%d launches added %d", n, h);
  std::printf("%d launches without a synchronization, each ran once\n", n);
  CHECK_CUDA(cudaFree(d));
  std::printf("PASS ring_pressure\n");
  return 0;
}
