// HostStream: one in-order work queue of the host device, run by a worker
// thread of its own; Marker: the completion of one queued operation.
//
//   HostStream s(/*flags=*/0, /*priority=*/0, /*legacy=*/false, on_error);
//   std::shared_ptr<Marker> a = s.Enqueue({}, [] { return cudaSuccess; });
//   std::shared_ptr<Marker> b = other.Enqueue({a}, copy);  // runs after a
//   b->Wait();
//
// Operations of one stream run one at a time in enqueue order; before an
// operation runs, the worker waits for every marker it depends on, which is
// how the backend expresses cross-stream order (cudaStreamWaitEvent, the
// legacy default stream). Different streams run concurrently. An operation
// returning an error hands it to the error sink (the backend's deferred
// errors); later operations still run.
//
// Thread safety: every method may be called from any thread. (std::mutex
// rather than absl::Mutex: ThreadSanitizer understands it without an
// instrumented abseil.)
#ifndef REVENANT_AGENT_BACKENDS_HOST_HOST_STREAM_H_
#define REVENANT_AGENT_BACKENDS_HOST_HOST_STREAM_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace revenant {
namespace agent {
namespace host {

// Set once, when the operation it belongs to finished (successfully or not).
class Marker {
 public:
  using Clock = std::chrono::steady_clock;

  // A marker that is already complete (an empty stream's "last operation").
  static std::shared_ptr<Marker> Done();

  void Set();
  bool done() const;
  // Blocks until Set. Waits in bounded slices and logs when an operation
  // takes minutes, so a hung kernel or callback is visible.
  void Wait() const;
  // When Set ran; meaningful once done().
  Clock::time_point time() const;

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  Clock::time_point time_ ABSL_GUARDED_BY(mu_);
};

class HostStream {
 public:
  using Op = std::function<cudaError_t()>;
  using ErrorSink = std::function<void(HostStream*, cudaError_t)>;

  // `sink` is called on the worker thread for every failed operation; it
  // must stay valid until the stream is destroyed.
  HostStream(unsigned int flags, int priority, bool legacy, ErrorSink sink);
  // Runs the work still queued, then joins the worker.
  ~HostStream();

  HostStream(const HostStream&) = delete;
  HostStream& operator=(const HostStream&) = delete;

  // Queues `op` to run after every earlier operation and after `deps`.
  // Returns the operation's marker. `op` may be empty (a pure ordering
  // point: event records, waits, stream-ordered frees).
  std::shared_ptr<Marker> Enqueue(std::vector<std::shared_ptr<Marker>> deps, Op op);

  // The marker of the last operation enqueued (Done() for a fresh stream).
  // Operations complete in order, so it being done means the stream is idle.
  std::shared_ptr<Marker> last() const;

  // Stops taking work; the worker exits once the queue is drained.
  void Retire();
  // Whether a retired stream's worker has exited (Join will not block).
  bool finished() const;

  unsigned int flags() const { return flags_; }
  int priority() const { return priority_; }
  bool legacy() const { return legacy_; }
  // Blocking streams synchronize with the legacy default stream.
  bool blocking() const { return !legacy_ && (flags_ & cudaStreamNonBlocking) == 0; }

 private:
  struct Item {
    std::vector<std::shared_ptr<Marker>> deps;
    Op op;
    std::shared_ptr<Marker> done;
  };

  void Run();

  const unsigned int flags_;
  const int priority_;
  const bool legacy_;
  const ErrorSink sink_;

  mutable std::mutex mu_;
  std::condition_variable cv_;  // work queued or retiring
  std::deque<Item> queue_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<Marker> last_ ABSL_GUARDED_BY(mu_);
  bool retiring_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::thread worker_;
};

}  // namespace host
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_HOST_HOST_STREAM_H_
