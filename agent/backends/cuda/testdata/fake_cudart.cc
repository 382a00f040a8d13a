#include "agent/backends/cuda/testdata/fake_cudart.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace fake_cudart {
namespace {

// Runs queued closures in order on a thread of its own.
class Queue {
 public:
  Queue() : thread_([this] { Run(); }) {}
  ~Queue() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Push(std::function<void()> op) {
    std::lock_guard<std::mutex> lock(mu_);
    ops_.push_back(std::move(op));
    ++pending_;
    cv_.notify_all();
  }
  bool Idle() {
    std::lock_guard<std::mutex> lock(mu_);
    return pending_ == 0;
  }
  bool WaitIdle(double seconds) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                        [&] { return pending_ == 0; });
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !ops_.empty(); });
      if (ops_.empty()) return;
      std::function<void()> op = std::move(ops_.front());
      ops_.pop_front();
      lock.unlock();
      op();
      lock.lock();
      --pending_;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  long pending_ = 0;
  bool stop_ = false;
  std::thread thread_;  // last: starts after the rest exists
};

struct Device {
  Queue callbacks;  // the context's one host-function thread
  std::unique_ptr<Queue> legacy = std::make_unique<Queue>();
};

struct Stream {
  int device = 0;
  unsigned int flags = 0;
  Queue queue;
};

// One recorded point of a stream: done once the stream passed it.
struct Marker {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};
struct Event {
  std::shared_ptr<Marker> last;
};

std::mutex g_mu;
std::map<int, std::unique_ptr<Device>>& Devices() {
  static auto* d = new std::map<int, std::unique_ptr<Device>>;
  return *d;
}
thread_local int t_device = 0;
std::atomic<long> g_host_functions{0};
std::mutex& RegisteredMu() {
  static auto* mu = new std::mutex;
  return *mu;
}
std::map<void*, size_t>& Registered() {  // guarded by RegisteredMu()
  static auto* r = new std::map<void*, size_t>;
  return *r;
}
// HoldHostCopies: device-to-host copies wait while held.
struct Hold {
  std::mutex mu;
  std::condition_variable cv;
  bool held = false;  // guarded by mu
  std::atomic<long> landed{0};
};
Hold& HostCopyHold() {
  static auto* h = new Hold;
  return *h;
}

Device& DeviceOf(int ordinal) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto& d = Devices()[ordinal];
  if (d == nullptr) d = std::make_unique<Device>();
  return *d;
}

Queue& QueueOf(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    return *DeviceOf(t_device).legacy;
  }
  return reinterpret_cast<Stream*>(s)->queue;
}

int DeviceOfStream(cudaStream_t s) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) return t_device;
  return reinterpret_cast<Stream*>(s)->device;
}

}  // namespace

void Enqueue(cudaStream_t stream, std::function<void()> op) { QueueOf(stream).Push(std::move(op)); }

bool Synchronize(cudaStream_t stream, double seconds) {
  return QueueOf(stream).WaitIdle(seconds);
}

long HostFunctionsRun() { return g_host_functions.load(); }

void HoldHostCopies(bool hold) {
  Hold& h = HostCopyHold();
  std::lock_guard<std::mutex> lock(h.mu);
  h.held = hold;
  h.cv.notify_all();
}

long HostCopiesLanded() { return HostCopyHold().landed.load(); }

long RegisteredHostRanges() {
  std::lock_guard<std::mutex> lock(RegisteredMu());
  return static_cast<long>(Registered().size());
}

}  // namespace fake_cudart

using fake_cudart::DeviceOf;
using fake_cudart::DeviceOfStream;
using fake_cudart::QueueOf;

extern "C" {

cudaError_t cudaSetDevice(int device) {
  fake_cudart::t_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) { return cudaSuccess; }

const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "fake CUDA error";
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  auto* s = new fake_cudart::Stream;
  s->device = fake_cudart::t_device;
  s->flags = flags;
  *stream = reinterpret_cast<cudaStream_t>(s);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  auto* s = reinterpret_cast<fake_cudart::Stream*>(stream);
  s->queue.WaitIdle(60);
  delete s;
  return cudaSuccess;
}

// The flags a stream was created with (the legacy stream: 0). The fake
// does not order blocking streams behind the legacy one.
cudaError_t cudaStreamGetFlags(cudaStream_t stream, unsigned int* flags) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    *flags = 0;
  } else {
    *flags = reinterpret_cast<fake_cudart::Stream*>(stream)->flags;
  }
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return QueueOf(stream).Idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t, cudaStreamCaptureStatus* status) {
  *status = cudaStreamCaptureStatusNone;
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t size, unsigned int) {
  *p = std::malloc(size);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t size, unsigned int) {
  std::lock_guard<std::mutex> lock(fake_cudart::RegisteredMu());
  if (p == nullptr || size == 0) return cudaErrorInvalidValue;
  if (!fake_cudart::Registered().emplace(p, size).second) return cudaErrorHostMemoryAlreadyRegistered;
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* p) {
  std::lock_guard<std::mutex> lock(fake_cudart::RegisteredMu());
  return fake_cudart::Registered().erase(p) == 1 ? cudaSuccess : cudaErrorHostMemoryNotRegistered;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
  QueueOf(stream).Push([=] {
    if (kind == cudaMemcpyDeviceToHost) {
      // Held (a test's slow link), at most 30 s.
      fake_cudart::Hold& h = fake_cudart::HostCopyHold();
      std::unique_lock<std::mutex> lock(h.mu);
      h.cv.wait_for(lock, std::chrono::seconds(30), [&] { return !h.held; });
    }
    std::memcpy(dst, src, count);
    if (kind == cudaMemcpyDeviceToHost) fake_cudart::HostCopyHold().landed.fetch_add(1);
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  fake_cudart::Device& d = DeviceOf(DeviceOfStream(stream));
  fake_cudart::Queue* callbacks = &d.callbacks;
  // The stream waits until the context's callback thread ran the function.
  QueueOf(stream).Push([=] {
    auto done = std::make_shared<fake_cudart::Marker>();
    callbacks->Push([=] {
      fn(data);
      fake_cudart::g_host_functions.fetch_add(1);
      std::lock_guard<std::mutex> lock(done->mu);
      done->done = true;
      done->cv.notify_all();
    });
    std::unique_lock<std::mutex> lock(done->mu);
    done->cv.wait(lock, [&] { return done->done; });
  });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int) {
  *event = reinterpret_cast<cudaEvent_t>(new fake_cudart::Event);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<fake_cudart::Event*>(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  auto marker = std::make_shared<fake_cudart::Marker>();
  reinterpret_cast<fake_cudart::Event*>(event)->last = marker;
  QueueOf(stream).Push([marker] {
    std::lock_guard<std::mutex> lock(marker->mu);
    marker->done = true;
    marker->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  std::shared_ptr<fake_cudart::Marker> marker =
      reinterpret_cast<fake_cudart::Event*>(event)->last;
  if (marker == nullptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(marker->mu);
  return marker->done ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  return QueueOf(stream).WaitIdle(60) ? cudaSuccess : cudaErrorLaunchTimeout;
}

cudaError_t cudaMalloc(void** p, size_t size) {
  *p = std::calloc(1, size);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaFree(void* p) {
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t size) {
  *p = std::malloc(size);
  return *p != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t count, cudaStream_t stream) {
  QueueOf(stream).Push([=] { std::memset(dst, value, count); });
  return cudaSuccess;
}

// No device identity: the NCCL start agreement then compares nothing.
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp*, int) { return cudaErrorNotSupported; }
cudaError_t cudaDeviceGetPCIBusId(char*, int, int) { return cudaErrorNotSupported; }

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int) {
  std::shared_ptr<fake_cudart::Marker> marker =
      reinterpret_cast<fake_cudart::Event*>(event)->last;
  if (marker == nullptr) return cudaSuccess;
  QueueOf(stream).Push([marker] {
    std::unique_lock<std::mutex> lock(marker->mu);
    marker->cv.wait(lock, [&] { return marker->done; });
  });
  return cudaSuccess;
}

}  // extern "C"
