// Runs everywhere (CI has no GPU): the cuda backend's NCCL rows link the real
// libnccl, answer the version, refuse unknown communicators and bad ranks,
// refuse to re-create a communicator of several ranks during a replay when
// the job does not recover, and with recovery create it as one that joins
// the survivors at the epoch (its queries answered, its setup-log
// collectives skipped, its join bounded and reported through the job
// directory); and either create a 1-rank communicator (a GPU is there; in a
// replay with a fresh unique id) or fail cleanly and promptly (no GPU) --
// never a crash or a hang.
#include "agent/backends/cuda/cuda_nccl.h"

#include <cuda_runtime_api.h>

#include <stdlib.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "agent/backends/cuda/cuda_nccl_recovery.h"
#include "agent/backends/cuda/cuda_nccl_start.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

bool HaveGpu() {
  int n = 0;
  return ::cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// A job directory: <root>/rank1 (the agent's), the epoch file in <root>.
std::string JobRoot() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = std::string(base != nullptr ? base : "/tmp") + "/ncclXXXXXX";
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  mkdir((t + "/rank1").c_str(), 0700);
  return t;
}

void DeclareEpoch(const std::string& root, int epoch) {
  std::ofstream(root + "/epoch") << epoch << "\n";
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

CudaNcclOptions Recovering(int rank, double seconds) {
  CudaNcclOptions o;
  o.rank = rank;
  o.recovery_timeout = absl::Seconds(seconds);
  return o;
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

TEST(CudaNcclTest, ReplayRefusesSeveralRanksWhenTheJobDoesNotRecover) {
  CudaNccl nccl(0, "");
  nccl.SetReplayPhase(ReplayPhase::kSetupLog);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  ncclComm_t comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(nccl.CommInitRankConfig(&comm, 2, id, 0, nullptr), ncclInvalidUsage);
  EXPECT_EQ(comm, nullptr);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
            1.0);
}

TEST(CudaNcclTest, AReplacementsCommunicatorJoinsAtTheEpochAndItsWaitIsBounded) {
  const std::string root = JobRoot();
  CudaNccl nccl(0, root + "/rank1", Recovering(1, 1.0));
  nccl.SetReplayPhase(ReplayPhase::kSetupLog);
  ncclUniqueId id;
  std::memset(&id, 0x21, sizeof(id));
  ncclComm_t comm = nullptr;
  auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(nccl.CommInitRankConfig(&comm, 4, id, 1, nullptr), ncclSuccess);
  ASSERT_NE(comm, nullptr);
  EXPECT_LT(Since(start), 1.0);  // no NCCL, no agreement: it joins later
  int count = 0, rank = -1;
  ncclResult_t async = ncclInternalError;
  EXPECT_EQ(nccl.CommCount(comm, &count), ncclSuccess);
  EXPECT_EQ(nccl.CommUserRank(comm, &rank), ncclSuccess);
  EXPECT_EQ(nccl.CommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(count, 4);
  EXPECT_EQ(rank, 1);
  EXPECT_EQ(async, ncclSuccess);
  // The setup log's collectives are history: skipped, nothing reaches NCCL.
  EXPECT_EQ(nccl.AllReduce(nullptr, nullptr, 16, ncclFloat, ncclSum, comm, nullptr),
            ncclSuccess);
  nccl.MarkBoundary(3);
  nccl.SetReplayPhase(ReplayPhase::kMinibatchLog);
  // No epoch declared: the join gives up after the recovery timeout.
  bool behind = true;
  start = std::chrono::steady_clock::now();
  absl::Status s = nccl.JoinRecovery(3, &behind);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("no recovery epoch"), std::string::npos) << s;
  EXPECT_GE(Since(start), 0.9);
  EXPECT_LT(Since(start), 5.0);
  // Epoch 1 declared, the survivors never report: bounded again, and this
  // rank's report says where it stands.
  DeclareEpoch(root, 1);
  start = std::chrono::steady_clock::now();
  s = nccl.JoinRecovery(3, &behind);
  EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
  EXPECT_NE(s.message().find("rank(s) 0, 2, 3 of 4 did not report"), std::string::npos) << s;
  EXPECT_LT(Since(start), 5.0);
  const std::string key = IdHash(absl::string_view(id.internal, sizeof(id.internal)));
  absl::StatusOr<NcclRecoveryReport> mine =
      ParseRecoveryReport(ReadFile(RecoveryDirFor(root, key, 1) + "/report1"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->rank, 1);
  EXPECT_TRUE(mine->report.replacement);
  EXPECT_EQ(mine->report.minibatch, 3u);
  EXPECT_EQ(mine->report.pending, (UnitOrdinal{3, 0}));
  EXPECT_EQ(mine->unique_id_hex, "");  // rank 0 names the new id
  EXPECT_EQ(nccl.CommDestroy(comm), ncclSuccess);
}

TEST(CudaNcclTest, AJoinFollowsTheSurvivorsPlanUpToTheNewCommunicator) {
  // Three fake survivors report (rank 0 with a new id), the state source
  // hands over state; the replacement takes it and then creates the new
  // communicator: without a GPU that fails, and the recovery ends within
  // its bound instead of hanging.
  const std::string root = JobRoot();
  CudaNccl nccl(0, root + "/rank1", Recovering(1, 3.0));
  nccl.SetStateAccess([] { return std::vector<std::pair<uint64_t, uint64_t>>{}; }, 0);
  nccl.SetReplayPhase(ReplayPhase::kSetupLog);
  ncclUniqueId id;
  std::memset(&id, 0x42, sizeof(id));
  ncclComm_t comm = nullptr;
  ASSERT_EQ(nccl.CommInitRankConfig(&comm, 4, id, 1, nullptr), ncclSuccess);
  nccl.SetReplayPhase(ReplayPhase::kMinibatchLog);
  DeclareEpoch(root, 2);
  const std::string dir =
      RecoveryDirFor(root, IdHash(absl::string_view(id.internal, sizeof(id.internal))), 2);
  for (int r : {0, 2, 3}) {
    NcclRecoveryReport s;
    s.rank = r;
    s.report.pending = {5, 2};
    if (r == 0) s.unique_id_hex = std::string(2 * sizeof(id.internal), '0');
    ASSERT_TRUE(WriteRecoveryBlob(dir, "report" + std::to_string(r), FormatRecoveryReport(s)).ok());
  }
  UnitResults done;
  done[{5, 0}] = {"r0"};
  done[{5, 1}] = {"r1"};
  ASSERT_TRUE(WriteRecoveryBlob(dir, "units", EncodeUnits(done)).ok());
  ASSERT_TRUE(WriteRecoveryBlob(dir, "state", EncodeState({{0, "params"}})).ok());
  bool behind = true;
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = nccl.JoinRecovery(5, &behind);
  EXPECT_LT(Since(start), 30.0);
  // (With a GPU too: the fake survivors never join the new communicator.)
  EXPECT_FALSE(s.ok());
  EXPECT_FALSE(behind);  // the state source is in minibatch 5, as the replacement
  EXPECT_EQ(nccl.CommDestroy(comm), ncclSuccess);
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
  nccl.SetReplayPhase(ReplayPhase::kSetupLog);
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
