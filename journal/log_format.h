// Constants of the journal's physical log framing (LevelDB-log style).
//
// The authoritative description is docs/journal_format.md: 32 KiB blocks of
// physical records, each a 7-byte header {masked CRC32C (4, LE), length
// (2, LE), type (1)} followed by `length` data bytes.
#ifndef REVENANT_JOURNAL_LOG_FORMAT_H_
#define REVENANT_JOURNAL_LOG_FORMAT_H_

#include <cstddef>

namespace revenant {
namespace journal {
namespace log {

enum RecordType : unsigned char {
  // Reserved; never written. Reading one is corruption.
  kZeroType = 0,
  kFullType = 1,
  // Fragments of a logical record that does not fit the rest of a block.
  kFirstType = 2,
  kMiddleType = 3,
  kLastType = 4,
};
inline constexpr int kMaxRecordType = kLastType;

inline constexpr size_t kBlockSize = 32768;

// checksum (4 bytes) + length (2 bytes) + type (1 byte).
inline constexpr size_t kHeaderSize = 4 + 2 + 1;

}  // namespace log
}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_LOG_FORMAT_H_
