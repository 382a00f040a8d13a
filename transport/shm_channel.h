// A shared-memory channel between one application process (the client, in
// the shim) and one agent process (the server).
//
// The client creates the backing file (O_EXCL, mode 0600) and owns it, so the
// channel and every unreleased request outlive an agent that dies: a
// replacement agent attaches to the same file, rewinds to the released tail
// and sees exactly the requests its predecessor had not journaled.
//
//   // Client (shim):
//   auto client = ShmClientChannel::Create(path, ChannelOptions());
//   absl::StatusOr<int> slot = (*client)->AcquireReplySlot(deadline);
//   auto w = (*client)->BeginRecord(sizeof(args), deadline);
//   memcpy(w->body(), &args, sizeof(args));
//   w->header().api_id = kApiFoo;
//   w->header().reply_slot = *slot;
//   uint64_t seq = (*client)->Commit(std::move(*w));
//   absl::StatusOr<ReplyView> r = (*client)->WaitReply(*slot, seq, deadline);
//   (*client)->ReleaseReplySlot(*slot);
//
//   // Server (agent reader thread):
//   auto server = ShmServerChannel::Attach(path);
//   absl::StatusOr<const RecordHeader*> rec = (*server)->Peek(deadline);
//   ... journal + execute, write (*server)->ReplyBuffer(slot) ...
//   (*server)->PostReply(slot, (*rec)->seq, status, len);
//   (*server)->Advance();
//   (*server)->Release(journaled_seq);
//
// File layout (all offsets from the start of the mapping; every region
// starts on a 4096-byte boundary):
//
//   [0, 4096)            ChannelHeader: magic "RVNTCHAN", layout version,
//                        every size and offset below, pids, server epoch,
//                        shutdown flag, callback-completion counter.
//   request ring ctrl    RingControl (head, released tail, last seq, futex
//                        words), one 4096-byte page.
//   request ring data    ring_capacity bytes (power of two).
//   callback ring ctrl   RingControl, one page.
//   callback ring data   callback_ring_capacity bytes (power of two).
//   reply slot headers   reply_slots x ReplySlotHeader (64 bytes each).
//   reply slot data      reply_slots x reply_data_size bytes.
//   staging              staging_size bytes.
//
// Ring format. Positions are monotonically increasing 64-bit byte counters;
// the byte offset is position & (capacity - 1). A record is a RecordHeader
// followed by its body; RecordHeader::size is the exact total (so the body
// length needs no separate field) and the record occupies that size rounded
// up to 8 bytes (stride()), keeping every header 8-byte aligned. Records never
// wrap: when a record does not fit before the end of the ring, the producer
// first writes a padding record (api_id == kPaddingApiId, seq 0) covering
// the rest of the ring; when fewer than sizeof(RecordHeader) bytes remain,
// those bytes are skipped implicitly by both sides. Nothing is ever dropped:
// a producer blocks (up to its deadline) until the consumer releases space.
//
// Waiting: a waiter spins by the clock for up to 200 us (50 us below 8 CPUs;
// REVENANT_SPIN_US), yielding every 10 us, then sleeps on a futex word in the shared mapping
// (process-shared, no FUTEX_PRIVATE_FLAG) in slices of at most 50 ms. An
// eventcount (a "waiting" flag plus a futex sequence word) lets the other
// side skip FUTEX_WAKE unless someone declared it sleeps. MarkPeerDead()
// makes every blocked call of this process return kUnavailable promptly.
//
// Thread safety: ShmClientChannel is thread-safe (producers are serialized by
// a process-local mutex). The server side expects a single reader thread for
// Peek/Advance/Release/SkipThrough and a single callback producer; PostReply
// may be called from any thread for distinct slots.
#ifndef REVENANT_TRANSPORT_SHM_CHANNEL_H_
#define REVENANT_TRANSPORT_SHM_CHANNEL_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace revenant {
namespace transport {

// The fixed header of every ring record. Standard layout, 24 bytes.
struct RecordHeader {
  uint32_t size;      // Total bytes incl. this header (exact, unpadded).
  uint16_t api_id;    // kPaddingApiId marks a padding record.
  uint16_t flags;     // Free for the caller.
  uint64_t seq;       // Assigned at Commit: 1, 2, 3, ... per ring. 0 = padding.
  int32_t reply_slot; // -1 = no reply expected.
  uint32_t body_crc_or_reserved;  // Reserved, 0.

  const char* body() const { return reinterpret_cast<const char*>(this + 1); }
  uint32_t body_size() const { return size - sizeof(RecordHeader); }
  // Bytes the record occupies in the ring: size rounded up to 8.
  uint32_t stride() const { return (size + 7) & ~uint32_t{7}; }
};
static_assert(sizeof(RecordHeader) == 24, "RecordHeader is part of the ABI");

inline constexpr uint16_t kPaddingApiId = 0xFFFF;
inline constexpr uint64_t kChannelMagic = 0x4E414843544E5652ull;  // "RVNTCHAN"
inline constexpr uint32_t kChannelLayoutVersion = 3;

struct ChannelOptions {
  size_t ring_capacity = size_t{8} << 20;           // Power of two, >= 4096.
  size_t callback_ring_capacity = size_t{256} << 10; // Power of two, >= 4096.
  uint32_t reply_slots = 64;
  uint32_t reply_data_size = 64 << 10;               // Multiple of 64.
  size_t staging_size = size_t{16} << 20;
  // The client unlinks the file when it is destroyed.
  bool unlink_on_close = true;
};

// A reply as seen by the client. `data` points into the slot and stays valid
// until the slot is released.
struct ReplyView {
  uint32_t status = 0;
  const char* data = nullptr;
  uint32_t length = 0;
};

namespace shm_internal {
// With REVENANT_WAIT_STATS=1: this process's waits so far, per kind (how many
// did not find their condition true at once, how many of those slept on the
// futex, mean durations); empty without it.
std::string WaitStatsReport();
struct ChannelHeader;
struct RingControl;
struct ReplySlotHeader;
struct Mapping;
}  // namespace shm_internal

class RingProducer;

// A record being written. Obtained from BeginRecord (or BeginCallback); holds
// the ring's producer token until committed or destroyed (destroying it
// without committing publishes nothing). Move-only.
class RecordWriter {
 public:
  RecordWriter(RecordWriter&& other) noexcept;
  RecordWriter& operator=(RecordWriter&& other) noexcept;
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;
  ~RecordWriter();

  char* body() { return reinterpret_cast<char*>(header_ + 1); }
  uint32_t body_size() const { return body_size_; }
  // Fill api_id, flags and reply_slot here; size and seq are set by the ring.
  RecordHeader& header() { return *header_; }

 private:
  friend class RingProducer;
  RecordWriter(RingProducer* ring, RecordHeader* header, uint32_t body_size,
               uint64_t new_head)
      : ring_(ring), header_(header), body_size_(body_size),
        new_head_(new_head) {}
  RingProducer* ring_ = nullptr;
  RecordHeader* header_ = nullptr;
  uint32_t body_size_ = 0;
  uint64_t new_head_ = 0;
};

// Producer end of one ring. Thread-safe: writers are serialized.
class RingProducer {
 public:
  RingProducer(shm_internal::RingControl* ctrl, char* data, size_t capacity,
               const std::atomic<bool>* peer_dead);
  RingProducer(const RingProducer&) = delete;
  RingProducer& operator=(const RingProducer&) = delete;

  // Reserves a record with `body_size` body bytes. Blocks while another
  // writer holds the ring or the ring lacks space (back-pressure).
  // kInvalidArgument: body_size > capacity / 4 (chunk it).
  // kDeadlineExceeded: at `deadline`. kUnavailable: peer marked dead.
  absl::StatusOr<RecordWriter> BeginRecord(uint32_t body_size,
                                           absl::Time deadline);
  // The same with a deadline `timeout` from the call, read from the clock
  // only if the producer has to wait.
  absl::StatusOr<RecordWriter> BeginRecord(uint32_t body_size,
                                           absl::Duration timeout);
  // Publishes the record: assigns the next seq, release-stores the head and
  // wakes a sleeping consumer. Returns the seq.
  uint64_t Commit(RecordWriter&& writer);

  // Wakes local waiters (used by MarkPeerDead).
  void WakeAll();
  size_t capacity() const { return capacity_; }
  // The seq of the last committed record (0 if none): what a replacement
  // producer continues from.
  uint64_t last_seq() const;

 private:
  friend class RecordWriter;
  absl::StatusOr<RecordWriter> BeginRecordWithin(uint32_t body_size, absl::Time deadline,
                                                 absl::Duration timeout);
  // Waits for the producer token (held by another writer) until `deadline`.
  bool TakeToken(absl::Time deadline, absl::Status* status);
  void Abandon();

  shm_internal::RingControl* const ctrl_;
  char* const data_;
  const size_t capacity_;
  const std::atomic<bool>* const peer_dead_;
  // The producer token: taken by compare-and-swap; writers that find it
  // held wait on mu_.
  std::atomic<bool> busy_{false};
  std::atomic<int> token_waiters_{0};
  absl::Mutex mu_;
  // The consumer's released tail as last read (token holder only).
  uint64_t cached_tail_ = 0;
};

// Consumer end of one ring. Single-threaded.
class RingConsumer {
 public:
  RingConsumer(shm_internal::RingControl* ctrl, char* data, size_t capacity,
               const std::atomic<bool>* peer_dead);
  RingConsumer(const RingConsumer&) = delete;
  RingConsumer& operator=(const RingConsumer&) = delete;

  // Waits for the next unread record (padding is skipped). The pointer stays
  // valid until the record is released. kDeadlineExceeded at `deadline`
  // (so a loop can check for shutdown), kUnavailable if the peer is marked
  // dead, kDataLoss if the ring holds a malformed record.
  absl::StatusOr<const RecordHeader*> Peek(absl::Time deadline);
  // Non-blocking Peek: nullptr when nothing is readable.
  absl::StatusOr<const RecordHeader*> TryPeek();
  // Moves the private read cursor past the record last returned by Peek.
  void Advance();
  // Frees the space of every advanced record with seq <= `seq` (they are
  // journaled and consumed). Records not yet advanced are never released.
  // A consumer must release what it has consumed before it blocks in Peek:
  // a ring full of advanced-but-unreleased records stalls every producer.
  void Release(uint64_t seq);
  // Restarts reading at the shared released tail, forgetting the private
  // cursor: used by a replacement consumer to see every unreleased record.
  void ResetReadCursorToReleased();
  // Advances past every readable record with seq <= `seq` (e.g. the
  // journal's last seq) without waiting. They still need Release.
  absl::Status SkipThrough(uint64_t seq);

  uint64_t released_seq() const;
  void WakeAll();

  // Ring position of the record the last Peek returned (the read cursor).
  uint64_t read_position() const { return read_pos_; }

  // A second reader, for another thread of the consumer process that reads
  // ahead of the read cursor without consuming (the agent's journal-ahead
  // thread): the record at *pos after skipping padding (*pos moves past
  // it), or nullptr when none is readable yet. The caller keeps *pos at or
  // past the read cursor and past nothing released. Thread-safe against the
  // consumer's own calls.
  absl::StatusOr<const RecordHeader*> PeekAt(uint64_t* pos) const;
  // Waits (spin, then futex sleeps; bounded by `deadline`) until ready()
  // holds, woken by every producer commit and by WakeWaiters. For that
  // second reader. kDeadlineExceeded / kUnavailable as Peek. `what` (a
  // string literal) names the wait in errors and wait statistics.
  absl::Status WaitUntil(const std::function<bool()>& ready, absl::Time deadline,
                         const char* what = "the journal-ahead reader's turn");
  // Wakes WaitUntil/Peek sleepers, if any (no system call otherwise).
  void WakeWaiters();
  // The ring position after the last committed record.
  uint64_t head_position() const;

 private:
  // Skips padding at read_pos_; returns the record there or nullptr.
  absl::StatusOr<const RecordHeader*> Current();

  shm_internal::RingControl* const ctrl_;
  char* const data_;
  const size_t capacity_;
  const std::atomic<bool>* const peer_dead_;
  uint64_t read_pos_ = 0;
  const RecordHeader* peeked_ = nullptr;
  // Advanced but unreleased records: (seq, end position).
  std::deque<std::pair<uint64_t, uint64_t>> pending_;
};

// The application side. Creates and owns the file.
class ShmClientChannel {
 public:
  // Creates `path` (O_EXCL, 0600; the directory must exist), sizes and maps
  // it, and writes the header. Cost: one ftruncate + mmap; pages are touched
  // lazily.
  static absl::StatusOr<std::unique_ptr<ShmClientChannel>> Create(
      const std::string& path, const ChannelOptions& options);
  ~ShmClientChannel();

  // Request ring (see RingProducer). Body size max = ring_capacity / 4.
  absl::StatusOr<RecordWriter> BeginRecord(uint32_t body_size,
                                           absl::Time deadline) {
    return requests_->BeginRecord(body_size, deadline);
  }
  absl::StatusOr<RecordWriter> BeginRecord(uint32_t body_size,
                                           absl::Duration timeout) {
    return requests_->BeginRecord(body_size, timeout);
  }
  uint64_t Commit(RecordWriter&& writer) {
    return requests_->Commit(std::move(writer));
  }
  // The seq of the last request published (0 if none).
  uint64_t last_request_seq() const { return requests_->last_seq(); }

  // Takes a free reply slot (process-local free list); waits up to
  // `deadline` when all are in use. The slot's old reply is cleared.
  absl::StatusOr<int> AcquireReplySlot(absl::Time deadline);
  void ReleaseReplySlot(int slot);
  // Waits for the server's reply to `seq` in `slot`. kUnavailable promptly
  // after MarkPeerDead, kDeadlineExceeded at `deadline`.
  absl::StatusOr<ReplyView> WaitReply(int slot, uint64_t seq,
                                      absl::Time deadline);

  // Callback ring: the server produces, one client thread consumes.
  RingConsumer& callbacks() { return *callbacks_; }
  // Tells the server one more callback has run (in order).
  void PostCallbackDone();
  // How many NCCL errors the server has kept for the application so far
  // (ShmServerChannel::NoteNcclError); read with acquire, so a reply read
  // before it is ordered before.
  uint64_t nccl_errors() const;

  char* staging();
  size_t staging_size() const;

  // Makes every blocked call of this process return kUnavailable.
  void MarkPeerDead();
  bool peer_dead() const { return peer_dead_.load(); }
  // Clears the dead flag once a replacement server attached.
  void ClearPeerDead() { peer_dead_.store(false); }

  uint32_t server_pid() const;
  uint32_t server_epoch() const;
  void SetShutdown();
  const std::string& path() const { return path_; }

 private:
  ShmClientChannel() = default;

  std::string path_;
  bool unlink_on_close_ = true;
  std::unique_ptr<shm_internal::Mapping> map_;
  std::atomic<bool> peer_dead_{false};
  std::unique_ptr<RingProducer> requests_;
  std::unique_ptr<RingConsumer> callbacks_;
  absl::Mutex slots_mu_;
  std::vector<int> free_slots_ ABSL_GUARDED_BY(slots_mu_);
};

// The agent side. Attaches to a file created by a client.
class ShmServerChannel {
 public:
  // Maps `path` and validates magic, layout version and sizes (refusing a
  // mismatch with kFailedPrecondition). Records our pid, bumps the server
  // epoch and starts reading at the released tail.
  static absl::StatusOr<std::unique_ptr<ShmServerChannel>> Attach(
      const std::string& path);
  ~ShmServerChannel();

  // Request ring (see RingConsumer).
  absl::StatusOr<const RecordHeader*> Peek(absl::Time deadline) {
    return requests_->Peek(deadline);
  }
  void Advance() { requests_->Advance(); }
  void Release(uint64_t seq) { requests_->Release(seq); }
  void ResetReadCursorToReleased() { requests_->ResetReadCursorToReleased(); }
  absl::Status SkipThrough(uint64_t seq) { return requests_->SkipThrough(seq); }
  RingConsumer& requests() { return *requests_; }

  // Reply slots: write up to reply_data_size() bytes, then PostReply.
  char* ReplyBuffer(int slot);
  uint32_t reply_data_size() const;
  uint32_t reply_slots() const;
  void PostReply(int slot, uint64_t seq, uint32_t status, uint32_t len);

  // Callback ring: the server produces.
  RingProducer& callbacks() { return *callbacks_; }
  // Waits until the client has posted at least `count` callback completions.
  absl::Status WaitCallbacksDone(uint64_t count, absl::Time deadline);
  uint64_t callbacks_done() const;
  // Host callbacks posted (callbacks().last_seq()) when the agent started
  // running minibatch `minibatch` (docs/recovery.md, "Host callbacks"). In the
  // shared mapping: a replacement agent reads what the dead one recorded, to
  // know how many of the callbacks its replay regenerates the application
  // already has. Stored count first, then the minibatch: a reader that sees
  // the minibatch sees its count.
  void SetMinibatchCallbacks(uint64_t minibatch, uint64_t callbacks_posted);
  // Counts an NCCL error kept for the application's next synchronous NCCL
  // call (a deferred error): in the shared mapping, so the shim knows when
  // it must ask the agent for ncclCommGetAsyncError instead of answering it
  // (shim/hooks_nccl.cc). Called before the reply that follows it is posted.
  void NoteNcclError();
  void GetMinibatchCallbacks(uint64_t* minibatch, uint64_t* callbacks_posted) const;
  // The request a slot's current reply answers (0 if the slot holds none):
  // a replacement agent answers a replayed request only if its application
  // is still waiting for it.
  uint64_t ReplySeq(int slot) const;

  char* staging();
  size_t staging_size() const;

  void MarkPeerDead();
  uint32_t client_pid() const;
  uint32_t server_epoch() const;
  bool shutdown_requested() const;

 private:
  ShmServerChannel() = default;

  std::unique_ptr<shm_internal::Mapping> map_;
  std::atomic<bool> peer_dead_{false};
  std::unique_ptr<RingConsumer> requests_;
  std::unique_ptr<RingProducer> callbacks_;
};

}  // namespace transport
}  // namespace revenant

#endif  // REVENANT_TRANSPORT_SHM_CHANNEL_H_
