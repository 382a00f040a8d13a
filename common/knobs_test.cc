#include "common/knobs.h"

#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace knobs {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class KnobsTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const Knob& k : All()) {
      if (k.id != Id::kLogLevel) unsetenv(k.name);
    }
  }
  static void Set(Id id, const char* value) { setenv(Info(id).name, value, 1); }
};

TEST_F(KnobsTest, TableIsIndexedByIdAndNamesAreUnique) {
  std::set<std::string> names;
  size_t i = 0;
  for (const Knob& k : All()) {
    EXPECT_EQ(i++, static_cast<size_t>(k.id)) << k.name;
    EXPECT_EQ(&Info(k.id), &k);
    EXPECT_TRUE(names.insert(k.name).second) << "twice: " << k.name;
    EXPECT_EQ(0, std::string(k.name).rfind("REVENANT_", 0)) << k.name;
    EXPECT_NE(std::string(k.doc), "") << k.name;
  }
}

TEST_F(KnobsTest, UnsetAndEmptyAreNullopt) {
  unsetenv(Info(Id::kSpinUs).name);
  EXPECT_EQ(std::nullopt, Int(Id::kSpinUs, 0, 10));
  Set(Id::kSpinUs, "");
  EXPECT_EQ(std::nullopt, Int(Id::kSpinUs, 0, 10));
  EXPECT_EQ(std::nullopt, String(Id::kSpinUs));
}

TEST_F(KnobsTest, BoolAcceptsTheUsualSpellings) {
  for (const char* t : {"1", "true", "YES", "On"}) {
    Set(Id::kDiagnostics, t);
    EXPECT_EQ(std::optional<bool>(true), Bool(Id::kDiagnostics)) << t;
  }
  for (const char* f : {"0", "false", "No", "OFF"}) {
    Set(Id::kDiagnostics, f);
    EXPECT_EQ(std::optional<bool>(false), Bool(Id::kDiagnostics)) << f;
  }
  Set(Id::kDiagnostics, "maybe");
  EXPECT_EQ(std::nullopt, Bool(Id::kDiagnostics));
}

TEST_F(KnobsTest, NumbersOutsideTheirRangeOrMalformedAreIgnored) {
  Set(Id::kSpinUs, "25");
  EXPECT_EQ(std::optional<int64_t>(25), Int(Id::kSpinUs, 0, 100));
  Set(Id::kSpinUs, "101");
  EXPECT_EQ(std::nullopt, Int(Id::kSpinUs, 0, 100));
  Set(Id::kSpinUs, "-1");
  EXPECT_EQ(std::nullopt, Int(Id::kSpinUs, 0, 100));
  Set(Id::kSpinUs, "12us");
  EXPECT_EQ(std::nullopt, Int(Id::kSpinUs, 0, 100));
  Set(Id::kCallTimeoutS, "2.5");
  EXPECT_EQ(std::optional<double>(2.5), Double(Id::kCallTimeoutS, 0, 10));
  Set(Id::kCallTimeoutS, "nan");
  EXPECT_EQ(std::nullopt, Double(Id::kCallTimeoutS, 0, 10));
  Set(Id::kCallTimeoutS, "11");
  EXPECT_EQ(std::nullopt, Double(Id::kCallTimeoutS, 0, 10));
}

TEST_F(KnobsTest, HelpListsOnlyTheKnobsOfItsKind) {
  const std::string product = Help(Kind::kProduct);
  EXPECT_THAT(product, HasSubstr("REVENANT_COLLECTIVE_TIMEOUT_S (number, default 60)"));
  EXPECT_THAT(product, Not(HasSubstr("REVENANT_JOURNAL_THREAD_DRY")));
  EXPECT_THAT(product, Not(HasSubstr("REVENANT_JOURNAL_THREAD_DELAY_US")));
  EXPECT_THAT(Help(Kind::kTest), HasSubstr("REVENANT_JOURNAL_THREAD_DELAY_US"));
  const std::string md = Markdown();
  for (const Knob& k : All()) EXPECT_THAT(md, HasSubstr(k.name));
}

TEST_F(KnobsTest, TestingKnobsSetNamesMeasurementAndTestKnobsOnly) {
  EXPECT_TRUE(TestingKnobsSet().empty());
  Set(Id::kCallTimeoutS, "5");
  Set(Id::kSpinUs, "");
  EXPECT_TRUE(TestingKnobsSet().empty());
  Set(Id::kSpinUs, "20");
  Set(Id::kJournalThreadDelayUs, "3");
  EXPECT_EQ((std::vector<std::string>{"REVENANT_SPIN_US", "REVENANT_JOURNAL_THREAD_DELAY_US"}),
            TestingKnobsSet());
}

// The product agent's view (in a child process: it cannot be undone).
TEST_F(KnobsTest, IgnoreTestingKnobsLeavesProductAndLauncherKnobs) {
  Set(Id::kSpinUs, "20");
  Set(Id::kInlineImageKib, "0");
  Set(Id::kCallTimeoutS, "5");
  Set(Id::kJobDir, "/tmp/x");
  EXPECT_EXIT(
      {
        IgnoreTestingKnobs("revenant-agent-testing");
        const bool ok = !Int(Id::kSpinUs, 0, 100) && !String(Id::kInlineImageKib) &&
                        Double(Id::kCallTimeoutS, 0, 10) == 5.0 &&
                        String(Id::kJobDir) == std::string("/tmp/x");
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "REVENANT_SPIN_US ignored: a testing knob, read only by revenant-agent-testing");
}

}  // namespace
}  // namespace knobs
}  // namespace revenant
