// CRC32C (Castagnoli) for the journal, computed by Intel ISA-L, plus the
// LevelDB-style mask applied to CRCs stored in log record headers.
//
//   uint32_t crc = crc32c::Value(data, n);
//   uint32_t both = crc32c::Extend(crc32c::Value(a, na), b, nb);  // CRC of a+b
//   header.crc = crc32c::Mask(crc);
//
// The values are the standard CRC32C ("123456789" -> 0xE3069283); see
// docs/journal_format.md.
#ifndef REVENANT_COMMON_CRC32C_H_
#define REVENANT_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace revenant {
namespace crc32c {

// Returns the CRC32C of concat(A, data[0,n-1]) where init_crc is the CRC32C
// of some string A.
uint32_t Extend(uint32_t init_crc, const void* data, size_t n);

// Returns the CRC32C of data[0,n-1].
inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// A CRC of a string that contains embedded CRCs is poorly distributed, so log
// headers store a rotated and offset ("masked") CRC.
inline constexpr uint32_t kMaskDelta = 0xa282ead8u;

inline uint32_t Mask(uint32_t crc) {
  return ((crc >> 15) | (crc << 17)) + kMaskDelta;
}

inline uint32_t Unmask(uint32_t masked) {
  uint32_t rot = masked - kMaskDelta;
  return (rot >> 17) | (rot << 15);
}

}  // namespace crc32c
}  // namespace revenant

#endif  // REVENANT_COMMON_CRC32C_H_
