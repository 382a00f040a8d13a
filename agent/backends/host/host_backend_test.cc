#include "agent/backends/host/host_backend.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

using ::testing::HasSubstr;

constexpr char kKernelLib[] = "agent/backends/host/libbackend_test_kernels.so";
constexpr uint64_t kModule = 7;

// A latch a stream callback waits on, with a bound so a broken backend
// fails the test instead of hanging it.
class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait(std::chrono::milliseconds bound = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, bound, [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

// Polls `pred` for up to `bound`.
template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds bound = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

BackendOptions Options(uint64_t base = 0, uint64_t size = 0) {
  BackendOptions o;
  o.device_range = {base, size};
  o.host_kernel_libraries = {kKernelLib};
  return o;
}

class HostBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(Options());
    ASSERT_TRUE(b.ok()) << b.status();
    b_ = std::move(*b);
  }

  void* Malloc(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(b_->cudaMalloc(&p, n), cudaSuccess);
    return p;
  }
  cudaStream_t Stream(unsigned int flags = cudaStreamDefault) {
    cudaStream_t s = nullptr;
    EXPECT_EQ(b_->cudaStreamCreateWithFlags(&s, flags), cudaSuccess);
    return s;
  }
  KernelInfo Kernel(const std::string& name) {
    EXPECT_TRUE(b_->LoadModule(kModule, "").ok());
    absl::StatusOr<KernelInfo> k = b_->GetKernel(kModule, name);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : KernelInfo{};
  }

  std::unique_ptr<HostBackend> b_;
};

TEST_F(HostBackendTest, DefaultRangeAndDeviceQueries) {
  EXPECT_EQ(b_->device_range().base, kDefaultDeviceBase);
  EXPECT_EQ(b_->device_range().size, kDefaultDeviceSize);
  EXPECT_STREQ(b_->name(), "host");
  int count = 0;
  EXPECT_EQ(b_->cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 1);
  cudaDeviceProp prop;
  ASSERT_EQ(b_->cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  EXPECT_STREQ(prop.name, "Revenant host device (CPU)");
  EXPECT_EQ(prop.totalGlobalMem, kDefaultDeviceSize);
  EXPECT_EQ(prop.warpSize, 32);
  EXPECT_EQ(prop.maxThreadsPerBlock, 1024);
  EXPECT_EQ(prop.maxThreadsDim[2], 64);
  EXPECT_EQ(prop.maxGridSize[1], 65535);
  EXPECT_EQ(prop.major, 9);
  EXPECT_GE(prop.multiProcessorCount, 1);
  EXPECT_EQ(b_->cudaGetDeviceProperties(&prop, 1), cudaErrorInvalidDevice);
  int v = 0;
  EXPECT_EQ(b_->cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0), cudaSuccess);
  EXPECT_EQ(v, prop.multiProcessorCount);
  EXPECT_EQ(b_->cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlock, 0), cudaSuccess);
  EXPECT_EQ(static_cast<size_t>(v), prop.sharedMemPerBlock);
  EXPECT_EQ(b_->cudaDeviceGetAttribute(&v, cudaDevAttrComputeCapabilityMajor, 0), cudaSuccess);
  EXPECT_EQ(v, 9);
  EXPECT_EQ(b_->cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(100000), 0),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaDriverGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  EXPECT_EQ(b_->cudaRuntimeGetVersion(&v), cudaSuccess);
  EXPECT_EQ(v, 13000);
  int least = 1, greatest = 1;
  EXPECT_EQ(b_->cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -5);
  EXPECT_EQ(b_->cudaDeviceCanAccessPeer(&v, 0, 0), cudaSuccess);
  EXPECT_EQ(v, 0);
  unsigned int flags = 0;
  EXPECT_EQ(b_->cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), cudaSuccess);
  EXPECT_EQ(b_->cudaGetDeviceFlags(&flags), cudaSuccess);
  EXPECT_EQ(flags & cudaDeviceScheduleBlockingSync, cudaDeviceScheduleBlockingSync);
  size_t limit = 0;
  EXPECT_EQ(b_->cudaDeviceSetLimit(cudaLimitMallocHeapSize, 1 << 24), cudaSuccess);
  EXPECT_EQ(b_->cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize), cudaSuccess);
  EXPECT_EQ(limit, 1u << 24);
  EXPECT_EQ(b_->cudaProfilerStart(), cudaSuccess);
  EXPECT_EQ(b_->cudaProfilerStop(), cudaSuccess);
}

TEST_F(HostBackendTest, MemPool) {
  cudaMemPool_t pool = nullptr, again = nullptr;
  ASSERT_EQ(b_->cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaDeviceGetDefaultMemPool(&again, 0), cudaSuccess);
  EXPECT_EQ(pool, again);
  uint64_t threshold = 1 << 30, out = 0;
  EXPECT_EQ(b_->cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
            cudaSuccess);
  EXPECT_EQ(b_->cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &out),
            cudaSuccess);
  EXPECT_EQ(out, threshold);
  Malloc(4096);
  EXPECT_EQ(b_->cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &out), cudaSuccess);
  EXPECT_EQ(out, 4096u);
  EXPECT_EQ(b_->cudaMemPoolTrimTo(pool, 0), cudaSuccess);
}

TEST_F(HostBackendTest, AllocationIsDeterministicAcrossInstances) {
  auto sequence = [](HostBackend* b) {
    std::vector<void*> out;
    void* p[6];
    for (int i = 0; i < 6; ++i) {
      EXPECT_EQ(b->cudaMalloc(&p[i], 1000 * (i + 1)), cudaSuccess);
      out.push_back(p[i]);
    }
    EXPECT_EQ(b->cudaFree(p[1]), cudaSuccess);
    EXPECT_EQ(b->cudaFree(p[3]), cudaSuccess);
    void* q;
    EXPECT_EQ(b->cudaMalloc(&q, 1500), cudaSuccess);
    out.push_back(q);
    EXPECT_EQ(b->cudaMallocAsync(&q, 3000, nullptr), cudaSuccess);
    out.push_back(q);
    EXPECT_EQ(b->cudaFreeAsync(p[0], nullptr), cudaSuccess);
    EXPECT_EQ(b->cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(b->cudaMalloc(&q, 500), cudaSuccess);
    out.push_back(q);
    return out;
  };
  std::vector<void*> first = sequence(b_.get());
  EXPECT_EQ(first[0], reinterpret_cast<void*>(kDefaultDeviceBase));
  b_.reset();  // a replacement agent maps the same range after the old one is gone
  absl::StatusOr<std::unique_ptr<HostBackend>> second = HostBackend::Create(Options());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(sequence(second->get()), first);

  // Two live instances on different ranges give the same offsets.
  constexpr uint64_t kOther = 0x300000000000ull;
  absl::StatusOr<std::unique_ptr<HostBackend>> third =
      HostBackend::Create(Options(kOther, 1ull << 30));
  ASSERT_TRUE(third.ok()) << third.status();
  std::vector<void*> shifted = sequence(third->get());
  ASSERT_EQ(shifted.size(), first.size());
  for (size_t i = 0; i < first.size(); ++i) {
    EXPECT_EQ(reinterpret_cast<uint64_t>(shifted[i]) - kOther,
              reinterpret_cast<uint64_t>(first[i]) - kDefaultDeviceBase);
  }
}

TEST_F(HostBackendTest, RangeInUseFailsClearly) {
  absl::StatusOr<std::unique_ptr<HostBackend>> twin = HostBackend::Create(Options());
  ASSERT_FALSE(twin.ok());
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(twin.status().message(), HasSubstr("already in use"));
}

TEST(HostBackendCreateTest, MissingKernelLibraryFailsAtConstruction) {
  BackendOptions o;
  o.device_range = {0x310000000000ull, 1 << 20};
  o.host_kernel_libraries = {"agent/backends/host/libno_such_kernels.so"};
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeHostBackend(o);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(b.status().message(), HasSubstr("libno_such_kernels.so"));
}

TEST_F(HostBackendTest, MallocZeroAndMemGetInfo) {
  void* p = reinterpret_cast<void*>(1);
  EXPECT_EQ(b_->cudaMalloc(&p, 0), cudaSuccess);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(b_->cudaFree(nullptr), cudaSuccess);
  size_t free = 0, total = 0;
  Malloc(1 << 20);
  EXPECT_EQ(b_->cudaMemGetInfo(&free, &total), cudaSuccess);
  EXPECT_EQ(total, kDefaultDeviceSize);
  EXPECT_EQ(free, total - (1 << 20));
  // More than the range: cudaErrorMemoryAllocation, and the backend goes on.
  EXPECT_EQ(b_->cudaMalloc(&p, kDefaultDeviceSize), cudaErrorMemoryAllocation);
  EXPECT_NE(Malloc(16), nullptr);
}

TEST_F(HostBackendTest, FreedPagesGoBackToTheOs) {
  constexpr size_t kN = 1 << 20;
  void* p = Malloc(kN);
  ASSERT_EQ(b_->cudaMemset(p, 0x77, kN), cudaSuccess);
  ASSERT_EQ(b_->cudaFree(p), cudaSuccess);
  void* q = Malloc(kN);
  ASSERT_EQ(q, p);
  // MADV_DONTNEED on an anonymous private mapping: the pages read as zero.
  std::vector<char> out(kN, 1);
  ASSERT_EQ(b_->Memcpy(out.data(), q, kN, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  EXPECT_EQ(out, std::vector<char>(kN, 0));
}

TEST_F(HostBackendTest, MemcpyAndMemsetRoundTrip) {
  constexpr size_t kN = 1 << 16;
  char* d = static_cast<char*>(Malloc(kN));
  char* d2 = static_cast<char*>(Malloc(kN));
  std::vector<char> in(kN), out(kN);
  for (size_t i = 0; i < kN; ++i) in[i] = static_cast<char>(i * 7);
  ASSERT_EQ(b_->Memcpy(d, in.data(), kN, cudaMemcpyHostToDevice, nullptr, false), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(d2, d, kN, cudaMemcpyDeviceToDevice, nullptr, false), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(out.data(), d2, kN, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  EXPECT_EQ(in, out);

  ASSERT_EQ(b_->cudaMemset(d + 100, 0x5a, 50), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(out.data(), d, kN, cudaMemcpyDefault, nullptr, false), cudaSuccess);
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_EQ(out[i], (i >= 100 && i < 150) ? 0x5a : in[i]) << i;
  }

  // Asynchronous H2D: the source may change right after the call.
  cudaStream_t s = Stream();
  std::vector<char> tmp(kN, 3);
  ASSERT_EQ(b_->Memcpy(d, tmp.data(), kN, cudaMemcpyHostToDevice, s, true), cudaSuccess);
  std::fill(tmp.begin(), tmp.end(), 9);
  ASSERT_EQ(b_->cudaMemsetAsync(d2, 1, kN, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(out.data(), d, kN, cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  EXPECT_EQ(out, std::vector<char>(kN, 3));
  ASSERT_EQ(b_->Memcpy(out.data(), d2, kN, cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  EXPECT_EQ(out, std::vector<char>(kN, 1));
}

TEST_F(HostBackendTest, SharedHostMemoryIsUsedInPlace) {
  std::vector<int> pinned(1024, 0);
  ASSERT_EQ(b_->RegisterSharedHost(pinned.data(), pinned.size() * sizeof(int), 0), cudaSuccess);
  EXPECT_EQ(b_->RegisterSharedHost(pinned.data() + 10, 16, 0),
            cudaErrorHostMemoryAlreadyRegistered);
  int* d = static_cast<int*>(Malloc(4096));
  ASSERT_EQ(b_->cudaMemset(d, 0, 4096), cudaSuccess);
  ASSERT_EQ(b_->cudaMemsetAsync(pinned.data(), 0x01, 4096, nullptr), cudaSuccess);  // device-accessible
  cudaStream_t s = Stream();
  ASSERT_EQ(b_->Memcpy(d, pinned.data(), 4096, cudaMemcpyHostToDevice, s, true), cudaSuccess);
  ASSERT_EQ(b_->cudaMemsetAsync(d, 0x02, 4, s), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(pinned.data(), d, 4096, cudaMemcpyDeviceToHost, s, true), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(pinned[0], 0x02020202);
  EXPECT_EQ(pinned[1], 0x01010101);
  cudaPointerAttributes attr;
  ASSERT_EQ(b_->cudaPointerGetAttributes(&attr, pinned.data()), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeHost);
  ASSERT_EQ(b_->cudaPointerGetAttributes(&attr, d + 5), cudaSuccess);
  EXPECT_EQ(attr.type, cudaMemoryTypeDevice);
  EXPECT_EQ(b_->UnregisterSharedHost(pinned.data()), cudaSuccess);
  EXPECT_EQ(b_->UnregisterSharedHost(pinned.data()), cudaErrorHostMemoryNotRegistered);
  // No longer device-accessible.
  EXPECT_EQ(b_->cudaMemset(pinned.data(), 0, 16), cudaErrorInvalidValue);
}

TEST_F(HostBackendTest, SnapshotCopiesTakeTheBoundaryStateAndHoldBackLaterWork) {
  constexpr size_t kN = 1 << 16;
  char* d1 = static_cast<char*>(Malloc(kN));
  char* d2 = static_cast<char*>(Malloc(kN));
  char* d3 = static_cast<char*>(Malloc(kN));
  ASSERT_EQ(b_->cudaMemset(d1, 1, kN), cudaSuccess);
  ASSERT_EQ(b_->cudaMemset(d2, 2, kN), cudaSuccess);
  ASSERT_EQ(b_->cudaMemset(d3, 3, kN), cudaSuccess);
  std::vector<char> dst(3 * kN, 0);
  alignas(8) uint64_t done[512] = {};
  // The destination must be registered memory.
  std::vector<Backend::SnapshotCopy> copies = {{d1, dst.data(), kN}, {d2, dst.data() + kN, kN},
                                               {d3, dst.data() + 2 * kN, kN}};
  ASSERT_EQ(b_->RegisterSharedHost(done, sizeof(done), 0), cudaSuccess);
  EXPECT_EQ(b_->QueueSnapshotCopies(copies, done, 7), cudaErrorInvalidValue);
  ASSERT_EQ(b_->RegisterSharedHost(dst.data(), dst.size(), 0), cudaSuccess);
  // Work queued before the boundary on stream a is still running (held by
  // a callback): the copies must wait for it.
  cudaStream_t a = Stream();
  cudaStream_t b = Stream(cudaStreamNonBlocking);
  Gate gate;
  ASSERT_EQ(b_->cudaMemsetAsync(d1, 4, kN, a), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(a, [&gate] { gate.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->QueueSnapshotCopies(copies, done, 7), cudaSuccess);
  // The application's next writes: on the same stream, another stream, a
  // stream created after the boundary, the legacy stream; and a free.
  ASSERT_EQ(b_->cudaMemsetAsync(d1, 9, kN, a), cudaSuccess);
  ASSERT_EQ(b_->cudaMemsetAsync(d2 + kN / 2, 9, kN / 2, b), cudaSuccess);
  cudaStream_t c = Stream(cudaStreamNonBlocking);
  ASSERT_EQ(b_->cudaMemsetAsync(d2, 8, 16, c), cudaSuccess);
  ASSERT_EQ(b_->cudaMemsetAsync(d3, 7, 16, nullptr), cudaSuccess);
  std::atomic<bool> freed{false};
  std::thread freer([&] {
    EXPECT_EQ(b_->cudaFree(d3), cudaSuccess);
    freed = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // Nothing after the boundary ran (device memory is host memory here).
  EXPECT_EQ(__atomic_load_n(&done[0], __ATOMIC_ACQUIRE), 0u);
  EXPECT_EQ(d2[0], 2);
  EXPECT_EQ(d2[kN - 1], 2);
  EXPECT_EQ(d3[0], 3);
  EXPECT_FALSE(freed.load());
  gate.Open();
  EXPECT_TRUE(Eventually([&] { return __atomic_load_n(&done[0], __ATOMIC_ACQUIRE) == 7; }));
  freer.join();
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  // The copies hold the state at the boundary, and only it.
  EXPECT_EQ(std::vector<char>(dst.begin(), dst.begin() + kN), std::vector<char>(kN, 4));
  EXPECT_EQ(std::vector<char>(dst.begin() + kN, dst.begin() + 2 * kN), std::vector<char>(kN, 2));
  EXPECT_EQ(std::vector<char>(dst.begin() + 2 * kN, dst.end()), std::vector<char>(kN, 3));
  EXPECT_EQ(d1[0], 9);
  EXPECT_EQ(d2[0], 8);
  EXPECT_EQ(d2[100], 2);
  EXPECT_EQ(d2[kN - 1], 9);
  EXPECT_EQ(b_->UnregisterSharedHost(dst.data()), cudaSuccess);
  EXPECT_EQ(b_->UnregisterSharedHost(done), cudaSuccess);
}

// Staged snapshot copies (SnapshotTurns): turn t fills a buffer only once
// the caller drained turn t - 2, the device stores each filled turn, later
// work waits for the last; bad turn words or ends are refused.
TEST_F(HostBackendTest, StagedSnapshotCopiesWaitForEachBufferToBeDrained) {
  constexpr size_t kN = 4096;
  constexpr int kTurns = 5;
  std::vector<char*> d;
  for (int t = 0; t < kTurns; ++t) {
    d.push_back(static_cast<char*>(Malloc(kN)));
    ASSERT_EQ(b_->cudaMemset(d[t], 10 + t, kN), cudaSuccess);
  }
  std::vector<char> staging(2 * kN, 0);
  alignas(64) uint64_t words[64] = {};
  uint64_t* done = &words[0];
  uint64_t* filled = &words[8];
  uint64_t* drained = &words[16];
  ASSERT_EQ(b_->RegisterSharedHost(words, sizeof(words), 0), cudaSuccess);
  ASSERT_EQ(b_->RegisterSharedHost(staging.data(), staging.size(), 0), cudaSuccess);
  std::vector<Backend::SnapshotCopy> copies;
  Backend::SnapshotTurns turns;
  for (int t = 0; t < kTurns; ++t) {
    copies.push_back({d[t], staging.data() + (t % 2) * kN, kN});
    turns.ends.push_back(copies.size());
  }
  turns.filled = filled;
  turns.drained = drained;
  Backend::SnapshotTurns bad = turns;
  bad.ends.back() = copies.size() - 1;
  EXPECT_EQ(b_->QueueSnapshotCopies(copies, done, 3, &bad), cudaErrorInvalidValue);
  bad = turns;
  std::swap(bad.ends[1], bad.ends[2]);
  EXPECT_EQ(b_->QueueSnapshotCopies(copies, done, 3, &bad), cudaErrorInvalidValue);
  uint64_t unregistered = 0;
  bad = turns;
  bad.drained = &unregistered;
  EXPECT_EQ(b_->QueueSnapshotCopies(copies, done, 3, &bad), cudaErrorInvalidValue);
  ASSERT_EQ(b_->QueueSnapshotCopies(copies, done, 3, &turns), cudaSuccess);
  // Later work on any stream waits for the last turn.
  ASSERT_EQ(b_->cudaMemsetAsync(d[0], 99, kN, nullptr), cudaSuccess);
  std::vector<char> seen;
  for (int t = 0; t < kTurns; ++t) {
    ASSERT_TRUE(Eventually([&] {
      return __atomic_load_n(filled, __ATOMIC_ACQUIRE) >= static_cast<uint64_t>(t + 1);
    })) << "turn " << t;
    // Both buffers are full now (or the last turn is): nothing more may
    // come until this one is drained.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    EXPECT_EQ(__atomic_load_n(filled, __ATOMIC_ACQUIRE),
              static_cast<uint64_t>(std::min(t + 2, kTurns)))
        << "turn " << t;
    const char* buf = staging.data() + (t % 2) * kN;
    EXPECT_EQ(std::vector<char>(buf, buf + kN), std::vector<char>(kN, static_cast<char>(10 + t)))
        << "turn " << t << " found another turn's bytes in its buffer";
    if (t + 2 < kTurns) {  // the last two turns wait for no drain: the tag follows them
      EXPECT_EQ(__atomic_load_n(done, __ATOMIC_ACQUIRE), 0u);
      EXPECT_EQ(d[0][0], 10);
    }
    __atomic_store_n(drained, static_cast<uint64_t>(t + 1), __ATOMIC_RELEASE);
  }
  EXPECT_TRUE(Eventually([&] { return __atomic_load_n(done, __ATOMIC_ACQUIRE) == 3; }));
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(d[0][0], 99);
  // A caller that gives up releases every turn at once: the copies run
  // through and the tag comes.
  __atomic_store_n(filled, 0, __ATOMIC_RELEASE);
  __atomic_store_n(drained, 0, __ATOMIC_RELEASE);
  ASSERT_EQ(b_->QueueSnapshotCopies(copies, done, 4, &turns), cudaSuccess);
  ASSERT_TRUE(Eventually([&] { return __atomic_load_n(filled, __ATOMIC_ACQUIRE) == 2; }));
  __atomic_store_n(drained, ~uint64_t{0}, __ATOMIC_RELEASE);
  EXPECT_TRUE(Eventually([&] { return __atomic_load_n(done, __ATOMIC_ACQUIRE) == 4; }));
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(b_->UnregisterSharedHost(staging.data()), cudaSuccess);
  EXPECT_EQ(b_->UnregisterSharedHost(words), cudaSuccess);
}

TEST_F(HostBackendTest, BadDevicePointersAreInvalidValueAndHarmless) {
  char* d = static_cast<char*>(Malloc(1000));
  char host[2048] = {};
  char* unallocated = reinterpret_cast<char*>(kDefaultDeviceBase + (1ull << 30));
  EXPECT_EQ(b_->Memcpy(unallocated, host, 16, cudaMemcpyHostToDevice, nullptr, false),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->Memcpy(d, host, 1001, cudaMemcpyHostToDevice, nullptr, false),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->Memcpy(host, d + 999, 2, cudaMemcpyDeviceToHost, nullptr, false),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->Memcpy(d, host, 16, cudaMemcpyDeviceToHost, nullptr, false),
            cudaErrorInvalidValue);  // host pointer claimed as device
  EXPECT_EQ(b_->Memcpy(d, host, 16, static_cast<cudaMemcpyKind>(42), nullptr, false),
            cudaErrorInvalidMemcpyDirection);
  EXPECT_EQ(b_->cudaMemset(unallocated, 0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaMemset(nullptr, 0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaFree(d + 8), cudaErrorInvalidValue);
  EXPECT_EQ(b_->Memcpy(d, host, 16, cudaMemcpyHostToDevice,
                       reinterpret_cast<cudaStream_t>(0x1234), false),
            cudaErrorInvalidResourceHandle);
  ASSERT_EQ(b_->cudaFree(d), cudaSuccess);
  EXPECT_EQ(b_->cudaFree(d), cudaErrorInvalidValue);  // double free
  EXPECT_EQ(b_->Memcpy(host, d, 16, cudaMemcpyDeviceToHost, nullptr, false),
            cudaErrorInvalidValue);  // use after free
  // Still working.
  char* e = static_cast<char*>(Malloc(64));
  EXPECT_EQ(e, d);  // deterministic reuse of the freed block
  EXPECT_EQ(b_->cudaMemset(e, 7, 64), cudaSuccess);
  EXPECT_EQ(b_->Memcpy(host, e, 64, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  EXPECT_EQ(host[63], 7);
  EXPECT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
}

TEST_F(HostBackendTest, FreeAsyncIsStreamOrdered) {
  cudaStream_t s = Stream();
  void* p = nullptr;
  ASSERT_EQ(b_->cudaMallocAsync(&p, 4096, s), cudaSuccess);
  Gate gate;
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { gate.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->cudaMemsetAsync(p, 1, 4096, s), cudaSuccess);
  ASSERT_EQ(b_->cudaFreeAsync(p, s), cudaSuccess);
  EXPECT_EQ(b_->cudaFreeAsync(p, s), cudaErrorInvalidValue);  // double free
  // Not reused while the stream may still touch it.
  void* q = nullptr;
  ASSERT_EQ(b_->cudaMallocAsync(&q, 4096, s), cudaSuccess);
  EXPECT_NE(q, p);
  gate.Open();
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  void* r = nullptr;
  ASSERT_EQ(b_->cudaMallocAsync(&r, 4096, s), cudaSuccess);
  EXPECT_EQ(r, p);
}

TEST_F(HostBackendTest, StreamsRunConcurrently) {
  cudaStream_t a = Stream(), b = Stream();
  Gate b_ran;
  std::atomic<bool> a_saw_b{false};
  // a's callback can only finish early if b makes progress meanwhile.
  ASSERT_EQ(b_->EnqueueHostCallback(a, [&] { a_saw_b = b_ran.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(b, [&] { b_ran.Open(); }), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamSynchronize(a), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamSynchronize(b), cudaSuccess);
  EXPECT_TRUE(a_saw_b);
}

TEST_F(HostBackendTest, StreamOrderQueryAndAttributes) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(b_->cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -100), cudaSuccess);
  int priority = 0;
  unsigned int flags = 0;
  EXPECT_EQ(b_->cudaStreamGetPriority(s, &priority), cudaSuccess);
  EXPECT_EQ(priority, -5);  // clamped
  EXPECT_EQ(b_->cudaStreamGetFlags(s, &flags), cudaSuccess);
  EXPECT_EQ(flags, static_cast<unsigned int>(cudaStreamNonBlocking));
  EXPECT_EQ(b_->cudaStreamCreateWithFlags(&s, 0x80), cudaErrorInvalidValue);

  Gate gate;
  std::vector<int> order;
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { gate.Wait(); }), cudaSuccess);
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(b_->EnqueueHostCallback(s, [&order, i] { order.push_back(i); }), cudaSuccess);
  }
  EXPECT_EQ(b_->cudaStreamQuery(s), cudaErrorNotReady);
  gate.Open();
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamQuery(s), cudaSuccess);
  ASSERT_EQ(order.size(), 100u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[i], i);
  EXPECT_EQ(b_->cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(b_->cudaStreamDestroy(nullptr), cudaErrorInvalidResourceHandle);
}

TEST_F(HostBackendTest, LegacyStreamWaitsForBlockingStreamsOnly) {
  cudaStream_t blocking = Stream(cudaStreamDefault);
  cudaStream_t nonblocking = Stream(cudaStreamNonBlocking);
  Gate gate_blocking, gate_nonblocking;
  std::atomic<bool> blocking_done{false}, legacy_ran{false}, legacy_saw_blocking{false};
  ASSERT_EQ(b_->EnqueueHostCallback(nonblocking, [&] { gate_nonblocking.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(blocking,
                                    [&] {
                                      gate_blocking.Wait();
                                      blocking_done = true;
                                    }),
            cudaSuccess);
  for (cudaStream_t legacy : {cudaStream_t{nullptr}, cudaStreamLegacy, cudaStreamPerThread}) {
    ASSERT_EQ(b_->EnqueueHostCallback(legacy,
                                      [&] {
                                        legacy_saw_blocking = blocking_done.load();
                                        legacy_ran = true;
                                      }),
              cudaSuccess);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(legacy_ran);  // held back by the blocking stream
  gate_blocking.Open();
  // Runs although the non-blocking stream is still held.
  EXPECT_TRUE(Eventually([&] { return legacy_ran.load(); }));
  EXPECT_TRUE(legacy_saw_blocking);
  EXPECT_EQ(b_->cudaStreamQuery(nonblocking), cudaErrorNotReady);

  // Later work of a blocking stream waits for earlier legacy work; a
  // non-blocking stream's does not.
  Gate gate_legacy;
  std::atomic<bool> legacy_done{false}, after_ran{false}, after_saw_legacy{false};
  std::atomic<bool> free_ran{false};
  gate_nonblocking.Open();
  ASSERT_EQ(b_->EnqueueHostCallback(nullptr,
                                    [&] {
                                      gate_legacy.Wait();
                                      legacy_done = true;
                                    }),
            cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(blocking,
                                    [&] {
                                      after_saw_legacy = legacy_done.load();
                                      after_ran = true;
                                    }),
            cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(nonblocking, [&] { free_ran = true; }), cudaSuccess);
  EXPECT_TRUE(Eventually([&] { return free_ran.load(); }));
  EXPECT_FALSE(after_ran);
  gate_legacy.Open();
  EXPECT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(after_ran);
  EXPECT_TRUE(after_saw_legacy);
}

TEST_F(HostBackendTest, EventsOrderAndElapsedTime) {
  cudaStream_t s = Stream();
  cudaEvent_t start, end, untimed, never;
  ASSERT_EQ(b_->cudaEventCreate(&start), cudaSuccess);
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&end, cudaEventBlockingSync), cudaSuccess);
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(b_->cudaEventCreate(&never), cudaSuccess);
  EXPECT_EQ(b_->cudaEventCreateWithFlags(&never, cudaEventInterprocess), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaEventQuery(never), cudaSuccess);  // never recorded
  EXPECT_EQ(b_->cudaEventSynchronize(never), cudaSuccess);

  Gate gate;
  ASSERT_EQ(b_->cudaEventRecord(start, s), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(s,
                                    [&] {
                                      gate.Wait();
                                      std::this_thread::sleep_for(std::chrono::milliseconds(20));
                                    }),
            cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(end, s), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(untimed, s), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(b_->cudaEventQuery(end), cudaErrorNotReady);
  EXPECT_EQ(b_->cudaEventElapsedTime(&ms, start, end), cudaErrorNotReady);
  gate.Open();
  EXPECT_EQ(b_->cudaEventSynchronize(end), cudaSuccess);
  EXPECT_EQ(b_->cudaEventQuery(end), cudaSuccess);
  EXPECT_EQ(b_->cudaEventQuery(start), cudaSuccess);
  ASSERT_EQ(b_->cudaEventElapsedTime(&ms, start, end), cudaSuccess);
  EXPECT_GE(ms, 15.0f);
  EXPECT_LT(ms, 10000.0f);
  EXPECT_EQ(b_->cudaEventElapsedTime(&ms, start, never), cudaErrorInvalidResourceHandle);
  ASSERT_EQ(b_->cudaEventSynchronize(untimed), cudaSuccess);
  EXPECT_EQ(b_->cudaEventElapsedTime(&ms, start, untimed), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(b_->cudaEventElapsedTime(nullptr, start, end), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaEventDestroy(never), cudaSuccess);
  EXPECT_EQ(b_->cudaEventQuery(never), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(b_->cudaEventDestroy(never), cudaErrorInvalidResourceHandle);
}

TEST_F(HostBackendTest, StreamWaitEventWaitsForTheRecordAtCallTime) {
  cudaStream_t producer = Stream(cudaStreamNonBlocking);
  cudaStream_t consumer = Stream(cudaStreamNonBlocking);
  cudaEvent_t e;
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&e, cudaEventDisableTiming), cudaSuccess);
  Gate first, second;
  std::atomic<bool> produced{false}, consumed{false}, consumer_saw{false};
  ASSERT_EQ(b_->EnqueueHostCallback(producer,
                                    [&] {
                                      first.Wait();
                                      produced = true;
                                    }),
            cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(e, producer), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamWaitEvent(consumer, e, 0), cudaSuccess);
  // A later record does not extend the wait already queued.
  ASSERT_EQ(b_->EnqueueHostCallback(producer, [&] { second.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(e, producer), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(consumer,
                                    [&] {
                                      consumer_saw = produced.load();
                                      consumed = true;
                                    }),
            cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(consumed);
  first.Open();
  EXPECT_TRUE(Eventually([&] { return consumed.load(); }));
  EXPECT_TRUE(consumer_saw);
  EXPECT_EQ(b_->cudaEventQuery(e), cudaErrorNotReady);  // the second record
  second.Open();
  EXPECT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamWaitEvent(consumer, e, 0x40), cudaErrorInvalidValue);
}

TEST_F(HostBackendTest, KernelLaunchRunsSaxpy) {
  KernelInfo k = Kernel("_Z5saxpyifPKfPf");
  ASSERT_NE(k.handle, nullptr);
  ASSERT_EQ(k.params.size(), 4u);
  constexpr int kN = 1000;
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) {
    x[i] = i;
    y[i] = 2 * i;
  }
  float* dx = static_cast<float*>(Malloc(kN * sizeof(float)));
  float* dy = static_cast<float*>(Malloc(kN * sizeof(float)));
  cudaStream_t s = Stream();
  ASSERT_EQ(b_->Memcpy(dx, x.data(), kN * 4, cudaMemcpyHostToDevice, s, true), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(dy, y.data(), kN * 4, cudaMemcpyHostToDevice, s, true), cudaSuccess);
  std::vector<char> args(k.args_size);
  int n = kN;
  float a = 3;
  std::memcpy(args.data() + k.params[0].offset, &n, sizeof(n));
  std::memcpy(args.data() + k.params[1].offset, &a, sizeof(a));
  std::memcpy(args.data() + k.params[2].offset, &dx, sizeof(dx));
  std::memcpy(args.data() + k.params[3].offset, &dy, sizeof(dy));
  ASSERT_EQ(b_->LaunchKernel(k, dim3(4), dim3(256), 0, s, args.data(), false), cudaSuccess);
  std::fill(args.begin(), args.end(), 0);  // the launch took its own copy
  ASSERT_EQ(b_->Memcpy(y.data(), dy, kN * 4, cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  for (int i = 0; i < kN; ++i) ASSERT_FLOAT_EQ(y[i], 3.0f * i + 2 * i) << i;

  // Configuration errors come back from the launch itself.
  EXPECT_EQ(b_->LaunchKernel(k, dim3(1), dim3(2048), 0, s, args.data(), false),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(b_->LaunchKernel(k, dim3(0), dim3(32), 0, s, args.data(), false),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(b_->LaunchKernel(k, dim3(1, 70000), dim3(32), 0, s, args.data(), false),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(b_->LaunchKernel(k, dim3(1), dim3(32, 1, 65), 0, s, args.data(), false),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(b_->LaunchKernel(k, dim3(1), dim3(32), 1 << 20, s, args.data(), false),
            cudaErrorInvalidValue);
  KernelInfo bogus = k;
  bogus.handle = &k;
  EXPECT_EQ(b_->LaunchKernel(bogus, dim3(1), dim3(32), 0, s, args.data(), false),
            cudaErrorInvalidDeviceFunction);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
}

// Launches held back (LaunchKernelMayHold) wait for FlushLaunches, a direct
// launch, another stream's launch or the batch limit, and then run in their
// order. Two saxpy forms that do not commute: y = 2y (x is y) and y += a.
TEST_F(HostBackendTest, HeldLaunchesWaitForTheFlushAndRunInOrder) {
  KernelInfo k = Kernel("_Z5saxpyifPKfPf");
  ASSERT_EQ(k.params.size(), 4u);
  constexpr int kN = 64;
  std::vector<float> ones(kN, 1.0f), y(kN), want(kN);
  for (int i = 0; i < kN; ++i) want[i] = y[i] = i;
  float* dx = static_cast<float*>(Malloc(kN * sizeof(float)));
  float* dy = static_cast<float*>(Malloc(kN * sizeof(float)));
  cudaStream_t s = Stream(), s2 = Stream();
  ASSERT_EQ(b_->Memcpy(dx, ones.data(), kN * 4, cudaMemcpyHostToDevice, s, false), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(dy, y.data(), kN * 4, cudaMemcpyHostToDevice, s, false), cudaSuccess);
  auto args = [&](bool twice, float a) {
    std::vector<char> v(k.args_size);
    int n = kN;
    const float* x = twice ? dy : dx;
    std::memcpy(v.data() + k.params[0].offset, &n, sizeof(n));
    std::memcpy(v.data() + k.params[1].offset, &a, sizeof(a));
    std::memcpy(v.data() + k.params[2].offset, &x, sizeof(x));
    std::memcpy(v.data() + k.params[3].offset, &dy, sizeof(dy));
    return v;
  };
  auto hold = [&](bool twice, float a, bool more, cudaStream_t on) {
    std::vector<char> v = args(twice, twice ? 1.0f : a);
    EXPECT_EQ(b_->LaunchKernelMayHold(k, dim3(1), dim3(kN), 0, on, v.data(), more), cudaSuccess);
    for (float& w : want) w = twice ? 2 * w : w + a;
  };
  auto read = [&](cudaStream_t on) {
    std::vector<float> got(kN);
    EXPECT_EQ(b_->Memcpy(got.data(), dy, kN * 4, cudaMemcpyDeviceToHost, on, false), cudaSuccess);
    return got;
  };
  for (int i = 0; i < 10; ++i) hold(i % 3 == 0, i + 1, /*more=*/true, s);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(s), y);  // held: nothing ran (the executor flushes before any other request)
  EXPECT_EQ(b_->FlushLaunches(), 0);
  EXPECT_EQ(read(s), want);

  // The last launch of a run (no request behind it) issues the batch with it.
  hold(true, 0, true, s);
  hold(false, 5, false, s);
  EXPECT_EQ(read(s), want);
  // A launch on another stream issues the first stream's held launches.
  hold(false, 3, true, s);
  hold(true, 0, true, s);
  std::vector<float> after_s = want;
  hold(false, 7, true, s2);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(s), after_s);
  // A direct launch issues the held ones first.
  std::vector<char> direct = args(true, 1.0f);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s2, direct.data(), false), cudaSuccess);
  for (float& w : want) w = 2 * w;
  EXPECT_EQ(b_->cudaStreamSynchronize(s2), cudaSuccess);
  EXPECT_EQ(read(s2), want);
  // At the limit (64 by default) the batch goes without a flush.
  for (int i = 0; i < 64; ++i) hold(false, 1, true, s);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(read(s), want);
  // A refused launch is refused at once and holds nothing back.
  std::vector<char> v = args(false, 1.0f);
  EXPECT_EQ(b_->LaunchKernelMayHold(k, dim3(1), dim3(2048), 0, s, v.data(), true),
            cudaErrorInvalidConfiguration);
  EXPECT_EQ(b_->FlushLaunches(), 0);
  EXPECT_EQ(read(s), want);
  EXPECT_THAT(b_->StatsAtExit(), HasSubstr("in 4 batches held back"));
}

TEST_F(HostBackendTest, FunctionAttributesAndOccupancy) {
  KernelInfo k = Kernel("_Z7add_onePii");
  cudaFuncAttributes attr;
  ASSERT_EQ(b_->cudaFuncGetAttributes(&attr, k.handle), cudaSuccess);
  EXPECT_EQ(attr.maxThreadsPerBlock, 1024);
  EXPECT_EQ(attr.numRegs, 32);
  EXPECT_EQ(b_->cudaFuncSetAttribute(k.handle, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     100 << 10),
            cudaSuccess);
  ASSERT_EQ(b_->cudaFuncGetAttributes(&attr, k.handle), cudaSuccess);
  EXPECT_EQ(attr.maxDynamicSharedSizeBytes, 100 << 10);
  EXPECT_EQ(b_->cudaFuncSetAttribute(k.handle, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     1 << 30),
            cudaErrorInvalidValue);
  int blocks = 0;
  ASSERT_EQ(b_->cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, k.handle, 256, 0,
                                                                       0),
            cudaSuccess);
  EXPECT_EQ(blocks, 8);
  ASSERT_EQ(b_->cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, k.handle, 1024,
                                                                       0, 0),
            cudaSuccess);
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(b_->cudaFuncGetAttributes(&attr, &attr), cudaErrorInvalidDeviceFunction);
}

TEST_F(HostBackendTest, UnknownKernelIsNotFoundWithAdvice) {
  ASSERT_TRUE(b_->LoadModule(kModule, "fatbin").ok());
  absl::StatusOr<KernelInfo> k = b_->GetKernel(kModule, "_Z9no_kernelPf");
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(k.status().message(), HasSubstr("_Z9no_kernelPf"));
  EXPECT_THAT(k.status().message(), HasSubstr("REVENANT_HOST_KERNELS"));
  EXPECT_THAT(k.status().message(), HasSubstr("--host-kernels"));
  EXPECT_EQ(b_->GetKernel(kModule + 1, "_Z7add_onePii").status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(HostBackendTest, DestroyedStreamFinishesItsWork) {
  KernelInfo k = Kernel("_Z7add_onePii");
  constexpr int kN = 256;
  int* d = static_cast<int*>(Malloc(kN * sizeof(int)));
  ASSERT_EQ(b_->cudaMemset(d, 0, kN * sizeof(int)), cudaSuccess);
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  Gate gate;
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { gate.Wait(); }), cudaSuccess);
  std::vector<char> args(k.args_size);
  int n = kN;
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  std::memcpy(args.data() + k.params[1].offset, &n, sizeof(n));
  for (int i = 0; i < 5; ++i) {
    ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s, args.data(), false), cudaSuccess);
  }
  ASSERT_EQ(b_->cudaStreamDestroy(s), cudaSuccess);
  gate.Open();
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  std::vector<int> out(kN);
  ASSERT_EQ(b_->Memcpy(out.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, nullptr, false),
            cudaSuccess);
  EXPECT_EQ(out, std::vector<int>(kN, 5));
}

TEST_F(HostBackendTest, AsynchronousErrorsAreDeferredToSynchronize) {
  KernelInfo k = Kernel("_Z17needs_cooperativePi");
  int* d = static_cast<int*>(Malloc(64 * sizeof(int)));
  std::vector<char> args(k.args_size);
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  cudaStream_t s = Stream(cudaStreamNonBlocking), other = Stream(cudaStreamNonBlocking);
  // The launch itself is fine; the failure shows up while it runs.
  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamSynchronize(other), cudaSuccess);  // not this stream's error
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaErrorLaunchFailure);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);  // reported once

  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  EXPECT_EQ(b_->cudaDeviceSynchronize(), cudaErrorLaunchFailure);
  EXPECT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);

  cudaEvent_t e;
  ASSERT_EQ(b_->cudaEventCreate(&e), cudaSuccess);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(e, s), cudaSuccess);
  EXPECT_EQ(b_->cudaEventSynchronize(e), cudaErrorLaunchFailure);

  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(b_->cudaEventSynchronize(e), cudaErrorLaunchFailure);
  EXPECT_EQ(b_->TakeDeferredError(), cudaSuccess);

  // A cooperative launch of the same kernel succeeds.
  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), true), cudaSuccess);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(2), dim3(32), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(e, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamWaitEvent(other, e, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(other), cudaSuccess);
  EXPECT_EQ(b_->TakeDeferredError(), cudaErrorLaunchFailure);
  EXPECT_EQ(b_->TakeDeferredError(), cudaSuccess);
}

TEST_F(HostBackendTest, GraphsByStreamCapture) {
  KernelInfo k = Kernel("_Z7add_onePii");
  constexpr int kN = 128;
  int* d = static_cast<int*>(Malloc(kN * sizeof(int)));
  ASSERT_EQ(b_->cudaMemset(d, 0, kN * sizeof(int)), cudaSuccess);
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  std::vector<char> args(k.args_size);
  int n = kN;
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  std::memcpy(args.data() + k.params[1].offset, &n, sizeof(n));
  std::atomic<int> callbacks{0};

  cudaStreamCaptureStatus status;
  EXPECT_EQ(b_->cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal),
            cudaErrorStreamCaptureUnsupported);
  ASSERT_EQ(b_->cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  ASSERT_EQ(b_->cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { ++callbacks; }), cudaSuccess);
  int out0 = -1;
  EXPECT_EQ(b_->Memcpy(&out0, d, sizeof(int), cudaMemcpyDeviceToHost, s, false),
            cudaErrorStreamCaptureUnsupported);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaErrorStreamCaptureUnsupported);
  cudaGraph_t graph;
  ASSERT_EQ(b_->cudaStreamEndCapture(s, &graph), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamEndCapture(s, &graph), cudaErrorIllegalState);
  ASSERT_EQ(b_->cudaStreamIsCapturing(s, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);

  // Nothing ran during capture.
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  std::vector<int> out(kN);
  ASSERT_EQ(b_->Memcpy(out.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s, false),
            cudaSuccess);
  EXPECT_EQ(out, std::vector<int>(kN, 0));
  EXPECT_EQ(callbacks, 0);

  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(out.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s, false),
            cudaSuccess);
  EXPECT_EQ(out, std::vector<int>(kN, 6));
  EXPECT_EQ(callbacks, 3);

  cudaGraph_t empty, clone;
  ASSERT_EQ(b_->cudaGraphCreate(&empty, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphClone(&clone, graph), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphExecDestroy(exec), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphInstantiate(&exec, clone, 0), cudaSuccess);  // the clone lives on
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(callbacks, 4);
  EXPECT_EQ(b_->cudaGraphDestroy(empty), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphDestroy(graph), cudaErrorInvalidValue);
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  EXPECT_EQ(b_->cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeGlobal);
  // An unknown mode (an application's garbage) is refused and not kept.
  cudaStreamCaptureMode bad;
  const int garbage = 702;
  std::memcpy(&bad, &garbage, sizeof(bad));
  EXPECT_EQ(b_->cudaThreadExchangeStreamCaptureMode(&bad), cudaErrorInvalidValue);
  int left = 0;
  std::memcpy(&left, &bad, sizeof(left));
  EXPECT_EQ(left, 702);
  mode = cudaStreamCaptureModeGlobal;
  EXPECT_EQ(b_->cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
  EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
}

TEST_F(HostBackendTest, CaptureForksAndJoinsOtherStreams) {
  cudaStream_t origin = Stream(cudaStreamNonBlocking), side = Stream(cudaStreamNonBlocking);
  cudaEvent_t fork, join;
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&fork, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&join, cudaEventDisableTiming), cudaSuccess);
  std::vector<int> order;
  ASSERT_EQ(b_->cudaStreamBeginCapture(origin, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(origin, [&] { order.push_back(1); }), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(fork, origin), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamWaitEvent(side, fork, 0), cudaSuccess);
  cudaStreamCaptureStatus status;
  ASSERT_EQ(b_->cudaStreamIsCapturing(side, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  ASSERT_EQ(b_->EnqueueHostCallback(side, [&] { order.push_back(2); }), cudaSuccess);
  ASSERT_EQ(b_->cudaEventRecord(join, side), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamWaitEvent(origin, join, 0), cudaSuccess);
  ASSERT_EQ(b_->EnqueueHostCallback(origin, [&] { order.push_back(3); }), cudaSuccess);
  cudaGraph_t graph;
  EXPECT_EQ(b_->cudaStreamEndCapture(side, &graph), cudaErrorStreamCaptureUnmatched);
  ASSERT_EQ(b_->cudaStreamEndCapture(origin, &graph), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamIsCapturing(side, &status), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_TRUE(order.empty());
  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, side), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(side), cudaSuccess);
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  // The side stream works normally again.
  ASSERT_EQ(b_->EnqueueHostCallback(side, [&] { order.push_back(4); }), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(side), cudaSuccess);
  EXPECT_EQ(order.size(), 4u);
}

// add_one(d, n) arguments packed at the kernel's layout.
std::vector<char> AddOneArgs(const KernelInfo& k, int* d, int n) {
  std::vector<char> args(k.args_size);
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  std::memcpy(args.data() + k.params[1].offset, &n, sizeof(n));
  return args;
}

TEST_F(HostBackendTest, ExplicitGraphNodesRunInDependencyOrder) {
  KernelInfo k = Kernel("_Z7add_onePii");
  constexpr int kN = 64;
  int* d = static_cast<int*>(Malloc(kN * sizeof(int)));
  int* copy = static_cast<int*>(Malloc(kN * sizeof(int)));
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaMemsetParams mp = {};
  mp.dst = d;
  mp.value = 7;
  mp.elementSize = sizeof(int);
  mp.width = kN;
  mp.height = 1;
  cudaGraphNode_t memset_node, kernel_node, copy_node, host_node, empty_node;
  ASSERT_EQ(b_->AddMemsetNode(&memset_node, g, {}, mp), cudaSuccess);
  std::vector<char> args = AddOneArgs(k, d, kN);
  ASSERT_EQ(b_->AddKernelNode(&kernel_node, g, {memset_node}, k, dim3(1), dim3(kN), 0,
                              args.data()),
            cudaSuccess);
  ASSERT_EQ(b_->AddMemcpyNode1D(&copy_node, g, {kernel_node}, copy, d, kN * sizeof(int),
                                cudaMemcpyDeviceToDevice),
            cudaSuccess);
  std::vector<int> seen;
  ASSERT_EQ(b_->AddHostNode(&host_node, g, {copy_node},
                            [&] {
                              int v = 0;
                              std::memcpy(&v, copy + kN - 1, sizeof(v));
                              seen.push_back(v);
                            }),
            cudaSuccess);
  ASSERT_EQ(b_->AddEmptyNode(&empty_node, g, {memset_node, host_node}), cudaSuccess);

  // Bad requests: a dependency repeated or from nowhere, memory that is not
  // the device's, a bad element size.
  cudaGraphNode_t bad;
  EXPECT_EQ(b_->AddEmptyNode(&bad, g, {memset_node, memset_node}), cudaErrorInvalidValue);
  EXPECT_EQ(b_->AddEmptyNode(&bad, g, {reinterpret_cast<cudaGraphNode_t>(&mp)}),
            cudaErrorInvalidValue);
  int pageable[4];
  EXPECT_EQ(b_->AddMemcpyNode1D(&bad, g, {}, pageable, d, sizeof(pageable),
                                cudaMemcpyDeviceToHost),
            cudaErrorInvalidValue);
  cudaMemsetParams bad_mp = mp;
  bad_mp.elementSize = 3;
  EXPECT_EQ(b_->AddMemsetNode(&bad, g, {}, bad_mp), cudaErrorInvalidValue);

  std::vector<cudaGraphNode_t> nodes;
  ASSERT_EQ(b_->GraphGetNodes(g, &nodes), cudaSuccess);
  EXPECT_EQ(nodes, (std::vector<cudaGraphNode_t>{memset_node, kernel_node, copy_node, host_node,
                                                  empty_node}));

  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen, (std::vector<int>{8, 8}));

  // New kernel parameters on the executable only: the graph keeps its own.
  std::vector<char> half = AddOneArgs(k, d, kN / 2);
  ASSERT_EQ(b_->ExecKernelNodeSetParams(exec, kernel_node, k, dim3(1), dim3(kN), 0, half.data()),
            cudaSuccess);
  EXPECT_EQ(b_->ExecKernelNodeSetParams(exec, memset_node, k, dim3(1), dim3(kN), 0, half.data()),
            cudaErrorInvalidValue);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen.back(), 7);  // the last element is no longer incremented

  // A whole-graph update from a graph of the same shape.
  cudaGraph_t g2;
  ASSERT_EQ(b_->cudaGraphCreate(&g2, 0), cudaSuccess);
  mp.value = 40;
  cudaGraphNode_t n2[5];
  ASSERT_EQ(b_->AddMemsetNode(&n2[0], g2, {}, mp), cudaSuccess);
  ASSERT_EQ(b_->AddKernelNode(&n2[1], g2, {n2[0]}, k, dim3(1), dim3(kN), 0, args.data()),
            cudaSuccess);
  ASSERT_EQ(b_->AddMemcpyNode1D(&n2[2], g2, {n2[1]}, copy, d, kN * sizeof(int),
                                cudaMemcpyDeviceToDevice),
            cudaSuccess);
  ASSERT_EQ(b_->AddHostNode(&n2[3], g2, {n2[2]}, [&] { seen.push_back(-1); }), cudaSuccess);
  cudaGraphExecUpdateResultInfo info;
  // One node short: the topology differs.
  EXPECT_EQ(b_->ExecUpdate(exec, g2, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  ASSERT_EQ(b_->AddEmptyNode(&n2[4], g2, {n2[0], n2[3]}), cudaSuccess);
  ASSERT_EQ(b_->ExecUpdate(exec, g2, &info), cudaSuccess);
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen.back(), -1);
  int last = 0;
  ASSERT_EQ(b_->Memcpy(&last, copy + kN - 1, sizeof(last), cudaMemcpyDeviceToHost, s, false),
            cudaSuccess);
  EXPECT_EQ(last, 41);

  // A clone has nodes of its own and the original's parameters.
  cudaGraph_t clone;
  ASSERT_EQ(b_->cudaGraphClone(&clone, g), cudaSuccess);
  std::vector<cudaGraphNode_t> cloned;
  ASSERT_EQ(b_->GraphGetNodes(clone, &cloned), cudaSuccess);
  ASSERT_EQ(cloned.size(), 5u);
  EXPECT_NE(cloned[0], memset_node);
  EXPECT_EQ(b_->AddEmptyNode(&bad, clone, {memset_node}), cudaErrorInvalidValue);
  cudaGraphExec_t clone_exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&clone_exec, clone, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(clone_exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen.back(), 8);

  EXPECT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphExecDestroy(clone_exec), cudaSuccess);
  for (cudaGraph_t x : {g, g2, clone}) EXPECT_EQ(b_->cudaGraphDestroy(x), cudaSuccess);
  EXPECT_EQ(b_->GraphGetNodes(g, &nodes), cudaErrorInvalidValue);
}

// Conditional nodes: switch and if/else pick their body by the handle's
// default value; a while loop runs until a kernel of its body clears the
// condition (cudaGraphSetConditional in a host kernel).
TEST_F(HostBackendTest, ConditionalNodesRunTheirBodies) {
  KernelInfo add = Kernel("_Z7add_onePii");
  KernelInfo down = Kernel("_Z10count_downyPi");
  int* c = static_cast<int*>(Malloc(8 * sizeof(int)));  // one counter per body
  ASSERT_EQ(b_->cudaMemset(c, 0, 8 * sizeof(int)), cudaSuccess);
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphConditionalHandle sw, ifelse, loop;
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&sw, g, 2, cudaGraphCondAssignDefault),
            cudaSuccess);
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&ifelse, g, 0, cudaGraphCondAssignDefault),
            cudaSuccess);
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&loop, g, 1, cudaGraphCondAssignDefault),
            cudaSuccess);
  EXPECT_NE(sw, ifelse);
  cudaGraphConditionalHandle bad;
  EXPECT_EQ(b_->cudaGraphConditionalHandleCreate(&bad, g, 0, 2), cudaErrorInvalidValue);

  auto add_to = [&](cudaGraph_t body, int i, cudaGraphNode_t* node) {
    std::vector<char> args = AddOneArgs(add, c + i, 1);
    return b_->AddKernelNode(node, body, {}, add, dim3(1), dim3(1), 0, args.data());
  };
  cudaGraphNode_t n_sw, n_if, n_set, n_loop, k;
  std::vector<cudaGraph_t> bodies;
  ASSERT_EQ(b_->AddConditionalNode(&n_sw, g, {}, sw, cudaGraphCondTypeSwitch, 3, &bodies),
            cudaSuccess);
  ASSERT_EQ(bodies.size(), 3u);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(add_to(bodies[i], i, &k), cudaSuccess);
  const cudaGraph_t sw_body = bodies[0];
  ASSERT_EQ(b_->AddConditionalNode(&n_if, g, {n_sw}, ifelse, cudaGraphCondTypeIf, 2, &bodies),
            cudaSuccess);
  ASSERT_EQ(add_to(bodies[0], 3, &k), cudaSuccess);
  ASSERT_EQ(add_to(bodies[1], 4, &k), cudaSuccess);
  // The loop: c[6] = 3, then the body adds one to c[5] and counts c[6] down.
  cudaMemsetParams mp = {};
  mp.dst = c + 6;
  mp.value = 3;
  mp.elementSize = sizeof(int);
  mp.width = 1;
  mp.height = 1;
  ASSERT_EQ(b_->AddMemsetNode(&n_set, g, {n_if}, mp), cudaSuccess);
  ASSERT_EQ(b_->AddConditionalNode(&n_loop, g, {n_set}, loop, cudaGraphCondTypeWhile, 1, &bodies),
            cudaSuccess);
  cudaGraphNode_t body_add, body_down;
  ASSERT_EQ(add_to(bodies[0], 5, &body_add), cudaSuccess);
  std::vector<char> dargs(down.args_size);
  int* counter = c + 6;
  std::memcpy(dargs.data() + down.params[0].offset, &loop, sizeof(loop));
  std::memcpy(dargs.data() + down.params[1].offset, &counter, sizeof(counter));
  ASSERT_EQ(b_->AddKernelNode(&body_down, bodies[0], {body_add}, down, dim3(1), dim3(1), 0,
                              dargs.data()),
            cudaSuccess);

  // Refused: a handle of another graph, a while node of two bodies, memory
  // nodes in a body, destroying a body, cloning, a child graph of `g`.
  cudaGraph_t other;
  ASSERT_EQ(b_->cudaGraphCreate(&other, 0), cudaSuccess);
  cudaGraphNode_t refused;
  EXPECT_EQ(b_->AddConditionalNode(&refused, other, {}, sw, cudaGraphCondTypeIf, 1, &bodies),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->AddConditionalNode(&refused, g, {}, loop, cudaGraphCondTypeWhile, 2, &bodies),
            cudaErrorInvalidValue);
  void* mem = nullptr;
  EXPECT_EQ(b_->AddMemAllocNode(&refused, sw_body, {}, 64, &mem), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaGraphDestroy(sw_body), cudaErrorInvalidValue);
  cudaGraph_t clone;
  EXPECT_EQ(b_->cudaGraphClone(&clone, g), cudaErrorNotSupported);
  EXPECT_EQ(b_->AddChildGraphNode(&refused, other, {}, g), cudaErrorInvalidValue);

  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  int got[8];
  std::memcpy(got, c, sizeof(got));  // host backend device memory is host memory
  EXPECT_EQ(std::vector<int>(got, got + 7), (std::vector<int>{0, 0, 2, 0, 2, 6, 0}))
      << "switch case 2, the else body, 3 loop iterations per launch";

  // Destroying the graph takes its bodies along.
  ASSERT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
  EXPECT_EQ(b_->AddEmptyNode(&refused, sw_body, {}), cudaErrorInvalidValue);
  ASSERT_EQ(b_->cudaGraphDestroy(other), cudaSuccess);
}

// A graph's conditional handles are the same in another backend that creates
// the same graph's handles (a replacement agent replaying them), whatever
// other graphs it made before.
TEST_F(HostBackendTest, ConditionalHandlesAreTheSameInAReplacement) {
  cudaGraph_t g;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphConditionalHandle a0, a1;
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&a0, g, 0, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&a1, g, 0, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
  b_.reset();
  SetUp();
  cudaGraph_t first, g2;
  ASSERT_EQ(b_->cudaGraphCreate(&first, 0), cudaSuccess);
  cudaGraphConditionalHandle unrelated, b0, b1;
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&unrelated, first, 0, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphCreate(&g2, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&b0, g2, 0, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphConditionalHandleCreate(&b1, g2, 0, 0), cudaSuccess);
  EXPECT_EQ(a0, b0);
  EXPECT_EQ(a1, b1);
}

// Child graph nodes run a copy of the child; event record nodes make each
// launch a record of the event, wait nodes wait for its latest record.
TEST_F(HostBackendTest, ChildGraphAndEventNodes) {
  KernelInfo add = Kernel("_Z7add_onePii");
  int* c = static_cast<int*>(Malloc(2 * sizeof(int)));
  ASSERT_EQ(b_->cudaMemset(c, 0, 2 * sizeof(int)), cudaSuccess);
  cudaStream_t s = Stream(cudaStreamNonBlocking), s2 = Stream(cudaStreamNonBlocking);
  cudaEvent_t ev;
  ASSERT_EQ(b_->cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), cudaSuccess);
  cudaGraph_t child, g;
  ASSERT_EQ(b_->cudaGraphCreate(&child, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  std::vector<char> args = AddOneArgs(add, c, 1);
  cudaGraphNode_t ck, late, n_child, n_rec, n_wait;
  ASSERT_EQ(b_->AddKernelNode(&ck, child, {}, add, dim3(1), dim3(1), 0, args.data()),
            cudaSuccess);
  ASSERT_EQ(b_->AddChildGraphNode(&n_child, g, {}, child), cudaSuccess);
  // Added after the copy was taken: never runs in `g`.
  ASSERT_EQ(b_->AddKernelNode(&late, child, {ck}, add, dim3(1), dim3(1), 0, args.data()),
            cudaSuccess);
  ASSERT_EQ(b_->AddEventNode(&n_rec, g, {n_child}, ev, /*record=*/true), cudaSuccess);
  ASSERT_EQ(b_->AddEventNode(&n_wait, g, {n_rec}, ev, /*record=*/false), cudaSuccess);
  cudaGraphNode_t refused;
  EXPECT_EQ(b_->AddEventNode(&refused, g, {}, reinterpret_cast<cudaEvent_t>(&args), true),
            cudaErrorInvalidResourceHandle);
  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  // The launch is held behind a gate: its record is pending until it runs,
  // and s2, waiting for the event, sees what the child wrote by then.
  Gate gate;
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { gate.Wait(); }), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_EQ(b_->cudaEventQuery(ev), cudaErrorNotReady) << "the launch is a new record";
  ASSERT_EQ(b_->cudaStreamWaitEvent(s2, ev, 0), cudaSuccess);
  int seen_at_s2 = -1;
  ASSERT_EQ(b_->EnqueueHostCallback(s2, [&] { std::memcpy(&seen_at_s2, c, sizeof(int)); }),
            cudaSuccess);
  gate.Open();
  ASSERT_EQ(b_->cudaStreamSynchronize(s2), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(seen_at_s2, 1) << "s2 waited for the record node, after the child ran once";
  EXPECT_EQ(b_->cudaEventQuery(ev), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphDestroy(child), cudaSuccess);
}

TEST_F(HostBackendTest, CaptureIntoAnExistingGraphAfterGivenNodes) {
  KernelInfo k = Kernel("_Z7add_onePii");
  constexpr int kN = 32;
  int* d = static_cast<int*>(Malloc(kN * sizeof(int)));
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaMemsetParams mp = {};
  mp.dst = d;
  mp.elementSize = sizeof(int);
  mp.width = kN;
  mp.height = 1;
  cudaGraphNode_t first;
  ASSERT_EQ(b_->AddMemsetNode(&first, g, {}, mp), cudaSuccess);

  cudaStreamCaptureStatus status;
  unsigned long long id = 0;
  cudaGraph_t captured = nullptr;
  std::vector<cudaGraphNode_t> deps;
  ASSERT_EQ(b_->GetCaptureInfo(s, &status, &id, &captured, &deps), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(b_->UpdateCaptureDependencies(s, {first}, cudaStreamSetCaptureDependencies),
            cudaErrorIllegalState);

  ASSERT_EQ(b_->BeginCaptureToGraph(s, g, {first}, cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_EQ(b_->GetCaptureInfo(s, &status, &id, &captured, &deps), cudaSuccess);
  EXPECT_EQ(status, cudaStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  EXPECT_EQ(captured, g);
  EXPECT_EQ(deps, std::vector<cudaGraphNode_t>{first});
  cudaGraphNode_t bad;
  EXPECT_EQ(b_->AddEmptyNode(&bad, g, {}), cudaErrorIllegalState);  // being captured into

  std::vector<char> args = AddOneArgs(k, d, kN);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s, args.data(), false), cudaSuccess);
  ASSERT_EQ(b_->GetCaptureInfo(s, &status, &id, &captured, &deps), cudaSuccess);
  ASSERT_EQ(deps.size(), 1u);
  EXPECT_NE(deps[0], first);  // the captured kernel
  const cudaGraphNode_t kernel = deps[0];
  ASSERT_EQ(b_->UpdateCaptureDependencies(s, {first}, cudaStreamSetCaptureDependencies),
            cudaSuccess);
  ASSERT_EQ(b_->UpdateCaptureDependencies(s, {kernel}, cudaStreamAddCaptureDependencies),
            cudaSuccess);
  ASSERT_EQ(b_->GetCaptureInfo(s, &status, &id, &captured, &deps), cudaSuccess);
  EXPECT_EQ(deps, (std::vector<cudaGraphNode_t>{first, kernel}));
  EXPECT_EQ(b_->UpdateCaptureDependencies(s, {first}, 7), cudaErrorInvalidValue);
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(kN), 0, s, args.data(), false), cudaSuccess);
  cudaGraph_t out = nullptr;
  ASSERT_EQ(b_->cudaStreamEndCapture(s, &out), cudaSuccess);
  EXPECT_EQ(out, g);
  std::vector<cudaGraphNode_t> nodes;
  ASSERT_EQ(b_->GraphGetNodes(g, &nodes), cudaSuccess);
  EXPECT_EQ(nodes.size(), 3u);

  ASSERT_EQ(b_->cudaMemset(d, 0x7f, kN * sizeof(int)), cudaSuccess);
  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  std::vector<int> h(kN);
  ASSERT_EQ(b_->Memcpy(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost, s, false),
            cudaSuccess);
  EXPECT_EQ(h, std::vector<int>(kN, 2));  // memset, then both kernels
  EXPECT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
}

TEST_F(HostBackendTest, AllocNodeMemoryLivesWithItsGraph) {
  KernelInfo k = Kernel("_Z7add_onePii");
  constexpr int kN = 16;
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  cudaGraph_t g;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphNode_t alloc, kernel, free_node;
  void* p = nullptr;
  ASSERT_EQ(b_->AddMemAllocNode(&alloc, g, {}, kN * sizeof(int), &p), cudaSuccess);
  ASSERT_NE(p, nullptr);
  const DeviceRange r = b_->device_range();
  EXPECT_GE(reinterpret_cast<uint64_t>(p), r.base);
  EXPECT_LT(reinterpret_cast<uint64_t>(p), r.base + r.size);
  std::vector<char> args = AddOneArgs(k, static_cast<int*>(p), kN);
  ASSERT_EQ(b_->AddKernelNode(&kernel, g, {alloc}, k, dim3(1), dim3(kN), 0, args.data()),
            cudaSuccess);
  ASSERT_EQ(b_->AddMemFreeNode(&free_node, g, {kernel}, p), cudaSuccess);
  cudaGraphNode_t bad;
  EXPECT_EQ(b_->AddMemFreeNode(&bad, g, {}, Malloc(64)), cudaErrorInvalidValue);  // not graph memory
  cudaGraphExec_t exec;
  ASSERT_EQ(b_->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphLaunch(exec, s), cudaSuccess);
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  int v = 0;
  ASSERT_EQ(b_->Memcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  EXPECT_EQ(v, 2);
  // The executable still holds the memory after the graph is gone.
  ASSERT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
  ASSERT_EQ(b_->Memcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  ASSERT_EQ(b_->cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(b_->Memcpy(&v, p, sizeof(v), cudaMemcpyDeviceToHost, s, false),
            cudaErrorInvalidValue);
}

// The driver rows (host_driver.cc): 32-bit memsets and the stream memory
// operations, in stream order; bad arguments are refused before anything
// runs; a wait that is never satisfied fails its stream after the bound.
TEST_F(HostBackendTest, DriverMemsetD32AndStreamMemoryOperations) {
  const size_t n = 1000;
  auto* words = static_cast<uint32_t*>(Malloc(n * sizeof(uint32_t)));
  auto* flag = static_cast<uint32_t*>(Malloc(sizeof(uint32_t)));
  const CUdeviceptr w = reinterpret_cast<CUdeviceptr>(words);
  const CUdeviceptr f = reinterpret_cast<CUdeviceptr>(flag);
  ASSERT_EQ(b_->cuMemsetD32_v2(w, 0xdeadbeefu, n), CUDA_SUCCESS);
  EXPECT_EQ(words[0], 0xdeadbeefu);
  EXPECT_EQ(words[n - 1], 0xdeadbeefu);
  EXPECT_EQ(b_->cuMemsetD32_v2(w + 2, 1, 1), CUDA_ERROR_INVALID_VALUE) << "misaligned";
  EXPECT_EQ(b_->cuMemsetD32_v2(w, 1, (n + 1) << 20), CUDA_ERROR_INVALID_VALUE) << "past the end";
  EXPECT_EQ(b_->cuMemsetD32_v2(0x1000, 1, 1), CUDA_ERROR_INVALID_VALUE) << "not device memory";
  EXPECT_EQ(words[0], 0xdeadbeefu);

  ASSERT_EQ(b_->cuMemsetD32_v2(f, 0, 1), CUDA_SUCCESS);
  CUstream waiter = reinterpret_cast<CUstream>(Stream(cudaStreamNonBlocking));
  CUstream writer = reinterpret_cast<CUstream>(Stream(cudaStreamNonBlocking));
  ASSERT_EQ(b_->cuStreamWaitValue32_v2(waiter, f, 3, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  ASSERT_EQ(b_->cuMemsetD32Async(w, 7, n, waiter), CUDA_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(b_->cudaStreamQuery(reinterpret_cast<cudaStream_t>(waiter)), cudaErrorNotReady);
  EXPECT_EQ(words[0], 0xdeadbeefu) << "the memset ran before the wait was satisfied";
  ASSERT_EQ(b_->cuStreamWriteValue32_v2(writer, f, 2, CU_STREAM_WRITE_VALUE_DEFAULT),
            CUDA_SUCCESS);
  ASSERT_EQ(b_->cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(writer)), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(b_->cudaStreamQuery(reinterpret_cast<cudaStream_t>(waiter)), cudaErrorNotReady)
      << "EQ 3 released by 2";
  ASSERT_EQ(b_->cuStreamWriteValue32_v2(writer, f, 3, CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
            CUDA_SUCCESS);
  ASSERT_EQ(b_->cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(waiter)), cudaSuccess);
  EXPECT_EQ(words[n - 1], 7u);
  EXPECT_EQ(*flag, 3u);

  // GEQ compares as a signed difference, AND and NOR as bit tests.
  ASSERT_EQ(b_->cuStreamWaitValue32_v2(waiter, f, 2, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  ASSERT_EQ(b_->cuStreamWaitValue32_v2(waiter, f, 1, CU_STREAM_WAIT_VALUE_AND), CUDA_SUCCESS);
  ASSERT_EQ(b_->cuStreamWaitValue32_v2(waiter, f, 0xfffffff0u,
                                       CU_STREAM_WAIT_VALUE_NOR | CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_SUCCESS);
  EXPECT_EQ(b_->cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(waiter)), cudaSuccess);

  EXPECT_EQ(b_->cuStreamWriteValue32_v2(writer, f, 1, 2), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b_->cuStreamWriteValue32_v2(writer, f + 1, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b_->cuStreamWaitValue32_v2(waiter, f, 1, 4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b_->cuStreamWaitValue32_v2(waiter, 0x1000, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(b_->cuMemsetD32Async(w, 1, 1, reinterpret_cast<CUstream>(0x5)),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(*flag, 3u);
}

TEST_F(HostBackendTest, DriverWaitValueIsBounded) {
  setenv("REVENANT_COLLECTIVE_TIMEOUT_S", "0.2", 1);
  auto* flag = static_cast<uint32_t*>(Malloc(sizeof(uint32_t)));
  *flag = 0;
  cudaStream_t s = Stream(cudaStreamNonBlocking);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(b_->cuStreamWaitValue32_v2(reinterpret_cast<CUstream>(s),
                                       reinterpret_cast<CUdeviceptr>(flag), 1,
                                       CU_STREAM_WAIT_VALUE_EQ),
            CUDA_SUCCESS);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaErrorLaunchTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  unsetenv("REVENANT_COLLECTIVE_TIMEOUT_S");
}

TEST_F(HostBackendTest, ResetDropsEverything) {
  void* p = Malloc(1 << 20);
  ASSERT_EQ(b_->cudaMemset(p, 1, 1 << 20), cudaSuccess);
  cudaStream_t s = Stream();
  cudaEvent_t e;
  ASSERT_EQ(b_->cudaEventCreate(&e), cudaSuccess);
  KernelInfo k = Kernel("_Z7add_onePii");
  ASSERT_EQ(b_->Reset(), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamQuery(s), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(b_->cudaEventQuery(e), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(b_->cudaMemset(p, 0, 1), cudaErrorInvalidValue);
  EXPECT_EQ(b_->GetKernel(kModule, "_Z7add_onePii").status().code(),
            absl::StatusCode::kNotFound);
  // Allocation restarts at the base, and the memory reads as zero again.
  void* q = Malloc(1 << 20);
  EXPECT_EQ(q, p);
  char c = 1;
  ASSERT_EQ(b_->Memcpy(&c, q, 1, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  EXPECT_EQ(c, 0);
}

}  // namespace
}  // namespace host
}  // namespace agent
}  // namespace revenant

namespace revenant {
namespace agent {
namespace host {
namespace {

cudaLaunchAttribute Attr(cudaLaunchAttributeID id) {
  cudaLaunchAttribute a;
  std::memset(&a, 0, sizeof(a));
  a.id = id;
  return a;
}

TEST_F(HostBackendTest, LaunchAttributesWithoutEffectInOrderAreHonouredTheRestRefused) {
  KernelInfo k = Kernel("_Z7add_onePii");
  int* d = static_cast<int*>(Malloc(64 * sizeof(int)));
  cudaStream_t s = Stream();
  ASSERT_EQ(b_->cudaMemsetAsync(d, 0, 64 * sizeof(int), s), cudaSuccess);
  std::vector<char> args(k.args_size);
  int n = 64;
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  std::memcpy(args.data() + k.params[1].offset, &n, sizeof(n));
  auto launch = [&](dim3 grid, std::vector<cudaLaunchAttribute> attrs) {
    return b_->LaunchKernelEx(k, grid, dim3(64 / grid.x), 0, s, args.data(), attrs);
  };
  cudaLaunchAttribute prio = Attr(cudaLaunchAttributePriority);
  prio.val.priority = -1;
  cudaLaunchAttribute pss = Attr(cudaLaunchAttributeProgrammaticStreamSerialization);
  pss.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchAttribute domain = Attr(cudaLaunchAttributeMemSyncDomain);
  cudaLaunchAttribute cluster = Attr(cudaLaunchAttributeClusterDimension);
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  EXPECT_EQ(launch(dim3(1), {}), cudaSuccess);
  EXPECT_EQ(launch(dim3(1), {prio, pss, domain}), cudaSuccess);
  EXPECT_EQ(launch(dim3(4), {cluster}), cudaSuccess);
  // Refused before anything runs.
  EXPECT_EQ(launch(dim3(2), {Attr(cudaLaunchAttributeProgrammaticEvent)}), cudaErrorNotSupported);
  EXPECT_EQ(launch(dim3(2), {prio, Attr(cudaLaunchAttributeLaunchCompletionEvent)}),
            cudaErrorNotSupported);
  EXPECT_EQ(launch(dim3(2), {Attr(cudaLaunchAttributeDeviceUpdatableKernelNode)}),
            cudaErrorNotSupported);
  EXPECT_EQ(launch(dim3(2), {Attr(static_cast<cudaLaunchAttributeID>(99))}),
            cudaErrorNotSupported);
  cluster.val.clusterDim.x = 3;  // does not divide a grid of 4
  EXPECT_EQ(launch(dim3(4), {cluster}), cudaErrorInvalidClusterSize);
  cluster.val.clusterDim.x = 16;  // more than 8 blocks
  EXPECT_EQ(launch(dim3(16), {cluster}), cudaErrorInvalidClusterSize);
  std::vector<int> h(64, -1);
  ASSERT_EQ(b_->Memcpy(h.data(), d, 64 * sizeof(int), cudaMemcpyDeviceToHost, s, false),
            cudaSuccess);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(h[i], 3) << i;  // the three accepted launches only

  // The cooperative attribute makes a cooperative launch: grid.sync() works.
  KernelInfo coop = Kernel("_Z17needs_cooperativePi");
  std::vector<char> cargs(coop.args_size);
  std::memcpy(cargs.data() + coop.params[0].offset, &d, sizeof(d));
  cudaLaunchAttribute c = Attr(cudaLaunchAttributeCooperative);
  c.val.cooperative = 1;
  ASSERT_EQ(b_->LaunchKernelEx(coop, dim3(2), dim3(32), 0, s, cargs.data(), {c}), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  c.val.cooperative = 0;
  ASSERT_EQ(b_->LaunchKernelEx(coop, dim3(2), dim3(32), 0, s, cargs.data(), {c}), cudaSuccess);
  EXPECT_EQ(b_->cudaStreamSynchronize(s), cudaErrorLaunchFailure);
}

TEST_F(HostBackendTest, DeviceVariablesAreTheKernelLibrarysStorage) {
  KernelInfo k = Kernel("_Z11copy_valuesPi");
  EXPECT_EQ(b_->GetSymbol(kModule, "no_such_variable").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(b_->GetSymbol(kModule + 1, "bt_values").status().code(),
            absl::StatusCode::kNotFound);  // module not loaded
  absl::StatusOr<Backend::Symbol> sym = b_->GetSymbol(kModule, "bt_values");
  ASSERT_TRUE(sym.ok()) << sym.status();
  ASSERT_EQ(sym->size, 8 * sizeof(int));
  cudaStream_t s = Stream();
  const int values[8] = {5, 4, 3, 2, 1, 0, -1, -2};
  ASSERT_EQ(b_->Memcpy(sym->address, values, sizeof(values), cudaMemcpyHostToDevice, s, true),
            cudaSuccess);
  int* d = static_cast<int*>(Malloc(8 * sizeof(int)));
  std::vector<char> args(k.args_size);
  std::memcpy(args.data() + k.params[0].offset, &d, sizeof(d));
  ASSERT_EQ(b_->LaunchKernel(k, dim3(1), dim3(8), 0, s, args.data(), false), cudaSuccess);
  int out[8] = {};
  ASSERT_EQ(b_->Memcpy(out, d, sizeof(out), cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], values[i]) << i;
  // Past the variable's end: refused, nothing written.
  char* end = static_cast<char*>(sym->address) + sym->size - 4;
  EXPECT_EQ(b_->Memcpy(end, values, 8, cudaMemcpyHostToDevice, s, false), cudaErrorInvalidValue);
}

TEST_F(HostBackendTest, NodeDependenciesInstantiateFlagsAndDot) {
  cudaGraph_t g = nullptr;
  ASSERT_EQ(b_->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphNode_t a, b, c, d;
  ASSERT_EQ(b_->AddEmptyNode(&a, g, {}), cudaSuccess);
  ASSERT_EQ(b_->AddEmptyNode(&b, g, {a}), cudaSuccess);
  ASSERT_EQ(b_->AddEmptyNode(&c, g, {a}), cudaSuccess);
  ASSERT_EQ(b_->AddEmptyNode(&d, g, {b, c}), cudaSuccess);
  std::vector<cudaGraphNode_t> deps;
  ASSERT_EQ(b_->GraphNodeGetDependencies(d, &deps), cudaSuccess);
  EXPECT_EQ(deps, (std::vector<cudaGraphNode_t>{b, c}));
  ASSERT_EQ(b_->GraphNodeGetDependencies(a, &deps), cudaSuccess);
  EXPECT_TRUE(deps.empty());
  int not_a_node = 0;
  EXPECT_EQ(b_->GraphNodeGetDependencies(reinterpret_cast<cudaGraphNode_t>(&not_a_node), &deps),
            cudaErrorInvalidValue);

  std::string dot;
  ASSERT_EQ(b_->GraphDebugDot(g, 0, &dot), cudaSuccess);
  EXPECT_NE(dot.find("digraph"), std::string::npos) << dot;
  for (const char* edge : {"node0 -> node1", "node0 -> node2", "node1 -> node3", "node2 -> node3"})
    EXPECT_NE(dot.find(edge), std::string::npos) << edge << " in " << dot;

  cudaGraphExec_t e = nullptr;
  for (unsigned long long flags : {0ull, 1ull * cudaGraphInstantiateFlagAutoFreeOnLaunch,
                                   1ull * cudaGraphInstantiateFlagUseNodePriority}) {
    ASSERT_EQ(b_->cudaGraphInstantiateWithFlags(&e, g, flags), cudaSuccess) << flags;
    EXPECT_EQ(b_->cudaGraphExecDestroy(e), cudaSuccess);
  }
  EXPECT_EQ(b_->cudaGraphInstantiateWithFlags(&e, g, cudaGraphInstantiateFlagUpload),
            cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaGraphInstantiateWithFlags(&e, g, cudaGraphInstantiateFlagDeviceLaunch),
            cudaErrorNotSupported);
  EXPECT_EQ(b_->cudaGraphInstantiateWithFlags(&e, g, 1ull << 20), cudaErrorInvalidValue);
  EXPECT_EQ(b_->cudaGraphDestroy(g), cudaSuccess);
}

TEST_F(HostBackendTest, PeerAccessPciBusIdAndPoolAccessOfTheOneDevice) {
  EXPECT_EQ(b_->cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
  EXPECT_EQ(b_->cudaDeviceEnablePeerAccess(1, 0), cudaErrorInvalidDevice);
  char bus[32];
  ASSERT_EQ(b_->PciBusId(bus, sizeof(bus), 0), cudaSuccess);
  EXPECT_STREQ(bus, "0000:00:00.0");
  EXPECT_EQ(b_->PciBusId(bus, sizeof(bus), 1), cudaErrorInvalidDevice);
  cudaMemPool_t pool = nullptr;
  ASSERT_EQ(b_->cudaDeviceGetDefaultMemPool(&pool, 0), cudaSuccess);
  cudaMemAccessDesc desc = {};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  EXPECT_EQ(b_->MemPoolSetAccess(pool, &desc, 1), cudaSuccess);
  EXPECT_EQ(b_->MemPoolSetAccess(pool, &desc, 0), cudaSuccess);
  desc.location.id = 1;
  EXPECT_EQ(b_->MemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidDevice);
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtNone;
  EXPECT_EQ(b_->MemPoolSetAccess(pool, &desc, 1), cudaErrorInvalidValue);
  EXPECT_EQ(b_->MemPoolSetAccess(pool, nullptr, 1), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace host
}  // namespace agent
}  // namespace revenant
