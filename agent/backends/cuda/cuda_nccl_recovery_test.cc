// The agreement layer of recovery over real NCCL without a GPU: four
// "ranks" (threads) meet per epoch in a directory, reach the same plan,
// hand state and completed results over as files; a rank that never comes
// is named within the bound; a newer epoch preempts the wait.
#include "agent/backends/cuda/cuda_nccl_recovery.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = std::string(base != nullptr ? base : "/tmp") + "/ncclrecXXXXXX";
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  return t;
}

bool Exists(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0;
}

TEST(NcclRecovery, ReportLineRoundTripsAndBadLinesAreRefused) {
  NcclRecoveryReport r;
  r.rank = 2;
  r.report.pending = {17, 3};
  r.report.replacement = true;
  r.report.minibatch = 17;
  r.report.restored = true;
  r.unique_id_hex = "00ff10";
  absl::StatusOr<NcclRecoveryReport> back = ParseRecoveryReport(FormatRecoveryReport(r) + "\n");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 2);
  EXPECT_EQ(back->report.pending, (UnitOrdinal{17, 3}));
  EXPECT_TRUE(back->report.replacement);
  EXPECT_EQ(back->report.minibatch, 17u);
  EXPECT_TRUE(back->report.restored);
  EXPECT_EQ(back->unique_id_hex, "00ff10");
  r.unique_id_hex.clear();
  back = ParseRecoveryReport(FormatRecoveryReport(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->unique_id_hex, "");
  EXPECT_FALSE(ParseRecoveryReport("rank=1 pending=3 replacement=0 minibatch=0 restored=0 id=-")
                   .ok());  // pending needs M.I
  EXPECT_FALSE(ParseRecoveryReport("rank=1 pending=3.1 replacement=2 minibatch=0 restored=0 id=-")
                   .ok());
  EXPECT_FALSE(ParseRecoveryReport("rank=1 pending=3.1").ok());
}

TEST(NcclRecovery, FourRanksAgreeOnOnePlanAndTheReplacementGetsStateAndResults) {
  const std::string root = TempDir();
  const std::string dir = RecoveryDirFor(root, "abcd", 1);
  constexpr int kRanks = 4;
  // Rank 1 is the replacement (journal at minibatch 5); the survivors wait
  // at bucket 2 of minibatch 5, so units (5,0) and (5,1) are completed.
  const std::vector<StatePiece> state = {{0, std::string(1000, 'p')}, {4096, "grads"}};
  UnitResults completed;
  completed[{5, 0}] = {"bucket0"};
  completed[{5, 1}] = {"bucket1"};
  completed[{4, 3}] = {"older"};  // outside the plan's range: not sent
  std::vector<RecoveryPlan> plans(kRanks);
  std::vector<std::string> ids(kRanks), errors(kRanks);
  std::vector<std::vector<StatePiece>> got_state(kRanks);
  std::vector<UnitResults> got_units(kRanks);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::SleepFor(absl::Milliseconds(3 * (kRanks - r)));
      NcclRecoveryReport me;
      me.rank = r;
      me.report.replacement = r == 1;
      me.report.pending = r == 1 ? UnitOrdinal{5, 0} : UnitOrdinal{5, 2};
      me.report.minibatch = r == 1 ? 5 : 0;
      if (r == 0) me.unique_id_hex = "c0ffee";
      auto all = ExchangeRecoveryReports(dir, me, kRanks, deadline, nullptr);
      if (!all.ok()) {
        errors[r] = all.status().ToString();
        return;
      }
      ids[r] = (*all)[0].unique_id_hex;
      const RecoveryPlan p = PlanRecovery(Reports(*all));
      plans[r] = p;
      if (r == p.state_source) {
        EXPECT_TRUE(WriteRecoveryBlob(dir, "state", EncodeState(state)).ok());
      }
      if (r == p.provider) {
        UnitResults send;
        for (const auto& [ord, bufs] : completed) {
          if (!(ord < p.units_from) && ord < p.units_to) send[ord] = bufs;
        }
        EXPECT_TRUE(WriteRecoveryBlob(dir, "units", EncodeUnits(send)).ok());
      }
      if (me.report.replacement) {
        auto s = WaitRecoveryBlob(dir, "state", deadline, nullptr);
        auto u = WaitRecoveryBlob(dir, "units", deadline, nullptr);
        if (!s.ok() || !u.ok()) {
          errors[r] = "blobs missing";
          return;
        }
        got_state[r] = *DecodeState(*s);
        got_units[r] = *DecodeUnits(*u);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_EQ(ids[r], "c0ffee");
    EXPECT_EQ(plans[r].provider, plans[0].provider);
    EXPECT_EQ(plans[r].state_source, plans[0].state_source);
  }
  EXPECT_EQ(plans[0].state_source, 0);
  EXPECT_FALSE(plans[0].source_ahead);
  ASSERT_EQ(got_state[1].size(), 2u);
  EXPECT_EQ(got_state[1][0].bytes, std::string(1000, 'p'));
  EXPECT_EQ(got_state[1][1].offset, 4096u);
  EXPECT_EQ(got_state[1][1].bytes, "grads");
  ASSERT_EQ(got_units[1].size(), 2u);
  EXPECT_EQ(got_units[1][(UnitOrdinal{5, 1})], std::vector<std::string>{"bucket1"});
  EXPECT_EQ(got_units[1].count({4, 3}), 0u);
  // Cleanup after the epoch: this epoch's and older directories go.
  ASSERT_TRUE(Exists(dir));
  const std::string older = RecoveryDirFor(root, "abcd", 0);
  const std::string other = RecoveryDirFor(root, "beef", 1);
  ASSERT_TRUE(WriteRecoveryBlob(older, "x", "1").ok());
  ASSERT_TRUE(WriteRecoveryBlob(other, "x", "1").ok());
  RemoveRecoveryDirs(root, "abcd", 1);
  EXPECT_FALSE(Exists(dir));
  EXPECT_FALSE(Exists(older));
  EXPECT_TRUE(Exists(other));  // another communicator's
}

TEST(NcclRecovery, AMissingRankIsNamedWithinTheBound) {
  const std::string dir = RecoveryDirFor(TempDir(), "k", 2);
  NcclRecoveryReport me;
  me.rank = 0;
  const absl::Time start = absl::Now();
  auto all = ExchangeRecoveryReports(dir, me, 3, start + absl::Milliseconds(300), nullptr);
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(all.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(all.status())) << all.status();
  EXPECT_NE(all.status().message().find("rank(s) 1, 2 of 3 did not report"), std::string::npos)
      << all.status();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(5));
  const absl::Time t0 = absl::Now();
  auto blob = WaitRecoveryBlob(dir, "state", t0 + absl::Milliseconds(200), nullptr);
  EXPECT_TRUE(absl::IsDeadlineExceeded(blob.status())) << blob.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
}

TEST(NcclRecovery, ANewerEpochPreemptsTheWait) {
  const std::string dir = RecoveryDirFor(TempDir(), "k", 3);
  std::atomic<bool> newer{false};
  std::thread declare([&] {
    absl::SleepFor(absl::Milliseconds(100));
    newer.store(true);
  });
  NcclRecoveryReport me;
  me.rank = 1;
  const absl::Time start = absl::Now();
  auto all = ExchangeRecoveryReports(dir, me, 2, start + absl::Seconds(30),
                                     [&] { return newer.load(); });
  declare.join();
  EXPECT_TRUE(absl::IsAborted(all.status())) << all.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  auto blob = WaitRecoveryBlob(dir, "units", absl::Now() + absl::Seconds(30),
                               [&] { return newer.load(); });
  EXPECT_TRUE(absl::IsAborted(blob.status())) << blob.status();
}

TEST(NcclRecovery, AReportOfAnotherRankIsRefused) {
  const std::string dir = RecoveryDirFor(TempDir(), "k", 1);
  NcclRecoveryReport liar;
  liar.rank = 0;
  ASSERT_TRUE(WriteRecoveryBlob(dir, "report1", FormatRecoveryReport(liar)).ok());
  NcclRecoveryReport me;
  me.rank = 0;
  auto all = ExchangeRecoveryReports(dir, me, 2, absl::Now() + absl::Seconds(5), nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(all.status())) << all.status();
}

TEST(NcclRecovery, StateAndUnitsRoundTripAndTruncationIsDataLoss) {
  std::vector<StatePiece> st = {{0, "abc"}, {1 << 20, std::string(70000, 'z')}, {5, ""}};
  const std::string blob = EncodeState(st);
  auto back = DecodeState(blob);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_EQ(back->size(), 3u);
  EXPECT_EQ((*back)[1].offset, 1u << 20);
  EXPECT_EQ((*back)[1].bytes, std::string(70000, 'z'));
  EXPECT_TRUE(absl::IsDataLoss(DecodeState(blob.substr(0, blob.size() - 1)).status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeState(blob + "x").status()));
  UnitResults u;
  u[{1, 0}] = {"a", "", "bc"};
  u[{1, 1}] = {};
  const std::string ub = EncodeUnits(u);
  auto ub_back = DecodeUnits(ub);
  ASSERT_TRUE(ub_back.ok()) << ub_back.status();
  EXPECT_EQ(*ub_back, u);
  EXPECT_TRUE(absl::IsDataLoss(DecodeUnits(ub.substr(0, 20)).status()));
  EXPECT_TRUE(absl::IsDataLoss(DecodeUnits(blob).status()));  // a state blob is not results
}

}  // namespace
}  // namespace cuda
}  // namespace agent
}  // namespace revenant
