// ContentHash: a 64-bit hash of a byte range that the device and the CPU
// compute alike (agent/backends/cuda/content_hash.cu is the device's), to
// tell whether the bytes a held upload's place received are the bytes the
// device received (common/upload_hold.h; docs/recovery.md, "Held uploads").
//
// Not cryptographic: it catches bytes changed by accident (a device write
// the agent did not see), with a chance of 2^-64 of missing one.
//
// Definition (little-endian): the range is read as words w_i of 8 bytes,
// i = 0 .. ceil(n / 8) - 1, the last one zero-padded;
//   sum  = Σ Mix(w_i ^ (i * kContentHashStep + kContentHashSeed))  (mod 2^64)
//   hash = Mix(sum ^ (n * kContentHashStep))
// with Mix the splitmix64 finalizer. A sum of mixed words, so pieces of a
// range hash independently (ContentHashSum at the piece's first word) and
// their sums add up.
#ifndef REVENANT_COMMON_CONTENT_HASH_H_
#define REVENANT_COMMON_CONTENT_HASH_H_

#include <cstdint>

namespace revenant {

inline constexpr uint64_t kContentHashStep = 0x9e3779b97f4a7c15ull;
inline constexpr uint64_t kContentHashSeed = 0x632be59bd9b4e019ull;

inline uint64_t ContentHashMix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The sum over the words of [p, p + n), the first of them word `first_word`
// of the whole range (p is that word's first byte; n need not be a multiple
// of 8 only for the range's last piece).
uint64_t ContentHashSum(const void* p, uint64_t n, uint64_t first_word);

inline uint64_t ContentHashFinish(uint64_t sum, uint64_t n) {
  return ContentHashMix(sum ^ (n * kContentHashStep));
}

inline uint64_t ContentHash(const void* p, uint64_t n) {
  return ContentHashFinish(ContentHashSum(p, n, 0), n);
}

}  // namespace revenant

#endif  // REVENANT_COMMON_CONTENT_HASH_H_
