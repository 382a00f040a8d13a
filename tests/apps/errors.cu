// errors: invalid calls return CUDA's own error codes, launch errors surface
// through cudaGetLastError (and are then cleared), and the program keeps
// working afterwards. Every code asserted here was measured on an H200 with
// CUDA 13.0 and driver 580.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/errors_kernels.cuh"

namespace {

void ExpectWorking(int* d, int n, int value) {
  fill_value<<<(n + 255) / 256, 256>>>(d, value, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<int> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT_APP(h[i] == value, "h[%d] = %d", i, h[i]);
}

}  // namespace

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 4096;
  int* d;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(int)));
  ExpectWorking(d, n, 1);

  // Names and strings.
  EXPECT_APP(std::strcmp(cudaGetErrorName(cudaErrorInvalidValue), "cudaErrorInvalidValue") == 0,
             "name %s", cudaGetErrorName(cudaErrorInvalidValue));
  EXPECT_APP(std::strcmp(cudaGetErrorName(cudaSuccess), "cudaSuccess") == 0, "success name");
  EXPECT_APP(std::strlen(cudaGetErrorString(cudaErrorInvalidConfiguration)) > 0,
             "empty error string");

  // A copy kind that does not exist.
  std::vector<int> h(n);
  cudaError_t e = cudaMemcpy(d, h.data(), n * sizeof(int), static_cast<cudaMemcpyKind>(42));
  EXPECT_APP(e == cudaErrorInvalidMemcpyDirection, "bad memcpy kind gave %s",
             cudaGetErrorName(e));
  cudaGetLastError();  // a failed API call also sets the last error

  // Freeing a pointer cudaMalloc never returned.
  e = cudaFree(reinterpret_cast<void*>(uintptr_t{0x1234}));
  EXPECT_APP(e == cudaErrorInvalidValue, "bogus cudaFree gave %s", cudaGetErrorName(e));
  cudaGetLastError();
  std::vector<int> not_device(4);
  EXPECT_CUDA_ERROR(cudaFree(not_device.data()), cudaErrorInvalidValue);
  cudaGetLastError();

  // Freeing null is allowed.
  CHECK_CUDA(cudaFree(nullptr));

  // A device that does not exist.
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_CUDA_ERROR(cudaSetDevice(count), cudaErrorInvalidDevice);
  cudaGetLastError();
  int device = -1;
  CHECK_CUDA(cudaGetDevice(&device));
  EXPECT_APP(device == 0, "failed cudaSetDevice changed the device to %d", device);

  // An allocation no device can satisfy.
  void* huge = nullptr;
  EXPECT_CUDA_ERROR(cudaMalloc(&huge, size_t{1} << 52), cudaErrorMemoryAllocation);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorMemoryAllocation);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaSuccess);

  // A launch with 2048 threads per block: the launch itself fails, the error
  // is reported by cudaGetLastError once and is not sticky. CUDA 13 (driver
  // 580, H200) reports it as cudaErrorInvalidValue, not
  // cudaErrorInvalidConfiguration as older releases did; so do zero-sized
  // grids, oversized grids and dynamic shared memory above the limit.
  fill_value<<<1, 2048>>>(d, 9, n);
  EXPECT_CUDA_ERROR(cudaPeekAtLastError(), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaSuccess);
  CHECK_CUDA(cudaDeviceSynchronize());
  fill_value<<<0, 256>>>(d, 9, n);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorInvalidValue);
  fill_value<<<dim3(1, 65536), 32>>>(d, 9, n);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorInvalidValue);
  // 64 KiB of dynamic shared memory without the cudaFuncSetAttribute opt-in.
  fill_value<<<1, 32, 64 << 10>>>(d, 9, n);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorInvalidValue);

  // Destroying a stream twice is not asserted (undefined); a null stream
  // synchronize is fine.
  CHECK_CUDA(cudaStreamSynchronize(nullptr));

  // Everything still works, and the data written before the errors is intact.
  std::vector<int> before(n);
  CHECK_CUDA(cudaMemcpy(before.data(), d, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) EXPECT_APP(before[i] == 1, "data lost: %d", before[i]);
  ExpectWorking(d, n, 2);
  CHECK_CUDA(cudaFree(d));
  std::printf("PASS errors\n");
  return 0;
}
