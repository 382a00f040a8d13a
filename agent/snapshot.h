// Boundary snapshots: the device state of a rank at a minibatch boundary,
// for ranks that have no healthy replica to take it from on recovery (a
// 1-rank job). docs/recovery.md, "Single rank: boundary snapshots".
//
// At the boundary that starts minibatch m, before the journal records that
// boundary, the agent writes every live allocation's bytes to
// <job_dir>/snapshots/snap-<m>: first under a temporary name, then renamed.
// The older snapshot is given up only after the journal recorded boundary m,
// so whichever crash point the agent dies at, the snapshot of the journal's
// minibatch exists (docs/recovery.md has the table).
//
// Between journal boundaries (a 1-rank job), snapshots are asynchronous:
// Begin maps the file, the device copies into it on a stream of its own
// (Backend::QueueSnapshotCopies), and Finish, on another thread once the
// copies completed, checksums it and renames it over the snapshot of the
// journal's minibatch (same m, later boundary_seq: the journal's replay
// skips the steps before it). Until then the older snapshot and the
// journal since it are the recovery's base.
//
// The files are mapped and reused: a file is sized, mapped (MAP_SHARED) and
// registered for device copies once (SnapshotCopier::register_host: on the
// cuda backend cudaHostRegister), the device copies every allocation
// straight into the mapping, and the snapshot given up at a boundary is
// kept as the spare (renamed to .spare-snap) that the next snapshot of the
// same size is written into: in steady state a boundary maps and registers
// nothing. With the spare kept, the files hold 2x the live bytes between
// boundaries; without (keep_spare false), 1x, and each snapshot maps and
// registers a fresh file. With Options::staged, a snapshot into a file
// not registered yet (the first one's) leaves it so and copies through two
// registered staging buffers instead: a synchronous one in CopyInTurns, an
// asynchronous one with the device's turns gated on the drain
// (Pending::staged, DrainStaged).
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
//   store.SetCopier(copier);                              // the backend's copies
//   store.Write(m, seq, backend->allocations);            // at a boundary
//   store.DropBefore(m);                                  // after the journal's boundary
//   absl::StatusOr<Snapshot> s = store.Open(m);           // a replacement
//   s->Load(write_fn);
#ifndef REVENANT_AGENT_SNAPSHOT_H_
#define REVENANT_AGENT_SNAPSHOT_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace revenant {
namespace agent {

// (start address, size) of one device allocation.
using AllocationTable = std::vector<std::pair<uint64_t, uint64_t>>;

// Copies `n` device bytes at `addr` into `dst` (reading) or from `src`
// (writing); the caller's backend does the copy.
using DeviceRead = std::function<absl::Status(uint64_t addr, void* dst, size_t n)>;
using DeviceWrite = std::function<absl::Status(uint64_t addr, const void* src, size_t n)>;

// How the device bytes reach a mapped snapshot file. `copy` may only queue
// the copy; `wait` returns once every queued copy is done. register_host /
// unregister_host (may be null) make a mapping reachable by device copies.
struct SnapshotCopier {
  std::function<absl::Status(uint64_t addr, void* dst, size_t n)> copy;
  std::function<absl::Status()> wait;
  std::function<absl::Status(void* p, size_t n)> register_host;
  std::function<void(void* p)> unregister_host;
};

struct SnapshotWriteStats {
  uint64_t allocations = 0;
  uint64_t bytes = 0;
  double ms = 0;        // the whole write
  double copy_ms = 0;   // the device copies (queued and waited for)
  double crc_ms = 0;    // checksums and header
  bool reused = false;  // written into the spare: nothing mapped or registered
  bool staged = false;  // through the staging buffers into a file not registered
};

// CRC32C of A+B from crc32c(A), crc32c(B) and B's length.
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);
// The CRC32C of each range, computed by up to `threads` threads that share
// the ranges' pieces (a snapshot's allocations are many, most too small to
// be split alone).
std::vector<uint32_t> Crc32cMany(const std::vector<std::pair<const char*, uint64_t>>& ranges,
                                 int threads);

// Crash points inside Write, for fault injection (revenant-run --chaos
// point=snapshot_partial): called after the temporary file is complete and
// before it is renamed.
using SnapshotCrashHook = std::function<void()>;

// A snapshot file mapped for writing (SnapshotStore's).
struct SnapshotFile {
  std::string path;
  char* map = nullptr;
  size_t size = 0;
  bool registered = false;
  // False for a file made without its pages (a staged snapshot's new file
  // without keep_spare): the threads that copy into it fault each piece's
  // pages in first (SnapshotStore::RunTurns), so that a full tmpfs is an
  // error there rather than a SIGBUS.
  bool populated = true;
  std::function<void(void* p)> unregister;
};

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
  struct Options {
    // Keep the snapshot given up at a boundary as the next one's file.
    bool keep_spare = true;
    // Threads that checksum a snapshot's bytes (1: the caller alone).
    int crc_threads = 1;
    // With keep_spare: after a snapshot that left no spare (the first ones),
    // a spare of its size is made on a thread of the store's own
    // (MakeSpareAhead), so that the next snapshot maps nothing on its
    // critical path (the registration still holds the CUDA driver briefly).
    bool spare_ahead = true;
    // A synchronous snapshot (Write) into a file that is not registered yet
    // (the first snapshot's, a new one, a spare that never was) leaves it
    // unregistered: the device copies into two registered staging buffers
    // of `staging_bytes` each, taking turns, while up to crc_threads
    // threads copy the other buffer into the file and checksum what they
    // copied. Registering a 554 MiB file held the CUDA driver 22-52 ms on
    // the H200, against ~10 ms for all its copies; the staging buffers are
    // registered once. An asynchronous snapshot (Begin) into such a file
    // stages too (Pending::staged, DrainStaged).
    bool staged = false;
    // With spare_ahead: the first snapshot's file, left unregistered by a
    // staged first snapshot, is registered on the same thread right after
    // the spare (the driver held once more, during the job's first steps),
    // so that the asynchronous snapshots that take it later as their spare
    // copy straight into it (~10 ms per 554 MiB on the H200) rather than
    // through the staging (~20 ms: the device waits for the CPU's drain).
    // False: every other asynchronous snapshot stages.
    bool register_behind = true;
    size_t staging_bytes = size_t{32} << 20;
    // The piece a thread copies and checksums at a time (in its cache).
    size_t staging_chunk_bytes = size_t{1} << 20;
    // Called by a copying thread before each chunk (tests slow them down to
    // show that a buffer is filled again only after its turn was drained).
    std::function<void()> before_staged_chunk;
    // The first snapshot's file made ahead gets its pages in pieces of this
    // size; the first snapshot stops the making at the next piece instead of
    // waiting for the rest (the copying threads fault those pages in).
    size_t first_populate_chunk = size_t{64} << 20;
    // Called on the first file's thread before each such piece (tests slow
    // it down to show that the first snapshot does not wait for the rest).
    std::function<void(size_t)> before_first_chunk;
    // Called on the store's thread before it makes a next file ahead
    // (MakeNextFileAhead; tests hold it there to show that a snapshot does
    // not wait for it).
    std::function<void()> before_next_file;
    // A synchronous snapshot copied straight into a registered file waits
    // for its copies in turns of staging_bytes and checksums each turn
    // while the next is copied (false: all copies, then the checksums).
    bool turns = true;
  };
  SnapshotStore(std::string dir, int rank);
  SnapshotStore(std::string dir, int rank, Options options);
  // Unmaps (and unregisters) the files; they stay on disk.
  ~SnapshotStore();

  const std::string& dir() const { return dir_; }

  // The device copies for Write without a reader (default: none).
  void SetCopier(SnapshotCopier copier) { copier_ = std::move(copier); }

  // Writes the snapshot of the boundary that starts `minibatch`: `table`'s
  // allocations copied by the copier, or read through `read` straight into
  // the mapped file. Temporary file, then rename; an older snapshot of the
  // same minibatch is replaced.
  absl::StatusOr<SnapshotWriteStats> Write(uint64_t minibatch, uint64_t boundary_seq,
                                           const AllocationTable& table,
                                           const SnapshotCrashHook& before_rename = nullptr);
  absl::StatusOr<SnapshotWriteStats> Write(uint64_t minibatch, uint64_t boundary_seq,
                                           const AllocationTable& table, const DeviceRead& read,
                                           const SnapshotCrashHook& before_rename = nullptr);

  // A snapshot whose bytes are being copied into its mapped file (written
  // under the temporary name; not a snapshot until Finish renamed it).
  class Pending {
   public:
    uint64_t minibatch() const { return minibatch_; }
    uint64_t boundary_seq() const { return boundary_seq_; }
    const AllocationTable& table() const { return table_; }
    // Where allocation i's bytes go (registered when the copier registers).
    char* destination(size_t i) const { return file_->map + offsets_[i]; }
    uint64_t bytes() const { return bytes_; }
    bool reused() const { return reused_; }
    // Staged (Begin into a file not registered, Options::staged): the device
    // copies into the staging buffers instead of the destinations, in turns
    // that DrainStaged empties into the file. The copies (device address,
    // staging destination, bytes) and where each turn's end: turn t is
    // staged_copies()[staged_turn_ends()[t-1] .. staged_turn_ends()[t]).
    bool staged() const { return staged_; }
    struct StagedCopy {
      uint64_t addr = 0;
      char* dst = nullptr;
      uint64_t size = 0;
    };
    const std::vector<StagedCopy>& staged_copies() const { return staged_copies_; }
    const std::vector<size_t>& staged_turn_ends() const { return staged_turn_ends_; }

   private:
    friend class SnapshotStore;
    uint64_t minibatch_ = 0, boundary_seq_ = 0, bytes_ = 0;
    bool reused_ = false;
    bool staged_ = false;
    std::vector<StagedCopy> staged_copies_;
    std::vector<size_t> staged_turn_ends_;
    // The CRC32C of each allocation's bytes when the copies computed them
    // (staged): Finish does not read the file again.
    std::vector<uint32_t> crcs_;
    AllocationTable table_;
    std::vector<uint64_t> offsets_;
    std::string tmp_;
    std::unique_ptr<SnapshotFile> file_;
  };

  // The two halves of Write, for device copies that complete later: Begin
  // maps the file (the spare, or a new one registered through the copier),
  // the caller has the device fill every destination; once the copies
  // completed, Finish checksums, writes the header and renames it into
  // place, atomically replacing an existing snapshot of the same minibatch
  // (a newer state of the same journal minibatch: Snapshot::boundary_seq
  // says where the journal's replay starts); the replaced file becomes the
  // spare. Abandon deletes it. Begin..Finish/Abandon may run on another
  // thread than Begin's caller; nothing else may use the store meanwhile.
  //
  // With Options::staged, a file that is not registered (the first
  // snapshot's, a new one) stays so: the Pending is staged(), the device
  // copies its staged_copies() into the staging buffers turn by turn, and
  // DrainStaged, on the thread that will call Finish, copies each turn into
  // the file and checksums it: `wait_turn(t)` returns once the device
  // completed turn t (an error stops the drain), `drained(t)` tells the
  // device that turn t's buffer may be filled again (turn t + 2). Staging
  // that cannot be had registers the file instead (not staged).
  absl::StatusOr<std::unique_ptr<Pending>> Begin(uint64_t minibatch, uint64_t boundary_seq,
                                                 const AllocationTable& table);
  absl::Status DrainStaged(Pending* pending, const std::function<absl::Status(size_t)>& wait_turn,
                           const std::function<void(size_t)>& drained);
  absl::StatusOr<SnapshotWriteStats> Finish(std::unique_ptr<Pending> pending,
                                            const SnapshotCrashHook& before_rename = nullptr);
  void Abandon(std::unique_ptr<Pending> pending);

  // Unmaps and unregisters every file (the device is going away); the
  // snapshots stay on disk, the spare is deleted. Later writes map anew.
  void ReleaseMappings();

  // Bytes of the files this store holds (snapshots not dropped + spare),
  // of those registered for device copies, and how many times a file was
  // mapped and registered.
  uint64_t file_bytes() const;
  uint64_t registered_bytes() const;
  uint64_t files_mapped() const { return files_mapped_; }
  // Of those, made without their pages (File::populated).
  uint64_t files_made_lazily() const { return files_made_lazily_; }
  // Synchronous snapshots copied through the staging buffers (Options::staged),
  // and asynchronous ones drained from them (DrainStaged).
  uint64_t staged_writes() const { return staged_writes_; }
  uint64_t staged_drains() const { return staged_drains_; }
  // Staged writes that found no staging (registered their file instead),
  // and the last reason.
  uint64_t staging_failures() const { return staging_failures_; }
  const absl::Status& staging_failure() const { return staging_failure_; }
  // Waits for a spare being made ahead (Options::spare_ahead) and makes it
  // the spare (renamed .spare-snap); the store's writes call it first.
  void TakeSpareAhead();
  // Spares made ahead and taken, and those whose making failed (the next
  // snapshot then made its own file; the last failure says why).
  uint64_t spares_made_ahead() const { return spares_made_ahead_; }
  uint64_t spares_ahead_failed() const { return spares_ahead_failed_; }
  const absl::Status& spare_ahead_failure() const { return ahead_failed_status_; }
  // How long the last spare made ahead took (off the critical path).
  double spare_ahead_ms() const { return ahead_ms_; }

  // Without keep_spare (with spare_ahead): the next snapshot's file, made
  // ahead of it on the store's thread once the caller sees that snapshot
  // coming (Session::MakeNextSnapshotFile), its pages resident but not
  // registered: a staged snapshot then fills it at memcpy's pace instead
  // of faulting its pages in while the device waits for the drain. The
  // files hold 1x the live bytes until the call and 2x from it until the
  // snapshot that takes the file finished (the older one goes then). Does
  // nothing before the first snapshot began, while there is a spare or
  // one is being made. A snapshot takes the file only once it is made: it
  // never waits for it (a file made late serves the snapshot after).
  void MakeNextFileAhead(size_t size);
  // Whether MakeNextFileAhead would start making one now.
  bool next_file_wanted() const {
    return !options_.keep_spare && options_.spare_ahead && first_begun_ && spare_ == nullptr &&
           !ahead_thread_.joinable();
  }
  // The next files made ahead and taken by their snapshot; snapshots that
  // found theirs still being made (they made their own without pages);
  // the time from the start of making each to the snapshot taking it
  // (summed), and the last one's making (next_file_wanted: not running).
  uint64_t next_files_ahead() const { return next_files_ahead_; }
  uint64_t next_files_late() const { return next_files_late_; }
  double next_file_lead_ms() const { return next_lead_ms_; }
  // What making a file of `size` bytes with its pages resident should take
  // on the store's threads: at the pace of the last such file of at least
  // kPaceMinBytes (a next file, or the pages of the first snapshot's), else
  // at kDefaultMakeNsPerByte (a cautious ~2 GB/s: tmpfs populated at
  // 4.5-4.7 GB/s on an H100 VM).
  double EstimatedMakeMs(size_t size) const {
    const double pace = make_ns_per_byte_.load(std::memory_order_relaxed);
    return static_cast<double>(size) * (pace > 0 ? pace : kDefaultMakeNsPerByte) / 1e6;
  }
  static constexpr double kDefaultMakeNsPerByte = 0.5;
  static constexpr size_t kPaceMinBytes = size_t{16} << 20;
  // Whether a next file is still being made (a snapshot now would not take it).
  bool next_file_busy() const {
    return ahead_next_ && ahead_busy_.load(std::memory_order_acquire);
  }
  // Deletes a next file made ahead that no snapshot took (the job ends).
  void DropNextFileAhead();
  // Files a staged snapshot left unregistered that the store's thread
  // registered after it (Options::register_behind), and the time it took.
  uint64_t registered_behind() const { return registered_behind_; }
  double register_behind_ms() const { return register_behind_ms_; }

  // The size of the file of a snapshot of `table` (header, table, bytes).
  static size_t FileSizeFor(const AllocationTable& table);

  // Before the first snapshot (with keep_spare and spare_ahead): a file of
  // `size` bytes (FileSizeFor of the allocations so far, with room to grow)
  // is made on a thread of the store's own, not registered, half as large
  // again (allocations grow until then) but with pages only for `size`
  // (populating the room to grow made the first snapshot wait for the
  // thread: what the snapshot uses of it its copying threads fault in, or
  // registering does); a later call with a larger size grows it, or, within
  // the room, pages what the allocations grew into (from a MiB or an eighth
  // more), once that thread is idle (a call never waits for it). The first
  // snapshot stops the pages still to be made (Options::first_populate_chunk)
  // and takes the file: cut (behind its copies, CutBehind) or grown to its
  // exact size, then registered (unless staged), so that its critical path
  // makes few or no pages (a 554 MiB first snapshot made its file in ~150 ms).
  // Does nothing once the first snapshot began; on a failure the first
  // snapshot makes its own file, as without.
  void PrepareFirstFile(size_t size);
  // The file made ahead of the first snapshot: whether the first snapshot
  // took it, and the time spent making and growing it (off the critical path).
  // Whether PrepareFirstFile would still make or grow the file: before the
  // first snapshot began, with spare_ahead (with or without keep_spare).
  bool wants_first_file() const { return !first_begun_ && options_.spare_ahead; }
  bool first_file_used() const { return first_file_used_; }
  // Waits for the thread making the file ahead of the first snapshot (the
  // first snapshot does; tests).
  void JoinFirstFile();
  double first_file_ms() const { return first_ms_; }
  // What taking it cost the first snapshot: waiting for the thread, cutting
  // or growing it from the size it had, registering it.
  struct FirstFileTake {
    double wait_ms = 0, resize_ms = 0, register_ms = 0;
    uint64_t made_bytes = 0;
    // The bytes from the file's start with their pages made ahead when the
    // snapshot took it, and the bytes of the snapshot (the rest faulted in).
    uint64_t resident_bytes = 0, snapshot_bytes = 0;
  };
  const FirstFileTake& first_file_take() const { return first_take_; }
  std::string FirstAheadPath() const;

  // Gives up the snapshots of minibatches before `minibatch`: the newest of
  // them becomes the spare (Options::keep_spare), the others are deleted.
  // The first call scans the directory (a dead agent's snapshots, leftover
  // temporary and spare files); later ones handle what this store wrote
  // (call it between writes).
  void DropBefore(uint64_t minibatch);

  // Opens and verifies (every CRC, the file size) the snapshot of
  // `minibatch`. kNotFound when there is none (the message lists the
  // snapshots that exist), kDataLoss when it is corrupt (never loaded).
  absl::StatusOr<std::unique_ptr<Snapshot>> Open(uint64_t minibatch) const;

  // The minibatches that have a (renamed) snapshot, ascending.
  std::vector<uint64_t> List() const;

  std::string PathOf(uint64_t minibatch) const;
  // The file a spare is made in ahead (renamed .spare-snap when taken).
  std::string AheadPath() const;
  // The spare's name (the next snapshot of its size is written into it).
  std::string SparePath() const;

 private:
  using File = SnapshotFile;
  absl::StatusOr<SnapshotWriteStats> WriteWith(uint64_t minibatch, uint64_t boundary_seq,
                                               const AllocationTable& table,
                                               const SnapshotCopier& copier,
                                               const SnapshotCrashHook& before_rename);
  absl::StatusOr<std::unique_ptr<Pending>> BeginWith(uint64_t minibatch, uint64_t boundary_seq,
                                                     const AllocationTable& table,
                                                     const SnapshotCopier& copier,
                                                     bool unregistered_ok);
  // A mapped file of `size` bytes at `path`: the spare when it has that
  // size (renamed), else a new one. Registered through the copier unless
  // `unregistered_ok` (then a file not registered yet stays so).
  absl::StatusOr<std::unique_ptr<File>> FileOfSize(size_t size, const std::string& path,
                                                   const SnapshotCopier& copier,
                                                   bool unregistered_ok, bool* reused);
  // Whether Write copies through the staging buffers when its file is not
  // registered (Options::staged, and a copier that registers and waits).
  bool CanStage(const SnapshotCopier& copier) const {
    return options_.staged && options_.staging_bytes > 0 && copier.copy && copier.wait &&
           copier.register_host;
  }
  // The staging buffers, two of `half` bytes at least: the ones made ahead
  // or new ones, registered through the copier.
  absl::Status PrepareStaging(size_t half, const SnapshotCopier& copier);
  // Unregisters and unmaps the staging buffers and those made ahead.
  void ReleaseStaging();
  // Copies `p`'s allocations into its file in turns of up to
  // Options::staging_bytes, filling p->crcs_: staged, through the staging
  // buffers (PrepareStaging first) into the unregistered file, the threads
  // copying and checksumming; else straight into the registered file, the
  // threads checksumming turn t while the device copies turn t+1.
  absl::Status CopyInTurns(Pending* p, const SnapshotCopier& copier, bool staged);
  // The allocations of `p` cut into turns of up to `half` bytes (small ones
  // share a turn), each turn into chunks of Options::staging_chunk_bytes
  // for the threads.
  struct TurnPlan {
    struct Chunk {
      size_t alloc;
      uint64_t offset, size;  // within the allocation
      size_t staged_at;       // within the turn's buffer
      uint32_t crc;
    };
    struct Turn {
      size_t first_chunk = 0, chunks = 0;
    };
    size_t half = 0;
    std::vector<Chunk> chunks;
    std::vector<Turn> turns;
    // Turn t's device copies: one per allocation's run of chunks in it
    // (contiguous on both sides), as (its first chunk, bytes).
    std::vector<std::pair<size_t, uint64_t>> Runs(size_t t) const {
      std::vector<std::pair<size_t, uint64_t>> runs;
      const size_t end = turns[t].first_chunk + turns[t].chunks;
      for (size_t c = turns[t].first_chunk; c < end;) {
        uint64_t n = 0;
        size_t run = c;
        for (; run < end && chunks[run].alloc == chunks[c].alloc; ++run) n += chunks[run].size;
        runs.emplace_back(c, n);
        c = run;
      }
      return runs;
    }
  };
  TurnPlan PlanTurns(const Pending& p) const;
  // How RunTurns has turn t's device copies queued (may be null: already
  // queued), waits for them, and tells that its buffer was drained (may be
  // null).
  struct TurnIo {
    std::function<absl::Status(size_t t)> queue;
    std::function<absl::Status(size_t t)> wait;
    std::function<void(size_t t)> drained;
  };
  // Drains `plan`'s turns into p's file (from the staging buffers when
  // `staged`, else checksumming the file in place) on up to crc_threads
  // threads, the device copying turn t + 1 meanwhile; fills p->crcs_.
  absl::Status RunTurns(Pending* p, TurnPlan& plan, bool staged, const TurnIo& io);
  // A new file of `size` bytes at `path`: sized, mapped, its pages made
  // resident (unless !populate) and registered through the copier. Touches
  // no member (the spare maker's thread calls it).
  absl::StatusOr<std::unique_ptr<File>> MakeFile(size_t size, const std::string& path,
                                                 const SnapshotCopier& copier,
                                                 bool populate = true);
  // A file made without its pages (File::populated false) gets them all
  // now: before anything but the staging threads writes into it.
  static absl::Status PopulateAll(File* f);
  // Starts making a spare of `size` bytes (.spare-snap-ahead) unless there
  // is a spare or one is being made (on the store's user's thread).
  void MakeSpareAhead(size_t size);
  // On ahead_thread_: makes a file of `size` at AheadPath() through
  // `copier` (MakeFile) into ahead_file_ or ahead_status_, timing ahead_ms_.
  void MakeAheadFile(size_t size, const SnapshotCopier& copier);
  // Notes the pace of `bytes` made resident in `took` (from kPaceMinBytes).
  void NotePace(size_t bytes, absl::Duration took);
  // The snapshot directory made, and a dead agent's leftover temporary and
  // spare files deleted (once, before this store's first file).
  absl::Status PrepareDir();
  // Cuts the mapped, unregistered file `f` to `size` bytes on a thread
  // (cut_thread_): f->size is `size` at once, the pages past it are
  // unmapped and freed behind. JoinCut waits for it.
  void CutBehind(File* f, size_t size);
  void JoinCut();
  // A file given up that no device copy can reach (not registered): its
  // name goes now, its pages on a thread of its own (delete_thread_; freeing
  // a few hundred MiB of tmpfs pages takes tens of ms, and DropBefore runs
  // on the executor at a journal boundary). Registered files are deleted
  // in place (unregistering holds the CUDA driver; the caller's thread).
  void DeleteBehind(std::unique_ptr<File> f);
  void JoinDelete();
  // Registers the whole mapping of `f` through the copier (nothing to do
  // without register_host).
  static absl::Status Register(File* f, const SnapshotCopier& copier);
  // Cuts or grows an unregistered mapped file to `size` bytes (its new
  // pages made resident, unless !populate: then File::populated is false).
  static absl::Status ResizeFile(File* f, size_t size, bool populate = true);

  void Unmap(File* f);
  void Delete(std::unique_ptr<File> f);

  const std::string dir_;
  const int rank_;
  const Options options_;
  SnapshotCopier copier_;
  bool dir_ready_ = false;
  bool scanned_ = false;
  std::vector<uint64_t> written_;  // renamed snapshots not yet dropped
  // The mapped files of `written_` (one may be unmapped after
  // ReleaseMappings: not here then), and the spare.
  std::vector<std::pair<uint64_t, std::unique_ptr<File>>> files_;
  std::unique_ptr<File> spare_;
  uint64_t files_mapped_ = 0;
  uint64_t files_made_lazily_ = 0;
  uint64_t staged_writes_ = 0;
  uint64_t staged_drains_ = 0;
  uint64_t staging_failures_ = 0;
  absl::Status staging_failure_;
  // The staging buffers (two of options_.staging_bytes, one mapping),
  // registered through the copier at the first staged write.
  char* staging_ = nullptr;
  size_t staging_size_ = 0;
  std::function<void(void* p)> staging_unregister_;
  // Staging made ahead with the first snapshot's file (its pages resident,
  // not registered): first_thread_'s while first_busy_ is set.
  char* staging_ahead_ = nullptr;
  size_t staging_ahead_size_ = 0;
  // Two staging buffers' bytes for a snapshot of `bytes` (at most
  // 2 x Options::staging_bytes).
  size_t StagingFor(uint64_t bytes) const;
  // The spare being made ahead: the thread writes ahead_file_ or
  // ahead_status_ and ahead_ms_; the store reads them after joining it.
  std::thread ahead_thread_;
  std::unique_ptr<File> ahead_file_;
  absl::Status ahead_status_;
  // Written by that thread too (Options::register_behind).
  uint64_t registered_behind_ = 0;
  double register_behind_ms_ = 0;
  absl::Status ahead_failed_status_;
  double ahead_ms_ = 0;
  uint64_t spares_made_ahead_ = 0;
  // The thread makes the next snapshot's file (MakeNextFileAhead), not a
  // spare; ahead_busy_ is set until it is done (the snapshot never joins a
  // busy one).
  bool ahead_next_ = false;
  std::atomic<bool> ahead_busy_{false};
  absl::Time ahead_started_;
  uint64_t next_files_ahead_ = 0;
  // ns per byte of the last file of at least kPaceMinBytes made with its
  // pages resident (written by the store's threads, NotePace; EstimatedMakeMs).
  std::atomic<double> make_ns_per_byte_{0};
  uint64_t next_files_late_ = 0;
  double next_lead_ms_ = 0;
  // The file made ahead of the first snapshot: first_file_ belongs to
  // first_thread_ while first_busy_ is set.
  std::thread first_thread_;
  std::thread cut_thread_;
  std::thread delete_thread_;
  bool cut_ok_ = true;  // cut_thread_'s truncate succeeded (read after JoinCut)
  std::atomic<bool> first_busy_{false};
  // Set by the first snapshot: first_thread_ stops before its next piece.
  std::atomic<bool> first_stop_{false};
  std::unique_ptr<File> first_file_;
  absl::Status first_status_;
  size_t first_target_ = 0;
  // The allocations' bytes the last PrepareFirstFile that started the
  // thread asked pages for (the caller's thread's).
  size_t first_asked_ = 0;
  // The bytes from the start of first_file_ whose pages first_thread_ made
  // resident (up to the allocations' size at its last call, less where the
  // first snapshot stopped it; never the room to grow).
  size_t first_resident_ = 0;
  bool first_begun_ = false;  // the first snapshot began: no more making ahead
  bool first_file_used_ = false;
  double first_ms_ = 0;
  FirstFileTake first_take_;
  uint64_t spares_ahead_failed_ = 0;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_SNAPSHOT_H_
