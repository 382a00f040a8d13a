// rdc_link: a program built with relocatable device code (nvcc -rdc=true,
// two translation units joined by the device link, so nvcc registers its
// module through __cudaRegisterLinkedBinary_*): a kernel calling a device
// function of the other unit, a __device__ variable of the other unit written
// with cudaMemcpyToSymbol, and a device function pointer read from a
// __device__ variable with cudaMemcpyFromSymbol and called by a kernel.
// Results are checked exactly.
#include <cuda_runtime.h>

#include <cstdio>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/rdc_link_kernels.cuh"

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 4096;
  int* out = nullptr;
  CHECK_CUDA(cudaMalloc(&out, n * sizeof(int)));
  int offset = 0;
  CHECK_CUDA(cudaMemcpyFromSymbol(&offset, rdc_offset, sizeof(offset)));
  EXPECT_APP(offset == 100, "rdc_offset is %d, expected its initializer 100", offset);
  offset = 5;
  CHECK_CUDA(cudaMemcpyToSymbol(rdc_offset, &offset, sizeof(offset)));
  rdc_apply<<<(n + 255) / 256, 256>>>(out, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<int> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT_APP(h[i] == 3 * i + 6, "out[%d] = %d", i, h[i]);

  rdc_op_t op = nullptr;
  CHECK_CUDA(cudaMemcpyFromSymbol(&op, rdc_op_ptr, sizeof(op)));
  EXPECT_APP(op != nullptr, "no device function pointer in rdc_op_ptr");
  rdc_call<<<(n + 255) / 256, 256>>>(op, out, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpy(h.data(), out, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(h[i] == (3 * i + 6) * (3 * i + 6), "squared out[%d] = %d", i, h[i]);
  }
  CHECK_CUDA(cudaFree(out));
  std::printf("PASS rdc_link\n");
  return 0;
}
