#include "agent/backends/host/host_collectives.h"

#include <cstring>
#include <utility>

namespace revenant {
namespace agent {
namespace host {

absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> HostCollectiveBackend::Create(
    const BackendOptions& options) {
  DeviceRange range;
  std::unique_ptr<hostkernel::HostKernelRegistry> registry;
  if (absl::Status s = PrepareDevice(options, &range, &registry); !s.ok()) return s;
  auto backend = std::unique_ptr<HostCollectiveBackend>(
      new HostCollectiveBackend(range, std::move(registry), options.launch_graph_max));
  CollectiveDevice* device = backend.get();
  backend->nccl_ =
      std::make_unique<GlooCollectives>(device, GlooCollectivesOptions::From(options, "host"));
  return backend;
}

HostCollectiveBackend::HostCollectiveBackend(
    DeviceRange range, std::unique_ptr<hostkernel::HostKernelRegistry> registry,
    int launch_graph_max)
    : HostBackend(range, std::move(registry), launch_graph_max) {}

HostCollectiveBackend::~HostCollectiveBackend() {
  nccl_->StopWatcher();
  // Queued units hold their communicator; finish them before the engines
  // go (the base destructor drains the streams too, later).
  cudaDeviceSynchronize();
  nccl_.reset();
}

bool HostCollectiveBackend::Accessible(const void* p, size_t bytes) {
  if (bytes == 0) return true;
  if (p == nullptr) return false;
  for (const void* q : {p, static_cast<const void*>(static_cast<const char*>(p) + bytes - 1)}) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, q) != cudaSuccess) return false;
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeHost) return false;
  }
  return true;
}

bool HostCollectiveBackend::ValidStream(cudaStream_t stream) {
  return cudaStreamQuery(stream) != cudaErrorInvalidResourceHandle;
}

cudaError_t HostCollectiveBackend::EnqueueUnit(const std::vector<cudaStream_t>& streams,
                                               Unit unit) {
  const cudaStream_t launch = streams[0];
  // The other streams' earlier work comes first, their later work after.
  auto order = [this](cudaStream_t before, cudaStream_t after) {
    cudaEvent_t ev = nullptr;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return;
    if (cudaEventRecord(ev, before) == cudaSuccess) (void)cudaStreamWaitEvent(after, ev, 0);
    (void)cudaEventDestroy(ev);
  };
  for (size_t k = 1; k < streams.size(); ++k) order(streams[k], launch);
  // Device memory is host memory: the engine works on the buffers in place.
  const cudaError_t err = EnqueueFallible(
      launch, [unit = std::move(unit)]() -> cudaError_t { return unit.run(unit.ops); });
  for (size_t k = 1; k < streams.size(); ++k) order(launch, streams[k]);
  return err;
}

absl::Status HostCollectiveBackend::ReadDevice(void* dst, uint64_t addr, size_t n) {
  std::memcpy(dst, reinterpret_cast<const void*>(addr), n);
  return absl::OkStatus();
}

absl::Status HostCollectiveBackend::WriteDevice(uint64_t addr, const void* src, size_t n) {
  std::memcpy(reinterpret_cast<void*>(addr), src, n);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> MakeHostCollectiveBackend(const BackendOptions& options) {
  absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> b =
      HostCollectiveBackend::Create(options);
  if (!b.ok()) return b.status();
  return std::unique_ptr<Backend>(std::move(*b));
}

}  // namespace host
}  // namespace agent
}  // namespace revenant
