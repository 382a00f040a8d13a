// UploadCapture: large uploads journaled by the device instead of the CPU.
//
// A copy from pinned (shared) host memory to the device is journaled before
// it runs, and the journal must keep its source bytes: the application may
// reuse the buffer once the copy completed. Written by the CPU into the
// journal's payload file, a 256 MiB upload costs ~150-400 ms (tmpfs pages
// and CRC32C) against ~5 ms for the copy itself. Instead, the journal entry
// names a place in a capture file of the journal directory (a
// journal::DeviceCapture), and the backend copies the destination back into
// that place behind the upload, chunk by chunk on the other copy engine,
// then stores the request's seq into the 8 bytes before the place (the
// completion word). The application's later work on the stream waits for
// the capture, so the critical path grows by about one chunk.
//
// Why a replay can always use it: a reader takes the bytes only when the
// completion word holds the entry's seq. Otherwise the capture had not
// completed when the agent died; every way the application learns that the
// copy is done (a synchronization, an event, later work on the stream) goes
// through the stream that waits for the capture, so the application cannot
// have touched its source yet, and the replay copies from the source again.
//
// Capture files (capture-N, one registered mapping each, reused): a file is
// filled front to back during a minibatch; it is reused once nothing can
// replay its captures any more and every capture in it completed. Nothing
// replays a capture once the minibatch of its upload is two journal
// boundaries old, or, in a one-rank job with boundary snapshots, once a
// snapshot taken after it finished (Release): the replay then starts at
// that snapshot's request, and one-rank jobs take most of their snapshots
// inside the journal's minibatch, whose boundaries are rare. Only uploads
// journaled in the
// minibatch log are captured (a training step's data); the setup log's
// uploads keep their bytes in its payload file, which compaction manages.
// docs/journal_format.md, "Captured uploads".
//
//   auto pool = UploadCapturePool::Create(journal_dir, backend, options);
//   journal->BeforeExecute(rec, payload, pool.get());   // may Reserve
//   ... hook: pool->Pending(seq) -> backend->MemcpyCaptured(...)
#ifndef REVENANT_AGENT_UPLOAD_CAPTURE_H_
#define REVENANT_AGENT_UPLOAD_CAPTURE_H_

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/journaling.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "common/upload_hold.h"
#include "proto/journal.pb.h"

namespace revenant {
namespace agent {

// Uploads below this keep their bytes in the journal (a memcpy into the
// mapped log or one write(2) costs less than a second copy on the device).
inline constexpr uint64_t kCaptureMinBytes = 1 << 20;
static_assert(kCaptureMinBytes == kHoldMinBytes, "the shim protects what the agent may hold");

// Whether a request is an upload the device may capture: cudaMemcpy or
// cudaMemcpyAsync in place from host memory to the device (the host side is
// checked later: shared memory only), of at least `min_bytes`. `head`, if
// given, receives the copy's head.
bool IsCaptureCandidate(uint16_t api_id, absl::string_view body, uint64_t min_bytes,
                        hooks::CopyHead* head = nullptr);

class UploadCapturePool : public UploadCaptureSink {
 public:
  struct Options {
    uint64_t min_bytes = kCaptureMinBytes;
    // The capture files together stay under this (tmpfs memory); an upload
    // that does not fit is journaled by the CPU as before.
    uint64_t max_bytes = 4ull << 30;
    // Size of a capture file (larger for a larger upload).
    uint64_t file_bytes = 64 << 20;
  };

  // Held uploads (common/upload_hold.h): with a table, Reserve places
  // uploads in hold files (sparse, not registered with the device) and the
  // copy's hook holds them instead of capturing; a hold file is filled again
  // once the table freed its holds.
  void set_holds(HoldTable* holds, HoldPlaces* places) {
    holds_ = holds;
    places_ = places;
  }
  // The agent's copy out of the held uploads overlapping [lo, hi) (before
  // the device writes that host memory); the slots copied.
  int CopyOutHolds(uint64_t lo, uint64_t hi);
  // The same for the held uploads a kernel's parameters point into.
  int CopyOutHoldsNamedIn(const char* args, size_t n) {
    return holds_ != nullptr && places_ != nullptr ? holds_->CopyOutNamed(args, n, places_->Fn())
                                                   : 0;
  }

  // Capture files in `dir` (the journal directory). A fresh journal removes
  // the files a previous application left; a replacement continuing a dead
  // agent's journal (`continued`, at `minibatch`) keeps them: its current
  // minibatch's entries name them (reused after two more boundaries, or
  // once Release passed `first_seq`, a request after all of the dead
  // agent's).
  static absl::StatusOr<std::unique_ptr<UploadCapturePool>> Create(const std::string& dir,
                                                                   Backend* backend,
                                                                   const Options& options,
                                                                   bool continued,
                                                                   uint64_t minibatch,
                                                                   uint64_t first_seq = 0);
  ~UploadCapturePool() override;

  // UploadCaptureSink (called while journaling `rec`, before it runs).
  bool Reserve(const transport::RecordHeader& rec, uint64_t minibatch, uint64_t size,
               journal::DeviceCapture* ref) override;

  // The capture Reserve made for request `seq`, for the copy's hook; null
  // when there is none (the request is journaled with its bytes).
  struct Capture {
    uint64_t seq = 0;
    char* data = nullptr;     // null for a held upload
    uint64_t* done = nullptr;
    uint64_t size = 0;
    bool held = false;        // its place is in a hold file:
    uint32_t file_index = 0;  // hold-<file_index>, at
    uint64_t offset = 0;      // this offset
    // A held upload's hash words in the table (Backend::MemcpyHeld), or
    // null when every slot was taken (its bytes are in the place already).
    uint64_t* hash_words = nullptr;
    int slot = -1;  // its slot in the table (-1: none)
  };
  const Capture* Pending(uint64_t seq) const {
    return pending_.seq == seq && (pending_.data != nullptr || pending_.held) ? &pending_ : nullptr;
  }
  // The hook ran the copy: `captured` false when the backend captured
  // nothing (the copy failed, or became a graph node).
  void Ran(uint64_t seq, bool captured);
  // The hook ran a held upload's copy; `hashed`: the device hashes what it
  // received (a copy out then checks the source against it).
  void HeldRan(uint64_t seq, bool hashed);
  // A held upload's copy is about to become a graph node (its stream is
  // being captured): its hold becomes HoldTable::kNode, which a replay
  // copies from the source (what the node reads whenever the graph runs).
  void HeldIntoGraph(uint64_t seq);

  // Captures of requests before `before_seq` are never replayed again: a
  // boundary snapshot of the state before that request finished (renamed in
  // place of the journal's snapshot; a one-rank job's replay skips what
  // came before it). Their files are filled again once those captures
  // completed. Only a one-rank job with boundary snapshots may call it:
  // with peers, a replacement may replay the minibatch before the
  // survivors' (docs/recovery.md).
  // Held uploads before it end too (a copy out in progress is left to
  // finish; Reusable waits for it).
  void Release(uint64_t before_seq) {
    released_before_ = std::max(released_before_, before_seq);
    if (holds_ != nullptr) holds_->FreeBefore(before_seq, absl::ZeroDuration());
  }

  // Bytes of the capture files (they are never shrunk: the most the pool
  // held), the uploads captured, their bytes, the files made and the times
  // a file was filled again from its start.
  uint64_t bytes() const { return total_bytes_; }
  uint64_t holds() const { return holds_made_; }
  uint64_t held_bytes() const { return held_bytes_; }
  uint64_t holds_copied_at_once() const { return holds_copied_at_once_; }
  uint64_t holds_hashed() const { return holds_hashed_; }
  uint64_t holds_into_graphs() const { return holds_into_graphs_; }
  // Whether uploads are held (not captured) from now on: a table, and no
  // held source found changed behind the agent's back yet.
  bool holding_uploads();
  uint64_t captures() const { return captures_; }
  uint64_t captured_bytes() const { return captured_bytes_; }
  int files_made() const { return files_made_; }
  uint64_t reuses() const { return reuses_; }

 private:
  struct File {
    std::string name;
    int index = 0;
    bool hold = false;  // a hold file: sparse, not mapped by the pool
    char* base = nullptr;
    uint64_t size = 0;
    uint64_t cursor = 0;         // next free byte
    uint64_t last_minibatch = 0;  // of the last capture placed in it
    uint64_t last_seq = 0;        // the request of the last capture placed in it
    // Captures placed and not yet seen complete: (completion word, seq).
    std::vector<std::pair<const uint64_t*, uint64_t>> open;
  };
  UploadCapturePool(std::string dir, Backend* backend, Options options)
      : dir_(std::move(dir)), backend_(backend), options_(options) {}
  absl::Status MapFile(const std::string& name, uint64_t size, bool create, File* f);
  // Holds request `seq`'s upload of [src, src + size) with its place at
  // `offset` of hold-<file_index>: a slot in the table (*slot), or, with
  // every slot taken, its bytes copied into the place now (*slot -1). False
  // when neither could be done (the upload is journaled with its bytes).
  bool HoldNow(uint64_t seq, uint64_t src, uint64_t size, uint32_t file_index, uint64_t offset,
               int* slot);
  absl::Status MakeHoldFile(const std::string& name, uint64_t size, bool create, File* f);
  // A file (of the kind `hold` says) with room for `need` bytes for
  // `minibatch`, or null.
  File* FileFor(uint64_t need, uint64_t minibatch, bool hold);
  bool Reusable(File& f, uint64_t minibatch);

  const std::string dir_;
  Backend* const backend_;
  const Options options_;
  std::vector<std::unique_ptr<File>> files_;
  int next_index_ = 0;
  int files_made_ = 0;
  uint64_t total_bytes_ = 0;
  uint64_t captures_ = 0;
  uint64_t captured_bytes_ = 0;
  uint64_t reuses_ = 0;
  uint64_t released_before_ = 0;  // see Release
  Capture pending_;
  File* pending_file_ = nullptr;
  bool warned_full_ = false;
  HoldTable* holds_ = nullptr;
  HoldPlaces* places_ = nullptr;
  int next_hold_index_ = 0;
  uint64_t holds_made_ = 0;
  uint64_t held_bytes_ = 0;
  uint64_t holds_copied_at_once_ = 0;
  uint64_t holds_hashed_ = 0;
  uint64_t holds_into_graphs_ = 0;
  bool warned_hold_ = false;
  bool holds_off_ = false;  // a held source was found changed: capture from then on
};

// For a replay: each entry of `entries` with a DeviceCapture gets the
// captured bytes as its inline payload when their capture completed (the
// completion word holds the entry's request seq); otherwise it is left as
// it is and replays from the application's source. `wait` bounds how long a
// capture that has not completed yet is waited for (the validator reads the
// live agent's captures; a replacement reads a dead agent's: 0). A missing
// or short capture file is an error (the journal is damaged). A held
// upload (`holds`: the journal's table) whose place is not complete is
// waited for while its hold is kHeld or kCopying (the application's shim
// copies held uploads out when its agent dies, before it connects to the
// replacement); one whose copy was lost, or still held then, is refused
// (its source may have changed). Entries of
// requests before `from_seq` are left alone: the replay skips them (they
// precede the boundary snapshot it starts from) and their places may hold
// later captures (UploadCapturePool::Release).
absl::Status LoadCapturedUploads(const std::string& journal_dir,
                                 std::vector<journal::JournalEntry>* entries,
                                 absl::Duration wait = absl::ZeroDuration(),
                                 uint64_t from_seq = 0, const HoldTable* holds = nullptr);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_UPLOAD_CAPTURE_H_
