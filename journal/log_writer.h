// log::Writer appends logical records to a journal log file in the framing of
// docs/journal_format.md (32 KiB blocks, CRC32C-checked physical records).
//
//   log::Writer writer(file.get(), /*dest_length=*/0);
//   absl::Status s = writer.AddRecord(entry.SerializeAsString());
//
// On a WritableFile, each AddRecord issues a single Append (one write(2)) for
// all the fragments of the record; on a MappedLogFile, it stores the
// fragments in place and commits each by its type byte. Either way an agent
// killed mid-call leaves a torn tail, never a hole.
// Errors are sticky: after one failed Append or Sync every later AddRecord
// fails with the same status, because the file's block position is no longer
// known and pretending otherwise would write records the reader cannot find.
#ifndef REVENANT_JOURNAL_LOG_WRITER_H_
#define REVENANT_JOURNAL_LOG_WRITER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "journal/file.h"
#include "journal/log_format.h"

namespace revenant {
namespace journal {
namespace log {

class Writer {
 public:
  // "*dest" must outlive this Writer. `dest_length` is the current length of
  // the file (0 for a new file); appending continues in its last block.
  explicit Writer(WritableFile* dest, uint64_t dest_length = 0);
  // Writes a new mapped file (docs/journal_format.md, "Mapped log files"):
  // each physical record is stored length first, then its data and
  // checksum, and committed by storing its type byte last. No system call
  // per record (only when the file grows by a chunk).
  explicit Writer(MappedLogFile* dest);

  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Appends one logical record; syncs the file afterwards if `sync`.
  absl::Status AddRecord(absl::string_view record, bool sync = false);
  // Appends the logical record `head` + `tail` (the same bytes as one
  // AddRecord of their concatenation). A mapped writer copies each piece
  // once, straight into the file: a large tail (a payload) is never copied
  // into a buffer first.
  absl::Status AddRecord(absl::string_view head, absl::string_view tail, bool sync = false);

  // Bytes appended to the file so far, including `dest_length`.
  uint64_t file_length() const { return file_length_; }
  // The first error seen, or OK.
  const absl::Status& status() const { return status_; }

 private:
  void EmitPhysicalRecord(RecordType type, const char* data, size_t n, std::string* out);
  absl::Status AddRecordMapped(absl::string_view head, absl::string_view tail, bool sync);

  WritableFile* const dest_;
  MappedLogFile* const mapped_;
  size_t block_offset_;  // Current offset in the block.
  uint64_t file_length_;
  absl::Status status_;
  // crc32c of each type byte, precomputed: the CRC covers type + data.
  uint32_t type_crc_[kMaxRecordType + 1];
  // The framed bytes of the record being added; kept to reuse its capacity
  // (no allocation per record).
  std::string out_;
};

}  // namespace log
}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_LOG_WRITER_H_
