// GlooCollectives over a fake device that stages like the cuda backend: the
// engine only ever sees copies of the buffers (in staging memory outside the
// device), results come back after the unit ran, and the state transfer goes
// through ReadDevice/WriteDevice. Ranks are threads of this process.
#include "agent/backends/common/gloo_collectives.h"

#include <nccl.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

const bool kIgnoreSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();

using collective::Operation;

// Device memory is a private block; units run in order on one worker thread
// (one stream), on staging copies.
class FakeDevice : public CollectiveDevice {
 public:
  FakeDevice() : memory_(kSize, 0) {
    worker_ = std::thread([this] { Serve(); });
  }
  ~FakeDevice() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  // Allocations are laid out the same way on every fake device.
  float* Alloc(size_t floats) {
    void* p = memory_.data() + used_;
    allocs_.emplace_back(reinterpret_cast<uint64_t>(p), floats * sizeof(float));
    used_ += (floats * sizeof(float) + 255) / 256 * 256;
    return static_cast<float*>(p);
  }
  // Waits (bounded) until every enqueued unit ran.
  bool Sync(absl::Duration bound = absl::Seconds(30)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoNanoseconds(bound),
                        [&] { return queue_.empty() && !running_; });
  }
  cudaError_t last_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }
  size_t written() const { return written_; }
  size_t read() const { return read_; }
  bool engine_saw_device_memory() const { return saw_device_; }

  // Inside one live allocation.
  bool Accessible(const void* p, size_t bytes) override {
    if (bytes == 0) return true;
    const uint64_t a = reinterpret_cast<uint64_t>(p);
    for (const auto& [start, size] : allocs_) {
      if (a >= start && a - start <= size && bytes <= size - (a - start)) return true;
    }
    return false;
  }
  bool ValidStream(cudaStream_t stream) override { return stream == nullptr; }
  cudaError_t EnqueueUnit(const std::vector<cudaStream_t>& streams, Unit unit) override {
    if (streams.empty() || streams[0] != nullptr) return cudaErrorInvalidResourceHandle;
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(unit));
    cv_.notify_all();
    return cudaSuccess;
  }
  DeviceRange Range() const override {
    return DeviceRange{reinterpret_cast<uint64_t>(memory_.data()), kSize};
  }
  std::vector<std::pair<uint64_t, uint64_t>> LiveAllocations() override { return allocs_; }
  absl::Status ReadDevice(void* dst, uint64_t addr, size_t n) override {
    std::memcpy(dst, reinterpret_cast<const void*>(addr), n);
    read_ += n;
    return absl::OkStatus();
  }
  absl::Status WriteDevice(uint64_t addr, const void* src, size_t n) override {
    std::memcpy(reinterpret_cast<void*>(addr), src, n);
    written_ += n;
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kSize = 1 << 20;
  bool InDevice(const void* p) const {
    const char* c = static_cast<const char*>(p);
    return c >= memory_.data() && c < memory_.data() + memory_.size();
  }
  void Serve() {
    while (true) {
      Unit unit;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        unit = std::move(queue_.front());
        queue_.pop_front();
        running_ = true;
      }
      // Stage: the engine gets copies, never device memory.
      std::vector<std::vector<char>> send(unit.ops.size()), recv(unit.ops.size());
      std::vector<Operation> staged = unit.ops;
      for (size_t k = 0; k < unit.ops.size(); ++k) {
        send[k].assign(unit.send_bytes[k], 0);
        recv[k].assign(unit.recv_bytes[k], 0);
        if (unit.send_bytes[k] > 0) std::memcpy(send[k].data(), unit.ops[k].send, send[k].size());
        staged[k].send = unit.send_bytes[k] > 0 ? send[k].data() : nullptr;
        staged[k].recv = unit.recv_bytes[k] > 0 ? recv[k].data() : nullptr;
      }
      const cudaError_t e = unit.run(staged);
      for (size_t k = 0; k < staged.size(); ++k) {
        if ((staged[k].send != nullptr && InDevice(staged[k].send)) ||
            (staged[k].recv != nullptr && InDevice(staged[k].recv))) {
          saw_device_ = true;
        }
      }
      if (e == cudaSuccess) {
        for (size_t k = 0; k < unit.ops.size(); ++k) {
          if (unit.recv_bytes[k] > 0) std::memcpy(unit.ops[k].recv, recv[k].data(), recv[k].size());
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (e != cudaSuccess && last_error_ == cudaSuccess) last_error_ = e;
      running_ = false;
      cv_.notify_all();
    }
  }

  std::vector<char> memory_;
  size_t used_ = 0;
  std::vector<std::pair<uint64_t, uint64_t>> allocs_;
  std::atomic<size_t> written_{0}, read_{0};
  std::atomic<bool> saw_device_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Unit> queue_;
  bool running_ = false;
  bool stop_ = false;
  cudaError_t last_error_ = cudaSuccess;
  std::thread worker_;
};

struct Rank {
  std::unique_ptr<FakeDevice> device;
  std::unique_ptr<GlooCollectives> nccl;
  ncclComm_t comm = nullptr;
};

Rank NewRank(const GlooCollectivesOptions& o) {
  Rank r;
  r.device = std::make_unique<FakeDevice>();
  r.nccl = std::make_unique<GlooCollectives>(r.device.get(), o);
  return r;
}

// Units queued by a rank's thread must have run before its objects go.
void Drop(Rank& r) {
  EXPECT_TRUE(r.device->Sync());
  r.nccl.reset();
  r.device.reset();
}

void InitAll(std::vector<Rank>& ranks, const ncclUniqueId& id) {
  const int n = static_cast<int>(ranks.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      EXPECT_EQ(ranks[r].nccl->ncclCommInitRank(&ranks[r].comm, n, id, r), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GlooCollectives, StagedCollectivesMoveExactlyTheirExtents) {
  constexpr int n = 3;
  constexpr size_t count = 5;
  std::vector<Rank> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(NewRank(GlooCollectivesOptions{}));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0].nccl->ncclGetUniqueId(&id), ncclSuccess);
  InitAll(ranks, id);
  struct Bufs {
    float *in, *sum, *gathered, *bcast, *reduced, *scattered, *ring;
  };
  std::vector<Bufs> bufs(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    Bufs& b = bufs[r];
    FakeDevice& d = *ranks[r].device;
    b.in = d.Alloc(count * n);
    b.sum = d.Alloc(count);
    b.gathered = d.Alloc(count * n);
    b.bcast = d.Alloc(count);
    b.reduced = d.Alloc(count);
    b.scattered = d.Alloc(count);
    b.ring = d.Alloc(count);
    for (size_t i = 0; i < count * n; ++i) b.in[i] = float(100 * r + i);
    for (size_t i = 0; i < count; ++i) b.bcast[i] = r == 1 ? float(7 + i) : -1.f;
  }
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GlooCollectives& c = *ranks[r].nccl;
      Bufs& b = bufs[r];
      ncclComm_t comm = ranks[r].comm;
      EXPECT_EQ(c.ncclAllReduce(b.in, b.sum, count, ncclFloat, ncclSum, comm, nullptr),
                ncclSuccess);
      EXPECT_EQ(c.ncclAllGather(b.in, b.gathered, count, ncclFloat, comm, nullptr), ncclSuccess);
      EXPECT_EQ(c.ncclBcast(b.bcast, count, ncclFloat, 1, comm, nullptr), ncclSuccess);
      EXPECT_EQ(c.ncclReduce(b.in, b.reduced, count, ncclFloat, ncclMax, 0, comm, nullptr),
                ncclSuccess);
      EXPECT_EQ(c.ncclReduceScatter(b.in, b.scattered, count, ncclFloat, ncclSum, comm, nullptr),
                ncclSuccess);
      // A ring in one group: receive from the left, send to the right.
      EXPECT_EQ(c.ncclGroupStart(), ncclSuccess);
      EXPECT_EQ(c.ncclRecv(b.ring, count, ncclFloat, (r + n - 1) % n, comm, nullptr),
                ncclSuccess);
      EXPECT_EQ(c.ncclSend(b.in, count, ncclFloat, (r + 1) % n, comm, nullptr), ncclSuccess);
      EXPECT_EQ(c.ncclGroupEnd(), ncclSuccess);
      // Argument checks happen at the call.
      EXPECT_EQ(c.ncclAllReduce(b.in, b.sum, count * 1000, ncclFloat, ncclSum, comm, nullptr),
                ncclInvalidArgument);
      EXPECT_EQ(c.ncclAllReduce(b.in, b.sum, count, ncclFloat, ncclSum, comm,
                                reinterpret_cast<cudaStream_t>(0x1234)),
                ncclInvalidArgument);
      EXPECT_TRUE(ranks[r].device->Sync());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    const Bufs& b = bufs[r];
    EXPECT_EQ(ranks[r].device->last_error(), cudaSuccess);
    EXPECT_FALSE(ranks[r].device->engine_saw_device_memory());
    for (size_t i = 0; i < count; ++i) {
      EXPECT_EQ(b.sum[i], float(300 + 3 * i)) << "rank " << r << " i " << i;
      EXPECT_EQ(b.bcast[i], float(7 + i));
      EXPECT_EQ(b.ring[i], float(100 * ((r + n - 1) % n) + i));
      // Rank r's block of the element-wise sum of everyone's input.
      EXPECT_EQ(b.scattered[i], float(300 + 3 * (r * count + i)));
      if (r == 0) EXPECT_EQ(b.reduced[i], float(200 + i));
    }
    for (int q = 0; q < n; ++q) {
      for (size_t i = 0; i < count; ++i) EXPECT_EQ(b.gathered[q * count + i], float(100 * q + i));
    }
  }
  for (auto& r : ranks) {
    EXPECT_EQ(r.nccl->ncclCommDestroy(r.comm), ncclSuccess);
    Drop(r);
  }
}

// Rank 2 dies after unit (1, 0); the survivors fail unit (1, 1) and wait
// for epoch 1; a replacement replays (setup log: the communicator; minibatch
// 1: unit (1, 0)), joins, receives the replicated state through its device's
// WriteDevice and the result of (1, 0) from a survivor, then runs (1, 1)
// with the survivors.
TEST(GlooCollectives, ReplacementReceivesStateThroughTheDeviceAndRejoins) {
  char tmpl[] = "/tmp/gloo_collectives_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string root = tmpl;
  constexpr int n = 3;
  constexpr size_t count = 16;
  auto options = [&](int r) {
    GlooCollectivesOptions o;
    o.job_dir = root + "/rank" + std::to_string(r);
    o.recovery_timeout = absl::Seconds(30);
    o.backend = "fake";
    return o;
  };
  std::vector<Rank> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(NewRank(options(r)));
  ncclUniqueId id;
  ASSERT_EQ(ranks[0].nccl->ncclGetUniqueId(&id), ncclSuccess);
  InitAll(ranks, id);
  std::vector<float*> params(n), grads(n);
  for (int r = 0; r < n; ++r) {
    params[r] = ranks[r].device->Alloc(count);
    grads[r] = ranks[r].device->Alloc(count);
    for (size_t i = 0; i < count; ++i) {
      params[r][i] = float(i) + 0.5f;  // replicated
      grads[r][i] = float(r + 1);
    }
    ranks[r].nccl->MarkBoundary(1);
  }
  // Unit (1, 0) everywhere.
  {
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        EXPECT_EQ(ranks[r].nccl->ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum,
                                               ranks[r].comm, nullptr),
                  ncclSuccess);
        EXPECT_TRUE(ranks[r].device->Sync());
      });
    }
    for (auto& t : threads) t.join();
  }
  for (int r = 0; r < n; ++r) ASSERT_EQ(grads[r][0], 6.f);
  // Rank 2 dies: its connections close.
  Drop(ranks[2]);
  // The survivors issue (1, 1); it fails and waits for the epoch.
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ranks[r].nccl->ncclAllReduce(grads[r], grads[r], count, ncclFloat, ncclSum,
                                           ranks[r].comm, nullptr),
              ncclSuccess);
  }
  absl::SleepFor(absl::Milliseconds(300));
  {
    std::ofstream epoch(root + "/epoch");
    epoch << 1;
  }
  // The replacement: same allocations (zeroed), replay, join.
  Rank repl = NewRank(options(2));
  float* rparams = repl.device->Alloc(count);
  float* rgrads = repl.device->Alloc(count);
  ASSERT_EQ(rparams[0], 0.f);
  repl.nccl->SetReplayPhase(ReplayPhase::kSetupLog);
  ASSERT_EQ(repl.nccl->ncclCommInitRank(&repl.comm, n, id, 2), ncclSuccess);
  repl.nccl->MarkBoundary(1);
  repl.nccl->SetReplayPhase(ReplayPhase::kMinibatchLog);
  for (size_t i = 0; i < count; ++i) rgrads[i] = 3.f;  // what the replay recomputes
  bool behind = true;
  ASSERT_TRUE(repl.nccl->JoinRecovery(1, &behind).ok());
  EXPECT_FALSE(behind);
  EXPECT_EQ(repl.device->written(), 2 * count * sizeof(float));
  for (size_t i = 0; i < count; ++i) EXPECT_EQ(rparams[i], float(i) + 0.5f) << i;
  // The transfer overwrote the gradients with the survivor's (6); the replay
  // recomputes them before unit (1, 0), whose result comes from a survivor.
  for (size_t i = 0; i < count; ++i) rgrads[i] = 3.f;
  ASSERT_EQ(repl.nccl->ncclAllReduce(rgrads, rgrads, count, ncclFloat, ncclSum, repl.comm,
                                     nullptr),
            ncclSuccess);
  ASSERT_TRUE(repl.device->Sync());
  EXPECT_EQ(rgrads[0], 6.f);
  repl.nccl->SetReplayPhase(ReplayPhase::kNone);
  // Unit (1, 1) with the survivors.
  ASSERT_EQ(repl.nccl->ncclAllReduce(rgrads, rgrads, count, ncclFloat, ncclSum, repl.comm,
                                     nullptr),
            ncclSuccess);
  ASSERT_TRUE(repl.device->Sync());
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(ranks[r].device->Sync());
  for (size_t i = 0; i < count; ++i) {
    EXPECT_EQ(rgrads[i], 18.f) << i;
    EXPECT_EQ(grads[0][i], 18.f) << i;
    EXPECT_EQ(grads[1][i], 18.f) << i;
  }
  EXPECT_EQ(repl.device->last_error(), cudaSuccess);
  EXPECT_EQ(ranks[0].device->last_error(), cudaSuccess);
  EXPECT_EQ(ranks[1].device->last_error(), cudaSuccess);
  EXPECT_GT(ranks[0].device->read() + ranks[1].device->read(), 0u);
  EXPECT_EQ(repl.nccl->ncclCommDestroy(repl.comm), ncclSuccess);
  Drop(repl);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r].nccl->ncclCommDestroy(ranks[r].comm), ncclSuccess);
    Drop(ranks[r]);
  }
  std::string cmd = "rm -rf '" + root + "'";
  EXPECT_EQ(system(cmd.c_str()), 0);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
