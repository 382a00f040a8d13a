#include "agent/backends/host/host_collectives.h"

#include <csignal>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

// Writing to a dead peer's socket raises SIGPIPE; the agent ignores it (its
// main does), so must the tests that kill peers.
const bool kIgnoreSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();


std::unique_ptr<HostCollectiveBackend> NewBackend(int rank) {
  BackendOptions o;
  o.rank = rank;
  absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> b = HostCollectiveBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

// Runs body(rank, backend, comm) for `n` ranks on threads, one backend each.
void RunRanks(int n, const std::function<void(int, HostCollectiveBackend*, ncclComm_t)>& body) {
  std::vector<std::unique_ptr<HostCollectiveBackend>> backends;
  for (int r = 0; r < n; ++r) backends.push_back(NewBackend(r));
  ncclUniqueId id;
  ASSERT_EQ(backends[0]->ncclGetUniqueId(&id), ncclSuccess);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      ncclComm_t comm = nullptr;
      ASSERT_EQ(backends[r]->ncclCommInitRank(&comm, n, id, r), ncclSuccess);
      body(r, backends[r].get(), comm);
      ASSERT_EQ(backends[r]->ncclCommDestroy(comm), ncclSuccess);
    });
  }
  for (auto& t : threads) t.join();
}

template <typename T>
T* DeviceCopy(HostCollectiveBackend* b, const std::vector<T>& v) {
  void* p = nullptr;
  EXPECT_EQ(b->cudaMalloc(&p, v.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(b->Memcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, nullptr, false),
            cudaSuccess);
  return static_cast<T*>(p);
}

template <typename T>
std::vector<T> HostCopy(HostCollectiveBackend* b, const T* p, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(b->Memcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, nullptr, false),
            cudaSuccess);
  return v;
}

TEST(HostCollectives, IdsAndBadInitArguments) {
  auto b = NewBackend(0);
  ncclUniqueId a, c;
  ASSERT_EQ(b->ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(b->ncclGetUniqueId(&c), ncclSuccess);
  EXPECT_EQ(std::memcmp(a.internal, "RVNTNCCL", 8), 0);
  EXPECT_NE(std::memcmp(a.internal, c.internal, sizeof(a.internal)), 0);  // random tokens
  int v = 0;
  ASSERT_EQ(b->ncclGetVersion(&v), ncclSuccess);
  EXPECT_EQ(v, 22809);

  ncclComm_t comm = nullptr;
  ncclUniqueId bad = a;
  bad.internal[0] = 'X';
  EXPECT_EQ(b->ncclCommInitRank(&comm, 1, bad, 0), ncclInvalidArgument);
  EXPECT_EQ(b->ncclCommInitRank(&comm, 2, a, 2), ncclInvalidArgument);
  EXPECT_EQ(b->ncclCommInitRank(&comm, 2, a, -1), ncclInvalidArgument);
  EXPECT_EQ(b->ncclCommInitRank(&comm, 0, a, 0), ncclInvalidArgument);

  // One rank: everything works locally.
  ASSERT_EQ(b->ncclCommInitRank(&comm, 1, a, 0), ncclSuccess);
  int n = 0, r = -1, d = -1;
  EXPECT_EQ(b->ncclCommCount(comm, &n), ncclSuccess);
  EXPECT_EQ(b->ncclCommUserRank(comm, &r), ncclSuccess);
  EXPECT_EQ(b->ncclCommCuDevice(comm, &d), ncclSuccess);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r, 0);
  EXPECT_EQ(d, 0);
  ncclComm_t split = nullptr;
  EXPECT_EQ(b->ncclCommSplit(comm, 0, 0, &split, nullptr), ncclInvalidUsage);
  float* x = DeviceCopy<float>(b.get(), {1, 2, 3});
  EXPECT_EQ(b->ncclAllReduce(x, x, 3, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  // Bad arguments are refused when the call is made.
  EXPECT_EQ(b->ncclAllReduce(x, x, 3, static_cast<ncclDataType_t>(10), ncclSum, comm, nullptr),
            ncclInvalidArgument);  // fp8: not supported
  EXPECT_EQ(b->ncclAllReduce(x, x, 1 << 20, ncclFloat, ncclSum, comm, nullptr),
            ncclInvalidArgument);  // past the allocation
  EXPECT_EQ(b->ncclBroadcast(x, x, 3, ncclFloat, 1, comm, nullptr), ncclInvalidArgument);
  EXPECT_EQ(b->ncclAllReduce(x, x, 3, ncclFloat, ncclSum, reinterpret_cast<ncclComm_t>(&v),
                             nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(b->ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_EQ(b->cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(HostCopy(b.get(), x, 3), (std::vector<float>{1, 2, 3}));
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(b->ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(b->ncclCommFinalize(comm), ncclSuccess);
  EXPECT_EQ(b->ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(b->ncclCommDestroy(comm), ncclInvalidArgument);
}

TEST(HostCollectives, AllReduceAndGroupedRingInStreamOrder) {
  for (int n : {2, 4}) {
    RunRanks(n, [n](int r, HostCollectiveBackend* b, ncclComm_t comm) {
      cudaStream_t s = nullptr;
      ASSERT_EQ(b->cudaStreamCreate(&s), cudaSuccess);
      std::vector<float> host(100, static_cast<float>(r + 1));
      float* x = DeviceCopy(b, host);
      float* y = DeviceCopy(b, std::vector<float>(100, 0));
      ASSERT_EQ(b->ncclAllReduce(x, y, 100, ncclFloat, ncclSum, comm, s), ncclSuccess);
      // Ring: send x to the right, receive from the left into x (after the reduce read it).
      ASSERT_EQ(b->ncclGroupStart(), ncclSuccess);
      ASSERT_EQ(b->ncclRecv(x, 100, ncclFloat, (r + n - 1) % n, comm, s), ncclSuccess);
      ASSERT_EQ(b->ncclSend(y, 100, ncclFloat, (r + 1) % n, comm, s), ncclSuccess);
      ASSERT_EQ(b->ncclGroupEnd(), ncclSuccess);
      ASSERT_EQ(b->cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_EQ(HostCopy(b, y, 100)[99], n * (n + 1) / 2.0f);
      EXPECT_EQ(HostCopy(b, x, 100)[0], n * (n + 1) / 2.0f);
      ASSERT_EQ(b->cudaStreamDestroy(s), cudaSuccess);
    });
  }
}

TEST(HostCollectives, MismatchedCountsBecomeAsyncErrorsNotCrashes) {
  RunRanks(2, [](int r, HostCollectiveBackend* b, ncclComm_t comm) {
    float* x = DeviceCopy(b, std::vector<float>(64, 1.0f));
    ASSERT_EQ(b->ncclAllReduce(x, x, r == 0 ? 64 : 32, ncclFloat, ncclSum, comm, nullptr),
              ncclSuccess);
    EXPECT_EQ(b->cudaStreamSynchronize(nullptr), cudaErrorInvalidValue);
    ncclResult_t async = ncclSuccess;
    EXPECT_EQ(b->ncclCommGetAsyncError(comm, &async), ncclSuccess);
    EXPECT_EQ(async, ncclInvalidArgument);
    EXPECT_EQ(HostCopy(b, x, 64)[0], 1.0f);
  });
}

TEST(HostCollectives, PeerLeavingBecomesRemoteErrorWithinTheTimeout) {
  // Rank 1 destroys its communicator (closing its connections) without
  // joining the all-reduce: rank 0's operation fails, bounded, as a remote error.
  auto b0 = NewBackend(0);
  auto b1 = NewBackend(1);
  ncclUniqueId id;
  ASSERT_EQ(b0->ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c0 = nullptr, c1 = nullptr;
  std::thread t([&] { ASSERT_EQ(b1->ncclCommInitRank(&c1, 2, id, 1), ncclSuccess); });
  ASSERT_EQ(b0->ncclCommInitRank(&c0, 2, id, 0), ncclSuccess);
  t.join();
  ASSERT_EQ(b1->ncclCommDestroy(c1), ncclSuccess);
  b1.reset();
  float* x = DeviceCopy(b0.get(), std::vector<float>(32, 1.0f));
  ASSERT_EQ(b0->ncclAllReduce(x, x, 32, ncclFloat, ncclSum, c0, nullptr), ncclSuccess);
  EXPECT_EQ(b0->cudaStreamSynchronize(nullptr), cudaErrorLaunchFailure);
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(b0->ncclCommGetAsyncError(c0, &async), ncclSuccess);
  EXPECT_EQ(async, ncclRemoteError);
  // Later operations fail too (the engine is broken), still without hanging.
  ASSERT_EQ(b0->ncclAllReduce(x, x, 32, ncclFloat, ncclSum, c0, nullptr), ncclSuccess);
  EXPECT_NE(b0->cudaStreamSynchronize(nullptr), cudaSuccess);
  EXPECT_EQ(b0->ncclCommDestroy(c0), ncclSuccess);
}

TEST(HostCollectives, GroupAcrossTwoStreamsKeepsBothInOrder) {
  RunRanks(2, [](int r, HostCollectiveBackend* b, ncclComm_t comm) {
    cudaStream_t s1 = nullptr, s2 = nullptr;
    ASSERT_EQ(b->cudaStreamCreate(&s1), cudaSuccess);
    ASSERT_EQ(b->cudaStreamCreate(&s2), cudaSuccess);
    int32_t* a = DeviceCopy(b, std::vector<int32_t>(8, r + 1));
    int32_t* c = DeviceCopy(b, std::vector<int32_t>(8, 10 * (r + 1)));
    ASSERT_EQ(b->ncclGroupStart(), ncclSuccess);
    ASSERT_EQ(b->ncclAllReduce(a, a, 8, ncclInt32, ncclSum, comm, s1), ncclSuccess);
    ASSERT_EQ(b->ncclGroupStart(), ncclSuccess);  // nested
    ASSERT_EQ(b->ncclAllReduce(c, c, 8, ncclInt32, ncclMax, comm, s2), ncclSuccess);
    ASSERT_EQ(b->ncclGroupEnd(), ncclSuccess);
    ASSERT_EQ(b->ncclGroupEnd(), ncclSuccess);
    // Synchronizing only s2 must cover the group (s2's later work waits for it).
    ASSERT_EQ(b->cudaStreamSynchronize(s2), cudaSuccess);
    EXPECT_EQ(HostCopy(b, c, 8)[7], 20);
    ASSERT_EQ(b->cudaStreamSynchronize(s1), cudaSuccess);
    EXPECT_EQ(HostCopy(b, a, 8)[0], 3);
  });
}

TEST(HostCollectives, PeerThatNeverCallsIsASystemErrorAfterTheTimeout) {
  setenv("REVENANT_COLLECTIVE_TIMEOUT_S", "1", 1);
  auto b0 = NewBackend(0);
  auto b1 = NewBackend(1);
  ncclUniqueId id;
  ASSERT_EQ(b0->ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t c0 = nullptr, c1 = nullptr;
  std::thread t([&] { ASSERT_EQ(b1->ncclCommInitRank(&c1, 2, id, 1), ncclSuccess); });
  ASSERT_EQ(b0->ncclCommInitRank(&c0, 2, id, 0), ncclSuccess);
  t.join();
  unsetenv("REVENANT_COLLECTIVE_TIMEOUT_S");
  float* x = DeviceCopy(b0.get(), std::vector<float>(32, 1.0f));
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(b0->ncclAllReduce(x, x, 32, ncclFloat, ncclSum, c0, nullptr), ncclSuccess);
  EXPECT_EQ(b0->cudaStreamSynchronize(nullptr), cudaErrorLaunchTimeout);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  ncclResult_t async = ncclSuccess;
  EXPECT_EQ(b0->ncclCommGetAsyncError(c0, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSystemError);
  EXPECT_EQ(b0->ncclCommAbort(c0), ncclSuccess);
  EXPECT_EQ(b1->ncclCommAbort(c1), ncclSuccess);
}

}  // namespace
}  // namespace host
}  // namespace agent
}  // namespace revenant
