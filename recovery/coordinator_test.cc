#include "recovery/coordinator.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>
#include <string>

#include "absl/time/clock.h"
#include "common/events.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace recovery {
namespace {

using ::testing::HasSubstr;

// Wait statuses as waitpid reports them.
int Killed(int sig) { return sig & 0x7f; }
int Exited(int code) { return (code & 0xff) << 8; }

std::string TempDir() {
  std::string t = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                  "/coordXXXXXX";
  return mkdtemp(t.data());
}

std::string Contents(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(CoordinatorTest, WaitStatusHelpersMatchTheSystemMacros) {
  ASSERT_TRUE(WIFSIGNALED(Killed(SIGKILL)));
  ASSERT_EQ(SIGKILL, WTERMSIG(Killed(SIGKILL)));
  ASSERT_TRUE(WIFEXITED(Exited(3)));
  ASSERT_EQ(3, WEXITSTATUS(Exited(3)));
}

TEST(CoordinatorTest, AKilledAgentIsReplacedAfterTheWindowInANewEpoch) {
  const std::string dir = TempDir();
  Coordinator c({dir, true, 8, absl::Milliseconds(800)});
  const absl::Time t0 = absl::Now();
  EXPECT_EQ(absl::InfiniteFuture(), c.replacements_due()) << "nothing pending";
  EXPECT_TRUE(c.AgentDied(2, Killed(SIGKILL), t0));
  EXPECT_TRUE(c.replacements_pending());
  EXPECT_EQ(1, c.replacements_pending_count());
  EXPECT_EQ(t0 + absl::Milliseconds(800), c.replacements_due()) << "the launcher polls until then";
  EXPECT_TRUE(c.DueReplacements(t0 + absl::Milliseconds(799)).empty());
  EXPECT_EQ(0, ReadRecoveryEpoch(dir)) << "no epoch before the window ends";
  std::vector<Coordinator::Replacement> due = c.DueReplacements(t0 + absl::Milliseconds(800));
  ASSERT_EQ(1u, due.size());
  EXPECT_EQ(2, due[0].rank);
  EXPECT_FALSE(due[0].spare.has_value());
  EXPECT_EQ(1, c.epoch());
  EXPECT_EQ(1, ReadRecoveryEpoch(dir));
  EXPECT_FALSE(c.replacements_pending());
  EXPECT_EQ(0, c.replacements_pending_count());
  EXPECT_EQ(absl::InfiniteFuture(), c.replacements_due());
  EXPECT_TRUE(c.DueReplacements(t0 + absl::Seconds(5)).empty()) << "handed out once";
  EXPECT_THAT(Contents(dir + "/events.jsonl"), HasSubstr("\"agent_died\""));
}

TEST(CoordinatorTest, DeathsInOneWindowShareOneEpochAndSparesGoInOrder) {
  const std::string dir = TempDir();
  Coordinator c({dir, true, 8, absl::Milliseconds(800)});
  c.AddSpare(10);
  c.AddSpare(11);
  c.AddSpare(10);  // once
  EXPECT_EQ(2, c.spares_waiting());
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(c.AgentDied(3, Killed(SIGKILL), t0));
  EXPECT_TRUE(c.AgentDied(1, Killed(SIGSEGV), t0 + absl::Milliseconds(500)));
  // The window counts from the first death.
  std::vector<Coordinator::Replacement> due = c.DueReplacements(t0 + absl::Milliseconds(800));
  ASSERT_EQ(2u, due.size());
  EXPECT_EQ(3, due[0].rank);
  EXPECT_EQ(std::optional<int>(10), due[0].spare);
  EXPECT_EQ(1, due[1].rank);
  EXPECT_EQ(std::optional<int>(11), due[1].spare);
  EXPECT_EQ(1, c.epoch());
  EXPECT_EQ(0, c.spares_waiting());
  // A later death: the next epoch, no spare left.
  EXPECT_TRUE(c.AgentDied(0, Killed(SIGKILL), t0 + absl::Seconds(3)));
  due = c.DueReplacements(t0 + absl::Seconds(4));
  ASSERT_EQ(1u, due.size());
  EXPECT_FALSE(due[0].spare.has_value());
  EXPECT_EQ(2, ReadRecoveryEpoch(dir));
}

TEST(CoordinatorTest, AnAgentThatExitsByItselfOrPastTheLimitIsNotReplaced) {
  const std::string dir = TempDir();
  Coordinator c({dir, true, 1, absl::Milliseconds(1)});
  const absl::Time t0 = absl::Now();
  EXPECT_FALSE(c.AgentDied(0, Exited(1), t0)) << "a deliberate exit";
  EXPECT_FALSE(c.AgentDied(0, Exited(0), t0));
  EXPECT_TRUE(c.AgentDied(0, Killed(SIGKILL), t0));
  EXPECT_FALSE(c.AgentDied(1, Killed(SIGKILL), t0)) << "past max_recoveries";
  EXPECT_EQ(1, c.recoveries());
  EXPECT_EQ(1u, c.DueReplacements(t0 + absl::Seconds(1)).size());

  Coordinator off({TempDir(), false, 8, absl::Milliseconds(1)});
  EXPECT_FALSE(off.AgentDied(0, Killed(SIGKILL), t0)) << "recovery off";
  EXPECT_TRUE(off.DueReplacements(t0 + absl::Seconds(1)).empty());
}

TEST(CoordinatorTest, ARankWhoseReplacementsKeepDyingAtOnceIsGivenUp) {
  const std::string dir = TempDir();
  Coordinator c({dir, true, 16, absl::Milliseconds(1), 3, absl::Seconds(30)});
  absl::Time t = absl::Now();
  // The first death is the agent's own; then its replacements die 2 s after
  // their start, twice: still replaced.
  ASSERT_TRUE(c.AgentDied(1, Killed(SIGSEGV), t));
  for (int i = 0; i < 2; ++i) {
    t += absl::Seconds(1);
    ASSERT_EQ(1u, c.DueReplacements(t).size());
    c.ReplacementStarted(1, "new process", t);
    t += absl::Seconds(2);
    EXPECT_TRUE(c.AgentDied(1, Killed(SIGSEGV), t)) << i;
    EXPECT_FALSE(c.gave_up());
  }
  t += absl::Seconds(1);
  ASSERT_EQ(1u, c.DueReplacements(t).size());
  c.ReplacementStarted(1, "new process", t);
  // The third quick death in a row: given up, with the reason.
  EXPECT_FALSE(c.AgentDied(1, Killed(SIGSEGV), t + absl::Seconds(2)));
  EXPECT_TRUE(c.gave_up());
  EXPECT_THAT(c.give_up_reason(), HasSubstr("rank 1 died 3 times in a row"));
  EXPECT_THAT(Contents(dir + "/events.jsonl"), HasSubstr("\"recovery_abandoned\""));
  EXPECT_FALSE(c.AgentDied(2, Killed(SIGKILL), t + absl::Seconds(3))) << "nothing after";
}

TEST(CoordinatorTest, AReplacementThatLivedLongResetsTheCount) {
  Coordinator c({TempDir(), true, 16, absl::Milliseconds(1), 3, absl::Seconds(30)});
  absl::Time t = absl::Now();
  ASSERT_TRUE(c.AgentDied(0, Killed(SIGKILL), t));
  for (int i = 0; i < 6; ++i) {
    t += absl::Seconds(1);
    ASSERT_EQ(1u, c.DueReplacements(t).size());
    c.ReplacementStarted(0, "new process", t);
    // Alternately quick and long-lived: never three quick ones in a row.
    t += i % 2 == 0 ? absl::Seconds(2) : absl::Seconds(60);
    EXPECT_TRUE(c.AgentDied(0, Killed(SIGKILL), t)) << i;
  }
  EXPECT_FALSE(c.gave_up());
}

TEST(CoordinatorTest, ARankWhoseSpareCouldNotTakeItIsReplacedAgain) {
  const std::string dir = TempDir();
  Coordinator c({dir, true, 8, absl::Milliseconds(200)});
  const absl::Time t0 = absl::Now();
  c.AddSpare(10);
  ASSERT_TRUE(c.AgentDied(1, Killed(SIGKILL), t0));
  std::vector<Coordinator::Replacement> due = c.DueReplacements(t0 + absl::Milliseconds(200));
  ASSERT_EQ(1u, due.size());
  EXPECT_EQ(std::optional<int>(10), due[0].spare);
  c.ReplacementStarted(1, "spare, pid 10", t0 + absl::Milliseconds(200));
  // The spare exits with kAgentExitTakeoverFailed: the rank is planned
  // again, in the next epoch, by a new process (no spare waits).
  const absl::Time t1 = t0 + absl::Milliseconds(300);
  EXPECT_TRUE(c.ReplacementFailed(1, t1));
  EXPECT_EQ(t1 + absl::Milliseconds(200), c.replacements_due());
  due = c.DueReplacements(t1 + absl::Milliseconds(200));
  ASSERT_EQ(1u, due.size());
  EXPECT_EQ(1, due[0].rank);
  EXPECT_FALSE(due[0].spare.has_value());
  EXPECT_EQ(2, c.epoch());
  EXPECT_EQ(2, c.recoveries());
  EXPECT_THAT(Contents(dir + "/events.jsonl"), HasSubstr("\"replacement_failed\""));
  // Under the job's limit like any replacement.
  Coordinator none({TempDir(), true, 0, absl::Milliseconds(200)});
  EXPECT_FALSE(none.ReplacementFailed(1, t0));
}

TEST(CoordinatorTest, ARemovedSpareIsNotOffered) {
  Coordinator c({TempDir(), true, 8, absl::Milliseconds(1)});
  c.AddSpare(5);
  c.AddSpare(6);
  c.RemoveSpare(5);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(c.AgentDied(0, Killed(SIGKILL), t0));
  std::vector<Coordinator::Replacement> due = c.DueReplacements(t0 + absl::Seconds(1));
  ASSERT_EQ(1u, due.size());
  EXPECT_EQ(std::optional<int>(6), due[0].spare);
}

// A store whose epoch claims fail (etcd unreachable past its retries).
class UnreachableStore : public CoordinationStore {
 public:
  absl::StatusOr<int> ClaimNextEpoch() override {
    ++claims;
    return absl::UnavailableError("etcd at http://h:1 unreachable: 3 attempt(s)");
  }
  int LatestEpoch() override { return 0; }
  void RecordEvent(const std::string& event, int, int, const std::string&) override {
    events.push_back(event);
  }
  int claims = 0;
  std::vector<std::string> events;
};

TEST(CoordinatorTest, EventsAndEpochsGoToTheStoreItIsGiven) {
  const std::string dir = TempDir();
  UnreachableStore store;
  Coordinator c({dir, true, 8, absl::Milliseconds(0), 3, absl::Seconds(30), &store});
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(c.AgentDied(1, Killed(SIGKILL), t0));
  EXPECT_TRUE(c.DueReplacements(t0).empty()) << "no epoch: nothing may be replaced";
  EXPECT_EQ(1, store.claims);
  EXPECT_TRUE(c.gave_up());
  EXPECT_THAT(c.give_up_reason(), HasSubstr("cannot declare recovery epoch 1: etcd at http://h:1"));
  EXPECT_FALSE(c.replacements_pending());
  EXPECT_EQ(0, c.epoch());
  EXPECT_EQ((std::vector<std::string>{"agent_died", "recovery_abandoned"}), store.events);
  EXPECT_EQ(0, ReadRecoveryEpoch(dir)) << "the job directory is the store's business";
  EXPECT_EQ("", Contents(dir + "/events.jsonl"));
}

TEST(CoordinatorTest, AnEpochSeenFromAnotherNodeIsObservedNeverLowered) {
  Coordinator c({TempDir(), true, 8, absl::Milliseconds(0)});
  c.ObserveEpoch(4);
  EXPECT_EQ(4, c.epoch());
  c.ObserveEpoch(2);
  EXPECT_EQ(4, c.epoch());
}

TEST(CoordinatorTest, AssignmentMessageNamesTheRank) {
  const std::string m = Coordinator::AssignmentMessage(3, "/j/rank3/agent.sock", "/j/rank3", 1);
  EXPECT_THAT(m, HasSubstr("op=assign"));
  EXPECT_THAT(m, HasSubstr("rank=3"));
  EXPECT_THAT(m, HasSubstr("socket=/j/rank3/agent.sock"));
  EXPECT_THAT(m, HasSubstr("device=1"));
  EXPECT_THAT(m, HasSubstr("\nend\n"));
}

}  // namespace
}  // namespace recovery
}  // namespace revenant
