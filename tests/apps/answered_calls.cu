// answered_calls: calls that Revenant's shim sends without waiting or answers
// itself (docs/design.md, "Answered in the shim"), checked for what the
// application sees. Runs natively too (one rank per GPU).
//   1. Events made by cudaEventCreate and cudaEventCreateWithFlags (the shim
//      assigns their handles): all distinct, recorded, synchronized, queried,
//      timed and destroyed as natively; invalid flags give
//      cudaErrorInvalidValue at the call.
//   2. ncclCommGetAsyncError polled after every all-reduce of a training-like
//      loop (as PyTorch's process group does): ncclSuccess each time, and the
//      all-reduced values right.
//   3. cudaThreadExchangeStreamCaptureMode (the shim answers it from the
//      thread's mode and sends it without waiting): each thread has a mode
//      of its own, Global at first; 32 exchanges in PyTorch's guard pattern
//      (set Relaxed around a call, restore). (An out-of-range mode is not
//      tried: CUDA 13 answers it cudaSuccess, measured on an H200; the shim
//      sends it to the agent and waits for CUDA's answer.)
// Prints "PASS answered_calls".
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdio>
#include <set>
#include <thread>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"

namespace {

constexpr int kEvents = 64;
constexpr int kPolls = 200;
constexpr int kCount = 64;
constexpr int kModeGuards = 16;

}  // namespace

int main() {
  const Launch l = ReadLaunch();
  SelectDevice(l);
  const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id-answered");
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
  RemoveUniqueId(l, "nccl-id-answered");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));

  // 1. Events.
  std::vector<cudaEvent_t> ev(kEvents);
  std::set<cudaEvent_t> distinct;
  for (int i = 0; i < kEvents; ++i) {
    if (i % 2 == 0) {
      CHECK_CUDA(cudaEventCreate(&ev[i]));
    } else {
      CHECK_CUDA(cudaEventCreateWithFlags(&ev[i], i % 4 == 1 ? cudaEventDisableTiming
                                                             : cudaEventBlockingSync));
    }
    EXPECT_APP(ev[i] != nullptr, "event %d is null", i);
    distinct.insert(ev[i]);
  }
  EXPECT_APP(static_cast<int>(distinct.size()) == kEvents, "%zu distinct events of %d",
             distinct.size(), kEvents);
  cudaEvent_t bad = nullptr;
  EXPECT_CUDA_ERROR(cudaEventCreateWithFlags(&bad, 0x80u), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaGetLastError(), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaEventCreateWithFlags(nullptr, 0), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  for (int i = 0; i < kEvents; ++i) CHECK_CUDA(cudaEventRecord(ev[i], s));
  CHECK_CUDA(cudaEventSynchronize(ev[kEvents - 1]));
  for (int i = 0; i < kEvents; ++i) CHECK_CUDA(cudaEventQuery(ev[i]));
  float ms = -1.0f;
  CHECK_CUDA(cudaEventElapsedTime(&ms, ev[0], ev[2]));
  EXPECT_APP(ms >= 0.0f, "elapsed time %f ms", ms);
  EXPECT_CUDA_ERROR(cudaEventElapsedTime(&ms, ev[0], ev[1]), cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  for (int i = 0; i < kEvents; ++i) CHECK_CUDA(cudaEventDestroy(ev[i]));

  // 2. All-reduces, each followed by ncclCommGetAsyncError.
  float* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, kCount * sizeof(float)));
  std::vector<float> host(kCount, 1.0f);
  CHECK_CUDA(cudaMemcpy(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
  for (int i = 0; i < kPolls; ++i) {
    CHECK_NCCL(ncclAllReduce(buf, buf, kCount, ncclFloat, ncclSum, comm, s));
    ncclResult_t async = ncclInProgress;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
    EXPECT_APP(async == ncclSuccess, "poll %d: async error %d", i, static_cast<int>(async));
    // Halfway, a pause longer than the shim's 100 ms (a host-side stall, as
    // of a data loader): the next poll finds the shim's answer stale and is
    // sent on without waiting, however fast the rest runs.
    if (i == kPolls / 2) std::this_thread::sleep_for(std::chrono::milliseconds(150));
    // Every 8 all-reduces the values are scaled back, as an optimizer
    // step would use them.
    if (i % 8 == 7) {
      CHECK_CUDA(cudaStreamSynchronize(s));
      CHECK_CUDA(cudaMemcpy(host.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost));
      float expect = 1.0f;
      for (int k = 0; k < 8; ++k) expect *= static_cast<float>(l.world);
      for (int k = 0; k < kCount; ++k) {
        EXPECT_APP(host[k] == expect, "after all-reduce %d element %d is %f, expected %f", i, k,
                   host[k], expect);
        host[k] = 1.0f;
      }
      CHECK_CUDA(cudaMemcpy(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice));
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(s));

  // 3. The thread's stream capture mode.
  for (int i = 0; i < kModeGuards; ++i) {
    cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
    EXPECT_APP(m == cudaStreamCaptureModeGlobal, "guard %d: previous mode %d, expected Global", i,
               static_cast<int>(m));
    CHECK_CUDA(cudaStreamQuery(s));  // the guarded call (the stream is idle)
    CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
    EXPECT_APP(m == cudaStreamCaptureModeRelaxed, "guard %d: restored from %d, expected Relaxed", i,
               static_cast<int>(m));
  }
  cudaStreamCaptureMode m = cudaStreamCaptureModeThreadLocal;
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
  EXPECT_APP(m == cudaStreamCaptureModeGlobal, "previous mode %d, expected Global",
             static_cast<int>(m));
  // Another thread starts at Global whatever this one set.
  cudaStreamCaptureMode other = cudaStreamCaptureModeRelaxed;
  cudaError_t other_err = cudaErrorUnknown;
  std::thread t([&] { other_err = cudaThreadExchangeStreamCaptureMode(&other); });
  t.join();
  EXPECT_APP(other_err == cudaSuccess && other == cudaStreamCaptureModeGlobal,
             "another thread: error %d, previous mode %d, expected Global", static_cast<int>(other_err),
             static_cast<int>(other));
  m = cudaStreamCaptureModeGlobal;
  CHECK_CUDA(cudaThreadExchangeStreamCaptureMode(&m));
  EXPECT_APP(m == cudaStreamCaptureModeThreadLocal, "previous mode %d, expected ThreadLocal",
             static_cast<int>(m));

  CHECK_CUDA(cudaFree(buf));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_NCCL(ncclCommDestroy(comm));
  std::printf("PASS answered_calls\n");
  return 0;
}
