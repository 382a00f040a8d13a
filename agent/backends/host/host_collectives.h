// HostCollectiveBackend: the host backend plus NCCL, through the Gloo
// collectives shared with the cuda backend (agent/backends/common/
// gloo_collectives.h: ids, rendezvous, groups, errors, recovery).
//
//   BackendOptions options;  options.rank = r;
//   absl::StatusOr<std::unique_ptr<Backend>> b = MakeHostCollectiveBackend(options);
//   ncclUniqueId id;  (*b)->ncclGetUniqueId(&id);        // on one rank, shared by the app
//   ncclComm_t comm;  (*b)->ncclCommInitRank(&comm, n, id, r);
//   (*b)->ncclAllReduce(dev_send, dev_recv, count, ncclFloat, ncclSum, comm, stream);
//
// What is particular to the host backend: device memory is plain memory, so
// a unit's engine reads and writes the application's buffers in place; each
// unit is a fallible operation of its stream, run by the stream's worker
// (the other streams of a group are ordered before and after it with
// events); a failed unit becomes a deferred error of the stream that its
// next synchronization returns. State transfer reads and writes the device
// range directly.
#ifndef REVENANT_AGENT_BACKENDS_HOST_HOST_COLLECTIVES_H_
#define REVENANT_AGENT_BACKENDS_HOST_HOST_COLLECTIVES_H_

#include <nccl.h>

#include <atomic>
#include <thread>
#include <map>
#include <utility>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/backends/common/gloo_collectives.h"
#include "agent/backends/host/host_backend.h"
#include "collective/collective_engine.h"

namespace revenant {
namespace agent {
namespace host {

// NCCL 2.28.9, the version the API table follows.
inline constexpr int kHostNcclVersion = kGlooNcclVersion;

class HostCollectiveBackend : public HostBackend, private CollectiveDevice {
 public:
  // As HostBackend::Create.
  static absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> Create(
      const BackendOptions& options);
  ~HostCollectiveBackend() override;

  ncclResult_t ncclGetVersion(int* version) override { return nccl_->ncclGetVersion(version); }
  ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) override {
    return nccl_->ncclGetUniqueId(uniqueId);
  }
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                int rank) override {
    return nccl_->ncclCommInitRank(comm, nranks, commId, rank);
  }
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                      ncclConfig_t* config) override {
    return nccl_->ncclCommInitRankConfig(comm, nranks, commId, rank, config);
  }
  ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                             ncclConfig_t* config) override {
    return nccl_->ncclCommSplit(comm, color, key, newcomm, config);
  }
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override {
    return nccl_->ncclCommFinalize(comm);
  }
  ncclResult_t ncclCommAbort(ncclComm_t comm) override { return nccl_->ncclCommAbort(comm); }
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override { return nccl_->ncclCommDestroy(comm); }
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) override {
    return nccl_->ncclCommGetAsyncError(comm, asyncError);
  }
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) override {
    return nccl_->ncclCommCount(comm, count);
  }
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) override {
    return nccl_->ncclCommUserRank(comm, rank);
  }
  ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) override {
    return nccl_->ncclCommCuDevice(comm, device);
  }
  ncclResult_t ncclGroupStart() override { return nccl_->ncclGroupStart(); }
  ncclResult_t ncclGroupEnd() override { return nccl_->ncclGroupEnd(); }
  ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                             cudaStream_t stream) override {
    return nccl_->ncclAllReduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
  }
  ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             ncclDataType_t datatype, ncclComm_t comm,
                             cudaStream_t stream) override {
    return nccl_->ncclAllGather(sendbuff, recvbuff, sendcount, datatype, comm, stream);
  }
  ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) override {
    return nccl_->ncclBroadcast(sendbuff, recvbuff, count, datatype, root, comm, stream);
  }
  ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) override {
    return nccl_->ncclBcast(buff, count, datatype, root, comm, stream);
  }
  ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t stream) override {
    return nccl_->ncclReduce(sendbuff, recvbuff, count, datatype, op, root, comm, stream);
  }
  ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream) override {
    return nccl_->ncclReduceScatter(sendbuff, recvbuff, recvcount, datatype, op, comm, stream);
  }
  ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclComm_t comm,
                            cudaStream_t stream) override {
    return nccl_->ncclAlltoAll(sendbuff, recvbuff, count, datatype, comm, stream);
  }
  ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream) override {
    return nccl_->ncclGather(sendbuff, recvbuff, count, datatype, root, comm, stream);
  }
  ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) override {
    return nccl_->ncclScatter(sendbuff, recvbuff, count, datatype, root, comm, stream);
  }
  ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream) override {
    return nccl_->ncclSend(sendbuff, count, datatype, peer, comm, stream);
  }
  ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream) override {
    return nccl_->ncclRecv(recvbuff, count, datatype, peer, comm, stream);
  }

  // --- Recovery (docs/recovery.md) ---------------------------------------------
  void SetReplayPhase(ReplayPhase phase) override { nccl_->SetReplayPhase(phase); }
  absl::Status JoinRecovery(uint64_t minibatch, bool* behind) override {
    return nccl_->JoinRecovery(minibatch, behind);
  }
  void MarkBoundary(uint64_t minibatch) override { nccl_->MarkBoundary(minibatch); }
  void NoteStateRestored(uint64_t minibatch) override { nccl_->NoteStateRestored(minibatch); }
  absl::Status BeginValidationReplay() override { return nccl_->BeginValidationReplay(); }
  absl::Status EndValidationReplay() override { return nccl_->EndValidationReplay(); }

 private:
  HostCollectiveBackend(DeviceRange range,
                        std::unique_ptr<hostkernel::HostKernelRegistry> registry, int launch_graph_max);

  // CollectiveDevice: device memory is plain memory the engine reads and
  // writes in place; a unit is a fallible operation of the stream's worker.
  bool Accessible(const void* p, size_t bytes) override;
  bool ValidStream(cudaStream_t stream) override;
  cudaError_t EnqueueUnit(const std::vector<cudaStream_t>& streams, Unit unit) override;
  DeviceRange Range() const override { return device_range(); }
  std::vector<std::pair<uint64_t, uint64_t>> LiveAllocations() override {
    return HostBackend::LiveAllocations();
  }
  absl::Status ReadDevice(void* dst, uint64_t addr, size_t n) override;
  absl::Status WriteDevice(uint64_t addr, const void* src, size_t n) override;

  std::unique_ptr<GlooCollectives> nccl_;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeHostCollectiveBackend(const BackendOptions& options);

}  // namespace host
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_HOST_HOST_COLLECTIVES_H_
