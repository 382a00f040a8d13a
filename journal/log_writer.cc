#include "journal/log_writer.h"

#include <algorithm>

#include "journal/crc32c.h"

namespace revenant {
namespace journal {
namespace log {

Writer::Writer(WritableFile* dest, uint64_t dest_length)
    : dest_(dest), block_offset_(dest_length % kBlockSize), file_length_(dest_length) {
  for (int i = 0; i <= kMaxRecordType; ++i) {
    const char t = static_cast<char>(i);
    type_crc_[i] = crc32c::Value(&t, 1);
  }
}

absl::Status Writer::AddRecord(absl::string_view record, bool sync) {
  if (!status_.ok()) return status_;
  const char* ptr = record.data();
  size_t left = record.size();
  std::string& out = out_;
  out.clear();
  out.reserve(left + kHeaderSize * (left / kBlockSize + 2));
  size_t block_offset = block_offset_;

  // An empty record still emits one zero-length FULL record.
  bool begin = true;
  do {
    const size_t leftover = kBlockSize - block_offset;
    if (leftover < kHeaderSize) {
      // Too small for a header: zero-fill the block tail; the reader skips it.
      out.append(leftover, '\0');
      block_offset = 0;
    }
    const size_t avail = kBlockSize - block_offset - kHeaderSize;
    const size_t fragment = std::min(left, avail);
    const bool end = (left == fragment);
    RecordType type;
    if (begin && end) {
      type = kFullType;
    } else if (begin) {
      type = kFirstType;
    } else if (end) {
      type = kLastType;
    } else {
      type = kMiddleType;
    }
    EmitPhysicalRecord(type, ptr, fragment, &out);
    block_offset += kHeaderSize + fragment;
    ptr += fragment;
    left -= fragment;
    begin = false;
  } while (left > 0);

  absl::Status s = dest_->Append(out);
  if (s.ok() && sync) s = dest_->Sync();
  if (!s.ok()) {
    status_ = s;
    return status_;
  }
  block_offset_ = block_offset;
  file_length_ += out.size();
  // A rare huge record must not pin its buffer for the writer's lifetime.
  if (out.capacity() > (size_t{1} << 20)) std::string().swap(out);
  return absl::OkStatus();
}

void Writer::EmitPhysicalRecord(RecordType type, const char* data, size_t n, std::string* out) {
  // Fragments never exceed a block, so the length always fits 16 bits.
  uint32_t crc = crc32c::Mask(crc32c::Extend(type_crc_[type], data, n));
  char header[kHeaderSize];
  header[0] = static_cast<char>(crc & 0xff);
  header[1] = static_cast<char>((crc >> 8) & 0xff);
  header[2] = static_cast<char>((crc >> 16) & 0xff);
  header[3] = static_cast<char>((crc >> 24) & 0xff);
  header[4] = static_cast<char>(n & 0xff);
  header[5] = static_cast<char>((n >> 8) & 0xff);
  header[6] = static_cast<char>(type);
  out->append(header, kHeaderSize);
  out->append(data, n);
}

}  // namespace log
}  // namespace journal
}  // namespace revenant
