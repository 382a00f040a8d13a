// Minimal file abstractions under the journal's log writer and reader, so the
// framing code can be tested against in-memory buffers and run on POSIX files.
//
//   absl::StatusOr<std::unique_ptr<WritableFile>> f =
//       NewAppendableFile("/dev/shm/revenant-job/rank0/journal/setup-000001.log");
//   log::Writer writer(f->get());
//
// Files are written with plain write(2): on tmpfs the bytes survive the death
// of the writing process once the call returns (docs/journal_format.md).
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
};

// A source read front to back. Not thread-safe.
class SequentialFile {
 public:
  virtual ~SequentialFile() = default;
  // Reads up to n bytes into *scratch and points *result at them. A short
  // (or empty) result with an OK status means end of file.
  virtual absl::Status Read(size_t n, std::string* scratch,
                            absl::string_view* result) = 0;
};

// Opens `path` for appending, creating it if absent.
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
absl::Status CreateDirs(const std::string& path);  // mkdir -p
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path);
absl::Status ReadFileToString(const std::string& path, std::string* out);
absl::Status WriteStringToFile(const std::string& path, absl::string_view data);

}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_FILE_H_
