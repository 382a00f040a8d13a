// Runs a few CUDA calls, loads the driver as PyTorch does (dlopen of
// libcuda.so.1 by name, with and without RTLD_NOLOAD, and of libcuda.so by
// path: argv[1], if given), calls it through the handle, and reports whether
// libcuda (the driver) is mapped into this process. Under the shim it must
// not be: the application process never creates a CUDA context, and its
// loads of the driver are answered by the shim.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main(int argc, char** argv) {
  int* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 64 * sizeof(int)));
  CHECK_CUDA(cudaMemset(d, 0, 64 * sizeof(int)));
  add_one<<<1, 64>>>(d, 64);
  CHECK_CUDA(cudaDeviceSynchronize());
  int h[64];
  CHECK_CUDA(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
  EXPECT_APP(h[63] == 1, "add_one gave %d", h[63]);
  CHECK_CUDA(cudaFree(d));
  void* drivers[] = {dlopen("libcuda.so.1", RTLD_NOW), dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD),
                     argc > 1 ? dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL) : nullptr};
  for (int i = 0; i < (argc > 1 ? 3 : 2); ++i) {
    EXPECT_APP(drivers[i] != nullptr, "driver load %d failed: %s", i, dlerror());
    using CountFn = CUresult (*)(int*);
    auto count_fn = reinterpret_cast<CountFn>(dlsym(drivers[i], "cuDeviceGetCount"));
    EXPECT_APP(count_fn != nullptr, "no cuDeviceGetCount through driver handle %d", i);
    int count = 0;
    EXPECT_APP(count_fn(&count) == CUDA_SUCCESS && count == 1, "cuDeviceGetCount: %d", count);
  }
  std::printf("driver loads answered: %d\n", argc > 1 ? 3 : 2);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  bool libcuda = false;
  while (std::getline(maps, line)) {
    if (line.find("libcuda.so") != std::string::npos) libcuda = true;
  }
  std::printf("libcuda mapped: %s\n", libcuda ? "yes" : "no");
  return 0;
}
