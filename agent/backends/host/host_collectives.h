// HostCollectiveBackend: the host backend plus NCCL, through a
// collective::GlooEngine per communicator.
//
//   BackendOptions options;  options.rank = r;
//   absl::StatusOr<std::unique_ptr<Backend>> b = MakeHostCollectiveBackend(options);
//   ncclUniqueId id;  (*b)->ncclGetUniqueId(&id);        // on one rank, shared by the app
//   ncclComm_t comm;  (*b)->ncclCommInitRank(&comm, n, id, r);
//   (*b)->ncclAllReduce(dev_send, dev_recv, count, ncclFloat, ncclSum, comm, stream);
//
// Unique id: 8 bytes of magic, then a 16-byte random token (/dev/urandom),
// the rest zero. Every member of a communicator rendezvous through a Gloo
// FileStore in /dev/shm/revenant-collectives-<token hex> (created 0700 by
// whoever comes first, removed by rank 0 once all members are connected and
// again at destroy), so the ranks of a job on this node need nothing but the
// id the application already passes around. Init blocks until every member
// joined, bounded by REVENANT_COLLECTIVE_TIMEOUT_S (default 60 s).
//
// Collectives run in stream order: each is a fallible operation of its
// stream, executed by the stream's worker on the device addresses directly
// (device memory on the host backend is plain memory). Arguments are checked
// when the call is made (communicator, stream, type, op, root/peer, buffers
// inside live allocations: ncclInvalidArgument). What only the members
// together can see (disagreeing counts or types, a dead peer, a timeout)
// fails the operation when it runs: the communicator's async error becomes
// ncclInvalidArgument / ncclRemoteError / ncclSystemError (what
// ncclCommGetAsyncError reports) and the stream gets a deferred CUDA error
// (cudaErrorInvalidValue / cudaErrorLaunchFailure / cudaErrorLaunchTimeout)
// that its next synchronization returns. The agent never crashes on them.
//
// Groups: operations issued between ncclGroupStart and the outermost
// ncclGroupEnd are queued and, per communicator, run as one engine group on
// the stream of the communicator's first queued operation (the other streams
// involved are ordered before and after it with events), so send/recv pairs
// in any order do not deadlock. Members must issue the same groups.
//
// Types: all of NCCL's integer and float types, half and bfloat16 included
// (collective_engine.h); fp8 is refused (ncclInvalidArgument).
// Not supported: ncclCommSplit/ncclCommShrink (ncclInvalidUsage),
// user-defined reduction ops, ncclMemAlloc and buffer registration.
// Recovery: the engine maps application ranks to engine ranks
// (collective::VirtualRanks), identity here.
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
#include "agent/backends/host/host_backend.h"
#include "collective/collective_engine.h"

namespace revenant {
namespace agent {
namespace host {

// NCCL 2.28.9, the version the API table follows.
inline constexpr int kHostNcclVersion = 22809;

class HostCollectiveBackend : public HostBackend {
 public:
  // As HostBackend::Create.
  static absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> Create(
      const BackendOptions& options);
  ~HostCollectiveBackend() override;

  ncclResult_t ncclGetVersion(int* version) override;
  ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) override;
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId,
                                int rank) override;
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                      ncclConfig_t* config) override;
  ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                             ncclConfig_t* config) override;
  ncclResult_t ncclCommFinalize(ncclComm_t comm) override;
  ncclResult_t ncclCommAbort(ncclComm_t comm) override;
  ncclResult_t ncclCommDestroy(ncclComm_t comm) override;
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError) override;
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) override;
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) override;
  ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) override;
  ncclResult_t ncclGroupStart() override;
  ncclResult_t ncclGroupEnd() override;
  ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                             cudaStream_t stream) override;
  ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             ncclDataType_t datatype, ncclComm_t comm,
                             cudaStream_t stream) override;
  ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream) override;
  ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t stream) override;
  ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream) override;
  ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclComm_t comm,
                            cudaStream_t stream) override;
  ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream) override;
  ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream) override;
  ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream) override;
  ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream) override;

  // --- Recovery (docs/recovery.md) ---------------------------------------------
  void SetReplayPhase(ReplayPhase phase) override;
  absl::Status JoinRecovery(uint64_t minibatch, bool* behind) override;
  void MarkBoundary(uint64_t minibatch) override;

 private:
  // A collective unit's place in the job: (minibatch, index within it).
  // Every rank issues the same units in the same order, so ordinals agree
  // across ranks and survive an agent's replacement (its journal gives the
  // minibatch, the replay the index).
  using Ordinal = std::pair<uint64_t, uint64_t>;

  struct Comm {
    int rank = 0;
    int nranks = 0;
    std::string dir;  // rendezvous directory (epoch 0)
    std::string token;
    std::unique_ptr<collective::CollectiveEngine> engine;
    std::atomic<int> async_error{ncclSuccess};
    std::atomic<bool> aborted{false};
    // Created by a replacement's replay: joins the others at the first unit
    // it runs (or in JoinRecovery).
    bool joining = false;
    // Recovery state. `minibatch`/`next_index` belong to the executor thread.
    uint64_t minibatch = 0;
    uint64_t next_index = 0;
    std::mutex rmu;
    int epoch = 0;  // guarded by rmu
    bool recovering = false;  // guarded by rmu: the engine was aborted for an epoch
    // Results (receive buffers) of completed units of the current and the
    // previous minibatch: what survivors hand a replacement that replays
    // them, and each other when they stopped at different units.
    std::map<Ordinal, std::vector<std::string>> cache;        // guarded by rmu
    std::map<Ordinal, std::vector<std::string>> prereceived;  // guarded by rmu
  };
  struct Queued {
    std::shared_ptr<Comm> comm;
    collective::Operation op;
    cudaStream_t stream;
  };

  HostCollectiveBackend(DeviceRange range,
                        std::unique_ptr<hostkernel::HostKernelRegistry> registry);

  std::shared_ptr<Comm> FindComm(ncclComm_t comm);
  // Whether [p, p + bytes) lies in device-accessible memory.
  bool Accessible(const void* p, size_t bytes);
  // Checks one operation, then queues it (inside a group) or enqueues it.
  ncclResult_t Submit(ncclComm_t comm, collective::Operation op, cudaStream_t stream);
  // Enqueues `ops` (all of `comm`) as one group on `streams[0]`, ordering
  // the other streams around it.
  ncclResult_t Launch(std::shared_ptr<Comm> comm, std::vector<collective::Operation> ops,
                      std::vector<cudaStream_t> streams);
  // Runs one unit on the stream's worker: from results received during a
  // recovery, else through the engine, recovering when a peer died.
  absl::Status RunUnit(Comm& comm, Ordinal ordinal, const std::vector<collective::Operation>& ops);
  // The recovery protocol of one communicator at the job's next epoch:
  // a new engine over all ranks (replacements included), reports, state
  // transfer to replacements, results of completed units to whoever lacks
  // them. `pending` is the unit this rank is about to run.
  absl::Status RecoverComm(Comm& comm, Ordinal pending, bool replacement, uint64_t minibatch,
                           bool* behind);
  // Byte extents of each operation's receive buffer.
  static std::vector<size_t> RecvBytes(const Comm& comm,
                                       const std::vector<collective::Operation>& ops);
  int ReadEpoch() const;

  ReplayPhase replay_phase_ = ReplayPhase::kNone;  // executor thread
  std::string job_root_;
  absl::Duration recovery_timeout_ = absl::ZeroDuration();
  bool chaos_kill_in_recovery_ = false;
  // When the job declares a recovery epoch, a survivor may still be blocked
  // in a collective with the dead member (a send that never fails on its
  // own): this thread aborts such engines so the survivor joins promptly.
  void WatchEpochs();
  std::thread watcher_;
  std::atomic<bool> stop_watcher_{false};

  std::mutex nccl_mu_;
  absl::flat_hash_map<Comm*, std::shared_ptr<Comm>> comms_ ABSL_GUARDED_BY(nccl_mu_);
  int group_depth_ ABSL_GUARDED_BY(nccl_mu_) = 0;
  std::vector<Queued> group_ ABSL_GUARDED_BY(nccl_mu_);
};

absl::StatusOr<std::unique_ptr<Backend>> MakeHostCollectiveBackend(const BackendOptions& options);

}  // namespace host
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_HOST_HOST_COLLECTIVES_H_
