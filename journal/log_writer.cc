#include "journal/log_writer.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/crc32c.h"

namespace revenant {
namespace journal {
namespace log {

Writer::Writer(WritableFile* dest, uint64_t dest_length)
    : dest_(dest),
      mapped_(nullptr),
      block_offset_(dest_length % kBlockSize),
      file_length_(dest_length) {
  for (int i = 0; i <= kMaxRecordType; ++i) {
    const char t = static_cast<char>(i);
    type_crc_[i] = crc32c::Value(&t, 1);
  }
}

Writer::Writer(MappedLogFile* dest) : dest_(nullptr), mapped_(dest), block_offset_(0), file_length_(0) {
  for (int i = 0; i <= kMaxRecordType; ++i) {
    const char t = static_cast<char>(i);
    type_crc_[i] = crc32c::Value(&t, 1);
  }
}

absl::Status Writer::AddRecord(absl::string_view head, absl::string_view tail, bool sync) {
  if (!status_.ok()) return status_;
  if (mapped_ != nullptr) return AddRecordMapped(head, tail, sync);
  if (tail.empty()) return AddRecord(head, sync);
  std::string joined;
  joined.reserve(head.size() + tail.size());
  joined.append(head.data(), head.size());
  joined.append(tail.data(), tail.size());
  return AddRecord(joined, sync);
}

absl::Status Writer::AddRecord(absl::string_view record, bool sync) {
  if (!status_.ok()) return status_;
  if (mapped_ != nullptr) return AddRecordMapped(record, {}, sync);
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

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the mapped writer stores little-endian header fields directly");

// One store instruction each: an agent killed between instructions leaves
// the field either untouched (zero) or complete.
inline void StoreLength(char* p, uint16_t v) {
  __atomic_store_n(reinterpret_cast<uint16_t*>(p), v, __ATOMIC_RELAXED);
}
inline void StoreChecksum(char* p, uint32_t v) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(p), v, __ATOMIC_RELAXED);
}

}  // namespace

absl::Status Writer::AddRecordMapped(absl::string_view head, absl::string_view tail, bool sync) {
  // The record's bytes are head then tail; `piece` and `ptr` walk them.
  absl::string_view pieces[2] = {head, tail};
  int piece = head.empty() ? 1 : 0;
  const char* ptr = pieces[piece].data();
  size_t piece_left = pieces[piece].size();
  size_t left = head.size() + tail.size();
  bool begin = true;
  do {
    size_t leftover = kBlockSize - block_offset_;
    if (leftover < kHeaderSize) {
      // The block tail is already zero (preallocated); the reader skips it.
      file_length_ += leftover;
      block_offset_ = 0;
      leftover = kBlockSize;
    }
    const size_t avail = leftover - kHeaderSize;
    const size_t fragment = std::min(left, avail);
    const bool end = (left == fragment);
    const RecordType type = begin && end ? kFullType
                            : begin      ? kFirstType
                            : end        ? kLastType
                                         : kMiddleType;
    absl::StatusOr<char*> span = mapped_->Span(file_length_, kHeaderSize + fragment);
    if (!span.ok()) {
      status_ = span.status();
      return status_;
    }
    char* h = *span;
    // Length, data, checksum, then the type byte that commits the record
    // (docs/journal_format.md, "Mapped log files"). The fences keep the
    // compiler (and the CPU) from storing them in another order.
    StoreLength(h + 4, static_cast<uint16_t>(fragment));
    std::atomic_signal_fence(std::memory_order_seq_cst);
    // The fragment's data, from one or both pieces; the checksum over the
    // bytes as copied.
    uint32_t crc = type_crc_[type];
    for (size_t done = 0; done < fragment;) {
      if (piece_left == 0) {
        ++piece;
        ptr = pieces[piece].data();
        piece_left = pieces[piece].size();
        continue;
      }
      const size_t n = std::min(fragment - done, piece_left);
      std::memcpy(h + kHeaderSize + done, ptr, n);
      crc = crc32c::Extend(crc, ptr, n);
      ptr += n;
      piece_left -= n;
      done += n;
    }
    StoreChecksum(h, crc32c::Mask(crc));
    std::atomic_thread_fence(std::memory_order_release);
    __atomic_store_n(reinterpret_cast<unsigned char*>(h + 6), static_cast<unsigned char>(type),
                     __ATOMIC_RELEASE);
    block_offset_ += kHeaderSize + fragment;
    file_length_ += kHeaderSize + fragment;
    left -= fragment;
    begin = false;
  } while (left > 0);
  if (sync) {
    if (absl::Status s = mapped_->Sync(file_length_); !s.ok()) {
      status_ = s;
      return status_;
    }
  }
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
