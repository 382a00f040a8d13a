#include "journal/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/populate.h"
#include "common/timeline.h"

namespace revenant {
namespace journal {
namespace {

// Appends with write(2) to a file opened O_APPEND, or (overwrite) writes
// front to back from offset 0 with pwrite(2) over what the file holds.
class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd, bool overwrite = false)
      : path_(std::move(path)), fd_(fd), overwrite_(overwrite) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  absl::Status Append(absl::string_view data) override {
    const char* p = data.data();
    size_t left = data.size();
    while (left > 0) {
      ssize_t n = overwrite_ ? ::pwrite(fd_, p, left, static_cast<off_t>(offset_))
                             : ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PosixError(absl::StrCat(overwrite_ ? "pwrite " : "write ", path_), errno);
      }
      p += n;
      offset_ += static_cast<uint64_t>(n);
      left -= static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }

  absl::Status Sync() override {
    if (::fdatasync(fd_) != 0) return PosixError(absl::StrCat("fdatasync ", path_), errno);
    return absl::OkStatus();
  }

  absl::Status Close() override {
    if (fd_ < 0) return absl::OkStatus();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return PosixError(absl::StrCat("close ", path_), errno);
    return absl::OkStatus();
  }

  int fd() const override { return fd_; }

 private:
  const std::string path_;
  int fd_;
  const bool overwrite_;
  uint64_t offset_ = 0;  // where the next overwriting write goes
};

class PosixSequentialFile : public SequentialFile {
 public:
  PosixSequentialFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixSequentialFile() override { ::close(fd_); }

  absl::Status Read(size_t n, std::string* scratch, absl::string_view* result) override {
    scratch->resize(n);
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(fd_, &(*scratch)[got], n - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        *result = absl::string_view();
        return PosixError(absl::StrCat("read ", path_), errno);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    scratch->resize(got);
    *result = *scratch;
    return absl::OkStatus();
  }

 private:
  const std::string path_;
  const int fd_;
};

}  // namespace

absl::Status PosixError(const std::string& context, int err) {
  std::string msg = absl::StrCat(context, ": ", strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case ENOSPC:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::StatusOr<std::unique_ptr<WritableFile>> NewAppendableFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError(absl::StrCat("open ", path), errno);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd));
}

absl::StatusOr<std::unique_ptr<WritableFile>> NewOverwritingFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError(absl::StrCat("open ", path), errno);
  return std::unique_ptr<WritableFile>(new PosixWritableFile(path, fd, /*overwrite=*/true));
}

absl::StatusOr<std::unique_ptr<MappedLogFile>> MappedLogFile::Create(const std::string& path,
                                                                   size_t first_chunk,
                                                                   size_t max_chunk) {
  if (first_chunk == 0 || max_chunk == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("mapped log chunk sizes ", first_chunk, "/", max_chunk));
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError(absl::StrCat("open ", path), errno);
  return std::unique_ptr<MappedLogFile>(new MappedLogFile(path, fd, first_chunk, max_chunk));
}

MappedLogFile::~MappedLogFile() {
  if (base_ != nullptr) ::munmap(base_, map_len_);
  if (fd_ >= 0) ::close(fd_);
}

int Fallocate(int fd, int mode, uint64_t offset, uint64_t length) {
  while (::fallocate(fd, mode, static_cast<off_t>(offset), static_cast<off_t>(length)) != 0) {
    if (errno != EINTR) return errno;
  }
  return 0;
}

absl::StatusOr<char*> MappedLogFile::SpanSlow(uint64_t offset, size_t n) {
  if (fd_ < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
  if (offset < chunk_end_ || n > max_chunk_) {
    // Behind the mapped chunk, straddling its end, or larger than a chunk:
    // the writer never asks that (records stay inside blocks, chunks are
    // whole blocks).
    return absl::InvalidArgumentError(absl::StrCat(path_, ": range ", offset, "+", n,
                                                   " is outside the mapped chunk ",
                                                   chunk_begin_, "..", chunk_end_));
  }
  // Allocate the chunks that follow until one holds the range. Chunks are
  // contiguous: the next one starts where the last one ended. They are
  // stores into a window of the file mapped once (kWindow, or a chunk if
  // larger): a chunk costs a fallocate and its pages mapped writable, not a
  // mapping made and another unmapped (in a process of many threads an unmap
  // waits for every CPU they run on to flush its TLB: 0.6-8 ms per 1 MiB
  // chunk measured on an H100 VM's agent, on the writer's thread).
  while (!(offset >= chunk_begin_ && offset + n <= chunk_end_)) {
    const uint64_t begin = chunk_end_;
    const size_t size = next_chunk_;
    const int64_t t0 = timeline::Enabled() ? MonotonicNanos() : 0;
    if (base_ == nullptr || begin + size > chunk_begin_ + map_len_) {
      // A new window from `begin` (beyond the file's end until allocated:
      // nothing touches a page of it before its chunk is).
      const size_t len = std::max<size_t>(kWindow, size);
      void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd_,
                       static_cast<off_t>(begin));
      if (p == MAP_FAILED) return PosixError(absl::StrCat("mmap ", path_), errno);
      // The old window's pages are resident: dropped in pieces, so that the
      // other threads' use of the memory map waits for a piece at most
      // (common/populate.h; ~6 ms for a whole 64 MiB window otherwise).
      if (base_ != nullptr) UnmapInPieces(base_, map_len_);
      base_ = static_cast<char*>(p);
      map_len_ = len;
      chunk_begin_ = begin;
      chunk_end_ = begin;
    }
    // fallocate gives the chunk real (zeroed) pages on tmpfs: later stores do
    // not fail for want of memory with SIGBUS, and nothing faults twice.
    if (const int err = Fallocate(fd_, 0, begin, size); err != 0) {
      if (err != EOPNOTSUPP) return PosixError(absl::StrCat("fallocate ", path_), err);
      if (::ftruncate(fd_, static_cast<off_t>(begin + size)) != 0) {
        return PosixError(absl::StrCat("ftruncate ", path_), errno);
      }
    }
    // Map every page writable now: a store into a page mapped for reading
    // only (what MAP_POPULATE does for a shared mapping) takes a fault, which
    // costs more than the record being stored.
#ifdef MADV_POPULATE_WRITE
    if (::madvise(base_ + (begin - chunk_begin_), size, MADV_POPULATE_WRITE) != 0 &&
        errno != EINVAL) {
      return PosixError(absl::StrCat("madvise(MADV_POPULATE_WRITE) ", path_), errno);
    }
#endif
    chunk_end_ = begin + size;
    allocated_ = chunk_end_;
    next_chunk_ = std::min(next_chunk_ * 2, max_chunk_);
    // Kept when slow only (a chunk is made every MiB of log).
    if (t0 != 0) {
      const int64_t t1 = MonotonicNanos();
      if (t1 - t0 >= 500000) {
        timeline::Add("journal: log file grown by a chunk, over 0.5 ms (the writer's thread)", t0,
                      t1, absl::StrCat(size >> 10, " KiB at ", begin >> 20, " MiB"));
      }
    }
  }
  return base_ + (offset - chunk_begin_);
}

absl::Status MappedLogFile::Rename(const std::string& to) {
  if (absl::Status s = RenameFile(path_, to); !s.ok()) return s;
  path_ = to;
  return absl::OkStatus();
}

absl::Status MappedLogFile::Recycle(uint64_t length, const std::string& to, bool zero) {
  if (fd_ < 0 || base_ == nullptr || chunk_begin_ != 0 || length > chunk_end_) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": not reusable"));
  }
  if (to != path_) {
    if (absl::Status s = Rename(to); !s.ok()) return s;
  }
  if (zero) ZeroPrefix(length);
  return absl::OkStatus();
}

void MappedLogFile::ZeroPrefix(uint64_t length) {
  std::memset(base_, 0, std::min<uint64_t>(length, chunk_end_));
}

absl::Status MappedLogFile::Sync(uint64_t length) {
  if (base_ == nullptr || length <= chunk_begin_) return absl::OkStatus();
  // Earlier chunks were unmapped, which leaves their pages in the page cache;
  // fdatasync covers them, msync the mapped one.
  const uint64_t end = std::min<uint64_t>(length, chunk_end_);
  if (::msync(base_, end - chunk_begin_, MS_SYNC) != 0) {
    return PosixError(absl::StrCat("msync ", path_), errno);
  }
  if (::fdatasync(fd_) != 0) return PosixError(absl::StrCat("fdatasync ", path_), errno);
  return absl::OkStatus();
}

absl::Status MappedLogFile::Close(uint64_t length) {
  if (fd_ < 0) return absl::OkStatus();
  if (base_ != nullptr) ::munmap(base_, map_len_);
  base_ = nullptr;
  map_len_ = 0;
  chunk_begin_ = chunk_end_ = 0;
  absl::Status s;
  if (::ftruncate(fd_, static_cast<off_t>(length)) != 0) {
    s = PosixError(absl::StrCat("ftruncate ", path_), errno);
  }
  allocated_ = length;
  if (::close(fd_) != 0 && s.ok()) s = PosixError(absl::StrCat("close ", path_), errno);
  fd_ = -1;
  return s;
}

absl::StatusOr<std::unique_ptr<SequentialFile>> NewSequentialFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return PosixError(absl::StrCat("open ", path), errno);
  return std::unique_ptr<SequentialFile>(new PosixSequentialFile(path, fd));
}

absl::Status ReadFileRange(int fd, uint64_t offset, size_t n, std::string* out) {
  out->resize(n);
  size_t got = 0;
  while (got < n) {
    ssize_t r = ::pread(fd, &(*out)[got], n - got, static_cast<off_t>(offset + got));
    if (r < 0) {
      if (errno == EINTR) continue;
      return PosixError("pread", errno);
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got < n) {
    out->resize(got);
    return absl::OutOfRangeError(absl::StrCat("only ", got, " of ", n, " bytes at offset ",
                                              offset));
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return PosixError(absl::StrCat("stat ", path), errno);
  return static_cast<uint64_t>(st.st_size);
}

absl::Status RenameFile(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) {
    return PosixError(absl::StrCat("rename ", from, " -> ", to), errno);
  }
  return absl::OkStatus();
}

absl::Status RemoveFile(const std::string& path) {
  if (::unlink(path.c_str()) != 0) return PosixError(absl::StrCat("unlink ", path), errno);
  return absl::OkStatus();
}

absl::Status CreateDirs(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("empty directory path");
  std::string partial;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty()) continue;
    if (::mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) {
      return PosixError(absl::StrCat("mkdir ", partial), errno);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return PosixError(absl::StrCat("opendir ", path), errno);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status ReadFileToString(const std::string& path, std::string* out) {
  auto file = NewSequentialFile(path);
  if (!file.ok()) return file.status();
  out->clear();
  std::string scratch;
  absl::string_view chunk;
  do {
    absl::Status s = (*file)->Read(1 << 16, &scratch, &chunk);
    if (!s.ok()) return s;
    out->append(chunk.data(), chunk.size());
  } while (!chunk.empty());
  return absl::OkStatus();
}

absl::Status WriteStringToFile(const std::string& path, absl::string_view data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return PosixError(absl::StrCat("open ", path), errno);
  PosixWritableFile file(path, fd);
  absl::Status s = file.Append(data);
  absl::Status c = file.Close();
  return s.ok() ? c : s;
}

}  // namespace journal
}  // namespace revenant
