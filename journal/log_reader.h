// log::Reader reads back the logical records a log::Writer appended, checking
// every physical record against docs/journal_format.md.
//
//   class Collect : public log::Reader::Reporter { ... };
//   log::Reader reader(file.get(), &reporter);
//   std::string record;
//   while (reader.ReadRecord(&record)) Apply(record);
//
// The reader reports what it cannot read to the Reporter (bytes dropped and a
// status naming the file offset) and carries on after the damage; the caller
// chooses the policy (the journal turns any report into data loss). A torn
// tail -- an incomplete last record, which is what a writer killed in the
// middle of write(2) leaves, or an uncommitted record (type byte 0) followed
// only by zeros, which is what a writer of a mapped, preallocated file leaves
// -- is a clean end and is not reported.
#ifndef REVENANT_JOURNAL_LOG_READER_H_
#define REVENANT_JOURNAL_LOG_READER_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "journal/file.h"
#include "journal/log_format.h"

namespace revenant {
namespace journal {
namespace log {

class Reader {
 public:
  // Receives the corruption the reader detects.
  class Reporter {
   public:
    virtual ~Reporter() = default;
    // `bytes` is the approximate number of bytes dropped; `status` says why
    // and where (a file offset).
    virtual void Corruption(size_t bytes, const absl::Status& status) = 0;
  };

  // "*file" and "*reporter" (may be null) must outlive this Reader.
  Reader(SequentialFile* file, Reporter* reporter);

  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  // Reads the next logical record into *record. Returns false at the end of
  // the input (including a torn tail). *record is valid until the next call.
  bool ReadRecord(std::string* record);

  // File offset of the first physical record of the last record returned.
  uint64_t LastRecordOffset() const { return last_record_offset_; }

 private:
  // Extra "record types" returned by ReadPhysicalRecord.
  enum { kEof = kMaxRecordType + 1, kBadRecord = kMaxRecordType + 2 };

  // Returns the type of the next physical record (data in *result), kEof or
  // kBadRecord (already reported).
  unsigned int ReadPhysicalRecord(absl::string_view* result, uint64_t* offset);
  void ReportCorruption(size_t bytes, uint64_t offset, absl::string_view reason);
  // Reads the next block of the file (or of the read-ahead) into buffer_.
  absl::Status ReadBlock();
  // Whether buffer_ from `from` on and the whole rest of the file are zero
  // (the preallocated tail of a mapped file). Reads ahead; what it read is
  // kept for ReadBlock.
  bool RestIsZero(size_t from);

  SequentialFile* const file_;
  Reporter* const reporter_;
  std::string backing_store_;
  absl::string_view buffer_;
  bool eof_ = false;  // The last Read returned less than a full block.
  // File offset just past the end of buffer_.
  uint64_t end_of_buffer_offset_ = 0;
  uint64_t last_record_offset_ = 0;
  // Blocks RestIsZero read past buffer_, served by ReadBlock first.
  std::string ahead_;
  size_t ahead_pos_ = 0;
};

}  // namespace log
}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_LOG_READER_H_
