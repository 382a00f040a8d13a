// A sampling profiler for the agent's executor thread (REVENANT_PROFILE_HZ,
// a measurement knob): where the executor's time goes, per API, on machines
// without a system profiler.
//
//   profiler::StartOnThisThread(hz);      // the executor thread, once
//   profiler::Enter(api_id); ... profiler::Leave();   // around each request
//   std::string report = profiler::Report(name_of_api);   // at exit
//
// A timer on the wall clock delivers SIGPROF to the executor thread `hz`
// times a second; the handler records the interrupted instruction address
// and the request being executed (or none) into a fixed buffer. Nothing in
// the handler allocates, locks or unwinds (an unwinder may take the dynamic
// loader's lock the thread was interrupted holding), so a sample names the
// innermost function only; the per-request attribution tells which API it
// belongs to. Addresses are resolved with dladdr at report time: a function
// of a library without symbols (libcuda) shows as the library and an
// offset rounded to 4 KiB.
//
// Wall-clock samples include time the executor is blocked (in the driver, a
// futex, a system call); the samples between requests are counted apart
// (the executor waiting for the next request).
#ifndef REVENANT_AGENT_PROFILER_H_
#define REVENANT_AGENT_PROFILER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

namespace revenant::agent::profiler {

// No request (the executor between requests).
inline constexpr uint32_t kIdle = 0xffffffffu;

namespace internal {
extern std::atomic<uint32_t> current_api;
extern std::atomic<bool> running;
}  // namespace internal

// Starts sampling the calling thread `hz` times a second (1..20000). Returns
// false, with a log line, when the timer could not be made. At most one
// thread is sampled per process; a second call does nothing.
bool StartOnThisThread(int hz);
bool Running();

inline void Enter(uint32_t api_id) {
  internal::current_api.store(api_id, std::memory_order_relaxed);
}
inline void Leave() { internal::current_api.store(kIdle, std::memory_order_relaxed); }

// While it lives, the profiler's signal is blocked on the calling thread
// (when `on`): for calls into code that does not survive a system call
// interrupted every few tens of microseconds (an NCCL communicator's
// creation hung at 20 000 samples/s on an H100 VM). The periods that pass
// meanwhile are delivered as one signal's overruns when it ends, so they
// still count toward the request being run.
class ScopedPause {
 public:
  explicit ScopedPause(bool on);
  ~ScopedPause();
  ScopedPause(const ScopedPause&) = delete;
  ScopedPause& operator=(const ScopedPause&) = delete;

 private:
  bool on_;
};

// Stops the timer and summarizes the samples: by API (share of the samples
// in requests), the top locations over all requests, and for the APIs with
// the most samples their top locations. `api_name` names an API id.
std::string Report(const std::function<std::string(uint32_t)>& api_name);

}  // namespace revenant::agent::profiler

#endif  // REVENANT_AGENT_PROFILER_H_
