// pinned_async: host memory the device touches — pinned, mapped zero-copy,
// registered, managed — with async copies and a polled pinned flag.
#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

#include "tests/apps/app_check.h"
#include "tests/apps/pinned_async_kernels.cuh"

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(int);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  // Pinned staging both ways around a kernel.
  int *pinned_in, *pinned_out, *d;
  CHECK_CUDA(cudaMallocHost(&pinned_in, bytes));
  CHECK_CUDA(cudaMallocHost(&pinned_out, bytes));
  CHECK_CUDA(cudaMalloc(&d, bytes));
  for (int i = 0; i < n; ++i) pinned_in[i] = i;
  std::memset(pinned_out, 0, bytes);
  CHECK_CUDA(cudaMemcpyAsync(d, pinned_in, bytes, cudaMemcpyHostToDevice, s));
  add_scalar<<<(n + 255) / 256, 256, 0, s>>>(d, 5, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpyAsync(pinned_out, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(pinned_out[i] == i + 5, "pinned_out[%d] = %d", i, pinned_out[i]);
  }

  // Mapped host memory written by a kernel through its device pointer.
  int* mapped = nullptr;
  int* mapped_dev = nullptr;
  CHECK_CUDA(cudaHostAlloc(&mapped, bytes, cudaHostAllocMapped));
  std::memset(mapped, 0, bytes);
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped_dev), mapped, 0));
  EXPECT_APP(mapped_dev != nullptr, "no device pointer for mapped memory");
  write_mapped<<<(n + 255) / 256, 256, 0, s>>>(mapped_dev, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(mapped[i] == 3 * i, "mapped[%d] = %d", i, mapped[i]);
  }

  // A malloc'd buffer registered as pinned, as target of an async copy.
  int* registered = static_cast<int*>(std::aligned_alloc(4096, bytes));
  std::memset(registered, 0, bytes);
  CHECK_CUDA(cudaHostRegister(registered, bytes, cudaHostRegisterDefault));
  CHECK_CUDA(cudaMemcpyAsync(registered, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(registered[i] == i + 5, "registered[%d] = %d", i, registered[i]);
  }
  CHECK_CUDA(cudaHostUnregister(registered));
  std::free(registered);

  // A pinned flag written by an async copy queued behind a kernel: the host
  // polls it (bounded) without synchronizing, as progress loops do.
  int* flag = nullptr;
  int* dflag = nullptr;
  CHECK_CUDA(cudaMallocHost(&flag, sizeof(int)));
  *flag = 0;
  CHECK_CUDA(cudaMalloc(&dflag, sizeof(int)));
  CHECK_CUDA(cudaMemsetAsync(dflag, 0, sizeof(int), s));
  add_scalar<<<(n + 255) / 256, 256, 0, s>>>(d, 1, n);
  set_flag<<<1, 32, 0, s>>>(dflag, 42);
  CHECK_CUDA(cudaMemcpyAsync(flag, dflag, sizeof(int), cudaMemcpyDeviceToHost, s));
  volatile int* vflag = flag;
  EXPECT_APP(WaitFor([&] { return *vflag == 42; }, 30.0),
             "pinned flag still %d after 30 s", *vflag);
  CHECK_CUDA(cudaStreamSynchronize(s));

  // Managed memory: written by the host, updated by a kernel, read back.
  int* managed = nullptr;
  CHECK_CUDA(cudaMallocManaged(&managed, bytes));
  for (int i = 0; i < n; ++i) managed[i] = 7 * i;
  add_scalar<<<(n + 255) / 256, 256>>>(managed, -2, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(managed[i] == 7 * i - 2, "managed[%d] = %d", i, managed[i]);
  }
  CHECK_CUDA(cudaFree(managed));

  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaFree(dflag));
  CHECK_CUDA(cudaFreeHost(pinned_in));
  CHECK_CUDA(cudaFreeHost(pinned_out));
  CHECK_CUDA(cudaFreeHost(mapped));
  CHECK_CUDA(cudaFreeHost(flag));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS pinned_async\n");
  return 0;
}
