#include "journal/log_reader.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"

namespace revenant {
namespace journal {
namespace log {

Reader::Reader(SequentialFile* file, Reporter* reporter) : file_(file), reporter_(reporter) {}

bool Reader::ReadRecord(std::string* record) {
  record->clear();
  bool in_fragmented_record = false;
  uint64_t prospective_offset = 0;
  absl::string_view fragment;
  while (true) {
    uint64_t physical_offset = 0;
    const unsigned int type = ReadPhysicalRecord(&fragment, &physical_offset);
    switch (type) {
      case kFullType:
        if (in_fragmented_record) {
          ReportCorruption(record->size(), physical_offset, "partial record without end (FULL)");
        }
        record->assign(fragment.data(), fragment.size());
        last_record_offset_ = physical_offset;
        return true;

      case kFirstType:
        if (in_fragmented_record) {
          ReportCorruption(record->size(), physical_offset, "partial record without end (FIRST)");
        }
        prospective_offset = physical_offset;
        record->assign(fragment.data(), fragment.size());
        in_fragmented_record = true;
        break;

      case kMiddleType:
        if (!in_fragmented_record) {
          ReportCorruption(fragment.size(), physical_offset,
                           "missing start of fragmented record (MIDDLE)");
        } else {
          record->append(fragment.data(), fragment.size());
        }
        break;

      case kLastType:
        if (!in_fragmented_record) {
          ReportCorruption(fragment.size(), physical_offset,
                           "missing start of fragmented record (LAST)");
        } else {
          record->append(fragment.data(), fragment.size());
          last_record_offset_ = prospective_offset;
          return true;
        }
        break;

      case kEof:
        // A fragmented record cut by the end of the file is a torn tail: the
        // writer died mid-append. Not corruption.
        record->clear();
        return false;

      case kBadRecord:
        if (in_fragmented_record) {
          ReportCorruption(record->size(), prospective_offset, "error in middle of record");
          in_fragmented_record = false;
          record->clear();
        }
        break;

      default:
        ReportCorruption(fragment.size() + (in_fragmented_record ? record->size() : 0),
                         physical_offset, absl::StrCat("unknown record type ", type));
        in_fragmented_record = false;
        record->clear();
        break;
    }
  }
}

void Reader::ReportCorruption(size_t bytes, uint64_t offset, absl::string_view reason) {
  if (reporter_ != nullptr) {
    reporter_->Corruption(bytes,
                          absl::DataLossError(absl::StrCat(reason, " at offset ", offset)));
  }
}

unsigned int Reader::ReadPhysicalRecord(absl::string_view* result, uint64_t* offset) {
  while (true) {
    if (buffer_.size() < kHeaderSize) {
      if (!eof_) {
        // The previous block is done; anything left is its zero-filled tail.
        buffer_ = absl::string_view();
        absl::Status s = ReadBlock();
        end_of_buffer_offset_ += buffer_.size();
        if (!s.ok()) {
          buffer_ = absl::string_view();
          ReportCorruption(kBlockSize, end_of_buffer_offset_, s.ToString());
          eof_ = true;
          return kEof;
        }
        if (buffer_.size() < kBlockSize) eof_ = true;
        continue;
      }
      // A header cut by the end of the file: the writer died mid-header (or
      // this is a block tail shorter than a header). A torn tail, not an error.
      buffer_ = absl::string_view();
      return kEof;
    }

    *offset = end_of_buffer_offset_ - buffer_.size();
    const unsigned char* header = reinterpret_cast<const unsigned char*>(buffer_.data());
    const uint32_t a = header[4];
    const uint32_t b = header[5];
    const unsigned int type = header[6];
    const uint32_t length = a | (b << 8);
    if (kHeaderSize + length > buffer_.size()) {
      const size_t drop_size = buffer_.size();
      buffer_ = absl::string_view();
      if (!eof_) {
        ReportCorruption(drop_size, *offset, "bad record length");
        return kBadRecord;
      }
      // The record runs past the end of the file: torn tail.
      return kEof;
    }

    if (type == kZeroType && RestIsZero(kHeaderSize + length)) {
      // An uncommitted record followed by the zero-filled tail of a mapped
      // file: the end of the log (docs/journal_format.md).
      buffer_ = absl::string_view();
      eof_ = true;
      return kEof;
    }

    const uint32_t expected_crc = crc32c::Unmask(
        static_cast<uint32_t>(header[0]) | (static_cast<uint32_t>(header[1]) << 8) |
        (static_cast<uint32_t>(header[2]) << 16) | (static_cast<uint32_t>(header[3]) << 24));
    const uint32_t actual_crc = crc32c::Value(buffer_.data() + 6, 1 + length);
    if (actual_crc != expected_crc) {
      // The length itself may be corrupt, so nothing after this point of the
      // block can be trusted: drop the rest of the block.
      const size_t drop_size = buffer_.size();
      buffer_ = absl::string_view();
      ReportCorruption(drop_size, *offset, "checksum mismatch");
      return kBadRecord;
    }

    *result = absl::string_view(buffer_.data() + kHeaderSize, length);
    buffer_.remove_prefix(kHeaderSize + length);
    return type;
  }
}

absl::Status Reader::ReadBlock() {
  if (ahead_pos_ < ahead_.size()) {
    const size_t n = std::min(kBlockSize, ahead_.size() - ahead_pos_);
    backing_store_.assign(ahead_, ahead_pos_, n);
    ahead_pos_ += n;
    if (ahead_pos_ == ahead_.size()) {
      ahead_.clear();
      ahead_pos_ = 0;
    }
    buffer_ = backing_store_;
    return absl::OkStatus();
  }
  return file_->Read(kBlockSize, &backing_store_, &buffer_);
}

bool Reader::RestIsZero(size_t from) {
  for (size_t i = from; i < buffer_.size(); ++i) {
    if (buffer_[i] != 0) return false;
  }
  if (eof_) return true;
  // Blocks already read ahead (by an earlier call) come first.
  for (size_t i = ahead_pos_; i < ahead_.size(); ++i) {
    if (ahead_[i] != 0) return false;
  }
  if (!ahead_.empty() && ahead_.size() % kBlockSize != 0) return true;  // reached the end
  std::string block;
  absl::string_view got;
  while (true) {
    if (!file_->Read(kBlockSize, &block, &got).ok()) return false;  // ReadBlock reports it
    ahead_.append(got.data(), got.size());
    for (char c : got) {
      if (c != 0) return false;
    }
    if (got.size() < kBlockSize) return true;
  }
}

}  // namespace log
}  // namespace journal
}  // namespace revenant
