#include "agent/snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crc32c.h"
#include "common/populate.h"
#include "common/timeline.h"

namespace revenant {
namespace agent {
namespace {

constexpr char kMagic[8] = {'R', 'V', 'S', 'N', 'A', 'P', '0', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 8 + 4 + 4 + 8 + 8 + 8;
constexpr size_t kEntrySize = 8 + 8 + 4 + 4;
// Device bytes travel through a host buffer of at most this size.
constexpr size_t kChunk = 64u << 20;

void PutU32(std::string* s, uint32_t v) { s->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* s, uint64_t v) { s->append(reinterpret_cast<const char*>(&v), 8); }
uint32_t GetU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

bool ParseName(const std::string& name, const std::string& prefix, uint64_t* minibatch) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return false;
  uint64_t v = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  *minibatch = v;
  return true;
}

// An anonymous private mapping of `n` bytes, its pages resident (by several
// threads, common/populate.h); the staging buffers' memory.
absl::StatusOr<char*> MapResident(size_t n) {
  void* m = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", n, " bytes of staging: ", std::strerror(errno)));
  }
  if (absl::Status s = PopulateWritable(static_cast<char*>(m), n);
      !s.ok() && !absl::IsUnimplemented(s)) {
    munmap(m, n);
    return absl::ResourceExhaustedError(absl::StrCat("staging: ", s.message()));
  }
  return static_cast<char*>(m);
}

}  // namespace

Snapshot::~Snapshot() {
  if (map_ != nullptr) munmap(const_cast<char*>(map_), map_size_);
}

absl::Status Snapshot::Load(const DeviceWrite& write, const AllocationTable& live,
                            uint64_t* skipped) const {
  uint64_t missing = 0;
  for (size_t i = 0; i < table_.size(); ++i) {
    const auto& [addr, size] = table_[i];
    if (std::find(live.begin(), live.end(), table_[i]) == live.end()) {
      ++missing;
      continue;
    }
    for (uint64_t done = 0; done < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - done));
      if (absl::Status s = write(addr + done, map_ + offsets_[i] + done, n); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("loading allocation 0x", absl::Hex(addr),
                                                   " (", size, " bytes) of ", path_, ": ",
                                                   s.message()));
      }
      done += n;
    }
  }
  if (skipped != nullptr) *skipped = missing;
  return absl::OkStatus();
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  // CRC32C is linear: crc(A+B) = crc(A) * x^(8 len_b) mod P + crc(B) over
  // GF(2), with the pre- and post-inversion cancelling out. Polynomials are
  // bit-reflected: bit 31 is x^0.
  constexpr uint32_t kPoly = 0x82f63b78u;
  auto mul = [](uint32_t a, uint32_t b) {
    uint32_t product = 0;
    for (uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
      if (a & bit) product ^= b;
      b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;
    }
    return product;
  };
  if (len_b == 0) return crc_a;
  uint32_t power = 1u << 30;   // x^1, squared to x^(2^k)
  uint32_t factor = 1u << 31;  // x^0
  for (uint64_t bits = len_b * 8; bits != 0; bits >>= 1) {
    if (bits & 1) factor = mul(factor, power);
    power = mul(power, power);
  }
  return mul(factor, crc_a) ^ crc_b;
}

std::vector<uint32_t> Crc32cMany(const std::vector<std::pair<const char*, uint64_t>>& ranges,
                                 int threads) {
  // Pieces of at most kPiece bytes over all ranges, taken by the threads in
  // turn; each range's CRC is its pieces' combined in order.
  constexpr uint64_t kPiece = 4u << 20;
  struct Piece {
    size_t range;
    uint64_t offset, size;
    uint32_t crc;
  };
  std::vector<Piece> pieces;
  uint64_t total = 0;
  for (size_t r = 0; r < ranges.size(); ++r) {
    const uint64_t n = ranges[r].second;
    total += n;
    if (n == 0) pieces.push_back({r, 0, 0, 0});
    for (uint64_t off = 0; off < n; off += kPiece) {
      pieces.push_back({r, off, std::min(kPiece, n - off), 0});
    }
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < pieces.size(); i = next.fetch_add(1)) {
      Piece& p = pieces[i];
      p.crc = crc32c::Value(ranges[p.range].first + p.offset, p.size);
    }
  };
  // A thread per 8 MiB at most: starting one costs more than a small CRC.
  const uint64_t helpers =
      std::min<uint64_t>(std::max(threads, 1) - 1, total / (8u << 20));
  std::vector<std::thread> workers;
  for (uint64_t t = 0; t < helpers; ++t) workers.emplace_back(work);
  work();
  for (std::thread& t : workers) t.join();
  std::vector<uint32_t> crcs(ranges.size(), 0);
  for (const Piece& p : pieces) {
    crcs[p.range] = p.offset == 0 ? p.crc : Crc32cCombine(crcs[p.range], p.crc, p.size);
  }
  return crcs;
}

SnapshotStore::SnapshotStore(std::string dir, int rank)
    : SnapshotStore(std::move(dir), rank, Options()) {}

SnapshotStore::SnapshotStore(std::string dir, int rank, Options options)
    : dir_(std::move(dir)), rank_(rank), options_(options) {}

SnapshotStore::~SnapshotStore() {
  ReleaseMappings();
}

std::string SnapshotStore::PathOf(uint64_t minibatch) const {
  return absl::StrCat(dir_, "/snap-", minibatch);
}

void SnapshotStore::Unmap(File* f) {
  if (f->map == nullptr) return;
  // A file whose pages are resident has a page-table entry per page to
  // drop: in pieces (common/populate.h), so that the executor's own use of
  // the memory map waits for a piece at most, not for the whole file.
  timeline::Span span("snapshot file unmapped");
  if (timeline::Enabled()) {
    span.set_detail(absl::StrFormat("%.1f MiB%s", f->size / 1048576.0,
                                    f->registered ? ", unregistered first" : ""));
  }
  if (f->registered && f->unregister) f->unregister(f->map);
  f->registered = false;
  UnmapInPieces(f->map, f->size);
  f->map = nullptr;
}

void SnapshotStore::Delete(std::unique_ptr<File> f) {
  if (f == nullptr) return;
  Unmap(f.get());
  unlink(f->path.c_str());
}

namespace {

// Faults in, on this thread, the whole pages under [addr, addr + n) of a
// file made without its pages; Ok where the kernel cannot (as MakeFile).
absl::Status PopulatePagesOf(char* addr, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(addr) & ~(page - 1);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(addr) + n + page - 1) & ~(page - 1);
  absl::Status s = PopulateWritable(reinterpret_cast<void*>(from), to - from, 1);
  return absl::IsUnimplemented(s) ? absl::OkStatus() : s;
}

}  // namespace

void SnapshotStore::DeleteBehind(std::unique_ptr<File> f) {
  if (f == nullptr) return;
  if (f->registered || f->map == nullptr) {
    Delete(std::move(f));
    return;
  }
  unlink(f->path.c_str());
  JoinDelete();
  delete_thread_ = std::thread([map = f->map, size = f->size] {
    timeline::Span span("snapshot file unmapped behind");
    if (timeline::Enabled()) span.set_detail(absl::StrFormat("%.1f MiB", size / 1048576.0));
    UnmapInPieces(map, size);
  });
  f->map = nullptr;
}

void SnapshotStore::JoinDelete() {
  if (delete_thread_.joinable()) delete_thread_.join();
}

void SnapshotStore::ReleaseMappings() {
  JoinDelete();
  JoinCut();
  TakeSpareAhead();
  first_stop_.store(true, std::memory_order_release);  // deleted below: no more pages for it
  JoinFirstFile();
  Delete(std::move(first_file_));
  for (auto& [m, f] : files_) Unmap(f.get());
  files_.clear();
  Delete(std::move(spare_));
  ReleaseStaging();
}

uint64_t SnapshotStore::file_bytes() const {
  uint64_t n = spare_ != nullptr ? spare_->size : 0;
  for (const auto& [m, f] : files_) n += f->size;
  return n;
}

uint64_t SnapshotStore::registered_bytes() const {
  uint64_t n = spare_ != nullptr && spare_->registered ? spare_->size : 0;
  for (const auto& [m, f] : files_) n += f->registered ? f->size : 0;
  return n;
}

absl::StatusOr<std::unique_ptr<SnapshotStore::File>> SnapshotStore::FileOfSize(
    size_t size, const std::string& path, const SnapshotCopier& copier, bool unregistered_ok,
    bool* reused) {
  *reused = false;
  // The next file made ahead (no keep_spare) is taken only once made: the
  // snapshot never waits for it.
  if (next_file_busy()) {
    ++next_files_late_;
  } else {
    TakeSpareAhead();
  }
  if (spare_ != nullptr && spare_->size == size && spare_->map != nullptr) {
    std::unique_ptr<File> f = std::move(spare_);
    // A staged snapshot's file never was registered: registered now for
    // copies straight into it, unless this write stages again.
    const bool usable = f->registered || unregistered_ok || Register(f.get(), copier).ok();
    if (usable && rename(f->path.c_str(), path.c_str()) == 0) {
      f->path = path;
      *reused = true;
      return f;
    }
    Delete(std::move(f));
  }
  // A spare of another size would stay unused: the memory goes back now.
  Delete(std::move(spare_));
  // The first snapshot: the file made ahead, if one was.
  first_begun_ = true;
  const absl::Time wait_start = absl::Now();
  first_stop_.store(true, std::memory_order_release);  // the pages still to come: not waited for
  JoinFirstFile();
  if (std::unique_ptr<File> ahead = std::move(first_file_)) {
    const absl::Time resize_start = absl::Now();
    first_take_.wait_ms = absl::ToDoubleMilliseconds(resize_start - wait_start);
    first_take_.made_bytes = ahead->size;
    first_take_.resident_bytes = first_resident_;
    first_take_.snapshot_bytes = size;
    // A file made larger than the snapshot is cut behind the copies (the
    // pages past its end freed on a thread; Finish waits for it): on the
    // critical path, freeing a third of a 600 MiB file took ~10-50 ms.
    const bool cut_later = size < ahead->size;
    const bool resized = cut_later || ResizeFile(ahead.get(), size).ok();
    const absl::Time register_start = absl::Now();
    first_take_.resize_ms = absl::ToDoubleMilliseconds(register_start - resize_start);
    if (resized && rename(ahead->path.c_str(), path.c_str()) == 0) {
      ahead->path = path;
      if (cut_later) CutBehind(ahead.get(), size);
      const bool registered = unregistered_ok || Register(ahead.get(), copier).ok();
      first_take_.register_ms =
          unregistered_ok ? 0 : absl::ToDoubleMilliseconds(absl::Now() - register_start);
      if (registered) {
        ++files_mapped_;
        first_file_used_ = true;
        return ahead;
      }
    }
    Delete(std::move(ahead));  // the snapshot makes its own, as without
  }
  // Without a spare, each snapshot is a new file: one that the staging
  // threads fill is made without its pages, which they fault in as they
  // copy (off the executor's path; 1x the live bytes between snapshots
  // without paying for the pages on the boundary).
  const bool lazy = unregistered_ok && !options_.keep_spare;
  absl::StatusOr<std::unique_ptr<File>> f =
      MakeFile(size, path, unregistered_ok ? SnapshotCopier{} : copier, /*populate=*/!lazy);
  if (f.ok()) ++files_mapped_;
  if (f.ok() && lazy) ++files_made_lazily_;
  return f;
}

absl::StatusOr<std::unique_ptr<SnapshotStore::File>> SnapshotStore::MakeFile(
    size_t size, const std::string& path, const SnapshotCopier& copier, bool populate) {
  timeline::Span span("snapshot file made");
  if (span.active()) span.set_detail(absl::StrFormat("%s, %.1f MiB", path, size / 1048576.0));
  const int fd = open(path.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot create ", path, ": ", std::strerror(errno)));
  }
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int err = errno;
    close(fd);
    unlink(path.c_str());
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size the snapshot ", path, " to ", size, " bytes: ", std::strerror(err)));
  }
  void* map = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    const int err = errno;
    unlink(path.c_str());
    return absl::UnavailableError(absl::StrCat("mmap ", path, ": ", std::strerror(err)));
  }
  auto f = std::make_unique<File>();
  f->path = path;
  f->map = static_cast<char*>(map);
  f->size = size;
  f->populated = false;
  if (!populate) return f;
  // Every page now, by several threads (common/populate.h): a full tmpfs is
  // an error here, not a SIGBUS when the copies store into the mapping, and
  // registering finds the pages resident.
  if (absl::Status s = PopulateAll(f.get()); !s.ok()) {
    Delete(std::move(f));
    return s;
  }
  if (absl::Status s = Register(f.get(), copier); !s.ok()) {
    Delete(std::move(f));
    return absl::Status(s.code(), absl::StrCat("registering the snapshot ", path,
                                               " for device copies: ", s.message()));
  }
  return f;
}

absl::Status SnapshotStore::PopulateAll(File* f) {
  if (f->populated || f->map == nullptr) return absl::OkStatus();
  if (absl::Status s = PopulateWritable(f->map, f->size); !s.ok() && !absl::IsUnimplemented(s)) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the snapshot ", f->path,
                                                     " (", f->size, " bytes): ", s.message()));
  }
  f->populated = true;
  return absl::OkStatus();
}

absl::Status SnapshotStore::Register(File* f, const SnapshotCopier& copier) {
  // Copies straight into the file (and registering) need every page.
  if (absl::Status s = PopulateAll(f); !s.ok()) return s;
  if (!copier.register_host) return absl::OkStatus();
  // Registering holds the CUDA driver against the executor's calls.
  timeline::Span span("snapshot file registered");
  if (span.active()) span.set_detail(absl::StrFormat("%s, %.1f MiB", f->path, f->size / 1048576.0));
  // Whole pages (the mapping's last one reaches past the end of the file).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (absl::Status s = copier.register_host(f->map, (f->size + page - 1) / page * page); !s.ok()) {
    return s;
  }
  f->registered = true;
  f->unregister = copier.unregister_host;
  return absl::OkStatus();
}

std::string SnapshotStore::AheadPath() const { return dir_ + "/.spare-snap-ahead"; }

std::string SnapshotStore::FirstAheadPath() const { return dir_ + "/.first-snap-ahead"; }

size_t SnapshotStore::FileSizeFor(const AllocationTable& table) {
  size_t n = kHeaderSize + table.size() * kEntrySize + 4;
  for (const auto& [addr, size] : table) n += size;
  return n;
}

absl::Status SnapshotStore::ResizeFile(File* f, size_t size, bool populate) {
  if (f->map == nullptr || f->registered) return absl::FailedPreconditionError("mapped, unregistered");
  if (size == f->size) return absl::OkStatus();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t old_len = (f->size + page - 1) / page * page;
  const size_t new_len = (size + page - 1) / page * page;
  if (size < f->size) {
    if (new_len < old_len) UnmapInPieces(f->map + new_len, old_len - new_len);
    f->size = size;  // the mapping is now new_len long
    if (truncate(f->path.c_str(), static_cast<off_t>(size)) != 0) {
      return absl::UnavailableError(absl::StrCat("truncate ", f->path, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }
  if (truncate(f->path.c_str(), static_cast<off_t>(size)) != 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot size ", f->path, " to ", size, " bytes: ", std::strerror(errno)));
  }
  if (new_len > old_len) {
    void* m = mremap(f->map, old_len, new_len, MREMAP_MAYMOVE);
    if (m == MAP_FAILED) {
      const int err = errno;
      (void)truncate(f->path.c_str(), static_cast<off_t>(f->size));
      return absl::UnavailableError(absl::StrCat("mremap ", f->path, ": ", std::strerror(err)));
    }
    f->map = static_cast<char*>(m);
  }
  const size_t from = f->size / page * page;
  f->size = size;
  if (!populate) {
    f->populated = false;  // the new pages come when written (or PopulateAll)
    return absl::OkStatus();
  }
  if (absl::Status s = PopulateWritable(f->map + from, size - from);
      !s.ok() && !absl::IsUnimplemented(s)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot grow ", f->path, " to ", size, " bytes: ", s.message()));
  }
  return absl::OkStatus();
}

void SnapshotStore::CutBehind(File* f, size_t size) {
  JoinCut();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t old_len = (f->size + page - 1) / page * page;
  const size_t new_len = (size + page - 1) / page * page;
  char* const map = f->map;
  f->size = size;  // the mapping is new_len long once the thread is done
  cut_ok_ = true;
  cut_thread_ = std::thread([this, map, old_len, new_len, size, path = f->path] {
    if (new_len < old_len) UnmapInPieces(map + new_len, old_len - new_len);
    // Finish tries again (and fails the snapshot if it cannot): bytes past
    // the last allocation would make the reader refuse the file.
    cut_ok_ = truncate(path.c_str(), static_cast<off_t>(size)) == 0;
  });
}

void SnapshotStore::JoinCut() {
  if (cut_thread_.joinable()) cut_thread_.join();
}

void SnapshotStore::JoinFirstFile() {
  if (first_thread_.joinable()) first_thread_.join();
}

void SnapshotStore::PrepareFirstFile(size_t size) {
  // (Without keep_spare too: the first snapshot's own file, 1x once cut.)
  if (first_begun_ || !options_.spare_ahead) return;
  // A file of more room when the allocations outgrow it; within it, pages
  // for what they grew into once that is a MiB (or an eighth) past the
  // bytes last asked for.
  const bool grows = size > first_target_;
  if (!grows && size < first_asked_ + std::max(size_t{1} << 20, first_asked_ / 8)) return;
  if (first_thread_.joinable()) {
    if (first_busy_.load(std::memory_order_acquire)) return;  // still at it: later
    first_thread_.join();
  }
  if (!first_status_.ok()) return;  // failed once: the first snapshot makes its own
  if (!PrepareDir().ok()) return;
  // Room to grow: a job's allocations grow in steps until its first
  // snapshot, and every growth remaps the file.
  constexpr size_t kGranule = size_t{2} << 20;
  const size_t target =
      grows ? (size + size / 2 + kGranule - 1) / kGranule * kGranule : first_target_;
  first_target_ = target;
  first_asked_ = size;
  // Never crowd the file system the journal and the captures share: the
  // file made ahead only where twice its size is free (the snapshot and its
  // spare will need that much anyway); else the first snapshot makes its own.
  struct statvfs fs {};
  const size_t have = first_file_ != nullptr ? first_file_->size : 0;
  if (statvfs(dir_.c_str(), &fs) != 0 ||
      static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize + have < 2 * uint64_t{target}) {
    return;
  }
  first_busy_.store(true, std::memory_order_release);
  first_thread_ = std::thread([this, target, size] {
    const absl::Time start = absl::Now();
    absl::Status s;
    if (first_file_ == nullptr) {
      // Not registered: the first snapshot registers it at its exact size.
      absl::StatusOr<std::unique_ptr<File>> f =
          MakeFile(target, FirstAheadPath(), SnapshotCopier{}, /*populate=*/false);
      if (f.ok()) {
        first_file_ = std::move(*f);
        first_resident_ = 0;
      } else {
        s = f.status();
      }
    } else if (first_file_->size != target) {
      s = ResizeFile(first_file_.get(), target, /*populate=*/false);
    }
    // The staging buffers a staged first snapshot copies through, their
    // pages resident (registered when it takes them); nothing lost without.
    // Before the file's pages: the first snapshot may stop those.
    const size_t staging = options_.staged ? StagingFor(target) : 0;
    if (s.ok() && staging > staging_ahead_size_) {
      if (staging_ahead_ != nullptr) munmap(staging_ahead_, staging_ahead_size_);
      absl::StatusOr<char*> m = MapResident(staging);
      staging_ahead_ = m.ok() ? *m : nullptr;
      staging_ahead_size_ = m.ok() ? staging : 0;
    }
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t need = std::min(target, (size + page - 1) / page * page);
    if (s.ok() && need > first_resident_) {
      // Pages for the bytes the allocations have now, not for the room to
      // grow (half as much again: populating it made the first snapshot
      // wait for this thread; what the snapshot uses of it the copying
      // threads fault in, or registering does). In pieces, all the threads
      // on each; the first snapshot stops the making before the next piece
      // (what it copies past first_resident_ the copying threads fault in).
      const size_t from = first_resident_ / page * page;
      const size_t chunk =
          std::max(page, options_.first_populate_chunk / page * page);
      const int threads = PopulateThreads(need - from);
      const absl::Time populate_start = absl::Now();
      size_t at = from;
      for (size_t k = 0; at < need && !first_stop_.load(std::memory_order_acquire); ++k) {
        if (options_.before_first_chunk) options_.before_first_chunk(k);
        const size_t n = std::min(chunk, need - at);
        absl::Status p = PopulateWritable(first_file_->map + at, n, threads);
        if (absl::IsUnimplemented(p)) {
          at = need;  // the kernel cannot: the copying threads fault them in
          break;
        }
        if (!p.ok()) {
          s = absl::ResourceExhaustedError(absl::StrCat(
              "cannot allocate the first snapshot's file (", need, " bytes): ", p.message()));
          break;
        }
        at += n;
      }
      if (s.ok()) {
        NotePace(at - from, absl::Now() - populate_start);
        first_resident_ = at;
      }
    }
    if (!s.ok()) {
      Delete(std::move(first_file_));
      first_status_ = s;
    }
    first_ms_ += absl::ToDoubleMilliseconds(absl::Now() - start);
    first_busy_.store(false, std::memory_order_release);
  });
}

std::string SnapshotStore::SparePath() const { return dir_ + "/.spare-snap"; }

void SnapshotStore::MakeSpareAhead(size_t size) {
  if (!options_.keep_spare || !options_.spare_ahead || spare_ != nullptr ||
      ahead_thread_.joinable()) {
    return;
  }
  ahead_file_.reset();
  ahead_status_ = absl::OkStatus();
  const SnapshotCopier copier = copier_;
  // The snapshot just written, if it was staged (its file never
  // registered): registered behind the spare (Options::register_behind).
  // Nothing else touches that file until the thread is joined
  // (TakeSpareAhead: before any snapshot begins, and before the store's
  // figures are read or its files released).
  File* behind = nullptr;
  if (options_.register_behind && copier.register_host && files_.size() == 1 &&
      !files_.back().second->registered && files_.back().second->map != nullptr) {
    behind = files_.back().second.get();
  }
  ahead_thread_ = std::thread([this, size, copier, behind] {
    MakeAheadFile(size, copier);
    if (behind != nullptr) {
      const absl::Time r = absl::Now();
      // A failure leaves it unregistered: a snapshot into it stages.
      if (Register(behind, copier).ok()) ++registered_behind_;
      register_behind_ms_ += absl::ToDoubleMilliseconds(absl::Now() - r);
    }
  });
}

void SnapshotStore::MakeAheadFile(size_t size, const SnapshotCopier& copier) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<File>> f = MakeFile(size, AheadPath(), copier);
  const absl::Duration took = absl::Now() - start;
  ahead_ms_ = absl::ToDoubleMilliseconds(took);
  if (f.ok()) {
    NotePace(size, took);
    ahead_file_ = std::move(*f);
  } else {
    ahead_status_ = f.status();
  }
}

void SnapshotStore::NotePace(size_t bytes, absl::Duration took) {
  if (bytes < kPaceMinBytes) return;  // a small file's making is mostly its fixed costs
  make_ns_per_byte_.store(absl::ToDoubleNanoseconds(took) / static_cast<double>(bytes),
                          std::memory_order_relaxed);
}

void SnapshotStore::MakeNextFileAhead(size_t size) {
  if (!next_file_wanted() || size == 0 || !PrepareDir().ok()) return;
  ahead_file_.reset();
  ahead_status_ = absl::OkStatus();
  ahead_next_ = true;
  ahead_started_ = absl::Now();
  ahead_busy_.store(true, std::memory_order_release);
  ahead_thread_ = std::thread([this, size] {
    if (options_.before_next_file) options_.before_next_file();
    // Its pages resident, not registered (no register_host): a staged
    // snapshot copies into it; registering would hold the CUDA driver
    // against the executor's calls for every snapshot.
    MakeAheadFile(size, SnapshotCopier{});
    ahead_busy_.store(false, std::memory_order_release);
  });
}

void SnapshotStore::DropNextFileAhead() {
  // Without keep_spare, a spare is only ever a next file made ahead.
  if (options_.keep_spare) return;
  TakeSpareAhead();
  Delete(std::move(spare_));
}

void SnapshotStore::TakeSpareAhead() {
  if (!ahead_thread_.joinable()) return;
  ahead_thread_.join();
  const bool next = ahead_next_;
  ahead_next_ = false;
  if (ahead_file_ == nullptr) {
    // Nothing lost: the next snapshot makes its file as it would have.
    ahead_failed_status_ = ahead_status_;
    ++spares_ahead_failed_;
    return;
  }
  ++files_mapped_;
  if (next) {
    ++next_files_ahead_;
    next_lead_ms_ += absl::ToDoubleMilliseconds(absl::Now() - ahead_started_);
  } else {
    ++spares_made_ahead_;
  }
  std::unique_ptr<File> f = std::move(ahead_file_);
  const std::string spare_path = SparePath();
  if (spare_ == nullptr && rename(f->path.c_str(), spare_path.c_str()) == 0) {
    f->path = spare_path;
    spare_ = std::move(f);
  } else {
    Delete(std::move(f));
  }
}

absl::StatusOr<SnapshotWriteStats> SnapshotStore::Write(uint64_t minibatch, uint64_t boundary_seq,
                                                        const AllocationTable& table,
                                                        const SnapshotCrashHook& before_rename) {
  if (!copier_.copy) return absl::FailedPreconditionError("no device copier for the snapshot");
  return WriteWith(minibatch, boundary_seq, table, copier_, before_rename);
}

absl::StatusOr<SnapshotWriteStats> SnapshotStore::Write(uint64_t minibatch, uint64_t boundary_seq,
                                                        const AllocationTable& table,
                                                        const DeviceRead& read,
                                                        const SnapshotCrashHook& before_rename) {
  SnapshotCopier copier;
  copier.copy = [&read](uint64_t addr, void* dst, size_t n) -> absl::Status {
    for (size_t done = 0; done < n;) {
      const size_t k = std::min(kChunk, n - done);
      if (absl::Status s = read(addr + done, static_cast<char*>(dst) + done, k); !s.ok()) {
        return s;
      }
      done += k;
    }
    return absl::OkStatus();
  };
  return WriteWith(minibatch, boundary_seq, table, copier, before_rename);
}

absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> SnapshotStore::Begin(
    uint64_t minibatch, uint64_t boundary_seq, const AllocationTable& table) {
  const bool can_stage = CanStage(copier_);
  absl::StatusOr<std::unique_ptr<Pending>> p =
      BeginWith(minibatch, boundary_seq, table, copier_, can_stage);
  if (!p.ok() || !can_stage || (*p)->file_->registered) return p;
  Pending& pending = **p;
  // A file not registered (the first snapshot's, a new one): the device
  // copies into the staging buffers, DrainStaged empties them into it.
  TurnPlan plan = PlanTurns(pending);
  if (absl::Status s = PrepareStaging(plan.half, copier_); !s.ok()) {
    ++staging_failures_;
    staging_failure_ = s;
    if (absl::Status r = Register(pending.file_.get(), copier_); !r.ok()) {
      Abandon(std::move(*p));
      return absl::Status(r.code(), absl::StrCat("the snapshot's staging (", s.message(),
                                                 ") and registering its file: ", r.message()));
    }
    return p;
  }
  pending.staged_ = true;
  const AllocationTable& t = pending.table_;
  for (size_t turn = 0; turn < plan.turns.size(); ++turn) {
    char* buf = staging_ + (turn % 2) * plan.half;
    for (const auto& [c, n] : plan.Runs(turn)) {
      const TurnPlan::Chunk& k = plan.chunks[c];
      pending.staged_copies_.push_back({t[k.alloc].first + k.offset, buf + k.staged_at, n});
    }
    pending.staged_turn_ends_.push_back(pending.staged_copies_.size());
  }
  return p;
}

absl::Status SnapshotStore::PrepareDir() {
  if (!dir_ready_) {
    if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::UnavailableError(absl::StrCat("cannot create the snapshot directory ", dir_,
                                                 ": ", std::strerror(errno)));
    }
    dir_ready_ = true;
    // A dead agent's spare and temporary files hold memory and are never
    // used: gone before this store writes its first file.
    if (DIR* d = opendir(dir_.c_str())) {
      std::vector<std::string> doomed;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        uint64_t m = 0;
        if (ParseName(name, ".tmp-snap-", &m) || name.rfind(".spare-snap", 0) == 0 ||
            name == ".first-snap-ahead") {
          doomed.push_back(dir_ + "/" + name);
        }
      }
      closedir(d);
      for (const std::string& path : doomed) unlink(path.c_str());
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> SnapshotStore::BeginWith(
    uint64_t minibatch, uint64_t boundary_seq, const AllocationTable& table,
    const SnapshotCopier& copier, bool unregistered_ok) {
  if (absl::Status s = PrepareDir(); !s.ok()) return s;
  auto p = std::make_unique<Pending>();
  p->minibatch_ = minibatch;
  p->boundary_seq_ = boundary_seq;
  p->table_ = table;
  p->tmp_ = absl::StrCat(dir_, "/.tmp-snap-", minibatch);
  const size_t meta_size = kHeaderSize + table.size() * kEntrySize + 4;
  uint64_t offset = meta_size;
  for (const auto& [addr, size] : table) {
    p->offsets_.push_back(offset);
    offset += size;
    p->bytes_ += size;
  }
  absl::StatusOr<std::unique_ptr<File>> made =
      FileOfSize(offset, p->tmp_, copier, unregistered_ok, &p->reused_);
  if (!made.ok()) return made.status();
  p->file_ = std::move(*made);
  const size_t meta_bytes = std::min<size_t>(meta_size, p->file_->size);
  if (!p->file_->populated) {
    // The header and table's pages (the staging threads fault in the rest).
    if (absl::Status s = PopulatePagesOf(p->file_->map, meta_bytes); !s.ok()) {
      Delete(std::move(p->file_));
      return absl::ResourceExhaustedError(absl::StrCat(
          "cannot allocate the snapshot ", p->tmp_, "'s header: ", s.message()));
    }
  }
  // A reused file still holds the header of the snapshot it was: damaged
  // until Finish writes this one's, so that it can never pass for either.
  std::memset(p->file_->map, 0, meta_bytes);
  return p;
}

void SnapshotStore::Abandon(std::unique_ptr<Pending> pending) {
  JoinCut();
  if (pending != nullptr) Delete(std::move(pending->file_));
}

absl::StatusOr<SnapshotWriteStats> SnapshotStore::Finish(std::unique_ptr<Pending> pending,
                                                         const SnapshotCrashHook& before_rename) {
  const absl::Time start = absl::Now();
  JoinCut();  // the file is its exact size before it is a snapshot
  Pending& p = *pending;
  const AllocationTable& table = p.table_;
  if (!cut_ok_) {
    cut_ok_ = true;
    const size_t size = p.file_->size;
    if (truncate(p.tmp_.c_str(), static_cast<off_t>(size)) != 0) {
      const int err = errno;
      Delete(std::move(p.file_));
      return absl::UnavailableError(
          absl::StrCat("cannot cut ", p.tmp_, " to ", size, " bytes: ", std::strerror(err)));
    }
  }
  const size_t meta_size = kHeaderSize + table.size() * kEntrySize + 4;
  std::string meta;
  meta.reserve(meta_size);
  meta.append(kMagic, sizeof(kMagic));
  PutU32(&meta, kVersion);
  PutU32(&meta, static_cast<uint32_t>(rank_));
  PutU64(&meta, p.minibatch_);
  PutU64(&meta, p.boundary_seq_);
  PutU64(&meta, table.size());
  std::vector<uint32_t> crcs = std::move(p.crcs_);
  if (crcs.size() != table.size()) {
    std::vector<std::pair<const char*, uint64_t>> ranges(table.size());
    for (size_t i = 0; i < table.size(); ++i) ranges[i] = {p.destination(i), table[i].second};
    crcs = Crc32cMany(ranges, options_.crc_threads);
  }
  for (size_t i = 0; i < table.size(); ++i) {
    PutU64(&meta, table[i].first);
    PutU64(&meta, table[i].second);
    PutU32(&meta, crcs[i]);
    PutU32(&meta, 0);
  }
  PutU32(&meta, crc32c::Value(meta.data(), meta.size()));
  std::memcpy(p.file_->map, meta.data(), meta.size());
  if (before_rename) before_rename();
  const std::string path = PathOf(p.minibatch_);
  // An older snapshot of the same minibatch that this store holds mapped
  // becomes the spare: a second name first, so that `path` names one
  // complete snapshot or the other at every moment.
  std::unique_ptr<File> replaced;
  for (auto it = files_.begin(); it != files_.end(); ++it) {
    if (it->first == p.minibatch_) {
      replaced = std::move(it->second);
      files_.erase(it);
      break;
    }
  }
  const std::string spare_path = SparePath();
  bool linked = false;
  if (replaced != nullptr && replaced->map != nullptr && options_.keep_spare) {
    Delete(std::move(spare_));
    unlink(spare_path.c_str());
    linked = link(path.c_str(), spare_path.c_str()) == 0;
  }
  if (rename(p.tmp_.c_str(), path.c_str()) != 0) {
    const int err = errno;
    if (linked) unlink(spare_path.c_str());
    if (replaced != nullptr) files_.emplace_back(p.minibatch_, std::move(replaced));
    Delete(std::move(p.file_));
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", p.tmp_, " to ", path, ": ", std::strerror(err)));
  }
  if (replaced != nullptr) {
    if (linked) {
      replaced->path = spare_path;
      spare_ = std::move(replaced);
    } else {
      Unmap(replaced.get());  // its name now holds the new snapshot
    }
  }
  p.file_->path = path;
  files_.emplace_back(p.minibatch_, std::move(p.file_));
  if (std::find(written_.begin(), written_.end(), p.minibatch_) == written_.end()) {
    written_.push_back(p.minibatch_);
  }
  // The first snapshot: no spare, and none will come from a snapshot given
  // up (later, DropBefore or a rename over one makes it). One of this size
  // is made now, on a thread of its own, so that the next snapshot maps
  // nothing on its critical path (the files then hold 2x the live bytes, as
  // they do once a snapshot was given up). Registering it on that thread
  // still holds the CUDA driver against the executor's calls for a while
  // (~22 ms per 554 MiB on the H200), its pages being resident by then.
  if (files_.size() == 1) MakeSpareAhead(files_.back().second->size);
  SnapshotWriteStats stats;
  stats.allocations = table.size();
  stats.bytes = p.bytes_;
  stats.reused = p.reused_;
  stats.staged = p.staged_;
  stats.crc_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  stats.ms = stats.crc_ms;
  return stats;
}

size_t SnapshotStore::StagingFor(uint64_t bytes) const {
  constexpr size_t kGranule = size_t{64} << 10;
  const uint64_t rounded = std::max<uint64_t>((bytes + kGranule - 1) / kGranule * kGranule, kGranule);
  return 2 * static_cast<size_t>(std::min<uint64_t>(options_.staging_bytes, rounded));
}

void SnapshotStore::ReleaseStaging() {
  if (staging_ahead_ != nullptr) munmap(staging_ahead_, staging_ahead_size_);
  staging_ahead_ = nullptr;
  staging_ahead_size_ = 0;
  if (staging_ != nullptr) {
    if (staging_unregister_) staging_unregister_(staging_);
    munmap(staging_, staging_size_);
  }
  staging_ = nullptr;
  staging_size_ = 0;
  staging_unregister_ = nullptr;
}

absl::Status SnapshotStore::PrepareStaging(size_t half, const SnapshotCopier& copier) {
  if (staging_ != nullptr && staging_size_ < 2 * half) {
    if (staging_unregister_) staging_unregister_(staging_);
    munmap(staging_, staging_size_);
    staging_ = nullptr;
  }
  if (staging_ == nullptr && staging_ahead_ != nullptr) {
    // Made with the first snapshot's file: only registered here.
    char* m = staging_ahead_;
    const size_t n = staging_ahead_size_;
    staging_ahead_ = nullptr;
    staging_ahead_size_ = 0;
    std::optional<timeline::Span> span;
    if (n >= 2 * half) span.emplace("staging buffers registered");
    if (n >= 2 * half && copier.register_host(m, n).ok()) {
      staging_ = m;
      staging_size_ = n;
      staging_unregister_ = copier.unregister_host;
    } else {
      munmap(m, n);
    }
  }
  if (staging_ == nullptr) {
    // Two buffers in one mapping, resident before they are registered (as
    // the snapshot files are), kept for the store's life.
    timeline::Span span("staging buffers made and registered");
    absl::StatusOr<char*> m = MapResident(2 * half);
    if (!m.ok()) return m.status();
    if (absl::Status s = copier.register_host(*m, 2 * half); !s.ok()) {
      munmap(*m, 2 * half);
      return absl::Status(s.code(), absl::StrCat("registering the staging: ", s.message()));
    }
    staging_ = *m;
    staging_size_ = 2 * half;
    staging_unregister_ = copier.unregister_host;
  }
  return absl::OkStatus();
}

SnapshotStore::TurnPlan SnapshotStore::PlanTurns(const Pending& p) const {
  // No larger than the snapshot needs (a small job pins little), grown
  // when a later snapshot is larger. Straight into a registered file the
  // turns are as large: the threads checksum turn t while the device
  // copies turn t+1.
  TurnPlan plan;
  plan.half = StagingFor(p.bytes_) / 2;
  const size_t half = plan.half;
  // A chunk is copied from the staging buffer into the file and checksummed
  // while it is still in the cache.
  const uint64_t kChunkBytes = std::max<uint64_t>(options_.staging_chunk_bytes, 4096);
  const AllocationTable& table = p.table_;
  plan.turns.resize(1);
  size_t fill = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    for (uint64_t off = 0; off < table[i].second;) {
      if (fill == half) {
        plan.turns.push_back(TurnPlan::Turn{plan.chunks.size(), 0});
        fill = 0;
      }
      const uint64_t n = std::min<uint64_t>({kChunkBytes, table[i].second - off, half - fill});
      plan.chunks.push_back(TurnPlan::Chunk{i, off, n, fill, 0});
      ++plan.turns.back().chunks;
      fill += n;
      off += n;
    }
  }
  if (plan.chunks.empty()) plan.turns.clear();
  return plan;
}

absl::Status SnapshotStore::CopyInTurns(Pending* p, const SnapshotCopier& copier, bool staged) {
  TurnPlan plan = PlanTurns(*p);
  const size_t half = plan.half;
  if (staged && (staging_ == nullptr || staging_size_ < 2 * half)) {
    return absl::FailedPreconditionError("no staging buffers");
  }
  const AllocationTable& table = p->table_;
  TurnIo io;
  io.queue = [&](size_t t) -> absl::Status {
    char* buf = staged ? staging_ + (t % 2) * half : nullptr;
    for (const auto& [c, n] : plan.Runs(t)) {
      const TurnPlan::Chunk& k = plan.chunks[c];
      char* dst = staged ? buf + k.staged_at : p->destination(k.alloc) + k.offset;
      if (absl::Status s = copier.copy(table[k.alloc].first + k.offset, dst, n); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("allocation 0x", absl::Hex(table[k.alloc].first),
                                                   ": ", s.message()));
      }
    }
    return absl::OkStatus();
  };
  // `wait` returns once every queued copy is done, so a buffer is filled
  // again only after its turn was drained.
  io.wait = [&copier](size_t) { return copier.wait(); };
  return RunTurns(p, plan, staged, io);
}

absl::Status SnapshotStore::RunTurns(Pending* p, TurnPlan& plan, bool staged, const TurnIo& io) {
  const size_t half = plan.half;
  std::vector<TurnPlan::Chunk>& chunks = plan.chunks;
  const std::vector<TurnPlan::Turn>& turns = plan.turns;
  const uint64_t kChunkBytes = std::max<uint64_t>(options_.staging_chunk_bytes, 4096);
  // The threads take a turn's chunks in turn; the caller is one of them.
  struct Drain {
    absl::Mutex mu;
    uint64_t turn_seq = 0;  // the turn being drained, counted from 1
    int finished = 0;       // helpers done with turn_seq
    bool stop = false;
    const char* buf = nullptr;
    size_t end = 0;
    std::atomic<size_t> next{0};
    // A piece of a file made without its pages that could not have them.
    std::atomic<bool> failed{false};
    absl::Status failure ABSL_GUARDED_BY(mu);
  } drain;
  // A file made without its pages (File::populated): each piece's pages are
  // faulted in before the copy, an error instead of a SIGBUS on a full tmpfs.
  const bool fault_in = staged && !p->file_->populated;
  auto work = [&] {
    for (size_t c = drain.next.fetch_add(1); c < drain.end; c = drain.next.fetch_add(1)) {
      TurnPlan::Chunk& k = chunks[c];
      if (options_.before_staged_chunk) options_.before_staged_chunk();
      char* dst = p->destination(k.alloc) + k.offset;
      if (fault_in && k.size > 0) {
        if (drain.failed.load(std::memory_order_relaxed)) continue;
        if (absl::Status s = PopulatePagesOf(dst, k.size); !s.ok()) {
          absl::MutexLock lock(&drain.mu);
          if (drain.failure.ok()) {
            drain.failure = absl::ResourceExhaustedError(
                absl::StrCat("cannot allocate the snapshot ", p->file_->path, " (",
                             p->file_->size, " bytes): ", s.message()));
          }
          drain.failed.store(true);
          continue;
        }
      }
      if (drain.buf != nullptr) std::memcpy(dst, drain.buf + k.staged_at, k.size);
      k.crc = crc32c::Value(dst, k.size);
    }
  };
  // No more threads than a turn has chunks.
  const int helpers = static_cast<int>(std::min<uint64_t>(
      std::max(options_.crc_threads, 1) - 1, (half + kChunkBytes - 1) / kChunkBytes - 1));
  std::vector<std::thread> workers;
  for (int h = 0; h < helpers; ++h) {
    workers.emplace_back([&drain, &work] {
      uint64_t seen = 0;
      while (true) {
        {
          absl::MutexLock lock(&drain.mu);
          auto ready = [&drain, &seen] { return drain.stop || drain.turn_seq != seen; };
          drain.mu.Await(absl::Condition(&ready));
          if (drain.stop) return;
          seen = drain.turn_seq;
        }
        work();
        absl::MutexLock lock(&drain.mu);
        ++drain.finished;
      }
    });
  }
  // Device copies of turn t+1 run while the threads drain turn t.
  absl::Status status;
  if (!turns.empty()) {
    if (io.queue) status = io.queue(0);
    const absl::Status waited = io.wait(0);
    if (status.ok()) status = waited;
  }
  for (size_t t = 0; status.ok() && t < turns.size(); ++t) {
    const bool more = t + 1 < turns.size();
    if (more && io.queue) status = io.queue(t + 1);
    {
      absl::MutexLock lock(&drain.mu);
      drain.buf = staged ? staging_ + (t % 2) * half : nullptr;
      drain.end = turns[t].first_chunk + turns[t].chunks;
      drain.next.store(turns[t].first_chunk);
      drain.finished = 0;
      ++drain.turn_seq;
    }
    work();
    {
      absl::MutexLock lock(&drain.mu);
      auto all_done = [&drain, helpers] { return drain.finished == helpers; };
      drain.mu.Await(absl::Condition(&all_done));
    }
    if (io.drained) io.drained(t);
    // Copies queued before a failed one still write into the other buffer:
    // they are waited for before the function returns.
    if (more) {
      const absl::Status waited = io.wait(t + 1);
      if (status.ok()) status = waited;
    }
  }
  {
    absl::MutexLock lock(&drain.mu);
    drain.stop = true;
  }
  for (std::thread& w : workers) w.join();
  if (!status.ok()) return status;
  if (drain.failed.load()) {
    absl::MutexLock lock(&drain.mu);
    return drain.failure;
  }
  const AllocationTable& table = p->table_;
  p->crcs_.assign(table.size(), 0);
  std::vector<bool> started(table.size(), false);
  for (const TurnPlan::Chunk& k : chunks) {
    uint32_t& crc = p->crcs_[k.alloc];
    crc = started[k.alloc] ? Crc32cCombine(crc, k.crc, k.size) : k.crc;
    started[k.alloc] = true;
  }
  return absl::OkStatus();
}

absl::Status SnapshotStore::DrainStaged(Pending* p,
                                        const std::function<absl::Status(size_t)>& wait_turn,
                                        const std::function<void(size_t)>& drained) {
  if (!p->staged_) return absl::FailedPreconditionError("the snapshot is not staged");
  TurnPlan plan = PlanTurns(*p);
  if (staging_ == nullptr || staging_size_ < 2 * plan.half) {
    return absl::FailedPreconditionError("no staging buffers");
  }
  TurnIo io;
  io.wait = wait_turn;
  io.drained = drained;
  absl::Status s = RunTurns(p, plan, /*staged=*/true, io);
  if (s.ok()) ++staged_drains_;
  return s;
}

absl::StatusOr<SnapshotWriteStats> SnapshotStore::WriteWith(uint64_t minibatch,
                                                            uint64_t boundary_seq,
                                                            const AllocationTable& table,
                                                            const SnapshotCopier& copier,
                                                            const SnapshotCrashHook& before_rename) {
  const absl::Time start = absl::Now();
  const bool can_stage = CanStage(copier);
  absl::StatusOr<std::unique_ptr<Pending>> p =
      BeginWith(minibatch, boundary_seq, table, copier, can_stage);
  if (!p.ok()) return p.status();
  bool staged = can_stage && !(*p)->file_->registered;
  if (staged) {
    // Staging that cannot be had (host memory, registration): the file is
    // registered instead and the device copies straight into it.
    if (absl::Status s = PrepareStaging(StagingFor((*p)->bytes_) / 2, copier); !s.ok()) {
      ++staging_failures_;
      staging_failure_ = s;
      staged = false;
      if (absl::Status r = Register((*p)->file_.get(), copier); !r.ok()) {
        Abandon(std::move(*p));
        return absl::Status(r.code(), absl::StrCat("the snapshot's staging (", s.message(),
                                                   ") and registering its file: ", r.message()));
      }
    }
  }
  // Copies waited for turn by turn, the threads checksumming (and, staged,
  // copying into the file) one turn while the device copies the next: a
  // copier that queues and waits. A reader (Write with a DeviceRead) copies
  // as it is called: all at once, then the checksums.
  const bool in_turns = staged || (copier.wait && options_.turns);
  if (in_turns) {
    if (absl::Status s = CopyInTurns(p->get(), copier, staged); !s.ok()) {
      Abandon(std::move(*p));
      return absl::Status(s.code(), absl::StrCat("the snapshot's device copies: ", s.message()));
    }
    if (staged) ++staged_writes_;
  }
  for (size_t i = 0; i < table.size() && !in_turns; ++i) {
    const auto& [addr, size] = table[i];
    if (size == 0) continue;
    if (absl::Status s = copier.copy(addr, (*p)->destination(i), size); !s.ok()) {
      Abandon(std::move(*p));
      return absl::Status(s.code(), absl::StrCat("reading allocation 0x", absl::Hex(addr),
                                                 " for the snapshot: ", s.message()));
    }
  }
  if (copier.wait && !in_turns) {
    if (absl::Status s = copier.wait(); !s.ok()) {
      Abandon(std::move(*p));
      return absl::Status(s.code(), absl::StrCat("the snapshot's device copies: ", s.message()));
    }
  }
  const absl::Time copied = absl::Now();
  absl::StatusOr<SnapshotWriteStats> st = Finish(std::move(*p), before_rename);
  if (!st.ok()) return st;
  st->copy_ms = absl::ToDoubleMilliseconds(copied - start);
  st->staged = staged;
  st->ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  return st;
}

void SnapshotStore::DropBefore(uint64_t minibatch) {
  if (!scanned_) {
    scanned_ = true;
    // A dead agent's files: its older snapshots, leftover temporary files
    // and its spare (there is one writer, and it is not writing now).
    if (DIR* d = opendir(dir_.c_str())) {
      std::vector<std::string> doomed;
      while (dirent* e = readdir(d)) {
        const std::string name = e->d_name;
        uint64_t m = 0;
        if ((ParseName(name, "snap-", &m) && m < minibatch &&
             std::find(written_.begin(), written_.end(), m) == written_.end()) ||
            ParseName(name, ".tmp-snap-", &m) || name.rfind(".spare-snap", 0) == 0 ||
            name == ".first-snap-ahead") {
          doomed.push_back(dir_ + "/" + name);
        }
      }
      closedir(d);
      for (const std::string& p : doomed) {
        if ((spare_ == nullptr || p != spare_->path) &&
            !(ahead_thread_.joinable() && p == AheadPath()) &&
            !((first_thread_.joinable() || first_file_ != nullptr) && p == FirstAheadPath())) {
          unlink(p.c_str());
        }
      }
    }
  }
  // The newest snapshot given up becomes the spare.
  uint64_t newest = 0;
  bool any = false;
  for (uint64_t m : written_) {
    if (m < minibatch && (!any || m > newest)) newest = m, any = true;
  }
  for (auto it = written_.begin(); it != written_.end();) {
    const uint64_t m = *it;
    if (m >= minibatch) {
      ++it;
      continue;
    }
    std::unique_ptr<File> f;
    for (auto fi = files_.begin(); fi != files_.end(); ++fi) {
      if (fi->first == m) {
        f = std::move(fi->second);
        files_.erase(fi);
        break;
      }
    }
    if (f != nullptr && options_.keep_spare && m == newest && f->map != nullptr) {
      const std::string spare_path = SparePath();
      Delete(std::move(spare_));
      if (rename(f->path.c_str(), spare_path.c_str()) == 0) {
        f->path = spare_path;
        spare_ = std::move(f);
      } else {
        Delete(std::move(f));
      }
    } else if (f != nullptr) {
      DeleteBehind(std::move(f));
    } else {
      unlink(PathOf(m).c_str());
    }
    it = written_.erase(it);
  }
}

std::vector<uint64_t> SnapshotStore::List() const {
  std::vector<uint64_t> out;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    uint64_t m = 0;
    if (ParseName(e->d_name, "snap-", &m)) out.push_back(m);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

absl::StatusOr<std::unique_ptr<Snapshot>> SnapshotStore::Open(uint64_t minibatch) const {
  const std::string path = PathOf(minibatch);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const std::vector<uint64_t> have = List();
    return absl::NotFoundError(absl::StrCat(
        "no snapshot of minibatch ", minibatch, " in ", dir_, " (snapshots present: ",
        have.empty() ? std::string("none") : absl::StrJoin(have, ", "), ")"));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("stat ", path, ": ", std::strerror(errno)));
  }
  const size_t size = static_cast<size_t>(st.st_size);
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("snapshot ", path, " is corrupt: ", why));
  };
  if (size < kHeaderSize + 4) {
    close(fd);
    return corrupt(absl::StrCat("only ", size, " bytes"));
  }
  void* map = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    return absl::UnavailableError(absl::StrCat("mmap ", path, ": ", std::strerror(errno)));
  }
  std::unique_ptr<Snapshot> snap(new Snapshot());
  snap->path_ = path;
  snap->map_ = static_cast<const char*>(map);
  snap->map_size_ = size;
  const char* p = snap->map_;
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0) return corrupt("bad magic");
  if (GetU32(p + 8) != kVersion) return corrupt(absl::StrCat("version ", GetU32(p + 8)));
  if (GetU32(p + 12) != static_cast<uint32_t>(rank_)) {
    return corrupt(absl::StrCat("written by rank ", GetU32(p + 12), ", not ", rank_));
  }
  snap->minibatch_ = GetU64(p + 16);
  snap->boundary_seq_ = GetU64(p + 24);
  const uint64_t count = GetU64(p + 32);
  if (count > (size - kHeaderSize - 4) / kEntrySize) {
    return corrupt(absl::StrCat("table of ", count, " allocations does not fit"));
  }
  const size_t meta_size = kHeaderSize + count * kEntrySize;
  if (crc32c::Value(p, meta_size) != GetU32(p + meta_size)) {
    return corrupt("header checksum mismatch");
  }
  if (snap->minibatch_ != minibatch) {
    return corrupt(absl::StrCat("holds minibatch ", snap->minibatch_, ", named ", minibatch));
  }
  uint64_t offset = meta_size + 4;
  std::vector<uint32_t> crcs;
  for (uint64_t i = 0; i < count; ++i) {
    const char* e = p + kHeaderSize + i * kEntrySize;
    const uint64_t addr = GetU64(e), len = GetU64(e + 8);
    if (len > size - offset) {
      return corrupt(absl::StrCat("allocation 0x", absl::Hex(addr), " (", len,
                                  " bytes) runs past the end of the file"));
    }
    snap->table_.emplace_back(addr, len);
    snap->offsets_.push_back(offset);
    crcs.push_back(GetU32(e + 16));
    offset += len;
    snap->bytes_ += len;
  }
  if (offset != size) {
    return corrupt(absl::StrCat(size - offset, " bytes after the last allocation"));
  }
  // Every allocation's checksum, on the store's threads (a replacement
  // waits for them before it loads anything).
  std::vector<std::pair<const char*, uint64_t>> ranges(count);
  for (uint64_t i = 0; i < count; ++i) ranges[i] = {p + snap->offsets_[i], snap->table_[i].second};
  const std::vector<uint32_t> got = Crc32cMany(ranges, options_.crc_threads);
  for (uint64_t i = 0; i < count; ++i) {
    if (got[i] != crcs[i]) {
      return corrupt(absl::StrCat("checksum mismatch in the bytes of allocation 0x",
                                  absl::Hex(snap->table_[i].first), " (",
                                  snap->table_[i].second, " bytes at file offset ",
                                  snap->offsets_[i], ")"));
    }
  }
  return snap;
}

}  // namespace agent
}  // namespace revenant
