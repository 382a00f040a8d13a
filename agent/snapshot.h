// Boundary snapshots: the device state of a rank at a minibatch boundary,
// for ranks that have no healthy replica to take it from on recovery (a
// 1-rank job). docs/recovery.md, "Single rank: boundary snapshots".
//
// At the boundary that starts minibatch m, before the journal records that
// boundary, the agent writes every live allocation's bytes to
// <job_dir>/snapshots/snap-<m>: first under a temporary name, then renamed.
// The older snapshot is deleted only after the journal recorded boundary m,
// so whichever crash point the agent dies at, the snapshot of the journal's
// minibatch exists (docs/recovery.md has the table).
//
// File layout (little endian):
//   header   magic "RVSNAP01", u32 version, u32 rank, u64 minibatch,
//            u64 boundary_seq, u64 count
//   table    count x { u64 addr, u64 size, u32 crc32c(bytes), u32 zero }
//   u32      crc32c(header + table)
//   bytes    every allocation's bytes, in table order
// The table is the allocation table (start, size) at the boundary;
// boundary_seq is the first request seq the state does not include.
//
//   SnapshotStore store(job_dir + "/snapshots", rank);
//   store.Write(m, seq, backend->allocations, read_fn);   // at a boundary
//   store.DropBefore(m);                                  // after the journal's boundary
//   absl::StatusOr<Snapshot> s = store.Open(m);           // a replacement
//   s->Load(write_fn);
#ifndef REVENANT_AGENT_SNAPSHOT_H_
#define REVENANT_AGENT_SNAPSHOT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace revenant {
namespace agent {

// (start address, size) of one device allocation.
using AllocationTable = std::vector<std::pair<uint64_t, uint64_t>>;

// Copies `n` device bytes at `addr` into `dst` (reading) or from `src`
// (writing); the caller's backend does the copy.
using DeviceRead = std::function<absl::Status(uint64_t addr, void* dst, size_t n)>;
using DeviceWrite = std::function<absl::Status(uint64_t addr, const void* src, size_t n)>;

struct SnapshotWriteStats {
  uint64_t allocations = 0;
  uint64_t bytes = 0;
  double ms = 0;
};

// Crash points inside Write, for fault injection (revenant-run --chaos
// point=snapshot_partial): called after the temporary file is complete and
// before it is renamed.
using SnapshotCrashHook = std::function<void()>;

// One verified snapshot, mapped read-only.
class Snapshot {
 public:
  ~Snapshot();
  Snapshot(const Snapshot&) = delete;
  Snapshot& operator=(const Snapshot&) = delete;

  uint64_t minibatch() const { return minibatch_; }
  uint64_t boundary_seq() const { return boundary_seq_; }
  const AllocationTable& allocations() const { return table_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& path() const { return path_; }

  // Writes every allocation's bytes back through `write` (the caller has
  // recreated the allocations at the same addresses). `live` (start, size)
  // lists the allocations that exist now: an allocation of the snapshot
  // that is not among them is skipped and counted in *skipped (the journal
  // replay already dropped it as freed later).
  absl::Status Load(const DeviceWrite& write, const AllocationTable& live,
                    uint64_t* skipped) const;

 private:
  friend class SnapshotStore;
  Snapshot() = default;
  std::string path_;
  uint64_t minibatch_ = 0;
  uint64_t boundary_seq_ = 0;
  uint64_t bytes_ = 0;
  AllocationTable table_;
  std::vector<uint64_t> offsets_;  // of each allocation's bytes in the file
  const char* map_ = nullptr;
  size_t map_size_ = 0;
};

class SnapshotStore {
 public:
  SnapshotStore(std::string dir, int rank);

  const std::string& dir() const { return dir_; }

  // Writes the snapshot of the boundary that starts `minibatch`: `table`'s
  // allocations read through `read`. Temporary file, then rename; an older
  // snapshot of the same minibatch is replaced.
  absl::StatusOr<SnapshotWriteStats> Write(uint64_t minibatch, uint64_t boundary_seq,
                                           const AllocationTable& table, const DeviceRead& read,
                                           const SnapshotCrashHook& before_rename = nullptr);

  // Deletes the snapshots of minibatches before `minibatch`. The first call
  // scans the directory (a dead agent's snapshots, leftover temporary
  // files); later ones delete what this store wrote (call it between writes).
  void DropBefore(uint64_t minibatch);

  // Opens and verifies (every CRC, the file size) the snapshot of
  // `minibatch`. kNotFound when there is none (the message lists the
  // snapshots that exist), kDataLoss when it is corrupt (never loaded).
  absl::StatusOr<std::unique_ptr<Snapshot>> Open(uint64_t minibatch) const;

  // The minibatches that have a (renamed) snapshot, ascending.
  std::vector<uint64_t> List() const;

  std::string PathOf(uint64_t minibatch) const;

 private:
  const std::string dir_;
  const int rank_;
  bool dir_ready_ = false;
  bool scanned_ = false;
  std::vector<uint64_t> written_;  // renamed snapshots not yet dropped
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_SNAPSHOT_H_
