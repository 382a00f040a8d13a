#include "common/timeline.h"

#include <algorithm>
#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "common/knobs.h"

namespace revenant {
namespace timeline {
namespace {

struct Event {
  const char* what;
  int64_t start_ns, end_ns;
  std::string detail;
};

struct State {
  absl::Mutex mu;
  std::vector<Event> events ABSL_GUARDED_BY(mu);
  uint64_t left_out ABSL_GUARDED_BY(mu) = 0;
};

State& state() {
  static State* s = new State;
  return *s;
}

// -1: not read yet.
std::atomic<int> enabled{-1};

}  // namespace

bool Enabled() {
  int e = enabled.load(std::memory_order_relaxed);
  if (e < 0) {
    e = knobs::Bool(knobs::Id::kTimeline).value_or(false) ? 1 : 0;
    enabled.store(e, std::memory_order_relaxed);
  }
  return e == 1;
}

void SetEnabledForTest(bool on) { enabled.store(on ? 1 : 0, std::memory_order_relaxed); }

void Add(const char* what, int64_t start_ns, int64_t end_ns, std::string detail) {
  if (!Enabled()) return;
  State& s = state();
  absl::MutexLock lock(&s.mu);
  if (s.events.size() >= kMaxEvents) {
    ++s.left_out;
    return;
  }
  s.events.push_back(Event{what, start_ns, end_ns, std::move(detail)});
}

std::vector<std::string> Lines() {
  std::vector<std::string> lines;
  if (!Enabled()) return lines;
  State& s = state();
  absl::MutexLock lock(&s.mu);
  std::vector<const Event*> sorted;
  sorted.reserve(s.events.size());
  for (const Event& e : s.events) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Event* a, const Event* b) { return a->start_ns < b->start_ns; });
  for (const Event* e : sorted) {
    lines.push_back(absl::StrFormat("timeline %.6f %.3f ms %s%s%s", e->start_ns / 1e9,
                                    (e->end_ns - e->start_ns) / 1e6, e->what,
                                    e->detail.empty() ? "" : ": ", e->detail));
  }
  if (s.left_out > 0) {
    lines.push_back(absl::StrFormat("timeline: %d later events left out (at most %d kept)",
                                    s.left_out, kMaxEvents));
  }
  return lines;
}

void Clear() {
  State& s = state();
  absl::MutexLock lock(&s.mu);
  s.events.clear();
  s.left_out = 0;
}

}  // namespace timeline
}  // namespace revenant
