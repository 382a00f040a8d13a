#include "common/random.h"

#include <set>
#include <string>

#include "gtest/gtest.h"

namespace revenant {
namespace {

TEST(RandomTest, HexHasTheLengthAndDigitsAsked) {
  absl::StatusOr<std::string> h = RandomHex(16);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_EQ(32u, h->size());
  EXPECT_EQ(std::string::npos, h->find_first_not_of("0123456789abcdef")) << *h;
}

TEST(RandomTest, NamesDoNotRepeat) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    absl::StatusOr<std::string> h = RandomHex(8);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_TRUE(seen.insert(*h).second) << "repeated " << *h;
  }
}

TEST(RandomTest, BytesAreNotAllEqual) {
  unsigned char b[64] = {};
  ASSERT_TRUE(RandomBytes(b, sizeof(b)).ok());
  std::set<unsigned char> distinct(b, b + sizeof(b));
  // 64 random bytes with fewer than 16 distinct values: probability < 1e-30.
  EXPECT_GE(distinct.size(), 16u);
}

}  // namespace
}  // namespace revenant
