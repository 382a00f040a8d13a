#include "journal/journal.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <functional>
#include <thread>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "common/crc32c.h"
#include "common/timeline.h"
#include "journal/file.h"
#include "journal/log_reader.h"
#include "journal/log_writer.h"

namespace revenant {
namespace journal {
namespace journal_internal {

namespace {

const char* KindPrefix(LogKind kind) { return kind == SETUP ? "setup-" : "minibatch-"; }

// The largest chunk a mapped log grows by after its first (which may be
// larger: JournalOptions::minibatch_first_chunk, the setup log's): a chunk
// is allocated and its pages mapped writable on the writer's thread (inside
// the file's mapped window: journal/file.h), ~0.5 ms per MiB on tmpfs, so a
// larger one would hold that thread up that long.
constexpr size_t kMaxMappedChunk = 32 * log::kBlockSize;

std::string JoinPath(const std::string& dir, const std::string& name) {
  if (!dir.empty() && dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// Parses "<prefix><digits><suffix>" into *number.
bool ParseName(const std::string& name, absl::string_view prefix, absl::string_view suffix,
               uint64_t* number) {
  if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, suffix)) return false;
  if (name.size() <= prefix.size() + suffix.size()) return false;
  absl::string_view digits(name);
  digits.remove_prefix(prefix.size());
  digits.remove_suffix(suffix.size());
  for (char c : digits) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(digits, number);
}

}  // namespace

std::string SegmentLogName(LogKind kind, uint64_t number) {
  return absl::StrFormat("%s%06d.log", KindPrefix(kind), number);
}

std::string SegmentPayloadName(LogKind kind, uint64_t number) {
  return absl::StrFormat("%s%06d.payload", KindPrefix(kind), number);
}

absl::StatusOr<DirListing> ListJournalDir(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  if (!names.ok()) return names.status();
  DirListing listing;
  std::vector<std::pair<std::string, std::pair<LogKind, uint64_t>>> segment_files;
  for (const std::string& name : *names) {
    uint64_t n = 0;
    for (LogKind kind : {SETUP, MINIBATCH}) {
      if (ParseName(name, KindPrefix(kind), ".log", &n)) {
        uint64_t& best = kind == SETUP ? listing.setup : listing.minibatch;
        best = std::max(best, n);
        listing.max_number = std::max(listing.max_number, n);
        segment_files.push_back({name, {kind, n}});
      } else if (ParseName(name, KindPrefix(kind), ".payload", &n)) {
        listing.max_number = std::max(listing.max_number, n);
        segment_files.push_back({name, {kind, n}});
      } else if (absl::StartsWith(name, KindPrefix(kind)) && absl::EndsWith(name, ".tmp")) {
        listing.stale.push_back(name);
        // Keep numbers of unfinished segments out of reuse as well.
        std::string base = name.substr(0, name.size() - 4);
        if (ParseName(base, KindPrefix(kind), ".log", &n) ||
            ParseName(base, KindPrefix(kind), ".payload", &n)) {
          listing.max_number = std::max(listing.max_number, n);
        }
      }
    }
  }
  for (const auto& f : segment_files) {
    const uint64_t live = f.second.first == SETUP ? listing.setup : listing.minibatch;
    if (f.second.second != live) listing.stale.push_back(f.first);
  }
  return listing;
}

namespace {

// Collects the first corruption a log::Reader reports.
class FirstCorruption : public log::Reader::Reporter {
 public:
  void Corruption(size_t bytes, const absl::Status& status) override {
    if (status_.ok()) {
      status_ = status;
      bytes_ = bytes;
    }
  }
  const absl::Status& status() const { return status_; }
  size_t bytes() const { return bytes_; }

 private:
  absl::Status status_;
  size_t bytes_ = 0;
};

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat(path, ": ", what));
}

}  // namespace

absl::Status ReadSegment(const std::string& log_path, const std::string& payload_path,
                         LogKind kind, bool load_payloads, SegmentHeader* header,
                         const std::function<absl::Status(JournalEntry&)>& callback) {
  header->Clear();
  absl::StatusOr<std::unique_ptr<SequentialFile>> file = NewSequentialFile(log_path);
  if (!file.ok()) return file.status();
  FirstCorruption reporter;
  log::Reader reader(file->get(), &reporter);
  auto check_reporter = [&]() -> absl::Status {
    if (reporter.status().ok()) return absl::OkStatus();
    return DataLoss(log_path, absl::StrCat(reporter.status().message(), " (", reporter.bytes(),
                                           " bytes dropped)"));
  };

  std::string record;
  if (!reader.ReadRecord(&record)) {
    // Empty, or the header itself is a torn tail: a segment torn at creation.
    return check_reporter();
  }
  if (absl::Status s = check_reporter(); !s.ok()) return s;
  if (!header->ParseFromString(record)) {
    return DataLoss(log_path, "unparseable segment header at offset 0");
  }
  if (header->format_version() < kMinFormatVersion ||
      header->format_version() > kFormatVersion) {
    return DataLoss(log_path, absl::StrCat("unsupported format version ",
                                           header->format_version(), " (this reader knows ",
                                           kFormatVersion, ")"));
  }
  if (header->kind() != kind) {
    return DataLoss(log_path, absl::StrCat("segment header says log kind ",
                                           LogKind_Name(header->kind()), ", expected ",
                                           LogKind_Name(kind)));
  }

  int payload_fd = -1;
  struct FdCloser {
    int* fd;
    ~FdCloser() {
      if (*fd >= 0) ::close(*fd);
    }
  } closer{&payload_fd};

  uint64_t prev_seq = 0;
  JournalEntry entry;
  std::string payload;
  // Loads an entry's out-of-line payload (checking it) and hands it over.
  // Release markers seen since the segment's last boundary marker: the
  // payloads of entries below it are not read (their pages may be gone).
  uint64_t released_before = 0;
  auto deliver = [&](JournalEntry& e, uint64_t offset) -> absl::Status {
    if (e.has_payload_ref() && e.seq() < released_before) {
      e.set_payload_released(true);
      return callback(e);
    }
    if (load_payloads && e.has_payload_ref()) {
      const PayloadRef ref = e.payload_ref();
      if (payload_fd < 0) {
        payload_fd = ::open(payload_path.c_str(), O_RDONLY | O_CLOEXEC);
        if (payload_fd < 0) {
          if (errno == ENOENT) {
            return DataLoss(payload_path, absl::StrCat("payload file missing (entry seq ",
                                                       e.seq(), " at ", log_path, " offset ",
                                                       offset, ")"));
          }
          return PosixError(absl::StrCat("open ", payload_path), errno);
        }
      }
      absl::Status s = ReadFileRange(payload_fd, ref.offset(), ref.length(), &payload);
      if (absl::IsOutOfRange(s)) {
        return DataLoss(payload_path,
                        absl::StrCat("truncated payload at offset ", ref.offset(), ": entry seq ",
                                     e.seq(), " needs ", ref.length(), " bytes, ",
                                     payload.size(), " present"));
      }
      if (!s.ok()) return s;
      const uint32_t crc = crc32c::Value(payload.data(), payload.size());
      if (crc != ref.crc32c()) {
        return DataLoss(payload_path, absl::StrFormat(
                                          "payload checksum mismatch at offset %d (%d bytes, "
                                          "entry seq %d): stored crc32c %08x, computed %08x",
                                          ref.offset(), ref.length(), e.seq(), ref.crc32c(),
                                          crc));
      }
      e.set_inline_payload(std::move(payload));
      payload.clear();
    }
    return callback(e);
  };
  // A minibatch segment's entries are held back until the end of the
  // segment: a later boundary marker drops the ones before it. On an error,
  // the entries read before it are delivered first.
  std::vector<std::pair<JournalEntry, uint64_t>> pending;
  auto flush = [&](absl::Status error) -> absl::Status {
    for (auto& [e, offset] : pending) {
      if (absl::Status s = deliver(e, offset); !s.ok()) return s;
    }
    pending.clear();
    return error;
  };
  while (reader.ReadRecord(&record)) {
    // A report while reading this record means bytes before it were lost.
    if (absl::Status s = check_reporter(); !s.ok()) return flush(s);
    const uint64_t offset = reader.LastRecordOffset();
    if (!entry.ParseFromString(record)) {
      return flush(DataLoss(log_path, absl::StrCat("unparseable entry at offset ", offset)));
    }
    if (entry.api_id() == kBoundaryApiId || entry.api_id() == kReleaseApiId) {
      // Markers (boundary, release): minibatch logs only, no seq of their
      // own, linked to the entry before them.
      const char* what =
          entry.api_id() == kBoundaryApiId ? "boundary marker" : "release marker";
      if (kind != MINIBATCH || entry.seq() != 0) {
        return flush(DataLoss(log_path, absl::StrCat(what, " ",
                                                     kind != MINIBATCH ? "in a setup log"
                                                                       : "with a seq",
                                                     " at offset ", offset)));
      }
      if (entry.prev_seq() != prev_seq) {
        return flush(DataLoss(
            log_path, absl::StrCat("sequence gap at offset ", offset, ": ", what,
                                   " follows seq ", entry.prev_seq(),
                                   " but the previous entry read is seq ", prev_seq)));
      }
      if (entry.api_id() == kBoundaryApiId) {
        header->set_minibatch(entry.minibatch());
        header->set_boundary_seq(entry.boundary_seq());
        pending.clear();
        released_before = 0;
      } else {
        released_before = std::max(released_before, entry.released_before());
      }
      continue;
    }
    if (entry.seq() == 0 || entry.seq() <= prev_seq || entry.seq() < header->first_seq()) {
      return flush(DataLoss(log_path, absl::StrCat("sequence out of order at offset ", offset,
                                                   ": entry seq ", entry.seq(), " after seq ",
                                                   prev_seq, " (segment first_seq ",
                                                   header->first_seq(), ")")));
    }
    if (entry.prev_seq() != prev_seq) {
      return flush(DataLoss(log_path,
                            absl::StrCat("sequence gap at offset ", offset, ": entry seq ",
                                         entry.seq(), " follows seq ", entry.prev_seq(),
                                         " but the previous entry read is seq ", prev_seq)));
    }
    prev_seq = entry.seq();
    if (kind == MINIBATCH) {
      pending.emplace_back(std::move(entry), offset);
      entry.Clear();
      continue;
    }
    if (absl::Status s = deliver(entry, offset); !s.ok()) return s;
  }
  return flush(check_reporter());
}

namespace {

inline void PutVarint(uint64_t v, std::string* out) {
  char buf[10];
  int n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>(v | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out->append(buf, n);
}

inline int VarintSize(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Field tags: (number << 3) | wire type (0 varint, 2 length-delimited).
inline void PutVarintField(int number, uint64_t v, std::string* out) {
  if (v == 0) return;
  PutVarint(static_cast<uint64_t>(number) << 3, out);
  PutVarint(v, out);
}

inline void PutBytesField(int number, const std::string& v, bool always, std::string* out) {
  if (v.empty() && !always) return;
  PutVarint((static_cast<uint64_t>(number) << 3) | 2, out);
  PutVarint(v.size(), out);
  out->append(v);
}

template <typename Repeated>
void PutPackedField(int number, const Repeated& values, std::string* out) {
  if (values.empty()) return;
  size_t bytes = 0;
  for (uint64_t v : values) bytes += VarintSize(v);
  PutVarint((static_cast<uint64_t>(number) << 3) | 2, out);
  PutVarint(bytes, out);
  for (uint64_t v : values) PutVarint(v, out);
}

}  // namespace

void EncodeEntry(const JournalEntry& e, std::string* out) {
  PutVarintField(1, e.seq(), out);
  PutVarintField(2, e.api_id(), out);
  PutBytesField(3, e.args(), false, out);
  PutVarintField(4, e.flags(), out);
  if (e.has_inline_payload()) PutBytesField(5, e.inline_payload(), true, out);
  if (e.has_payload_ref()) {
    const PayloadRef& r = e.payload_ref();
    const size_t bytes = (r.offset() ? 1 + VarintSize(r.offset()) : 0) +
                         (r.length() ? 1 + VarintSize(r.length()) : 0) +
                         (r.crc32c() ? 1 + VarintSize(r.crc32c()) : 0);
    PutVarint((6 << 3) | 2, out);
    PutVarint(bytes, out);
    PutVarintField(1, r.offset(), out);
    PutVarintField(2, r.length(), out);
    PutVarintField(3, r.crc32c(), out);
  }
  PutVarintField(7, e.minibatch(), out);
  PutPackedField(8, e.creates(), out);
  PutPackedField(9, e.destroys(), out);
  PutPackedField(10, e.touches(), out);
  PutPackedField(11, e.overwrites(), out);
  PutVarintField(12, e.prev_seq(), out);
  PutVarintField(13, e.completes(), out);
  // int32: a negative value is encoded as its 64-bit sign extension.
  PutVarintField(14, static_cast<uint64_t>(static_cast<int64_t>(e.status())), out);
  PutBytesField(15, e.outputs(), false, out);
  PutVarintField(18, e.payload_released() ? 1 : 0, out);
  if (e.has_capture()) {
    const DeviceCapture& c = e.capture();
    const size_t bytes = (c.file().empty() ? 0 : 1 + VarintSize(c.file().size()) + c.file().size()) +
                         (c.offset() ? 1 + VarintSize(c.offset()) : 0) +
                         (c.length() ? 1 + VarintSize(c.length()) : 0);
    PutVarint((16 << 3) | 2, out);
    PutVarint(bytes, out);
    PutBytesField(1, c.file(), false, out);
    PutVarintField(2, c.offset(), out);
    PutVarintField(3, c.length(), out);
  }
}

// One segment being written: its log and payload files.
class SegmentWriter {
 public:
  // Creates the log file (under "<name>.tmp" if `tmp`) and writes `header`.
  // The payload file is created when the first out-of-line payload comes.
  // `spare`, if given (mapped logs only), is an all-zero mapped file that
  // becomes the log file: the header is written into it, then it is renamed
  // into place (no new mapping, see Journal::MarkBoundary).
  static absl::StatusOr<std::unique_ptr<SegmentWriter>> Create(
      const std::string& dir, const SegmentHeader& header, const JournalOptions& options,
      bool tmp, std::unique_ptr<MappedLogFile> spare = nullptr) {
    std::unique_ptr<SegmentWriter> w(new SegmentWriter(options));
    w->header_ = header;
    w->log_path_ = JoinPath(dir, SegmentLogName(header.kind(), header.segment_number()));
    w->payload_path_ = JoinPath(dir, SegmentPayloadName(header.kind(), header.segment_number()));
    w->suffix_ = tmp ? ".tmp" : "";
    if (options.mapped_logs && options.sync == SyncPolicy::kNone) {
      if (spare == nullptr) {
        absl::StatusOr<std::unique_ptr<MappedLogFile>> log =
            MappedLogFile::Create(w->log_path_ + w->suffix_, w->first_chunk(),
                                  journal_internal::kMaxMappedChunk);
        if (!log.ok()) return log.status();
        spare = std::move(*log);
      }
      w->mapped_log_ = std::move(spare);
      w->writer_ = std::make_unique<log::Writer>(w->mapped_log_.get());
    } else {
      absl::StatusOr<std::unique_ptr<WritableFile>> log =
          NewAppendableFile(w->log_path_ + w->suffix_);
      if (!log.ok()) return log.status();
      w->log_file_ = std::move(*log);
      w->writer_ = std::make_unique<log::Writer>(w->log_file_.get(), 0);
    }
    if (absl::Status s = w->writer_->AddRecord(header.SerializeAsString(),
                                               options.sync == SyncPolicy::kEveryRecord);
        !s.ok()) {
      return s;
    }
    if (w->mapped_log_ != nullptr && w->mapped_log_->path() != w->log_path_ + w->suffix_) {
      // A recycled spare: it appears under the segment's name with its
      // header already committed.
      if (absl::Status s = w->mapped_log_->Rename(w->log_path_ + w->suffix_); !s.ok()) return s;
    }
    w->header_bytes_ = w->writer_->file_length();
    w->minibatch_start_ = w->header_bytes_;
    return w;
  }

  // Whether a boundary marker may go into this segment instead of a new
  // segment: a mapped log still inside its first chunk, no payload file.
  // The next minibatch is expected to be as large as the last one: with
  // room for two more, the segment stays in its first chunk and can be
  // reused as a whole when the boundary after next starts a new segment.
  bool CanHoldMarker() const {
    const uint64_t length = writer_->file_length();
    const uint64_t last = length - minibatch_start_;
    return status_.ok() && mapped_log_ != nullptr && payload_file_ == nullptr &&
           length + 2 * (last + kMarkerRoom) <= first_chunk();
  }

  // Appends a boundary marker starting `minibatch` before request
  // `boundary_seq` (0: not known) (see the format).
  absl::Status AppendMarker(uint64_t minibatch, uint64_t boundary_seq) {
    if (!status_.ok()) return status_;
    // The JournalEntry {api_id, minibatch, prev_seq, boundary_seq} encoded
    // directly (once per training step: no message object built and
    // destroyed).
    record_.clear();
    PutVarintField(2, kBoundaryApiId, &record_);
    PutVarintField(7, minibatch, &record_);
    PutVarintField(12, last_seq_, &record_);
    if (boundary_seq != 0) PutVarintField(19, boundary_seq, &record_);
    absl::Status s = writer_->AddRecord(record_, options_.sync == SyncPolicy::kEveryRecord);
    if (!s.ok()) status_ = s;
    minibatch_start_ = writer_->file_length();
    return s;
  }

  // Releases the out-of-line payloads of entries with seq below `seq`
  // (Journal::ReleasePayloadsBefore): the release marker is committed first,
  // then the payload file's whole pages below the last such payload's end
  // are freed. Returns the bytes of pages freed.
  absl::StatusOr<uint64_t> ReleasePayloadsBefore(uint64_t seq) {
    if (!status_.ok()) return status_;
    uint64_t upto = released_upto_;
    while (!payload_marks_.empty() && payload_marks_.front().first < seq) {
      upto = payload_marks_.front().second;
      payload_marks_.pop_front();
    }
    if (upto <= released_upto_) return uint64_t{0};
    // The JournalEntry {api_id, prev_seq, released_before} encoded directly.
    record_.clear();
    PutVarintField(2, kReleaseApiId, &record_);
    PutVarintField(12, last_seq_, &record_);
    PutVarintField(17, seq, &record_);
    if (absl::Status s = writer_->AddRecord(record_, options_.sync == SyncPolicy::kEveryRecord);
        !s.ok()) {
      status_ = s;
      return s;
    }
    released_bytes_ += upto - released_upto_;
    released_upto_ = upto;
    // Whole pages only: the page holding `upto` may hold a later payload.
    constexpr uint64_t kPage = 4096;
    const uint64_t to = upto / kPage * kPage;
    if (payload_file_ == nullptr || payload_file_->fd() < 0 || to <= punched_upto_) {
      return uint64_t{0};
    }
    const uint64_t from = punched_upto_;
    punched_upto_ = to;
    // Freeing tmpfs pages costs ~2 ms per 10 MiB: on the journal's helper
    // thread when there is one (the caller is the executor).
    const int fd = punch_later_ ? ::dup(payload_file_->fd()) : -1;
    if (fd >= 0) {
      punch_later_(fd, from, to - from);
    } else if (Fallocate(payload_file_->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from,
                         to - from) != 0) {
      // The marker stands; the bytes stay (only memory is not given back).
      return uint64_t{0};
    }
    return to - from;
  }
  // `punch(fd, offset, length)` frees released payload pages on another
  // thread; it owns `fd`, a duplicate.
  void set_punch_later(std::function<void(int, uint64_t, uint64_t)> punch) {
    punch_later_ = std::move(punch);
  }
  uint64_t released_bytes() const { return released_bytes_; }

  // Gives the mapped log file up for reuse as a spare, keeping its name, or
  // returns null if it cannot be reused (not mapped, or grown past its first
  // chunk: then its files are removed). Its first *dirty bytes are not zeroed
  // yet (the caller zeroes them before the file is used again). The segment
  // must already be superseded (a higher-numbered segment of its log
  // exists), so its file, zeroed or not, is a stale one no reader looks at.
  //
  // Its payload file becomes the journal's spare if `keep_payload` (and it
  // is small enough), else it is removed: then its pages (those not released
  // yet, and those allocated ahead) are freed when its last descriptor
  // closes, on the helper thread where there is one (set_close_later), not
  // by the caller's unlink.
  std::unique_ptr<MappedLogFile> RecycleLog(uint64_t* dirty, bool keep_payload) {
    std::unique_ptr<MappedLogFile> log;
    *dirty = writer_->file_length();
    if (mapped_log_ != nullptr && status_.ok() &&
        mapped_log_->Recycle(*dirty, mapped_log_->path(), /*zero=*/false).ok()) {
      log = std::move(mapped_log_);
    }
    keep_payload = keep_payload && payload_length_ <= kMaxSparePayload;
    const int hold = !keep_payload && close_later_ && payload_file_ != nullptr &&
                             payload_file_->fd() >= 0
                         ? ::dup(payload_file_->fd())
                         : -1;
    Close().IgnoreError();
    if (keep_payload) KeepPayloadAsSpare();
    if (log == nullptr) {
      if (absl::Status r = Remove(); !r.ok()) {
        REVENANT_LOG(WARNING, "journal") << "cannot remove old segment: " << r;
      }
    } else if (payload_file_ != nullptr) {
      RemoveFile(payload_path_ + suffix_).IgnoreError();
    }
    if (hold >= 0) close_later_(hold);
    return log;
  }

  // Appends `entry` (setting prev_seq, moving a large payload out of line);
  // `payload` is the entry's payload by reference (see Journal::AppendSetup).
  // *bytes receives what the entry occupies in the files.
  absl::Status Append(JournalEntry* entry, absl::string_view payload, uint64_t* bytes) {
    if (!status_.ok()) return status_;
    const bool sync = options_.sync == SyncPolicy::kEveryRecord;
    // An inline payload over the threshold (an entry read back with its
    // payload loaded: re-open, compaction) takes the same out-of-line path.
    std::string moved;
    // A minibatch log's inline records stay within half its first chunk.
    const size_t inline_limit =
        mapped_log_ != nullptr
            ? std::max(options_.inline_payload_threshold,
                       header_.kind() == MINIBATCH
                           ? std::min(options_.mapped_inline_payload_threshold, first_chunk() / 2)
                           : options_.mapped_inline_payload_threshold)
            : options_.inline_payload_threshold;
    if (payload.empty() && entry->has_inline_payload() &&
        entry->inline_payload().size() > inline_limit) {
      moved = std::move(*entry->mutable_inline_payload());
      entry->clear_inline_payload();
      payload = moved;
    }
    uint64_t payload_bytes = 0;
    if (payload.size() > inline_limit) {
      // The payload goes first, so a record never points at bytes not
      // written. Written from the caller's memory: no copy into the entry.
      PayloadRef* ref = entry->mutable_payload_ref();
      ref->set_offset(payload_length_);
      ref->set_length(payload.size());
      ref->set_crc32c(crc32c::Value(payload.data(), payload.size()));
      absl::Status s;
      if (payload_file_ == nullptr) {
        absl::StatusOr<std::unique_ptr<WritableFile>> f = OpenPayloadFile();
        if (f.ok()) {
          payload_file_ = std::move(*f);
        } else {
          s = f.status();
        }
      }
      if (s.ok()) s = payload_file_->Append(payload);
      if (s.ok() && sync) s = payload_file_->Sync();
      if (!s.ok()) {
        status_ = s;
        return s;
      }
      payload_length_ += payload.size();
      payload_bytes = payload.size();
      if (header_.kind() == MINIBATCH) payload_marks_.emplace_back(entry->seq(), payload_length_);
      AllocateAhead();
    }
    // An inline payload given by reference is encoded last (field 5 after
    // the others: protobuf accepts fields in any order) and copied once,
    // from the caller's memory straight into the log.
    absl::string_view inline_tail;
    if (!payload.empty() && payload_bytes == 0) inline_tail = payload;
    entry->set_prev_seq(last_seq_);
    const uint64_t before = writer_->file_length();
    // The serialization buffer is reused: no allocation per record.
    record_.clear();
    EncodeEntry(*entry, &record_);
    if (!inline_tail.empty()) {
      PutVarint((5 << 3) | 2, &record_);
      PutVarint(inline_tail.size(), &record_);
    }
    absl::Status s = writer_->AddRecord(record_, inline_tail, sync);
    if (record_.capacity() > (size_t{1} << 20)) std::string().swap(record_);
    if (!s.ok()) {
      status_ = s;
      return s;
    }
    last_seq_ = entry->seq();
    *bytes = writer_->file_length() - before + payload_bytes;
    return absl::OkStatus();
  }

  // A minibatch segment: `close(fd)` closes `fd` (a duplicate of a removed
  // payload file's, which it owns) on another thread, after the frees asked
  // of it before.
  void set_close_later(std::function<void(int)> close) { close_later_ = std::move(close); }
  // A minibatch segment: where the journal keeps a superseded segment's
  // payload file for the next one's (Journal::spare_payload_).
  void set_spare_payload(SparePayload* spare) { spare_payload_ = spare; }
  // A minibatch segment: `allocate(fd, offset, length)` has the payload
  // file's next JournalOptions::payload_ahead_bytes allocated on another
  // thread once the payload comes within half of them of what it asked for
  // before; it owns `fd`, a duplicate.
  void set_allocate_ahead(std::function<void(int, uint64_t, uint64_t)> allocate) {
    allocate_ahead_ = std::move(allocate);
  }

  absl::Status Close() {
    // A mapped log is truncated to the log's length: no zero tail remains.
    absl::Status a;
    if (mapped_log_ != nullptr) {
      a = mapped_log_->Close(writer_->file_length());
    } else if (log_file_ != nullptr) {
      a = log_file_->Close();
    }
    absl::Status b = payload_file_ ? payload_file_->Close() : absl::OkStatus();
    return a.ok() ? b : a;
  }

  // Makes a segment created with tmp=true visible: the payload file first
  // (if there is one), then the log file, each by an atomic rename.
  absl::Status Publish() {
    if (payload_file_ != nullptr) {
      if (absl::Status s = RenameFile(payload_path_ + ".tmp", payload_path_); !s.ok()) return s;
    }
    if (absl::Status s = RenameFile(log_path_ + ".tmp", log_path_); !s.ok()) return s;
    if (mapped_log_ != nullptr) mapped_log_->set_path(log_path_);
    suffix_.clear();
    return absl::OkStatus();
  }

  absl::Status Remove() {
    absl::Status a = RemoveFile(log_path_ + suffix_);
    absl::Status b = payload_file_ ? RemoveFile(payload_path_ + suffix_) : absl::OkStatus();
    return a.ok() ? b : a;
  }

  // The log's bytes and the payload file's, less the payload pages a
  // compaction freed (FreePayloadOutside).
  uint64_t file_bytes() const {
    return writer_->file_length() + payload_length_ - payload_freed_;
  }
  uint64_t log_bytes() const { return writer_->file_length(); }

  // A compaction's new (tmp) segment takes `old`'s payload file as its own:
  // linked under its name (the same pages: nothing copied), appended to
  // after its end, so that the entries carried over keep their payload
  // references. Before any payload of its own.
  absl::Status AdoptPayloadFile(const SegmentWriter& old) {
    if (old.payload_file_ == nullptr || payload_file_ != nullptr) return absl::OkStatus();
    const std::string from = old.payload_path_ + old.suffix_;
    const std::string to = payload_path_ + suffix_;
    if (::link(from.c_str(), to.c_str()) != 0) {
      return PosixError(absl::StrCat("link ", from, " to ", to), errno);
    }
    absl::StatusOr<std::unique_ptr<WritableFile>> f = NewAppendableFile(to);
    if (!f.ok()) {
      RemoveFile(to).IgnoreError();
      return f.status();
    }
    payload_file_ = std::move(*f);
    payload_length_ = old.payload_length_;
    payload_freed_ = old.payload_freed_;
    return absl::OkStatus();
  }

  // Frees the whole pages of the payload file that no range of `live`
  // (offset, length) touches: the dead entries' payloads once nothing names
  // them any more. Returns the bytes of pages freed now and before (the
  // holes between the live payloads); a failure frees nothing more.
  uint64_t FreePayloadOutside(std::vector<std::pair<uint64_t, uint64_t>> live) {
    if (payload_file_ == nullptr || payload_file_->fd() < 0) return payload_freed_;
    std::sort(live.begin(), live.end());
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    uint64_t freed = 0, at = 0;
    auto punch = [&](uint64_t from, uint64_t to) {
      from = (from + page - 1) / page * page;
      to = to / page * page;
      if (to <= from) return true;
      if (Fallocate(payload_file_->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, from,
                    to - from) != 0) {
        return false;
      }
      freed += to - from;
      return true;
    };
    for (const auto& [offset, length] : live) {
      if (offset > at && !punch(at, offset)) return payload_freed_;
      at = std::max(at, offset + length);
    }
    if (payload_length_ > at && !punch(at, payload_length_)) return payload_freed_;
    payload_freed_ = freed;
    return payload_freed_;
  }
  uint64_t header_bytes() const { return header_bytes_; }
  // Log bytes of the minibatches before the last boundary marker.
  uint64_t finished_bytes() const { return minibatch_start_ - header_bytes_; }
  const SegmentHeader& header() const { return header_; }
  const std::string& log_path() const { return log_path_; }
  const std::string& payload_path() const { return payload_path_; }

 private:
  explicit SegmentWriter(const JournalOptions& options) : options_(options) {}

  // The payload file, created at the first out-of-line payload: the spare,
  // if the journal has one, renamed into place and written over from its
  // start (its pages are allocated already), else a new file.
  absl::StatusOr<std::unique_ptr<WritableFile>> OpenPayloadFile() {
    const std::string path = payload_path_ + suffix_;
    if (spare_payload_ != nullptr && spare_payload_->present) {
      spare_payload_->present = false;
      if (RenameFile(spare_payload_->path, path).ok()) {
        ++spare_payload_->reused;
        absl::StatusOr<std::unique_ptr<WritableFile>> f = NewOverwritingFile(path);
        // Its pages are there already (as many as it holds, from its start:
        // holes punched behind snapshots are refilled by the writes): the
        // helper is asked only past them (a job with a journal boundary per
        // step reuses the file every step; asking for its first 16 MiB each
        // time held the file's inode lock against the step's payload write).
        struct stat st;
        if (f.ok() && (*f)->fd() >= 0 && ::fstat((*f)->fd(), &st) == 0) {
          ahead_end_ = static_cast<uint64_t>(st.st_blocks) * 512;
        }
        return f;
      }
      RemoveFile(spare_payload_->path).IgnoreError();
    }
    return NewAppendableFile(path);
  }

  // Off with 0 bytes, and for journals synced to disk (tmpfs is the case
  // it is for).
  void AllocateAhead() {
    const uint64_t ahead = options_.payload_ahead_bytes;
    if (!allocate_ahead_ || ahead == 0 || options_.sync != SyncPolicy::kNone ||
        payload_file_ == nullptr || payload_length_ + ahead / 2 < ahead_end_) {
      return;
    }
    const int fd = payload_file_->fd() >= 0 ? ::dup(payload_file_->fd()) : -1;
    if (fd < 0) return;  // not a POSIX file, or out of descriptors: writes allocate
    const uint64_t from = std::max(ahead_end_, payload_length_);
    allocate_ahead_(fd, from, ahead);
    ahead_end_ = from + ahead;
  }

  // A superseded segment (closed) hands its payload file to the journal as
  // the spare (an older spare not taken is removed); the file is no longer
  // this segment's. RecycleLog decides whether (up to kMaxSparePayload).
  void KeepPayloadAsSpare() {
    if (payload_file_ == nullptr || spare_payload_ == nullptr) return;
    if (spare_payload_->present) RemoveFile(spare_payload_->path).IgnoreError();
    spare_payload_->present = RenameFile(payload_path_ + suffix_, spare_payload_->path).ok();
    if (spare_payload_->present) payload_file_.reset();
  }

  const JournalOptions options_;
  SegmentHeader header_;
  std::string log_path_;
  std::string payload_path_;
  std::string suffix_;  // ".tmp" until published
  // Payload file bytes whose pages a compaction freed (setup segments).
  uint64_t payload_freed_ = 0;
  // Mapped log files grow by chunks: a small first one (a minibatch segment
  // lives for one training step), doubling up to kMaxMappedChunk.
  static constexpr size_t kFirstChunk = log::kBlockSize;
  // A minibatch segment holds several training steps between boundary
  // markers: a larger first chunk means fewer new segments
  // (JournalOptions::minibatch_first_chunk).
  size_t first_chunk() const {
    return header_.kind() == MINIBATCH ? options_.minibatch_first_chunk : kFirstChunk;
  }
  // Bytes kept free in the first chunk for a boundary marker's record.
  static constexpr size_t kMarkerRoom = 64;

  std::unique_ptr<WritableFile> log_file_;      // written with write(2), or
  std::unique_ptr<MappedLogFile> mapped_log_;   // through a mapping
  std::unique_ptr<WritableFile> payload_file_;
  SparePayload* spare_payload_ = nullptr;
  std::unique_ptr<log::Writer> writer_;
  uint64_t payload_length_ = 0;
  std::function<void(int, uint64_t, uint64_t)> allocate_ahead_;
  std::function<void(int, uint64_t, uint64_t)> punch_later_;
  std::function<void(int)> close_later_;
  uint64_t ahead_end_ = 0;  // the payload file's bytes asked to be allocated
  // A minibatch segment's out-of-line payloads not yet released: (seq, the
  // payload file's length after it), in order; payload bytes below
  // released_upto_ are released, pages below punched_upto_ freed.
  std::deque<std::pair<uint64_t, uint64_t>> payload_marks_;
  uint64_t released_upto_ = 0;
  uint64_t released_bytes_ = 0;
  uint64_t punched_upto_ = 0;
  uint64_t header_bytes_ = 0;
  uint64_t minibatch_start_ = 0;  // log length where the current minibatch began
  uint64_t last_seq_ = 0;
  absl::Status status_;
  std::string record_;  // serialized entry, reused
};

}  // namespace journal_internal

using journal_internal::SegmentWriter;

Journal::Journal(std::string dir, std::string job, uint32_t rank, const JournalOptions& options)
    : dir_(std::move(dir)), job_(std::move(job)), rank_(rank), options_(options) {
  spare_payload_.path = journal_internal::JoinPath(
      dir_, absl::StrCat(journal_internal::KindPrefix(MINIBATCH), "spare-payload.tmp"));
}

Journal::~Journal() {
  {
    absl::MutexLock lock(&spare_mu_);
    spare_stop_ = true;
  }
  if (spare_thread_.joinable()) spare_thread_.join();
  std::unique_ptr<MappedLogFile> spare;
  {
    absl::MutexLock lock(&spare_mu_);
    spare = std::move(spare_log_);
    for (const AheadRequest& r : ahead_) ::close(r.fd);
    ahead_.clear();
  }
  absl::MutexLock lock(&mu_);
  if (setup_) setup_->Close().IgnoreError();
  if (minibatch_) minibatch_->Close().IgnoreError();
  if (spare) {
    spare->Close(0).IgnoreError();
    RemoveFile(spare->path()).IgnoreError();
  }
  if (spare_payload_.present) RemoveFile(spare_payload_.path).IgnoreError();
}

void Journal::ZeroSpareLater(std::unique_ptr<MappedLogFile> log, uint64_t dirty) {
  absl::MutexLock lock(&spare_mu_);
  spare_mu_.Await(absl::Condition(this, &Journal::SpareIdle));
  if (spare_log_ != nullptr) {  // an older spare never taken: drop it
    spare_log_->Close(0).IgnoreError();
    RemoveFile(spare_log_->path()).IgnoreError();
  }
  spare_log_ = std::move(log);
  spare_dirty_ = dirty;
  if (!spare_thread_.joinable()) {
    spare_thread_ = std::thread([this] { SpareLoop(); });
  }
}

void Journal::AllocateAheadLater(int fd, uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&spare_mu_);
  if (spare_stop_) {
    ::close(fd);
    return;
  }
  ahead_.push_back(AheadRequest{fd, offset, length, AheadRequest::kAllocate});
  if (!spare_thread_.joinable()) {
    spare_thread_ = std::thread([this] { SpareLoop(); });
  }
}

void Journal::PunchLater(int fd, uint64_t offset, uint64_t length) {
  absl::MutexLock lock(&spare_mu_);
  if (spare_stop_) {
    ::close(fd);
    return;
  }
  ahead_.push_back(AheadRequest{fd, offset, length, AheadRequest::kPunch});
  ++punches_pending_;
  if (!spare_thread_.joinable()) {
    spare_thread_ = std::thread([this] { SpareLoop(); });
  }
}

void Journal::CloseLater(int fd) {
  absl::MutexLock lock(&spare_mu_);
  if (spare_stop_) {
    ::close(fd);
    return;
  }
  ahead_.push_back(AheadRequest{fd, 0, 0, AheadRequest::kClose});
  if (!spare_thread_.joinable()) {
    spare_thread_ = std::thread([this] { SpareLoop(); });
  }
}

bool Journal::Punching() {
  absl::MutexLock lock(&spare_mu_);
  return punches_pending_ > 0;
}

void Journal::CreateSpareLater() {
  absl::MutexLock lock(&spare_mu_);
  spare_create_ = true;
  if (!spare_thread_.joinable()) {
    spare_thread_ = std::thread([this] { SpareLoop(); });
  }
}

std::unique_ptr<MappedLogFile> Journal::TakeZeroedSpare() {
  absl::MutexLock lock(&spare_mu_);
  // Zeroing a spare takes tens of microseconds; the next new segment comes
  // many boundaries later, so this normally does not wait.
  spare_mu_.Await(absl::Condition(this, &Journal::SpareIdle));
  return std::move(spare_log_);
}

void Journal::SpareLoop() {
  constexpr uint64_t kFallocatePiece = 2u << 20;
  std::vector<AheadRequest> ahead;
  while (true) {
    MappedLogFile* log = nullptr;
    uint64_t dirty = 0;
    bool create = false;
    {
      absl::MutexLock lock(&spare_mu_);
      auto work = [this] {
        return spare_stop_ || spare_dirty_ != 0 || spare_create_ || !ahead_.empty();
      };
      spare_mu_.Await(absl::Condition(&work));
      if (spare_stop_) return;
      create = spare_create_;
      log = spare_log_.get();
      dirty = spare_dirty_;
      // The spare first: a boundary waits for it (TakeZeroedSpare), none
      // waits for the requests below.
      if (!create && dirty == 0) ahead.swap(ahead_);
    }
    if (!ahead.empty()) {
      // Payload pages ahead of the writes (not fatal if refused: the write
      // then allocates them itself, as without this).
      // Released payload pages freed (in order with the allocations: a
      // file's pages are punched only below where it was allocated ahead).
      int punched = 0;
      for (const AheadRequest& r : ahead) {
        const bool punch = r.kind == AheadRequest::kPunch;
        if (r.kind == AheadRequest::kClose) {
          // A removed payload file's last descriptor: closing it frees its
          // pages (~0.1 ms per MiB), here rather than in the boundary.
          timeline::Span span("journal helper: removed payload file's pages freed");
          ::close(r.fd);
          continue;
        }
        timeline::Span span(punch ? "journal helper: released payload pages freed"
                                  : "journal helper: payload pages allocated ahead");
        if (timeline::Enabled()) span.set_detail(absl::StrCat(r.length >> 10, " KiB"));
        // In pieces: tmpfs holds the file's inode lock through a fallocate,
        // and the writer's next payload write (write(2) into the same file,
        // by the executor or the journal thread) waits for it: ~2 ms per 10 MiB at once would hold a
        // request up that long, a piece holds it ~0.4 ms.
        const int mode = punch ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE : FALLOC_FL_KEEP_SIZE;
        if (punch && options_.before_punch) options_.before_punch();
        uint64_t done = 0;
        for (uint64_t at = r.offset, end = r.offset + r.length; at < end;) {
          const uint64_t n = std::min<uint64_t>(kFallocatePiece, end - at);
          if (Fallocate(r.fd, mode, at, n) != 0) break;
          done += n;
          at += n;
          // A pause, so that a write waiting for the lock takes it first.
          if (at < end) std::this_thread::sleep_for(std::chrono::microseconds(50));
        }
        if (punch) {
          payload_bytes_punched_.fetch_add(done, std::memory_order_relaxed);
          ++punched;
        } else {
          payload_bytes_ahead_.fetch_add(done, std::memory_order_relaxed);
        }
        ::close(r.fd);
      }
      ahead.clear();
      if (punched > 0) {
        absl::MutexLock lock(&spare_mu_);
        punches_pending_ -= punched;
      }
      continue;
    }
    if (create) {
      // A fresh file under a name readers ignore (a *.tmp of the minibatch
      // kind: the next Open deletes it); a new segment renames it into place.
      // It is made and sized under a second such name and renamed to the
      // spare's name only when complete, so nobody (a test, a reader, the
      // next Open after a crash) ever sees a half-made spare under that name.
      const std::string path = journal_internal::JoinPath(
          dir_, absl::StrCat(journal_internal::KindPrefix(MINIBATCH), "spare.tmp"));
      const std::string partial = journal_internal::JoinPath(
          dir_, absl::StrCat(journal_internal::KindPrefix(MINIBATCH), "spare-part.tmp"));
      const size_t chunk = options_.minibatch_first_chunk;
      absl::StatusOr<std::unique_ptr<MappedLogFile>> fresh =
          MappedLogFile::Create(partial, chunk, journal_internal::kMaxMappedChunk);
      // Span allocates and maps the first chunk.
      absl::Status s = fresh.ok() ? (*fresh)->Span(0, 1).status() : fresh.status();
      if (s.ok()) s = (*fresh)->Rename(path);
      if (!s.ok()) {
        // Not fatal: the first new segment then makes its own file.
        REVENANT_LOG(WARNING, "journal") << "cannot prepare a spare minibatch log: " << s;
      }
      bool stop;
      {
        absl::MutexLock lock(&spare_mu_);
        spare_create_ = false;
        stop = spare_stop_;
        if (s.ok() && !stop && spare_log_ == nullptr) spare_log_ = std::move(*fresh);
      }
      // Not taken (failed, stopping, or a recycled log came first): removed.
      if (fresh.ok() && *fresh != nullptr) {
        (*fresh)->Close(0).IgnoreError();
        RemoveFile((*fresh)->path()).IgnoreError();
      }
      if (stop) return;
      continue;
    }
    // Only this thread touches the spare while spare_dirty_ != 0.
    log->ZeroPrefix(dirty);
    absl::MutexLock lock(&spare_mu_);
    spare_dirty_ = 0;
    if (spare_stop_) return;
  }
}

absl::StatusOr<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                                       const std::string& job, uint32_t rank,
                                                       const JournalOptions& options) {
  if (options.minibatch_first_chunk < log::kBlockSize ||
      options.minibatch_first_chunk % log::kBlockSize != 0 ||
      options.minibatch_first_chunk > (size_t{64} << 20)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "minibatch log first chunk of ", options.minibatch_first_chunk,
        " bytes: must be a multiple of ", log::kBlockSize, " bytes, at most 64 MiB"));
  }
  std::unique_ptr<Journal> journal(new Journal(dir, job, rank, options));
  {
    absl::MutexLock lock(&journal->mu_);
    if (absl::Status s = journal->Init(); !s.ok()) return s;
  }
  if (options.mapped_logs && options.sync == SyncPolicy::kNone) journal->CreateSpareLater();
  return journal;
}

absl::StatusOr<std::unique_ptr<SegmentWriter>> Journal::NewSegment(
    LogKind kind, bool tmp, uint64_t minibatch, std::unique_ptr<MappedLogFile> spare) {
  SegmentHeader header;
  header.set_format_version(kFormatVersion);
  header.set_job_id(job_);
  header.set_rank(rank_);
  header.set_kind(kind);
  header.set_first_seq(last_seq_ + 1);
  header.set_creation_time_unix_micros(absl::ToUnixMicros(absl::Now()));
  header.set_segment_number(next_segment_number_++);
  header.set_minibatch(minibatch);
  absl::StatusOr<std::unique_ptr<SegmentWriter>> w =
      SegmentWriter::Create(dir_, header, options_, tmp, std::move(spare));
  if (w.ok() && kind == MINIBATCH) {
    (*w)->set_spare_payload(&spare_payload_);
    (*w)->set_allocate_ahead([this](int fd, uint64_t offset, uint64_t length) {
      AllocateAheadLater(fd, offset, length);
    });
    (*w)->set_punch_later([this](int fd, uint64_t offset, uint64_t length) {
      PunchLater(fd, offset, length);
    });
    (*w)->set_close_later([this](int fd) { CloseLater(fd); });
  }
  return w;
}

absl::Status Journal::Init() {
  if (absl::Status s = CreateDirs(dir_); !s.ok()) return s;
  absl::StatusOr<journal_internal::DirListing> listing = journal_internal::ListJournalDir(dir_);
  if (!listing.ok()) return listing.status();
  next_segment_number_ = listing->max_number + 1;

  // Carry an existing journal over into fresh segments. Rewriting (rather
  // than appending to the old files) drops a torn tail instead of burying it
  // under new records, and verifies every entry on the way.
  struct Old {
    LogKind kind;
    uint64_t number;
  };
  const Old olds[] = {{SETUP, listing->setup}, {MINIBATCH, listing->minibatch}};
  uint64_t max_seq = 0;
  for (const Old& old : olds) {
    const bool exists = old.number != 0;
    SegmentHeader old_header;
    std::unique_ptr<SegmentWriter>& target = old.kind == SETUP ? setup_ : minibatch_;
    // The new segment's first_seq must not exceed the entries carried over.
    const uint64_t saved_last_seq = last_seq_;
    last_seq_ = 0;
    absl::StatusOr<std::unique_ptr<SegmentWriter>> seg = NewSegment(old.kind, /*tmp=*/true, 0);
    last_seq_ = saved_last_seq;
    if (!seg.ok()) return seg.status();
    target = std::move(*seg);
    if (exists) {
      const std::string log_path =
          journal_internal::JoinPath(dir_, journal_internal::SegmentLogName(old.kind, old.number));
      const std::string payload_path = journal_internal::JoinPath(
          dir_, journal_internal::SegmentPayloadName(old.kind, old.number));
      uint64_t last = 0;
      // The current minibatch's boundary marker, where it names the request
      // the boundary precedes, comes first in the new minibatch segment (a
      // later replacement needs it as much as this one did).
      bool marker_carried = false;
      auto carry_marker = [&]() -> absl::Status {
        if (marker_carried || old.kind != MINIBATCH || old_header.boundary_seq() == 0) {
          return absl::OkStatus();
        }
        marker_carried = true;
        return target->AppendMarker(old_header.minibatch(), old_header.boundary_seq());
      };
      absl::Status s = journal_internal::ReadSegment(
          log_path, payload_path, old.kind, /*load_payloads=*/true, &old_header,
          [&](JournalEntry& entry) {
            if (absl::Status m = carry_marker(); !m.ok()) return m;
            last = entry.seq();
            // A released payload stays released: the entry is carried over
            // without it, marked (a replay of it is data loss).
            if (entry.payload_released()) entry.clear_payload_ref();
            return AppendLocked(old.kind, &entry, {}, /*check_seq=*/false);
          });
      if (s.ok()) s = carry_marker();
      if (!s.ok()) return s;
      if (!old_header.job_id().empty() &&
          (old_header.job_id() != job_ || old_header.rank() != rank_)) {
        return absl::FailedPreconditionError(
            absl::StrCat(log_path, " belongs to job ", old_header.job_id(), " rank ",
                         old_header.rank(), ", not job ", job_, " rank ", rank_));
      }
      if (old.kind == MINIBATCH) current_minibatch_ = old_header.minibatch();
      max_seq = std::max(max_seq, last);
    }
  }
  for (const Old& old : olds) {
    SegmentWriter* w = old.kind == SETUP ? setup_.get() : minibatch_.get();
    if (absl::Status s = w->Publish(); !s.ok()) return s;
  }
  last_seq_ = std::max(last_seq_, max_seq);
  // The old segments are superseded now that the new ones are published.
  absl::StatusOr<journal_internal::DirListing> after = journal_internal::ListJournalDir(dir_);
  if (!after.ok()) return after.status();
  for (const std::string& name : after->stale) {
    if (absl::Status s = RemoveFile(journal_internal::JoinPath(dir_, name)); !s.ok()) {
      REVENANT_LOG(WARNING, "journal") << "cannot remove stale " << name << ": " << s;
    }
  }
  if (listing->setup != 0 || listing->minibatch != 0) {
    REVENANT_LOG(INFO, "journal") << "reopened " << dir_ << ": " << entries_.size()
                                  << " live setup entries, " << minibatch_entries_
                                  << " minibatch entries, last seq " << last_seq_;
  }
  return MaybeCompact();
}

absl::Status Journal::AppendSetup(JournalEntry entry, absl::string_view payload) {
  return AppendSetup(&entry, payload);
}

absl::Status Journal::AppendMinibatch(JournalEntry entry, absl::string_view payload) {
  return AppendMinibatch(&entry, payload);
}

absl::Status Journal::AppendSetup(JournalEntry* entry, absl::string_view payload) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = AppendLocked(SETUP, entry, payload, /*check_seq=*/true); !s.ok()) {
    return s;
  }
  return MaybeCompact();
}

absl::Status Journal::AppendMinibatch(JournalEntry* entry, absl::string_view payload) {
  absl::MutexLock lock(&mu_);
  return AppendLocked(MINIBATCH, entry, payload, /*check_seq=*/true);
}

absl::Status Journal::AppendLocked(LogKind kind, JournalEntry* entry, absl::string_view payload,
                                   bool check_seq) {
  if (!status_.ok()) return status_;
  if (check_seq) {
    if (entry->seq() <= last_seq_) {
      return absl::InvalidArgumentError(absl::StrCat("journal entry seq ", entry->seq(),
                                                     " does not follow last seq ", last_seq_));
    }
    if (entry->has_payload_ref()) {
      return absl::InvalidArgumentError("payload_ref is set by the journal, not the caller");
    }
    if (!payload.empty() && entry->has_inline_payload()) {
      return absl::InvalidArgumentError(
          "a journal entry has an inline payload and a payload by reference");
    }
  }
  SegmentWriter* w = kind == SETUP ? setup_.get() : minibatch_.get();
  // The bounds apply to new appends (check_seq), not to the entries Init
  // carries over from a reopened journal, which were admitted before (and
  // during which the minibatch log does not exist yet).
  if (check_seq && (options_.max_bytes != 0 || options_.warn_bytes != 0)) {
    const uint64_t held =
        (setup_ != nullptr ? setup_->file_bytes() : 0) +
        (minibatch_ != nullptr ? minibatch_->file_bytes() - minibatch_->released_bytes() : 0);
    // The record's size bounded from above: the entry, its payload and the
    // framing of every 32 KiB block it may span (computed only with a limit:
    // it costs a pass over the entry).
    uint64_t record = 0;
    if (options_.max_bytes != 0) {
      record = entry->ByteSizeLong() + payload.size();
      record += log::kHeaderSize * (2 + record / log::kBlockSize);
    }
    const uint64_t after = held + record;
    if (options_.max_bytes != 0 && after > options_.max_bytes) {
      status_ = absl::ResourceExhaustedError(absl::StrCat(
          "journal in ", dir_, " is full: ", held, " bytes held, the journal's limit is ",
          options_.max_bytes, " bytes (as ENOSPC: nothing of this record was written)"));
      return status_;
    }
    if (next_warn_bytes_ == 0) next_warn_bytes_ = options_.warn_bytes;
    if (options_.warn_bytes != 0 && after > next_warn_bytes_) {
      next_warn_bytes_ *= 2;
      REVENANT_LOG(WARNING, "journal")
          << "journal in " << dir_ << " holds " << held << " bytes (" << entries_.size()
          << " live setup entries" << (boundaries_ == 0 ? ", no minibatch boundary yet" : "")
          << "): a job whose calls reach no minibatch boundary keeps every call, and the "
             "journal grows with each; mark each training step with revenantMarkStep() "
             "(docs/reliability.md)"
          << (options_.max_bytes != 0
                  ? absl::StrCat("; the agent stops at its limit of ", options_.max_bytes,
                                 " bytes")
                  : std::string())
          << "; next warning at " << next_warn_bytes_ << " bytes";
    }
  }
  uint64_t bytes = 0;
  if (absl::Status s = w->Append(entry, payload, &bytes); !s.ok()) {
    status_ = s;
    return s;
  }
  last_seq_ = std::max(last_seq_, entry->seq());
  if (kind == SETUP) {
    if (check_seq) {
      auto& by_api = setup_by_api_[entry->api_id()];
      ++by_api.first;
      by_api.second += bytes;
    }
    TrackSetupEntry(*entry, bytes);
    setup_file_bytes_.store(setup_->file_bytes(), std::memory_order_relaxed);
  } else {
    ++minibatch_entries_;
    UpdateLiveLocked();
  }
  return absl::OkStatus();
}

void Journal::UpdateLiveLocked() {
  setup_file_bytes_.store(setup_ ? setup_->file_bytes() : 0, std::memory_order_relaxed);
  uint64_t live = 0, log = 0;
  if (minibatch_ != nullptr) {
    const uint64_t held = minibatch_->file_bytes() - minibatch_->finished_bytes();
    live = held - std::min(held, minibatch_->released_bytes());
    log = minibatch_->log_bytes();
  }
  live_minibatch_.store(live, std::memory_order_relaxed);
  minibatch_log_.store(log, std::memory_order_relaxed);
}

void Journal::TrackSetupEntry(const JournalEntry& entry, uint64_t bytes) {
  const uint64_t seq = entry.seq();
  const bool has_keys = entry.creates_size() > 0 || entry.destroys_size() > 0 ||
                        entry.touches_size() > 0 || entry.overwrites_size() > 0;
  if (!has_keys && entry.completes() != 0 && !entries_.contains(entry.completes())) {
    // The outcome of a request that is no longer live (a destroy, whose keys
    // went with it): nothing replays it, so it is not live either.
    return;
  }
  const uint64_t payload = entry.has_payload_ref() ? entry.payload_ref().length() : 0;
  entries_[seq] = EntryState{bytes, 0, !has_keys, payload};
  live_bytes_ += bytes;
  live_payload_bytes_ += payload;
  if (!has_keys) return;

  const absl::flat_hash_set<uint64_t> destroyed(entry.destroys().begin(),
                                                entry.destroys().end());
  int refs = 0;
  for (uint64_t key : destroyed) {
    auto it = keys_.find(key);
    if (it == keys_.end()) {
      // Nothing in this log named the key: the destroy may matter on replay.
      ++refs;
      continue;
    }
    KeyState state = std::move(it->second);
    keys_.erase(it);
    for (uint64_t holder : state.holders) Unref(holder);
    if (state.overwriter != 0) Unref(state.overwriter);
  }
  absl::flat_hash_set<uint64_t> held;
  for (uint64_t key : entry.creates()) held.insert(key);
  for (uint64_t key : entry.touches()) held.insert(key);
  // An outcome's created keys also hold the entry it completes (whose keys
  // were not known before it executed): it stops being permanent.
  auto completed = entry.completes() != 0 ? entries_.find(entry.completes()) : entries_.end();
  if (completed != entries_.end() && entry.creates_size() > 0) {
    completed->second.permanent = false;
  }
  for (uint64_t key : held) {
    if (destroyed.contains(key)) continue;
    keys_[key].holders.push_back(seq);
    ++refs;
    if (completed != entries_.end() && !completed->second.permanent) {
      keys_[key].holders.push_back(completed->first);
      ++completed->second.refs;
    }
  }
  const absl::flat_hash_set<uint64_t> overwritten(entry.overwrites().begin(),
                                                  entry.overwrites().end());
  for (uint64_t key : overwritten) {
    if (destroyed.contains(key)) continue;
    KeyState& state = keys_[key];
    if (state.overwriter != 0) Unref(state.overwriter);
    state.overwriter = seq;
    ++refs;
  }
  auto it = entries_.find(seq);
  it->second.refs += refs;
  if (it->second.refs == 0) {
    live_bytes_ -= it->second.bytes;
    live_payload_bytes_ -= it->second.payload;
    entries_.erase(it);
  }
}

void Journal::Unref(uint64_t seq) {
  auto it = entries_.find(seq);
  if (it == entries_.end()) return;
  EntryState& state = it->second;
  if (--state.refs > 0 || state.permanent) return;
  live_bytes_ -= state.bytes;
  live_payload_bytes_ -= state.payload;
  entries_.erase(it);
}

absl::Status Journal::MaybeCompact() {
  if (!options_.compaction_enabled) return absl::OkStatus();
  const uint64_t live = live_bytes_ + setup_->header_bytes();
  const uint64_t total = setup_->file_bytes();
  const uint64_t dead = total > live ? total - live : 0;
  // What a compaction costs is the live records it rewrites (the payload
  // file stays, its dead pages freed): it runs once the dead bytes that came
  // since the last one pass that, however large the live payloads (a
  // model's initial weights uploaded from pageable memory). Dead bytes no
  // compaction frees (parts of pages beside live payloads) do not count.
  // Where the payloads are copied (hard links refused), they are rewritten
  // too.
  const bool copies = !options_.compaction_links_payloads || link_refused_;
  const uint64_t rewritten = copies ? live : live - std::min(live, live_payload_bytes_);
  const uint64_t fresh = dead > dead_after_compaction_ ? dead - dead_after_compaction_ : 0;
  if (fresh > rewritten && fresh > options_.compaction_min_dead_bytes) return CompactLocked();
  return absl::OkStatus();
}

absl::Status Journal::Compact() {
  absl::MutexLock lock(&mu_);
  return CompactLocked();
}

absl::Status Journal::CompactLocked() {
  if (!status_.ok()) return status_;
  timeline::Span span("setup-log compaction");
  // The new segment's header keeps the old first_seq: its entries are a
  // subset of the old segment's.
  const uint64_t saved_last_seq = last_seq_;
  last_seq_ = setup_->header().first_seq() - 1;
  absl::StatusOr<std::unique_ptr<SegmentWriter>> seg = NewSegment(SETUP, /*tmp=*/true, 0);
  last_seq_ = saved_last_seq;
  if (!seg.ok()) return seg.status();
  std::unique_ptr<SegmentWriter> fresh = std::move(*seg);

  // The payload file is kept (linked under the new segment's name): the
  // live entries' records are copied with their payload references, the
  // payloads themselves are not (a model's weights uploaded at setup would
  // be rewritten at every compaction). Where the file system refuses a
  // hard link, the payloads are copied into a fresh file as before.
  bool kept = options_.compaction_links_payloads && !link_refused_;
  if (absl::Status a = kept ? fresh->AdoptPayloadFile(*setup_) : absl::OkStatus(); !a.ok()) {
    kept = false;
    if (!link_refused_) {
      link_refused_ = true;
      REVENANT_LOG(WARNING, "journal") << "compacting the setup log in " << dir_
                                       << " copies its live payloads (" << a.message() << ")";
    }
  }
  // Re-read the current segment and copy the entries that are still live
  // (kept: their records only; else with their payloads, checked on the way).
  SegmentHeader header;
  uint64_t live = 0;
  std::vector<std::pair<uint64_t, uint64_t>> live_payloads;
  absl::Status s = journal_internal::ReadSegment(
      setup_->log_path(), setup_->payload_path(), SETUP, /*load_payloads=*/!kept, &header,
      [&](JournalEntry& entry) {
        auto it = entries_.find(entry.seq());
        if (it == entries_.end()) return absl::OkStatus();
        uint64_t bytes = 0;
        absl::Status a = fresh->Append(&entry, {}, &bytes);
        if (!a.ok()) return a;
        if (kept && entry.has_payload_ref()) {
          bytes += entry.payload_ref().length();
          live_payloads.emplace_back(entry.payload_ref().offset(), entry.payload_ref().length());
        }
        it->second.bytes = bytes;
        live += bytes;
        return absl::OkStatus();
      });
  // Renaming keeps the open descriptors valid: `fresh` keeps appending.
  if (s.ok()) s = fresh->Publish();
  if (!s.ok()) {
    // The old segment is untouched and still the live one; the new files are
    // left as *.tmp garbage for the next Open to delete. Entry sizes may now
    // be wrong, so stop rather than guess.
    status_ = s;
    return s;
  }
  std::unique_ptr<SegmentWriter> old = std::move(setup_);
  setup_ = std::move(fresh);
  old->Close().IgnoreError();
  if (absl::Status r = old->Remove(); !r.ok()) {
    REVENANT_LOG(WARNING, "journal") << "cannot remove compacted segment: " << r;
  }
  // Nothing names the dead entries' payloads now: their pages go.
  if (kept) setup_->FreePayloadOutside(std::move(live_payloads));
  live_bytes_ = live;
  if (span.active()) {
    span.set_detail(absl::StrFormat("%d live entries, %d record bytes rewritten", entries_.size(),
                                    live - std::min(live, live_payload_bytes_)));
  }
  const uint64_t total = setup_->file_bytes();
  const uint64_t held = live_bytes_ + setup_->header_bytes();
  dead_after_compaction_ = total > held ? total - held : 0;
  setup_file_bytes_.store(total, std::memory_order_relaxed);
  ++compactions_;
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> Journal::ReleasePayloadsBefore(uint64_t seq) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  if (minibatch_ == nullptr) return uint64_t{0};
  const uint64_t before = minibatch_->released_bytes();
  absl::StatusOr<uint64_t> freed = minibatch_->ReleasePayloadsBefore(seq);
  if (!freed.ok()) {
    status_ = freed.status();
    return status_;
  }
  if (minibatch_->released_bytes() != before) ++release_markers_;
  UpdateLiveLocked();
  return freed;
}

absl::Status Journal::MarkBoundary(uint64_t minibatch, uint64_t boundary_seq) {
  absl::MutexLock lock(&mu_);
  if (!status_.ok()) return status_;
  ++boundaries_;
  if (minibatch_->CanHoldMarker()) {
    // Most training steps: a marker in the small live segment, no system call.
    if (absl::Status s = minibatch_->AppendMarker(minibatch, boundary_seq); !s.ok()) {
      status_ = s;
      return s;
    }
    current_minibatch_ = minibatch;
    minibatch_entries_ = 0;
    UpdateLiveLocked();
    return absl::OkStatus();
  }
  timeline::Span span("journal boundary in a new minibatch segment");
  // The new segment's log is the spare the previous new segment left (the
  // log of the segment before, still mapped, zeroed meanwhile by the spare
  // thread): one rename, not a new file, mapping and unmap.
  absl::StatusOr<std::unique_ptr<SegmentWriter>> seg =
      NewSegment(MINIBATCH, /*tmp=*/false, minibatch, TakeZeroedSpare());
  if (!seg.ok()) {
    status_ = seg.status();
    return status_;
  }
  // The new, higher-numbered segment is the live one from here on; a crash
  // before the old one is renamed or removed below leaves only stale files.
  std::unique_ptr<SegmentWriter> old = std::move(minibatch_);
  minibatch_ = std::move(*seg);
  // The new segment starts with a marker too when it names the request the
  // boundary precedes (the header does not).
  if (boundary_seq != 0) {
    if (absl::Status s = minibatch_->AppendMarker(minibatch, boundary_seq); !s.ok()) {
      status_ = s;
      return s;
    }
  }
  // The old log becomes the next spare: superseded now, it is zeroed in
  // place under its own (stale) name, off this thread.
  uint64_t dirty = 0;
  // Its payload file may become the next segment's (written over from its
  // start) once the pages released in it are freed, never before: with a
  // release still being freed (an asynchronous snapshot reaped just before
  // the boundary) it is removed instead, not waited for. A removed file's
  // pages (a one-rank PyTorch job's: ~90 MiB journaled since the last
  // release, freed by the boundary's unlink in 10.7 ms of its 42 ms on the
  // H100) are freed by the helper (RecycleLog).
  if (std::unique_ptr<MappedLogFile> log = old->RecycleLog(&dirty, /*keep_payload=*/!Punching())) {
    ZeroSpareLater(std::move(log), dirty);
  }
  current_minibatch_ = minibatch;
  minibatch_entries_ = 0;
  minibatch_segments_started_.fetch_add(1, std::memory_order_relaxed);
  UpdateLiveLocked();
  return absl::OkStatus();
}

std::vector<Journal::ApiBytes> Journal::SetupBytesByApi(size_t top) const {
  std::vector<ApiBytes> out;
  {
    absl::MutexLock lock(&mu_);
    out.reserve(setup_by_api_.size());
    for (const auto& [id, rb] : setup_by_api_) out.push_back(ApiBytes{id, rb.first, rb.second});
  }
  std::sort(out.begin(), out.end(), [](const ApiBytes& a, const ApiBytes& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.api_id < b.api_id;
  });
  if (out.size() > top) out.resize(top);
  return out;
}

JournalStats Journal::stats() const {
  absl::MutexLock lock(&mu_);
  JournalStats stats;
  stats.setup_file_bytes = setup_ ? setup_->file_bytes() : 0;
  stats.setup_live_bytes = live_bytes_ + (setup_ ? setup_->header_bytes() : 0);
  stats.setup_live_entries = entries_.size();
  stats.minibatch_segment_bytes = minibatch_ ? minibatch_->file_bytes() : 0;
  stats.minibatch_file_bytes =
      minibatch_ ? minibatch_->file_bytes() - minibatch_->finished_bytes() : 0;
  stats.minibatch_entries = minibatch_entries_;
  stats.minibatch_released_bytes = minibatch_ ? minibatch_->released_bytes() : 0;
  stats.release_markers = release_markers_;
  stats.compactions = compactions_;
  stats.last_seq = last_seq_;
  stats.payload_files_reused = spare_payload_.reused;
  stats.payload_bytes_ahead = payload_bytes_ahead_.load(std::memory_order_relaxed);
  stats.payload_bytes_freed = payload_bytes_punched_.load(std::memory_order_relaxed);
  return stats;
}

absl::StatusOr<std::unique_ptr<JournalReader>> JournalReader::Open(const std::string& dir,
                                                                   Options options) {
  absl::StatusOr<journal_internal::DirListing> listing = journal_internal::ListJournalDir(dir);
  if (!listing.ok()) return listing.status();
  if (listing->setup == 0 && listing->minibatch == 0) {
    return absl::NotFoundError(absl::StrCat("no journal in ", dir));
  }
  std::unique_ptr<JournalReader> reader(new JournalReader(options));
  using journal_internal::JoinPath;
  using journal_internal::SegmentLogName;
  using journal_internal::SegmentPayloadName;
  if (listing->setup != 0) {
    reader->setup_log_ = JoinPath(dir, SegmentLogName(SETUP, listing->setup));
    reader->setup_payload_ = JoinPath(dir, SegmentPayloadName(SETUP, listing->setup));
  }
  if (listing->minibatch != 0) {
    reader->minibatch_log_ = JoinPath(dir, SegmentLogName(MINIBATCH, listing->minibatch));
    reader->minibatch_payload_ = JoinPath(dir, SegmentPayloadName(MINIBATCH, listing->minibatch));
  }
  return reader;
}

absl::Status JournalReader::ReadSetup(const EntryCallback& callback) {
  if (setup_log_.empty()) {
    return absl::DataLossError("journal has a minibatch log but no setup log");
  }
  return journal_internal::ReadSegment(setup_log_, setup_payload_, SETUP,
                                       options_.load_payloads, &setup_header_,
                                       [&](JournalEntry& e) { return callback(e); });
}

absl::Status JournalReader::ReadMinibatch(const EntryCallback& callback) {
  if (minibatch_log_.empty()) {
    minibatch_header_.Clear();
    return absl::OkStatus();
  }
  return journal_internal::ReadSegment(minibatch_log_, minibatch_payload_, MINIBATCH,
                                       options_.load_payloads, &minibatch_header_,
                                       [&](JournalEntry& e) { return callback(e); });
}

}  // namespace journal
}  // namespace revenant
