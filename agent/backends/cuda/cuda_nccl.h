// CudaNccl: the cuda backend's NCCL rows, through the real libnccl.
//
//   CudaNccl nccl(/*device=*/0, job_dir);
//   ncclUniqueId id;  nccl.GetUniqueId(&id);
//   ncclComm_t c;     nccl.CommInitRankConfig(&c, n, id, r, /*config=*/nullptr);
//   nccl.AllReduce(send, recv, count, ncclFloat, ncclSum, c, stream);
//
// Communicators are created non-blocking (the application's config, merged
// with blocking = 0), so no NCCL call can block the agent forever: after
// every call that may answer ncclInProgress, the agent polls
// ncclCommGetAsyncError (every 5 us for the first 20 polls, then every
// 100 us) until the operation settled, bounded
// by REVENANT_COLLECTIVE_TIMEOUT_S (default 60 s); on timeout the
// communicator is aborted (ncclCommAbort on a detached thread, joined with a
// bound) and the call fails with ncclSystemError. The application still sees
// blocking semantics (it never gets ncclInProgress). Error messages carry
// ncclGetLastError(comm).
//
// A watchdog thread (started with the first communicator) aborts every
// communicator when
//   - one reports an asynchronous error (a peer died, a network error),
//   - the job declares a recovery epoch (<job>/epoch, as revenant-run does)
//     and this agent does not recover (with recovery only the communicators
//     that cannot be re-formed, splits and shrinks, are aborted: the others
//     handle the epoch themselves, below),
//   - a synchronization (SyncScope) has been blocked longer than the
//     timeout while communicators exist (a collective waiting for a peer
//     that is gone: NCCL kernels spin until aborted),
// so a survivor's blocked stream synchronization returns; SyncScope then
// turns its result into cudaErrorLaunchFailure (async error, epoch) or
// cudaErrorLaunchTimeout (timeout). Later calls on an aborted communicator
// answer its error without touching NCCL; ncclCommDestroy/Abort on it succeed.
//
// Start agreement (cuda_nccl_start.h): before a communicator is created with
// ncclCommInitRank*, every rank of it checks that its NCCL is >= 2.22 and
// that ranks driving the same GPU each have their own NCCL_HOSTID,
// exchanging one line each through the job directory's parent (a directory
// per unique id; bounded by the timeout); one verdict, the same on every
// rank. A refusal is ncclInvalidUsage and a log line naming the offending
// ranks on every rank; a rank that never joins makes the others fail with
// ncclSystemError. A 1-rank communicator only checks its own NCCL version.
// Shared GPU: with CudaNcclOptions::gpu_shared (revenant-run --gpus with
// more ranks than GPUs) ConfigureSharedGpu sets NCCL_HOSTID to
// "<host>-revenant-rank<r>" and NCCL_SOCKET_IFNAME=lo unless the user set
// them (logged either way): NCCL then treats the ranks as separate hosts and
// connects them over its socket transport. The same NCCL_HOSTID exported to
// every rank is an accidental duplicate, refused by the agreement.
// Warm-up: right after a communicator is created (outside a group), one
// small all-reduce on a stream of its own, waited for with the same bound,
// so connection setup is not charged to the application's first step
// (REVENANT_NCCL_WARMUP=0 turns it off).
//
// Handles: the application gets a virtual handle (the address of the
// agent's record), not NCCL's; the NCCL communicator under it may be
// replaced by a recovery, the handle and the ranks stay.
//
// Recovery (docs/recovery.md, "Over real NCCL"): a communicator is
// recoverable when the job recovers (recovery_timeout > 0), it has several
// ranks and it was made by ncclCommInitRank* (its key: the hash of the
// application's unique id, which a replacement's journal replays too).
//   - Fence: the executor enqueues nothing behind a collective unit (a call,
//     or a communicator's part of an NCCL group, which is held back until
//     ncclGroupEnd and issued then as one group) until its streams passed it
//     (events polled, bounded by the timeout), so the optimizer step never
//     runs on a collective that failed. An in-place unit's input is first
//     copied to a device buffer of the communicator's pool (a retry needs
//     it). A group's unit and a replayed one are waited for before their
//     call returns; any other unit stays in flight (the deferred fence): further
//     collectives of the communicator queue behind it, up to
//     CudaNcclOptions::pipeline units, and it is waited for at the first
//     request that is not a collective (CudaBackend::BeforeRequest ->
//     SettleAll) — work of a stream not tied to the units' streams runs
//     beside them (BeforeStreamWork), an event recorded behind them is
//     waited for (BeforeEventUse) —, at a boundary, or before a collective of another
//     communicator or one overwriting its input or reading its result. A
//     completed unit's results
//     are copied to host memory (current and previous minibatch) for a
//     replacement's replay.
//   - Failure: the communicator's async error (a dead peer: ncclRemoteError
//     within milliseconds), a recovery epoch declared while waiting, or the
//     timeout. The unit then waits for the job's next epoch, aborts its
//     communicator (ncclCommAbort on a detached thread, bounded: it ends the
//     spinning kernels; ncclCommShrink of a communicator whose peer died
//     fails on NCCL 2.28, and 2.28 has no ncclCommGrow), agrees with the
//     other members through <job>/nccl-recovery-<key>-e<E>/
//     (cuda_nccl_recovery.h: reports, rank 0's fresh unique id, the plan of
//     recovery_plan.h shared with the Gloo engine, results of completed
//     units, the state for replacements), creates the new communicator
//     (ncclCommInitRankConfig, non-blocking, bounded, preempted by a newer
//     epoch), restores the in-place input and runs the unit again. Units in
//     flight behind a failed one failed with it: in their order, each takes
//     the survivors' result or runs again on the new communicator.
//   - Replacement: during the replay its communicators of several ranks are
//     created without NCCL (they join at the epoch: JoinRecovery at the
//     journal's minibatch boundary, or their first collective in the first
//     minibatch); the setup log's collectives are skipped (history); the
//     minibatch log's collectives take the survivors' results for the units
//     they completed and run jointly from the one they wait in.
// Without recovery a communicator of several ranks is refused during a
// replay (ncclInvalidUsage and a log line), as are splits and shrinks of
// one (no unique id to re-form from); a 1-rank communicator is re-created
// with a fresh unique id and its collectives run for real.
//
// Thread safety: all methods may be called from several threads.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/backends/common/recovery_plan.h"
#include "agent/backends/cuda/cuda_nccl_recovery.h"

namespace revenant {
namespace agent {
namespace cuda {

struct CudaNcclOptions {
  int rank = -1;  // the agent's rank (its NCCL_HOSTID when the GPU is shared)
  // Other ranks use this GPU too (revenant-run --gpus with more ranks than
  // GPUs): NCCL_HOSTID and NCCL_SOCKET_IFNAME are set unless the user did.
  bool gpu_shared = false;
  // How long a failed collective waits for the job's next recovery epoch
  // and re-forms its communicator; 0: no recovery (no fence either).
  absl::Duration recovery_timeout = absl::ZeroDuration();
  // BackendOptions::crash_in_recovery.
  std::function<void()> crash_in_recovery;
  // Keep each collective's results (current and previous minibatch) for a
  // replacement's replay; off when the agent does not journal.
  bool cache_results = true;
  // How many collective units of a recoverable communicator may be in
  // flight at once (REVENANT_COLLECTIVE_PIPELINE, default 8); 1: each is
  // waited for at its call (docs/recovery.md "Where the fence is").
  int pipeline = 8;
  // Kernels, copies and cuBLAS calls of streams not tied to a unit in
  // flight run beside it (REVENANT_COLLECTIVE_OVERLAP); false: any request
  // that is not a collective waits for the units in flight first.
  bool overlap = true;
  // Device memory through which results of at least `stage_min_bytes` go to
  // their pinned buffers (REVENANT_RESULT_STAGING_MIB): a device-to-device
  // copy of each `stage_chunk_bytes` piece on the collective's stream into a
  // slot of this ring, then the device-to-host copy on the agent's staging
  // stream. 0: the device-to-host copy runs on the collective's stream.
  size_t stage_bytes = size_t{256} << 20;
  size_t stage_chunk_bytes = size_t{32} << 20;
  size_t stage_min_bytes = size_t{1} << 20;
  // Free pinned result buffers kept for reuse before the first boundary
  // says how many a minibatch needs (PinnedPool).
  size_t pinned_keep_bytes = size_t{1} << 30;
  // Result buffers of at least this size are anonymous memory whose pages
  // several threads fault in before it is registered, smaller ones come
  // from cudaMallocHost (REVENANT_RESULT_PIN_REGISTER; SIZE_MAX: all of them).
  size_t pin_register_min_bytes = size_t{1} << 20;

  static CudaNcclOptions From(const BackendOptions& options);
};

// The copy of kept results to the host on the staging stream, landed once
// `event` (recorded behind it) completes; shared by the buffers of one unit.
// The unit's fence does not wait for it (the application's stream passed
// the device-to-device copy into the ring already): whoever reads or gives
// back a buffer it writes waits, bounded.
class HostCopy {
 public:
  // `stuck`: shared by the copies of one staging stream; set once one of
  // them did not land in time, after which the others are not waited for
  // either (a hung device costs one timeout, not one per buffer).
  HostCopy(cudaEvent_t event, absl::Duration timeout, std::shared_ptr<std::atomic<bool>> stuck)
      : event_(event), timeout_(timeout), stuck_(std::move(stuck)) {}
  ~HostCopy();
  HostCopy(const HostCopy&) = delete;
  HostCopy& operator=(const HostCopy&) = delete;
  // Whether the copy landed, waiting for it at most the timeout given at
  // construction (false, logged, when it did not or CUDA reported an error).
  bool Wait();

 private:
  cudaEvent_t event_;
  const absl::Duration timeout_;
  const std::shared_ptr<std::atomic<bool>> stuck_;
  std::atomic<bool> landed_{false};
};

// Pinned host buffers for the results of completed units, reused from
// minibatch to minibatch (a step's gradient all-reduces have the same sizes
// every step): a result is copied from the device straight into one, never
// again on the CPU. The pool outlives every buffer it handed out.
class PinnedPool {
 public:
  struct Giver {
    Giver() : bytes(0) {}
    Giver(std::shared_ptr<PinnedPool> p, size_t n) : pool(std::move(p)), bytes(n) {}
    // A buffer a copy may still write goes back once the copy landed; one
    // whose copy never lands is never reused (a late write would land in
    // another result).
    void operator()(char* p) const {
      if (copy != nullptr && !copy->Wait()) return;
      pool->Give(p, bytes);
    }
    std::shared_ptr<PinnedPool> pool;
    size_t bytes;
    std::shared_ptr<HostCopy> copy;  // the copy to the host writing it, if any
  };
  using Buf = std::unique_ptr<char, Giver>;
  // `keep_bytes`: free buffers kept for reuse at first (KeepAtLeast raises it).
  // Buffers of at least `register_min_bytes` are made as anonymous memory
  // whose pages up to 8 threads fault in (PopulateWritable), then registered
  // (cudaHostRegister): a 256 MiB cudaMallocHost faults and pins its pages on
  // the calling thread while it holds the driver (tens of milliseconds that
  // the collectives in flight and the next launch wait out); registering
  // resident pages holds it ~10 ms (docs/performance.md). Smaller ones, and
  // any whose registration fails, come from cudaMallocHost.
  explicit PinnedPool(size_t keep_bytes = size_t{1} << 30,
                      size_t register_min_bytes = size_t{1} << 20)
      : keep_bytes_(keep_bytes), register_min_bytes_(register_min_bytes) {}
  // A buffer of exactly n bytes (a free one of that size, else a new
  // one); null when no pinned memory could be had.
  static Buf Take(const std::shared_ptr<PinnedPool>& pool, size_t n);
  // Keeps at least `bytes` of free buffers for reuse (the results a
  // boundary drops at once are taken again by the next minibatch's units).
  // Beyond the bound the buffers given back longest ago go first, whatever
  // their size: when a job's result sizes change (a benchmark's next size, a
  // model's next phase), buffers of the old sizes must not hold the bound
  // while each minibatch makes and frees buffers of the new one (a 256 MiB
  // cudaMallocHost holds the driver for tens of milliseconds, cudaFreeHost
  // waits for the device).
  void KeepAtLeast(size_t bytes);
  // Buffers made so far, those of them registered, and the time making them
  // took (a test's view of reuse; the agent logs them at exit).
  uint64_t made() const { return made_.load(); }
  uint64_t registered() const { return registered_made_.load(); }
  double made_ms() const { return made_ns_.load() / 1e6; }
  ~PinnedPool();

 private:
  void Give(char* p, size_t n);
  // A new buffer of n bytes (null when none could be had), and its end.
  char* Make(size_t n);
  void Release(char* p);
  std::mutex mu_;
  // Oldest given back first; Take scans from the newest.
  std::deque<std::pair<size_t, char*>> free_;  // guarded by mu_
  size_t free_bytes_ = 0;                  // guarded by mu_
  size_t keep_bytes_;                      // guarded by mu_
  const size_t register_min_bytes_;
  std::mutex registered_mu_;
  // Buffers that are registered mappings (by address), and their lengths.
  absl::flat_hash_map<char*, size_t> mapped_;  // guarded by registered_mu_
  std::atomic<uint64_t> made_{0}, registered_made_{0}, made_ns_{0};
};
// A completed unit's result for one operation: staged into a pinned
// buffer, or received from the survivors during a recovery.
struct ResultBuf {
  ResultBuf() : bytes(0) {}
  PinnedPool::Buf pinned;
  std::string owned;
  size_t bytes;
  const char* data() const { return pinned ? pinned.get() : owned.data(); }
  // Whether data() holds the result: its copy to the host landed (waited
  // for, bounded by the collective timeout).
  bool Landed() const {
    return !pinned || pinned.get_deleter().copy == nullptr || pinned.get_deleter().copy->Wait();
  }
};

class CudaNccl {
 public:
  // `job_dir`: this rank's job directory (its parent holds the epoch file);
  // empty: no epoch watching, no recovery.
  CudaNccl(int device, const std::string& job_dir, const CudaNcclOptions& options = {});
  ~CudaNccl();
  CudaNccl(const CudaNccl&) = delete;
  CudaNccl& operator=(const CudaNccl&) = delete;

  // Logs the NCCL_* environment (once per process).
  static void LogEnvironment();
  // REVENANT_COLLECTIVE_TIMEOUT_S, default 60 s.
  static absl::Duration TimeoutFromEnv();

  // Sets NCCL_HOSTID (and NCCL_SOCKET_IFNAME=lo) for `rank` on a shared
  // GPU unless the user set them; logs what NCCL will use. Before any
  // communicator exists.
  static void ConfigureSharedGpu(int rank);

  // How the state transfer reaches the device: the live allocations
  // (address, size) and the base of this rank's device range.
  void SetStateAccess(std::function<std::vector<std::pair<uint64_t, uint64_t>>()> live,
                      uint64_t range_base);

  // How a one-rank collective's copy of up to kDeviceCopyMaxBytes may be
  // issued by the backend (a kernel of its own: cheaper for the issuing
  // thread than cudaMemcpyAsync): `copy` returns false when it did not
  // issue it (memory it cannot vouch for, unaligned, a failed launch), and
  // the copy goes through cudaMemcpyAsync. Called with mu_ held. Without it
  // every copy is a cudaMemcpyAsync.
  using DeviceCopy = std::function<bool(void* dst, const void* src, size_t bytes,
                                        cudaStream_t stream)>;
  static constexpr size_t kDeviceCopyMaxBytes = size_t{4} << 20;
  void SetDeviceCopy(DeviceCopy copy);

  // --- Recovery (Backend's contract, docs/recovery.md) ----------------------------
  // A replay starts (kSetupLog/kMinibatchLog) or ends; a spare's epoch
  // baseline is refreshed.
  void SetReplayPhase(ReplayPhase phase);
  absl::Status JoinRecovery(uint64_t minibatch, bool* behind);
  void MarkBoundary(uint64_t minibatch);
  void NoteStateRestored(uint64_t minibatch) { restored_minibatch_.store(minibatch); }

  ncclResult_t GetVersion(int* version);
  ncclResult_t GetUniqueId(ncclUniqueId* id);
  ncclResult_t CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                  ncclConfig_t* config);
  ncclResult_t CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                         ncclConfig_t* config);
  ncclResult_t CommShrink(ncclComm_t comm, int* exclude, int exclude_count, ncclComm_t* newcomm,
                          ncclConfig_t* config, int flags);
  ncclResult_t CommFinalize(ncclComm_t comm);
  ncclResult_t CommDestroy(ncclComm_t comm);
  ncclResult_t CommAbort(ncclComm_t comm);
  ncclResult_t CommGetAsyncError(ncclComm_t comm, ncclResult_t* error);
  ncclResult_t CommCount(ncclComm_t comm, int* count);
  ncclResult_t CommUserRank(ncclComm_t comm, int* rank);
  ncclResult_t CommCuDevice(ncclComm_t comm, int* device);
  ncclResult_t GroupStart();
  ncclResult_t GroupEnd();
  ncclResult_t AllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                         ncclComm_t comm, cudaStream_t stream);
  ncclResult_t Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                         ncclComm_t comm, cudaStream_t stream);
  ncclResult_t Reduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                      int root, ncclComm_t comm, cudaStream_t stream);
  ncclResult_t AllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                         cudaStream_t stream);
  ncclResult_t ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                             ncclComm_t comm, cudaStream_t stream);
  ncclResult_t AlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t comm,
                        cudaStream_t stream);
  ncclResult_t Gather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                      ncclComm_t comm, cudaStream_t stream);
  ncclResult_t Scatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                       ncclComm_t comm, cudaStream_t stream);
  ncclResult_t Send(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                    cudaStream_t stream);
  ncclResult_t Recv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                    cudaStream_t stream);

  // The deferred fence: waits for every collective unit still in flight,
  // recovering the ones a dead member failed (as their calls would have).
  // Returns the first error of a unit that could not be recovered (its
  // communicator then answers that error). The executor calls it before
  // any request that is not a collective (CudaBackend::BeforeRequest).
  ncclResult_t SettleAll();
  // Whether units are in flight (cheap; any thread).
  bool HasPending() const { return pending_units_.load(std::memory_order_relaxed) > 0; }
  // Pinned buffers made for kept results so far (reuse across minibatches).
  uint64_t PinnedBuffersMade() const { return pinned_pool_->made(); }
  // The result of operation `op` of unit (minibatch, index) kept for a
  // replacement; empty when none is kept (tests).
  std::string KeptResult(ncclComm_t comm, uint64_t minibatch, uint64_t index, size_t op);
  // Work of other streams beside units in flight (CudaNcclOptions::overlap;
  // docs/recovery.md "Where the fence is"). Work the application queues on
  // `stream` (a kernel, a copy, a cuBLAS call) runs beside the units in
  // flight unless the stream is tied to one of theirs: the same stream, or
  // the legacy default stream and a blocking stream (CUDA orders them
  // implicitly), either way round; then every unit is waited for first
  // (SettleAll). Returns SettleAll's error (ncclSuccess: none or not tied).
  ncclResult_t BeforeStreamWork(cudaStream_t stream);
  // An event recorded on a stream tied to a unit in flight stands behind
  // it: a wait on that event, a query or a synchronization of it waits for
  // every unit first (BeforeEventUse), so that nothing is ordered after a
  // collective that may still fail and run again. Recorded elsewhere, the
  // event is free of them.
  void NoteEventRecord(cudaEvent_t event, cudaStream_t stream);
  ncclResult_t BeforeEventUse(cudaEvent_t event);
  // Whether other streams' work may run beside units in flight.
  bool Overlaps() const { return options_.overlap && options_.pipeline > 1; }

  // Brackets a blocking synchronization (stream, event, device, copy): lets
  // the watchdog abort stuck collectives, and turns `e` into the abort's
  // CUDA error when communicators were aborted meanwhile.
  class SyncScope {
   public:
    explicit SyncScope(CudaNccl* n);
    ~SyncScope();
    cudaError_t Result(cudaError_t e) const;

   private:
    CudaNccl* n_;
    uint64_t generation_;
  };

 private:
  using CachedResults = std::map<UnitOrdinal, std::vector<ResultBuf>>;

  // One NCCL operation of a unit (a call, or one communicator's part of a group).
  struct Op {
    std::function<ncclResult_t(ncclComm_t)> call;
    cudaStream_t stream = nullptr;
    const void* send = nullptr;
    size_t send_bytes = 0;  // bytes this rank's send buffer holds
    void* recv = nullptr;
    size_t recv_bytes = 0;  // bytes this rank's receive buffer gets
    bool saved = false;     // in place: the send bytes were copied to `scratch` first
    void* scratch = nullptr;  // a device buffer of the communicator's pool
  };
  // A unit issued and not waited for yet (the deferred fence): its events,
  // recorded on each of its streams behind it and its results' copies
  // there, and the pinned buffers its results are being copied into.
  struct PendingUnit {
    UnitOrdinal ordinal;
    const char* what = "";
    std::vector<Op> ops;
    std::vector<cudaEvent_t> events;
    std::vector<ResultBuf> staged;
    bool staged_ok = false;
    ncclResult_t issue_error = ncclSuccess;  // its issue failed (it never ran)
  };

  struct Comm {
    ncclComm_t comm = nullptr;  // the live NCCL communicator (replaced when re-formed)
    std::atomic<bool> aborted{false};
    bool finalized = false;  // guarded by mu_: the application finalized it
    std::atomic<int> error{ncclSuccess};  // after an abort: what the calls answer
    std::string why;
    // Recovery (all guarded by mu_). A communicator is recoverable when
    // the job recovers and it has several ranks and a key.
    int nranks = 0;
    int rank = 0;
    std::string key;  // IdHash of the application's unique id; empty: not re-formable
    int epoch = 0;    // the recovery epoch it was formed in
    bool joining = false;  // a replacement's: joins the survivors at the epoch
    bool failed = false;   // its recovery failed: later calls answer the error at once
    uint64_t minibatch = 0;
    uint64_t next_index = 0;
    CachedResults cache;      // results of completed units (current, previous minibatch)
    uint64_t cache_bytes = 0;                       // what `cache` holds
    uint64_t cache_warn_bytes = uint64_t{1} << 30;  // the next size CacheResults warns at
    std::vector<ResultBuf> quarantine;  // staged by a unit that failed for good (a late
                                        // copy may still land there): never reused
    UnitResults prereceived;  // results of units this rank has yet to run
    std::multimap<size_t, void*> scratch_free;  // device buffers for in-place inputs, by size
    size_t scratch_free_bytes = 0;
    std::deque<PendingUnit> pending;  // units in flight, oldest first
  };
  struct Queued {
    std::shared_ptr<Comm> comm;
    Op op;
  };

  // The live state of the application's handle `comm`; nullptr when unknown.
  std::shared_ptr<Comm> Find(ncclComm_t comm);
  static ncclComm_t Handle(const std::shared_ptr<Comm>& c) {
    return reinterpret_cast<ncclComm_t>(c.get());
  }
  bool Recoverable(const Comm& c) const;
  // Runs `call` on a known, live communicator and settles it.
  template <typename F>
  ncclResult_t OnComm(ncclComm_t comm, const char* what, F call);
  // The same for a communicator found with mu_ held.
  template <typename F>
  ncclResult_t OnCommLocked(const std::shared_ptr<Comm>& c, const char* what, F& call);
  // A collective of a one-rank communicator issued as the copy it amounts
  // to (mu_ held; `kind` a Kind of cuda_nccl.cc); *handled false: NCCL runs it.
  ncclResult_t OneRankLocked(const Comm& c, int kind, size_t count, ncclDataType_t type, int root,
                             ncclRedOp_t op, const void* send, void* recv, cudaStream_t stream,
                             bool* handled);
  // A collective: fenced and recovered when its communicator is recoverable.
  ncclResult_t Collective(ncclComm_t comm, const char* what, Op op);
  // A recoverable unit (mu_ held): ordinal, in-place copies, issue, fence,
  // results cache; on a peer's failure the recovery and a retry. `may_defer`:
  // the unit may stay in flight (c.pending) when MayDefer says so.
  ncclResult_t RunUnit(Comm& c, const char* what, std::vector<Op>& ops, bool may_defer);
  // Whether `ops` may be issued behind c's units in flight and left in
  // flight itself: not in place, not overwriting an input a retry of one
  // in flight needs, outside a replay and a recovery's aftermath.
  bool MayDefer(const Comm& c, const std::vector<Op>& ops) const;
  // Whether work on `stream` is ordered behind a unit in flight (mu_ held).
  bool TiedToPending(cudaStream_t stream) const;
  ncclResult_t Issue(Comm& c, const char* what, std::vector<Op>& ops);
  // One attempt: issue, stage the results, fence.
  ncclResult_t Attempt(Comm& c, const char* what, UnitOrdinal ordinal, std::vector<Op>& ops,
                       bool* staged, std::vector<ResultBuf>* staged_bufs);
  // A unit whose attempt ended with `r`: while a recovery cures the failure,
  // recover and retry; then keep its results (or quarantine its buffers).
  ncclResult_t FinishUnit(Comm& c, const char* what, UnitOrdinal ordinal, std::vector<Op>& ops,
                          ncclResult_t r, bool staged, std::vector<ResultBuf> staged_bufs);
  // Waits for c's units in flight until at most `keep` are left (mu_ held).
  ncclResult_t SettleComm(Comm& c, size_t keep);
  // SettleComm(c, 0) of every communicator but `except` (mu_ held).
  ncclResult_t SettleOthers(const Comm* except);
  // Events recorded now on each stream of `ops`; false when CUDA refused.
  static bool RecordUnitEvents(const std::vector<Op>& ops, std::vector<cudaEvent_t>* events);
  // Waits (bounded) until `events` completed (then destroys them); fails on
  // the communicator's async error, a new recovery epoch or the timeout.
  ncclResult_t WaitUnit(Comm& c, const char* what, UnitOrdinal ordinal,
                        std::vector<cudaEvent_t>* events);
  // RecordUnitEvents + WaitUnit: the unit's streams passed it.
  ncclResult_t Fence(Comm& c, const char* what, UnitOrdinal ordinal, const std::vector<Op>& ops);
  // In-place inputs: copied to device buffers of c's pool before the unit,
  // copied back before a retry, given back once the unit completed.
  ncclResult_t SaveInputs(Comm& c, std::vector<Op>& ops);
  static ncclResult_t RestoreInputs(const std::vector<Op>& ops);
  static void ReleaseInputs(Comm& c, std::vector<Op>& ops);
  // Copies the unit's receive buffers into pinned buffers in stream order:
  // `staged` keeps a retry's buffers (same operations, same stream). A copy
  // on the unit's stream is behind the unit's fence; the copies through the
  // staging ring end with one HostCopy that the buffers carry (ResultBuf::
  // Landed): the fence, and the application's synchronization, do not wait
  // for the bytes to reach the host. False when they cannot be kept.
  bool StageResults(const std::vector<Op>& ops, std::vector<ResultBuf>* staged);
  // The staging ring and stream, made at the first result that uses them;
  // false when they cannot be had (the copies then stay on the stream).
  bool EnsureStaging();
  // One result through the ring: device-to-device pieces on `stream`,
  // device-to-host on stage_stream_. False when CUDA refused.
  bool StageThroughRing(char* dst, const void* src, size_t n, cudaStream_t stream);
  void CacheResults(Comm& c, UnitOrdinal ordinal, std::vector<ResultBuf> staged);
  // Puts a unit's results in c.cache, keeping c.cache_bytes.
  static void KeepResults(Comm& c, UnitOrdinal ordinal, std::vector<ResultBuf> bufs);
  // Copies results received during a recovery into the receive buffers, in
  // stream order; false when there are none for `ordinal`.
  bool ApplyPrereceived(Comm& c, UnitOrdinal ordinal, const std::vector<Op>& ops,
                        ncclResult_t* result);
  // The recovery protocol at the job's next epoch (cuda_nccl_recovery.h).
  absl::Status Recover(Comm& c, UnitOrdinal pending, bool replacement, uint64_t minibatch,
                       bool* behind);
  // Recover's steps. A member's part (Recover's arguments): the unit it is
  // about to run, whether it replaces a dead member, its journal's
  // minibatch, where to say whether it skips the rest of that minibatch.
  struct RecoveryRole {
    UnitOrdinal pending;
    bool replacement = false;
    uint64_t minibatch = 0;
    bool* behind = nullptr;
  };
  // One declared epoch: its directory of reports and blobs, the recovery's
  // bound, and whether a newer epoch was declared since (which ends every
  // wait of this one).
  struct RecoveryEpoch {
    int epoch = 0;
    std::string dir;
    absl::Time deadline;
    Preempt newer;
  };
  // One epoch's attempt: reports exchanged, the plan (recovery_plan.h)
  // carried out, the communicator re-formed. On an error, `*retry` says
  // whether Recover may wait for a newer epoch (this one did not form, a
  // member died meanwhile, the bound) or the recovery fails.
  absl::Status RecoverAtEpoch(Comm& c, const RecoveryRole& role, const RecoveryEpoch& at,
                              bool* retry);
  // This member's report; rank 0's carries the new communicator's unique id.
  absl::StatusOr<NcclRecoveryReport> OwnRecoveryReport(const Comm& c, const RecoveryRole& role);
  // Results of the units some members completed and others did not: the
  // provider writes them, the members that still lack one take them
  // (c.prereceived). `*nunits`: how many units went or came.
  absl::Status ShareUnitResults(Comm& c, const RecoveryPlan& plan, const RecoveryRole& role,
                                const RecoveryEpoch& at, uint64_t* nunits);
  // State: the state source's live allocations to the replacements.
  absl::Status ShareState(Comm& c, const RecoveryPlan& plan, const RecoveryRole& role,
                          const RecoveryEpoch& at);
  // The new communicator: every member, from rank 0's fresh unique id (its
  // report's `unique_id_hex`).
  absl::Status FormRecoveredComm(Comm& c, const RecoveryEpoch& at,
                                 const std::string& unique_id_hex, bool* retry);
  absl::Status ReadState(std::string* blob);
  absl::Status WriteState(const std::string& blob);
  // Device <-> host copies on the private stream, waited for with a bound.
  absl::Status CopyOnAux(void* dst, const void* src, size_t n, cudaMemcpyKind kind);
  absl::Status WaitEvent(cudaEvent_t ev, const char* what);
  // Grows a pinned host buffer (*buf, *bytes) to at least n bytes.
  static bool EnsurePinned(void** buf, size_t* bytes, size_t n);
  bool EnsureBounce(size_t n) { return EnsurePinned(&bounce_, &bounce_bytes_, n); }
  // Polls until `c`'s pending operation settled (bounded); aborts on timeout.
  // `preempt` (optional) ends the wait early with ncclRemoteError.
  ncclResult_t Settle(Comm& c, const char* what, const std::function<bool()>& preempt = {});
  // Aborts `c` (bounded), recording `error` as what its later calls answer.
  // wait: return once ncclCommAbort did (bounded by kAbortBound); else return
  // at once and let it finish on its thread.
  void AbortComm(Comm& c, ncclResult_t error, const std::string& why, bool wait = true);
  // Logs why `what` cannot be replayed for a communicator of `nranks`.
  ncclResult_t Refused(const char* what, int nranks);
  // During a replay: ncclSuccess when `parent` has one rank, else Refused.
  ncclResult_t CheckReplayable(Comm& parent, const char* what);
  // The start agreement of one communicator (mu_ held).
  ncclResult_t AgreeToStart(int nranks, int rank, const ncclUniqueId& id);
  // One small all-reduce on `c`, bounded (mu_ held).
  ncclResult_t WarmUp(Comm& c);
  std::shared_ptr<Comm> Register(ncclComm_t comm);
  void Watch();
  int ReadEpoch() const;

  const int device_;
  const std::string job_root_;
  const absl::Duration timeout_;
  const CudaNcclOptions options_;
  std::atomic<bool> replaying_{false};
  std::atomic<ReplayPhase> replay_phase_{ReplayPhase::kNone};
  std::atomic<uint64_t> restored_minibatch_{0};
  bool warm_up_ = true;
  // REVENANT_NCCL_ONE_RANK_COPY: one-rank collectives issued as copies.
  bool one_rank_copy_ = true;
  uint64_t one_rank_copies_ = 0;  // mu_
  DeviceCopy device_copy_;              // mu_
  uint64_t one_rank_kernel_copies_ = 0;  // mu_: of one_rank_copies_, by device_copy_
  std::function<std::vector<std::pair<uint64_t, uint64_t>>()> live_allocations_;
  uint64_t range_base_ = 0;

  std::mutex mu_;  // serializes NCCL calls with the watchdog's polls and aborts
  // Keyed by the application's handle (Handle(): the Comm's address), so a
  // communicator re-formed under it keeps its handle.
  absl::flat_hash_map<ncclComm_t, std::shared_ptr<Comm>> comms_;  // guarded by mu_
  int group_depth_ = 0;                                            // guarded by mu_
  std::vector<std::shared_ptr<Comm>> group_comms_;                 // guarded by mu_
  std::vector<Queued> group_units_;  // guarded by mu_: recoverable operations of the group
  // Private stream and pinned bounce buffer for state and received results;
  // the pool of pinned buffers results are staged into. Guarded by mu_.
  cudaStream_t aux_ = nullptr;
  void* bounce_ = nullptr;
  size_t bounce_bytes_ = 0;
  std::shared_ptr<PinnedPool> pinned_pool_;
  // Set once a kept result's copy to the host did not land in time (HostCopy).
  std::shared_ptr<std::atomic<bool>> host_copies_stuck_ = std::make_shared<std::atomic<bool>>(false);
  // The staging ring (options_.stage_bytes): a slot is filled on a
  // collective's stream after the stream waited for `free` (its last copy to
  // the host), and emptied on stage_stream_ after that waited for `filled`.
  struct StageSlot {
    void* dev = nullptr;
    cudaEvent_t filled = nullptr;
    cudaEvent_t free = nullptr;
  };
  static void DestroySlotEvents(StageSlot& s) {
    if (s.filled != nullptr) ::cudaEventDestroy(s.filled);
    if (s.free != nullptr) ::cudaEventDestroy(s.free);
  }
  size_t StageChunk() const { return std::min(options_.stage_chunk_bytes, options_.stage_bytes); }
  std::vector<StageSlot> stage_slots_;
  size_t stage_next_ = 0;
  cudaStream_t stage_stream_ = nullptr;
  bool stage_failed_ = false;  // the ring could not be made: not tried again

  // Watchdog.
  std::thread watchdog_;
  std::atomic<bool> stop_{false};
  std::atomic<int> epoch_at_start_{0};
  std::atomic<int64_t> sync_since_ns_{0};  // 0: no synchronization blocked
  std::atomic<int> syncs_{0};
  std::atomic<uint64_t> abort_generation_{0};
  std::atomic<int> abort_cuda_error_{cudaSuccess};
  std::atomic<int> pending_units_{0};  // units in flight, all communicators
  // Events recorded on a stream tied to a unit in flight (NoteEventRecord);
  // emptied once no unit is in flight. Guarded by mu_.
  std::vector<cudaEvent_t> behind_;
};

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_H_
