// RequestJournal: the agent's journaling policy on top of journal::Journal.
//
// Every request whose row is journaled (class STATE or REPLAY) is appended
// before it executes (log before apply); the request stays in the
// application's ring until then, so nothing the application issued is lost
// if the agent dies in between. After a synchronous request executed, an
// outcome entry records its status and OUT bytes: recovery compares a
// replayed call's result with what the application was told, and the keys
// only known after execution (an allocation's address, a created handle)
// ride on the outcome so compaction can drop freed state.
//
// Which log: STATE calls go to the setup log (compacted); REPLAY calls go to
// the minibatch log once the first minibatch boundary is known, before that
// to the setup log (the program's initialization). Host bytes written to a
// `__device__` variable (SymbolWriteRegion) go to the setup log too, kept per
// region as a sets_attribute row's calls are: a variable lives outside the
// device memory a boundary snapshot or a survivor restores, so what the host
// last wrote there before the current minibatch must stay replayable.
//
// Minibatch boundaries (MinibatchDetector) are found from the call stream
// or marked explicitly by revenantMarkStep(); docs/journal_format.md
// ("Minibatch boundaries") states the heuristic and its limits.
//
// Journal sequence numbers: request seq s is journaled as 2s, its outcome
// as 2s + 1 (the journal needs strictly increasing numbers).
//
//   auto j = RequestJournal::Open(dir, job, rank, RequestJournal::Options());
//   j->BeforeExecute(rec, payload);      // before executing rec
//   j->AfterExecute(rec, status, out);   // synchronous requests, after
#ifndef REVENANT_AGENT_JOURNALING_H_
#define REVENANT_AGENT_JOURNALING_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "api/traits.h"
#include "journal/journal.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace agent {

// For cudaMemcpyToSymbol(Async) with its host bytes in the request: a
// nonzero key of the region it writes (module, variable, offset, size).
// 0 for every other request (a device-to-variable copy replays with the
// minibatch that made it, as any device copy).
uint64_t SymbolWriteRegion(uint16_t api_id, absl::string_view body);

// Copies whose source bytes travel inside the request (pageable host memory,
// up to 1 MiB: PyTorch's `.cuda()` of an input batch) are journaled with
// their bytes as the entry's payload, by reference from the request, and
// their args without them: the bytes are copied once, into the log or the
// payload file, instead of into the entry, its encoding and then the log.
// The replay puts them back (ReplayCopyBody). Smaller copies keep their
// bytes in the args.
inline constexpr uint64_t kInlineCopyPayloadMin = 4096;

// For cudaMemcpy(Async) of mode kInlineSource with at least
// kInlineCopyPayloadMin bytes: sets *args to the request without its bytes
// (a null bytes field) and *bytes to them (inside `body`). False otherwise.
bool InlineCopyArgs(uint16_t api_id, absl::string_view body, std::string* args,
                    absl::string_view* bytes);

// The request a replay runs for a copy whose source bytes the journal holds
// as the entry's payload (`bytes`): an entry InlineCopyArgs made, or an
// upload from shared memory or the staging area (the application may have
// reused its buffer since): the request in mode kInlineSource with the bytes
// in place. False, leaving *body alone, for any other entry (a small copy
// with its bytes in the args, an entry without a payload).
bool ReplayCopyBody(uint16_t api_id, absl::string_view args, absl::string_view bytes,
                    std::string* body);

// Finds minibatch boundaries in a training loop's call stream.
//
// Heuristic: a training step uploads its input batch to the same device
// buffer every step. The first host-to-device copy whose (destination, size)
// repeats an earlier copy's is taken as the step's anchor; from then on a
// boundary is placed just before every copy with the anchor's signature.
// Initial weight uploads never repeat, so they stay in the setup phase.
// Limits: a loop that uploads nothing (data generated on the device), or
// that uploads to alternating buffers, is not detected: use
// revenantMarkStep() (or --minibatch=manual).
class MinibatchDetector {
 public:
  // True when a boundary belongs just before this request.
  bool OnRequest(uint16_t api_id, absl::string_view body);
  // Whether OnRequest would place a boundary before this request; changes
  // nothing.
  bool WouldMark(uint16_t api_id, absl::string_view body) const;
  bool anchored() const { return anchored_; }
  uint64_t anchor() const { return anchor_; }
  // Restores the anchor a predecessor found (a replacement agent).
  void SetAnchor(uint64_t anchor) {
    anchored_ = true;
    anchor_ = anchor;
  }

 private:
  bool anchored_ = false;
  uint64_t anchor_ = 0;
  absl::flat_hash_set<uint64_t> seen_;
};

// Where the bytes of a large upload go instead of the journal's payload
// file: memory the device writes behind the copy (agent/upload_capture.h).
class UploadCaptureSink {
 public:
  virtual ~UploadCaptureSink() = default;
  // Whether the device will capture the `size` source bytes of `rec`, which
  // is journaled in `minibatch`'s log; then `ref` names where, and the
  // journal entry holds only that reference.
  virtual bool Reserve(const transport::RecordHeader& rec, uint64_t minibatch, uint64_t size,
                       journal::DeviceCapture* ref) = 0;
};

class RequestJournal {
 public:
  enum class BoundaryMode { kAuto, kManual };
  struct Options {
    BoundaryMode boundaries = BoundaryMode::kAuto;
    journal::JournalOptions journal;
  };

  // Starts a fresh journal in `dir` (an earlier application's journal there
  // is removed).
  static absl::StatusOr<std::unique_ptr<RequestJournal>> Open(const std::string& dir,
                                                              const std::string& job, int rank,
                                                              const Options& options);

  // Continues the journal a dead agent left in `dir` (after the caller read
  // it back for replay): same minibatch count, same boundary anchor.
  static absl::StatusOr<std::unique_ptr<RequestJournal>> Continue(const std::string& dir,
                                                                  const std::string& job,
                                                                  int rank, const Options& options,
                                                                  uint64_t minibatch);
  // After Continue: which live handles' destroys are deferred to the end of
  // their minibatch and which are cuDNN variant packs, rebuilt from the
  // dead agent's entries (both logs merged in seq order, as read back for
  // the replay), as BeforeExecute and AfterExecute kept them: a destroy
  // after the recovery is then journaled as it would have been without one.
  // The destroys the dead agent deferred and whose keys it had not yet
  // destroyed are pending again (they take effect as they would have), and
  // so are the attribute calls it kept (later calls and destroys drop them).
  void RebuildHandles(const std::vector<journal::JournalEntry>& entries);

  // Journals `rec` if its row is journaled. `payload` holds bytes the
  // request reads from memory shared with the application (a pinned source
  // of a copy), captured now because the application may reuse the buffer
  // once the copy ran. With `capture`, a payload of a request journaled in
  // the minibatch log may instead be left to the device (the sink decides).
  absl::Status BeforeExecute(const transport::RecordHeader& rec, absl::string_view payload,
                             UploadCaptureSink* capture = nullptr);
  // Whether the outcome entry of `api_id` may be appended after the reply
  // is posted (the application then runs on while the executor journals):
  // true for the waits and the synchronous copy, whose outcome only serves
  // to compare a replay's result. An outcome that names state a replay must
  // put back (an allocation's address, a created handle) always precedes
  // the reply. An agent killed between the reply and the outcome leaves the
  // request journaled without outcome: a replay runs it and compares nothing.
  static bool OutcomeMayFollowReply(uint16_t api_id);
  // Records the outcome of a journaled synchronous request.
  absl::Status AfterExecute(const transport::RecordHeader& rec, int32_t status,
                            absl::string_view outputs);
  // An explicit minibatch boundary (revenantMarkStep).
  // `boundary_seq`: the first request after it (the marker names it for a
  // replacement; 0: not known).
  absl::Status MarkStep(uint64_t boundary_seq = 0);
  // A replacement's continued journal: its predecessor placed the current
  // minibatch's boundary before request `seq` (the marker's boundary_seq)
  // and may not have journaled that request: it is not a boundary again.
  void BoundaryPlacedBefore(uint64_t seq) { boundary_placed_for_ = seq; }
  // Places the boundary BoundaryBefore(rec) names now, ahead of `rec`'s own
  // entry (which BeforeExecute appends later, without detecting it again):
  // write-behind starts the minibatch in the journal exactly when the
  // executor starts it (the executor or, at its request, the journal thread
  // calls it), while the thread journals the request itself.
  absl::Status PlaceBoundaryBefore(const transport::RecordHeader& rec);
  // Whether BeforeExecute(rec) will place a minibatch boundary before `rec`
  // (the minibatch log still holds the ending minibatch until then).
  // The boundary the detector finds before request `seq` is not placed (a
  // step that stays inside the current minibatch: snapshots every K steps).
  void SkipBoundaryFor(uint64_t seq) { skip_boundary_for_ = seq; }
  bool BoundaryBefore(const transport::RecordHeader& rec) const {
    return options_.boundaries == BoundaryMode::kAuto && rec.seq != boundary_placed_for_ &&
           detector_.WouldMark(rec.api_id, absl::string_view(rec.body(), rec.body_size()));
  }

  // The boundary detector's state and mode (a copy lets another thread
  // follow the same request stream: the journal thread's executor).
  const MinibatchDetector& detector() const { return detector_; }
  BoundaryMode boundary_mode() const { return options_.boundaries; }

  // With REVENANT_JOURNAL_TIMING=1 in the agent's environment, the time the
  // executor spent in BeforeExecute, AfterExecute and MarkStep (steady
  // clock, ~40 ns per reading on a VM: included in the figure); else 0.
  // For benchmarks: the journal's share of a training step.
  bool timing() const { return timing_; }
  // The same time per API (and for outcome entries and marked steps), the
  // largest first, one line each; requests that started a minibatch apart.
  std::string TimingBreakdown() const;
  uint64_t busy_ns() const { return busy_ns_; }
  uint64_t calls() const { return calls_; }

  // Read by other threads than the journaling one (the executor, while the
  // journal thread journals a boundary).
  uint64_t minibatch() const { return minibatch_.load(std::memory_order_acquire); }
  journal::JournalStats stats() const { return journal_->stats(); }
  std::vector<journal::Journal::ApiBytes> SetupBytesByApi(size_t top) const {
    return journal_->SetupBytesByApi(top);
  }
  // The minibatch log's bytes a replay may still read: its records and the
  // payloads not released (journal::Journal::ReleasePayloadsBefore).
  uint64_t live_minibatch_bytes() const { return journal_->live_minibatch_bytes(); }
  uint64_t setup_file_bytes() const { return journal_->setup_file_bytes(); }
  uint64_t minibatch_log_bytes() const { return journal_->minibatch_log_bytes(); }
  size_t minibatch_first_chunk() const { return journal_->minibatch_first_chunk(); }
  // A one-rank job's finished snapshot at request `request_seq` (its replay
  // starts there): the payloads of the minibatch log's entries before it
  // are released. Any thread. Returns the bytes of pages freed.
  absl::StatusOr<uint64_t> ReleasePayloadsBefore(uint64_t request_seq) {
    return journal_->ReleasePayloadsBefore(request_seq * 2);
  }
  // The same snapshot, for the setup log: a replay of the current minibatch
  // now starts at request `request_seq`, so the calls it needed only while
  // it started at the minibatch's boundary go as at a boundary (the deferred
  // destroys before it take effect, an attribute's calls before it leave the
  // last one), once the next such call is journaled. Any thread; it only
  // grows. Without it a one-rank job's setup log kept every cuBLASLt
  // descriptor (and every stream or workspace setter) of every step until
  // the next journal boundary, and a replacement replayed them all.
  void ReplayStartsAt(uint64_t request_seq) {
    uint64_t cur = replay_start_.load(std::memory_order_relaxed);
    while (cur < request_seq &&
           !replay_start_.compare_exchange_weak(cur, request_seq, std::memory_order_release,
                                                std::memory_order_relaxed)) {
    }
  }
  uint64_t replay_start() const { return replay_start_.load(std::memory_order_acquire); }
  const std::string& dir() const { return journal_->dir(); }

 private:
  RequestJournal(std::unique_ptr<journal::Journal> journal, Options options);
  absl::Status Boundary(uint64_t boundary_seq);
  // Runs the detector on `rec`; Boundary() if it marks one.
  absl::Status DetectBoundary(const transport::RecordHeader& rec);
  // Keys an attribute setter's entry so that the setup log keeps only the
  // calls a replay needs, and drops the ones it no longer does.
  // RebuildHandles's part for the attribute calls whose keys live.
  void RebuildAttributeCalls(const std::vector<journal::JournalEntry>& entries,
                             const absl::flat_hash_set<uint64_t>& destroyed);
  void JournalAttributeCall(const transport::RecordHeader& rec, const api::ApiTraits& traits,
                            uint64_t handle, absl::string_view body, journal::JournalEntry* e);
  // The request PlaceBoundaryBefore placed a boundary for (0: none).
  uint64_t boundary_placed_for_ = 0;
  uint64_t skip_boundary_for_ = 0;

  std::unique_ptr<journal::Journal> journal_;
  const Options options_;
  MinibatchDetector detector_;
  std::atomic<uint64_t> minibatch_{0};  // 0: still in the setup phase
  // ReplayStartsAt's request (0: a replay starts at the minibatch's boundary).
  std::atomic<uint64_t> replay_start_{0};
  // The last journaled request went to the setup log (its outcome follows it).
  bool last_in_setup_ = true;
  bool last_journaled_ = false;
  // Reused for every record (see BeforeExecute).
  journal::JournalEntry entry_;
  // The args of a copy whose source bytes travel inside the request, without
  // those bytes (InlineCopyArgs), reused.
  std::string inline_copy_args_;
  // The attribute calls (sets_attribute rows) journaled since this journal
  // opened, per handle and row: the key of the last call of an earlier
  // minibatch and those of the calls in `minibatch` (JournalAttributeCall).
  struct AttributeCalls {
    uint64_t minibatch = 0;
    uint64_t anchor = 0;
    std::vector<uint64_t> current;
    std::vector<uint64_t> current_seqs;  // the request seq of each of `current`
    std::vector<uint64_t> setup;  // the calls of minibatch 0
  };
  absl::flat_hash_map<uint64_t, AttributeCalls> attribute_calls_;
  // The key JournalAttributeCall gave the last journaled request (0: none),
  // for its outcome.
  uint64_t attribute_call_key_ = 0;
  // Handles this journal saw created whose destroys it defers
  // (DefersDestroy in journaling.cc), and the deferred destroys' keys by the
  // minibatch of the destroy; the deferred destroy journaled last (0: none),
  // for its outcome.
  absl::flat_hash_set<uint64_t> deferrable_;
  // Live cuDNN variant packs: unlike other backend descriptors (kept whole,
  // KeepsEveryCall), no descriptor refers to one, so its creation, attribute
  // calls and finalization are keyed by its handle and dropped with its
  // deferred destroy (PyTorch makes one at every convolution: kept whole
  // they would grow the setup log, and a replacement's replay, without
  // bound).
  absl::flat_hash_set<uint64_t> dnn_packs_;
  // A creation of `key` by a request of `id` with `args` (the shim's id in
  // the request, or the agent's in the outcome): keyed in `e` (when given)
  // where its destroy drops its calls, and tracked in deferrable_ and
  // dnn_packs_ as its kind asks. Nothing for key 0.
  void TrackCreated(api::ApiId id, const api::ApiTraits& traits, absl::string_view args,
                    uint64_t key, journal::JournalEntry* e);
  struct PendingDestroy {
    uint64_t minibatch = 0;
    uint64_t seq = 0;  // the destroy's request
    std::vector<uint64_t> keys;
  };
  // In journaling order, so by minibatch (which only grows): the destroys
  // that take effect are always a prefix, taken from the front (a one-rank
  // job with boundary snapshots stays in one minibatch for many steps, and
  // PyTorch destroys five descriptors per matmul).
  std::deque<PendingDestroy> pending_destroys_;
  uint64_t deferred_handle_ = 0;
  // The keys of attribute_calls_ per handle, dropped with the handle.
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> handle_attributes_;
  // See busy_ns().
  class Timed;
  static constexpr uint32_t kOutcomeKey = 0x10000, kMarkStepKey = 0x10001;
  // Part of a boundary's time: the boundaries that started a new segment.
  static constexpr uint32_t kNewSegmentKey = 0x10002;
  struct Breakdown {
    uint64_t ns = 0, calls = 0, boundary_ns = 0, boundaries = 0;
  };
  absl::flat_hash_map<uint32_t, Breakdown> breakdown_;
  bool boundary_in_call_ = false;
  const bool timing_;
  uint64_t busy_ns_ = 0;
  uint64_t calls_ = 0;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_JOURNALING_H_
