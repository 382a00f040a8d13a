// GlooCollectives: the NCCL rows of a backend served by a
// collective::GlooEngine per communicator, with the recovery protocol of
// docs/recovery.md. Both backends use it: the host backend
// (host_collectives.h) and the cuda backend with --collectives=gloo
// (cuda_gloo.h). What differs between them is a CollectiveDevice: how a
// unit is put in stream order, how its buffers reach host memory the engine
// can read and write, which allocations exist and how their bytes are read
// and written during a state transfer.
//
//   class MyDevice : public CollectiveDevice { ... };
//   MyDevice device;
//   GlooCollectives nccl(&device, options);       // "device" must outlive it
//   ncclUniqueId id;  nccl.ncclGetUniqueId(&id);  // on one rank, shared by the app
//   ncclComm_t comm;  nccl.ncclCommInitRank(&comm, n, id, r);
//   nccl.ncclAllReduce(dev_send, dev_recv, count, ncclFloat, ncclSum, comm, stream);
//
// Unique id: 8 bytes of magic, then a 16-byte random token (getrandom), the
// rest zero. Every member of a communicator rendezvous through a Gloo
// FileStore in <job root>/collectives-<token hex> (in a job spanning nodes:
// through etcd, under <REVENANT_RDZV_PREFIX>collectives-<token hex>/,
// collective/etcd_gloo_store.h), inside the job's 0700
// directory, so no other user can see the token or create the rendezvous
// first (created 0700 by whoever comes first, removed by rank 0 once all
// members are connected and again at destroy; without a job directory, in
// in-process tests only, /dev/shm/revenant-collectives-<token hex>). The
// ranks of a job on this node need nothing but the id the application
// already passes around. Init blocks until every member
// joined, bounded by REVENANT_COLLECTIVE_TIMEOUT_S (default 60 s).
//
// Collectives run in stream order: each unit (one call, or one NCCL group of
// a communicator) is handed to CollectiveDevice::EnqueueUnit, which runs it
// after the stream's earlier work and before its later work. Arguments are
// checked when the call is made (communicator, stream, type, op, root/peer,
// buffers inside live allocations: ncclInvalidArgument). What only the
// members together can see (disagreeing counts or types, a dead peer, a
// timeout) fails the unit when it runs: the communicator's async error
// becomes ncclInvalidArgument / ncclRemoteError / ncclSystemError (what
// ncclCommGetAsyncError reports) and the unit's CUDA error
// (cudaErrorInvalidValue / cudaErrorLaunchFailure / cudaErrorLaunchTimeout)
// goes to the device, which defers it to the stream. The agent never crashes
// on them.
//
// Groups: operations issued between ncclGroupStart and the outermost
// ncclGroupEnd are queued and, per communicator, run as one engine group on
// the stream of the communicator's first queued operation (the device orders
// the other streams involved before and after it), so send/recv pairs in any
// order do not deadlock. Members must issue the same groups.
//
// Types: all of NCCL's integer and float types, half and bfloat16 included
// (collective_engine.h); fp8 is refused (ncclInvalidArgument).
// Not supported: ncclCommSplit/ncclCommShrink (ncclInvalidUsage),
// user-defined reduction ops, ncclMemAlloc and buffer registration.
//
// Recovery (docs/recovery.md): every unit has an ordinal (minibatch, index);
// a unit that fails because a member died waits for the job's next epoch
// (<job>/epoch), forms a new engine over all ranks, exchanges reports, hands
// the replicated state to replacements and the results of completed units to
// whoever lacks them, and retries. A replacement's communicators (created
// while it replays its journal) join at the epoch instead of the original
// rendezvous.
//
// Thread safety: the NCCL rows are called from the agent's executor thread;
// units run on threads of the device; the epoch watcher runs on its own.
#ifndef REVENANT_AGENT_BACKENDS_COMMON_GLOO_COLLECTIVES_H_
#define REVENANT_AGENT_BACKENDS_COMMON_GLOO_COLLECTIVES_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "collective/collective_engine.h"

namespace revenant {
namespace collective {
class GlooEngine;
}  // namespace collective
}  // namespace revenant

namespace revenant {
namespace agent {

// NCCL 2.28.9, the version the API table follows.
inline constexpr int kGlooNcclVersion = 22809;

// What a backend provides to GlooCollectives.
class CollectiveDevice {
 public:
  virtual ~CollectiveDevice() = default;

  // Whether [p, p + bytes) is memory a collective may read or write (a live
  // device allocation or host memory shared with the application).
  virtual bool Accessible(const void* p, size_t bytes) = 0;
  // Whether `stream` names a live stream (0 and the default streams do).
  virtual bool ValidStream(cudaStream_t stream) = 0;

  // One collective unit, its buffers as the application named them.
  struct Unit {
    // The communicator's identity (stable while the communicator lives;
    // units of one communicator come in issue order).
    const void* comm = nullptr;
    std::vector<collective::Operation> ops;
    // Bytes each operation reads from `send` and writes to `recv`.
    std::vector<size_t> send_bytes;
    std::vector<size_t> recv_bytes;
    // Runs the unit. `ops` are the unit's operations with `send`/`recv`
    // pointing to host memory holding the send bytes (read) and receiving
    // the results (written); the device copies the results back to the
    // receive buffers after `run` returned success. Called exactly once, on
    // a thread of the device, in stream order; returns the CUDA error to
    // defer to the stream (cudaSuccess when it worked).
    std::function<cudaError_t(const std::vector<collective::Operation>& ops)> run;
  };
  // Puts `unit` in stream order on streams[0]: after all earlier work of
  // every stream in `streams`, before all their later work. Returns the
  // immediate error (a bad stream).
  virtual cudaError_t EnqueueUnit(const std::vector<cudaStream_t>& streams, Unit unit) = 0;
  // The communicator `comm` was destroyed: its units already enqueued still
  // run; nothing else comes.
  virtual void ForgetComm(const void* comm) { (void)comm; }

  // --- State transfer (recovery) -------------------------------------------------
  virtual DeviceRange Range() const = 0;
  // Live device allocations (start address, size).
  virtual std::vector<std::pair<uint64_t, uint64_t>> LiveAllocations() = 0;
  // Copies device bytes [addr, addr + n) to/from host memory, synchronously
  // (bounded), without waiting for the application's streams.
  virtual absl::Status ReadDevice(void* dst, uint64_t addr, size_t n) = 0;
  virtual absl::Status WriteDevice(uint64_t addr, const void* src, size_t n) = 0;
};

// Recovery settings (from BackendOptions).
struct GlooCollectivesOptions {
  // This rank's job directory; its parent holds the epoch file. Empty: no
  // recovery.
  std::string job_dir;
  // How long a failed collective waits for the job's next epoch; 0: no
  // recovery.
  absl::Duration recovery_timeout = absl::ZeroDuration();
  // BackendOptions::crash_in_recovery.
  std::function<void()> crash_in_recovery;
  // Keep each collective's results for a replay (recovery, validator) until
  // the minibatch after next begins. Off when the agent does not journal:
  // without minibatch boundaries the results would pile up.
  bool cache_results = true;
  // Name in log lines ("host", "cuda").
  std::string backend = "host";
  // A job spanning nodes: the etcd (HOST:PORT) holding the rendezvous of
  // every communicator, under `store_prefix` (REVENANT_RDZV_ENDPOINT,
  // REVENANT_RDZV_PREFIX); empty: the job directory. `hostname`: the
  // address the Gloo transport listens on (REVENANT_COLLECTIVE_ADDR).
  std::string store_endpoint;
  std::string store_prefix;
  std::string hostname = "127.0.0.1";

  static GlooCollectivesOptions From(const BackendOptions& options, const std::string& backend);
};

struct RecoveryPlan;

class GlooCollectives {
 public:
  // "*device" must outlive this object. Starts the epoch watcher when the
  // job recovers (job_dir and recovery_timeout set).
  GlooCollectives(CollectiveDevice* device, const GlooCollectivesOptions& options);
  // Stops the watcher and drops the communicators. The device must have run
  // (or dropped) every unit before: units hold their communicator.
  ~GlooCollectives();
  GlooCollectives(const GlooCollectives&) = delete;
  GlooCollectives& operator=(const GlooCollectives&) = delete;

  // Stops the epoch watcher (idempotent; the destructor calls it).
  void StopWatcher();
  // Drops every communicator (what the agent does at shutdown).
  void Clear();

  ncclResult_t ncclGetVersion(int* version);
  ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
  ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
  ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                      ncclConfig_t* config);
  ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                             ncclConfig_t* config);
  ncclResult_t ncclCommFinalize(ncclComm_t comm);
  ncclResult_t ncclCommAbort(ncclComm_t comm);
  ncclResult_t ncclCommDestroy(ncclComm_t comm);
  ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
  ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
  ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
  ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
  ncclResult_t ncclGroupStart();
  ncclResult_t ncclGroupEnd();
  ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                             cudaStream_t stream);
  ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                             ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                             ncclDataType_t datatype, int root, ncclComm_t comm,
                             cudaStream_t stream);
  ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                         ncclComm_t comm, cudaStream_t stream);
  ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                          cudaStream_t stream);
  ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream);
  ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm,
                          cudaStream_t stream);
  ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm,
                           cudaStream_t stream);
  ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream);
  ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                        ncclComm_t comm, cudaStream_t stream);

  // --- Recovery (Backend's contract, docs/recovery.md) ----------------------------
  void SetReplayPhase(ReplayPhase phase);
  absl::Status JoinRecovery(uint64_t minibatch, bool* behind);
  void MarkBoundary(uint64_t minibatch);
  void NoteStateRestored(uint64_t minibatch) { restored_minibatch_.store(minibatch); }
  // Validation replay (Backend's contract, agent/validator.h): units of the
  // current minibatch, counted again from its first, take the results
  // cached from their first run instead of running.
  absl::Status BeginValidationReplay();
  absl::Status EndValidationReplay();

  // Bytes a state transfer moves per broadcast (allocations travel in
  // pieces of at most this size).
  static constexpr size_t kStateChunk = 8u << 20;

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

  std::shared_ptr<Comm> FindComm(ncclComm_t comm);
  // Checks one operation, then queues it (inside a group) or enqueues it.
  ncclResult_t Submit(ncclComm_t comm, collective::Operation op, cudaStream_t stream);
  // Enqueues `ops` (all of `comm`) as one unit on `streams[0]`.
  ncclResult_t Launch(std::shared_ptr<Comm> comm, std::vector<collective::Operation> ops,
                      std::vector<cudaStream_t> streams);
  // Runs one unit (buffers in host memory): from results received during a
  // recovery, else through the engine, recovering when a peer died.
  absl::Status RunUnit(Comm& comm, Ordinal ordinal, const std::vector<collective::Operation>& ops);
  // The recovery protocol of one communicator at the job's next epoch:
  // a new engine over all ranks (replacements included), reports, state
  // transfer to replacements, results of completed units to whoever lacks
  // them. `pending` is the unit this rank is about to run.
  absl::Status RecoverComm(Comm& comm, Ordinal pending, bool replacement, uint64_t minibatch,
                           bool* behind);
  // RecoverComm's steps: waits for an epoch newer than the communicator's
  // (returns it, 0: none before `deadline`); forms its engine over all
  // ranks (preempted by a newer epoch; `*rendezvous_dir` names its
  // rendezvous); the reports, the plan and the state transfer over it
  // (`*no_survivor`: the plan found none, no later epoch can help); the
  // results of completed units to whoever lacks them (`*shared`: how many).
  int WaitForEpoch(Comm& comm, absl::Time deadline);
  absl::StatusOr<std::unique_ptr<collective::GlooEngine>> FormEpoch(const Comm& comm,
                                                                    int declared,
                                                                    absl::Time deadline,
                                                                    std::string* rendezvous_dir);
  absl::Status RejoinEpoch(Comm& comm, collective::CollectiveEngine& e, Ordinal pending,
                           bool replacement, uint64_t minibatch, bool* behind, absl::Time start,
                           bool* no_survivor);
  absl::Status ShareCompletedUnits(Comm& comm, collective::CollectiveEngine& e,
                                   const RecoveryPlan& plan, Ordinal pending, uint64_t* shared);
  // Moves every live allocation of rank `source` to the replacements.
  absl::Status TransferState(Comm& comm, collective::CollectiveEngine& e, int source,
                             bool replacement);
  // Byte extents of each operation's send and receive buffers.
  static std::vector<size_t> SendBytes(const Comm& comm,
                                       const std::vector<collective::Operation>& ops);
  static std::vector<size_t> RecvBytes(const Comm& comm,
                                       const std::vector<collective::Operation>& ops);
  int ReadEpoch() const;
  // When the job declares a recovery epoch, a survivor may still be blocked
  // in a collective with the dead member (a send that never fails on its
  // own): this thread aborts such engines so the survivor joins promptly.
  void WatchEpochs();

  CollectiveDevice* const device_;
  const std::string log_name_;
  std::string job_root_;
  std::string store_endpoint_, store_prefix_, hostname_;
  absl::Duration recovery_timeout_ = absl::ZeroDuration();
  std::function<void()> crash_in_recovery_;
  bool cache_results_ = true;
  std::atomic<ReplayPhase> replay_phase_{ReplayPhase::kNone};
  // The minibatch whose boundary state a boundary snapshot restored (a
  // replacement), 0: none.
  std::atomic<uint64_t> restored_minibatch_{0};
  // Validation replay (executor thread): each communicator's unit counter
  // as the real run left it (restored at the end); units that found no
  // cached result (counted where units run).
  bool validating_ = false;
  std::vector<std::pair<std::shared_ptr<Comm>, uint64_t>> validation_saved_;
  std::atomic<uint64_t> validation_misses_{0};
  // Copies the cached receive buffers of unit `ordinal` into `ops`' receive
  // buffers; false when there are none of the right sizes.
  bool AnswerFromCache(Comm& comm, Ordinal ordinal, const std::vector<collective::Operation>& ops);
  std::thread watcher_;
  std::atomic<bool> stop_watcher_{false};

  std::mutex nccl_mu_;
  absl::flat_hash_map<Comm*, std::shared_ptr<Comm>> comms_ ABSL_GUARDED_BY(nccl_mu_);
  int group_depth_ ABSL_GUARDED_BY(nccl_mu_) = 0;
  std::vector<Queued> group_ ABSL_GUARDED_BY(nccl_mu_);
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_COMMON_GLOO_COLLECTIVES_H_
