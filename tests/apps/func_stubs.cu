// func_stubs: the per-function calls (cudaFuncGetAttributes,
// cudaFuncSetAttribute, cudaFuncSetCacheConfig, occupancy) and launches on
// the host stubs of overloaded kernels, template instances (type and
// non-type parameters) and a kernel in a namespace, each passed as the C++
// templates of cuda_runtime.h pass them. Results are checked exactly.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/func_stubs_kernels.cuh"

namespace {

template <typename K>
void Exercise(const char* name, K* kernel) {
  cudaFuncAttributes a;
  CHECK_CUDA(cudaFuncGetAttributes(&a, kernel));
  EXPECT_APP(a.maxThreadsPerBlock >= 256, "%s: maxThreadsPerBlock %d", name, a.maxThreadsPerBlock);
  CHECK_CUDA(cudaFuncSetCacheConfig(kernel, cudaFuncCachePreferL1));
  CHECK_CUDA(cudaFuncSetCacheConfig(kernel, cudaFuncCachePreferNone));
  CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 2048));
  CHECK_CUDA(cudaFuncGetAttributes(&a, kernel));
  EXPECT_APP(a.maxDynamicSharedSizeBytes == 2048, "%s: maxDynamicSharedSizeBytes %d", name,
             a.maxDynamicSharedSizeBytes);
  int blocks = 0;
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, kernel, 256, 0,
                                                                    cudaOccupancyDefault));
  EXPECT_APP(blocks >= 1, "%s: occupancy %d", name, blocks);
  std::printf("%s: attributes, cache config, occupancy ok\n", name);
}

}  // namespace

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 1000;
  float* f = nullptr;
  int* x = nullptr;
  CHECK_CUDA(cudaMalloc(&f, n * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&x, n * sizeof(int)));

  // Before any launch: the first use of a stub resolves its kernel.
  Exercise("scale(float*, float, int)", static_cast<void (*)(float*, float, int)>(scale));
  Exercise("scale(int*, int, int)", static_cast<void (*)(int*, int, int)>(scale));
  Exercise("fill<float>", fill<float>);
  Exercise("fill<int>", fill<int>);
  Exercise("times<3>", times<3>);
  Exercise("stubs::add_one", stubs::add_one);

  const int blocks = (n + 255) / 256;
  fill<float><<<blocks, 256>>>(f, 1.5f, n);
  scale<<<blocks, 256>>>(f, 4.0f, n);  // the float overload
  fill<int><<<blocks, 256>>>(x, 7, n);
  scale<<<blocks, 256>>>(x, 2, n);  // the int overload
  times<3><<<blocks, 256>>>(x, n);
  int* xp = x;
  int nn = n;
  void* args[] = {&xp, &nn};
  CHECK_CUDA(cudaLaunchKernel(stubs::add_one, dim3(blocks), dim3(256), args, 0, nullptr));
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> hf(n);
  std::vector<int> hx(n);
  CHECK_CUDA(cudaMemcpy(hf.data(), f, n * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hx.data(), x, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(hf[i] == 6.0f, "f[%d] = %g, expected 6", i, hf[i]);
    EXPECT_APP(hx[i] == 43, "x[%d] = %d, expected 43", i, hx[i]);
  }

  // Bad input: a cache preference outside the enum.
  EXPECT_CUDA_ERROR(cudaFuncSetCacheConfig(fill<float>, static_cast<cudaFuncCache>(9)),
                    cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CHECK_CUDA(cudaFree(f));
  CHECK_CUDA(cudaFree(x));
  std::printf("PASS func_stubs\n");
  return 0;
}
