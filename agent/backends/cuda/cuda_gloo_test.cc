// CudaGloo's staging, stream gates and recovery against a fake CUDA runtime
// (testdata/fake_cudart.h: streams in order on threads, one host-function
// thread per device as in CUDA), ranks as threads of this process, each on a
// device ordinal of its own. What the GPU adds (real copies, real kernels)
// is checked by scripts/gpu/gloo.sh.
#include "agent/backends/cuda/cuda_gloo.h"

#include <nccl.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/backends/cuda/testdata/fake_cudart.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

const bool kIgnoreSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

// One rank: its "device memory", CudaGloo and the application's stream.
struct Rank {
  int device = 0;
  std::vector<char> memory = std::vector<char>(1 << 20, 0);
  size_t used = 0;
  std::vector<std::pair<uint64_t, uint64_t>> allocs;
  std::unique_ptr<CudaGloo> gloo;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;

  float* Alloc(size_t floats) {
    void* p = memory.data() + used;
    allocs.emplace_back(reinterpret_cast<uint64_t>(p), floats * sizeof(float));
    used += (floats * sizeof(float) + 255) / 256 * 256;
    return static_cast<float*>(p);
  }
  GlooCollectives& nccl() { return gloo->nccl(); }
};

std::unique_ptr<Rank> NewRank(int device, const std::string& job_dir) {
  auto r = std::make_unique<Rank>();
  r->device = device;
  BackendOptions o;
  o.device = device;
  o.collectives = "gloo";
  o.job_dir = job_dir;
  o.recovery_timeout_s = job_dir.empty() ? 0 : 30;
  Rank* raw = r.get();
  CudaGlooHooks hooks;
  hooks.accessible = [raw](const void* p, size_t n) {
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    for (const auto& [start, size] : raw->allocs) {
      if (a >= start && a - start <= size && n <= size - (a - start)) return true;
    }
    return false;
  };
  hooks.known_stream = [raw](cudaStream_t s) { return s == raw->stream; };
  hooks.live_allocations = [raw] { return raw->allocs; };
  const DeviceRange range{reinterpret_cast<uint64_t>(r->memory.data()), r->memory.size()};
  absl::StatusOr<std::unique_ptr<CudaGloo>> g = CudaGloo::Create(o, range, hooks);
  EXPECT_TRUE(g.ok()) << g.status();
  if (!g.ok()) return nullptr;
  r->gloo = std::move(*g);
  cudaSetDevice(device);
  EXPECT_EQ(cudaStreamCreateWithFlags(&r->stream, cudaStreamNonBlocking), cudaSuccess);
  return r;
}

void Drop(std::unique_ptr<Rank>& r) {
  EXPECT_TRUE(fake_cudart::Synchronize(r->stream, 30));
  r->gloo.reset();
  cudaStreamDestroy(r->stream);
  r.reset();
}

void InitAll(std::vector<std::unique_ptr<Rank>>& ranks, const ncclUniqueId& id) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_EQ(ranks[r]->nccl().ncclCommInitRank(&ranks[r]->comm, n, id, r), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(CudaGloo, StagedUnitsRunBeforeTheStreamsLaterWork) {
  constexpr int n = 3;
  constexpr size_t count = 64;
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(NewRank(r, ""));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl().ncclGetUniqueId(&id), ncclSuccess);
  InitAll(ranks, id);
  std::vector<float*> grads(n), gathered(n), ring(n), seen(n);
  for (int r = 0; r < n; ++r) {
    grads[r] = ranks[r]->Alloc(count);
    gathered[r] = ranks[r]->Alloc(count * n);
    ring[r] = ranks[r]->Alloc(count);
    seen[r] = ranks[r]->Alloc(count);
    for (size_t i = 0; i < count; ++i) grads[r][i] = float(r + 1) * float(i);
  }
  const long host_functions_before = fake_cudart::HostFunctionsRun();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      Rank& k = *ranks[r];
      // Several units queued at once: in place, then what reads the result.
      for (int round = 0; round < 3; ++round) {
        EXPECT_EQ(k.nccl().ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum, k.comm,
                                         k.stream),
                  ncclSuccess);
      }
      fake_cudart::Enqueue(k.stream, [&, r] {
        std::memcpy(seen[r], grads[r], count * sizeof(float));
      });
      EXPECT_EQ(k.nccl().ncclAllGather(grads[r], gathered[r], count, ncclFloat, k.comm, k.stream),
                ncclSuccess);
      EXPECT_EQ(k.nccl().ncclGroupStart(), ncclSuccess);
      EXPECT_EQ(k.nccl().ncclSend(grads[r], count, ncclFloat, (r + 1) % n, k.comm, k.stream),
                ncclSuccess);
      EXPECT_EQ(k.nccl().ncclRecv(ring[r], count, ncclFloat, (r + n - 1) % n, k.comm, k.stream),
                ncclSuccess);
      EXPECT_EQ(k.nccl().ncclGroupEnd(), ncclSuccess);
      // Refused at the call: a buffer outside the allocations, an unknown stream.
      EXPECT_EQ(k.nccl().ncclAllReduce(grads[r], grads[r], count * 100, ncclFloat, ncclSum,
                                       k.comm, k.stream),
                ncclInvalidArgument);
      EXPECT_EQ(k.nccl().ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum, k.comm,
                                       reinterpret_cast<cudaStream_t>(0x10)),
                ncclInvalidArgument);
      EXPECT_TRUE(fake_cudart::Synchronize(k.stream, 30));
    });
  }
  for (auto& t : threads) t.join();
  // Round 1 sums (r + 1) * i over the ranks: 6i; rounds 2 and 3 sum three
  // equal values: 18i, then 54i.
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < count; ++i) {
      const float want = 6.f * float(i) * 3.f * 3.f;
      ASSERT_EQ(grads[r][i], want) << "rank " << r << " i " << i;
      ASSERT_EQ(seen[r][i], want) << "the op after the collective ran before it completed";
      ASSERT_EQ(ring[r][i], want);
      for (int q = 0; q < n; ++q) ASSERT_EQ(gathered[r][q * count + i], want);
    }
    EXPECT_EQ(ranks[r]->gloo->TakeDeferredError(), cudaSuccess);
  }
  // One gate and one release per unit and rank (5 units).
  EXPECT_EQ(fake_cudart::HostFunctionsRun() - host_functions_before, 2 * 5 * n);
  for (auto& r : ranks) {
    EXPECT_EQ(r->nccl().ncclCommDestroy(r->comm), ncclSuccess);
    Drop(r);
  }
}

// Rank 2 dies after unit (1, 0). The survivors' unit (1, 1) fails and waits
// for the epoch at its gate: the optimizer step queued behind it must not
// run meanwhile (the collective fence). A replacement replays, receives the
// state through the private copy stream, takes (1, 0)'s result from a
// survivor and runs (1, 1) with them.
TEST(CudaGloo, RecoveryBehindTheGate) {
  char tmpl[] = "/tmp/cuda_gloo_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  constexpr int n = 3;
  constexpr size_t count = 32;
  auto job_dir = [&](int r) { return root + "/rank" + std::to_string(r); };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(NewRank(10 + r, job_dir(r)));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl().ncclGetUniqueId(&id), ncclSuccess);
  InitAll(ranks, id);
  std::vector<float*> params(n), grads(n);
  for (int r = 0; r < n; ++r) {
    params[r] = ranks[r]->Alloc(count);
    grads[r] = ranks[r]->Alloc(count);
    for (size_t i = 0; i < count; ++i) {
      params[r][i] = float(i) + 0.25f;  // replicated
      grads[r][i] = float(r + 1);
    }
    ranks[r]->nccl().MarkBoundary(1);
  }
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        Rank& k = *ranks[r];
        EXPECT_EQ(k.nccl().ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum, k.comm,
                                         k.stream),
                  ncclSuccess);
        EXPECT_TRUE(fake_cudart::Synchronize(k.stream, 30));
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < n; ++r) ASSERT_EQ(grads[r][0], 6.f);
  Drop(ranks[2]);
  std::atomic<int> steps{0};
  for (int r = 0; r < 2; ++r) {
    Rank& k = *ranks[r];
    ASSERT_EQ(k.nccl().ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum, k.comm,
                                     k.stream),
              ncclSuccess);
    fake_cudart::Enqueue(k.stream, [&, r] {
      for (size_t i = 0; i < count; ++i) params[r][i] -= grads[r][i];  // the optimizer step
      steps.fetch_add(1);
    });
  }
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(steps.load(), 0) << "work behind a failed collective ran";
  EXPECT_EQ(params[0][1], 1.25f);
  {
    std::ofstream epoch(root + "/epoch");
    epoch << 1;
  }
  auto repl = NewRank(12, job_dir(2));
  float* rparams = repl->Alloc(count);
  float* rgrads = repl->Alloc(count);
  repl->nccl().SetReplayPhase(ReplayPhase::kSetupLog);
  ASSERT_EQ(repl->nccl().ncclCommInitRank(&repl->comm, n, id, 2), ncclSuccess);
  repl->nccl().MarkBoundary(1);
  repl->nccl().SetReplayPhase(ReplayPhase::kMinibatchLog);
  bool behind = true;
  ASSERT_TRUE(repl->nccl().JoinRecovery(1, &behind).ok());
  EXPECT_FALSE(behind);
  for (size_t i = 0; i < count; ++i) ASSERT_EQ(rparams[i], float(i) + 0.25f) << i;
  // The replay: gradients recomputed, (1, 0) answered from the survivors,
  // then (1, 1) and the step with them.
  for (size_t i = 0; i < count; ++i) rgrads[i] = 3.f;
  ASSERT_EQ(repl->nccl().ncclAllReduce(rgrads, rgrads, count, ncclFloat, ncclSum, repl->comm,
                                       repl->stream),
            ncclSuccess);
  repl->nccl().SetReplayPhase(ReplayPhase::kNone);
  ASSERT_EQ(repl->nccl().ncclAllReduce(rgrads, rgrads, count, ncclFloat, ncclSum, repl->comm,
                                       repl->stream),
            ncclSuccess);
  fake_cudart::Enqueue(repl->stream, [&] {
    for (size_t i = 0; i < count; ++i) rparams[i] -= rgrads[i];
    steps.fetch_add(1);
  });
  ASSERT_TRUE(fake_cudart::Synchronize(repl->stream, 30));
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(fake_cudart::Synchronize(ranks[r]->stream, 30));
  EXPECT_EQ(steps.load(), 3);
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(rgrads[i], 18.f);
    EXPECT_EQ(grads[0][i], 18.f);
    EXPECT_EQ(grads[1][i], 18.f);
    EXPECT_EQ(rparams[i], params[0][i]);
    EXPECT_EQ(params[1][i], params[0][i]);
    EXPECT_EQ(params[0][i], float(i) + 0.25f - 18.f);
  }
  EXPECT_EQ(repl->gloo->TakeDeferredError(), cudaSuccess);
  EXPECT_EQ(ranks[0]->gloo->TakeDeferredError(), cudaSuccess);
  EXPECT_EQ(repl->nccl().ncclCommDestroy(repl->comm), ncclSuccess);
  Drop(repl);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->nccl().ncclCommDestroy(ranks[r]->comm), ncclSuccess);
    Drop(ranks[r]);
  }
  const std::string cmd = "rm -rf '" + root + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
}

// A unit whose recovery cannot happen (no epoch is ever declared) fails
// within the recovery timeout: the gate opens, the error is deferred to the
// next synchronization, and the communicator reports it.
TEST(CudaGloo, FailedUnitOpensTheGateAndDefersItsError) {
  char tmpl[] = "/tmp/cuda_gloo_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(NewRank(20 + r, ""));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl().ncclGetUniqueId(&id), ncclSuccess);
  InitAll(ranks, id);
  float* buf = ranks[0]->Alloc(8);
  Drop(ranks[1]);
  Rank& k = *ranks[0];
  ASSERT_EQ(k.nccl().ncclAllReduce(buf, buf, 8, ncclFloat, ncclSum, k.comm, k.stream),
            ncclSuccess);
  EXPECT_TRUE(fake_cudart::Synchronize(k.stream, 60));
  EXPECT_EQ(k.gloo->TakeDeferredError(), cudaErrorLaunchFailure);
  EXPECT_EQ(k.gloo->TakeDeferredError(), cudaSuccess);  // once
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(k.nccl().ncclCommGetAsyncError(k.comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  EXPECT_EQ(k.nccl().ncclCommDestroy(k.comm), ncclSuccess);
  Drop(ranks[0]);
  const std::string cmd = "rm -rf '" + root + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace cuda
}  // namespace agent
}  // namespace revenant
