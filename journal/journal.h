// The journal of one agent rank: every forwarded call is appended before the
// agent executes it (log before apply), so that a replacement agent can replay
// the calls and rebuild the device state. Format: docs/journal_format.md.
//
// Writing (the agent):
//
//   absl::StatusOr<std::unique_ptr<Journal>> journal =
//       Journal::Open("/dev/shm/revenant-job7/rank0/journal", "job7", 0, {});
//   JournalEntry e;
//   e.set_seq(next_seq++);            // the caller numbers calls
//   e.set_api_id(kCudaMalloc);
//   e.add_creates(device_address);
//   absl::Status s = (*journal)->AppendSetup(std::move(e));
//   ...
//   (*journal)->MarkBoundary(minibatch);  // empties the minibatch log
//
// Reading back (the replacement agent, revenant-journal):
//
//   absl::StatusOr<std::unique_ptr<JournalReader>> r = JournalReader::Open(dir);
//   absl::Status s = (*r)->ReadSetup([&](const JournalEntry& e) { return Replay(e); });
//
// Two logs: the SETUP log holds state-building calls and is compacted (an
// allocation that was freed, a handle that was destroyed, a buffer upload
// that was overwritten drop out), the MINIBATCH log holds the calls since the
// last minibatch boundary. Their sizes therefore follow the live state, not
// the number of training iterations.
//
// Log files are written through a shared mapping of tmpfs pages, payload
// files with write(2): both survive the agent's death; machine crashes are
// out of scope (see the format document).
#ifndef REVENANT_JOURNAL_JOURNAL_H_
#define REVENANT_JOURNAL_JOURNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "journal/file.h"
#include "proto/journal.pb.h"

namespace revenant {
namespace journal {

// 2: log files may be written through a mapping (a zero-filled tail after an
// uncommitted record); 3: minibatch segments may hold release markers;
// readers accept every version from kMinFormatVersion.
inline constexpr uint32_t kFormatVersion = 3;
inline constexpr uint32_t kMinFormatVersion = 1;

// api_id of an outcome entry (see JournalEntry.completes); no API has id 0.
inline constexpr uint32_t kOutcomeApiId = 0;
// api_id of a boundary marker in a minibatch segment (docs/journal_format.md,
// "Boundary markers"); never delivered to readers' callbacks.
inline constexpr uint32_t kBoundaryApiId = 0xFFFFFFFFu;
// api_id of a release marker in a minibatch segment (docs/journal_format.md,
// "Released payloads"); never delivered to readers' callbacks.
inline constexpr uint32_t kReleaseApiId = 0xFFFFFFFEu;

// A request entry's flags: the record's own flags in the low 16 bits, the
// reply slot it named plus one (0: none) in the high 16 bits.
inline uint32_t RequestFlags(uint32_t record_flags, int reply_slot) {
  return (record_flags & 0xffffu) | (static_cast<uint32_t>(reply_slot + 1) << 16);
}
// The reply slot a journaled request named (-1: none), from its flags.
inline int ReplySlotOf(const JournalEntry& entry) {
  return static_cast<int>(entry.flags() >> 16) - 1;
}
// The outcome entry of the request entries[i] when it directly follows it
// (a synchronous request's), else nullptr.
inline const JournalEntry* OutcomeOf(const std::vector<JournalEntry>& entries, size_t i) {
  if (i + 1 < entries.size() && entries[i + 1].api_id() == kOutcomeApiId &&
      entries[i + 1].completes() == entries[i].seq()) {
    return &entries[i + 1];
  }
  return nullptr;
}

enum class SyncPolicy {
  // Rely on write(2) into tmpfs: survives the agent process, not the machine.
  kNone,
  // fdatasync the payload and log files after every record (journals on disk).
  kEveryRecord,
};

struct JournalOptions {
  // Payloads longer than this are stored out of line in the payload file.
  size_t inline_payload_threshold = 4096;
  // The threshold for a log written through a mapping (mapped_logs), where
  // an inline payload costs a memcpy, not a system call: a training step's
  // input batch then needs no write(2) to a payload file, and (a payload
  // file ends the boundary markers) no new minibatch segment per step.
  // 256 KiB: at most half the minibatch segment's first chunk (a larger
  // record would grow the mapping, a new mmap per step). On the H200 a 256 KiB input per
  // step out of line (open, write(2), unlink, new segment) cost the step
  // ~100 us (docs/performance.md).
  size_t mapped_inline_payload_threshold = 256 << 10;
  SyncPolicy sync = SyncPolicy::kNone;
  // The setup log is compacted when its dead bytes (since the last
  // compaction) exceed its live records' bytes (what a compaction rewrites:
  // the payload file is kept) and also this many bytes (so that small
  // journals are not rewritten over and over).
  uint64_t compaction_min_dead_bytes = 1 << 20;
  bool compaction_enabled = true;
  // A compaction keeps the payload file (a hard link under the new
  // segment's name); false: it copies the live payloads into a fresh file,
  // as it does where the file system refuses the link (tests).
  bool compaction_links_payloads = true;
  // Write log files through a shared mapping (no system call per record;
  // docs/journal_format.md, "Mapped log files"). With SyncPolicy::kEveryRecord
  // logs are written with write(2) regardless.
  bool mapped_logs = true;
  // The first chunk of a mapped minibatch log (a multiple of the 32 KiB
  // block, at most 64 MiB). The boundary markers of the training steps it
  // holds cost no system call; when it is full, the next boundary starts a
  // new segment (renames, a header, the old log handed to the zeroing
  // thread), on the thread that journals the boundary. 16 MiB: ~1800 steps
  // of train_mlp (~9 KiB each with its input batch) per segment, and a
  // one-rank job's journal minibatch between two synchronous snapshots
  // (eight asynchronous ones apart, ~400 such steps) stays in the first
  // chunk: with 4 MiB it outgrew it, so each of those boundaries grew the
  // log (a chunk allocated, mapped and populated on the executor) and
  // started a segment that could not be reused, 0.85-2.3 ms each on the
  // H200, and the default-snapshot step was 1.39 of native against 1.22
  // with 16 MiB (docs/performance.md). The segment and its zeroed spare
  // take this much tmpfs memory each per rank.
  // REVENANT_JOURNAL_MINIBATCH_CHUNK_KIB sets it in the agent.
  size_t minibatch_first_chunk = 16 << 20;
  // Bounds on what the logs and payload files hold (setup log and payloads,
  // the live minibatch segment), 0: none. A job whose calls never reach a
  // minibatch boundary keeps every call in the setup log, so its journal
  // (in memory, on tmpfs) grows with every call.
  //   warn_bytes: the first append past it logs a warning naming the size
  //     and the missing boundaries; again at each doubling.
  //   max_bytes: an append that would go past it fails with
  //     kResourceExhausted, as on a full file system (ENOSPC), and writes
  //     nothing; the error is sticky like any IO error.
  // REVENANT_JOURNAL_WARN_KIB / REVENANT_JOURNAL_MAX_KIB set them in the agent.
  uint64_t warn_bytes = 0;
  uint64_t max_bytes = 0;
  // A minibatch segment's payload file gets its pages ahead of the writes:
  // whenever the payload bytes come within half of this of the pages made so
  // far, a helper thread allocates the next `payload_ahead_bytes` of the file
  // (fallocate with FALLOC_FL_KEEP_SIZE), so that the appending thread's
  // write(2) copies into pages that exist (on tmpfs about half the cost of a
  // write that allocates them: a training step's 1 MiB input batch, journaled
  // between a one-rank job's snapshots, goes into a payload file that grows
  // by that much each step). At most this much tmpfs memory past a payload
  // file's end. 0: off. REVENANT_JOURNAL_PAYLOAD_AHEAD_MIB sets it in the
  // agent.
  uint64_t payload_ahead_bytes = uint64_t{16} << 20;
  // Tests: called by the helper thread before it frees released payload
  // pages (to hold it back).
  std::function<void()> before_punch;
};

struct JournalStats {
  uint64_t setup_file_bytes = 0;      // setup log + payload file sizes
  uint64_t setup_live_bytes = 0;      // of which records/payloads still live
  uint64_t setup_live_entries = 0;
  // Minibatch log + payload bytes of the current minibatch (the segment's
  // header and the entries since its last boundary marker).
  uint64_t minibatch_file_bytes = 0;
  // The whole live minibatch segment: also the finished minibatches before
  // its last marker (at most a first chunk of them, docs/journal_format.md).
  uint64_t minibatch_segment_bytes = 0;
  uint64_t minibatch_entries = 0;
  // Of minibatch_file_bytes: payload bytes released (ReleasePayloadsBefore)
  // in the current segment, and the release markers written since Open.
  uint64_t minibatch_released_bytes = 0;
  uint64_t release_markers = 0;
  // Payload file bytes the helper thread freed after release markers, since
  // Open.
  uint64_t payload_bytes_freed = 0;
  uint64_t compactions = 0;
  uint64_t last_seq = 0;
  // Minibatch segments whose payload file was the previous one's, written
  // over (SparePayload).
  uint64_t payload_files_reused = 0;
  // Payload file bytes the helper thread allocated ahead of the writes
  // (JournalOptions::payload_ahead_bytes), since Open.
  uint64_t payload_bytes_ahead = 0;
};

namespace journal_internal {
class SegmentWriter;
// A superseded minibatch segment's payload file, kept for the next
// segment's payloads: on tmpfs its pages stay allocated, so writing the
// next minibatch's input batches into it costs copies, not page
// allocations (and no unlink freeing them). `path` names it while
// `present`; a name readers ignore (*.tmp, removed by the next Open).
struct SparePayload {
  std::string path;
  bool present = false;
  uint64_t reused = 0;  // times a segment took it
};
// The largest payload file kept as the spare (tmpfs memory a rank holds
// beyond its live journal).
inline constexpr uint64_t kMaxSparePayload = uint64_t{256} << 20;
}  // namespace journal_internal

// One per agent rank. Thread-safe (calls are serialized internally).
class Journal {
 public:
  // Opens the journal in `dir` (created if absent). If `dir` already holds a
  // journal -- a replacement agent continuing where the dead one stopped --
  // its entries are verified and carried over into fresh segments (a torn
  // tail is dropped); corruption gives kDataLoss, another job's or rank's
  // journal kFailedPrecondition.
  static absl::StatusOr<std::unique_ptr<Journal>> Open(const std::string& dir,
                                                       const std::string& job, uint32_t rank,
                                                       const JournalOptions& options);

  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends `entry` to the setup / minibatch log; returns once it is written.
  // The caller sets entry.seq, which must be larger than every seq appended
  // before to either log (else kInvalidArgument, nothing written). The
  // journal sets prev_seq and may move an inline payload out of line; the
  // caller must not set payload_ref. Cost: one write(2) per file touched; an
  // AppendSetup can also trigger a compaction (rewrites the live entries).
  // After an IO error every later call fails with that error (sticky).
  //
  // `payload`, if not empty, is the entry's payload given by reference
  // (entry.inline_payload must then be empty, else kInvalidArgument): up to
  // the inline threshold it is copied into the entry; above it, it is written
  // to the payload file straight from `payload` (one write(2), CRC32C
  // computed once over the same bytes) and never copied in memory. The bytes
  // must not change during the call; reading the entry back yields them as
  // inline_payload either way.
  absl::Status AppendSetup(JournalEntry entry, absl::string_view payload = {});
  absl::Status AppendMinibatch(JournalEntry entry, absl::string_view payload = {});
  // The same, appending *entry in place: the journal sets its prev_seq and
  // may move its payload; the caller can Clear() and reuse it for the next
  // record (no allocation per record once its fields have grown).
  absl::Status AppendSetup(JournalEntry* entry, absl::string_view payload = {});
  absl::Status AppendMinibatch(JournalEntry* entry, absl::string_view payload = {});

  // Clears the minibatch log: the calls before the boundary of `minibatch`
  // will not be replayed. Appends a boundary marker to the minibatch segment
  // while it is small (a mapped log in its first chunk, no payload file: no
  // system call), else starts a fresh minibatch segment and retires the old
  // one.
  // `boundary_seq`: the first request after the boundary (every request
  // before it is journaled), recorded in the marker for a replacement; 0:
  // not known.
  absl::Status MarkBoundary(uint64_t minibatch, uint64_t boundary_seq = 0);

  // Releases the out-of-line payloads of the current minibatch segment's
  // entries with seq below `seq` (appended so far): a release marker goes
  // into the minibatch log first, then their whole pages of the payload file
  // are freed (FALLOC_FL_PUNCH_HOLE) on the journal's helper thread. For a
  // one-rank job whose replay starts at a finished snapshot at `seq` or
  // later: those payloads are never read again. Returns the bytes of pages
  // handed to be freed (0: nothing new to release).
  absl::StatusOr<uint64_t> ReleasePayloadsBefore(uint64_t seq);

  // Compacts the setup log now, regardless of the thresholds.
  absl::Status Compact();

  // New minibatch segments started at boundaries (a marker did not fit).
  uint64_t minibatch_segments_started() const {
    return minibatch_segments_started_.load(std::memory_order_relaxed);
  }
  JournalStats stats() const;
  // The setup log's records appended since Open, by API id (the entry's
  // api_id; outcomes under kOutcomeApiId): {api_id, records, bytes with
  // their payloads}, most bytes first, at most `top` of them.
  struct ApiBytes {
    uint32_t api_id = 0;
    uint64_t records = 0;
    uint64_t bytes = 0;
  };
  std::vector<ApiBytes> SetupBytesByApi(size_t top) const;
  // stats().minibatch_file_bytes less minibatch_released_bytes, without the
  // journal's lock (as of the last append, boundary or release).
  uint64_t live_minibatch_bytes() const { return live_minibatch_.load(std::memory_order_relaxed); }
  // The live minibatch segment's log file length (records and markers, not
  // payload files), without the journal's lock (as of the last append or
  // boundary), and the first chunk a mapped minibatch log is made with (0:
  // logs are not mapped). A segment whose log stays inside its first chunk is
  // reused after the next boundary; one that grew past it grew a chunk at a
  // time on the writer's thread, into memory no cache holds, and is removed.
  uint64_t minibatch_log_bytes() const { return minibatch_log_.load(std::memory_order_relaxed); }
  size_t minibatch_first_chunk() const {
    return options_.mapped_logs && options_.sync == SyncPolicy::kNone
               ? options_.minibatch_first_chunk
               : 0;
  }
  // stats().setup_file_bytes without the journal's lock (as of the last
  // setup append, compaction or boundary): its dead bytes too, until a
  // compaction drops them.
  uint64_t setup_file_bytes() const { return setup_file_bytes_.load(std::memory_order_relaxed); }
  const std::string& dir() const { return dir_; }

 private:
  struct EntryState {
    uint64_t bytes = 0;  // record + out-of-line payload bytes
    int refs = 0;        // live key references (see docs/journal_format.md)
    bool permanent = false;
    uint64_t payload = 0;  // of `bytes`: the out-of-line payload's
  };
  struct KeyState {
    std::vector<uint64_t> holders;  // entries that create or touch the key
    uint64_t overwriter = 0;        // latest entry that overwrote it, 0 if none
  };

  Journal(std::string dir, std::string job, uint32_t rank, const JournalOptions& options);

  absl::Status Init() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AppendLocked(LogKind kind, JournalEntry* entry, absl::string_view payload,
                            bool check_seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Keeps the liveness of setup entries; `bytes` is what the entry occupies.
  void TrackSetupEntry(const JournalEntry& entry, uint64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Unref(uint64_t seq) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status MaybeCompact() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CompactLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::unique_ptr<journal_internal::SegmentWriter>> NewSegment(
      LogKind kind, bool tmp, uint64_t minibatch, std::unique_ptr<MappedLogFile> spare = nullptr)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string dir_;
  const std::string job_;
  const uint32_t rank_;
  const JournalOptions options_;

  mutable absl::Mutex mu_;
  absl::Status status_ ABSL_GUARDED_BY(mu_);  // sticky
  uint64_t next_segment_number_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t last_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t current_minibatch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t minibatch_entries_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t compactions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t boundaries_ ABSL_GUARDED_BY(mu_) = 0;       // MarkBoundary calls since Open
  uint64_t next_warn_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // options_.warn_bytes, doubling
  std::atomic<uint64_t> minibatch_segments_started_{0};
  uint64_t release_markers_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<uint64_t> live_minibatch_{0};
  std::atomic<uint64_t> minibatch_log_{0};
  std::atomic<uint64_t> setup_file_bytes_{0};
  void UpdateLiveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::unique_ptr<journal_internal::SegmentWriter> setup_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<journal_internal::SegmentWriter> minibatch_ ABSL_GUARDED_BY(mu_);
  journal_internal::SparePayload spare_payload_ ABSL_GUARDED_BY(mu_);
  // The previous minibatch log, for the next new minibatch segment (mapped
  // logs): zeroed by spare_thread_, so that a new segment costs no memset on
  // the appending thread.
  void ZeroSpareLater(std::unique_ptr<MappedLogFile> log, uint64_t dirty);
  // At Open (mapped logs): spare_thread_ creates a first spare (a fresh file,
  // its first chunk allocated and mapped), so that the first new minibatch
  // segment does not create, grow and map a file on the appending thread
  // (~1 ms for a 2 MiB chunk).
  void CreateSpareLater();
  bool SpareIdle() ABSL_EXCLUSIVE_LOCKS_REQUIRED(spare_mu_) {
    return spare_dirty_ == 0 && !spare_create_;
  }
  // spare_thread_ allocates [offset, offset + length) of the file open as
  // `fd` (a duplicate, closed once done; the segment may be closed, renamed
  // or removed meanwhile), without changing its size.
  void AllocateAheadLater(int fd, uint64_t offset, uint64_t length);
  struct AheadRequest {
    int fd;
    uint64_t offset, length;
    enum Kind {
      kAllocate,
      kPunch,  // free released pages (FALLOC_FL_PUNCH_HOLE)
      kClose,  // only close fd (a removed file's: its pages are freed)
    } kind;
  };
  // spare_thread_ frees [offset, offset + length) of the file open as `fd`
  // (released payloads); Punching() tells whether such a request is queued
  // or running (the file must not be written over again until it is done).
  void PunchLater(int fd, uint64_t offset, uint64_t length);
  bool Punching();
  // spare_thread_ closes `fd`, after the requests queued before it.
  void CloseLater(int fd);
  int punches_pending_ ABSL_GUARDED_BY(spare_mu_) = 0;
  std::atomic<uint64_t> payload_bytes_punched_{0};
  // The zeroed spare (waiting for the zeroing if it is still running), or
  // null if there is none.
  std::unique_ptr<MappedLogFile> TakeZeroedSpare();
  void SpareLoop();
  absl::Mutex spare_mu_;
  std::unique_ptr<MappedLogFile> spare_log_ ABSL_GUARDED_BY(spare_mu_);
  uint64_t spare_dirty_ ABSL_GUARDED_BY(spare_mu_) = 0;  // bytes still to zero
  bool spare_create_ ABSL_GUARDED_BY(spare_mu_) = false;  // CreateSpareLater pending
  bool spare_stop_ ABSL_GUARDED_BY(spare_mu_) = false;
  std::vector<AheadRequest> ahead_ ABSL_GUARDED_BY(spare_mu_);
  std::atomic<uint64_t> payload_bytes_ahead_{0};
  std::thread spare_thread_;
  // Live setup entries by seq; dead ones are erased.
  absl::flat_hash_map<uint64_t, EntryState> entries_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, KeyState> keys_ ABSL_GUARDED_BY(mu_);
  uint64_t live_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // live entries + segment header
  // SetupBytesByApi: {records, bytes} appended to the setup log by API id.
  absl::flat_hash_map<uint32_t, std::pair<uint64_t, uint64_t>> setup_by_api_ ABSL_GUARDED_BY(mu_);
  // Of live_bytes_: the live entries' out-of-line payloads.
  uint64_t live_payload_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  // The setup log's dead bytes right after the last compaction (parts of
  // payload pages it could not free): MaybeCompact counts those after.
  uint64_t dead_after_compaction_ ABSL_GUARDED_BY(mu_) = 0;
  // A compaction found the file system refusing hard links (said once;
  // later compactions copy the payloads and are triggered as such).
  bool link_refused_ ABSL_GUARDED_BY(mu_) = false;
};

// Reads a journal directory back, verifying everything it reads.
class JournalReader {
 public:
  struct Options {
    // Load out-of-line payloads into inline_payload (checking their CRC32C).
    // With false, entries keep their payload_ref and payloads are not read.
    bool load_payloads = true;
  };
  // Returns kNotFound if `dir` holds no journal. Reads nothing yet.
  static absl::StatusOr<std::unique_ptr<JournalReader>> Open(const std::string& dir,
                                                             Options options);
  static absl::StatusOr<std::unique_ptr<JournalReader>> Open(const std::string& dir) {
    return Open(dir, Options());
  }

  // Called per entry in seq order; a non-OK return stops the read and is
  // returned.
  using EntryCallback = std::function<absl::Status(const JournalEntry&)>;

  // Read the setup / minibatch log. Any corruption (checksum, bad framing,
  // sequence gap, payload missing, truncated or with a bad CRC) returns
  // kDataLoss naming the file, offset and problem, after the entries before
  // it were delivered. A torn tail is a clean end. A missing minibatch log
  // reads as empty.
  absl::Status ReadSetup(const EntryCallback& callback);
  absl::Status ReadMinibatch(const EntryCallback& callback);

  // The header of the segment last read by ReadSetup / ReadMinibatch (empty
  // if that segment had none, e.g. a segment torn during creation).
  const SegmentHeader& setup_header() const { return setup_header_; }
  const SegmentHeader& minibatch_header() const { return minibatch_header_; }

  // Paths of the live segment files ("" when absent).
  const std::string& setup_log_path() const { return setup_log_; }
  const std::string& setup_payload_path() const { return setup_payload_; }
  const std::string& minibatch_log_path() const { return minibatch_log_; }
  const std::string& minibatch_payload_path() const { return minibatch_payload_; }

 private:
  JournalReader(Options options) : options_(options) {}

  const Options options_;
  std::string setup_log_, setup_payload_, minibatch_log_, minibatch_payload_;
  SegmentHeader setup_header_;
  SegmentHeader minibatch_header_;
};

namespace journal_internal {

// The live segments found in a journal directory.
struct DirListing {
  uint64_t setup = 0;      // highest setup segment number, 0 if none
  uint64_t minibatch = 0;  // highest minibatch segment number, 0 if none
  uint64_t max_number = 0;
  std::vector<std::string> stale;  // names of superseded or unfinished files
};
absl::StatusOr<DirListing> ListJournalDir(const std::string& dir);

std::string SegmentLogName(LogKind kind, uint64_t number);
std::string SegmentPayloadName(LogKind kind, uint64_t number);

// Appends the protobuf wire encoding of `entry` to *out: the bytes
// entry.SerializeAsString() gives (fields in number order, proto3 defaults
// omitted, repeated keys packed), built by hand because it runs once per
// journaled request. journal_test checks the two agree.
void EncodeEntry(const JournalEntry& entry, std::string* out);

// Reads one segment; see JournalReader::ReadSetup.
absl::Status ReadSegment(const std::string& log_path, const std::string& payload_path,
                         LogKind kind, bool load_payloads, SegmentHeader* header,
                         const std::function<absl::Status(JournalEntry&)>& callback);

}  // namespace journal_internal
}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_JOURNAL_H_
