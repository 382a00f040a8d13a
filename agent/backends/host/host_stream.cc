#include "agent/backends/host/host_stream.h"

#include <utility>

#include "absl/time/time.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {

std::shared_ptr<Marker> Marker::Done() {
  auto m = std::make_shared<Marker>();
  m->Set();
  return m;
}

void Marker::Set() {
  absl::MutexLock lock(&mu_);
  time_ = Clock::now();
  done_ = true;
}

bool Marker::done() const {
  absl::MutexLock lock(&mu_);
  return done_;
}

void Marker::Wait() const {
  absl::MutexLock lock(&mu_);
  int slices = 0;
  // A GPU waits as long as its work takes; so does the host device, in
  // bounded slices so a stuck operation is reported.
  while (!mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(1))) {
    if (++slices % 60 == 0) {
      REVENANT_LOG(WARNING, "host-backend")
          << "still waiting for a stream operation after " << slices << " s";
    }
  }
}

Marker::Clock::time_point Marker::time() const {
  absl::MutexLock lock(&mu_);
  return time_;
}

HostStream::HostStream(unsigned int flags, int priority, bool legacy, ErrorSink sink)
    : flags_(flags),
      priority_(priority),
      legacy_(legacy),
      sink_(std::move(sink)),
      last_(Marker::Done()) {
  worker_ = std::thread([this] { Run(); });
}

HostStream::~HostStream() {
  Retire();
  if (worker_.joinable()) worker_.join();
}

std::shared_ptr<Marker> HostStream::Enqueue(std::vector<std::shared_ptr<Marker>> deps, Op op) {
  auto done = std::make_shared<Marker>();
  absl::MutexLock lock(&mu_);
  queue_.push_back(Item{std::move(deps), std::move(op), done});
  last_ = done;
  return done;
}

std::shared_ptr<Marker> HostStream::last() const {
  absl::MutexLock lock(&mu_);
  return last_;
}

void HostStream::Retire() {
  absl::MutexLock lock(&mu_);
  retiring_ = true;
}

bool HostStream::finished() const {
  absl::MutexLock lock(&mu_);
  return finished_;
}

void HostStream::Run() {
  for (;;) {
    Item item;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return !queue_.empty() || retiring_;
      };
      // Sleeps while idle; the timeout only bounds each wait.
      while (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Milliseconds(500))) {
      }
      if (queue_.empty()) {
        finished_ = true;
        return;
      }
      item = std::move(queue_.front());
      queue_.pop_front();
    }
    for (const std::shared_ptr<Marker>& dep : item.deps) dep->Wait();
    if (item.op) {
      cudaError_t err = item.op();
      if (err != cudaSuccess) sink_(this, err);
    }
    item.done->Set();
  }
}

}  // namespace host
}  // namespace agent
}  // namespace revenant
