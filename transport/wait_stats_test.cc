// REVENANT_WAIT_STATS=1 and REVENANT_SPIN_US (both read once per process).
// Two targets (BUILD): REVENANT_SPIN_US=0, where a reply that comes 50 ms
// into a wait finds the waiter asleep on the futex, and REVENANT_SPIN_US=10000000
// (10 s: a loaded 2-core machine ran the replier ~100 ms late), where the waiter
// is still spinning. A reply already there is not
// a wait at all.
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "common/knobs.h"
#include "gtest/gtest.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace transport {
namespace {

using ::testing::HasSubstr;

TEST(WaitStatsTest, CountsWaitsAndSleepsPerKind) {
  ASSERT_EQ(std::optional<bool>(true), knobs::Bool(knobs::Id::kWaitStats));
  const std::optional<int64_t> spin = knobs::Int(knobs::Id::kSpinUs, 0, 10000000);
  ASSERT_TRUE(spin.has_value());
  const bool sleeps = *spin == 0;
  ASSERT_TRUE(sleeps || *spin == 10000000) << *spin;
  EXPECT_EQ("no waits", shm_internal::WaitStatsReport());

  const std::string path = absl::StrCat("/dev/shm/revenant-wait-stats-test-", getpid());
  ChannelOptions o;
  o.ring_capacity = 64 << 10;
  o.callback_ring_capacity = 4096;
  o.reply_slots = 4;
  o.reply_data_size = 4096;
  o.staging_size = 64 << 10;
  auto client = ShmClientChannel::Create(path, o);
  ASSERT_TRUE(client.ok()) << client.status();
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<int> slot = (*client)->AcquireReplySlot(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(slot.ok());

  // Replied before the wait: not a wait.
  (*server)->PostReply(*slot, 1, 0, 0);
  ASSERT_TRUE((*client)->WaitReply(*slot, 1, absl::Now() + absl::Seconds(5)).ok());
  EXPECT_EQ("no waits", shm_internal::WaitStatsReport());

  // Replied 50 ms into the wait.
  std::thread replier([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*server)->PostReply(*slot, 2, 0, 0);
  });
  ASSERT_TRUE((*client)->WaitReply(*slot, 2, absl::Now() + absl::Seconds(5)).ok());
  replier.join();
  const std::string report = shm_internal::WaitStatsReport();
  EXPECT_THAT(report, HasSubstr("a reply: 1 waits"));
  EXPECT_THAT(report, HasSubstr(sleeps ? "1 slept (100.0 %" : "0 slept (0.0 %")) << report;
  // The ring was never waited on.
  EXPECT_THAT(report, ::testing::Not(HasSubstr("a ring record")));
  unlink(path.c_str());
}

}  // namespace
}  // namespace transport
}  // namespace revenant
