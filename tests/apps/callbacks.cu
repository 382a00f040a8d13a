// callbacks: cudaLaunchHostFunc and cudaStreamAddCallback run in stream order,
// in this process, after the work queued before them.
#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/callbacks_kernels.cuh"

namespace {

std::mutex order_mu;
std::vector<int> order;

struct Step {
  int id;
  const int* pinned = nullptr;  // result of the preceding D2H copy, if any
  int factor = 0;
  int n = 0;
  bool data_ok = false;
};

void Record(Step* step) {
  if (step->pinned != nullptr) {
    step->data_ok = true;
    for (int i = 0; i < step->n; ++i) {
      if (step->pinned[i] != step->factor * i) step->data_ok = false;
    }
  }
  std::lock_guard<std::mutex> lock(order_mu);
  order.push_back(step->id);
}

void CUDART_CB HostFunc(void* user) { Record(static_cast<Step*>(user)); }

void CUDART_CB StreamCallback(cudaStream_t, cudaError_t status, void* user) {
  EXPECT_APP(status == cudaSuccess, "callback got %s", cudaGetErrorName(status));
  Record(static_cast<Step*>(user));
}

}  // namespace

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 1 << 14;
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  int* d;
  int* pinned;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(int)));
  CHECK_CUDA(cudaMallocHost(&pinned, n * sizeof(int)));
  for (int i = 0; i < n; ++i) pinned[i] = -1;

  Step s1{1}, s2{2}, s3{3, pinned, 5, n}, s4{4, pinned, 9, n}, s5{5};
  iota_times<<<(n + 255) / 256, 256, 0, s>>>(d, 2, n);
  CHECK_CUDA(cudaLaunchHostFunc(s, HostFunc, &s1));
  iota_times<<<(n + 255) / 256, 256, 0, s>>>(d, 3, n);
  CHECK_CUDA(cudaStreamAddCallback(s, StreamCallback, &s2, 0));
  iota_times<<<(n + 255) / 256, 256, 0, s>>>(d, 5, n);
  CHECK_CUDA(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  // Must see factor 5: the copy before it has completed.
  CHECK_CUDA(cudaLaunchHostFunc(s, HostFunc, &s3));
  iota_times<<<(n + 255) / 256, 256, 0, s>>>(d, 9, n);
  CHECK_CUDA(cudaMemcpyAsync(pinned, d, n * sizeof(int), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamAddCallback(s, StreamCallback, &s4, 0));
  CHECK_CUDA(cudaLaunchHostFunc(s, HostFunc, &s5));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));

  {
    std::lock_guard<std::mutex> lock(order_mu);
    EXPECT_APP(order.size() == 5, "%zu callbacks ran, expected 5", order.size());
    for (size_t i = 0; i < order.size(); ++i) {
      EXPECT_APP(order[i] == static_cast<int>(i) + 1, "callback %d ran at position %zu",
                 order[i], i);
    }
  }
  EXPECT_APP(s3.data_ok, "host function 3 did not see the copied result (factor 5)");
  EXPECT_APP(s4.data_ok, "callback 4 did not see the copied result (factor 9)");

  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS callbacks\n");
  return 0;
}
