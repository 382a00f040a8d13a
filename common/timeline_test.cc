#include "common/timeline.h"

#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace revenant {
namespace timeline {
namespace {

TEST(TimelineTest, DisabledKeepsNothing) {
  SetEnabledForTest(false);
  Clear();
  Add("nothing", 1, 2);
  { Span s("span"); }
  SetEnabledForTest(true);
  EXPECT_TRUE(Lines().empty());
  SetEnabledForTest(false);
}

TEST(TimelineTest, EventsComeOutInStartOrderWithTheirDurations) {
  SetEnabledForTest(true);
  Clear();
  Add("later", 3'000'000'000, 3'002'500'000, "554 MiB");
  Add("earlier", 1'500'000'000, 1'500'250'000);
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(2u, lines.size());
  EXPECT_EQ("timeline 1.500000 0.250 ms earlier", lines[0]);
  EXPECT_EQ("timeline 3.000000 2.500 ms later: 554 MiB", lines[1]);
  SetEnabledForTest(false);
}

TEST(TimelineTest, SpansFromSeveralThreadsAndABound) {
  SetEnabledForTest(true);
  Clear();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([] {
      for (int i = 0; i < 1100; ++i) {
        Span s("span");
        s.set_detail("d");
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(kMaxEvents + 1, lines.size());
  EXPECT_EQ("timeline: 304 later events left out (at most 4096 kept)", lines.back());
  EXPECT_NE(std::string::npos, lines.front().find(" ms span: d"));
  Clear();
  SetEnabledForTest(false);
}

}  // namespace
}  // namespace timeline
}  // namespace revenant
