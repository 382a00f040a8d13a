#include "common/content_hash.h"

#include <cstring>

namespace revenant {

uint64_t ContentHashSum(const void* p, uint64_t n, uint64_t first_word) {
  const unsigned char* b = static_cast<const unsigned char*>(p);
  const uint64_t full = n / 8;
  // Four independent sums: the multiplies of neighbouring words overlap.
  uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  uint64_t i = 0;
  for (; i + 4 <= full; i += 4) {
    uint64_t w[4];
    std::memcpy(w, b + i * 8, sizeof(w));
    const uint64_t k = (first_word + i) * kContentHashStep + kContentHashSeed;
    s0 += ContentHashMix(w[0] ^ k);
    s1 += ContentHashMix(w[1] ^ (k + kContentHashStep));
    s2 += ContentHashMix(w[2] ^ (k + 2 * kContentHashStep));
    s3 += ContentHashMix(w[3] ^ (k + 3 * kContentHashStep));
  }
  for (; i < full; ++i) {
    uint64_t w;
    std::memcpy(&w, b + i * 8, sizeof(w));
    s0 += ContentHashMix(w ^ ((first_word + i) * kContentHashStep + kContentHashSeed));
  }
  if (const uint64_t tail = n % 8; tail != 0) {
    uint64_t w = 0;
    std::memcpy(&w, b + full * 8, tail);  // little-endian: the padding is the high bytes
    s0 += ContentHashMix(w ^ ((first_word + full) * kContentHashStep + kContentHashSeed));
  }
  return s0 + s1 + s2 + s3;
}

}  // namespace revenant
