#include "common/content_hash.h"

#include <cstdint>
#include <cstring>
#include <random>
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace revenant {
namespace {

// The definition, word by word (common/content_hash.h), for any length.
uint64_t Reference(const unsigned char* p, uint64_t n) {
  uint64_t sum = 0;
  for (uint64_t i = 0; i * 8 < n; ++i) {
    uint64_t w = 0;
    for (uint64_t b = 0; b < 8 && i * 8 + b < n; ++b) w |= uint64_t{p[i * 8 + b]} << (8 * b);
    sum += ContentHashMix(w ^ (i * kContentHashStep + kContentHashSeed));
  }
  return ContentHashMix(sum ^ (n * kContentHashStep));
}

std::vector<unsigned char> Bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<unsigned char> v(n);
  for (auto& c : v) c = static_cast<unsigned char>(rng());
  return v;
}

TEST(ContentHash, MatchesTheDefinitionAtEveryLength) {
  const auto v = Bytes(300, 20261206);
  for (uint64_t n = 0; n <= v.size(); ++n) {
    EXPECT_EQ(ContentHash(v.data(), n), Reference(v.data(), n)) << "n=" << n;
  }
}

TEST(ContentHash, PiecesAddUp) {
  const auto v = Bytes(1 << 16, 7);
  const uint64_t whole = ContentHash(v.data(), v.size());
  for (uint64_t cut : {8ull, 64ull, 4096ull, 40000ull}) {
    const uint64_t sum = ContentHashSum(v.data(), cut, 0) +
                         ContentHashSum(v.data() + cut, v.size() - cut, cut / 8);
    EXPECT_EQ(ContentHashFinish(sum, v.size()), whole) << "cut=" << cut;
  }
}

TEST(ContentHash, EveryChangedByteShows) {
  auto v = Bytes(1000, 11);
  const uint64_t h = ContentHash(v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] ^= 0x01;
    EXPECT_NE(ContentHash(v.data(), v.size()), h) << "byte " << i;
    v[i] ^= 0x01;
  }
  // Swapped words and a zero tail are differences too.
  std::vector<unsigned char> w = v;
  std::swap_ranges(w.begin(), w.begin() + 8, w.begin() + 8);
  EXPECT_NE(ContentHash(w.data(), w.size()), h);
  std::vector<unsigned char> longer = v;
  longer.push_back(0);
  EXPECT_NE(ContentHash(longer.data(), longer.size()), h);
}

TEST(ContentHash, UnalignedStart) {
  const auto v = Bytes(4099, 3);
  std::vector<unsigned char> shifted(v.size() + 3);
  std::memcpy(shifted.data() + 3, v.data(), v.size());
  EXPECT_EQ(ContentHash(shifted.data() + 3, v.size()), ContentHash(v.data(), v.size()));
}

}  // namespace
}  // namespace revenant
