// The agent's own work that can hold an application's step up -- snapshots,
// journal boundaries and compactions, snapshot and capture files made,
// registered or unmapped, the journal helper's page allocations and frees,
// log chunks made slowly, requests the executor spent over 1 ms on -- each with its
// CLOCK_MONOTONIC start and end. Kept only with
// REVENANT_TIMELINE=1 (at most kMaxEvents; one mutex per event, rare events
// only) and printed by the agent at exit, one line each. Lined up with an
// application's step times on the same clock (tests/torch's scripts print
// their slowest steps with their start times), it says which of the agent's
// work fell into a slow step.
//
//   { timeline::Span span("setup-log compaction");
//     ...
//     span.set_detail(absl::StrCat(entries, " entries")); }
//   timeline::Add("asynchronous snapshot: device copies", start_ns, end_ns, "554 MiB");
//   for (const std::string& line : timeline::Lines()) REVENANT_LOG(INFO, "agent") << line;
//
// Thread safety: every function may be called from any thread.
#ifndef REVENANT_COMMON_TIMELINE_H_
#define REVENANT_COMMON_TIMELINE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"

namespace revenant {
namespace timeline {

inline constexpr size_t kMaxEvents = 4096;

// REVENANT_TIMELINE, read once.
bool Enabled();
// For tests: on or off regardless of the environment.
void SetEnabledForTest(bool on);

// Records `what` (a string that outlives the program: a literal) over
// [start_ns, end_ns) of MonotonicNanos(). Nothing when disabled, or once
// kMaxEvents are kept (counted: Lines says how many were left out).
void Add(const char* what, int64_t start_ns, int64_t end_ns, std::string detail = {});

// The events, in start order: "timeline <start s> <duration ms> ms <what>[: <detail>]"
// (start in seconds of CLOCK_MONOTONIC, 6 decimals), then a line with the
// count of events left out, if any. Empty when disabled.
std::vector<std::string> Lines();
// Drops the events kept so far (an agent serving applications in turn
// prints each one's at its exit).
void Clear();

// Records its own lifetime as one event (when enabled at construction).
class Span {
 public:
  explicit Span(const char* what) : what_(what), start_ns_(Enabled() ? MonotonicNanos() : 0) {}
  ~Span() {
    if (start_ns_ != 0) Add(what_, start_ns_, MonotonicNanos(), std::move(detail_));
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  void set_detail(std::string detail) {
    if (start_ns_ != 0) detail_ = std::move(detail);
  }
  bool active() const { return start_ns_ != 0; }

 private:
  const char* what_;
  int64_t start_ns_;
  std::string detail_;
};

}  // namespace timeline
}  // namespace revenant

#endif  // REVENANT_COMMON_TIMELINE_H_
