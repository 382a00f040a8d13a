// Minimal file abstractions under the journal's log writer and reader, so the
// framing code can be tested against in-memory buffers and run on POSIX files.
//
//   absl::StatusOr<std::unique_ptr<WritableFile>> f =
//       NewAppendableFile("/dev/shm/revenant-job/rank0/journal/setup-000001.log");
//   log::Writer writer(f->get());
//
// Files are written with plain write(2), or (MappedLogFile) through a shared
// mapping: on tmpfs the bytes survive the death of the writing process once
// the call returns / the store executed (docs/journal_format.md).
#ifndef REVENANT_JOURNAL_FILE_H_
#define REVENANT_JOURNAL_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace revenant {
namespace journal {

// An append-only destination. Not thread-safe.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Appends all of `data` (one write(2) where the size allows it, so that a
  // killed writer leaves a prefix, never a hole).
  virtual absl::Status Append(absl::string_view data) = 0;
  // Makes appended data durable (fdatasync for POSIX files).
  virtual absl::Status Sync() = 0;
  virtual absl::Status Close() = 0;
  // The open file descriptor (POSIX files), -1 if none or closed.
  virtual int fd() const { return -1; }
};

// fallocate(2) of [offset, offset + length), retried on EINTR: 0, or the
// errno it failed with.
int Fallocate(int fd, int mode, uint64_t offset, uint64_t length);

// A new log file written through a shared memory mapping (docs/journal_format.md,
// "Mapped log files"): stores into it land in the page cache like write(2)'d
// bytes, without a system call. The file grows in chunks of whole log blocks,
// preallocated (zero-filled), in a window of the file mapped once per 64 MiB
// (a growth maps nothing new inside it); the first chunk is
// `first_chunk` bytes, each next one twice the last, at most `max_chunk`
// (which may be less than the first: a large first chunk, smaller later
// ones, each made on the writer's thread). Both must be multiples of
// log::kBlockSize. Not thread-safe.
//
//   auto f = MappedLogFile::Create(path, 32 << 10, 1 << 20);
//   absl::StatusOr<char*> p = (*f)->Span(offset, n);   // [offset, offset + n)
//   ... store into p ...
//   (*f)->Close(length);   // truncates the file to `length`
class MappedLogFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedLogFile>> Create(const std::string& path,
                                                               size_t first_chunk,
                                                               size_t max_chunk);
  ~MappedLogFile();
  MappedLogFile(const MappedLogFile&) = delete;
  MappedLogFile& operator=(const MappedLogFile&) = delete;

  // Writable memory of the file bytes [offset, offset + n). The range must lie
  // in one block; offsets only move forward: a window before the current
  // one is no longer mapped (kInvalidArgument). Grows the file as needed.
  absl::StatusOr<char*> Span(uint64_t offset, size_t n) {
    if (offset >= chunk_begin_ && offset + n <= chunk_end_) {
      return base_ + (offset - chunk_begin_);
    }
    return SpanSlow(offset, n);
  }
  // Writes the mapped pages of [0, length) back to the file (msync).
  absl::Status Sync(uint64_t length);
  // Unmaps, truncates the file to `length` (the log's length: no zero tail
  // left) and closes it. Idempotent.
  absl::Status Close(uint64_t length);
  // The file's allocated size (log length plus the zero-filled tail).
  uint64_t allocated() const { return allocated_; }

  // Renames the file (the mapping stays valid).
  absl::Status Rename(const std::string& to);
  // Records that the file was renamed by someone else.
  void set_path(const std::string& path) { path_ = path; }
  const std::string& path() const { return path_; }
  // Makes the file reusable from offset 0: renames it to `to` (unless that is
  // its name already), then zeroes its first `length` bytes (unless `zero`
  // is false: the caller then calls ZeroPrefix(length) before reusing it).
  // Only while its first chunk is the mapped one (kFailedPrecondition
  // otherwise: nothing changed).
  absl::Status Recycle(uint64_t length, const std::string& to, bool zero = true);
  // Zeroes the first `length` bytes (within the mapped first chunk).
  void ZeroPrefix(uint64_t length);

 private:
  MappedLogFile(std::string path, int fd, size_t first_chunk, size_t max_chunk)
      : path_(std::move(path)), fd_(fd), next_chunk_(first_chunk), max_chunk_(max_chunk) {}
  absl::StatusOr<char*> SpanSlow(uint64_t offset, size_t n);

  std::string path_;
  int fd_;
  size_t next_chunk_;
  const size_t max_chunk_;
  // A window of the file is mapped: map_len_ bytes from chunk_begin_, of
  // which [chunk_begin_, chunk_end_) are allocated (whole chunks).
  static constexpr size_t kWindow = size_t{64} << 20;
  char* base_ = nullptr;
  size_t map_len_ = 0;
  uint64_t chunk_begin_ = 0;
  uint64_t chunk_end_ = 0;
  uint64_t allocated_ = 0;
};

// A file written front to back from offset 0 over whatever it already
// holds: a payload file reused for a later segment (on tmpfs its pages are
// allocated already, so a write costs a copy, not a page allocation and
// zeroing). Close leaves the file's size as it is: bytes past those written
// are stale, and readers only read the ranges entries point at (each with
// its checksum). Not thread-safe.
absl::StatusOr<std::unique_ptr<WritableFile>> NewOverwritingFile(const std::string& path);

// A source read front to back. Not thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to n bytes into *scratch and points *result at them. A short
  // (or empty) result with an OK status means end of file.
  virtual absl::Status Read(size_t n, std::string* scratch,
                            absl::string_view* result) = 0;
};

// Opens `path` for appending, creating it if absent. Every file this header
// creates is mode 0600 and every directory 0700, whatever the umask: a
// journal holds every argument and payload of its application.
absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(
    const std::string& path);
absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(
    const std::string& path);

// Reads exactly `n` bytes at `offset` of the open file `fd` into *out. Returns
// kOutOfRange if the file holds fewer bytes there (out is then the prefix).
absl::Status ReadFileRange(int fd, uint64_t offset, size_t n, std::string* out);

// Errors of the POSIX calls, mapped to absl codes (ENOENT -> kNotFound, ...).
absl::Status PosixError(const std::string& context, int err);

// File helpers; all return IO errors as absl::Status.
absl::StatusOr<uint64_t> FileSize(const std::string& path);
absl::Status RenameFile(const std::string& from, const std::string& to);
absl::Status RemoveFile(const std::string& path);
absl::Status CreateDirs(const std::string& path);  // mkdir -p, each made 0700
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path);
absl::Status ReadFileToString(const std::string& path, std::string* out);
absl::Status WriteStringToFile(const std::string& path, absl::string_view data);

}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_FILE_H_
