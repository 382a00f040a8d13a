#include "agent/snapshot.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/crc32c.h"

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

absl::Status WriteAll(int fd, const void* data, size_t n, off_t offset, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t k = pwrite(fd, p, n, offset);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("writing the snapshot ", path, ": ", std::strerror(errno)));
    }
    p += k;
    n -= static_cast<size_t>(k);
    offset += k;
  }
  return absl::OkStatus();
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

SnapshotStore::SnapshotStore(std::string dir, int rank) : dir_(std::move(dir)), rank_(rank) {}

std::string SnapshotStore::PathOf(uint64_t minibatch) const {
  return absl::StrCat(dir_, "/snap-", minibatch);
}

absl::StatusOr<SnapshotWriteStats> SnapshotStore::Write(uint64_t minibatch, uint64_t boundary_seq,
                                                        const AllocationTable& table,
                                                        const DeviceRead& read,
                                                        const SnapshotCrashHook& before_rename) {
  const absl::Time start = absl::Now();
  if (!dir_ready_) {
    if (mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::UnavailableError(absl::StrCat("cannot create the snapshot directory ", dir_,
                                                 ": ", std::strerror(errno)));
    }
    dir_ready_ = true;
  }
  const std::string tmp = absl::StrCat(dir_, "/.tmp-snap-", minibatch);
  const std::string path = PathOf(minibatch);
  const int fd = open(tmp.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot create ", tmp, ": ", std::strerror(errno)));
  }
  auto fail = [&](absl::Status s) {
    close(fd);
    unlink(tmp.c_str());
    return s;
  };
  const size_t meta_size = kHeaderSize + table.size() * kEntrySize + 4;
  off_t offset = static_cast<off_t>(meta_size);
  std::vector<uint32_t> crcs(table.size(), 0);
  std::vector<char> buf;
  uint64_t bytes = 0;
  for (size_t i = 0; i < table.size(); ++i) {
    const auto& [addr, size] = table[i];
    uint32_t crc = 0;
    for (uint64_t done = 0; done < size;) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, size - done));
      if (buf.size() < n) buf.resize(n);
      if (absl::Status s = read(addr + done, buf.data(), n); !s.ok()) {
        return fail(absl::Status(s.code(), absl::StrCat("reading allocation 0x", absl::Hex(addr),
                                                        " for the snapshot: ", s.message())));
      }
      crc = crc32c::Extend(crc, buf.data(), n);
      if (absl::Status s = WriteAll(fd, buf.data(), n, offset, tmp); !s.ok()) return fail(s);
      offset += static_cast<off_t>(n);
      done += n;
    }
    crcs[i] = crc;
    bytes += size;
  }
  std::string meta;
  meta.reserve(meta_size);
  meta.append(kMagic, sizeof(kMagic));
  PutU32(&meta, kVersion);
  PutU32(&meta, static_cast<uint32_t>(rank_));
  PutU64(&meta, minibatch);
  PutU64(&meta, boundary_seq);
  PutU64(&meta, table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    PutU64(&meta, table[i].first);
    PutU64(&meta, table[i].second);
    PutU32(&meta, crcs[i]);
    PutU32(&meta, 0);
  }
  PutU32(&meta, crc32c::Value(meta.data(), meta.size()));
  if (absl::Status s = WriteAll(fd, meta.data(), meta.size(), 0, tmp); !s.ok()) return fail(s);
  close(fd);
  if (before_rename) before_rename();
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  if (std::find(written_.begin(), written_.end(), minibatch) == written_.end()) {
    written_.push_back(minibatch);
  }
  SnapshotWriteStats stats;
  stats.allocations = table.size();
  stats.bytes = bytes;
  stats.ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  return stats;
}

void SnapshotStore::DropBefore(uint64_t minibatch) {
  if (scanned_) {
    // Only this store's snapshots can be left: no directory scan per boundary.
    for (auto it = written_.begin(); it != written_.end();) {
      if (*it < minibatch) {
        unlink(PathOf(*it).c_str());
        it = written_.erase(it);
      } else {
        ++it;
      }
    }
    return;
  }
  scanned_ = true;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return;
  std::vector<std::string> doomed;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    uint64_t m = 0;
    // Temporary files are leftovers of a writer that died (there is one
    // writer, and it is not writing now).
    if ((ParseName(name, "snap-", &m) && m < minibatch) || ParseName(name, ".tmp-snap-", &m)) {
      doomed.push_back(dir_ + "/" + name);
    }
  }
  closedir(d);
  for (const std::string& p : doomed) unlink(p.c_str());
  written_.erase(std::remove_if(written_.begin(), written_.end(),
                                [minibatch](uint64_t m) { return m < minibatch; }),
                 written_.end());
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
  for (uint64_t i = 0; i < count; ++i) {
    if (crc32c::Value(p + snap->offsets_[i], snap->table_[i].second) != crcs[i]) {
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
