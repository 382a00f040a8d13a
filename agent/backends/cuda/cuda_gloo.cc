#include "agent/backends/cuda/cuda_gloo.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collective/collective_engine.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr char kLog[] = "cuda-gloo";
constexpr size_t kMinStage = 64u << 10;
constexpr absl::Duration kCopyTimeout = absl::Seconds(60);

size_t StageCapacity(size_t bytes) {
  size_t cap = kMinStage;
  while (cap < bytes) cap <<= 1;
  return cap;
}

}  // namespace

// One unit on its way through the application's stream and the
// communicator's thread.
struct CudaGloo::Work {
  Unit unit;
  std::vector<collective::Operation> staged;  // the unit's ops on staging buffers
  uint64_t serial = 0;                        // for log lines
  absl::Duration timeout;
  std::mutex mu;
  std::condition_variable cv;
  bool arrived = false;   // the gate runs: the stream's earlier work (the D2H copies) is done
  bool finished = false;  // the unit ran, or was given up
  bool gate_gone = false;  // the gate stopped waiting (timed out)
};

// A communicator's thread and its queue of units (in issue order).
struct CudaGloo::Worker {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Work>> queue;
  bool closing = false;  // the communicator is gone: exit once the queue is empty
  std::thread thread;
};

void CudaGloo::GateFn(void* data) {
  auto* holder = static_cast<std::shared_ptr<CudaGloo::Work>*>(data);
  std::shared_ptr<CudaGloo::Work> w = std::move(*holder);
  delete holder;
  std::unique_lock<std::mutex> lock(w->mu);
  w->arrived = true;
  w->cv.notify_all();
  if (!w->cv.wait_for(lock, absl::ToChronoNanoseconds(w->timeout), [&] { return w->finished; })) {
    w->gate_gone = true;
    REVENANT_LOG(ERROR, kLog) << "collective unit " << w->serial << " did not complete within "
                              << absl::FormatDuration(w->timeout)
                              << "; its stream goes on with stale receive buffers";
  }
}

// What goes back to the pool once a unit's results were copied out.
struct CudaGloo::Release {
  std::shared_ptr<Pool> pool;
  std::shared_ptr<Work> work;  // null: nothing ran on the buffers
  std::vector<std::pair<size_t, void*>> buffers;
};

void CudaGloo::ReleaseFn(void* data) {
  std::unique_ptr<Release> r(static_cast<Release*>(data));
  if (r->work != nullptr) {
    // A gate that gave up lets the stream pass while the unit may still
    // write into its staging: such buffers are never reused.
    std::lock_guard<std::mutex> lock(r->work->mu);
    if (!r->work->finished) return;
  }
  std::lock_guard<std::mutex> lock(r->pool->mu);
  for (auto& [cap, p] : r->buffers) r->pool->free.emplace(cap, p);
}

absl::StatusOr<std::unique_ptr<CudaGloo>> CudaGloo::Create(const BackendOptions& options,
                                                           DeviceRange range,
                                                           CudaGlooHooks hooks) {
  if (!hooks.accessible || !hooks.known_stream || !hooks.live_allocations) {
    return absl::InvalidArgumentError("CudaGloo needs every hook");
  }
  absl::Duration gate = 2 * collective::DefaultCollectiveTimeout() + absl::Seconds(30);
  if (options.recovery_timeout_s > 0) gate += absl::Seconds(options.recovery_timeout_s);
  auto g = std::unique_ptr<CudaGloo>(new CudaGloo(options.device, range, std::move(hooks), gate));
  g->Bind();
  cudaError_t e = ::cudaStreamCreateWithFlags(&g->copy_stream_, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = ::cudaHostAlloc(&g->bounce_, GlooCollectives::kStateChunk, 0);
  if (e != cudaSuccess) {
    return absl::UnavailableError(
        absl::StrCat("gloo collectives on GPU ", options.device, ": ", ::cudaGetErrorString(e)));
  }
  CollectiveDevice* device = g.get();
  g->nccl_ =
      std::make_unique<GlooCollectives>(device, GlooCollectivesOptions::From(options, "cuda"));
  REVENANT_LOG(INFO, kLog) << "GPU " << options.device
                           << ": NCCL rows through Gloo staged in pinned host memory (gate bound "
                           << absl::FormatDuration(gate) << ")";
  return g;
}

CudaGloo::CudaGloo(int device, DeviceRange range, CudaGlooHooks hooks,
                   absl::Duration gate_timeout)
    : device_(device), range_(range), hooks_(std::move(hooks)), gate_timeout_(gate_timeout) {}

CudaGloo::~CudaGloo() {
  if (nccl_ != nullptr) nccl_->StopWatcher();
  stop_.store(true);
  std::vector<std::unique_ptr<Worker>> all;
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    for (auto& [comm, w] : workers_) all.push_back(std::move(w));
    workers_.clear();
    for (auto& w : retired_) all.push_back(std::move(w));
    retired_.clear();
  }
  for (auto& w : all) {
    {
      std::lock_guard<std::mutex> lock(w->mu);
      w->closing = true;
    }
    w->cv.notify_all();
    if (w->thread.joinable()) w->thread.join();
  }
  nccl_.reset();
  Bind();
  // cudaFreeHost synchronizes the device: every gate is open by now (the
  // threads failed what they did not run).
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    for (void* p : pool_->all) ::cudaFreeHost(p);
    pool_->all.clear();
    pool_->free.clear();
  }
  if (bounce_ != nullptr) ::cudaFreeHost(bounce_);
  if (copy_stream_ != nullptr) ::cudaStreamDestroy(copy_stream_);
}

void CudaGloo::Bind() const { ::cudaSetDevice(device_); }

bool CudaGloo::Accessible(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  return p != nullptr && hooks_.accessible(p, bytes);
}

bool CudaGloo::ValidStream(cudaStream_t stream) {
  return stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread ||
         hooks_.known_stream(stream);
}

std::pair<void*, size_t> CudaGloo::Take(size_t bytes) {
  const size_t cap = StageCapacity(bytes);
  {
    std::lock_guard<std::mutex> lock(pool_->mu);
    auto it = pool_->free.find(cap);
    if (it != pool_->free.end()) {
      void* p = it->second;
      pool_->free.erase(it);
      return {p, cap};
    }
  }
  void* p = nullptr;
  // Not cudaMallocHost's implicit synchronization: cudaHostAlloc does not
  // synchronize, so a unit can be staged while another one's gate waits.
  if (::cudaHostAlloc(&p, cap, cudaHostAllocPortable) != cudaSuccess) {
    (void)::cudaGetLastError();
    return {nullptr, 0};
  }
  std::lock_guard<std::mutex> lock(pool_->mu);
  pool_->all.push_back(p);
  return {p, cap};
}

cudaError_t CudaGloo::EnqueueUnit(const std::vector<cudaStream_t>& streams, Unit unit) {
  Bind();
  const cudaStream_t launch = streams[0];
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (::cudaStreamIsCapturing(launch, &capture) == cudaSuccess &&
      capture != cudaStreamCaptureStatusNone) {
    REVENANT_LOG(WARNING, kLog) << "a collective cannot be captured into a graph with "
                                << "--collectives=gloo";
    return cudaErrorStreamCaptureUnsupported;
  }
  auto w = std::make_shared<Work>();
  w->serial = units_.fetch_add(1) + 1;
  w->timeout = gate_timeout_;
  auto release = std::make_unique<Release>();
  release->pool = pool_;
  // Staging buffers: send bytes go down before the gate, results come back
  // after it.
  w->staged = unit.ops;
  for (size_t k = 0; k < unit.ops.size(); ++k) {
    w->staged[k].send = nullptr;
    w->staged[k].recv = nullptr;
    for (int side = 0; side < 2; ++side) {
      const size_t bytes = side == 0 ? unit.send_bytes[k] : unit.recv_bytes[k];
      if (bytes == 0) continue;
      auto [p, cap] = Take(bytes);
      if (p == nullptr) {
        REVENANT_LOG(ERROR, kLog) << "no pinned host memory for " << bytes << " staging bytes";
        ReleaseFn(release.release());
        return cudaErrorMemoryAllocation;
      }
      release->buffers.emplace_back(cap, p);
      if (side == 0) {
        w->staged[k].send = p;
      } else {
        w->staged[k].recv = p;
      }
    }
  }
  // The other streams' earlier work comes first, their later work after.
  auto order = [](cudaStream_t before, cudaStream_t after) {
    cudaEvent_t ev = nullptr;
    if (::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return;
    if (::cudaEventRecord(ev, before) == cudaSuccess) (void)::cudaStreamWaitEvent(after, ev, 0);
    (void)::cudaEventDestroy(ev);
  };
  for (size_t k = 1; k < streams.size(); ++k) order(streams[k], launch);
  cudaError_t e = cudaSuccess;
  for (size_t k = 0; k < unit.ops.size() && e == cudaSuccess; ++k) {
    if (unit.send_bytes[k] == 0) continue;
    e = ::cudaMemcpyAsync(const_cast<void*>(w->staged[k].send), unit.ops[k].send,
                          unit.send_bytes[k], cudaMemcpyDefault, launch);
  }
  auto* gate = new std::shared_ptr<Work>(w);
  if (e == cudaSuccess) e = ::cudaLaunchHostFunc(launch, &CudaGloo::GateFn, gate);
  if (e != cudaSuccess) {
    // Nothing waits for this unit; its staging buffers may still be written
    // by a copy already queued, so they are not reused.
    delete gate;
    REVENANT_LOG(WARNING, kLog) << "cannot stage collective unit " << w->serial << ": "
                                << ::cudaGetErrorString(e);
    return e;
  }
  // From here the gate waits for the unit: queue it even if what follows
  // fails (the error is deferred).
  cudaError_t after = cudaSuccess;
  for (size_t k = 0; k < unit.ops.size(); ++k) {
    if (unit.recv_bytes[k] == 0) continue;
    const cudaError_t c = ::cudaMemcpyAsync(unit.ops[k].recv, w->staged[k].recv,
                                            unit.recv_bytes[k], cudaMemcpyDefault, launch);
    if (after == cudaSuccess) after = c;
  }
  release->work = w;
  Release* raw_release = release.release();
  if (::cudaLaunchHostFunc(launch, ReleaseFn, raw_release) != cudaSuccess) {
    delete raw_release;  // buffers not reused (a copy may still read them)
  }
  for (size_t k = 1; k < streams.size(); ++k) order(launch, streams[k]);
  w->unit = std::move(unit);
  {
    std::lock_guard<std::mutex> lock(workers_mu_);
    std::unique_ptr<Worker>& worker = workers_[w->unit.comm];
    if (worker == nullptr) {
      worker = std::make_unique<Worker>();
      Worker* raw = worker.get();
      raw->thread = std::thread([this, raw] { Serve(raw); });
    }
    std::lock_guard<std::mutex> wl(worker->mu);
    worker->queue.push_back(w);
    worker->cv.notify_all();
  }
  if (after != cudaSuccess) {
    REVENANT_LOG(WARNING, kLog) << "collective unit " << w->serial << ": copying results back: "
                                << ::cudaGetErrorString(after);
    int expected = 0;
    deferred_.compare_exchange_strong(expected, static_cast<int>(after));
  }
  return cudaSuccess;
}

void CudaGloo::ForgetComm(const void* comm) {
  std::lock_guard<std::mutex> lock(workers_mu_);
  auto it = workers_.find(comm);
  if (it == workers_.end()) return;
  {
    std::lock_guard<std::mutex> wl(it->second->mu);
    it->second->closing = true;
  }
  it->second->cv.notify_all();
  retired_.push_back(std::move(it->second));
  workers_.erase(it);
}

void CudaGloo::Serve(Worker* worker) {
  Bind();  // recovery may copy device memory from this thread
  while (true) {
    std::shared_ptr<Work> w;
    {
      std::unique_lock<std::mutex> lock(worker->mu);
      worker->cv.wait_for(lock, std::chrono::milliseconds(100), [&] {
        return !worker->queue.empty() || worker->closing;
      });
      if (worker->queue.empty()) {
        if (worker->closing) return;
        continue;
      }
      w = std::move(worker->queue.front());
      worker->queue.pop_front();
    }
    // Wait until the stream reached the gate: the send bytes are staged.
    bool arrived = false;
    {
      std::unique_lock<std::mutex> lock(w->mu);
      const absl::Time deadline = absl::Now() + w->timeout;
      while (!w->arrived && !stop_.load() && absl::Now() < deadline) {
        w->cv.wait_for(lock, std::chrono::milliseconds(100));
      }
      arrived = w->arrived;
    }
    cudaError_t result = cudaErrorLaunchTimeout;
    if (arrived) {
      result = w->unit.run(w->staged);
    } else {
      REVENANT_LOG(ERROR, kLog) << "collective unit " << w->serial
                                << (stop_.load() ? ": the agent is shutting down"
                                                 : ": its stream did not reach it within " +
                                                       absl::FormatDuration(w->timeout));
    }
    {
      std::lock_guard<std::mutex> lock(w->mu);
      if (w->gate_gone && result == cudaSuccess) result = cudaErrorLaunchTimeout;
      // Deferred before the gate opens: a synchronization that returns once
      // the stream passed the gate sees it.
      if (result != cudaSuccess) {
        int expected = 0;
        deferred_.compare_exchange_strong(expected, static_cast<int>(result));
      }
      w->finished = true;
    }
    w->cv.notify_all();
  }
}

absl::Status CudaGloo::WaitCopies(const char* what) {
  const absl::Time deadline = absl::Now() + kCopyTimeout;
  while (true) {
    const cudaError_t e = ::cudaStreamQuery(copy_stream_);
    if (e == cudaSuccess) return absl::OkStatus();
    if (e != cudaErrorNotReady) {
      return absl::InternalError(absl::StrCat(what, ": ", ::cudaGetErrorString(e)));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": not done within ", absl::FormatDuration(kCopyTimeout)));
    }
    absl::SleepFor(absl::Microseconds(200));
  }
}

absl::Status CudaGloo::ReadDevice(void* dst, uint64_t addr, size_t n) {
  std::lock_guard<std::mutex> lock(copy_mu_);
  Bind();
  for (size_t done = 0; done < n; done += GlooCollectives::kStateChunk) {
    const size_t len = std::min(GlooCollectives::kStateChunk, n - done);
    const cudaError_t e = ::cudaMemcpyAsync(bounce_, reinterpret_cast<const void*>(addr + done),
                                            len, cudaMemcpyDeviceToHost, copy_stream_);
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("reading device state: ", ::cudaGetErrorString(e)));
    }
    if (absl::Status s = WaitCopies("reading device state"); !s.ok()) return s;
    std::memcpy(static_cast<char*>(dst) + done, bounce_, len);
  }
  return absl::OkStatus();
}

absl::Status CudaGloo::WriteDevice(uint64_t addr, const void* src, size_t n) {
  std::lock_guard<std::mutex> lock(copy_mu_);
  Bind();
  for (size_t done = 0; done < n; done += GlooCollectives::kStateChunk) {
    const size_t len = std::min(GlooCollectives::kStateChunk, n - done);
    std::memcpy(bounce_, static_cast<const char*>(src) + done, len);
    const cudaError_t e = ::cudaMemcpyAsync(reinterpret_cast<void*>(addr + done), bounce_, len,
                                            cudaMemcpyHostToDevice, copy_stream_);
    if (e != cudaSuccess) {
      return absl::InternalError(absl::StrCat("writing device state: ", ::cudaGetErrorString(e)));
    }
    if (absl::Status s = WaitCopies("writing device state"); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
