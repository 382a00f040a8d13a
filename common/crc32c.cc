#include "common/crc32c.h"

#include <isa-l/crc.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "common/knobs.h"

// ISA-L's SSE4.2 variant (the crc32 instruction on three streams, combined
// with pclmulqdq). Exported by libisal (a "multibinary" variant, like the
// dispatcher's other choices) but not declared in its header.
extern "C" unsigned int crc32_iscsi_01(unsigned char* buffer, int len, unsigned int init_crc);

namespace revenant {
namespace crc32c {

namespace {

using CrcFn = unsigned int (*)(unsigned char*, int, unsigned int);

// ISA-L's dispatcher (crc32_iscsi) picks its AVX-512 variant where the CPU
// has it. On the GPU VM that variant's entry and exit cost ~0.4 us per call
// (profiled: the first vector instruction and the instruction after the
// return took most of the journal's CRC time), which dominated the small
// records of a training step; the SSE4.2 variant has no such cost. So:
// SSE4.2 where available, else the dispatcher. REVENANT_CRC32C=isal-auto
// forces the dispatcher (to compare).
CrcFn Choose() {
  if (knobs::String(knobs::Id::kCrc32c).value_or("") == "isal-auto") return crc32_iscsi;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul")) {
    return crc32_iscsi_01;
  }
#endif
  return crc32_iscsi;
}

}  // namespace

uint32_t Extend(uint32_t init_crc, const void* data, size_t n) {
  static const CrcFn crc_fn = Choose();
  // ISA-L's crc32_iscsi neither pre- nor post-inverts, and takes an int length.
  uint32_t crc = ~init_crc;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    const size_t chunk = n > static_cast<size_t>(INT_MAX) ? INT_MAX : n;
    crc = crc_fn(const_cast<unsigned char*>(p), static_cast<int>(chunk), crc);
    p += chunk;
    n -= chunk;
  }
  return ~crc;
}

}  // namespace crc32c
}  // namespace revenant
