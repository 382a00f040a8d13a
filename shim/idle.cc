#include "shim/idle.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "shim/call.h"
#include "shim/runtime.h"

namespace revenant {
namespace shim {
namespace {

// A stream as this thread names it: the legacy and per-thread default
// streams are keyed with the calling thread as well.
struct StreamKey {
  uint64_t stream = 0;
  int64_t thread = 0;
  bool operator==(const StreamKey& o) const { return stream == o.stream && thread == o.thread; }
};

StreamKey KeyOf(cudaStream_t s) {
  static thread_local const int64_t tid = syscall(SYS_gettid);
  const uint64_t v = reinterpret_cast<uint64_t>(s);
  return StreamKey{v, v <= reinterpret_cast<uint64_t>(cudaStreamPerThread) ? tid : 0};
}

struct EventState {
  bool complete = false;
  uint64_t record_seq = 0;  // the request of its last record
  StreamKey record_stream;  // the stream of its last record
};

struct State {
  std::mutex mu;
  // `key` (or every stream, `all`) had no pending work when the request
  // ring's last seq was `seq`: it still has none while that is so.
  bool valid = false;
  bool all = false;
  StreamKey key;
  uint64_t seq = 0;
  // Events this process created (not interprocess).
  absl::flat_hash_map<uint64_t, EventState> events;
};

State& S() {
  static State* s = new State;  // never destroyed: used by exit-time calls
  return *s;
}

std::atomic<uint64_t> g_answers{0};

uint64_t LastSeq(bool* live) {
  transport::ShmClientChannel* ch = Runtime::Get()->LiveChannel();
  *live = ch != nullptr;
  return ch != nullptr ? ch->last_request_seq() : 0;
}

bool Answered() {
  g_answers.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace

bool StreamKnownIdle(cudaStream_t stream) {
  bool live = false;
  const uint64_t last = LastSeq(&live);
  if (!live) return false;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.valid || s.seq != last || !(s.all || s.key == KeyOf(stream))) return false;
  return Answered();
}

bool DeviceKnownIdle() {
  bool live = false;
  const uint64_t last = LastSeq(&live);
  if (!live) return false;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.valid || !s.all || s.seq != last) return false;
  return Answered();
}

bool EventKnownComplete(cudaEvent_t event) {
  bool live = false;
  LastSeq(&live);
  if (!live) return false;
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(reinterpret_cast<uint64_t>(event));
  if (it == s.events.end() || !it->second.complete) return false;
  return Answered();
}

void NoteStreamIdle(cudaStream_t stream, uint64_t seq) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.valid && s.seq >= seq) return;  // a later confirmation is kept
  s.valid = true;
  s.all = false;
  s.key = KeyOf(stream);
  s.seq = seq;
}

void NoteDeviceIdle(uint64_t seq) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.valid && s.seq > seq) return;
  s.valid = true;
  s.all = true;
  s.seq = seq;
}

bool AssignEvent(unsigned int flags) {
  constexpr unsigned int kPlain = cudaEventBlockingSync | cudaEventDisableTiming;
  return (flags & ~kPlain) == 0 && ShimAnswers() && CudaRuntimeAnswered();
}

void NoteEventCreated(cudaEvent_t event, unsigned int flags) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  // A timing event's record must have run in the agent before
  // cudaEventElapsedTime may read it: only events without timing count.
  if ((flags & cudaEventInterprocess) != 0 || (flags & cudaEventDisableTiming) == 0) {
    s.events.erase(reinterpret_cast<uint64_t>(event));
    return;
  }
  s.events[reinterpret_cast<uint64_t>(event)] = EventState{};
}

void NoteEventComplete(cudaEvent_t event, uint64_t seq) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(reinterpret_cast<uint64_t>(event));
  // A record published after the synchronization is not covered by it.
  if (it == s.events.end() || it->second.record_seq >= seq) return;
  it->second.complete = true;
  // Recorded by the request just before: its stream's work up to the record
  // is complete and nothing was queued since, so the stream is idle.
  if (it->second.record_seq != 0 && it->second.record_seq + 1 == seq &&
      !(s.valid && s.seq >= seq)) {
    s.valid = true;
    s.all = false;
    s.key = it->second.record_stream;
    s.seq = seq;
  }
}

void ForgetEvent(cudaEvent_t event) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.events.erase(reinterpret_cast<uint64_t>(event));
}

void NoteEventRecorded(cudaEvent_t event, cudaStream_t stream, uint64_t seq) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  auto it = s.events.find(reinterpret_cast<uint64_t>(event));
  // The record follows the confirmation directly on an idle stream: it
  // captures no work, and the stream stays idle (a record queues none).
  const bool idle = s.valid && s.seq + 1 == seq && (s.all || s.key == KeyOf(stream));
  if (idle) s.seq = seq;
  if (it == s.events.end()) return;
  it->second.record_seq = seq;
  it->second.record_stream = KeyOf(stream);
  it->second.complete = idle;
}

uint64_t IdleAnswers() { return g_answers.load(std::memory_order_relaxed); }

}  // namespace shim
}  // namespace revenant
