// idle_answers: synchronizations and queries of idle streams and completed
// events (which Revenant's shim answers without a round trip to the agent),
// and the cases that must not be answered that way: work another thread
// queued in between, another thread's per-thread default stream, an event
// recorded again behind pending work. A kernel writes a tag into mapped host
// memory when it ends; after a synchronization returned, the host reads the
// tag directly: an early answer leaves the old tag there.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "tests/apps/app_check.h"
#include "tests/apps/idle_answers_kernels.cuh"

namespace {

constexpr int kRounds = 20 << 20;  // tens of milliseconds on either backend

struct Tag {
  int* host = nullptr;
  int* dev = nullptr;
};

Tag NewTag() {
  Tag t;
  CHECK_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&t.host), 2 * sizeof(int), cudaHostAllocMapped));
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&t.dev), t.host, 0));
  t.host[0] = t.host[1] = 0;
  return t;
}

int ReadTag(const Tag& t) { return reinterpret_cast<volatile int*>(t.host)[0]; }

}  // namespace

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  CHECK_CUDA(cudaSetDeviceFlags(cudaDeviceMapHost));
  cudaStream_t s, t;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  Tag tag = NewTag();

  // 1. Idle stream: repeated synchronizations and queries succeed; a record
  // on it completes at once.
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 1);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(ReadTag(tag) == 1, "after the first synchronization the tag is %d, expected 1",
             ReadTag(tag));
  for (int i = 0; i < 200; ++i) {
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaStreamQuery(s));
    CHECK_CUDA(cudaEventRecord(ev, s));
    const cudaError_t q = cudaEventQuery(ev);
    EXPECT_APP(q == cudaSuccess || q == cudaErrorNotReady, "cudaEventQuery: %s", cudaGetErrorName(q));
    CHECK_CUDA(cudaEventSynchronize(ev));
  }

  // 2. Work queued after the stream was found idle is waited for.
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 2);
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(ReadTag(tag) == 2, "a synchronization behind new work returned with tag %d",
             ReadTag(tag));

  // 3. Another thread queues work on the idle stream; this thread's next
  // synchronization waits for it.
  {
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::thread other([&] {
      slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 3);
      CHECK_CUDA(cudaGetLastError());
    });
    other.join();
    CHECK_CUDA(cudaStreamSynchronize(s));
    EXPECT_APP(ReadTag(tag) == 3, "work another thread queued was not waited for (tag %d)",
               ReadTag(tag));
  }

  // 4. An event recorded again behind pending work is not complete.
  {
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaEventRecord(ev, s));
    CHECK_CUDA(cudaEventSynchronize(ev));
    slow_tag<<<1, 1, 0, t>>>(tag.dev, kRounds, 4);
    CHECK_CUDA(cudaEventRecord(ev, t));
    CHECK_CUDA(cudaEventSynchronize(ev));
    EXPECT_APP(ReadTag(tag) == 4, "an event recorded behind work completed early (tag %d)",
               ReadTag(tag));
    CHECK_CUDA(cudaEventQuery(ev));  // synchronized: complete
  }

  // 5. Per-thread default streams are different streams on each thread: the
  // other thread's synchronization of its own waits for its kernel, whatever
  // this thread's synchronization of its own (idle) one returned.
  {
    std::atomic<int> phase{0};
    std::thread other([&] {
      slow_tag<<<1, 1, 0, cudaStreamPerThread>>>(tag.dev, kRounds, 5);
      CHECK_CUDA(cudaGetLastError());
      phase = 1;
      while (phase.load() != 2) std::this_thread::yield();
      CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
      EXPECT_APP(ReadTag(tag) == 5, "another thread's per-thread stream was taken for idle (tag %d)",
                 ReadTag(tag));
    });
    while (phase.load() != 1) std::this_thread::yield();
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamPerThread));
    phase = 2;
    other.join();
  }

  // 6. After a device-wide synchronization every stream is idle.
  slow_tag<<<1, 1, 0, t>>>(tag.dev, kRounds, 6);
  CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_APP(ReadTag(tag) == 6, "cudaDeviceSynchronize returned with tag %d", ReadTag(tag));
  for (int i = 0; i < 100; ++i) {
    CHECK_CUDA(cudaStreamQuery(s));
    CHECK_CUDA(cudaStreamQuery(t));
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  // ...until work is queued on one of them.
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 7);
  CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_APP(ReadTag(tag) == 7, "cudaDeviceSynchronize behind new work returned with tag %d",
             ReadTag(tag));

  // 7. An event found complete right after its record leaves its stream idle
  // (the record-and-poll loop answers locally from then on), but not when
  // more work was queued on the stream after the record.
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 8);
  CHECK_CUDA(cudaEventRecord(ev, s));
  EXPECT_APP(WaitFor([&] { return cudaEventQuery(ev) == cudaSuccess; }, 60.0),
             "the event never completed");
  EXPECT_APP(ReadTag(tag) == 8, "the event completed before its work (tag %d)", ReadTag(tag));
  for (int i = 0; i < 100; ++i) {
    CHECK_CUDA(cudaEventRecord(ev, s));
    // A query right after a record may find it not yet run (CUDA allows
    // cudaErrorNotReady here), never an error.
    const cudaError_t q = cudaEventQuery(ev);
    EXPECT_APP(q == cudaSuccess || q == cudaErrorNotReady, "cudaEventQuery: %s", cudaGetErrorName(q));
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds / 4, 9);
  CHECK_CUDA(cudaEventRecord(ev, s));
  slow_tag<<<1, 1, 0, s>>>(tag.dev, kRounds, 10);
  EXPECT_APP(WaitFor([&] { return cudaEventQuery(ev) == cudaSuccess; }, 60.0),
             "the event never completed");
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(ReadTag(tag) == 10, "work queued after a completed record was not waited for (tag %d)",
             ReadTag(tag));

  CHECK_CUDA(cudaEventDestroy(ev));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaStreamDestroy(t));
  CHECK_CUDA(cudaFreeHost(tag.host));
  std::printf("PASS idle_answers\n");
  return 0;
}
