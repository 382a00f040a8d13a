// vector_add: device query, plain memory management and one kernel launch.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>

#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/vector_add_kernels.cuh"

int main() {
  // Flags must be set before the device is first used.
  CHECK_CUDA(cudaSetDeviceFlags(cudaDeviceScheduleAuto));
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_APP(count > 0, "no device (%d)", count);
  CHECK_CUDA(cudaSetDevice(0));
  int device = -1;
  CHECK_CUDA(cudaGetDevice(&device));
  EXPECT_APP(device == 0, "current device %d", device);

  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  EXPECT_APP(std::strlen(prop.name) > 0, "empty device name");
  int sms = 0, max_threads = 0, warp = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&max_threads, cudaDevAttrMaxThreadsPerBlock, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&warp, cudaDevAttrWarpSize, 0));
  EXPECT_APP(sms > 0 && sms == prop.multiProcessorCount, "SMs %d vs %d", sms,
             prop.multiProcessorCount);
  EXPECT_APP(max_threads == prop.maxThreadsPerBlock && max_threads >= 1024,
             "max threads %d vs %d", max_threads, prop.maxThreadsPerBlock);
  EXPECT_APP(warp == 32, "warp size %d", warp);
  if (count > 1) {
    int can = -1;
    CHECK_CUDA(cudaDeviceCanAccessPeer(&can, 0, 1));
    EXPECT_APP(can == 0 || can == 1, "peer access answer %d", can);
  }
  int driver = 0, runtime = 0;
  CHECK_CUDA(cudaDriverGetVersion(&driver));
  CHECK_CUDA(cudaRuntimeGetVersion(&runtime));
  EXPECT_APP(driver >= 13000 && runtime >= 13000, "driver %d runtime %d", driver, runtime);
  std::printf("device 0: %s, %d SMs, driver %d, runtime %d\n", prop.name, sms, driver,
              runtime);
  CHECK_CUDA(cudaProfilerStart());

  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  size_t free_before = 0, total = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_before, &total));
  EXPECT_APP(total > 0 && free_before <= total, "free %zu total %zu", free_before, total);

  std::vector<float> a(n), b(n), c(n);
  for (int i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i);
    b[i] = static_cast<float>(2 * (i % 1000));
  }
  float *da, *db, *dc, *dd;
  CHECK_CUDA(cudaMalloc(&da, bytes));
  CHECK_CUDA(cudaMalloc(&db, bytes));
  CHECK_CUDA(cudaMalloc(&dc, bytes));
  CHECK_CUDA(cudaMalloc(&dd, bytes));
  size_t free_after = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_after, &total));
  EXPECT_APP(free_after <= free_before, "free memory grew after 16 MiB of cudaMalloc");

  CHECK_CUDA(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice));
  // memset writes bytes: 0xff in every byte of every float.
  CHECK_CUDA(cudaMemset(dc, 0xff, bytes));
  std::vector<unsigned> raw(n);
  CHECK_CUDA(cudaMemcpy(raw.data(), dc, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(raw[i] == 0xffffffffu, "memset: element %d is %08x", i, raw[i]);
  }

  vector_add<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaMemcpy(dd, dc, bytes, cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaMemcpy(c.data(), dd, bytes, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(c[i] == a[i] + b[i], "c[%d] = %f, expected %f", i, c[i], a[i] + b[i]);
  }

  CHECK_CUDA(cudaFree(da));
  CHECK_CUDA(cudaFree(db));
  CHECK_CUDA(cudaFree(dc));
  CHECK_CUDA(cudaFree(dd));
  CHECK_CUDA(cudaProfilerStop());
  CHECK_CUDA(cudaDeviceReset());
  std::printf("PASS vector_add\n");
  return 0;
}
