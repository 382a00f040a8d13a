// The NCCL start agreement without a GPU: the verdict from fake rank facts,
// the line format, and the exchange through a directory by several "ranks"
// (threads) that must all reach the same verdict within a bound.
#include "agent/backends/cuda/cuda_nccl_start.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
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

StartRankInfo Rank(int r, int version, const std::string& uuid, const std::string& pci,
                   const std::string& host = "node0", const std::string& host_id = "") {
  StartRankInfo i;
  i.rank = r;
  i.nccl_version = version;
  i.device_uuid = uuid;
  i.pci_bus_id = pci;
  i.host = host;
  i.nccl_host_id = host_id;
  return i;
}

std::string TempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = std::string(base != nullptr ? base : "/tmp") + "/ncclstartXXXXXX";
  EXPECT_NE(mkdtemp(t.data()), nullptr);
  return t;
}

TEST(NcclStart, DistinctGpusAndNewNcclAgree) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "0000:18:00.0"),
                                    Rank(1, 22809, "aa02", "0000:2a:00.0"),
                                    Rank(2, 22200, "aa03", "0000:3a:00.0")};
  StartVerdict v = DecideStart(all, 3, kMinNcclVersion);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_TRUE(v.message.empty());
  EXPECT_TRUE(v.offending.empty());
  EXPECT_TRUE(v.shared.empty());
}

TEST(NcclStart, RanksSharingAGpuWithAHostIdEachAgree) {
  std::vector<StartRankInfo> all;
  for (int r = 0; r < 4; ++r) {
    all.push_back(Rank(r, 22803, "aa01", "0000:18:00.0", "node0", SharedGpuHostId("node0", r)));
  }
  StartVerdict v = DecideStart(all, 4, kMinNcclVersion);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_EQ(v.shared, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
}

TEST(NcclStart, OneHostIdExportedToEveryRankIsAnAccidentalDuplicate) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "p0", "node0", "same"),
                                    Rank(1, 22809, "aa01", "p0", "node0", "same"),
                                    Rank(2, 22809, "aa02", "p2", "node0", "same")};
  StartVerdict v = DecideStart(all, 3, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{0, 1}));  // rank 2 has a GPU of its own
  EXPECT_NE(v.message.find("ranks 0, 1 use the same GPU (uuid aa01) with the same NCCL_HOSTID"),
            std::string::npos)
      << v.message;
  EXPECT_TRUE(v.shared.empty());
}

TEST(NcclStart, ASharedGpuNeedsAHostIdOnEveryRankOfIt) {
  // Ranks 0 and 1 share GPU aa01 properly; ranks 2 and 3 share aa02 and
  // only rank 2 has a host id.
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "p0", "n", "n-0"),
                                    Rank(1, 22809, "aa01", "p0", "n", "n-1"),
                                    Rank(2, 22809, "aa02", "p2", "n", "n-2"),
                                    Rank(3, 22809, "aa02", "p2", "n", "")};
  StartVerdict v = DecideStart(all, 4, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{2, 3}));
  EXPECT_NE(v.message.find("ranks 2, 3 use the same GPU (uuid aa02) and not every one of them "
                           "has an NCCL_HOSTID"),
            std::string::npos)
      << v.message;
  EXPECT_EQ(v.message.find("ranks 0, 1"), std::string::npos) << v.message;
}

TEST(NcclStart, SharedPciBusWithoutUuidAcceptsDistinctHostIds) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "", "0000:18:00.0", "a", "a-0"),
                                    Rank(1, 22809, "", "0000:18:00.0", "a", "a-1")};
  StartVerdict v = DecideStart(all, 2, kMinNcclVersion);
  EXPECT_TRUE(v.ok) << v.message;
  EXPECT_EQ(v.shared, (std::vector<std::vector<int>>{{0, 1}}));
}

TEST(NcclStart, SharedGpuHostIdsAreDistinctPerRankAndClean) {
  EXPECT_EQ(SharedGpuHostId("gpu-node", 3), "gpu-node-revenant-rank3");
  EXPECT_NE(SharedGpuHostId("h", 1), SharedGpuHostId("h", 2));
  EXPECT_EQ(SharedGpuHostId("", 0), "host-revenant-rank0");
  // A value with a space or '=' would break the line format.
  const std::string odd = SharedGpuHostId("a b=c", 1);
  EXPECT_EQ(odd.find_first_of(" ="), std::string::npos) << odd;
  absl::StatusOr<StartRankInfo> back =
      ParseStartInfo(FormatStartInfo(Rank(1, 22809, "u", "p", "a", odd)));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->nccl_host_id, odd);
}

TEST(NcclStart, TwoRanksOnOneGpuAreNamed) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "0000:18:00.0"),
                                    Rank(1, 22809, "aa02", "0000:2a:00.0"),
                                    Rank(2, 22809, "aa01", "0000:18:00.0"),
                                    Rank(3, 22809, "aa04", "0000:4a:00.0")};
  StartVerdict v = DecideStart(all, 4, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{0, 2}));
  EXPECT_NE(v.message.find("ranks 0, 2 use the same GPU (uuid aa01)"), std::string::npos)
      << v.message;
  // The message appears once, not once per key.
  EXPECT_EQ(v.message.find("use the same GPU", v.message.find("use the same GPU") + 1),
            std::string::npos)
      << v.message;
}

TEST(NcclStart, SamePciBusOnOneHostWithoutUuidIsOneGpu) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "", "0000:18:00.0", "a"),
                                    Rank(1, 22809, "", "0000:18:00.0", "b"),
                                    Rank(2, 22809, "", "0000:18:00.0", "a")};
  StartVerdict v = DecideStart(all, 3, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{0, 2}));  // rank 1 is on host b
}

TEST(NcclStart, OldNcclIsNamedWithItsVersion) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "p0"), Rank(1, 22104, "aa02", "p1")};
  StartVerdict v = DecideStart(all, 2, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{1}));
  EXPECT_NE(v.message.find("rank 1 runs NCCL 2.21.4, older than 2.22.0"), std::string::npos)
      << v.message;
}

TEST(NcclStart, MissingRanksAreNamed) {
  std::vector<StartRankInfo> all = {Rank(0, 22809, "aa01", "p0"), Rank(2, 22809, "aa03", "p2")};
  StartVerdict v = DecideStart(all, 4, kMinNcclVersion);
  EXPECT_FALSE(v.ok);
  EXPECT_EQ(v.offending, (std::vector<int>{1, 3}));
}

TEST(NcclStart, VerdictDoesNotDependOnInputOrder) {
  std::vector<StartRankInfo> a = {Rank(0, 22809, "u", "p0"), Rank(1, 21000, "v", "p1"),
                                  Rank(2, 22809, "u", "p0")};
  std::vector<StartRankInfo> b = {a[2], a[0], a[1]};
  StartVerdict va = DecideStart(a, 3, kMinNcclVersion);
  StartVerdict vb = DecideStart(b, 3, kMinNcclVersion);
  EXPECT_FALSE(va.ok);
  EXPECT_EQ(va.message, vb.message);
  EXPECT_EQ(va.offending, (std::vector<int>{0, 1, 2}));
}

TEST(NcclStart, LineRoundTripsAndBadLinesAreRefused) {
  StartRankInfo i = Rank(3, 22809, "0badf00d", "0000:18:00.0", "h-1", "h-1-revenant-rank3");
  absl::StatusOr<StartRankInfo> back = ParseStartInfo(FormatStartInfo(i));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->rank, 3);
  EXPECT_EQ(back->nccl_version, 22809);
  EXPECT_EQ(back->device_uuid, "0badf00d");
  EXPECT_EQ(back->pci_bus_id, "0000:18:00.0");
  EXPECT_EQ(back->host, "h-1");
  EXPECT_EQ(back->nccl_host_id, "h-1-revenant-rank3");
  StartRankInfo empty = Rank(0, 1, "", "", "");
  back = ParseStartInfo(FormatStartInfo(empty));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->device_uuid, "");
  EXPECT_EQ(back->nccl_host_id, "");
  EXPECT_FALSE(ParseStartInfo("rank=1 version=2").ok());
  // A line without the host id (an agent of another build) is refused.
  EXPECT_FALSE(ParseStartInfo("rank=1 version=2 uuid=a pci=b host=c").ok());
  EXPECT_FALSE(ParseStartInfo("rank=x version=2 uuid=a pci=b host=c").ok());
  EXPECT_FALSE(ParseStartInfo("garbage").ok());
  // Values FormatStartInfo cannot write are refused, so that every line
  // read back is one a rank could have written (the cuda_agreement fuzzer
  // found "pci=0=..." parsed, then formatted as "pci=-").
  EXPECT_TRUE(ParseStartInfo("rank=1 version=2 uuid=a pci=b host=c hostid=-").ok());
  EXPECT_FALSE(ParseStartInfo("rank=1 version=2 uuid=a pci=0=b host=c hostid=-").ok());
  EXPECT_FALSE(ParseStartInfo("rank=1 version=2 uuid=a\tb pci=b host=c hostid=-").ok());
  EXPECT_FALSE(ParseStartInfo("rank=1 version=2 uuid= pci=b host=c hostid=-").ok());
}

TEST(NcclStart, RanksExchangeThroughADirectoryAndAgree) {
  const std::string dir = TempDir() + "/agree";
  constexpr int kRanks = 4;
  // Ranks 1 and 3 share a GPU: every rank must see that.
  const std::vector<StartRankInfo> facts = {
      Rank(0, 22809, "g0", "p0"), Rank(1, 22809, "g1", "p1"), Rank(2, 22809, "g2", "p2"),
      Rank(3, 22809, "g1", "p1")};
  std::vector<StartVerdict> verdicts(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::SleepFor(absl::Milliseconds(5 * (kRanks - r)));  // arrive out of order
      absl::StatusOr<std::vector<StartRankInfo>> all =
          ExchangeStartInfo(dir, facts[r], kRanks, deadline);
      if (!all.ok()) {
        errors[r] = all.status().ToString();
        return;
      }
      verdicts[r] = DecideStart(*all, kRanks, kMinNcclVersion);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_FALSE(verdicts[r].ok);
    EXPECT_EQ(verdicts[r].message, verdicts[0].message);
    EXPECT_EQ(verdicts[r].offending, (std::vector<int>{1, 3}));
  }
}

TEST(NcclStart, RanksSharingOneGpuExchangeAndAgreeToStart) {
  const std::string dir = TempDir() + "/shared";
  constexpr int kRanks = 4;
  std::vector<StartVerdict> verdicts(kRanks);
  std::vector<std::string> errors(kRanks);
  std::vector<std::thread> threads;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::vector<StartRankInfo>> all = ExchangeStartInfo(
          dir, Rank(r, 22803, "g0", "p0", "node0", SharedGpuHostId("node0", r)), kRanks,
          deadline);
      if (!all.ok()) {
        errors[r] = all.status().ToString();
        return;
      }
      verdicts[r] = DecideStart(*all, kRanks, kMinNcclVersion);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(errors[r].empty()) << "rank " << r << ": " << errors[r];
    EXPECT_TRUE(verdicts[r].ok) << verdicts[r].message;
    EXPECT_EQ(verdicts[r].shared, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  }
}

TEST(NcclStart, AMissingRankTimesOutWithinTheBoundNamingIt) {
  const std::string dir = TempDir() + "/missing";
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StartRankInfo>> all =
      ExchangeStartInfo(dir, Rank(0, 22809, "g0", "p0"), 3, start + absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - start;
  ASSERT_FALSE(all.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(all.status())) << all.status();
  EXPECT_NE(all.status().message().find("rank(s) 1, 2 of 3"), std::string::npos)
      << all.status();
  EXPECT_GE(took, absl::Milliseconds(300));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST(NcclStart, BadRankOrForeignFileIsAnError) {
  const std::string dir = TempDir() + "/bad";
  EXPECT_TRUE(absl::IsInvalidArgument(
      ExchangeStartInfo(dir, Rank(2, 22809, "g", "p"), 2, absl::Now()).status()));
  // A file that names another rank than its own name says.
  ASSERT_TRUE(ExchangeStartInfo(dir, Rank(0, 22809, "g0", "p0"), 1, absl::Now()).ok());
  std::FILE* f = std::fopen((dir + "/rank1").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("rank=5 version=22809 uuid=g pci=p host=h hostid=-\n", f);
  std::fclose(f);
  absl::StatusOr<std::vector<StartRankInfo>> all =
      ExchangeStartInfo(dir, Rank(0, 22809, "g0", "p0"), 2, absl::Now() + absl::Seconds(5));
  ASSERT_FALSE(all.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(all.status())) << all.status();
}

TEST(NcclStart, DirectoryFollowsTheUniqueId) {
  std::string a(128, '\0'), b(128, '\0');
  b[7] = 1;
  EXPECT_NE(StartDirFor("/dev/shm/revenant-j", a), StartDirFor("/dev/shm/revenant-j", b));
  EXPECT_EQ(StartDirFor("/dev/shm/revenant-j", a), StartDirFor("/dev/shm/revenant-j", a));
  EXPECT_EQ(StartDirFor("/r", a).rfind("/r/nccl-start-", 0), 0u);
}

}  // namespace
}  // namespace cuda
}  // namespace agent
}  // namespace revenant
