#include "agent/backends/host/host_stream.h"

#include <utility>

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
  {
    std::lock_guard<std::mutex> lock(mu_);
    time_ = Clock::now();
    done_ = true;
  }
  cv_.notify_all();
}

bool Marker::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void Marker::Wait() const {
  std::unique_lock<std::mutex> lock(mu_);
  int slices = 0;
  // A GPU waits as long as its work takes; so does the host device, in
  // bounded slices so a stuck operation is reported.
  while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return done_; })) {
    if (++slices % 60 == 0) {
      REVENANT_LOG(WARNING, "host-backend")
          << "still waiting for a stream operation after " << slices << " s";
    }
  }
}

Marker::Clock::time_point Marker::time() const {
  std::lock_guard<std::mutex> lock(mu_);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Item{std::move(deps), std::move(op), done});
    last_ = done;
  }
  cv_.notify_one();
  return done;
}

std::shared_ptr<Marker> HostStream::last() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void HostStream::Retire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    retiring_ = true;
  }
  cv_.notify_all();
}

bool HostStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

void HostStream::Run() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return !queue_.empty() || retiring_; };
      // Sleeps while idle; the timeout only bounds each wait.
      while (!cv_.wait_for(lock, std::chrono::milliseconds(500), ready)) {
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
