// CudaGloo: the cuda backend's NCCL rows through Gloo (revenant-agent
// --backend=cuda --collectives=gloo), staged through pinned host memory, so
// several ranks can share one GPU (NCCL 2.28 refuses two ranks on one GPU)
// and the cuda backend recovers with the protocol of docs/recovery.md. The
// rows, ids, groups, errors and recovery are GlooCollectives'
// (agent/backends/common/gloo_collectives.h); this file is the device side.
//
//   CudaGlooHooks hooks = ...;            // from the cuda backend
//   absl::StatusOr<std::unique_ptr<CudaGloo>> g = CudaGloo::Create(options, range, hooks);
//   (*g)->nccl().ncclAllReduce(send, recv, n, ncclFloat, ncclSum, comm, stream);
//
// One unit (a collective, or a group of one communicator) on the
// application's stream S:
//
//   S: [D2H send buffers -> pinned staging] [gate] [H2D staging -> receive buffers] [release]
//   communicator thread:        waits for the gate, runs the Gloo operation on
//                               the staging buffers (and the recovery protocol
//                               if a member died), then opens the gate
//
// The gate is a host function (cudaLaunchHostFunc) that tells the
// communicator's thread that S reached it (so the send bytes are in staging)
// and then waits, bounded, until the thread finished the unit. Nothing
// queued behind the gate on S (the optimizer step behind a gradient
// all-reduce) can run before the collective completed: the collective fence
// recovery needs. The host functions never call CUDA. The release returns
// the staging buffers to a pool (pinned memory is allocated as needed and
// freed only at destruction: cudaFreeHost synchronizes the device).
// Bounds: the gate waits at most GateTimeout() (the recovery timeout plus
// twice the collective timeout plus 30 s); the thread waits as long for S to
// reach the gate. Either one giving up fails the unit (logged; the error is
// deferred: TakeDeferredError).
//
// Known limit: CUDA runs the host functions of a context on one thread, so a
// gate that waits blocks the host functions of the other streams (host
// callbacks of the application included) until its collective completed.
// Units of one communicator issued on different streams whose gates the
// GPU reaches in a different order than the issue order therefore wait for
// each other until the bound; issue collectives of one communicator on one
// stream, or order the streams (as NCCL itself expects).
//
// State transfer during a recovery reads and writes device memory through a
// private non-blocking stream (cudaStreamNonBlocking: the legacy default
// stream, where an application may have a gate waiting, does not order it)
// and a pinned bounce buffer, waiting for each copy with a bound.
//
// Thread safety: all methods may be called from several threads.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_GLOO_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_GLOO_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/backends/common/gloo_collectives.h"

namespace revenant {
namespace agent {
namespace cuda {

// What the cuda backend tells CudaGloo about its device.
struct CudaGlooHooks {
  // A live allocation or shared host memory.
  std::function<bool(const void* p, size_t bytes)> accessible;
  // A stream the application created and did not destroy yet.
  std::function<bool(cudaStream_t stream)> known_stream;
  // Live allocations (start, size).
  std::function<std::vector<std::pair<uint64_t, uint64_t>>()> live_allocations;
};

class CudaGloo : public CollectiveDevice {
 public:
  // On options.device (made current on every thread CudaGloo uses).
  static absl::StatusOr<std::unique_ptr<CudaGloo>> Create(const BackendOptions& options,
                                                          DeviceRange range, CudaGlooHooks hooks);
  // Fails the units still waiting (their gates open), stops the threads,
  // drops the communicators, frees the pinned memory.
  ~CudaGloo() override;
  CudaGloo(const CudaGloo&) = delete;
  CudaGloo& operator=(const CudaGloo&) = delete;

  GlooCollectives& nccl() { return *nccl_; }

  // The first CUDA error of a unit that failed since the last call
  // (cudaSuccess when none), for the backend's next synchronization.
  cudaError_t TakeDeferredError() { return static_cast<cudaError_t>(deferred_.exchange(0)); }

  // How long a gate waits for its unit (and the thread for the gate).
  absl::Duration GateTimeout() const { return gate_timeout_; }

  // --- CollectiveDevice ---------------------------------------------------------
  bool Accessible(const void* p, size_t bytes) override;
  bool ValidStream(cudaStream_t stream) override;
  cudaError_t EnqueueUnit(const std::vector<cudaStream_t>& streams, Unit unit) override;
  void ForgetComm(const void* comm) override;
  DeviceRange Range() const override { return range_; }
  std::vector<std::pair<uint64_t, uint64_t>> LiveAllocations() override {
    return hooks_.live_allocations();
  }
  absl::Status ReadDevice(void* dst, uint64_t addr, size_t n) override;
  absl::Status WriteDevice(uint64_t addr, const void* src, size_t n) override;

 private:
  struct Work;
  struct Worker;
  // Pinned staging buffers, reused by capacity (powers of two).
  struct Pool {
    std::mutex mu;
    std::multimap<size_t, void*> free;  // capacity -> buffer
    std::vector<void*> all;             // freed at destruction
  };

  CudaGloo(int device, DeviceRange range, CudaGlooHooks hooks, absl::Duration gate_timeout);
  // Host functions (CUDA's callback thread; no CUDA calls): the gate, and
  // the return of a unit's staging buffers to the pool.
  struct Release;
  static void GateFn(void* data);
  static void ReleaseFn(void* data);
  // A pinned buffer of at least `bytes` (nullptr when pinned memory ran out).
  std::pair<void*, size_t> Take(size_t bytes);
  // Waits (bounded) for the private copy stream.
  absl::Status WaitCopies(const char* what);
  void Serve(Worker* w);
  void Bind() const;

  const int device_;
  const DeviceRange range_;
  const CudaGlooHooks hooks_;
  const absl::Duration gate_timeout_;
  std::unique_ptr<GlooCollectives> nccl_;
  std::shared_ptr<Pool> pool_ = std::make_shared<Pool>();
  std::atomic<int> deferred_{0};
  std::atomic<uint64_t> units_{0};

  std::mutex workers_mu_;
  absl::flat_hash_map<const void*, std::unique_ptr<Worker>> workers_;  // by communicator
  std::vector<std::unique_ptr<Worker>> retired_;  // communicators destroyed
  std::atomic<bool> stop_{false};

  std::mutex copy_mu_;  // the copy stream and the bounce buffer
  cudaStream_t copy_stream_ = nullptr;
  void* bounce_ = nullptr;
};

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_GLOO_H_
