// streams_events: stream flags and priorities, timed events, a cross-stream
// dependency through cudaStreamWaitEvent, and bounded query polling.
#include <cuda_runtime.h>

#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/streams_events_kernels.cuh"

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  int least = 0, greatest = 0;
  CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  // Lower numbers are higher priorities.
  EXPECT_APP(greatest <= least, "priority range [%d, %d]", least, greatest);

  cudaStream_t producer, consumer, plain;
  CHECK_CUDA(cudaStreamCreateWithPriority(&producer, cudaStreamNonBlocking, greatest));
  CHECK_CUDA(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreate(&plain));

  cudaEvent_t start, stop, produced, done;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  CHECK_CUDA(cudaEventCreateWithFlags(&produced, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming | cudaEventBlockingSync));

  const int n = 1 << 16, rounds = 2000;
  int *a, *b;
  CHECK_CUDA(cudaMalloc(&a, n * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&b, n * sizeof(int)));
  CHECK_CUDA(cudaMemsetAsync(a, 0, n * sizeof(int), producer));

  CHECK_CUDA(cudaEventRecord(start, producer));
  produce<<<(n + 255) / 256, 256, 0, producer>>>(a, n, rounds);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventRecord(produced, producer));
  // The consumer must not start before the producer's kernel finished.
  CHECK_CUDA(cudaStreamWaitEvent(consumer, produced, 0));
  consume<<<(n + 255) / 256, 256, 0, consumer>>>(a, b, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaEventRecord(stop, consumer));
  CHECK_CUDA(cudaEventRecord(done, consumer));

  // Queries answer cudaErrorNotReady until the work is done, then cudaSuccess.
  bool ok = WaitFor([&] {
    cudaError_t e = cudaEventQuery(done);
    EXPECT_APP(e == cudaSuccess || e == cudaErrorNotReady, "cudaEventQuery: %s",
               cudaGetErrorName(e));
    return e == cudaSuccess;
  }, 60.0);
  EXPECT_APP(ok, "event never completed within 60 s");
  ok = WaitFor([&] {
    cudaError_t e = cudaStreamQuery(consumer);
    EXPECT_APP(e == cudaSuccess || e == cudaErrorNotReady, "cudaStreamQuery: %s",
               cudaGetErrorName(e));
    return e == cudaSuccess;
  }, 60.0);
  EXPECT_APP(ok, "consumer stream never drained within 60 s");
  CHECK_CUDA(cudaEventSynchronize(stop));
  float ms = -1.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
  EXPECT_APP(ms >= 0.0f, "elapsed time %f ms", ms);
  std::printf("producer+consumer: %.3f ms\n", ms);

  std::vector<int> hb(n);
  CHECK_CUDA(cudaMemcpyAsync(hb.data(), b, n * sizeof(int), cudaMemcpyDeviceToHost, plain));
  CHECK_CUDA(cudaStreamSynchronize(plain));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(hb[i] == 2 * (i + rounds), "b[%d] = %d, expected %d", i, hb[i],
               2 * (i + rounds));
  }

  // An idle stream and a completed event answer cudaSuccess at once.
  CHECK_CUDA(cudaStreamQuery(producer));
  CHECK_CUDA(cudaEventQuery(produced));

  CHECK_CUDA(cudaFree(a));
  CHECK_CUDA(cudaFree(b));
  for (cudaEvent_t e : {start, stop, produced, done}) CHECK_CUDA(cudaEventDestroy(e));
  for (cudaStream_t s : {producer, consumer, plain}) CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS streams_events\n");
  return 0;
}
