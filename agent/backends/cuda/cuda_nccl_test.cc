// Runs everywhere (CI has no GPU): the cuda backend's NCCL rows link the real
// libnccl, answer the version, refuse unknown communicators and bad ranks,
// refuse to re-create a communicator of several ranks during a replay, and
// either create a 1-rank communicator (a GPU is there; in a replay with a
// fresh unique id) or fail cleanly and promptly (no GPU) -- never a crash or
// a hang.
#include "agent/backends/cuda/cuda_nccl.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>

#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

bool HaveGpu() {
  int n = 0;
  return ::cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

TEST(CudaNcclTest, VersionIsTheLinkedNccl) {
  CudaNccl::LogEnvironment();
  CudaNccl nccl(0, "");
  int version = 0;
  ASSERT_EQ(nccl.GetVersion(&version), ncclSuccess);
  EXPECT_GE(version, 22800);
}

TEST(CudaNcclTest, UnknownCommunicatorsAreRefused) {
  CudaNccl nccl(0, "");
  ncclComm_t bogus = reinterpret_cast<ncclComm_t>(0x1234);
  int count = 0;
  ncclResult_t err = ncclSuccess;
  EXPECT_EQ(nccl.CommCount(bogus, &count), ncclInvalidArgument);
  EXPECT_EQ(nccl.CommGetAsyncError(bogus, &err), ncclInvalidArgument);
  EXPECT_EQ(nccl.AllReduce(nullptr, nullptr, 1, ncclFloat, ncclSum, bogus, nullptr),
            ncclInvalidArgument);
  EXPECT_EQ(nccl.CommDestroy(bogus), ncclInvalidArgument);
  EXPECT_EQ(nccl.GroupEnd(), ncclInvalidUsage);  // no group open
}

TEST(CudaNcclTest, ReplayRefusesSeveralRanksAtOnce) {
  CudaNccl nccl(0, "");
  nccl.SetReplaying(true);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclComm_t comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(nccl.CommInitRankConfig(&comm, 2, id, 0, nullptr), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            1.0);
}

TEST(CudaNcclTest, BadRanksAreRefusedBeforeAnyAgreement) {
  CudaNccl nccl(0, "");
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclComm_t comm = nullptr;
  EXPECT_EQ(nccl.CommInitRankConfig(&comm, 2, id, 2, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nccl.CommInitRankConfig(&comm, 0, id, 0, nullptr), ncclInvalidArgument);
  EXPECT_EQ(nccl.CommInitRankConfig(nullptr, 1, id, 0, nullptr), ncclInvalidArgument);
}

TEST(CudaNcclTest, ReplayRecreatesOneRankWithAFreshIdOrFailsCleanly) {
  const bool gpu = HaveGpu();
  CudaNccl nccl(0, "");
  nccl.SetReplaying(true);
  // The journaled id: its bootstrap is gone (here: never existed).
  ncclUniqueId stale;
  std::memset(&stale, 0x5a, sizeof(stale));
  ncclComm_t comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  ncclResult_t r = nccl.CommInitRankConfig(&comm, 1, stale, 0, nullptr);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            30.0);
  if (!gpu) {
    EXPECT_NE(r, ncclSuccess);
    EXPECT_NE(r, ncclInProgress);
    EXPECT_EQ(comm, nullptr);
    return;
  }
  ASSERT_EQ(r, ncclSuccess);
  int count = 0;
  EXPECT_EQ(nccl.CommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(nccl.GroupStart(), ncclSuccess);
  EXPECT_EQ(nccl.GroupEnd(), ncclSuccess);
  EXPECT_EQ(nccl.CommDestroy(comm), ncclSuccess);
}

TEST(CudaNcclTest, OneRankCommunicatorOrACleanFailure) {
  const bool gpu = HaveGpu();
  CudaNccl nccl(0, "");
  const auto start = std::chrono::steady_clock::now();
  ncclUniqueId id;
  ncclResult_t r = nccl.GetUniqueId(&id);
  ncclComm_t comm = nullptr;
  if (r == ncclSuccess) r = nccl.CommInitRankConfig(&comm, 1, id, 0, nullptr);
  const double s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(s, 30.0) << "bounded by REVENANT_COLLECTIVE_TIMEOUT_S=20";
  if (!gpu) {
    EXPECT_NE(r, ncclSuccess);
    EXPECT_NE(r, ncclInProgress);
    EXPECT_EQ(comm, nullptr);
    return;
  }
  ASSERT_EQ(r, ncclSuccess);
  int count = 0, rank = -1, device = -1;
  EXPECT_EQ(nccl.CommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(nccl.CommUserRank(comm, &rank), ncclSuccess);
  EXPECT_EQ(nccl.CommCuDevice(comm, &device), ncclSuccess);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(device, 0);
  EXPECT_EQ(nccl.CommDestroy(comm), ncclSuccess);
}

}  // namespace
}  // namespace cuda
}  // namespace agent
}  // namespace revenant
