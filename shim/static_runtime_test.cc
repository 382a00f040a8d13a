// StaticRuntimeReason on programs built here: tests/apps/vector_add (shared
// runtime), the same source with -cudart static, and that one stripped.
#include "shim/static_runtime.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace shim {
namespace {

using ::testing::HasSubstr;

std::string Arg(int i) { return ::testing::internal::GetArgvs()[i]; }

TEST(StaticRuntimeTest, SharedRuntimeProgramPasses) {
  EXPECT_EQ(StaticRuntimeReason(Arg(1)), "");
}

TEST(StaticRuntimeTest, StaticRuntimeProgramIsFound) {
  EXPECT_THAT(StaticRuntimeReason(Arg(2)), HasSubstr("defines the CUDA runtime's functions"));
}

TEST(StaticRuntimeTest, StrippedStaticRuntimeProgramIsFoundByItsModules) {
  EXPECT_THAT(StaticRuntimeReason(Arg(3)), HasSubstr("does not import __cudaRegisterFatBinary"));
}

TEST(StaticRuntimeTest, ProgramsWithoutCudaAndNonElfFilesPass) {
  EXPECT_EQ(StaticRuntimeReason("/bin/true"), "");
  EXPECT_EQ(StaticRuntimeReason("/etc/hostname"), "");
  EXPECT_EQ(StaticRuntimeReason("/nonexistent"), "");
}

}  // namespace
}  // namespace shim
}  // namespace revenant
