#include "common/logging.h"

#include "gtest/gtest.h"

namespace revenant {
namespace {

TEST(LoggingTest, ParsesLevels) {
  EXPECT_EQ(ParseLogLevel("error"), LogLevel::kERROR);
  EXPECT_EQ(ParseLogLevel("warning"), LogLevel::kWARNING);
  EXPECT_EQ(ParseLogLevel("debug"), LogLevel::kDEBUG);
  EXPECT_EQ(ParseLogLevel("bogus"), LogLevel::kINFO);
}

TEST(LoggingTest, LineCarriesComponentAndPid) {
  testing::internal::CaptureStderr();
  REVENANT_LOG(ERROR, "test") << "hello " << 42;
  const std::string out = testing::internal::GetCapturedStderr();
  EXPECT_NE(out.find("[revenant test "), std::string::npos) << out;
  EXPECT_NE(out.find(" E] hello 42\n"), std::string::npos) << out;
}

}  // namespace
}  // namespace revenant
