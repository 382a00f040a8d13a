// Load test program: kThreads application threads, each on its own stream,
// issue a mixed stream of asynchronous calls (memset, kernel launch, event
// record, device-to-host copy) for a fixed time, then each sends a burst of
// inline host-to-device copies larger than the whole request ring. At the end
// every thread checks on the device that no request was lost, duplicated or
// reordered, and that the burst arrived byte for byte.
//
//   load <seconds> [--no_mark_steps] [--sync_dir=DIR]
//                       prints "LOAD calls=<n> seconds=<s> threads=<t>" and
//                       "PASS hardening_load"
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/hardening/load_kernels.cuh"

namespace {

constexpr int kThreads = 8;
constexpr int kMaxSteps = 1 << 18;  // hist capacity per thread
constexpr int kSyncEvery = 256;      // steps between checkpoints
// The burst: 24 copies of 512 KiB per thread = 12 MiB per thread, 96 MiB
// in all, against an 8 MiB request ring.
constexpr int kBurstCopies = 24;
constexpr size_t kBurstBytes = 512 << 10;

unsigned char Pattern(int thread, int copy, size_t i) {
  return static_cast<unsigned char>((thread * 131 + copy * 31 + i * 7 + (i >> 9)) & 0xff);
}

// revenantMarkStep() when running under Revenant (nullptr natively): every
// thread marks a minibatch boundary at each of its checkpoints, as a training
// loop does once per step, so the journal's minibatch log is cleared as it
// would be in training. (Every thread, not one: on a loaded machine one
// thread may not run for seconds while the others go on, and everything
// they issue before the first boundary stays in the setup log.) (This loop uploads no input batch, so the automatic
// boundary detector finds none; without marks every call stays in the setup
// log: see docs/reliability.md.)
using MarkStepFn = void (*)();
MarkStepFn MarkStep() {
  static MarkStepFn fn = reinterpret_cast<MarkStepFn>(dlsym(RTLD_DEFAULT, "revenantMarkStep"));
  return fn;
}
bool g_mark_steps = true;
// --sync_dir=DIR: how load_test.sh samples the agents in a steady phase
// that starts at once on every rank and lasts until it has sampled (ranks
// start seconds apart on a loaded machine, and the test's own sampling may be
// starved for seconds). Each process creates DIR/ready.<pid> once its runtime
// is up and starts its threads' clocks when DIR/go exists; a thread leaves
// the steady loop after `seconds` only once DIR/end exists (each wait at most
// 120 s); the first thread to leave it creates DIR/burst.
std::string g_sync_dir;
std::once_flag g_burst_once;

void CreateFile(const std::string& path) {
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  EXPECT_APP(fd >= 0, "cannot create %s", path.c_str());
  close(fd);
}

void WaitForGo() {
  CreateFile(g_sync_dir + "/ready." + std::to_string(getpid()));
  const std::string go = g_sync_dir + "/go";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (access(go.c_str(), F_OK) != 0) {
    EXPECT_APP(std::chrono::steady_clock::now() < deadline, "%s did not appear in 120 s",
               go.c_str());
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

// After the thread's `seconds`: whether the steady phase may end.
template <typename TimePoint>
bool SteadyMayEnd(TimePoint end) {
  if (g_sync_dir.empty()) return true;
  const std::string path = g_sync_dir + "/end";
  if (access(path.c_str(), F_OK) == 0) return true;
  EXPECT_APP(std::chrono::steady_clock::now() < end + std::chrono::seconds(120),
             "%s did not appear within 120 s of the steady phase's end", path.c_str());
  return false;
}

struct Result {
  long long calls = 0;
  int steps = 0;
};

void Worker(int t, double seconds, Result* result) {
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *state, *hist, *errors;
  unsigned char* marker;
  CHECK_CUDA(cudaMalloc(&state, sizeof(int)));
  CHECK_CUDA(cudaMalloc(&hist, sizeof(int) * (kMaxSteps + 1)));
  CHECK_CUDA(cudaMalloc(&errors, 2 * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&marker, 1));
  CHECK_CUDA(cudaMemsetAsync(state, 0, sizeof(int), s));
  CHECK_CUDA(cudaMemsetAsync(hist, 0, sizeof(int) * (kMaxSteps + 1), s));
  CHECK_CUDA(cudaMemsetAsync(errors, 0, 2 * sizeof(int), s));
  // Checkpoints read back into pinned memory (a file of the job directory
  // shared with the agent; the privacy test checks its mode).
  int* now = nullptr;
  CHECK_CUDA(cudaHostAlloc(&now, sizeof(int), cudaHostAllocDefault));
  cudaEvent_t ev;
  CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  long long calls = 8;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int seq = 0;
  while (seq < kMaxSteps) {
    ++seq;
    CHECK_CUDA(cudaMemsetAsync(marker, seq & 0xff, 1, s));
    seq_step<<<1, 1, 0, s>>>(state, hist, marker, errors, seq);
    calls += 2;
    if (seq % 16 == 0) {
      CHECK_CUDA(cudaEventRecord(ev, s));
      cudaError_t q = cudaEventQuery(ev);
      EXPECT_APP(q == cudaSuccess || q == cudaErrorNotReady, "cudaEventQuery: %d", q);
      calls += 2;
    }
    if (seq % kSyncEvery == 0) {
      *now = -1;
      CHECK_CUDA(cudaMemcpyAsync(now, state, sizeof(int), cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      calls += 2;
      EXPECT_APP(*now == seq, "thread %d: state %d after step %d", t, *now, seq);
      if (g_mark_steps && MarkStep() != nullptr) MarkStep()();
      if (std::chrono::steady_clock::now() >= end && SteadyMayEnd(end)) break;
    }
  }
  // The burst: no synchronization until all of it is queued.
  if (!g_sync_dir.empty()) std::call_once(g_burst_once, [] { CreateFile(g_sync_dir + "/burst"); });
  std::vector<unsigned char*> dst(kBurstCopies);
  std::vector<unsigned char> src(kBurstBytes);
  for (int c = 0; c < kBurstCopies; ++c) {
    CHECK_CUDA(cudaMalloc(&dst[c], kBurstBytes));
    ++calls;
  }
  for (int c = 0; c < kBurstCopies; ++c) {
    for (size_t i = 0; i < kBurstBytes; ++i) src[i] = Pattern(t, c, i);
    CHECK_CUDA(cudaMemcpyAsync(dst[c], src.data(), kBurstBytes, cudaMemcpyHostToDevice, s));
    ++calls;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<unsigned char> back(kBurstBytes);
  for (int c = 0; c < kBurstCopies; ++c) {
    CHECK_CUDA(cudaMemcpy(back.data(), dst[c], kBurstBytes, cudaMemcpyDeviceToHost));
    ++calls;
    for (size_t i = 0; i < kBurstBytes; ++i) {
      EXPECT_APP(back[i] == Pattern(t, c, i), "thread %d: burst copy %d byte %zu differs", t, c,
                 i);
    }
    CHECK_CUDA(cudaFree(dst[c]));
    ++calls;
  }
  // Every step exactly once, in order.
  std::vector<int> h(kMaxSteps + 1);
  int err[2] = {-1, -1}, final_state = -1;
  CHECK_CUDA(cudaMemcpy(h.data(), hist, sizeof(int) * (kMaxSteps + 1), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(err, errors, sizeof(err), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(&final_state, state, sizeof(int), cudaMemcpyDeviceToHost));
  calls += 3;
  EXPECT_APP(final_state == seq, "thread %d: final state %d, expected %d", t, final_state, seq);
  EXPECT_APP(err[0] == 0, "thread %d: %d steps ran out of order", t, err[0]);
  EXPECT_APP(err[1] == 0, "thread %d: %d steps saw another memset's marker", t, err[1]);
  for (int i = 1; i <= kMaxSteps; ++i) {
    const int want = i <= seq ? 1 : 0;
    EXPECT_APP(h[i] == want, "thread %d: step %d ran %d times (expected %d)", t, i, h[i], want);
  }
  CHECK_CUDA(cudaEventDestroy(ev));
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaFreeHost(now));
  calls += 3;
  result->calls = calls;
  result->steps = seq;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 10.0;
  for (int i = 2; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no_mark_steps") == 0) {
      g_mark_steps = false;
    } else if (std::strncmp(argv[i], "--sync_dir=", 11) == 0) {
      g_sync_dir = argv[i] + 11;
    } else {
      EXPECT_APP(false, "unknown argument %s (usage: load [seconds] [--no_mark_steps] "
                        "[--sync_dir=DIR])", argv[i]);
    }
  }
  if (!g_sync_dir.empty()) {
    CHECK_CUDA(cudaFree(nullptr));  // the runtime (and its agent) is up
    WaitForGo();
  }
  std::vector<Result> results(kThreads);
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(Worker, t, seconds, &results[t]);
  for (std::thread& th : threads) th.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  long long calls = 0;
  int min_steps = kMaxSteps;
  for (const Result& r : results) {
    calls += r.calls;
    if (r.steps < min_steps) min_steps = r.steps;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("LOAD calls=%lld seconds=%.2f threads=%d min_steps=%d\n", calls, elapsed, kThreads,
              min_steps);
  EXPECT_APP(min_steps >= kSyncEvery, "a thread made fewer than %d steps", kSyncEvery);
  std::printf("PASS hardening_load\n");
  return 0;
}
