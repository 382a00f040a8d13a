#include "journal/crc32c.h"

#include <isa-l/crc.h>

#include <climits>

namespace revenant {
namespace journal {
namespace crc32c {

uint32_t Extend(uint32_t init_crc, const void* data, size_t n) {
  // ISA-L's crc32_iscsi neither pre- nor post-inverts, and takes an int length.
  uint32_t crc = ~init_crc;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const size_t chunk = n > static_cast<size_t>(INT_MAX) ? INT_MAX : n;
    crc = crc32_iscsi(const_cast<unsigned char*>(p), static_cast<int>(chunk), crc);
    p += chunk;
    n -= chunk;
  }
  return ~crc;
}

}  // namespace crc32c
}  // namespace journal
}  // namespace revenant
