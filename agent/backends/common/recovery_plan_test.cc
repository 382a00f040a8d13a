// The recovery plan from fake reports: the cases the chaos suites hit
// (a replacement in the survivors' minibatch, survivors a minibatch ahead,
// survivors stopped at different units, every member a replacement).
#include "agent/backends/common/recovery_plan.h"

#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

RecoveryReport Survivor(uint64_t m, uint64_t i) {
  RecoveryReport r;
  r.pending = {m, i};
  return r;
}

RecoveryReport Replacement(uint64_t minibatch, bool restored = false) {
  RecoveryReport r;
  r.pending = {minibatch, 0};
  r.replacement = true;
  r.minibatch = minibatch;
  r.restored = restored;
  return r;
}

TEST(RecoveryPlan, ReplacementInTheSurvivorsMinibatchGetsStateAndCompletedUnits) {
  // Killed mid all-reduce of bucket 2 of minibatch 7: survivors wait at (7, 2).
  const RecoveryPlan p = PlanRecovery({Survivor(7, 2), Replacement(7), Survivor(7, 2),
                                       Survivor(7, 2)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_FALSE(p.all_restored);
  EXPECT_EQ(p.provider, 0);
  EXPECT_EQ(p.state_source, 0);
  EXPECT_FALSE(p.source_ahead);
  EXPECT_EQ(p.units_from, (UnitOrdinal{7, 0}));  // the replacement's replay starts there
  EXPECT_EQ(p.units_to, (UnitOrdinal{7, 2}));
  EXPECT_EQ(p.replacements, (std::vector<int>{1}));
}

TEST(RecoveryPlan, SurvivorsAMinibatchAheadMakeTheReplacementSkip) {
  // Killed after the last all-reduce of minibatch 7 completed everywhere.
  const RecoveryPlan p = PlanRecovery({Replacement(7), Survivor(8, 0), Survivor(8, 0)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.provider, 1);
  EXPECT_EQ(p.state_source, 1);
  EXPECT_TRUE(p.source_ahead);
}

// Found by the chaos suite (random trials 31 and 116 of seed 20261202): rank 2
// killed after minibatch 3's optimizer step, before its boundary, then rank 1
// killed during that recovery, in minibatch 4 like the survivors. The state
// comes from a survivor in minibatch 4; only the replacement still in
// minibatch 3 skips the rest of it. Deciding by the first replacement's
// minibatch (rank 1's) made rank 2 replay its optimizer step a second time.
TEST(RecoveryPlan, ReplacementsAMinibatchApartEachSkipByTheirOwnMinibatch) {
  const RecoveryPlan p =
      PlanRecovery({Survivor(4, 0), Replacement(4), Replacement(3), Survivor(4, 0)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.state_source, 0);
  EXPECT_EQ(p.replacements, (std::vector<int>{1, 2}));
  EXPECT_EQ(p.skip_rest, (std::vector<int>{2}));
  EXPECT_FALSE(p.Skips(1));
  EXPECT_TRUE(p.Skips(2));
  EXPECT_TRUE(p.source_ahead);
  // The same with the replacements in the other order.
  const RecoveryPlan q =
      PlanRecovery({Survivor(4, 0), Replacement(3), Replacement(4), Survivor(4, 0)});
  EXPECT_EQ(q.state_source, 0);
  EXPECT_EQ(q.skip_rest, (std::vector<int>{1}));
  // A replacement in its first minibatch needs no state of its own, but the
  // other one does.
  const RecoveryPlan r = PlanRecovery({Replacement(0), Survivor(5, 1), Replacement(5)});
  EXPECT_EQ(r.state_source, 1);
  EXPECT_TRUE(r.skip_rest.empty());
}

TEST(RecoveryPlan, TheSurvivorFurthestAheadProvidesAndAStateSourceInTheMinibatchIsPreferred) {
  const RecoveryPlan p =
      PlanRecovery({Survivor(8, 0), Survivor(7, 3), Replacement(7), Survivor(7, 2)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.provider, 0);
  EXPECT_EQ(p.state_source, 1);  // still in minibatch 7: at its boundary
  EXPECT_FALSE(p.source_ahead);
  EXPECT_EQ(p.units_from, (UnitOrdinal{7, 0}));
  EXPECT_EQ(p.units_to, (UnitOrdinal{8, 0}));
}

TEST(RecoveryPlan, AFirstMinibatchReplacementNeedsNoState) {
  const RecoveryPlan p = PlanRecovery({Survivor(0, 5), Replacement(0)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.state_source, -1);
  EXPECT_EQ(p.units_from, (UnitOrdinal{0, 0}));
  EXPECT_EQ(p.units_to, (UnitOrdinal{0, 5}));
}

TEST(RecoveryPlan, SurvivorsOnlyExchangeTheUnitsSomeLack) {
  const RecoveryPlan p = PlanRecovery({Survivor(4, 1), Survivor(4, 2), Survivor(4, 1)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_EQ(p.provider, 1);
  EXPECT_EQ(p.state_source, -1);
  EXPECT_TRUE(p.replacements.empty());
  EXPECT_EQ(p.units_from, (UnitOrdinal{4, 1}));
  EXPECT_EQ(p.units_to, (UnitOrdinal{4, 2}));
}

TEST(RecoveryPlan, EveryMemberAReplacement) {
  RecoveryPlan p = PlanRecovery({Replacement(9, true), Replacement(9, true)});
  EXPECT_TRUE(p.error.empty()) << p.error;
  EXPECT_TRUE(p.all_restored);
  p = PlanRecovery({Replacement(9, true), Replacement(9, false)});
  EXPECT_NE(p.error.find("no survivor holds the job's state"), std::string::npos) << p.error;
  p = PlanRecovery({Replacement(9, true), Replacement(8, true)});
  EXPECT_FALSE(p.error.empty());
  EXPECT_FALSE(PlanRecovery({}).error.empty());
}

}  // namespace
}  // namespace agent
}  // namespace revenant
