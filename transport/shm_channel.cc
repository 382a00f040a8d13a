#include "transport/shm_channel.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <new>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/logging.h"

namespace revenant {
namespace transport {
namespace shm_internal {

constexpr size_t kPage = 4096;

struct ChannelHeader {
  std::atomic<uint64_t> magic;  // Written last by the client.
  uint32_t layout_version;
  uint32_t header_size;  // sizeof(ChannelHeader)
  uint64_t total_size;
  uint64_t ring_capacity;
  uint64_t ring_ctrl_offset;
  uint64_t ring_data_offset;
  uint64_t cb_capacity;
  uint64_t cb_ctrl_offset;
  uint64_t cb_data_offset;
  uint32_t reply_slots;
  uint32_t reply_data_size;
  uint64_t slot_hdr_offset;
  uint64_t slot_data_offset;
  uint64_t staging_size;
  uint64_t staging_offset;
  std::atomic<uint32_t> client_pid;
  std::atomic<uint32_t> server_pid;
  std::atomic<uint32_t> server_epoch;
  std::atomic<uint32_t> shutdown;
  alignas(64) std::atomic<uint64_t> callbacks_done;
  std::atomic<uint32_t> callbacks_done_futex;
  std::atomic<uint32_t> callbacks_waiting;
  // ShmServerChannel::SetMinibatchCallbacks (layout version 2).
  alignas(64) std::atomic<uint64_t> minibatch_callbacks;
  std::atomic<uint64_t> minibatch_started;
  // ShmServerChannel::NoteNcclError (layout version 3).
  alignas(64) std::atomic<uint64_t> nccl_errors;
};
static_assert(sizeof(ChannelHeader) <= kPage, "header must fit its page");

struct RingControl {
  // Producer-owned.
  alignas(64) std::atomic<uint64_t> head;
  std::atomic<uint64_t> last_seq;
  // Consumer-owned: everything before released_tail may be overwritten.
  alignas(64) std::atomic<uint64_t> released_tail;
  std::atomic<uint64_t> released_seq;
  // Eventcount for "data available" (consumer sleeps).
  alignas(64) std::atomic<uint32_t> data_futex;
  std::atomic<uint32_t> consumer_waiting;
  // Eventcount for "space available" (producer sleeps).
  alignas(64) std::atomic<uint32_t> space_futex;
  std::atomic<uint32_t> producer_waiting;
};
static_assert(sizeof(RingControl) <= kPage, "ring control must fit its page");

struct ReplySlotHeader {
  alignas(64) std::atomic<uint32_t> state;  // Futex word, bumped per post.
  std::atomic<uint32_t> waiting;
  std::atomic<uint64_t> seq;  // The request this reply answers.
  uint32_t status;
  uint32_t length;
};
static_assert(sizeof(ReplySlotHeader) == 64, "one cache line per slot");
static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "shared atomics must be lock-free");

struct Mapping {
  char* base = nullptr;
  size_t size = 0;
  int fd = -1;
  ~Mapping() {
    if (base != nullptr) munmap(base, size);
    if (fd >= 0) close(fd);
  }
  ChannelHeader* header() { return reinterpret_cast<ChannelHeader*>(base); }
  RingControl* ctrl(uint64_t off) {
    return reinterpret_cast<RingControl*>(base + off);
  }
  ReplySlotHeader* slot(int i) {
    return reinterpret_cast<ReplySlotHeader*>(base +
                                              header()->slot_hdr_offset) +
           i;
  }
};

namespace {

size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }
bool IsPow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

// Fills every size and offset field of `h` from the sizes already in it.
void ComputeLayout(ChannelHeader* h) {
  size_t off = kPage;
  h->ring_ctrl_offset = off;
  off += kPage;
  h->ring_data_offset = off;
  off += AlignUp(h->ring_capacity, kPage);
  h->cb_ctrl_offset = off;
  off += kPage;
  h->cb_data_offset = off;
  off += AlignUp(h->cb_capacity, kPage);
  h->slot_hdr_offset = off;
  off += AlignUp(size_t{h->reply_slots} * sizeof(ReplySlotHeader), kPage);
  h->slot_data_offset = off;
  off += AlignUp(size_t{h->reply_slots} * h->reply_data_size, kPage);
  h->staging_offset = off;
  off += AlignUp(h->staging_size, kPage);
  h->total_size = off;
}

long Futex(std::atomic<uint32_t>* word, int op, uint32_t val,
           const struct timespec* timeout) {
  // No FUTEX_PRIVATE_FLAG: the word lives in a MAP_SHARED mapping and the
  // waker is another process.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), op, val,
                 timeout, nullptr, 0);
}

void Wake(std::atomic<uint32_t>* word) {
  word->fetch_add(1, std::memory_order_seq_cst);
  Futex(word, FUTEX_WAKE, INT_MAX, nullptr);
}

// Second half of the eventcount: called after the publishing store.
void WakeIfWaiting(std::atomic<uint32_t>* word,
                   std::atomic<uint32_t>* waiting) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (waiting->load(std::memory_order_seq_cst) != 0) Wake(word);
}

inline void CpuPause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Spin-then-sleep. A synchronous call's round trip (request, agent
// journals and executes, reply) takes a few to a few tens of microseconds;
// sleeping on the futex instead costs a wake syscall on the other side plus
// a scheduler wake-up (tens of microseconds in a VM), so a waiter first
// spins for a bounded time, measured by the clock rather than by iteration
// count (a pause instruction costs 10-150 cycles depending on the CPU). The
// spin yields the CPU every few microseconds so that on an oversubscribed
// machine (tests: many processes on 2 cores) the peer it waits for can run.
// The bound: 20 ms where the machine has 8 or more CPUs per rank sharing it
// (LOCAL_WORLD_SIZE, which revenant-run gives the agents as well as the
// applications, and torchrun the applications; 1 when unset), 200 us with 8
// or more CPUs in all, 50 us below (where spinning waiters take the CPU from
// the peer they wait for). Why 20 ms: a training step's gaps between two
// requests are mostly under a few milliseconds (the framework's own work),
// and a waiter that went to sleep costs the next request a futex wake and a
// scheduler wake-up on both sides (in a VM, an idle virtual CPU woken); one
// rank of a PyTorch DDP MLP (docs/performance.md): on the H200 step 5.5 ms
// with 1 ms of spin, 3.5 ms with 5 ms (native 3.6 ms); on an H100 VM, median
// step in four interleaved pairs 1.270 of native with 5 ms, 1.027 with 20 ms
// (each pair better with 20). Spinning costs at most one CPU per waiting
// thread, only while requests keep coming (CUDA's own default for a
// synchronizing host thread is to spin too when CPUs are plentiful).
// REVENANT_SPIN_US overrides it (microseconds, 0-10000000).
int64_t DefaultSpinNanos() {
  const unsigned cpus = std::thread::hardware_concurrency();
  long ranks = 1;
  if (const char* local = std::getenv("LOCAL_WORLD_SIZE"); local != nullptr) {
    char* end = nullptr;
    const long v = std::strtol(local, &end, 10);
    if (end != local && *end == '\0' && v > 0 && v < 1 << 20) ranks = v;
  }
  if (cpus >= 8 && cpus / static_cast<unsigned long>(ranks) >= 8) return 20000 * 1000;
  return cpus >= 8 ? 200 * 1000 : 50 * 1000;
}
int64_t SpinNanos() {
  static const int64_t nanos = [] {
    const std::optional<int64_t> us = knobs::Int(knobs::Id::kSpinUs, 0, 10000000);
    return us ? *us * 1000 : DefaultSpinNanos();
  }();
  return nanos;
}
constexpr int kPausesPerCheck = 16;     // a clock read every ~16 pauses
constexpr int64_t kYieldEveryNanos = 10 * 1000;
constexpr absl::Duration kMaxSleepSlice = absl::Milliseconds(50);

using ::revenant::MonotonicNanos;

// REVENANT_WAIT_STATS=1: every wait that did not find its condition true is
// counted per kind (the `what` of WaitFor), with the ones that went to sleep.
bool WaitStatsOn() {
  static const bool on = [] {
    return knobs::Bool(knobs::Id::kWaitStats).value_or(false);
  }();
  return on;
}
struct WaitCounter {
  std::atomic<const char*> what{nullptr};
  std::atomic<uint64_t> waits{0}, slept{0}, wait_ns{0}, slept_ns{0};
};
constexpr int kWaitKinds = 16;
WaitCounter g_wait_counters[kWaitKinds];

WaitCounter* CounterFor(const char* what) {
  for (WaitCounter& c : g_wait_counters) {
    const char* w = c.what.load(std::memory_order_acquire);
    if (w == what) return &c;
    if (w == nullptr) {
      const char* expected = nullptr;
      if (c.what.compare_exchange_strong(expected, what) || expected == what) return &c;
    }
  }
  return nullptr;  // more kinds than slots: not counted
}

void CountWait(const char* what, int64_t start, bool slept) {
  WaitCounter* c = CounterFor(what);
  if (c == nullptr) return;
  const uint64_t ns = static_cast<uint64_t>(MonotonicNanos() - start);
  c->waits.fetch_add(1, std::memory_order_relaxed);
  c->wait_ns.fetch_add(ns, std::memory_order_relaxed);
  if (slept) {
    c->slept.fetch_add(1, std::memory_order_relaxed);
    c->slept_ns.fetch_add(ns, std::memory_order_relaxed);
  }
}

// Waits until ready() holds: bounded spin, then futex sleeps in slices so a
// dead-peer flag is noticed even without a wake.
template <typename Ready>
absl::Status WaitFor(Ready&& ready, std::atomic<uint32_t>* futex_word,
                     std::atomic<uint32_t>* waiting, absl::Time deadline,
                     const std::atomic<bool>* dead, const char* what) {
  if (ready()) return absl::OkStatus();
  const int64_t start = MonotonicNanos();
  const int64_t spin = SpinNanos();
  int64_t next_yield = start + kYieldEveryNanos;
  while (!dead->load(std::memory_order_relaxed)) {
    for (int i = 0; i < kPausesPerCheck; ++i) {
      CpuPause();
      if (ready()) {
        if (WaitStatsOn()) CountWait(what, start, false);
        return absl::OkStatus();
      }
    }
    const int64_t now = MonotonicNanos();
    if (now - start >= spin) break;
    if (now >= next_yield) {
      sched_yield();
      next_yield = now + kYieldEveryNanos;
    }
  }
  while (true) {
    if (ready()) {
      if (WaitStatsOn()) CountWait(what, start, true);
      return absl::OkStatus();
    }
    if (dead->load(std::memory_order_acquire)) {
      return absl::UnavailableError(
          absl::StrCat("peer marked dead while waiting for ", what));
    }
    absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline exceeded waiting for ", what));
    }
    uint32_t v = futex_word->load(std::memory_order_seq_cst);
    waiting->fetch_add(1, std::memory_order_seq_cst);
    if (!ready() && !dead->load(std::memory_order_seq_cst)) {
      struct timespec ts = absl::ToTimespec(
          std::min(deadline - now, kMaxSleepSlice));
      Futex(futex_word, FUTEX_WAIT, v, &ts);
    }
    waiting->fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace

std::string WaitStatsReport() {
  if (!WaitStatsOn()) return std::string();
  std::string out;
  for (WaitCounter& c : g_wait_counters) {
    const char* w = c.what.load(std::memory_order_acquire);
    if (w == nullptr) break;
    const uint64_t n = c.waits.load(), s = c.slept.load();
    if (n == 0) continue;
    absl::StrAppendFormat(&out,
                          "%s%s: %u waits, %.2f us mean; %u slept (%.1f %%, %.2f us mean)",
                          out.empty() ? "" : "; ", w, n, c.wait_ns.load() / 1e3 / n, s,
                          100.0 * s / n, s ? c.slept_ns.load() / 1e3 / s : 0.0);
  }
  return out.empty() ? "no waits" : out;
}
}  // namespace shm_internal

using shm_internal::ChannelHeader;
using shm_internal::Mapping;
using shm_internal::ReplySlotHeader;
using shm_internal::RingControl;

// ---------------------------------------------------------------- RecordWriter

RecordWriter::RecordWriter(RecordWriter&& other) noexcept
    : ring_(std::exchange(other.ring_, nullptr)),
      header_(other.header_),
      body_size_(other.body_size_),
      new_head_(other.new_head_) {}

RecordWriter& RecordWriter::operator=(RecordWriter&& other) noexcept {
  if (this != &other) {
    if (ring_ != nullptr) ring_->Abandon();
    ring_ = std::exchange(other.ring_, nullptr);
    header_ = other.header_;
    body_size_ = other.body_size_;
    new_head_ = other.new_head_;
  }
  return *this;
}

RecordWriter::~RecordWriter() {
  if (ring_ != nullptr) ring_->Abandon();
}

// ---------------------------------------------------------------- RingProducer

RingProducer::RingProducer(RingControl* ctrl, char* data, size_t capacity,
                           const std::atomic<bool>* peer_dead)
    : ctrl_(ctrl), data_(data), capacity_(capacity), peer_dead_(peer_dead) {}

absl::StatusOr<RecordWriter> RingProducer::BeginRecord(uint32_t body_size,
                                                       absl::Time deadline) {
  return BeginRecordWithin(body_size, deadline, absl::ZeroDuration());
}

absl::StatusOr<RecordWriter> RingProducer::BeginRecord(uint32_t body_size,
                                                       absl::Duration timeout) {
  return BeginRecordWithin(body_size, absl::InfinitePast(), timeout);
}

bool RingProducer::TakeToken(absl::Time deadline, absl::Status* status) {
  // Fast path: nobody holds the token.
  bool expected = false;
  if (busy_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) return true;
  // Slow path: wait on mu_ (not held while writing, so that other producers
  // can honour their own deadlines) until the holder gives the token back.
  absl::MutexLock lock(&mu_);
  token_waiters_.fetch_add(1, std::memory_order_seq_cst);
  auto free_or_dead = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return !busy_.load(std::memory_order_seq_cst) || peer_dead_->load();
  };
  bool taken = false;
  while (true) {
    if (peer_dead_->load()) {
      *status = absl::UnavailableError("peer marked dead");
      break;
    }
    expected = false;
    if (busy_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      taken = true;
      break;
    }
    absl::Time now = absl::Now();
    if (now >= deadline) {
      *status = absl::DeadlineExceededError("deadline exceeded waiting for the ring's producer token");
      break;
    }
    mu_.AwaitWithDeadline(absl::Condition(&free_or_dead),
                          std::min(deadline, now + absl::Milliseconds(50)));
  }
  token_waiters_.fetch_sub(1, std::memory_order_seq_cst);
  return taken;
}

absl::StatusOr<RecordWriter> RingProducer::BeginRecordWithin(uint32_t body_size,
                                                             absl::Time deadline,
                                                             absl::Duration timeout) {
  if (body_size > capacity_ / 4) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "record body of %u bytes exceeds the limit of %u (ring capacity / 4);"
        " chunk it",
        body_size, capacity_ / 4));
  }
  // The deadline is computed only where the producer has to wait.
  auto deadline_now = [&] {
    if (deadline == absl::InfinitePast()) deadline = absl::Now() + timeout;
    return deadline;
  };
  if (peer_dead_->load()) return absl::UnavailableError("peer marked dead");
  {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true, std::memory_order_seq_cst)) {
      absl::Status st;
      if (!TakeToken(deadline_now(), &st)) return st;
    }
  }
  if (peer_dead_->load()) {
    Abandon();
    return absl::UnavailableError("peer marked dead");
  }

  const uint64_t total = (sizeof(RecordHeader) + body_size + 7) & ~uint64_t{7};
  const uint64_t head = ctrl_->head.load(std::memory_order_relaxed);
  const uint64_t idx = head & (capacity_ - 1);
  const uint64_t rem = capacity_ - idx;
  // Records never wrap: skip the rest of the ring first.
  const uint64_t pad = total > rem ? rem : 0;
  const uint64_t need = pad + total;
  // The consumer's released tail only grows: the value read last time is
  // enough as long as it leaves room (no read of the consumer's cache line
  // per record).
  if (head + need - cached_tail_ > capacity_) {
    cached_tail_ = ctrl_->released_tail.load(std::memory_order_acquire);
    if (head + need - cached_tail_ > capacity_) {
      absl::Status st = shm_internal::WaitFor(
          [&] {
            return head + need -
                       ctrl_->released_tail.load(std::memory_order_acquire) <=
                   capacity_;
          },
          &ctrl_->space_futex, &ctrl_->producer_waiting, deadline_now(), peer_dead_,
          "ring space");
      if (!st.ok()) {
        Abandon();
        return st;
      }
      cached_tail_ = ctrl_->released_tail.load(std::memory_order_acquire);
    }
  }
  if (pad >= sizeof(RecordHeader)) {
    auto* p = reinterpret_cast<RecordHeader*>(data_ + idx);
    p->size = static_cast<uint32_t>(pad);
    p->api_id = kPaddingApiId;
    p->flags = 0;
    p->seq = 0;
    p->reply_slot = -1;
    p->body_crc_or_reserved = 0;
  }
  auto* h =
      reinterpret_cast<RecordHeader*>(data_ + ((head + pad) & (capacity_ - 1)));
  h->size = static_cast<uint32_t>(sizeof(RecordHeader) + body_size);
  h->api_id = 0;
  h->flags = 0;
  h->seq = 0;
  h->reply_slot = -1;
  h->body_crc_or_reserved = 0;
  return RecordWriter(this, h, body_size, head + need);
}

uint64_t RingProducer::Commit(RecordWriter&& writer) {
  if (writer.ring_ != this) {
    REVENANT_LOG(ERROR, "transport") << "Commit of a writer of another ring";
    return 0;
  }
  const uint64_t seq = ctrl_->last_seq.load(std::memory_order_relaxed) + 1;
  writer.header_->seq = seq;
  writer.header_->size =
      static_cast<uint32_t>(sizeof(RecordHeader) + writer.body_size_);
  ctrl_->last_seq.store(seq, std::memory_order_relaxed);
  ctrl_->head.store(writer.new_head_, std::memory_order_seq_cst);
  shm_internal::WakeIfWaiting(&ctrl_->data_futex, &ctrl_->consumer_waiting);
  writer.ring_ = nullptr;
  Abandon();  // Returns the producer token.
  return seq;
}

void RingProducer::Abandon() {
  busy_.store(false, std::memory_order_seq_cst);
  // A producer waiting for the token re-evaluates its condition when mu_ is
  // released (it registers before it evaluates, so one of the two sees the
  // other).
  if (token_waiters_.load(std::memory_order_seq_cst) != 0) absl::MutexLock lock(&mu_);
}

void RingProducer::WakeAll() {
  shm_internal::Wake(&ctrl_->space_futex);
  absl::MutexLock lock(&mu_);  // Re-evaluates AwaitWithDeadline conditions.
}

// ---------------------------------------------------------------- RingConsumer

RingConsumer::RingConsumer(RingControl* ctrl, char* data, size_t capacity,
                           const std::atomic<bool>* peer_dead)
    : ctrl_(ctrl), data_(data), capacity_(capacity), peer_dead_(peer_dead) {
  ResetReadCursorToReleased();
}

absl::StatusOr<const RecordHeader*> RingConsumer::PeekAt(uint64_t* pos) const {
  const uint64_t head = ctrl_->head.load(std::memory_order_acquire);
  while (*pos < head) {
    const uint64_t idx = *pos & (capacity_ - 1);
    const uint64_t rem = capacity_ - idx;
    if (rem < sizeof(RecordHeader)) {  // Implicit padding.
      *pos += rem;
      continue;
    }
    const auto* h = reinterpret_cast<const RecordHeader*>(data_ + idx);
    if (h->size < sizeof(RecordHeader) || h->stride() > rem ||
        *pos + h->stride() > head) {
      return absl::DataLossError(absl::StrFormat(
          "malformed ring record at position %u: size %u", *pos,
          h->size));
    }
    if (h->api_id == kPaddingApiId && h->seq == 0) {
      *pos += h->stride();
      continue;
    }
    return h;
  }
  return static_cast<const RecordHeader*>(nullptr);
}

absl::StatusOr<const RecordHeader*> RingConsumer::Current() {
  return PeekAt(&read_pos_);
}

absl::Status RingConsumer::WaitUntil(const std::function<bool()>& ready,
                                     absl::Time deadline, const char* what) {
  return shm_internal::WaitFor(ready, &ctrl_->data_futex,
                               &ctrl_->consumer_waiting, deadline, peer_dead_,
                               what);
}

uint64_t RingConsumer::head_position() const {
  return ctrl_->head.load(std::memory_order_acquire);
}

void RingConsumer::WakeWaiters() {
  shm_internal::WakeIfWaiting(&ctrl_->data_futex, &ctrl_->consumer_waiting);
}

absl::StatusOr<const RecordHeader*> RingConsumer::TryPeek() {
  return Current();
}

absl::StatusOr<const RecordHeader*> RingConsumer::Peek(absl::Time deadline) {
  absl::StatusOr<const RecordHeader*> result;
  absl::Status st = shm_internal::WaitFor(
      [&] {
        result = Current();
        return !result.ok() || *result != nullptr;
      },
      &ctrl_->data_futex, &ctrl_->consumer_waiting, deadline, peer_dead_,
      "a ring record");
  if (!st.ok()) return st;
  return result;
}

void RingConsumer::Advance() {
  absl::StatusOr<const RecordHeader*> r = Current();
  if (!r.ok() || *r == nullptr) return;
  read_pos_ += (*r)->stride();
  pending_.emplace_back((*r)->seq, read_pos_);
}

void RingConsumer::Release(uint64_t seq) {
  bool any = false;
  uint64_t end = 0, last = 0;
  while (!pending_.empty() && pending_.front().first <= seq) {
    last = pending_.front().first;
    end = pending_.front().second;
    pending_.pop_front();
    any = true;
  }
  if (!any) return;
  ctrl_->released_seq.store(last, std::memory_order_relaxed);
  ctrl_->released_tail.store(end, std::memory_order_seq_cst);
  shm_internal::WakeIfWaiting(&ctrl_->space_futex, &ctrl_->producer_waiting);
}

void RingConsumer::ResetReadCursorToReleased() {
  read_pos_ = ctrl_->released_tail.load(std::memory_order_acquire);
  pending_.clear();
}

absl::Status RingConsumer::SkipThrough(uint64_t seq) {
  while (true) {
    absl::StatusOr<const RecordHeader*> r = Current();
    if (!r.ok()) return r.status();
    if (*r == nullptr || (*r)->seq > seq) return absl::OkStatus();
    Advance();
  }
}

uint64_t RingConsumer::released_seq() const {
  return ctrl_->released_seq.load(std::memory_order_acquire);
}

void RingConsumer::WakeAll() { shm_internal::Wake(&ctrl_->data_futex); }

// ---------------------------------------------------------------- Client

absl::StatusOr<std::unique_ptr<ShmClientChannel>> ShmClientChannel::Create(
    const std::string& path, const ChannelOptions& options) {
  if (!shm_internal::IsPow2(options.ring_capacity) ||
      options.ring_capacity < shm_internal::kPage ||
      options.ring_capacity > (uint64_t{1} << 32) ||
      !shm_internal::IsPow2(options.callback_ring_capacity) ||
      options.callback_ring_capacity < shm_internal::kPage ||
      options.callback_ring_capacity > (uint64_t{1} << 32)) {
    return absl::InvalidArgumentError(
        "ring capacities must be powers of two in [4096, 4 GiB]");
  }
  if (options.reply_slots == 0 || options.reply_data_size % 64 != 0) {
    return absl::InvalidArgumentError(
        "need >= 1 reply slot and reply_data_size a multiple of 64");
  }
  ChannelHeader layout{};
  layout.ring_capacity = options.ring_capacity;
  layout.cb_capacity = options.callback_ring_capacity;
  layout.reply_slots = options.reply_slots;
  layout.reply_data_size = options.reply_data_size;
  layout.staging_size = options.staging_size;
  shm_internal::ComputeLayout(&layout);

  auto map = std::make_unique<Mapping>();
  map->fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (map->fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("create ", path));
  }
  auto fail = [&](const char* what) {
    absl::Status st = absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
    unlink(path.c_str());
    return st;
  };
  if (ftruncate(map->fd, static_cast<off_t>(layout.total_size)) != 0) {
    return fail("ftruncate");
  }
  void* base = mmap(nullptr, layout.total_size, PROT_READ | PROT_WRITE,
                    MAP_SHARED, map->fd, 0);
  if (base == MAP_FAILED) return fail("mmap");
  map->base = static_cast<char*>(base);
  map->size = layout.total_size;

  // The file is zero-filled, which is the initial state of every atomic.
  ChannelHeader* h = map->header();
  h->layout_version = kChannelLayoutVersion;
  h->header_size = sizeof(ChannelHeader);
  h->total_size = layout.total_size;
  h->ring_capacity = layout.ring_capacity;
  h->ring_ctrl_offset = layout.ring_ctrl_offset;
  h->ring_data_offset = layout.ring_data_offset;
  h->cb_capacity = layout.cb_capacity;
  h->cb_ctrl_offset = layout.cb_ctrl_offset;
  h->cb_data_offset = layout.cb_data_offset;
  h->reply_slots = layout.reply_slots;
  h->reply_data_size = layout.reply_data_size;
  h->slot_hdr_offset = layout.slot_hdr_offset;
  h->slot_data_offset = layout.slot_data_offset;
  h->staging_size = layout.staging_size;
  h->staging_offset = layout.staging_offset;
  h->client_pid.store(static_cast<uint32_t>(getpid()));
  // Published last: a server that sees the magic sees the whole header.
  h->magic.store(kChannelMagic, std::memory_order_release);

  std::unique_ptr<ShmClientChannel> ch(new ShmClientChannel());
  ch->path_ = path;
  ch->unlink_on_close_ = options.unlink_on_close;
  ch->requests_ = std::make_unique<RingProducer>(
      map->ctrl(h->ring_ctrl_offset), map->base + h->ring_data_offset,
      h->ring_capacity, &ch->peer_dead_);
  ch->callbacks_ = std::make_unique<RingConsumer>(
      map->ctrl(h->cb_ctrl_offset), map->base + h->cb_data_offset,
      h->cb_capacity, &ch->peer_dead_);
  {
    absl::MutexLock lock(&ch->slots_mu_);
    for (int i = static_cast<int>(h->reply_slots) - 1; i >= 0; --i) {
      ch->free_slots_.push_back(i);
    }
  }
  ch->map_ = std::move(map);
  return ch;
}

ShmClientChannel::~ShmClientChannel() {
  if (unlink_on_close_ && !path_.empty()) unlink(path_.c_str());
}

absl::StatusOr<int> ShmClientChannel::AcquireReplySlot(absl::Time deadline) {
  int slot = -1;
  {
    absl::MutexLock lock(&slots_mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(slots_mu_) {
      return !free_slots_.empty() || peer_dead_.load();
    };
    while (!ready()) {
      absl::Time now = absl::Now();
      if (now >= deadline) {
        return absl::DeadlineExceededError("all reply slots are in use");
      }
      slots_mu_.AwaitWithDeadline(
          absl::Condition(&ready),
          std::min(deadline, now + absl::Milliseconds(50)));
    }
    if (peer_dead_.load()) return absl::UnavailableError("peer marked dead");
    slot = free_slots_.back();
    free_slots_.pop_back();
  }
  map_->slot(slot)->seq.store(0, std::memory_order_release);
  return slot;
}

void ShmClientChannel::ReleaseReplySlot(int slot) {
  if (slot < 0 || slot >= static_cast<int>(map_->header()->reply_slots)) return;
  absl::MutexLock lock(&slots_mu_);
  free_slots_.push_back(slot);
}

absl::StatusOr<ReplyView> ShmClientChannel::WaitReply(int slot, uint64_t seq,
                                                       absl::Time deadline) {
  ChannelHeader* h = map_->header();
  if (slot < 0 || slot >= static_cast<int>(h->reply_slots)) {
    return absl::InvalidArgumentError(absl::StrCat("bad reply slot ", slot));
  }
  ReplySlotHeader* s = map_->slot(slot);
  absl::Status st = shm_internal::WaitFor(
      [&] { return s->seq.load(std::memory_order_acquire) == seq; },
      &s->state, &s->waiting, deadline, &peer_dead_, "a reply");
  if (!st.ok()) return st;
  ReplyView view;
  view.status = s->status;
  view.length = std::min(s->length, h->reply_data_size);
  view.data = map_->base + h->slot_data_offset +
              size_t{h->reply_data_size} * static_cast<size_t>(slot);
  return view;
}

uint64_t ShmClientChannel::nccl_errors() const {
  return map_->header()->nccl_errors.load(std::memory_order_acquire);
}

void ShmClientChannel::PostCallbackDone() {
  ChannelHeader* h = map_->header();
  h->callbacks_done.fetch_add(1, std::memory_order_seq_cst);
  shm_internal::WakeIfWaiting(&h->callbacks_done_futex, &h->callbacks_waiting);
}

char* ShmClientChannel::staging() {
  return map_->base + map_->header()->staging_offset;
}
size_t ShmClientChannel::staging_size() const {
  return map_->header()->staging_size;
}

void ShmClientChannel::MarkPeerDead() {
  peer_dead_.store(true, std::memory_order_seq_cst);
  requests_->WakeAll();
  callbacks_->WakeAll();
  for (uint32_t i = 0; i < map_->header()->reply_slots; ++i) {
    shm_internal::Wake(&map_->slot(static_cast<int>(i))->state);
  }
  absl::MutexLock lock(&slots_mu_);
}

uint32_t ShmClientChannel::server_pid() const {
  return map_->header()->server_pid.load();
}
uint32_t ShmClientChannel::server_epoch() const {
  return map_->header()->server_epoch.load();
}
void ShmClientChannel::SetShutdown() { map_->header()->shutdown.store(1); }

// ---------------------------------------------------------------- Server

absl::StatusOr<std::unique_ptr<ShmServerChannel>> ShmServerChannel::Attach(
    const std::string& path) {
  auto map = std::make_unique<Mapping>();
  map->fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (map->fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  struct stat sb;
  if (fstat(map->fd, &sb) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("fstat ", path));
  }
  const size_t file_size = static_cast<size_t>(sb.st_size);
  if (file_size < shm_internal::kPage) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "channel file %s is %u bytes, smaller than its header page", path,
        file_size));
  }
  // MAP_POPULATE: the server maps every page now (a few tens of MiB of
  // tmpfs the client's file holds anyway), instead of taking a page fault on
  // each 64 KiB of the request ring it reaches for the first time while
  // serving -- on the executor's path, for the whole first pass of the ring.
  void* base = mmap(nullptr, file_size, PROT_READ | PROT_WRITE,
                    MAP_SHARED | MAP_POPULATE, map->fd, 0);
  if (base == MAP_FAILED) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mmap ", path));
  }
  map->base = static_cast<char*>(base);
  map->size = file_size;

  ChannelHeader* h = map->header();
  const uint64_t magic = h->magic.load(std::memory_order_acquire);
  if (magic != kChannelMagic) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "channel file %s: bad magic 0x%016x (expected 0x%016x)", path, magic,
        kChannelMagic));
  }
  if (h->layout_version != kChannelLayoutVersion ||
      h->header_size != sizeof(ChannelHeader)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "channel file %s: layout version %u / header size %u, this agent "
        "speaks version %u / header size %u",
        path, h->layout_version, h->header_size, kChannelLayoutVersion,
        sizeof(ChannelHeader)));
  }
  ChannelHeader expect{};
  expect.ring_capacity = h->ring_capacity;
  expect.cb_capacity = h->cb_capacity;
  expect.reply_slots = h->reply_slots;
  expect.reply_data_size = h->reply_data_size;
  expect.staging_size = h->staging_size;
  shm_internal::ComputeLayout(&expect);
  if (!shm_internal::IsPow2(h->ring_capacity) ||
      !shm_internal::IsPow2(h->cb_capacity) ||
      h->total_size != expect.total_size || h->total_size != file_size ||
      h->ring_ctrl_offset != expect.ring_ctrl_offset ||
      h->ring_data_offset != expect.ring_data_offset ||
      h->cb_ctrl_offset != expect.cb_ctrl_offset ||
      h->cb_data_offset != expect.cb_data_offset ||
      h->slot_hdr_offset != expect.slot_hdr_offset ||
      h->slot_data_offset != expect.slot_data_offset ||
      h->staging_offset != expect.staging_offset) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "channel file %s: inconsistent sizes (file %u bytes, header says %u, "
        "layout gives %u)",
        path, file_size, h->total_size, expect.total_size));
  }

  std::unique_ptr<ShmServerChannel> ch(new ShmServerChannel());
  ch->requests_ = std::make_unique<RingConsumer>(
      map->ctrl(h->ring_ctrl_offset), map->base + h->ring_data_offset,
      h->ring_capacity, &ch->peer_dead_);
  ch->callbacks_ = std::make_unique<RingProducer>(
      map->ctrl(h->cb_ctrl_offset), map->base + h->cb_data_offset,
      h->cb_capacity, &ch->peer_dead_);
  // A predecessor killed while asleep left its "waiting" counts behind; we
  // are the only server, so they are ours to clear (a stale count would
  // only cost the client a needless FUTEX_WAKE per record).
  map->ctrl(h->ring_ctrl_offset)->consumer_waiting.store(0);
  map->ctrl(h->cb_ctrl_offset)->producer_waiting.store(0);
  h->callbacks_waiting.store(0);
  h->server_pid.store(static_cast<uint32_t>(getpid()));
  h->server_epoch.fetch_add(1);
  ch->map_ = std::move(map);
  return ch;
}

ShmServerChannel::~ShmServerChannel() = default;

char* ShmServerChannel::ReplyBuffer(int slot) {
  ChannelHeader* h = map_->header();
  if (slot < 0 || slot >= static_cast<int>(h->reply_slots)) return nullptr;
  return map_->base + h->slot_data_offset +
         size_t{h->reply_data_size} * static_cast<size_t>(slot);
}

uint32_t ShmServerChannel::reply_data_size() const {
  return map_->header()->reply_data_size;
}
uint32_t ShmServerChannel::reply_slots() const {
  return map_->header()->reply_slots;
}

void ShmServerChannel::PostReply(int slot, uint64_t seq, uint32_t status,
                                 uint32_t len) {
  ChannelHeader* h = map_->header();
  if (slot < 0 || slot >= static_cast<int>(h->reply_slots)) {
    REVENANT_LOG(ERROR, "transport") << "PostReply to bad slot " << slot;
    return;
  }
  ReplySlotHeader* s = map_->slot(slot);
  s->status = status;
  s->length = std::min(len, h->reply_data_size);
  s->seq.store(seq, std::memory_order_seq_cst);
  shm_internal::WakeIfWaiting(&s->state, &s->waiting);
}

absl::Status ShmServerChannel::WaitCallbacksDone(uint64_t count,
                                                 absl::Time deadline) {
  ChannelHeader* h = map_->header();
  return shm_internal::WaitFor(
      [&] { return h->callbacks_done.load(std::memory_order_acquire) >= count; },
      &h->callbacks_done_futex, &h->callbacks_waiting, deadline, &peer_dead_,
      "callback completions");
}

uint64_t ShmServerChannel::ReplySeq(int slot) const {
  if (slot < 0 || slot >= static_cast<int>(map_->header()->reply_slots)) return 0;
  return map_->slot(slot)->seq.load(std::memory_order_acquire);
}

uint64_t RingProducer::last_seq() const { return ctrl_->last_seq.load(std::memory_order_acquire); }

uint64_t ShmServerChannel::callbacks_done() const {
  return map_->header()->callbacks_done.load();
}

void ShmServerChannel::NoteNcclError() {
  map_->header()->nccl_errors.fetch_add(1, std::memory_order_release);
}

void ShmServerChannel::SetMinibatchCallbacks(uint64_t minibatch, uint64_t callbacks_posted) {
  ChannelHeader* h = map_->header();
  h->minibatch_callbacks.store(callbacks_posted, std::memory_order_relaxed);
  h->minibatch_started.store(minibatch, std::memory_order_release);
}

void ShmServerChannel::GetMinibatchCallbacks(uint64_t* minibatch,
                                             uint64_t* callbacks_posted) const {
  const ChannelHeader* h = map_->header();
  *minibatch = h->minibatch_started.load(std::memory_order_acquire);
  *callbacks_posted = h->minibatch_callbacks.load(std::memory_order_relaxed);
}

char* ShmServerChannel::staging() {
  return map_->base + map_->header()->staging_offset;
}
size_t ShmServerChannel::staging_size() const {
  return map_->header()->staging_size;
}

void ShmServerChannel::MarkPeerDead() {
  peer_dead_.store(true, std::memory_order_seq_cst);
  requests_->WakeAll();
  callbacks_->WakeAll();
  shm_internal::Wake(&map_->header()->callbacks_done_futex);
}

uint32_t ShmServerChannel::client_pid() const {
  return map_->header()->client_pid.load();
}
uint32_t ShmServerChannel::server_epoch() const {
  return map_->header()->server_epoch.load();
}
bool ShmServerChannel::shutdown_requested() const {
  return map_->header()->shutdown.load() != 0;
}

}  // namespace transport
}  // namespace revenant
