// CudaNccl's fence and recovery over several ranks without a GPU: four
// CudaNccl instances (one per rank, threads of this process) against a fake
// NCCL (testdata/fake_nccl.h: an all-reduce waits for every member, a
// member's death ends it with NaN in the receive buffer) and a fake CUDA
// runtime (testdata/fake_cudart.h: streams run on threads).
//
// What must hold: an in-place collective's call returns only once it
// completed (the fence); out-of-place ones stay in flight up to the
// pipeline's depth and complete at the next settle (the deferred fence); when a member dies mid all-reduce, the survivors' calls wait for
// the job's epoch, re-form the communicator with the replacement under the
// same handle, and run the all-reduce again from their saved in-place input;
// the replacement receives the survivors' state and the results of the
// units it replays but the survivors completed; results are exact sums; a
// recovery without an epoch ends within its bound and later calls answer
// at once.
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/backends/cuda/cuda_nccl.h"
#include "agent/backends/cuda/testdata/fake_cudart.h"
#include "agent/backends/cuda/testdata/fake_nccl.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr int kRanks = 4;
constexpr size_t kCount = 1000;
constexpr size_t kState = 4096;

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::string JobRoot(int ranks) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = std::string(base != nullptr ? base : "/tmp") + "/jobXXXXXX";
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  for (int r = 0; r < ranks; ++r) mkdir((t + "/rank" + std::to_string(r)).c_str(), 0700);
  return t;
}

void DeclareEpoch(const std::string& root, int epoch) {
  std::ofstream(root + "/epoch.tmp") << epoch << "\n";
  std::rename((root + "/epoch.tmp").c_str(), (root + "/epoch").c_str());
}

int CountEvents(const std::string& root, const std::string& event) {
  std::ifstream f(root + "/events.jsonl");
  std::string line;
  int n = 0;
  while (std::getline(f, line)) n += line.find("\"" + event + "\"") != std::string::npos;
  return n;
}

// One rank's agent: its NCCL rows, a stream, a gradient buffer, and its
// "device range" holding the replicated state.
struct Rank {
  // pipeline: CudaNcclOptions::pipeline (1: every unit waited for at its call).
  // stream_flags: the flags of the rank's collective stream.
  // tweak: changes the rest of the options (staging, the pinned pool).
  Rank(const std::string& root, int r, double recovery_s, int pipeline = 8,
       unsigned int stream_flags = 0, bool overlap = true,
       const std::function<void(CudaNcclOptions*)>& tweak = {}) {
    CudaNcclOptions o;
    o.rank = r;
    o.pipeline = pipeline;
    o.overlap = overlap;
    if (tweak) tweak(&o);
    o.recovery_timeout = absl::Seconds(recovery_s);
    nccl = std::make_unique<CudaNccl>(0, root + "/rank" + std::to_string(r), o);
    range.assign(kState, 0);
    char* base = range.data();
    nccl->SetStateAccess(
        [base] {
          return std::vector<std::pair<uint64_t, uint64_t>>{
              {reinterpret_cast<uint64_t>(base), kState}};
        },
        reinterpret_cast<uint64_t>(base));
    EXPECT_EQ(::cudaStreamCreateWithFlags(&stream, stream_flags), cudaSuccess);
    grads.assign(kCount, 0.0f);
  }
  // An in-place all-reduce of `value` everywhere.
  ncclResult_t AllReduce(float value) {
    for (float& g : grads) g = value;
    return nccl->AllReduce(grads.data(), grads.data(), kCount, ncclFloat, ncclSum, comm, stream);
  }
  bool All(float value) const {
    for (float g : grads) {
      if (g != value) return false;
    }
    return true;
  }
  // Joins the job at minibatch 1 and fills the replicated state (0x42).
  bool FormAtMinibatch1(const ncclUniqueId& id, int rank) {
    if (nccl->CommInitRankConfig(&comm, kRanks, id, rank, nullptr) != ncclSuccess) return false;
    nccl->MarkBoundary(1);
    std::memset(range.data(), 0x42, kState);
    return true;
  }
  // A replacement of `rank` whose journal starts at minibatch 1: replays its
  // setup log (the communicator) and joins the survivors' recovery, leaving
  // the replay in its minibatch log.
  absl::Status ReplaceAtMinibatch1(const ncclUniqueId& id, int rank) {
    nccl->SetReplayPhase(ReplayPhase::kSetupLog);
    if (nccl->CommInitRankConfig(&comm, kRanks, id, rank, nullptr) != ncclSuccess) {
      return absl::InternalError("init failed");
    }
    nccl->MarkBoundary(1);
    nccl->SetReplayPhase(ReplayPhase::kMinibatchLog);
    bool behind = true;
    return nccl->JoinRecovery(1, &behind);
  }
  // Out-of-place all-reduce k of a burst: sends[k] (filled with `value`
  // first) into outs[k]; left in flight.
  ncclResult_t AllReduceOut(size_t k, float value) {
    if (sends.size() <= k) {
      sends.resize(k + 1);
      outs.resize(k + 1);
    }
    sends[k].assign(kCount, value);
    outs[k].assign(kCount, 0.0f);
    return nccl->AllReduce(sends[k].data(), outs[k].data(), kCount, ncclFloat, ncclSum, comm,
                           stream);
  }
  // In-place all-reduce k of a burst on sends[k] (its own bucket); left in flight.
  ncclResult_t AllReduceIn(size_t k, float value) {
    if (sends.size() <= k) {
      sends.resize(k + 1);
      outs.resize(k + 1);
    }
    sends[k].assign(kCount, value);
    return nccl->AllReduce(sends[k].data(), sends[k].data(), kCount, ncclFloat, ncclSum, comm,
                           stream);
  }
  bool In(size_t k, float value) const {
    for (float g : sends[k]) {
      if (g != value) return false;
    }
    return true;
  }
  bool Out(size_t k, float value) const {
    for (float g : outs[k]) {
      if (g != value) return false;
    }
    return true;
  }
  std::unique_ptr<CudaNccl> nccl;
  std::vector<std::vector<float>> sends, outs;
  cudaStream_t stream = nullptr;
  ncclComm_t comm = nullptr;
  std::vector<float> grads;
  std::vector<char> range;
};

// Results are staged into pinned buffers reused from minibatch to
// minibatch: a buffer given back is handed out again for the same size, and
// never twice at once.
TEST(PinnedPoolTest, ReusesBuffersOfTheSameSize) {
  auto pool = std::make_shared<PinnedPool>();
  PinnedPool::Buf a = PinnedPool::Take(pool, 4096);
  ASSERT_NE(a.get(), nullptr);
  char* first = a.get();
  std::memset(a.get(), 0x5a, 4096);
  a.reset();
  PinnedPool::Buf b = PinnedPool::Take(pool, 4096);
  EXPECT_EQ(b.get(), first);
  PinnedPool::Buf c = PinnedPool::Take(pool, 4096);
  ASSERT_NE(c.get(), nullptr);
  EXPECT_NE(c.get(), first);
  PinnedPool::Buf d = PinnedPool::Take(pool, 8192);  // another size: a new buffer
  ASSERT_NE(d.get(), nullptr);
  EXPECT_NE(d.get(), first);
  EXPECT_NE(d.get(), c.get());
  // A bound raised: buffers given back beyond the first bound are kept.
  auto small = std::make_shared<PinnedPool>(4096);
  {
    PinnedPool::Buf x = PinnedPool::Take(small, 4096), y = PinnedPool::Take(small, 4096);
  }
  EXPECT_EQ(small->made(), 2u);
  { PinnedPool::Buf x = PinnedPool::Take(small, 4096), y = PinnedPool::Take(small, 4096); }
  EXPECT_EQ(small->made(), 3u);  // one was kept, one freed
  small->KeepAtLeast(2 * 4096);
  { PinnedPool::Buf x = PinnedPool::Take(small, 4096), y = PinnedPool::Take(small, 4096); }
  { PinnedPool::Buf x = PinnedPool::Take(small, 4096), y = PinnedPool::Take(small, 4096); }
  EXPECT_EQ(small->made(), 4u);
  // The pool lives as long as its buffers do.
  pool.reset();
  b.reset();
  c.reset();
  d.reset();
}

// Buffers of at least the pool's registration size are anonymous mappings
// registered for the device, unregistered when the pool lets them go;
// smaller ones come from cudaMallocHost. SIZE_MAX: none is registered
// (REVENANT_RESULT_PIN_REGISTER=0).
TEST(PinnedPoolTest, LargeBuffersAreRegisteredMappings) {
  const long before = fake_cudart::RegisteredHostRanges();
  const size_t mib = size_t{1} << 20;
  {
    auto pool = std::make_shared<PinnedPool>(3 * mib, mib);
    PinnedPool::Buf big = PinnedPool::Take(pool, 2 * mib + 100);
    ASSERT_NE(big.get(), nullptr);
    std::memset(big.get(), 0x33, 2 * mib + 100);
    PinnedPool::Buf small = PinnedPool::Take(pool, 4096);
    ASSERT_NE(small.get(), nullptr);
    EXPECT_EQ(pool->made(), 2u);
    EXPECT_EQ(pool->registered(), 1u);
    EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before + 1);
    char* first = big.get();
    big.reset();  // kept for reuse (under the bound)
    EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before + 1);
    big = PinnedPool::Take(pool, 2 * mib + 100);
    EXPECT_EQ(big.get(), first);
    EXPECT_EQ(big.get()[2 * mib + 99], 0x33);
    EXPECT_EQ(pool->made(), 2u);
    // Two of them given back pass the bound: the older one is unregistered.
    PinnedPool::Buf other = PinnedPool::Take(pool, 2 * mib + 100);
    EXPECT_EQ(pool->registered(), 2u);
    EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before + 2);
    big.reset();
    other.reset();
    EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before + 1);
    small.reset();
  }
  // The pool (held by its buffers' deleters too) unregisters what it still
  // holds when it goes.
  EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before);

  auto unregistered = std::make_shared<PinnedPool>(3 * mib, std::numeric_limits<size_t>::max());
  PinnedPool::Buf b = PinnedPool::Take(unregistered, 2 * mib);
  ASSERT_NE(b.get(), nullptr);
  EXPECT_EQ(unregistered->made(), 1u);
  EXPECT_EQ(unregistered->registered(), 0u);
  EXPECT_EQ(fake_cudart::RegisteredHostRanges(), before);
}

// With the fence at the call (REVENANT_COLLECTIVE_PIPELINE=1).
TEST(CudaNcclFakeTest, FourRanksRecoverAMemberKilledMidAllReduce) {
  const std::string root = JobRoot(kRanks);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 30, 1));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  // Formation and three units of minibatch 1, every rank on a thread.
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      if (me.nccl->CommInitRankConfig(&me.comm, kRanks, id, r, nullptr) != ncclSuccess) {
        errors[r] = "init failed";
        return;
      }
      me.nccl->MarkBoundary(1);
      std::memset(me.range.data(), 0x42, kState);  // the replicated state
      for (int k = 0; k < 3; ++k) {
        if (me.AllReduce(static_cast<float>((r + 1) * (k + 1))) != ncclSuccess) {
          errors[r] = "all-reduce failed";
          return;
        }
        // The fence: the sum is there when the call returns, no synchronize.
        if (!me.All(10.0f * (k + 1))) errors[r] = "the call returned before the sum was there";
      }
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
  const ncclComm_t handle0 = ranks[0]->comm;

  // Unit (1, 3): rank 1 dies before it posts its part.
  std::vector<ncclResult_t> results(kRanks, ncclInternalError);
  const auto start = std::chrono::steady_clock::now();
  for (int r : {0, 2, 3}) {
    threads.emplace_back([&, r] { results[r] = ranks[r]->AllReduce(static_cast<float>((r + 1) * 4)); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fake_nccl::BreakGroup(id);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  DeclareEpoch(root, 1);

  // The replacement of rank 1 replays: setup log, boundary, minibatch log.
  auto repl = std::make_unique<Rank>(root, 1, 30, 1);
  repl->nccl->SetReplayPhase(ReplayPhase::kSetupLog);
  ASSERT_EQ(repl->nccl->CommInitRankConfig(&repl->comm, kRanks, id, 1, nullptr), ncclSuccess);
  EXPECT_EQ(repl->AllReduce(1.0f), ncclSuccess);  // minibatch 0: history, skipped
  EXPECT_TRUE(repl->All(1.0f));
  repl->nccl->MarkBoundary(1);
  repl->nccl->SetReplayPhase(ReplayPhase::kMinibatchLog);
  bool behind = true;
  absl::Status joined = repl->nccl->JoinRecovery(1, &behind);
  ASSERT_TRUE(joined.ok()) << joined;
  EXPECT_FALSE(behind);
  EXPECT_EQ(repl->range, std::vector<char>(kState, 0x42)) << "the survivors' state did not arrive";
  // Units the survivors completed: their results, not a joint run.
  for (int k = 0; k < 3; ++k) {
    EXPECT_EQ(repl->AllReduce(-7.0f), ncclSuccess);
    EXPECT_TRUE(repl->All(10.0f * (k + 1))) << "unit (1, " << k << ") got " << repl->grads[0];
  }
  // The unit the survivors wait in: jointly, from their saved inputs.
  EXPECT_EQ(repl->AllReduce(8.0f), ncclSuccess);
  EXPECT_TRUE(repl->All(40.0f)) << repl->grads[0];
  repl->nccl->SetReplayPhase(ReplayPhase::kNone);
  for (auto& t : threads) t.join();
  threads.clear();
  EXPECT_LT(Since(start), 20.0);
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    EXPECT_TRUE(ranks[r]->All(40.0f)) << "rank " << r << " has " << ranks[r]->grads[0]
                                      << " (its in-place input was not restored?)";
  }
  EXPECT_EQ(ranks[0]->comm, handle0);  // the application's handle stays
  EXPECT_EQ(CountEvents(root, "survivor_joined"), 3);
  EXPECT_EQ(CountEvents(root, "replacement_joined"), 1);
  EXPECT_EQ(CountEvents(root, "survivor_collective_failed"), 3);

  // The re-formed communicator goes on: unit (1, 4) on all four.
  ranks[1] = std::move(repl);
  // One char per rank: the ranks' threads write their own (std::vector<bool>
  // packs them into shared words, a data race).
  std::vector<char> ok(kRanks, 0);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      ok[r] = ranks[r]->AllReduce(static_cast<float>((r + 1) * 5)) == ncclSuccess &&
              ranks[r]->All(50.0f);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(ok[r]) << "rank " << r;
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(ranks[0]->nccl->CommGetAsyncError(ranks[0]->comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

TEST(CudaNcclFakeTest, TwoReplacementsAtOnceWhenTheSurvivorsAreAMinibatchAhead) {
  const std::string root = JobRoot(kRanks);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 30, 1));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  // One char per rank: the ranks' threads write their own (std::vector<bool>
  // packs them into shared words, a data race).
  std::vector<char> ok(kRanks, 0);
  // Minibatch 1 completes everywhere (two units), then its optimizer step
  // changes the state: the survivors are at minibatch 2's boundary.
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      ok[r] = me.nccl->CommInitRankConfig(&me.comm, kRanks, id, r, nullptr) == ncclSuccess;
      me.nccl->MarkBoundary(1);
      for (int k = 0; k < 2 && ok[r]; ++k) ok[r] = me.AllReduce(1.0f) == ncclSuccess && me.All(4.0f);
      std::memset(me.range.data(), 0x17, kState);
      me.nccl->MarkBoundary(2);
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(ok[r]) << "rank " << r;
  // Ranks 1 and 2 die together; the survivors wait in unit (2, 0).
  std::vector<ncclResult_t> results(kRanks, ncclInternalError);
  for (int r : {0, 3}) {
    threads.emplace_back([&, r] { results[r] = ranks[r]->AllReduce(static_cast<float>(r + 1)); });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  fake_nccl::BreakGroup(id);
  DeclareEpoch(root, 1);
  // Both replacements' journals are at minibatch 1.
  std::vector<std::unique_ptr<Rank>> repl(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> repl_threads;
  for (int r : {1, 2}) {
    repl[r] = std::make_unique<Rank>(root, r, 30, 1);
    repl_threads.emplace_back([&, r] {
      Rank& me = *repl[r];
      me.nccl->SetReplayPhase(ReplayPhase::kSetupLog);
      if (me.nccl->CommInitRankConfig(&me.comm, kRanks, id, r, nullptr) != ncclSuccess) {
        errors[r] = "init";
        return;
      }
      me.nccl->MarkBoundary(1);
      me.nccl->SetReplayPhase(ReplayPhase::kMinibatchLog);
      bool behind = false;
      absl::Status s = me.nccl->JoinRecovery(1, &behind);
      if (!s.ok()) {
        errors[r] = s.ToString();
        return;
      }
      if (!behind) errors[r] = "the survivors were ahead, but the join did not say so";
      if (me.range != std::vector<char>(kState, 0x17)) errors[r] += "; no state";
      // The session skips the rest of minibatch 1; minibatch 2 runs jointly.
      me.nccl->SetReplayPhase(ReplayPhase::kNone);
      me.nccl->MarkBoundary(2);
      if (me.AllReduce(static_cast<float>(r + 1)) != ncclSuccess || !me.All(10.0f)) {
        errors[r] += "; unit (2, 0) failed";
      }
    });
  }
  for (auto& t : repl_threads) t.join();
  for (auto& t : threads) t.join();
  for (int r : {1, 2}) EXPECT_TRUE(errors[r].empty()) << "replacement " << r << ": " << errors[r];
  for (int r : {0, 3}) {
    EXPECT_EQ(results[r], ncclSuccess) << "rank " << r;
    EXPECT_TRUE(ranks[r]->All(10.0f)) << "rank " << r << " has " << ranks[r]->grads[0];
  }
  EXPECT_EQ(CountEvents(root, "replacement_joined"), 2);
  EXPECT_EQ(CountEvents(root, "survivor_joined"), 2);
}

// The deferred fence: out-of-place units stay in flight (the call returns
// before the sum is there) until SettleAll. When a member dies while two
// units are in flight, the survivors' settle recovers the first, runs the
// second again on the re-formed communicator, and both end with exact sums
// (a NaN would say a failed attempt's result was kept).
// late_issue: the second unit is issued only after the death, so its own
// issue fails while the first is in flight (the first must recover first:
// every member then reports the same unit as the one it waits in).
// beside: the survivors also queue work on another stream while the units
// are in flight (it must neither wait for them nor be lost), then settle
// through an event recorded behind the units (a DDP step's wait for its
// bucket all-reduces).
// stage_chunk > 0: results go through a staging ring of 3 slots of that
// many bytes (every result of kCount floats, several pieces).
// hold: the copies to the host wait from the start until 1 s after the
// epoch is declared (the ring has 16 slots: minibatch 1's units and the
// first attempts fit), so a survivor that hands over its kept results must
// wait for them to land.
void RecoverUnitsInFlight(bool late_issue, bool beside = false, size_t stage_chunk = 0,
                          bool hold = false) {
  const std::string root = JobRoot(kRanks);
  auto tweak = [stage_chunk, hold](CudaNcclOptions* o) {
    if (stage_chunk == 0) return;
    o->stage_bytes = (hold ? 16 : 3) * stage_chunk;
    o->stage_chunk_bytes = stage_chunk;
    o->stage_min_bytes = 0;
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.push_back(std::make_unique<Rank>(root, r, 30, 8, 0, true, tweak));
  }
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  const long landed_before = fake_cudart::HostCopiesLanded();
  if (hold) fake_cudart::HoldHostCopies(true);
  // Minibatch 1: three units in flight on every rank, then settled.
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      if (!me.FormAtMinibatch1(id, r)) {
        errors[r] = "init failed";
        return;
      }
      for (size_t k = 0; k < 3; ++k) {
        if (me.AllReduceOut(k, static_cast<float>((r + 1) * (k + 1))) != ncclSuccess) {
          errors[r] = "all-reduce failed";
          return;
        }
      }
      if (!me.nccl->HasPending()) errors[r] = "no unit stayed in flight";
      if (me.nccl->SettleAll() != ncclSuccess) errors[r] += "; settle failed";
      if (me.nccl->HasPending()) errors[r] += "; units left in flight after the settle";
      for (size_t k = 0; k < 3; ++k) {
        if (!me.Out(k, 10.0f * (k + 1))) errors[r] += "; wrong sum in unit " + std::to_string(k);
      }
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];

  // Units (1, 3) and (1, 4): rank 1 dies before posting either; the
  // survivors leave both in flight and settle.
  std::vector<ncclResult_t> issued(kRanks, ncclInternalError), settled(kRanks, ncclInternalError);
  std::vector<std::string> beside_errors(kRanks);
  std::vector<std::vector<int>> beside_out(kRanks, std::vector<int>(kCount, 0));
  std::atomic<bool> broken{false};
  for (int r : {0, 2, 3}) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      issued[r] = me.AllReduceOut(3, static_cast<float>((r + 1) * 4));
      while (late_issue && !broken.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      if (issued[r] == ncclSuccess) issued[r] = me.AllReduceOut(4, static_cast<float>((r + 1) * 5));
      if (!beside) {
        settled[r] = me.nccl->SettleAll();
        return;
      }
      cudaStream_t other = nullptr;
      cudaEvent_t after = nullptr;
      ::cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
      ::cudaEventCreateWithFlags(&after, cudaEventDisableTiming);
      if (me.nccl->BeforeStreamWork(other) != ncclSuccess || !me.nccl->HasPending()) {
        beside_errors[r] = "work of another stream waited for the units in flight";
      }
      int* out = beside_out[r].data();
      fake_cudart::Enqueue(other, [out] {
        for (size_t i = 0; i < kCount; ++i) out[i] = 7;
      });
      ::cudaEventRecord(after, me.stream);
      me.nccl->NoteEventRecord(after, me.stream);
      settled[r] = me.nccl->BeforeEventUse(after);
      if (me.nccl->HasPending()) beside_errors[r] += "; a wait on the event left units in flight";
      if (!fake_cudart::Synchronize(other, 30)) beside_errors[r] += "; the other stream hangs";
      ::cudaEventDestroy(after);
      ::cudaStreamDestroy(other);
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fake_nccl::BreakGroup(id);
  broken.store(true);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  DeclareEpoch(root, 1);
  std::thread release;
  if (hold) {
    // Minibatch 1 settled without them.
    EXPECT_EQ(fake_cudart::HostCopiesLanded(), landed_before);
    release = std::thread([] {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      fake_cudart::HoldHostCopies(false);
    });
  }

  auto repl = std::make_unique<Rank>(root, 1, 30, 8, 0, true, tweak);
  absl::Status joined = repl->ReplaceAtMinibatch1(id, 1);
  if (release.joinable()) release.join();
  ASSERT_TRUE(joined.ok()) << joined;
  EXPECT_EQ(repl->range, std::vector<char>(kState, 0x42));
  // The replay: units the survivors completed come from them, the two they
  // had in flight run jointly (a replay waits for each unit at its call).
  for (size_t k = 0; k < 5; ++k) {
    // Rank 1's share of unit k (k >= 3); what it sends to the others' units does not matter.
    const float share = k >= 3 ? 2.0f * static_cast<float>(k + 1) : -1.0f;
    EXPECT_EQ(repl->AllReduceOut(k, share), ncclSuccess);
    EXPECT_FALSE(repl->nccl->HasPending()) << "a replayed unit stayed in flight";
  }
  repl->nccl->SetReplayPhase(ReplayPhase::kNone);
  for (auto& t : threads) t.join();
  threads.clear();
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(repl->Out(k, 10.0f * (k + 1))) << "unit " << k;
  EXPECT_TRUE(repl->Out(3, 40.0f)) << repl->outs[3][0];
  EXPECT_TRUE(repl->Out(4, 50.0f)) << repl->outs[4][0];
  for (int r : {0, 2, 3}) {
    EXPECT_EQ(issued[r], ncclSuccess) << "rank " << r;
    EXPECT_EQ(settled[r], ncclSuccess) << "rank " << r;
    EXPECT_TRUE(beside_errors[r].empty()) << "rank " << r << ": " << beside_errors[r];
    if (beside) {
      EXPECT_EQ(beside_out[r], std::vector<int>(kCount, 7)) << "rank " << r;
    }
    EXPECT_TRUE(ranks[r]->Out(3, 40.0f)) << "rank " << r << " unit 3: " << ranks[r]->outs[3][0];
    EXPECT_TRUE(ranks[r]->Out(4, 50.0f)) << "rank " << r << " unit 4: " << ranks[r]->outs[4][0];
    EXPECT_FALSE(ranks[r]->nccl->HasPending());
  }
  EXPECT_EQ(CountEvents(root, "replacement_joined"), 1);
  EXPECT_EQ(CountEvents(root, "survivor_joined"), 3);
  ranks[1] = std::move(repl);
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

TEST(CudaNcclFakeTest, UnitsInFlightSettleAndRecoverInOrder) { RecoverUnitsInFlight(false); }

TEST(CudaNcclFakeTest, AUnitFailingAtItsIssueRecoversTheUnitsInFlightFirst) {
  RecoverUnitsInFlight(true);
}

TEST(CudaNcclFakeTest, OtherStreamsRunBesideUnitsInFlightThatRecover) {
  RecoverUnitsInFlight(false, /*beside=*/true);
}

// The survivors' kept results went device -> staging ring -> pinned memory
// in pieces (1600 + 1600 + 800 bytes, the 3-slot ring wrapping inside every
// unit): the replacement takes units 0-2 from them, with the right sums.
TEST(CudaNcclFakeTest, ResultsKeptThroughTheStagingRingReachTheReplacement) {
  RecoverUnitsInFlight(false, /*beside=*/false, /*stage_chunk=*/1600);
}

// The same while the survivors' copies to the host are still on their way:
// the provider hands over its kept results only once they landed (not the
// bytes the buffers held before).
TEST(CudaNcclFakeTest, ASurvivorHandsOverKeptResultsOnlyOnceTheyLanded) {
  RecoverUnitsInFlight(false, /*beside=*/false, /*stage_chunk=*/1600, /*hold=*/true);
}

// Two ranks whose staging ring wraps inside every unit (`slots` slots of
// 1600 bytes, a result is 3 pieces) and whose pinned pool keeps one result
// of kCount floats at first (KeepAtLeast raises it): `body` runs on each
// rank's thread once its communicator is up and returns an error, or "";
// `made` gets the number of pinned buffers the rank made so far whenever
// `body` records it.
void RunKeptResultRanks(
    const std::function<std::string(Rank& me, int r, std::vector<uint64_t>* made)>& body,
    std::vector<std::vector<uint64_t>>* made, size_t slots = 3) {
  const std::string root = JobRoot(2);
  auto tweak = [slots](CudaNcclOptions* o) {
    o->stage_bytes = slots * 1600;
    o->stage_chunk_bytes = 1600;
    o->stage_min_bytes = 0;
    o->pinned_keep_bytes = kCount * sizeof(float);  // one result
  };
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 30, 8, 0, true, tweak));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::string> errors(2);
  made->assign(2, {});
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      if (me.nccl->CommInitRankConfig(&me.comm, 2, id, r, nullptr) != ncclSuccess) {
        errors[r] = "init failed";
        return;
      }
      errors[r] = body(me, r, &(*made)[r]);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

// Every unit of a minibatch writes the same result buffer while the one
// before it may still be on its way to the host: the ring's device copy ran
// first on the stream, so each kept result is its own unit's sum. The pinned
// buffers a boundary drops go back to the pool and the next minibatch takes
// them again: none is made after the second minibatch, however small the
// pool's first bound (one result here).
TEST(CudaNcclFakeTest, KeptResultsReuseTheirPinnedBuffersEveryMinibatch) {
  constexpr int kUnits = 4;
  std::vector<std::vector<uint64_t>> made;
  RunKeptResultRanks(
      [](Rank& me, int r, std::vector<uint64_t>* made) -> std::string {
        std::string err;
        me.outs.assign(1, std::vector<float>(kCount, 0.0f));
        me.sends.assign(kUnits, std::vector<float>());
        for (uint64_t mb = 1; mb <= 8; ++mb) {
          me.nccl->MarkBoundary(mb);
          for (int k = 0; k < kUnits; ++k) {
            me.sends[k].assign(kCount, static_cast<float>(mb * 10 + k + r));
            // Every unit of the minibatch into the same result buffer.
            if (me.nccl->AllReduce(me.sends[k].data(), me.outs[0].data(), kCount, ncclFloat,
                                   ncclSum, me.comm, me.stream) != ncclSuccess) {
              return "all-reduce failed";
            }
          }
          if (me.nccl->SettleAll() != ncclSuccess) err = "settle failed";
          const float last = static_cast<float>(2 * (mb * 10 + kUnits - 1) + 1);
          if (me.outs[0][0] != last) err = "wrong sum " + std::to_string(me.outs[0][0]);
          for (int k = 0; k < kUnits; ++k) {
            const std::string kept = me.nccl->KeptResult(me.comm, mb, k, 0);
            const std::vector<float> want(kCount, static_cast<float>(2 * (mb * 10 + k) + 1));
            if (kept.size() != kCount * sizeof(float) ||
                std::memcmp(kept.data(), want.data(), kept.size()) != 0) {
              err += "; kept result of unit (" + std::to_string(mb) + ", " + std::to_string(k) +
                     ") is not its sum";
            }
          }
          made->push_back(me.nccl->PinnedBuffersMade());
        }
        return err;
      },
      &made);
  if (HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) {
    // Two minibatches kept at once: 8 buffers, all made in the first two.
    EXPECT_EQ(made[r][1], 2u * kUnits) << "rank " << r;
    EXPECT_EQ(made[r].back(), 2u * kUnits) << "rank " << r << ": buffers made after minibatch 2";
  }
}

// A job whose results change size (nccl_bench's next size, a model's next
// phase): minibatches 1-4 keep results of kCount floats, 5-12 of twice that.
// The old size's free buffers go first once the pool is over its bound, so
// after the new size's second minibatch no buffer is made (before, the old
// size held part of the bound and every minibatch made and freed two).
TEST(CudaNcclFakeTest, KeptResultBuffersFollowANewResultSize) {
  constexpr int kUnits = 4;
  std::vector<std::vector<uint64_t>> made;
  RunKeptResultRanks(
      [](Rank& me, int r, std::vector<uint64_t>* made) -> std::string {
        std::string err;
        for (uint64_t mb = 1; mb <= 12; ++mb) {
          const size_t count = mb <= 4 ? kCount : 2 * kCount;
          me.nccl->MarkBoundary(mb);
          me.outs.assign(kUnits, std::vector<float>(count, 0.0f));
          me.sends.assign(kUnits, std::vector<float>(count, static_cast<float>(mb + r)));
          for (int k = 0; k < kUnits; ++k) {
            if (me.nccl->AllReduce(me.sends[k].data(), me.outs[k].data(), count, ncclFloat,
                                   ncclSum, me.comm, me.stream) != ncclSuccess) {
              return "all-reduce failed";
            }
          }
          if (me.nccl->SettleAll() != ncclSuccess) err = "settle failed";
          const std::string kept = me.nccl->KeptResult(me.comm, mb, kUnits - 1, 0);
          const std::vector<float> want(count, static_cast<float>(2 * mb + 1));
          if (kept.size() != count * sizeof(float) ||
              std::memcmp(kept.data(), want.data(), kept.size()) != 0) {
            err += "; kept result of minibatch " + std::to_string(mb) + " is not its sum";
          }
          made->push_back(me.nccl->PinnedBuffersMade());
        }
        return err;
      },
      &made);
  if (HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) {
    // Small: 8 made in minibatches 1-2; large: 8 more in minibatches 5-6.
    EXPECT_EQ(made[r][5], 4u * kUnits) << "rank " << r;
    EXPECT_EQ(made[r].back(), 4u * kUnits)
        << "rank " << r << ": buffers made after the new size's second minibatch";
  }
}

// The kept results' copies to the host are held (a slow link): the units
// still complete, the application's synchronization returns with the sums
// in place and the copies still waiting; a kept result read meanwhile waits
// for its copy (its bytes are the unit's sum, not what the buffer held), and
// the buffers go back to the pool and are taken again once the copies land.
TEST(CudaNcclFakeTest, SynchronizationDoesNotWaitForKeptResultsToReachTheHost) {
  constexpr int kUnits = 2;
  fake_cudart::HoldHostCopies(true);
  const long landed_before = fake_cudart::HostCopiesLanded();
  std::vector<std::vector<uint64_t>> made;
  std::vector<long> landed_at_settle(2, -1);
  std::atomic<int> settled{0};
  RunKeptResultRanks(
      [&](Rank& me, int r, std::vector<uint64_t>* made) -> std::string {
        std::string err;
        for (uint64_t mb = 1; mb <= 4; ++mb) {
          me.nccl->MarkBoundary(mb);
          me.outs.assign(kUnits, std::vector<float>(kCount, 0.0f));
          me.sends.assign(kUnits, std::vector<float>(kCount, static_cast<float>(mb + r)));
          for (int k = 0; k < kUnits; ++k) {
            if (me.nccl->AllReduce(me.sends[k].data(), me.outs[k].data(), kCount, ncclFloat,
                                   ncclSum, me.comm, me.stream) != ncclSuccess) {
              return "all-reduce failed";
            }
          }
          if (me.nccl->SettleAll() != ncclSuccess) err += "; settle failed";
          if (!fake_cudart::Synchronize(me.stream, 10)) err += "; the stream did not drain";
          for (int k = 0; k < kUnits; ++k) {
            if (me.outs[k][0] != static_cast<float>(2 * mb + 1)) err += "; wrong sum";
          }
          if (mb == 1) {
            landed_at_settle[r] = fake_cudart::HostCopiesLanded() - landed_before;
            // Both ranks settled with no copy landed; then one reads a kept
            // result while the other lets the copies go after 200 ms.
            settled.fetch_add(1);
            while (settled.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            if (r == 1) {
              std::this_thread::sleep_for(std::chrono::milliseconds(200));
              fake_cudart::HoldHostCopies(false);
            }
          }
          const std::string kept = me.nccl->KeptResult(me.comm, mb, kUnits - 1, 0);
          const std::vector<float> want(kCount, static_cast<float>(2 * mb + 1));
          if (kept.size() != kCount * sizeof(float) ||
              std::memcmp(kept.data(), want.data(), kept.size()) != 0) {
            err += "; kept result of minibatch " + std::to_string(mb) + " is not its sum";
          }
          made->push_back(me.nccl->PinnedBuffersMade());
        }
        return err;
      },
      // A slot for every piece of minibatch 1 (none is freed while held).
      &made, /*slots=*/3 * kUnits);
  fake_cudart::HoldHostCopies(false);
  if (HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(landed_at_settle[r], 0) << "rank " << r << ": the units waited for their copies";
    EXPECT_EQ(made[r].back(), 2u * kUnits) << "rank " << r << ": buffers made after minibatch 2";
  }
}

// A copy to the host that never lands (a hung link, held here past the
// collective timeout of 1 s): the first kept result read waits the bound and
// reports none; a result of another unit is then not waited for again.
TEST(CudaNcclFakeTest, AHungCopyToTheHostCostsOneTimeoutNotOnePerResult) {
  constexpr int kUnits = 2;
  ASSERT_EQ(setenv("REVENANT_COLLECTIVE_TIMEOUT_S", "1", 1), 0);
  fake_cudart::HoldHostCopies(true);
  std::vector<std::vector<uint64_t>> made;
  std::vector<double> first_s(2, -1), second_s(2, -1);
  RunKeptResultRanks(
      [&](Rank& me, int r, std::vector<uint64_t>* made) -> std::string {
        std::string err;
        me.nccl->MarkBoundary(1);
        me.outs.assign(kUnits, std::vector<float>(kCount, 0.0f));
        me.sends.assign(kUnits, std::vector<float>(kCount, 1.0f));
        for (int k = 0; k < kUnits; ++k) {
          if (me.nccl->AllReduce(me.sends[k].data(), me.outs[k].data(), kCount, ncclFloat,
                                 ncclSum, me.comm, me.stream) != ncclSuccess) {
            return "all-reduce failed";
          }
        }
        if (me.nccl->SettleAll() != ncclSuccess) err += "; settle failed";
        const auto t0 = std::chrono::steady_clock::now();
        if (!me.nccl->KeptResult(me.comm, 1, 0, 0).empty()) err += "; unit 0 kept before it landed";
        const auto t1 = std::chrono::steady_clock::now();
        if (!me.nccl->KeptResult(me.comm, 1, 1, 0).empty()) err += "; unit 1 kept before it landed";
        const auto t2 = std::chrono::steady_clock::now();
        first_s[r] = std::chrono::duration<double>(t1 - t0).count();
        second_s[r] = std::chrono::duration<double>(t2 - t1).count();
        return err;
      },
      &made, /*slots=*/3 * kUnits);
  fake_cudart::HoldHostCopies(false);
  unsetenv("REVENANT_COLLECTIVE_TIMEOUT_S");
  if (HasFatalFailure()) return;
  for (int r = 0; r < 2; ++r) {
    EXPECT_GE(first_s[r], 0.9) << "rank " << r << ": the first read did not wait for its copy";
    // Far below the bound: not waited for again (a second timeout would be 1 s).
    EXPECT_LT(second_s[r], 0.5) << "rank " << r << ": waited the bound again";
  }
}

// Which work waits for units in flight (CudaNccl::BeforeStreamWork,
// NoteEventRecord, BeforeEventUse): work of the units' own stream, of the
// legacy stream when theirs is blocking, and a use of an event recorded
// behind them; not work of an unrelated stream, of the legacy stream when
// theirs is non-blocking, nor a use of an event recorded elsewhere. Without
// overlap (REVENANT_COLLECTIVE_OVERLAP=0) all of it waits.
void CheckWhatWaits(unsigned int stream_flags, bool overlap) {
  const std::string root = JobRoot(2);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<Rank>(root, r, 30, 8, stream_flags, overlap));
  }
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(2);
  const bool legacy_waits = !overlap || (stream_flags & cudaStreamNonBlocking) == 0;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      std::string& err = errors[r];
      if (me.nccl->CommInitRankConfig(&me.comm, 2, id, r, nullptr) != ncclSuccess) {
        err = "init failed";
        return;
      }
      me.nccl->MarkBoundary(1);
      cudaStream_t other = nullptr;
      cudaEvent_t elsewhere = nullptr, behind = nullptr;
      ::cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking);
      ::cudaEventCreateWithFlags(&elsewhere, cudaEventDisableTiming);
      ::cudaEventCreateWithFlags(&behind, cudaEventDisableTiming);
      size_t k = 0;
      auto burst = [&] {
        for (int i = 0; i < 2; ++i, ++k) {
          if (me.AllReduceOut(k, static_cast<float>(r + 1)) != ncclSuccess) err += "; issue";
        }
        if (!me.nccl->HasPending()) err += "; no unit in flight";
      };
      auto expect = [&](bool waited, const char* what) {
        if (me.nccl->HasPending() == waited) {
          err += std::string("; ") + what + (waited ? " did not wait" : " waited");
        }
        if (waited) me.nccl->SettleAll();
      };
      burst();
      if (me.nccl->BeforeStreamWork(other) != ncclSuccess) err += "; error";
      expect(!overlap, "work of an unrelated stream");
      burst();
      me.nccl->BeforeStreamWork(nullptr);
      expect(legacy_waits, "work of the legacy stream");
      burst();
      me.nccl->BeforeStreamWork(me.stream);
      expect(true, "work of the units' stream");
      burst();
      ::cudaEventRecord(elsewhere, other);
      me.nccl->NoteEventRecord(elsewhere, other);
      me.nccl->BeforeEventUse(elsewhere);
      expect(!overlap, "a wait on an event of another stream");
      burst();
      ::cudaEventRecord(behind, me.stream);
      me.nccl->NoteEventRecord(behind, me.stream);
      me.nccl->BeforeEventUse(behind);
      expect(true, "a wait on an event recorded behind the units");
      // Recorded behind units, then again elsewhere: free of them.
      burst();
      ::cudaEventRecord(behind, me.stream);
      me.nccl->NoteEventRecord(behind, me.stream);
      ::cudaEventRecord(behind, other);
      me.nccl->NoteEventRecord(behind, other);
      me.nccl->BeforeEventUse(behind);
      expect(!overlap, "a wait on an event recorded again elsewhere");
      if (me.nccl->SettleAll() != ncclSuccess) err += "; settle failed";
      for (size_t i = 0; i < k; ++i) {
        if (!me.Out(i, 3.0f)) err += "; wrong sum in unit " + std::to_string(i);
      }
      fake_cudart::Synchronize(other, 30);
      ::cudaEventDestroy(elsewhere);
      ::cudaEventDestroy(behind);
      ::cudaStreamDestroy(other);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

TEST(CudaNcclFakeTest, WorkTiedToUnitsInFlightWaitsForThemAndOtherWorkDoesNot) {
  CheckWhatWaits(/*stream_flags=*/0, /*overlap=*/true);
}

TEST(CudaNcclFakeTest, TheLegacyStreamRunsBesideUnitsOfANonBlockingStream) {
  CheckWhatWaits(cudaStreamNonBlocking, /*overlap=*/true);
}

TEST(CudaNcclFakeTest, WithoutOverlapEveryStreamWaitsForUnitsInFlight) {
  CheckWhatWaits(cudaStreamNonBlocking, /*overlap=*/false);
}

// A boundary ends the minibatch's units in flight: they complete before
// the next minibatch's numbering starts.
TEST(CudaNcclFakeTest, ABoundarySettlesTheUnitsInFlight) {
  const std::string root = JobRoot(2);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 30));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<char> ok(2, 0);  // not vector<bool>: written by both threads
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      ok[r] = me.nccl->CommInitRankConfig(&me.comm, 2, id, r, nullptr) == ncclSuccess;
      me.nccl->MarkBoundary(1);
      for (size_t k = 0; k < 12 && ok[r]; ++k) {
        ok[r] = me.AllReduceOut(k, static_cast<float>(k)) == ncclSuccess;
        // The pipeline's depth (8 by default) bounds the units in flight.
      }
      ok[r] = ok[r] && me.nccl->HasPending();
      me.nccl->MarkBoundary(2);
      ok[r] = ok[r] && !me.nccl->HasPending();
      for (size_t k = 0; k < 12 && ok[r]; ++k) ok[r] = me.Out(k, 2.0f * k);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(ok[r]) << "rank " << r;
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

// In-place buckets in flight (a DDP-like step): each unit's input is saved
// before it runs; when a member dies with two buckets in flight, the
// survivors restore both inputs and end with exact sums, not the NaN of the
// aborted attempt.
TEST(CudaNcclFakeTest, InPlaceBucketsInFlightRecoverFromTheirSavedInputs) {
  const std::string root = JobRoot(kRanks);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kRanks; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 30));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  std::vector<std::string> errors(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      if (!me.FormAtMinibatch1(id, r)) {
        errors[r] = "init failed";
        return;
      }
      for (size_t k = 0; k < 2; ++k) {
        if (me.AllReduceIn(k, static_cast<float>(r + 1)) != ncclSuccess) errors[r] = "issue";
      }
      if (!me.nccl->HasPending()) errors[r] += "; no bucket stayed in flight";
      if (me.nccl->SettleAll() != ncclSuccess) errors[r] += "; settle failed";
      for (size_t k = 0; k < 2; ++k) {
        if (!me.In(k, 10.0f)) errors[r] += "; wrong sum in bucket " + std::to_string(k);
      }
    });
  }
  for (auto& t : threads) t.join();
  threads.clear();
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];

  // Buckets (1, 2) and (1, 3): rank 2 dies before posting them.
  std::vector<ncclResult_t> settled(kRanks, ncclInternalError);
  for (int r : {0, 1, 3}) {
    threads.emplace_back([&, r] {
      Rank& me = *ranks[r];
      if (me.AllReduceIn(2, static_cast<float>(r + 1)) != ncclSuccess ||
          me.AllReduceIn(3, static_cast<float>(2 * (r + 1))) != ncclSuccess) {
        settled[r] = ncclInvalidUsage;
        return;
      }
      settled[r] = me.nccl->SettleAll();
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  fake_nccl::BreakGroup(id);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  DeclareEpoch(root, 1);
  auto repl = std::make_unique<Rank>(root, 2, 30);
  absl::Status joined = repl->ReplaceAtMinibatch1(id, 2);
  ASSERT_TRUE(joined.ok()) << joined;
  for (size_t k = 0; k < 4; ++k) {
    const float share = k == 2 ? 3.0f : k == 3 ? 6.0f : -1.0f;
    EXPECT_EQ(repl->AllReduceIn(k, share), ncclSuccess);
  }
  repl->nccl->SetReplayPhase(ReplayPhase::kNone);
  for (auto& t : threads) t.join();
  EXPECT_TRUE(repl->In(0, 10.0f) && repl->In(1, 10.0f));
  EXPECT_TRUE(repl->In(2, 10.0f)) << repl->sends[2][0];
  EXPECT_TRUE(repl->In(3, 20.0f)) << repl->sends[3][0];
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(settled[r], ncclSuccess) << "rank " << r;
    EXPECT_TRUE(ranks[r]->In(2, 10.0f)) << "rank " << r << " bucket 2: " << ranks[r]->sends[2][0];
    EXPECT_TRUE(ranks[r]->In(3, 20.0f)) << "rank " << r << " bucket 3: " << ranks[r]->sends[3][0];
  }
  ranks[2] = std::move(repl);
  for (auto& r : ranks) EXPECT_EQ(r->nccl->CommDestroy(r->comm), ncclSuccess);
}

// A one-rank communicator's all-reduce, broadcast, reduce, all-gather and
// reduce-scatter are the copies they amount to, issued by the agent on the
// application's stream (nothing in place), never reaching NCCL (the fake
// counts its all-reduces and answers the other collectives with
// ncclInvalidUsage). What the copy cannot stand for goes to NCCL and gets
// its answer: a group, a root other than 0, a user-defined reduction, an
// unknown type; and everything with REVENANT_NCCL_ONE_RANK_COPY=0.
TEST(CudaNcclFakeTest, AOneRankCommunicatorIssuesItsCollectivesAsCopies) {
  const std::string root = JobRoot(1);
  Rank me(root, 0, 30, 1);
  ncclUniqueId id;
  ASSERT_EQ(me.nccl->GetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(me.nccl->CommInitRankConfig(&me.comm, 1, id, 0, nullptr), ncclSuccess);
  const long at_start = fake_nccl::CompletedAllReduces(id);  // its warm-up, if any
  std::vector<float> send(kCount, 3.5f), recv(kCount, 0.0f);
  auto settle = [&] { ASSERT_EQ(::cudaStreamSynchronize(me.stream), cudaSuccess); };
  auto recv_is = [&](float v) {
    for (float x : recv) {
      if (x != v) return false;
    }
    return true;
  };
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    std::fill(recv.begin(), recv.end(), 0.0f);
    EXPECT_EQ(me.nccl->AllReduce(send.data(), recv.data(), kCount, ncclFloat, op, me.comm,
                                 me.stream),
              ncclSuccess);
    settle();
    EXPECT_TRUE(recv_is(3.5f)) << "op " << op;
  }
  // In place: nothing to do, the buffer as it was.
  EXPECT_EQ(me.nccl->AllReduce(recv.data(), recv.data(), kCount, ncclFloat, ncclSum, me.comm,
                               me.stream),
            ncclSuccess);
  settle();
  EXPECT_TRUE(recv_is(3.5f));
  // The other collectives of one rank (the fake NCCL would refuse them).
  std::vector<float> other(kCount, 1.25f);
  std::fill(recv.begin(), recv.end(), 0.0f);
  EXPECT_EQ(me.nccl->Broadcast(other.data(), recv.data(), kCount, ncclFloat, 0, me.comm, me.stream),
            ncclSuccess);
  settle();
  EXPECT_TRUE(recv_is(1.25f));
  std::fill(recv.begin(), recv.end(), 0.0f);
  EXPECT_EQ(me.nccl->Reduce(send.data(), recv.data(), kCount, ncclFloat, ncclMax, 0, me.comm,
                            me.stream),
            ncclSuccess);
  EXPECT_EQ(me.nccl->AllGather(other.data(), recv.data(), kCount / 2, ncclFloat, me.comm,
                               me.stream),
            ncclSuccess);
  settle();
  for (size_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(recv[i], i < kCount / 2 ? 1.25f : 3.5f) << i;
  }
  EXPECT_EQ(me.nccl->ReduceScatter(other.data(), recv.data(), kCount, ncclFloat, ncclSum, me.comm,
                                   me.stream),
            ncclSuccess);
  settle();
  EXPECT_TRUE(recv_is(1.25f));
  EXPECT_EQ(fake_nccl::CompletedAllReduces(id), at_start) << "a copy reached NCCL";

  // To NCCL: a root other than 0, a user-defined reduction, an unknown type.
  EXPECT_EQ(me.nccl->Broadcast(other.data(), recv.data(), kCount, ncclFloat, 1, me.comm, me.stream),
            ncclInvalidUsage);
  EXPECT_EQ(me.nccl->AllReduce(send.data(), recv.data(), kCount, ncclFloat,
                               static_cast<ncclRedOp_t>(ncclNumOps + 3), me.comm, me.stream),
            ncclInvalidUsage);
  EXPECT_EQ(me.nccl->AllReduce(send.data(), recv.data(), kCount,
                               static_cast<ncclDataType_t>(ncclNumTypes + 1), ncclSum, me.comm,
                               me.stream),
            ncclInvalidUsage);
  // In a group NCCL issues the call at ncclGroupEnd: NCCL's all-reduce runs.
  ASSERT_EQ(me.nccl->GroupStart(), ncclSuccess);
  EXPECT_EQ(me.nccl->AllReduce(send.data(), recv.data(), kCount, ncclFloat, ncclSum, me.comm,
                               me.stream),
            ncclSuccess);
  ASSERT_EQ(me.nccl->GroupEnd(), ncclSuccess);
  settle();
  EXPECT_TRUE(recv_is(3.5f));
  EXPECT_EQ(fake_nccl::CompletedAllReduces(id), at_start + 1);

  // Turned off: every all-reduce goes to NCCL.
  ASSERT_EQ(setenv("REVENANT_NCCL_ONE_RANK_COPY", "0", 1), 0);
  Rank off(JobRoot(1), 0, 30, 1);
  unsetenv("REVENANT_NCCL_ONE_RANK_COPY");
  ncclUniqueId id2;
  ASSERT_EQ(off.nccl->GetUniqueId(&id2), ncclSuccess);
  ASSERT_EQ(off.nccl->CommInitRankConfig(&off.comm, 1, id2, 0, nullptr), ncclSuccess);
  const long off_start = fake_nccl::CompletedAllReduces(id2);
  EXPECT_EQ(off.nccl->AllReduce(send.data(), recv.data(), kCount, ncclFloat, ncclSum, off.comm,
                                off.stream),
            ncclSuccess);
  ASSERT_EQ(::cudaStreamSynchronize(off.stream), cudaSuccess);
  EXPECT_EQ(fake_nccl::CompletedAllReduces(id2), off_start + 1);
  EXPECT_EQ(off.nccl->Broadcast(other.data(), recv.data(), kCount, ncclFloat, 0, off.comm,
                                off.stream),
            ncclInvalidUsage);
}

// The backend's device copy (SetDeviceCopy) takes a one-rank collective's
// copy of up to kDeviceCopyMaxBytes when it says it issued it; a copy it
// declines, a larger one and an in-place one are cudaMemcpyAsync's or
// nothing, and every result is the input either way.
TEST(CudaNcclFakeTest, AOneRankCopyGoesToTheBackendsDeviceCopyWhereItTakesIt) {
  Rank me(JobRoot(1), 0, 30, 1);
  ncclUniqueId id;
  ASSERT_EQ(me.nccl->GetUniqueId(&id), ncclSuccess);
  ASSERT_EQ(me.nccl->CommInitRankConfig(&me.comm, 1, id, 0, nullptr), ncclSuccess);
  const long at_start = fake_nccl::CompletedAllReduces(id);
  int offered = 0, taken = 0;
  bool take = true;
  size_t last_bytes = 0;
  me.nccl->SetDeviceCopy([&](void* dst, const void* src, size_t bytes, cudaStream_t stream) {
    ++offered;
    last_bytes = bytes;
    if (!take) return false;
    ++taken;
    // Stands for the kernel: the same copy, on the same stream.
    return ::cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream) == cudaSuccess;
  });
  const size_t big = CudaNccl::kDeviceCopyMaxBytes / sizeof(float) + 4;
  std::vector<float> send(big), recv(big);
  for (size_t i = 0; i < big; ++i) send[i] = static_cast<float>(i % 977) + 0.5f;
  auto run = [&](size_t count) {
    std::fill(recv.begin(), recv.end(), -1.0f);
    EXPECT_EQ(me.nccl->AllReduce(send.data(), recv.data(), count, ncclFloat, ncclSum, me.comm,
                                 me.stream),
              ncclSuccess);
    ASSERT_EQ(::cudaStreamSynchronize(me.stream), cudaSuccess);
    for (size_t i = 0; i < count; ++i) ASSERT_EQ(recv[i], send[i]) << "count " << count << " at " << i;
    for (size_t i = count; i < big; ++i) ASSERT_EQ(recv[i], -1.0f) << "past the count at " << i;
  };
  run(kCount);
  EXPECT_EQ(offered, 1);
  EXPECT_EQ(taken, 1);
  EXPECT_EQ(last_bytes, kCount * sizeof(float));
  run(CudaNccl::kDeviceCopyMaxBytes / sizeof(float));  // at the bound: offered
  EXPECT_EQ(offered, 2);
  EXPECT_EQ(taken, 2);
  run(big);  // past it: cudaMemcpyAsync, not offered
  EXPECT_EQ(offered, 2);
  take = false;  // declined: cudaMemcpyAsync
  run(kCount);
  EXPECT_EQ(offered, 3);
  EXPECT_EQ(taken, 2);
  take = true;
  EXPECT_EQ(me.nccl->AllReduce(recv.data(), recv.data(), kCount, ncclFloat, ncclSum, me.comm,
                               me.stream),
            ncclSuccess);  // in place: nothing to copy, nothing offered
  EXPECT_EQ(offered, 3);
  EXPECT_EQ(fake_nccl::CompletedAllReduces(id), at_start) << "a copy reached NCCL";
  EXPECT_EQ(me.nccl->CommDestroy(me.comm), ncclSuccess);
}

TEST(CudaNcclFakeTest, WithoutAnEpochTheFailedCollectiveEndsWithinTheBound) {
  const std::string root = JobRoot(2);
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_unique<Rank>(root, r, 1.0, 1));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0]->nccl->GetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_EQ(ranks[r]->nccl->CommInitRankConfig(&ranks[r]->comm, 2, id, r, nullptr),
                ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
  std::thread breaker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    fake_nccl::BreakGroup(id);
  });
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ranks[0]->AllReduce(1.0f), ncclRemoteError);
  breaker.join();
  EXPECT_GE(Since(start), 1.0);  // it waited for an epoch, up to the recovery timeout
  EXPECT_LT(Since(start), 10.0);
  // The communicator stays failed: the next call answers at once, and the
  // application now sees the asynchronous error.
  start = std::chrono::steady_clock::now();
  EXPECT_NE(ranks[0]->AllReduce(1.0f), ncclSuccess);
  EXPECT_LT(Since(start), 0.5);
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(ranks[0]->nccl->CommGetAsyncError(ranks[0]->comm, &async), ncclSuccess);
  EXPECT_NE(async, ncclSuccess);
}

}  // namespace
}  // namespace cuda
}  // namespace agent
}  // namespace revenant
