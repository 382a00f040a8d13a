// Runs a few CUDA calls and reports whether libcuda (the driver) is mapped
// into this process. Under the shim it must not be: the application process
// never creates a CUDA context.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main() {
  int* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 64 * sizeof(int)));
  CHECK_CUDA(cudaMemset(d, 0, 64 * sizeof(int)));
  add_one<<<1, 64>>>(d, 64);
  CHECK_CUDA(cudaDeviceSynchronize());
  int h[64];
  CHECK_CUDA(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
  EXPECT_APP(h[63] == 1, "add_one gave %d", h[63]);
  CHECK_CUDA(cudaFree(d));
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool libcuda = false;
  while (std::getline(maps, line)) {
    if (line.find("libcuda.so") != std::string::npos) libcuda = true;
  }
  std::printf("libcuda mapped: %s\n", libcuda ? "yes" : "no");
  return 0;
}
