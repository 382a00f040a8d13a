#include "agent/backends/cuda/cuda_nccl.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/backends/cuda/cuda_nccl_recovery.h"
#include "agent/backends/cuda/cuda_nccl_start.h"
#include "common/events.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "common/populate.h"

extern char** environ;

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr char kLog[] = "cuda-nccl";
constexpr absl::Duration kPoll = absl::Microseconds(100);
constexpr absl::Duration kFirstPolls = absl::Microseconds(5);
// Device buffers for in-place inputs kept free for the next units, per
// communicator; beyond this they are freed.
constexpr size_t kScratchPoolBytes = size_t{1} << 30;
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(100);
constexpr absl::Duration kAbortBound = absl::Seconds(10);

std::string LastError(ncclComm_t comm) {
  const char* m = ::ncclGetLastError(comm);
  return m != nullptr && *m != '\0' ? m : "(no message)";
}

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

size_t TypeSize(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll,
                  kGather, kScatter, kSend, kRecv };

// Bytes of this rank's send and receive buffers, as NCCL defines them.
void Extents(Kind k, size_t count, ncclDataType_t t, int root, int rank, int nranks,
             size_t* send, size_t* recv) {
  const size_t es = TypeSize(t);
  const size_t n = static_cast<size_t>(nranks);
  const bool is_root = root == rank;
  size_t s = count, r = count;
  switch (k) {
    case Kind::kAllReduce: break;
    case Kind::kBroadcast: s = is_root ? count : 0; break;
    case Kind::kReduce: r = is_root ? count : 0; break;
    case Kind::kAllGather: r = count * n; break;
    case Kind::kReduceScatter: s = count * n; break;
    case Kind::kAlltoAll: s = r = count * n; break;
    case Kind::kGather: r = is_root ? count * n : 0; break;
    case Kind::kScatter: s = is_root ? count * n : 0; break;
    case Kind::kSend: r = 0; break;
    case Kind::kRecv: s = 0; break;
  }
  *send = s * es;
  *recv = r * es;
}

bool Overlap(const void* a, size_t an, const void* b, size_t bn) {
  if (a == nullptr || b == nullptr || an == 0 || bn == 0) return false;
  const uintptr_t x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bn && y < x + an;
}

// NCCL entry points newer than the oldest NCCL the agent accepts: looked up
// at run time (the GPU machine's system NCCL, 2.28.3, lacks ncclCommRevoke).
void LogOptionalSymbols() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> found, missing;
    for (const char* sym : {"ncclCommShrink", "ncclCommRevoke", "ncclCommGrow"}) {
      (dlsym(RTLD_DEFAULT, sym) != nullptr ? found : missing).push_back(sym);
    }
    REVENANT_LOG(INFO, kLog) << "NCCL entry points: present "
                             << (found.empty() ? "-" : absl::StrJoin(found, " ")) << "; absent "
                             << (missing.empty() ? "-" : absl::StrJoin(missing, " "))
                             << " (recovery re-forms communicators with ncclCommAbort and a "
                                "fresh ncclCommInitRankConfig, which every NCCL >= 2.22 has)";
  });
}

}  // namespace

CudaNcclOptions CudaNcclOptions::From(const BackendOptions& options) {
  CudaNcclOptions o;
  o.rank = options.rank;
  o.gpu_shared = options.gpu_shared;
  if (options.recovery_timeout_s > 0) o.recovery_timeout = absl::Seconds(options.recovery_timeout_s);
  o.crash_in_recovery = options.crash_in_recovery;
  o.cache_results = options.journal;
  o.pipeline = static_cast<int>(knobs::Int(knobs::Id::kCollectivePipeline, 1, 1024).value_or(8));
  o.overlap = knobs::Bool(knobs::Id::kCollectiveOverlap).value_or(true);
  o.stage_bytes =
      static_cast<size_t>(knobs::Int(knobs::Id::kResultStagingMib, 0, 1 << 20).value_or(256)) << 20;
  if (!knobs::Bool(knobs::Id::kResultPinRegister).value_or(true)) {
    o.pin_register_min_bytes = std::numeric_limits<size_t>::max();
  }
  return o;
}

void CudaNccl::ConfigureSharedGpu(int rank) {
  // NCCL reads NCCL_HOSTID at every communicator's init; a distinct one per
  // rank makes it treat the ranks as separate hosts (socket transport)
  // instead of refusing a duplicate GPU. What the user set stays; what this
  // process set before (a spare's warm-up backend, another rank) is replaced.
  static std::mutex mu;
  static bool user_host_id = false, user_ifname = false, checked = false;
  std::lock_guard<std::mutex> lock(mu);
  if (!checked) {
    checked = true;
    const char* h = std::getenv("NCCL_HOSTID");
    user_host_id = h != nullptr && *h != '\0';
    const char* i = std::getenv("NCCL_SOCKET_IFNAME");
    user_ifname = i != nullptr && *i != '\0';
  }
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0) host[0] = '\0';
  if (user_host_id) {
    REVENANT_LOG(INFO, kLog) << "rank " << rank << " shares its GPU with other ranks: keeping "
                             << "NCCL_HOSTID=" << std::getenv("NCCL_HOSTID")
                             << " from the environment (every rank on the GPU needs its own)";
  } else {
    const std::string id = SharedGpuHostId(host, rank);
    setenv("NCCL_HOSTID", id.c_str(), 1);
    REVENANT_LOG(INFO, kLog) << "rank " << rank << " shares its GPU with other ranks: "
                             << "NCCL_HOSTID=" << id
                             << " (NCCL sees each rank as a host of its own; set NCCL_HOSTID "
                                "to override)";
  }
  if (!user_ifname) {
    // Every rank of the job is on this machine: the loopback interface
    // connects them (NCCL skips it by default when others exist).
    setenv("NCCL_SOCKET_IFNAME", "lo", 1);
    REVENANT_LOG(INFO, kLog) << "NCCL_SOCKET_IFNAME=lo (the ranks sharing the GPU are on this "
                                "machine; set NCCL_SOCKET_IFNAME to override)";
  }
}

void CudaNccl::SetStateAccess(std::function<std::vector<std::pair<uint64_t, uint64_t>>()> live,
                              uint64_t range_base) {
  std::lock_guard<std::mutex> lock(mu_);
  live_allocations_ = std::move(live);
  range_base_ = range_base;
}

void CudaNccl::SetDeviceCopy(DeviceCopy copy) {
  std::lock_guard<std::mutex> lock(mu_);
  device_copy_ = std::move(copy);
}

absl::Duration CudaNccl::TimeoutFromEnv() {
  return absl::Seconds(
      knobs::Double(knobs::Id::kCollectiveTimeoutS, 1e-3, 1e7).value_or(60));
}

void CudaNccl::LogEnvironment() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> vars;
    for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
      if (std::strncmp(*e, "NCCL_", 5) == 0) vars.emplace_back(*e);
    }
    int version = 0;
    (void)::ncclGetVersion(&version);
    REVENANT_LOG(INFO, kLog) << "NCCL " << version << ", collective timeout "
                             << absl::FormatDuration(TimeoutFromEnv()) << ", environment: "
                             << (vars.empty() ? "(no NCCL_* variables)" : absl::StrJoin(vars, " "));
  });
}

CudaNccl::CudaNccl(int device, const std::string& job_dir, const CudaNcclOptions& options)
    : device_(device),
      job_root_(job_dir.empty() ? "" : job_dir.substr(0, job_dir.find_last_of('/'))),
      timeout_(TimeoutFromEnv()),
      options_(options),
      pinned_pool_(std::make_shared<PinnedPool>(options.pinned_keep_bytes,
                                                options.pin_register_min_bytes)) {
  if (options_.gpu_shared) ConfigureSharedGpu(options_.rank);
  if (!job_dir.empty()) LogOptionalSymbols();
  epoch_at_start_.store(ReadEpoch());
  warm_up_ = knobs::Bool(knobs::Id::kNcclWarmup).value_or(true);
  one_rank_copy_ = knobs::Bool(knobs::Id::kNcclOneRankCopy).value_or(true);
}

CudaNccl::~CudaNccl() {
  stop_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
  if (const uint64_t made = pinned_pool_->made(); made > 0) {
    // Each one was made on the executor's path: after the first minibatches
    // of each result size there should be none.
    REVENANT_LOG(INFO, kLog) << "kept results: " << made << " pinned buffers made in all ("
                             << pinned_pool_->registered() << " of them registered mappings), "
                             << absl::StrFormat("%.1f", pinned_pool_->made_ms())
                             << " ms making them";
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (one_rank_copies_ > 0) {
    REVENANT_LOG(INFO, kLog) << "one-rank collectives issued as copies: " << one_rank_copies_
                             << ", " << one_rank_kernel_copies_ << " of them by the agent's kernel";
  }
  for (auto& [raw, c] : comms_) {
    if (!c->aborted.load() && c->comm != nullptr) {
      AbortComm(*c, ncclInvalidUsage, "the agent is shutting down");
    }
  }
  comms_.clear();
  // The device memory and streams go with the context; the pinned bounce
  // buffer is this process's.
  if (bounce_ != nullptr) ::cudaFreeHost(bounce_);
  for (StageSlot& s : stage_slots_) DestroySlotEvents(s);
}

HostCopy::~HostCopy() { ::cudaEventDestroy(event_); }

bool HostCopy::Wait() {
  if (landed_.load(std::memory_order_acquire)) return true;
  const absl::Time deadline = absl::Now() + timeout_;
  for (int polls = 0;; ++polls) {
    const cudaError_t q = ::cudaEventQuery(event_);
    if (q == cudaSuccess) {
      landed_.store(true, std::memory_order_release);
      return true;
    }
    if (q != cudaErrorNotReady) {
      (void)::cudaGetLastError();
      REVENANT_LOG(ERROR, kLog) << "a kept result's copy to the host failed: "
                                << ::cudaGetErrorString(q);
      return false;
    }
    if (stuck_->load(std::memory_order_relaxed)) return false;  // logged once, below
    if (absl::Now() >= deadline) {
      REVENANT_LOG(ERROR, kLog) << "a kept result's copy to the host did not land in "
                                << absl::FormatDuration(timeout_)
                                << " (REVENANT_COLLECTIVE_TIMEOUT_S); the staging stream's later "
                                   "copies are not waited for";
      stuck_->store(true, std::memory_order_relaxed);
      return false;
    }
    absl::SleepFor(polls < 20 ? kFirstPolls : kPoll);
  }
}

PinnedPool::Buf PinnedPool::Take(const std::shared_ptr<PinnedPool>& pool,
                                                     size_t n) {
  {
    std::lock_guard<std::mutex> lock(pool->mu_);
    for (auto it = pool->free_.rbegin(); it != pool->free_.rend(); ++it) {
      if (it->first != n) continue;
      char* p = it->second;
      pool->free_.erase(std::next(it).base());
      pool->free_bytes_ -= n;
      return Buf(p, Giver{pool, n});
    }
  }
  char* p = pool->Make(n);
  return Buf(p, Giver{pool, p != nullptr ? n : 0});
}

char* PinnedPool::Make(size_t n) {
  const absl::Time start = absl::Now();
  char* made = nullptr;
  if (n >= register_min_bytes_) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t len = (n + page - 1) / page * page;
    void* m = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      // Unimplemented (no MADV_POPULATE_WRITE): cudaHostRegister faults them.
      const absl::Status populated = PopulateWritable(m, len);
      if ((populated.ok() || absl::IsUnimplemented(populated)) &&
          ::cudaHostRegister(m, len, cudaHostRegisterDefault) == cudaSuccess) {
        made = static_cast<char*>(m);
        std::lock_guard<std::mutex> lock(registered_mu_);
        mapped_[made] = len;
      } else {
        (void)::cudaGetLastError();
        munmap(m, len);
      }
    }
    if (made != nullptr) registered_made_.fetch_add(1);
  }
  if (made == nullptr) {
    void* p = nullptr;
    if (::cudaMallocHost(&p, n) != cudaSuccess) {
      (void)::cudaGetLastError();
      return nullptr;
    }
    made = static_cast<char*>(p);
  }
  made_.fetch_add(1);
  made_ns_.fetch_add(static_cast<uint64_t>(absl::ToInt64Nanoseconds(absl::Now() - start)));
  return made;
}

void PinnedPool::Release(char* p) {
  size_t len = 0;
  {
    std::lock_guard<std::mutex> lock(registered_mu_);
    if (auto it = mapped_.find(p); it != mapped_.end()) {
      len = it->second;
      mapped_.erase(it);
    }
  }
  if (len == 0) {
    ::cudaFreeHost(p);
    return;
  }
  ::cudaHostUnregister(p);
  munmap(p, len);
}

void PinnedPool::KeepAtLeast(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  keep_bytes_ = std::max(keep_bytes_, bytes);
}

void PinnedPool::Give(char* p, size_t n) {
  if (p == nullptr) return;
  // Kept for reuse up to keep_bytes_ of free buffers (at least what one
  // boundary dropped); beyond that the buffers given back longest ago are
  // handed back (cudaFreeHost and cudaHostUnregister wait for the device: not
  // where a training step should pay it, hence the bound).
  std::vector<char*> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.emplace_back(n, p);
    free_bytes_ += n;
    while (free_bytes_ > keep_bytes_ && !free_.empty()) {
      free_bytes_ -= free_.front().first;
      evicted.push_back(free_.front().second);
      free_.pop_front();
    }
  }
  for (char* q : evicted) Release(q);
}

PinnedPool::~PinnedPool() {
  for (auto& [n, p] : free_) Release(p);
}

bool CudaNccl::Recoverable(const Comm& c) const {
  return options_.recovery_timeout > absl::ZeroDuration() && !job_root_.empty() &&
         c.nranks > 1 && !c.key.empty() && !c.failed;
}

int CudaNccl::ReadEpoch() const { return ReadRecoveryEpoch(job_root_); }

ncclResult_t CudaNccl::Refused(const char* what, int nranks) {
  REVENANT_LOG(ERROR, kLog)
      << what << " during a replay: a communicator of " << nranks
      << " ranks over real NCCL is re-formed with the survivors only when the job recovers "
         "(--recovery_timeout_s) and it was made by ncclCommInitRank (a split or shrink has no "
         "unique id to re-form from; docs/recovery.md, Limits)";
  return ncclInvalidUsage;
}

void CudaNccl::SetReplayPhase(ReplayPhase phase) {
  const bool replaying = phase != ReplayPhase::kNone;
  if (replaying) {
    // A spare started before the job declared this epoch: the epoch that
    // made it a replacement is not a reason to abort what it re-creates.
    epoch_at_start_.store(ReadEpoch());
  }
  replay_phase_.store(phase);
  replaying_.store(replaying);
}

void CudaNccl::MarkBoundary(uint64_t minibatch) {
  std::lock_guard<std::mutex> lock(mu_);
  // A boundary ends the minibatch: its units complete (or are recovered)
  // before the next one's numbering starts.
  if (ncclResult_t r = SettleOthers(nullptr); r != ncclSuccess) {
    REVENANT_LOG(WARNING, kLog) << "a collective of minibatch " << minibatch - 1
                                << " failed at the boundary: " << ::ncclGetErrorString(r);
  }
  // Keep the current and the previous minibatch's results; the buffers of
  // those dropped stay in the pool for the next minibatch's units (the same
  // sizes, step after step), as many bytes as the minibatch just ended
  // kept: what the next one will likely take again (not all of a long run
  // without boundaries). The dropped buffers go back to the pool at the
  // end, once its bound is raised.
  std::vector<std::vector<ResultBuf>> dropped;
  uint64_t dropped_bytes = 0, kept_bytes = 0;
  for (auto& [h, c] : comms_) {
    c->minibatch = minibatch;
    c->next_index = 0;
    for (auto it = c->cache.begin(); it != c->cache.end();) {
      if (it->first.first + 1 < minibatch) {
        for (const ResultBuf& b : it->second) {
          c->cache_bytes -= b.bytes;
          dropped_bytes += b.pinned ? b.bytes : 0;
        }
        dropped.push_back(std::move(it->second));
        it = c->cache.erase(it);
      } else {
        for (const ResultBuf& b : it->second) kept_bytes += b.pinned ? b.bytes : 0;
        it = std::next(it);
      }
    }
  }
  pinned_pool_->KeepAtLeast(std::min(dropped_bytes, kept_bytes));
}

std::shared_ptr<CudaNccl::Comm> CudaNccl::Find(ncclComm_t comm) {
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second;
}

std::shared_ptr<CudaNccl::Comm> CudaNccl::Register(ncclComm_t comm) {
  auto c = std::make_shared<Comm>();
  c->comm = comm;
  comms_[Handle(c)] = c;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
  return c;
}

void CudaNccl::AbortComm(Comm& c, ncclResult_t error, const std::string& why, bool wait) {
  if (c.aborted.exchange(true)) return;
  c.error.store(error);
  c.why = why;
  REVENANT_LOG(WARNING, kLog) << "aborting communicator " << static_cast<void*>(c.comm) << ": "
                              << why;
  // ncclCommAbort can itself block (a peer that never answers): it runs on a
  // thread of its own, waited for with a bound, then left behind.
  auto done = std::make_shared<std::atomic<bool>>(false);
  const int device = device_;
  ncclComm_t raw = c.comm;
  std::thread([raw, device, done] {
    ::cudaSetDevice(device);
    (void)::ncclCommAbort(raw);
    done->store(true);
  }).detach();
  if (!wait) return;
  const absl::Time deadline = absl::Now() + kAbortBound;
  while (!done->load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  if (!done->load()) {
    REVENANT_LOG(ERROR, kLog) << "ncclCommAbort did not return within "
                              << absl::FormatDuration(kAbortBound) << "; left running";
  }
}

ncclResult_t CudaNccl::Settle(Comm& c, const char* what, const std::function<bool()>& preempt) {
  const absl::Time deadline = absl::Now() + timeout_;
  absl::Time next_preempt_check = absl::Now() + absl::Milliseconds(20);
  for (int polls = 0;; ++polls) {
    ncclResult_t state = ncclInProgress;
    ncclResult_t r = ::ncclCommGetAsyncError(c.comm, &state);
    if (r != ncclSuccess) state = r;
    if (state != ncclInProgress) {
      if (state != ncclSuccess) {
        REVENANT_LOG(ERROR, kLog) << what << ": " << ::ncclGetErrorString(state) << ": "
                                  << LastError(c.comm);
      }
      return state;
    }
    if (absl::Now() >= deadline) {
      const std::string why =
          absl::StrCat(what, " still in progress after ", absl::FormatDuration(timeout_),
                       " (REVENANT_COLLECTIVE_TIMEOUT_S): ", LastError(c.comm));
      REVENANT_LOG(ERROR, kLog) << why;
      AbortComm(c, ncclSystemError, why);
      return ncclSystemError;
    }
    if (preempt && absl::Now() >= next_preempt_check) {
      next_preempt_check = absl::Now() + absl::Milliseconds(20);
      if (preempt()) {
        AbortComm(c, ncclRemoteError, absl::StrCat(what, ": a newer recovery epoch was declared"));
        return ncclRemoteError;
      }
    }
    // Short operations (a connection to set up) settle within tens of
    // microseconds: poll finely at first, then every kPoll.
    absl::SleepFor(polls < 20 ? kFirstPolls : kPoll);
  }
}

template <typename F>
ncclResult_t CudaNccl::OnComm(ncclComm_t comm, const char* what, F call) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  return OnCommLocked(c, what, call);
}

template <typename F>
ncclResult_t CudaNccl::OnCommLocked(const std::shared_ptr<Comm>& c, const char* what, F& call) {
  if (c->aborted.load()) return static_cast<ncclResult_t>(c->error.load());
  if (c->comm == nullptr) {
    REVENANT_LOG(WARNING, kLog) << what << ": the communicator joins its peers at the recovery "
                                   "epoch and has no NCCL communicator yet";
    return ncclInvalidUsage;
  }
  ncclResult_t r = call(c->comm);
  if (group_depth_ > 0) {
    bool seen = false;
    for (auto& g : group_comms_) seen = seen || g == c;
    if (!seen) group_comms_.push_back(c);
    return r == ncclInProgress ? ncclSuccess : r;
  }
  if (r == ncclInProgress) return Settle(*c, what);
  if (r != ncclSuccess) {
    REVENANT_LOG(WARNING, kLog) << what << ": " << ::ncclGetErrorString(r) << ": "
                                << LastError(c->comm);
  }
  return r;
}

// --- Watchdog ------------------------------------------------------------------------------

void CudaNccl::Watch() {
  ::cudaSetDevice(device_);
  bool epoch_seen = false;
  while (!stop_.load()) {
    absl::SleepFor(kWatchPeriod);
    std::string why;
    ncclResult_t error = ncclSuccess;
    cudaError_t cuda_error = cudaSuccess;
    const int epoch = ReadEpoch();
    // With recovery, a recovery epoch is each communicator's own business
    // (Fence, Recover): aborting them all would also end the ones already
    // re-formed, and 1-rank ones that have no peer to lose.
    const bool recovers = options_.recovery_timeout > absl::ZeroDuration();
    if (!recovers && !epoch_seen && epoch > epoch_at_start_.load()) {
      epoch_seen = true;
      why = absl::StrCat("the job declared recovery epoch ", epoch,
                         " (this agent does not recover: no --recovery_timeout_s)");
      error = ncclRemoteError;
      cuda_error = cudaErrorLaunchFailure;
    }
    if (recovers && !epoch_seen && epoch > epoch_at_start_.load()) {
      // Communicators that cannot be re-formed (splits, shrinks) and have
      // peers: a collective with the dead member would spin until aborted.
      std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        epoch_seen = true;
        for (auto& [h, c] : comms_) {
          if (c->comm == nullptr || c->aborted.load() || Recoverable(*c) || c->nranks == 1) {
            continue;
          }
          AbortComm(*c, ncclRemoteError,
                    absl::StrCat("recovery epoch ", epoch,
                                 ": this communicator (a split or shrink) cannot be re-formed"));
        }
      }
    }
    const int64_t since = sync_since_ns_.load();
    if (why.empty() && since != 0 && absl::Nanoseconds(NowNs() - since) > timeout_) {
      why = absl::StrCat("a synchronization has waited more than ",
                         absl::FormatDuration(timeout_),
                         " (REVENANT_COLLECTIVE_TIMEOUT_S) with communicators open");
      error = ncclSystemError;
      cuda_error = cudaErrorLaunchTimeout;
    }
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) continue;  // an NCCL call is settling (bounded on its own)
    if (why.empty()) {
      for (auto& [raw, c] : comms_) {
        // A recoverable communicator's errors are its fence's and recovery's.
        if (c->aborted.load() || c->comm == nullptr || Recoverable(*c)) continue;
        ncclResult_t state = ncclSuccess;
        if (::ncclCommGetAsyncError(c->comm, &state) != ncclSuccess) continue;
        if (state != ncclSuccess && state != ncclInProgress) {
          why = absl::StrCat("communicator 0x", absl::Hex(reinterpret_cast<uintptr_t>(c->comm)), " reports ",
                             ::ncclGetErrorString(state), ": ", LastError(c->comm));
          error = state;
          cuda_error = cudaErrorLaunchFailure;
          break;
        }
      }
    }
    if (why.empty()) continue;
    // An asynchronous error spares the recoverable communicators (their
    // fence sees it); a synchronization stuck past the timeout does not.
    const bool spare_recoverable = error != ncclSystemError;
    auto target = [&](const Comm& c) {
      return !c.aborted.load() && c.comm != nullptr && !(spare_recoverable && Recoverable(c));
    };
    bool any = false;
    for (auto& [raw, c] : comms_) any = any || target(*c);
    if (!any) continue;
    REVENANT_LOG(ERROR, kLog) << "aborting every communicator"
                              << (spare_recoverable ? " that cannot be re-formed" : "") << ": "
                              << why;
    abort_cuda_error_.store(cuda_error);
    abort_generation_.fetch_add(1);
    for (auto& [raw, c] : comms_) {
      if (target(*c)) AbortComm(*c, error, why);
    }
  }
}

CudaNccl::SyncScope::SyncScope(CudaNccl* n) : n_(n), generation_(n->abort_generation_.load()) {
  if (n_->syncs_.fetch_add(1) == 0) n_->sync_since_ns_.store(NowNs());
}

CudaNccl::SyncScope::~SyncScope() {
  if (n_->syncs_.fetch_sub(1) == 1) n_->sync_since_ns_.store(0);
}

cudaError_t CudaNccl::SyncScope::Result(cudaError_t e) const {
  if (e == cudaSuccess && n_->abort_generation_.load() != generation_) {
    return static_cast<cudaError_t>(n_->abort_cuda_error_.load());
  }
  return e;
}

// --- Start agreement and warm-up ----------------------------------------------------------

ncclResult_t CudaNccl::AgreeToStart(int nranks, int rank, const ncclUniqueId& id) {
  StartRankInfo self;
  self.rank = rank;
  (void)::ncclGetVersion(&self.nccl_version);
  if (nranks == 1 || job_root_.empty()) {
    // Nobody to share a GPU with (or no directory to meet in): this rank's
    // own engine is all there is to check.
    if (nranks > 1) {
      REVENANT_LOG(WARNING, kLog) << "no job directory: the NCCL start agreement covers this "
                                     "rank only";
    }
    if (self.nccl_version < kMinNcclVersion) {
      REVENANT_LOG(ERROR, kLog) << "rank " << rank << ": NCCL " << self.nccl_version
                                << " is older than " << kMinNcclVersion
                                << ": the NCCL engine cannot start";
      return ncclInvalidUsage;
    }
    static std::once_flag logged;
    std::call_once(logged, [&] {
      REVENANT_LOG(INFO, kLog) << "NCCL start agreement: " << nranks << " rank(s), NCCL "
                               << self.nccl_version;
    });
    return ncclSuccess;
  }
  cudaDeviceProp prop;
  if (::cudaGetDeviceProperties(&prop, device_) == cudaSuccess) {
    char hex[2 * sizeof(prop.uuid.bytes) + 1];
    for (size_t i = 0; i < sizeof(prop.uuid.bytes); ++i) {
      std::snprintf(hex + 2 * i, 3, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    }
    self.device_uuid = hex;
  }
  char pci[64] = {0};
  if (::cudaDeviceGetPCIBusId(pci, sizeof(pci), device_) == cudaSuccess) self.pci_bus_id = pci;
  (void)::cudaGetLastError();
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) == 0) self.host = host;
  if (const char* h = std::getenv("NCCL_HOSTID"); h != nullptr) self.nccl_host_id = h;
  // Every communicator of several ranks agrees in a directory of its own
  // (named after its unique id), so ranks that formed other communicators
  // before still meet every member of this one.
  const std::string dir =
      StartDirFor(job_root_, absl::string_view(id.internal, sizeof(id.internal)));
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StartRankInfo>> all =
      ExchangeStartInfo(dir, self, nranks, start + timeout_);
  if (!all.ok()) {
    REVENANT_LOG(ERROR, kLog) << "rank " << rank << " of " << nranks
                              << ": NCCL start agreement failed (bound "
                              << absl::FormatDuration(timeout_)
                              << ", REVENANT_COLLECTIVE_TIMEOUT_S): " << all.status().message();
    return absl::IsDeadlineExceeded(all.status()) ? ncclSystemError : ncclInvalidUsage;
  }
  const StartVerdict v = DecideStart(*all, nranks, kMinNcclVersion);
  if (!v.ok) {
    REVENANT_LOG(ERROR, kLog) << "rank " << rank << ": " << v.message;
    return ncclInvalidUsage;
  }
  std::vector<std::string> groups;
  for (const std::vector<int>& g : v.shared) groups.push_back(absl::StrJoin(g, "+"));
  REVENANT_LOG(INFO, kLog) << "NCCL start agreement: " << nranks << " ranks, NCCL "
                           << self.nccl_version << ", "
                           << (groups.empty()
                                   ? std::string("every rank on its own GPU")
                                   : absl::StrCat("ranks ", absl::StrJoin(groups, ", "),
                                                  " share a GPU, each with its own NCCL_HOSTID"))
                           << " (" << absl::FormatDuration(absl::Now() - start) << ")";
  return ncclSuccess;
}

ncclResult_t CudaNccl::WarmUp(Comm& c) {
  // One small all-reduce on a stream of its own, so connection setup is
  // not charged to the application's first collective. Every rank runs it
  // right after the same init, so it matches across ranks.
  const absl::Time start = absl::Now();
  cudaStream_t s = nullptr;
  void* buf = nullptr;
  constexpr size_t kCount = 256;
  if (::cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess ||
      ::cudaMalloc(&buf, kCount * sizeof(float)) != cudaSuccess ||
      ::cudaMemsetAsync(buf, 0, kCount * sizeof(float), s) != cudaSuccess) {
    REVENANT_LOG(WARNING, kLog) << "warm-up skipped: no stream or memory for it";
    if (buf != nullptr) ::cudaFree(buf);
    if (s != nullptr) ::cudaStreamDestroy(s);
    (void)::cudaGetLastError();
    return ncclSuccess;
  }
  ncclResult_t r = ::ncclAllReduce(buf, buf, kCount, ncclFloat, ncclSum, c.comm, s);
  if (r == ncclInProgress) r = Settle(c, "warm-up all-reduce");
  cudaError_t e = cudaSuccess;
  if (r == ncclSuccess) {
    // Bounded wait for the GPU (a peer that never arrives leaves the NCCL
    // kernel spinning: the communicator is then aborted).
    const absl::Time deadline = absl::Now() + timeout_;
    while ((e = ::cudaStreamQuery(s)) == cudaErrorNotReady) {
      ncclResult_t state = ncclSuccess;
      if (::ncclCommGetAsyncError(c.comm, &state) == ncclSuccess && state != ncclSuccess &&
          state != ncclInProgress) {
        r = state;
        break;
      }
      if (absl::Now() >= deadline) {
        r = ncclSystemError;
        AbortComm(c, r, absl::StrCat("the warm-up all-reduce did not complete in ",
                                     absl::FormatDuration(timeout_)));
        break;
      }
      absl::SleepFor(kPoll);
    }
  }
  if (r == ncclSuccess && e != cudaSuccess) {
    REVENANT_LOG(ERROR, kLog) << "warm-up all-reduce: " << ::cudaGetErrorString(e);
    r = ncclUnhandledCudaError;
  }
  if (!c.aborted.load()) {
    ::cudaStreamSynchronize(s);  // complete (or failed) by now
    ::cudaFree(buf);
    ::cudaStreamDestroy(s);
  }
  if (r == ncclSuccess) {
    REVENANT_LOG(DEBUG, kLog) << "warm-up all-reduce: "
                              << absl::FormatDuration(absl::Now() - start);
  } else {
    REVENANT_LOG(ERROR, kLog) << "warm-up all-reduce failed: " << ::ncclGetErrorString(r)
                              << ": " << LastError(c.comm);
  }
  return r;
}

// --- Fence and recovery (docs/recovery.md, "Over real NCCL") --------------------------------

bool CudaNccl::EnsurePinned(void** buf, size_t* bytes, size_t n) {
  if (n <= *bytes) return true;
  if (*buf != nullptr) ::cudaFreeHost(*buf);
  *buf = nullptr;
  *bytes = 0;
  const size_t want = std::max<size_t>(n, 1 << 20);
  if (::cudaMallocHost(buf, want) != cudaSuccess) {
    (void)::cudaGetLastError();
    *buf = nullptr;
    return false;
  }
  *bytes = want;
  return true;
}

absl::Status CudaNccl::WaitEvent(cudaEvent_t ev, const char* what) {
  const absl::Time deadline = absl::Now() + timeout_;
  for (int polls = 0;; ++polls) {
    const cudaError_t q = ::cudaEventQuery(ev);
    if (q == cudaSuccess) return absl::OkStatus();
    if (q != cudaErrorNotReady) {
      return absl::InternalError(absl::StrCat(what, ": ", ::cudaGetErrorString(q)));
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, " did not complete in ", absl::FormatDuration(timeout_)));
    }
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(polls < 200 ? kFirstPolls : kPoll);
    }
  }
}

absl::Status CudaNccl::CopyOnAux(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return absl::OkStatus();
  if (aux_ == nullptr && ::cudaStreamCreateWithFlags(&aux_, cudaStreamNonBlocking) != cudaSuccess) {
    aux_ = nullptr;
    (void)::cudaGetLastError();
    return absl::InternalError("no private stream for the copy");
  }
  cudaEvent_t ev = nullptr;
  cudaError_t e = ::cudaMemcpyAsync(dst, src, n, kind, aux_);
  if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e == cudaSuccess) e = ::cudaEventRecord(ev, aux_);
  if (e != cudaSuccess) {
    if (ev != nullptr) ::cudaEventDestroy(ev);
    return absl::InternalError(absl::StrCat("copy of ", n, " bytes: ", ::cudaGetErrorString(e)));
  }
  absl::Status s = WaitEvent(ev, "a state or result copy");
  ::cudaEventDestroy(ev);
  return s;
}

ncclResult_t CudaNccl::SaveInputs(Comm& c, std::vector<Op>& ops) {
  // An in-place operation overwrites its input: a retry after a failure
  // needs the bytes as they were, so they are copied first, in stream order,
  // into a device buffer of the communicator's pool (one per unit in flight).
  for (Op& op : ops) {
    if (op.saved || !Overlap(op.send, op.send_bytes, op.recv, op.recv_bytes)) continue;
    void* scratch = nullptr;
    if (auto it = c.scratch_free.find(op.send_bytes); it != c.scratch_free.end()) {
      scratch = it->second;
      c.scratch_free.erase(it);
      c.scratch_free_bytes -= op.send_bytes;
    } else if (::cudaMalloc(&scratch, op.send_bytes) != cudaSuccess) {
      (void)::cudaGetLastError();
      REVENANT_LOG(ERROR, kLog) << "no device memory (" << op.send_bytes
                                << " bytes) to keep an in-place collective's input";
      return ncclUnhandledCudaError;
    }
    op.scratch = scratch;
    op.saved = true;
    if (::cudaMemcpyAsync(scratch, op.send, op.send_bytes, cudaMemcpyDeviceToDevice,
                          op.stream) != cudaSuccess) {
      (void)::cudaGetLastError();
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

ncclResult_t CudaNccl::RestoreInputs(const std::vector<Op>& ops) {
  for (const Op& op : ops) {
    if (!op.saved) continue;
    if (::cudaMemcpyAsync(const_cast<void*>(op.send), op.scratch, op.send_bytes,
                          cudaMemcpyDeviceToDevice, op.stream) != cudaSuccess) {
      (void)::cudaGetLastError();
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

void CudaNccl::ReleaseInputs(Comm& c, std::vector<Op>& ops) {
  for (Op& op : ops) {
    if (!op.saved) continue;
    if (c.scratch_free_bytes + op.send_bytes <= kScratchPoolBytes) {
      c.scratch_free.emplace(op.send_bytes, op.scratch);
      c.scratch_free_bytes += op.send_bytes;
    } else {
      ::cudaFree(op.scratch);
    }
    op.scratch = nullptr;
    op.saved = false;
  }
}

ncclResult_t CudaNccl::Issue(Comm& c, const char* what, std::vector<Op>& ops) {
  ncclResult_t r = ncclSuccess;
  if (ops.size() == 1) {
    r = ops[0].call(c.comm);
  } else {
    r = ::ncclGroupStart();
    for (Op& op : ops) {
      if (r != ncclSuccess && r != ncclInProgress) break;
      r = op.call(c.comm);
    }
    ncclResult_t e = ::ncclGroupEnd();
    if (r == ncclSuccess || r == ncclInProgress) r = e;
  }
  if (r == ncclInProgress) r = Settle(c, what);
  if (r != ncclSuccess) {
    REVENANT_LOG(WARNING, kLog) << what << ": " << ::ncclGetErrorString(r) << ": "
                                << LastError(c.comm);
  }
  return r;
}

bool CudaNccl::RecordUnitEvents(const std::vector<Op>& ops, std::vector<cudaEvent_t>* events) {
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops) {
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) {
      streams.push_back(op.stream);
    }
  }
  for (cudaStream_t s : streams) {
    cudaEvent_t ev = nullptr;
    if (::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
        ::cudaEventRecord(ev, s) != cudaSuccess) {
      (void)::cudaGetLastError();
      if (ev != nullptr) ::cudaEventDestroy(ev);
      for (cudaEvent_t e : *events) ::cudaEventDestroy(e);
      events->clear();
      return false;
    }
    events->push_back(ev);
  }
  return true;
}

ncclResult_t CudaNccl::Fence(Comm& c, const char* what, UnitOrdinal ordinal,
                             const std::vector<Op>& ops) {
  // The collective fence: the executor does not go on (nothing behind the
  // unit is enqueued: the optimizer step cannot run on half-reduced data)
  // until every stream of the unit passed it.
  std::vector<cudaEvent_t> events;
  if (!RecordUnitEvents(ops, &events)) return ncclUnhandledCudaError;
  return WaitUnit(c, what, ordinal, &events);
}

ncclResult_t CudaNccl::WaitUnit(Comm& c, const char* what, UnitOrdinal ordinal,
                                std::vector<cudaEvent_t>* events) {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout_;
  absl::Time next_epoch_check = start + absl::Milliseconds(10);
  ncclResult_t result = ncclSuccess;
  for (int polls = 0;; ++polls) {
    bool done = true;
    for (cudaEvent_t ev : *events) {
      const cudaError_t q = ::cudaEventQuery(ev);
      if (q == cudaErrorNotReady) {
        done = false;
      } else if (q != cudaSuccess) {
        REVENANT_LOG(ERROR, kLog) << what << ": " << ::cudaGetErrorString(q);
        result = ncclUnhandledCudaError;
      }
    }
    if (result != ncclSuccess) break;
    ncclResult_t state = ncclSuccess;
    if (done) {
      // Completed, but an aborted or failing communicator's kernels also
      // end: its results are then not the collective's.
      if (c.aborted.load()) {
        result = static_cast<ncclResult_t>(c.error.load());
      } else if (::ncclCommGetAsyncError(c.comm, &state) == ncclSuccess &&
                 state != ncclSuccess && state != ncclInProgress) {
        REVENANT_LOG(WARNING, kLog) << what << " (" << ordinal.first << ", " << ordinal.second
                                    << ") ended on a failing communicator: "
                                    << ::ncclGetErrorString(state);
        result = state;
      }
      break;
    }
    if (c.aborted.load()) {
      result = static_cast<ncclResult_t>(c.error.load());
      break;
    }
    if (::ncclCommGetAsyncError(c.comm, &state) == ncclSuccess && state != ncclSuccess &&
        state != ncclInProgress) {
      REVENANT_LOG(WARNING, kLog) << what << " (" << ordinal.first << ", " << ordinal.second
                                  << "): " << ::ncclGetErrorString(state) << ": "
                                  << LastError(c.comm);
      result = state;
      break;
    }
    const absl::Time now = absl::Now();
    if (now >= next_epoch_check) {
      next_epoch_check = now + absl::Milliseconds(10);
      if (ReadEpoch() > c.epoch) {
        REVENANT_LOG(WARNING, kLog) << what << ": the job declared a recovery epoch while the "
                                       "collective waits (a member died)";
        result = ncclRemoteError;
        break;
      }
    }
    if (now >= deadline) {
      REVENANT_LOG(ERROR, kLog) << what << " did not complete in "
                                << absl::FormatDuration(timeout_)
                                << " (REVENANT_COLLECTIVE_TIMEOUT_S)";
      result = ncclSystemError;
      break;
    }
    // A collective of small buffers completes within microseconds: yield
    // for the first ones, then sleep between polls.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      absl::SleepFor(polls < 200 ? kFirstPolls : kPoll);
    }
  }
  for (cudaEvent_t ev : *events) ::cudaEventDestroy(ev);
  events->clear();
  return result;
}

bool CudaNccl::EnsureStaging() {
  if (!stage_slots_.empty()) return true;
  if (stage_failed_ || options_.stage_bytes == 0 || options_.stage_chunk_bytes == 0) return false;
  const size_t chunk = StageChunk();
  const size_t slots = std::max<size_t>(1, options_.stage_bytes / chunk);
  bool ok = ::cudaStreamCreateWithFlags(&stage_stream_, cudaStreamNonBlocking) == cudaSuccess;
  std::vector<StageSlot> ring(ok ? slots : 0);
  for (StageSlot& s : ring) {
    ok = ok && ::cudaMalloc(&s.dev, chunk) == cudaSuccess &&
         ::cudaEventCreateWithFlags(&s.filled, cudaEventDisableTiming) == cudaSuccess &&
         ::cudaEventCreateWithFlags(&s.free, cudaEventDisableTiming) == cudaSuccess;
  }
  if (!ok) {
    (void)::cudaGetLastError();
    for (StageSlot& s : ring) {
      if (s.dev != nullptr) ::cudaFree(s.dev);
      DestroySlotEvents(s);
    }
    if (stage_stream_ != nullptr) ::cudaStreamDestroy(stage_stream_);
    stage_stream_ = nullptr;
    stage_failed_ = true;
    REVENANT_LOG(WARNING, kLog) << "no device memory for the result staging ring ("
                                << (slots * chunk >> 20) << " MiB, REVENANT_RESULT_STAGING_MIB): "
                                   "results kept for a replacement are copied to the host on "
                                   "the collective's stream";
    return false;
  }
  stage_slots_ = std::move(ring);
  REVENANT_LOG(INFO, kLog) << "result staging ring: " << stage_slots_.size() << " x "
                           << (chunk >> 10) << " KiB of device memory";
  return true;
}

bool CudaNccl::StageThroughRing(char* dst, const void* src, size_t n, cudaStream_t stream) {
  const size_t chunk = StageChunk();
  for (size_t off = 0; off < n; off += chunk) {
    const size_t len = std::min(chunk, n - off);
    StageSlot& s = stage_slots_[stage_next_];
    stage_next_ = (stage_next_ + 1) % stage_slots_.size();
    // The slot's last copy to the host read it before this fills it; the
    // copy to the host reads it once this filled it.
    if (::cudaStreamWaitEvent(stream, s.free, 0) != cudaSuccess ||
        ::cudaMemcpyAsync(s.dev, static_cast<const char*>(src) + off, len,
                          cudaMemcpyDeviceToDevice, stream) != cudaSuccess ||
        ::cudaEventRecord(s.filled, stream) != cudaSuccess ||
        ::cudaStreamWaitEvent(stage_stream_, s.filled, 0) != cudaSuccess ||
        ::cudaMemcpyAsync(dst + off, s.dev, len, cudaMemcpyDeviceToHost, stage_stream_) !=
            cudaSuccess ||
        ::cudaEventRecord(s.free, stage_stream_) != cudaSuccess) {
      (void)::cudaGetLastError();
      return false;
    }
  }
  return true;
}

bool CudaNccl::StageResults(const std::vector<Op>& ops, std::vector<ResultBuf>* staged) {
  if (!options_.cache_results) return false;
  staged->resize(ops.size());
  std::vector<size_t> through_ring;  // buffers a copy on the staging stream writes
  bool ok = true;
  for (size_t k = 0; ok && k < ops.size(); ++k) {
    const Op& op = ops[k];
    ResultBuf& b = (*staged)[k];
    if (op.recv_bytes == 0) continue;
    if (!b.pinned || b.bytes != op.recv_bytes) {
      b.pinned = PinnedPool::Take(pinned_pool_, op.recv_bytes);
      b.bytes = op.recv_bytes;
      if (!b.pinned) {
        REVENANT_LOG(WARNING, kLog) << "no pinned memory (" << op.recv_bytes
                                    << " bytes) to keep a collective's result for a replay";
        b.bytes = 0;
        ok = false;
        break;
      }
    }
    // Through the ring when it is there: the stream pays a device copy
    // (~0.1 ms for 256 MiB) instead of the copy to the host (~5 ms).
    if (op.recv_bytes >= options_.stage_min_bytes && EnsureStaging()) {
      // Some of its pieces may be queued even when it fails.
      through_ring.push_back(k);
      ok = StageThroughRing(b.pinned.get(), op.recv, op.recv_bytes, op.stream);
      continue;
    }
    if (::cudaMemcpyAsync(b.pinned.get(), op.recv, op.recv_bytes, cudaMemcpyDeviceToHost,
                          op.stream) != cudaSuccess) {
      (void)::cudaGetLastError();
      ok = false;
    }
  }
  if (!through_ring.empty()) {
    // Its results are on the host once their last piece is (the staging
    // stream runs its copies in order); nothing of the unit waits for that.
    // Also after a failure: a buffer is given back only once what was
    // queued into it landed.
    cudaEvent_t ev = nullptr;
    if (::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess ||
        ::cudaEventRecord(ev, stage_stream_) != cudaSuccess) {
      (void)::cudaGetLastError();
      if (ev != nullptr) ::cudaEventDestroy(ev);
      return false;
    }
    // A retry's copy replaces the failed attempt's (later on the same stream).
    auto copy = std::make_shared<HostCopy>(ev, timeout_, host_copies_stuck_);
    for (size_t k : through_ring) (*staged)[k].pinned.get_deleter().copy = copy;
  }
  return ok;
}

std::string CudaNccl::KeptResult(ncclComm_t comm, uint64_t minibatch, uint64_t index, size_t op) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return "";
  auto it = c->cache.find(UnitOrdinal{minibatch, index});
  if (it == c->cache.end() || op >= it->second.size()) return "";
  const ResultBuf& b = it->second[op];
  if (!b.Landed()) return "";
  return std::string(b.data(), b.bytes);
}

void CudaNccl::KeepResults(Comm& c, UnitOrdinal ordinal, std::vector<ResultBuf> bufs) {
  auto it = c.cache.find(ordinal);
  if (it != c.cache.end()) {
    for (const ResultBuf& b : it->second) c.cache_bytes -= b.bytes;
  }
  for (const ResultBuf& b : bufs) c.cache_bytes += b.bytes;
  c.cache[ordinal] = std::move(bufs);
}

void CudaNccl::CacheResults(Comm& c, UnitOrdinal ordinal, std::vector<ResultBuf> staged) {
  KeepResults(c, ordinal, std::move(staged));
  // Kept until the boundary after next: a job that places none (a benchmark
  // loop, a program without a training step) keeps every result.
  const uint64_t bytes = c.cache_bytes;
  if (bytes >= c.cache_warn_bytes) {
    const uint64_t oldest = c.cache.begin()->first.first;
    // All of it from the current minibatch: no boundary since these units
    // began (a warning); else boundaries are placed and this may be what
    // two minibatches' collectives return (information).
    const std::string what = absl::StrCat(
        "rank ", c.rank, ": ", bytes >> 20,
        " MiB of pinned host memory hold collective results kept for a replacement (",
        c.cache.size(), " units of minibatches ", oldest, "-", c.minibatch,
        "); a result is kept until the second boundary after its minibatch, so this grows "
        "while none is placed (mark training steps with revenantMarkStep())");
    if (oldest < c.minibatch) {
      REVENANT_LOG(INFO, kLog) << what;
    } else {
      REVENANT_LOG(WARNING, kLog) << what;
    }
    while (c.cache_warn_bytes <= bytes) c.cache_warn_bytes *= 2;
  }
}

bool CudaNccl::ApplyPrereceived(Comm& c, UnitOrdinal ordinal, const std::vector<Op>& ops,
                                ncclResult_t* result) {
  auto it = c.prereceived.find(ordinal);
  if (it == c.prereceived.end()) return false;
  std::vector<std::string> bufs = std::move(it->second);
  c.prereceived.erase(it);
  *result = ncclSuccess;
  for (size_t k = 0; k < ops.size(); ++k) {
    const Op& op = ops[k];
    if (op.recv_bytes == 0) continue;
    if (k >= bufs.size() || bufs[k].size() != op.recv_bytes) {
      REVENANT_LOG(ERROR, kLog) << "collective (" << ordinal.first << ", " << ordinal.second
                                << "): the survivors' result has " << (k < bufs.size() ? bufs[k].size() : 0)
                                << " bytes, this rank expects " << op.recv_bytes;
      *result = ncclInvalidUsage;
      return true;
    }
    // In stream order: after the work that precedes the unit, before what follows.
    cudaEvent_t ev = nullptr;
    if (!EnsureBounce(op.recv_bytes)) {
      *result = ncclSystemError;
      return true;
    }
    std::memcpy(bounce_, bufs[k].data(), op.recv_bytes);
    cudaError_t e = ::cudaMemcpyAsync(op.recv, bounce_, op.recv_bytes, cudaMemcpyHostToDevice,
                                      op.stream);
    if (e == cudaSuccess) e = ::cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    if (e == cudaSuccess) e = ::cudaEventRecord(ev, op.stream);
    absl::Status s = e == cudaSuccess ? WaitEvent(ev, "a received result's copy")
                                      : absl::InternalError(::cudaGetErrorString(e));
    if (ev != nullptr) ::cudaEventDestroy(ev);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, kLog) << "collective (" << ordinal.first << ", " << ordinal.second
                                << "): " << s;
      *result = ncclUnhandledCudaError;
      return true;
    }
  }
  REVENANT_LOG(DEBUG, kLog) << "collective (" << ordinal.first << ", " << ordinal.second
                            << "): result taken from the survivors";
  // Kept for later recoveries, as a unit this rank ran.
  std::vector<ResultBuf> kept(bufs.size());
  for (size_t k = 0; k < bufs.size(); ++k) {
    kept[k].bytes = bufs[k].size();
    kept[k].owned = std::move(bufs[k]);
  }
  KeepResults(c, ordinal, std::move(kept));
  return true;
}

bool CudaNccl::MayDefer(const Comm& c, const std::vector<Op>& ops) const {
  if (options_.pipeline <= 1 || replaying_.load() || c.joining || !c.prereceived.empty() ||
      c.aborted.load() || c.comm == nullptr) {
    return false;
  }
  for (const Op& op : ops) {
    for (const PendingUnit& p : c.pending) {
      for (const Op& q : p.ops) {
        // Overwriting the input of a unit in flight, which its retry needs;
        // reading the result of one (a retry of this unit would restore an
        // input made from a failed result).
        if (Overlap(op.recv, op.recv_bytes, q.send, q.send_bytes) ||
            Overlap(op.send, op.send_bytes, q.recv, q.recv_bytes)) {
          return false;
        }
      }
    }
  }
  return true;
}

ncclResult_t CudaNccl::Attempt(Comm& c, const char* what, UnitOrdinal ordinal,
                               std::vector<Op>& ops, bool* staged,
                               std::vector<ResultBuf>* staged_bufs) {
  ncclResult_t a = Issue(c, what, ops);
  if (a != ncclSuccess) return a;
  *staged = StageResults(ops, staged_bufs);
  return Fence(c, what, ordinal, ops);
}

ncclResult_t CudaNccl::RunUnit(Comm& c, const char* what, std::vector<Op>& ops, bool may_defer) {
  // The deferred fence (docs/recovery.md, "Over real NCCL"): units of other
  // communicators are waited for first (this one may read what they write,
  // and a failed one must be retried before anything behind it runs); c's
  // own stay in flight when this one may join them.
  if (ncclResult_t o = SettleOthers(&c); o != ncclSuccess) {
    REVENANT_LOG(WARNING, kLog) << what << ": a collective of another communicator failed: "
                                << ::ncclGetErrorString(o);
  }
  const bool defer = may_defer && MayDefer(c, ops);
  if (!c.pending.empty()) {
    const size_t keep = defer ? static_cast<size_t>(options_.pipeline) - 1 : 0;
    if (ncclResult_t p = SettleComm(c, keep); p != ncclSuccess) return p;
  }
  const UnitOrdinal ordinal{c.minibatch, c.next_index++};
  ncclResult_t r = ncclSuccess;
  if (ApplyPrereceived(c, ordinal, ops, &r)) return r;
  if (c.joining) {
    // A replacement still in its first minibatch: nothing to transfer, the
    // replay rebuilt everything; it joins for the collectives' results.
    absl::Status s = Recover(c, ordinal, /*replacement=*/true, c.minibatch, nullptr);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, kLog) << what << ": joining the survivors failed: " << s;
      c.failed = true;
      return absl::IsDeadlineExceeded(s) ? ncclSystemError : ncclRemoteError;
    }
    if (ApplyPrereceived(c, ordinal, ops, &r)) return r;
  }
  if (c.nranks == 1) {
    // A communicator of one rank has no peer to lose: a replacement is never
    // asked for its results (no survivor needs them), a retry never needs
    // its inputs (no failure a recovery cures), and no half-reduced data can
    // come from a peer (no fence). Issued as the application issued it: a
    // local error surfaces as it would natively.
    return Issue(c, what, ops);
  }
  bool staged = false;
  std::vector<ResultBuf> staged_bufs;
  if (c.aborted.load() && c.comm != nullptr) {
    r = static_cast<ncclResult_t>(c.error.load());  // failed earlier: recover below
  } else if (defer) {
    // Left in flight: its results staged, its events recorded; SettleComm
    // waits for it before anything that could depend on it runs.
    PendingUnit p;
    p.ordinal = ordinal;
    p.what = what;
    r = SaveInputs(c, ops);
    if (r == ncclSuccess) r = Issue(c, what, ops);
    if (r == ncclSuccess) {
      p.staged_ok = StageResults(ops, &p.staged);
      if (!RecordUnitEvents(ops, &p.events)) r = ncclUnhandledCudaError;
    }
    p.ops = ops;
    if (r == ncclSuccess || (!c.pending.empty() && (r == ncclRemoteError || r == ncclSystemError))) {
      // A unit whose issue failed behind units in flight: they failed with
      // it and recover first, in their order (every member then reports the
      // oldest unit it has not completed), this one after them.
      p.issue_error = r;
      c.pending.push_back(std::move(p));
      pending_units_.fetch_add(1, std::memory_order_relaxed);
      return r == ncclSuccess ? ncclSuccess : SettleComm(c, 0);
    }
    staged = p.staged_ok;
    staged_bufs = std::move(p.staged);
  } else {
    r = SaveInputs(c, ops);
    if (r == ncclSuccess) r = Attempt(c, what, ordinal, ops, &staged, &staged_bufs);
  }
  return FinishUnit(c, what, ordinal, ops, r, staged, std::move(staged_bufs));
}

ncclResult_t CudaNccl::FinishUnit(Comm& c, const char* what, UnitOrdinal ordinal,
                                  std::vector<Op>& ops, ncclResult_t r, bool staged,
                                  std::vector<ResultBuf> staged_bufs) {
  // A member died (or stopped answering): recover and retry, bounded by
  // the recovery timeout, as long as the failure is one a recovery cures.
  while (r == ncclRemoteError || r == ncclSystemError) {
    RecordEvent(job_root_, "survivor_collective_failed", options_.rank, 0,
                absl::StrCat("collective (", ordinal.first, ", ", ordinal.second, ")"));
    REVENANT_LOG(WARNING, kLog) << "rank " << c.rank << ": collective (" << ordinal.first << ", "
                                << ordinal.second << ") failed (" << ::ncclGetErrorString(r)
                                << "); waiting for the job's recovery";
    absl::Status s = Recover(c, ordinal, /*replacement=*/false, c.minibatch, nullptr);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, kLog) << "rank " << c.rank << ": collective (" << ordinal.first << ", "
                                << ordinal.second << ") cannot be recovered: " << s;
      if (!c.aborted.load() && c.comm != nullptr) AbortComm(c, r, s.ToString());
      c.failed = true;
      for (ResultBuf& b : staged_bufs) c.quarantine.push_back(std::move(b));
      return r;
    }
    if (ApplyPrereceived(c, ordinal, ops, &r)) {
      // The failed attempt's copies may still land in its buffers.
      for (ResultBuf& b : staged_bufs) c.quarantine.push_back(std::move(b));
      if (r == ncclSuccess) ReleaseInputs(c, ops);
      return r;
    }
    r = RestoreInputs(ops);
    if (r == ncclSuccess) r = Attempt(c, what, ordinal, ops, &staged, &staged_bufs);
  }
  if (r == ncclSuccess && staged) {
    CacheResults(c, ordinal, std::move(staged_bufs));
  } else {
    // A failed unit's copies may still land in its buffers.
    for (ResultBuf& b : staged_bufs) c.quarantine.push_back(std::move(b));
  }
  // Its streams passed it: its saved inputs are free again (a unit that
  // failed for good keeps them: a late copy may still read them).
  if (r == ncclSuccess) ReleaseInputs(c, ops);
  return r;
}

ncclResult_t CudaNccl::SettleComm(Comm& c, size_t keep) {
  while (c.pending.size() > keep) {
    PendingUnit& front = c.pending.front();
    const ncclResult_t r = front.issue_error != ncclSuccess
                               ? front.issue_error
                               : WaitUnit(c, front.what, front.ordinal, &front.events);
    if (r == ncclSuccess) {
      if (front.staged_ok) {
        CacheResults(c, front.ordinal, std::move(front.staged));
      } else {
        for (ResultBuf& b : front.staged) c.quarantine.push_back(std::move(b));
      }
      ReleaseInputs(c, front.ops);
      c.pending.pop_front();
      pending_units_.fetch_sub(1, std::memory_order_relaxed);
      continue;
    }
    // The oldest unit failed, and every unit behind it on the same
    // communicator with it: the first is recovered (the members agree on
    // the units each completed and re-form the communicator), the others
    // take the survivors' results or run again on the new communicator, in
    // their order. Their inputs are intact: nothing that could overwrite
    // them ran meanwhile (MayDefer, CudaBackend::BeforeRequest).
    std::deque<PendingUnit> failed = std::move(c.pending);
    c.pending.clear();
    pending_units_.fetch_sub(static_cast<int>(failed.size()), std::memory_order_relaxed);
    ncclResult_t first_error = ncclSuccess;
    for (size_t k = 0; k < failed.size(); ++k) {
      PendingUnit& p = failed[k];
      for (cudaEvent_t ev : p.events) ::cudaEventDestroy(ev);
      p.events.clear();
      if (first_error != ncclSuccess) {
        for (ResultBuf& b : p.staged) c.quarantine.push_back(std::move(b));
        continue;
      }
      ncclResult_t u = r;
      if (k > 0) {
        // Its first attempt ran on the communicator the recovery replaced.
        if (ApplyPrereceived(c, p.ordinal, p.ops, &u)) {
          for (ResultBuf& b : p.staged) c.quarantine.push_back(std::move(b));
          if (u == ncclSuccess) ReleaseInputs(c, p.ops);
          if (u != ncclSuccess) first_error = u;
          continue;
        }
        if (c.aborted.load() || c.comm == nullptr) {
          u = static_cast<ncclResult_t>(c.error.load());
        } else if ((u = RestoreInputs(p.ops)) == ncclSuccess) {
          u = Attempt(c, p.what, p.ordinal, p.ops, &p.staged_ok, &p.staged);
        }
      }
      u = FinishUnit(c, p.what, p.ordinal, p.ops, u, p.staged_ok, std::move(p.staged));
      if (u != ncclSuccess) first_error = u;
    }
    // Every unit ran again synchronously: events recorded behind their
    // failed attempts are behind nothing in flight any more.
    if (pending_units_.load(std::memory_order_relaxed) == 0) behind_.clear();
    return first_error;
  }
  if (pending_units_.load(std::memory_order_relaxed) == 0) behind_.clear();
  return ncclSuccess;
}

ncclResult_t CudaNccl::SettleOthers(const Comm* except) {
  if (pending_units_.load(std::memory_order_relaxed) == 0) return ncclSuccess;
  ncclResult_t first = ncclSuccess;
  for (auto& [h, c] : comms_) {
    if (c.get() == except || c->pending.empty()) continue;
    const ncclResult_t r = SettleComm(*c, 0);
    if (first == ncclSuccess) first = r;
  }
  return first;
}

ncclResult_t CudaNccl::SettleAll() {
  if (pending_units_.load(std::memory_order_relaxed) == 0) return ncclSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  return SettleOthers(nullptr);
}

namespace {

bool IsDefaultStream(cudaStream_t s) {
  return s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread;
}

// Whether the legacy default stream orders `s` (a stream created without
// cudaStreamNonBlocking); an unknown stream counts as blocking.
bool Blocking(cudaStream_t s) {
  if (IsDefaultStream(s)) return true;
  unsigned int flags = 0;
  if (::cudaStreamGetFlags(s, &flags) != cudaSuccess) {
    (void)::cudaGetLastError();
    return true;
  }
  return (flags & cudaStreamNonBlocking) == 0;
}

}  // namespace

bool CudaNccl::TiedToPending(cudaStream_t stream) const {
  const bool is_default = IsDefaultStream(stream);
  int blocking = -1;  // stream's, looked up once when needed
  for (const auto& [h, c] : comms_) {
    for (const PendingUnit& p : c->pending) {
      for (const Op& op : p.ops) {
        if (op.stream == stream) return true;
        if (is_default && Blocking(op.stream)) return true;
        if (IsDefaultStream(op.stream)) {
          if (blocking < 0) blocking = Blocking(stream) ? 1 : 0;
          if (blocking == 1) return true;
        }
      }
    }
  }
  return false;
}

ncclResult_t CudaNccl::BeforeStreamWork(cudaStream_t stream) {
  if (pending_units_.load(std::memory_order_relaxed) == 0) return ncclSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  if (Overlaps() && !TiedToPending(stream)) return ncclSuccess;
  return SettleOthers(nullptr);
}

void CudaNccl::NoteEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (pending_units_.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  behind_.erase(std::remove(behind_.begin(), behind_.end(), event), behind_.end());
  if (pending_units_.load(std::memory_order_relaxed) > 0 && TiedToPending(stream)) {
    behind_.push_back(event);
  }
}

ncclResult_t CudaNccl::BeforeEventUse(cudaEvent_t event) {
  if (pending_units_.load(std::memory_order_relaxed) == 0) return ncclSuccess;
  std::lock_guard<std::mutex> lock(mu_);
  if (Overlaps() && std::find(behind_.begin(), behind_.end(), event) == behind_.end()) {
    return ncclSuccess;
  }
  return SettleOthers(nullptr);
}

absl::Status CudaNccl::ReadState(std::string* blob) {
  if (!live_allocations_) return absl::FailedPreconditionError("no access to the device state");
  std::vector<StatePiece> pieces;
  uint64_t bytes = 0;
  for (const auto& [addr, size] : live_allocations_()) {
    StatePiece p;
    p.offset = addr - range_base_;
    p.bytes.resize(size);
    for (uint64_t done = 0; done < size;) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(size - done, 64ull << 20));
      if (!EnsureBounce(len)) return absl::ResourceExhaustedError("no pinned bounce buffer");
      if (absl::Status s = CopyOnAux(bounce_, reinterpret_cast<const void*>(addr + done), len,
                                     cudaMemcpyDeviceToHost);
          !s.ok()) {
        return s;
      }
      std::memcpy(p.bytes.data() + done, bounce_, len);
      done += len;
    }
    bytes += size;
    pieces.push_back(std::move(p));
  }
  *blob = EncodeState(pieces);
  REVENANT_LOG(INFO, kLog) << "state of " << pieces.size() << " allocations (" << bytes
                           << " bytes) read for the replacements";
  return absl::OkStatus();
}

absl::Status CudaNccl::WriteState(const std::string& blob) {
  if (!live_allocations_) return absl::FailedPreconditionError("no access to the device state");
  absl::StatusOr<std::vector<StatePiece>> pieces = DecodeState(blob);
  if (!pieces.ok()) return pieces.status();
  const std::vector<std::pair<uint64_t, uint64_t>> live = live_allocations_();
  size_t matched = 0;
  uint64_t bytes = 0;
  for (const StatePiece& p : *pieces) {
    const std::pair<uint64_t, uint64_t> mine{range_base_ + p.offset, p.bytes.size()};
    if (std::find(live.begin(), live.end(), mine) == live.end()) continue;
    ++matched;
    for (uint64_t done = 0; done < p.bytes.size();) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(p.bytes.size() - done, 64ull << 20));
      if (!EnsureBounce(len)) return absl::ResourceExhaustedError("no pinned bounce buffer");
      std::memcpy(bounce_, p.bytes.data() + done, len);
      if (absl::Status s = CopyOnAux(reinterpret_cast<void*>(mine.first + done), bounce_, len,
                                     cudaMemcpyHostToDevice);
          !s.ok()) {
        return s;
      }
      done += len;
    }
    bytes += p.bytes.size();
  }
  if (matched != pieces->size()) {
    REVENANT_LOG(WARNING, kLog) << "only " << matched << " of " << pieces->size()
                                << " allocations of the state source exist here";
  }
  REVENANT_LOG(INFO, kLog) << "state of " << matched << " allocations (" << bytes
                           << " bytes) received";
  return absl::OkStatus();
}

absl::Status CudaNccl::Recover(Comm& c, UnitOrdinal pending, bool replacement,
                               uint64_t minibatch, bool* behind) {
  if (options_.crash_in_recovery && !replacement) options_.crash_in_recovery();
  const RecoveryRole role{pending, replacement, minibatch, behind};
  const absl::Time deadline = absl::Now() + options_.recovery_timeout;
  absl::Status last = absl::DeadlineExceededError("no recovery epoch was declared");
  // A survivor's failed communicator is aborted at once, not once the epoch
  // is declared, and without waiting for the abort to finish: it is replaced
  // whatever the epoch (ncclCommShrink of it fails on NCCL 2.28), and its
  // abort (~0.5 s over the socket transport, mostly tearing down its proxy
  // and sockets) runs on its own thread while the members agree and form
  // the new communicator. The abort ends the old kernels first (NCCL's abort
  // flag), and work of the new communicator queues behind them on the
  // application's stream, so the order on the device stays the stream's.
  if (!replacement && c.comm != nullptr && !c.aborted.load()) {
    AbortComm(c, ncclRemoteError, "a member failed; the communicator is replaced",
              /*wait=*/false);
    RecordEvent(job_root_, "survivor_comm_abort_started", options_.rank, 0, "");
  }
  while (absl::Now() < deadline) {
    int declared = ReadEpoch();
    while (declared <= c.epoch && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      declared = ReadEpoch();
    }
    if (declared <= c.epoch) break;
    const int epoch = declared;
    c.epoch = epoch;
    const RecoveryEpoch at{epoch, RecoveryDirFor(job_root_, c.key, epoch), deadline,
                           [this, epoch] { return ReadEpoch() > epoch; }};
    bool retry = false;
    absl::Status s = RecoverAtEpoch(c, role, at, &retry);
    if (s.ok() || !retry) return s;
    last = s;  // a newer epoch (a member died meanwhile), or the bound
  }
  return last;
}

absl::Status CudaNccl::RecoverAtEpoch(Comm& c, const RecoveryRole& role,
                                      const RecoveryEpoch& at, bool* retry) {
  const absl::Time start = absl::Now();
  // The failed communicator's kernels and proxy end with the abort (its
  // peer is gone: ncclCommShrink of it fails on NCCL 2.28, so it is not
  // shrunk but replaced).
  if (c.comm != nullptr && !c.aborted.load()) {
    AbortComm(c, ncclRemoteError, absl::StrCat("recovery epoch ", at.epoch));
  }
  absl::StatusOr<NcclRecoveryReport> me = OwnRecoveryReport(c, role);
  if (!me.ok()) return me.status();
  absl::StatusOr<std::vector<NcclRecoveryReport>> all =
      ExchangeRecoveryReports(at.dir, *me, c.nranks, at.deadline, at.newer);
  if (!all.ok()) {
    REVENANT_LOG(WARNING, kLog) << "rank " << c.rank << ": recovery epoch " << at.epoch
                                << " did not form: " << all.status();
    *retry = true;
    return all.status();
  }
  RecordEvent(job_root_, "recovery_reports_exchanged", options_.rank, at.epoch,
              absl::StrCat(absl::ToInt64Milliseconds(absl::Now() - start), " ms into the epoch"));
  const RecoveryPlan plan = PlanRecovery(Reports(*all));
  if (!plan.error.empty()) return absl::FailedPreconditionError(plan.error);
  uint64_t nunits = 0;
  absl::Status step = ShareUnitResults(c, plan, role, at, &nunits);
  if (step.ok()) step = ShareState(c, plan, role, at);
  if (!step.ok()) {
    REVENANT_LOG(WARNING, kLog) << "rank " << c.rank << ": recovery epoch " << at.epoch
                                << " failed: " << step;
    *retry = absl::IsAborted(step) || absl::IsDeadlineExceeded(step);
    return step;
  }
  if (absl::Status s = FormRecoveredComm(c, at, (*all)[0].unique_id_hex, retry); !s.ok()) {
    return s;
  }
  c.joining = false;
  // Every member's init passed the directory's files: nobody reads them.
  if (c.rank == 0) RemoveRecoveryDirs(job_root_, c.key, at.epoch);
  const std::string detail =
      absl::StrCat("real NCCL, ", nunits, " completed collectives from rank ", plan.provider,
                   plan.state_source >= 0 ? absl::StrCat(", state from rank ", plan.state_source)
                                          : std::string());
  RecordEvent(job_root_, role.replacement ? "replacement_joined" : "survivor_joined",
              options_.rank, at.epoch, detail);
  REVENANT_LOG(INFO, kLog) << "rank " << c.rank << ": recovery epoch " << at.epoch
                           << ": communicator re-formed in "
                           << absl::ToInt64Milliseconds(absl::Now() - start) << " ms ("
                           << detail << ")";
  return absl::OkStatus();
}

absl::StatusOr<NcclRecoveryReport> CudaNccl::OwnRecoveryReport(const Comm& c,
                                                               const RecoveryRole& role) {
  NcclRecoveryReport me;
  me.rank = c.rank;
  me.report.pending = role.pending;
  me.report.replacement = role.replacement;
  me.report.minibatch = role.minibatch;
  me.report.restored = role.replacement && role.minibatch > 0 &&
                       restored_minibatch_.load() == role.minibatch;
  if (c.rank == 0) {
    ncclUniqueId id;
    if (ncclResult_t r = ::ncclGetUniqueId(&id); r != ncclSuccess) {
      return absl::InternalError(absl::StrCat("ncclGetUniqueId: ", ::ncclGetErrorString(r)));
    }
    me.unique_id_hex =
        absl::BytesToHexString(absl::string_view(id.internal, sizeof(id.internal)));
  }
  return me;
}

absl::Status CudaNccl::ShareUnitResults(Comm& c, const RecoveryPlan& plan,
                                        const RecoveryRole& role, const RecoveryEpoch& at,
                                        uint64_t* nunits) {
  if (plan.all_restored || !(plan.units_from < plan.units_to)) return absl::OkStatus();
  if (c.rank == plan.provider) {
    UnitResults send;
    for (const auto& [ord, bufs] : c.cache) {
      if (ord < plan.units_from || !(ord < plan.units_to)) continue;
      std::vector<std::string>& out = send[ord];
      for (const ResultBuf& b : bufs) {
        if (!b.Landed()) {
          return absl::InternalError(absl::StrCat("the kept result of unit (", ord.first, ", ",
                                                  ord.second, ") never reached the host"));
        }
        out.emplace_back(b.data(), b.bytes);
      }
    }
    *nunits = send.size();
    return WriteRecoveryBlob(at.dir, "units", EncodeUnits(send));
  }
  if (!(role.pending < plan.units_to)) return absl::OkStatus();
  absl::StatusOr<std::string> blob = WaitRecoveryBlob(at.dir, "units", at.deadline, at.newer);
  absl::StatusOr<UnitResults> units =
      blob.ok() ? DecodeUnits(*blob) : absl::StatusOr<UnitResults>(blob.status());
  if (!units.ok()) return units.status();
  *nunits = units->size();
  for (auto& [ord, bufs] : *units) {
    if (!(ord < role.pending)) c.prereceived[ord] = std::move(bufs);
  }
  return absl::OkStatus();
}

absl::Status CudaNccl::ShareState(Comm& c, const RecoveryPlan& plan, const RecoveryRole& role,
                                  const RecoveryEpoch& at) {
  if (plan.state_source < 0) return absl::OkStatus();
  if (c.rank == plan.state_source) {
    std::string blob;
    absl::Status s = ReadState(&blob);
    return s.ok() ? WriteRecoveryBlob(at.dir, "state", blob) : s;
  }
  if (!role.replacement) return absl::OkStatus();
  absl::StatusOr<std::string> blob = WaitRecoveryBlob(at.dir, "state", at.deadline, at.newer);
  absl::Status s = blob.ok() ? WriteState(*blob) : blob.status();
  if (s.ok() && role.behind != nullptr) *role.behind = plan.Skips(c.rank);
  return s;
}

absl::Status CudaNccl::FormRecoveredComm(Comm& c, const RecoveryEpoch& at,
                                         const std::string& unique_id_hex, bool* retry) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const std::string raw_id = absl::HexStringToBytes(unique_id_hex);
  if (raw_id.size() != sizeof(id.internal)) {
    return absl::DataLossError("rank 0's recovery report carries no unique id");
  }
  std::memcpy(id.internal, raw_id.data(), sizeof(id.internal));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t fresh = nullptr;
  ncclResult_t r = ::ncclCommInitRankConfig(&fresh, c.nranks, id, c.rank, &cfg);
  if ((r != ncclSuccess && r != ncclInProgress) || fresh == nullptr) {
    absl::Status s = absl::InternalError(absl::StrCat(
        "ncclCommInitRankConfig: ", ::ncclGetErrorString(r), ": ", LastError(fresh)));
    REVENANT_LOG(WARNING, kLog) << "rank " << c.rank << ": recovery epoch " << at.epoch
                                << ": the new communicator did not start: " << s;
    *retry = true;
    return s;
  }
  c.comm = fresh;
  c.aborted.store(false);
  c.error.store(ncclSuccess);
  c.why.clear();
  if (r == ncclInProgress) r = Settle(c, "ncclCommInitRank (recovery)", at.newer);
  if (r == ncclSuccess && warm_up_) r = WarmUp(c);
  if (r != ncclSuccess) {
    if (!c.aborted.load()) AbortComm(c, r, "the re-formed communicator failed");
    absl::Status s = absl::UnavailableError(absl::StrCat(
        "the communicator of epoch ", at.epoch, " did not form: ", ::ncclGetErrorString(r)));
    REVENANT_LOG(WARNING, kLog) << "rank " << c.rank << ": " << s;
    *retry = true;
    return s;
  }
  return absl::OkStatus();
}

absl::Status CudaNccl::JoinRecovery(uint64_t minibatch, bool* behind) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<Comm>> joining;
  for (auto& [h, c] : comms_) {
    if (c->joining) joining.push_back(c);  // one-rank communicators have no peers
  }
  if (joining.empty()) return absl::UnimplementedError("no communicator to recover through");
  *behind = false;
  for (auto& c : joining) {
    bool b = false;
    absl::Status s = Recover(*c, UnitOrdinal{minibatch, 0}, /*replacement=*/true, minibatch, &b);
    if (!s.ok()) return s;
    *behind |= b;
  }
  return absl::OkStatus();
}

ncclResult_t CudaNccl::CheckReplayable(Comm& parent, const char* what) {
  if (!replaying_.load()) return ncclSuccess;
  return parent.nranks == 1 ? ncclSuccess : Refused(what, parent.nranks);
}

// --- Rows ------------------------------------------------------------------------------------

ncclResult_t CudaNccl::GetVersion(int* version) { return ::ncclGetVersion(version); }

ncclResult_t CudaNccl::GetUniqueId(ncclUniqueId* id) { return ::ncclGetUniqueId(id); }

ncclResult_t CudaNccl::CommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id,
                                          int rank, ncclConfig_t* config) {
  std::lock_guard<std::mutex> lock(mu_);
  if (comm == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    REVENANT_LOG(WARNING, kLog) << "ncclCommInitRank: rank " << rank << " of " << nranks
                                << " is invalid";
    return ncclInvalidArgument;
  }
  // The communicator's name across ranks and replacements: the id the
  // application made it with (a replacement's journal replays the same).
  const std::string key = IdHash(absl::string_view(id.internal, sizeof(id.internal)));
  if (replaying_.load()) {
    if (nranks != 1) {
      if (options_.recovery_timeout <= absl::ZeroDuration() || job_root_.empty()) {
        return Refused("ncclCommInitRank", nranks);
      }
      // The survivors formed this communicator long ago: it joins them at
      // the recovery epoch (JoinRecovery, or its first collective in the
      // first minibatch), under a fresh unique id.
      std::shared_ptr<Comm> c = Register(nullptr);
      c->nranks = nranks;
      c->rank = rank;
      c->key = key;
      c->joining = true;
      *comm = Handle(c);
      REVENANT_LOG(INFO, kLog) << "replay: communicator rank " << rank << " of " << nranks
                               << " joins the survivors at the recovery epoch";
      return ncclSuccess;
    }
    // The journaled id's bootstrap died with the old agent; one rank needs
    // no peer, so a fresh id re-creates the same communicator.
    ncclResult_t r = ::ncclGetUniqueId(&id);
    if (r != ncclSuccess) {
      REVENANT_LOG(ERROR, kLog) << "replay: no fresh unique id: " << ::ncclGetErrorString(r);
      return r;
    }
    REVENANT_LOG(INFO, kLog) << "replay: re-creating a 1-rank communicator with a fresh "
                                "unique id";
  }
  if (ncclResult_t a = AgreeToStart(nranks, rank, id); a != ncclSuccess) return a;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) cfg = *config;
  cfg.blocking = 0;
  ncclComm_t raw = nullptr;
  ncclResult_t r = ::ncclCommInitRankConfig(&raw, nranks, id, rank, &cfg);
  if ((r != ncclSuccess && r != ncclInProgress) || raw == nullptr) {
    REVENANT_LOG(ERROR, kLog) << "ncclCommInitRankConfig(nranks " << nranks << ", rank " << rank
                              << ", device " << device_ << "): " << ::ncclGetErrorString(r)
                              << ": " << LastError(raw);
    return r == ncclSuccess ? ncclInternalError : r;
  }
  std::shared_ptr<Comm> c = Register(raw);
  c->nranks = nranks;
  c->rank = rank;
  c->key = key;
  c->epoch = ReadEpoch();
  *comm = Handle(c);
  if (group_depth_ > 0) {
    group_comms_.push_back(c);
    return ncclSuccess;
  }
  if (r == ncclInProgress) r = Settle(*c, "ncclCommInitRank");
  if (r != ncclSuccess) {
    AbortComm(*c, r, "initialization failed");
    comms_.erase(*comm);
    *comm = nullptr;
    return r;
  }
  REVENANT_LOG(DEBUG, kLog) << "communicator " << static_cast<void*>(raw) << ": rank " << rank
                            << " of " << nranks << " on GPU " << device_
                            << (Recoverable(*c) ? " (recoverable: collectives fenced)" : "");
  if (warm_up_) {
    r = WarmUp(*c);
    if (r != ncclSuccess) {
      if (!c->aborted.load()) AbortComm(*c, r, "the warm-up all-reduce failed");
      comms_.erase(*comm);
      *comm = nullptr;
      return r;
    }
  }
  return ncclSuccess;
}

ncclResult_t CudaNccl::CommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                                 ncclConfig_t* config) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> parent = Find(comm);
  if (parent == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  if (parent->aborted.load()) return static_cast<ncclResult_t>(parent->error.load());
  if (ncclResult_t x = CheckReplayable(*parent, "ncclCommSplit"); x != ncclSuccess) return x;
  if (parent->comm == nullptr) return Refused("ncclCommSplit", parent->nranks);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) cfg = *config;
  cfg.blocking = 0;
  *newcomm = nullptr;
  ncclComm_t raw = nullptr;
  ncclResult_t r = ::ncclCommSplit(parent->comm, color, key, &raw, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  if (r == ncclInProgress) r = Settle(*parent, "ncclCommSplit");
  if (raw == nullptr) return r;  // NCCL_SPLIT_NOCOLOR
  // A split has no unique id to re-form from: it is not recoverable.
  std::shared_ptr<Comm> c = Register(raw);
  *newcomm = Handle(c);
  if (r == ncclSuccess) r = Settle(*c, "ncclCommSplit (new communicator)");
  if (r == ncclSuccess) {
    (void)::ncclCommCount(raw, &c->nranks);
    (void)::ncclCommUserRank(raw, &c->rank);
  }
  return r;
}

ncclResult_t CudaNccl::CommShrink(ncclComm_t comm, int* exclude, int exclude_count,
                                  ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> parent = Find(comm);
  if (parent == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  if (parent->aborted.load()) return static_cast<ncclResult_t>(parent->error.load());
  if (ncclResult_t x = CheckReplayable(*parent, "ncclCommShrink"); x != ncclSuccess) return x;
  if (parent->comm == nullptr) return Refused("ncclCommShrink", parent->nranks);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) cfg = *config;
  cfg.blocking = 0;
  *newcomm = nullptr;
  ncclComm_t raw = nullptr;
  ncclResult_t r = ::ncclCommShrink(parent->comm, exclude, exclude_count, &raw, &cfg, flags);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  if (r == ncclInProgress) r = Settle(*parent, "ncclCommShrink");
  if (raw == nullptr) return r;
  std::shared_ptr<Comm> c = Register(raw);
  *newcomm = Handle(c);
  if (r == ncclSuccess) r = Settle(*c, "ncclCommShrink (new communicator)");
  if (r == ncclSuccess) {
    (void)::ncclCommCount(raw, &c->nranks);
    (void)::ncclCommUserRank(raw, &c->rank);
  }
  return r;
}

ncclResult_t CudaNccl::CommFinalize(ncclComm_t comm) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Comm> c = Find(comm);
    if (c != nullptr && c->comm == nullptr) return ncclSuccess;  // joining: nothing queued
  }
  ncclResult_t r =
      OnComm(comm, "ncclCommFinalize", [](ncclComm_t c) { return ::ncclCommFinalize(c); });
  if (r == ncclSuccess) {
    std::lock_guard<std::mutex> lock(mu_);
    if (std::shared_ptr<Comm> c = Find(comm)) c->finalized = true;
  }
  return r;
}

ncclResult_t CudaNccl::CommDestroy(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  comms_.erase(comm);
  if (c->aborted.load() || c->comm == nullptr) return ncclSuccess;  // nothing left to free
  // Finalize first (flushes outstanding work) unless the application did.
  ncclResult_t r = c->finalized ? ncclSuccess : ::ncclCommFinalize(c->comm);
  if (r == ncclInProgress) r = Settle(*c, "ncclCommFinalize (destroy)");
  if (c->aborted.load()) return ncclSuccess;
  if (r == ncclSuccess) {
    r = ::ncclCommDestroy(c->comm);
    if (r == ncclSuccess) return ncclSuccess;
  }
  AbortComm(*c, r, absl::StrCat("ncclCommDestroy: finalize/destroy failed (",
                                ::ncclGetErrorString(r), "); aborting instead"));
  return ncclSuccess;
}

ncclResult_t CudaNccl::CommAbort(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  comms_.erase(comm);
  if (c->comm != nullptr) AbortComm(*c, ncclInvalidUsage, "ncclCommAbort from the application");
  return ncclSuccess;
}

ncclResult_t CudaNccl::CommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr || error == nullptr) return ncclInvalidArgument;
  if (c->aborted.load()) {
    *error = static_cast<ncclResult_t>(c->error.load());
    return ncclSuccess;
  }
  if (c->comm == nullptr || Recoverable(*c)) {
    // A recoverable communicator's failure is the agent's to cure (at the
    // next settle of its units, or its next collective): the application
    // sees an error only once a recovery failed for good (c->failed, and
    // aborted with that error above).
    *error = ncclSuccess;
    return ncclSuccess;
  }
  return ::ncclCommGetAsyncError(c->comm, error);
}

ncclResult_t CudaNccl::CommCount(ncclComm_t comm, int* count) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Comm> c = Find(comm);
    if (c != nullptr && c->comm == nullptr && count != nullptr) {
      *count = c->nranks;
      return ncclSuccess;
    }
  }
  return OnComm(comm, "ncclCommCount", [&](ncclComm_t c) { return ::ncclCommCount(c, count); });
}
ncclResult_t CudaNccl::CommUserRank(ncclComm_t comm, int* rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Comm> c = Find(comm);
    if (c != nullptr && c->comm == nullptr && rank != nullptr) {
      *rank = c->rank;
      return ncclSuccess;
    }
  }
  return OnComm(comm, "ncclCommUserRank",
                [&](ncclComm_t c) { return ::ncclCommUserRank(c, rank); });
}
ncclResult_t CudaNccl::CommCuDevice(ncclComm_t comm, int* device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::shared_ptr<Comm> c = Find(comm);
    if (c != nullptr && c->comm == nullptr && device != nullptr) {
      *device = device_;
      return ncclSuccess;
    }
  }
  return OnComm(comm, "ncclCommCuDevice",
                [&](ncclComm_t c) { return ::ncclCommCuDevice(c, device); });
}

ncclResult_t CudaNccl::GroupStart() {
  std::lock_guard<std::mutex> lock(mu_);
  ncclResult_t r = ::ncclGroupStart();
  if (r == ncclSuccess) ++group_depth_;
  return r;
}

ncclResult_t CudaNccl::GroupEnd() {
  std::lock_guard<std::mutex> lock(mu_);
  if (group_depth_ == 0) return ncclInvalidUsage;
  ncclResult_t r = ::ncclGroupEnd();
  if (--group_depth_ > 0) return r == ncclInProgress ? ncclSuccess : r;
  std::vector<std::shared_ptr<Comm>> comms = std::move(group_comms_);
  group_comms_.clear();
  std::vector<Queued> units = std::move(group_units_);
  group_units_.clear();
  if (r != ncclSuccess && r != ncclInProgress) {
    REVENANT_LOG(WARNING, kLog) << "ncclGroupEnd: " << ::ncclGetErrorString(r) << ": "
                                << (comms.empty() || comms[0]->comm == nullptr
                                        ? std::string("-")
                                        : LastError(comms[0]->comm));
    return r;
  }
  ncclResult_t first = ncclSuccess;
  for (auto& c : comms) {
    if (c->aborted.load() || c->comm == nullptr) continue;
    ncclResult_t s = Settle(*c, "ncclGroupEnd");
    if (first == ncclSuccess) first = s;
  }
  // Operations of recoverable communicators were held back: each
  // communicator's part runs now as one unit (its own NCCL group), fenced.
  std::vector<bool> taken(units.size(), false);
  for (size_t i = 0; i < units.size(); ++i) {
    if (taken[i]) continue;
    std::vector<Op> ops;
    for (size_t j = i; j < units.size(); ++j) {
      if (taken[j] || units[j].comm != units[i].comm) continue;
      taken[j] = true;
      ops.push_back(std::move(units[j].op));
    }
    ncclResult_t s = RunUnit(*units[i].comm, "ncclGroupEnd", ops, /*may_defer=*/false);
    if (first == ncclSuccess) first = s;
  }
  return first;
}

ncclResult_t CudaNccl::Collective(ncclComm_t comm, const char* what, Op op) {
  std::unique_lock<std::mutex> lock(mu_);
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (!Recoverable(*c)) {
    lock.unlock();
    return OnComm(comm, what, op.call);
  }
  if (replay_phase_.load() == ReplayPhase::kSetupLog) {
    // History: every member ran this unit long ago; the state it produced
    // arrives with the recovery's state transfer.
    ++c->next_index;
    return ncclSuccess;
  }
  if (group_depth_ > 0) {
    group_units_.push_back({c, std::move(op)});
    return ncclSuccess;
  }
  std::vector<Op> ops;
  ops.push_back(std::move(op));
  return RunUnit(*c, what, ops, /*may_defer=*/true);
}

// A communicator of one rank reduces, gathers and broadcasts over its own
// contribution only: the result of every built-in reduction (sum, prod, max,
// min, avg) of one buffer, of a broadcast or reduce rooted at itself and of
// a gather of one piece is its input, bytes unchanged (NCCL itself issues
// such a call as a copy on the stream, after ~4 us of its own host work per
// call, which on a fast device is the whole cost of a 1 MiB all-reduce: the
// agent's share on top of it was 15 % of it, docs/performance.md). So the
// agent issues that copy itself, on the application's stream (nothing at
// all in place): unless REVENANT_NCCL_ONE_RANK_KERNEL=0, up to
// kDeviceCopyMaxBytes through the backend's copy kernel where it vouches
// for both buffers (SetDeviceCopy; natively a loop of such launches issues
// a 1 MiB copy every 2.4 us against 2.9 us for cudaMemcpyAsync on an H100),
// else with cudaMemcpyAsync. Anything else goes to NCCL, which reports what is wrong
// with it as natively: a group (NCCL issues its calls at ncclGroupEnd, after
// work enqueued meanwhile), a user-defined reduction, an unknown type, a
// root other than 0, a null buffer, a communicator in error or joining.
// *handled: false when NCCL must run the call.
ncclResult_t CudaNccl::OneRankLocked(const Comm& c, int kind, size_t count, ncclDataType_t type,
                                     int root, ncclRedOp_t op, const void* send, void* recv,
                                     cudaStream_t stream, bool* handled) {
  *handled = false;
  const Kind k = static_cast<Kind>(kind);
  if (!one_rank_copy_ || c.nranks != 1 || c.comm == nullptr || c.aborted.load() ||
      group_depth_ > 0) {
    return ncclSuccess;
  }
  const bool reduces = k == Kind::kAllReduce || k == Kind::kReduce || k == Kind::kReduceScatter;
  const bool rooted = k == Kind::kBroadcast || k == Kind::kReduce;
  const size_t size = TypeSize(type);
  if ((!reduces && k != Kind::kBroadcast && k != Kind::kAllGather) ||
      (reduces && (static_cast<int>(op) < 0 || op >= ncclNumOps)) || (rooted && root != 0) ||
      size == 0 || (count > 0 && (send == nullptr || recv == nullptr))) {
    return ncclSuccess;
  }
  *handled = true;
  ++one_rank_copies_;
  const size_t bytes = count * size;
  if (bytes == 0 || send == recv) return ncclSuccess;
  if (device_copy_ && bytes <= kDeviceCopyMaxBytes && device_copy_(recv, send, bytes, stream)) {
    ++one_rank_kernel_copies_;
    return ncclSuccess;
  }
  if (::cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDefault, stream) != cudaSuccess) {
    const cudaError_t e = ::cudaGetLastError();
    REVENANT_LOG(WARNING, kLog) << "a one-rank collective's copy of " << bytes
                                << " bytes failed: " << ::cudaGetErrorString(e);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

// A collective of a communicator that is not recoverable (one rank, a
// split, no recovery) runs at once, as OnComm would run it, without making
// a unit: the per-call cost of a small step's all-reduces.
#define REVENANT_COLL_OP(what, kind, count, type, root, redop, sendp, recvp, stream, expr)  \
  do {                                                                                    \
    auto call_ = [=](ncclComm_t c) { return expr; };                                        \
    Op unit;                                                                              \
    {                                                                                     \
      std::lock_guard<std::mutex> lock(mu_);                                              \
      std::shared_ptr<Comm> found = Find(comm);                                           \
      if (found == nullptr) return ncclInvalidArgument;                                   \
      bool handled_ = false;                                                              \
      const ncclResult_t one_ = OneRankLocked(*found, static_cast<int>(kind), count, type,  \
                                              root, redop, sendp, recvp, stream, &handled_); \
      if (handled_) return one_;                                                          \
      if (!Recoverable(*found)) return OnCommLocked(found, what, call_);                  \
      Extents(kind, count, type, root, found->rank, found->nranks, &unit.send_bytes,        \
              &unit.recv_bytes);                                                            \
    }                                                                                     \
    unit.call = call_;                                                                      \
    unit.stream = stream;                                                                   \
    unit.send = sendp;                                                                      \
    unit.recv = recvp;                                                                      \
    return Collective(comm, what, std::move(unit));                                         \
  } while (0)
#define REVENANT_COLL(what, kind, count, type, root, sendp, recvp, stream, expr) \
  REVENANT_COLL_OP(what, kind, count, type, root, ncclSum, sendp, recvp, stream, expr)

ncclResult_t CudaNccl::AllReduce(const void* s, void* r, size_t n, ncclDataType_t t,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL_OP("ncclAllReduce", Kind::kAllReduce, n, t, -1, op, s, r, stream,
                ::ncclAllReduce(s, r, n, t, op, c, stream));
}
ncclResult_t CudaNccl::Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL("ncclBroadcast", Kind::kBroadcast, n, t, root, s, r, stream,
                ::ncclBroadcast(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Reduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                              int root, ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL_OP("ncclReduce", Kind::kReduce, n, t, root, op, s, r, stream,
                ::ncclReduce(s, r, n, t, op, root, c, stream));
}
ncclResult_t CudaNccl::AllGather(const void* s, void* r, size_t n, ncclDataType_t t,
                                 ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL("ncclAllGather", Kind::kAllGather, n, t, -1, s, r, stream,
                ::ncclAllGather(s, r, n, t, c, stream));
}
ncclResult_t CudaNccl::ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL_OP("ncclReduceScatter", Kind::kReduceScatter, n, t, -1, op, s, r, stream,
                ::ncclReduceScatter(s, r, n, t, op, c, stream));
}
ncclResult_t CudaNccl::AlltoAll(const void* s, void* r, size_t n, ncclDataType_t t,
                                ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL("ncclAlltoAll", Kind::kAlltoAll, n, t, -1, s, r, stream,
                ::ncclAlltoAll(s, r, n, t, c, stream));
}
ncclResult_t CudaNccl::Gather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL("ncclGather", Kind::kGather, n, t, root, s, r, stream,
                ::ncclGather(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Scatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                               ncclComm_t comm, cudaStream_t stream) {
  REVENANT_COLL("ncclScatter", Kind::kScatter, n, t, root, s, r, stream,
                ::ncclScatter(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Send(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  REVENANT_COLL("ncclSend", Kind::kSend, n, t, peer, s, nullptr, stream,
                ::ncclSend(s, n, t, peer, c, stream));
}
ncclResult_t CudaNccl::Recv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  REVENANT_COLL("ncclRecv", Kind::kRecv, n, t, peer, nullptr, r, stream,
                ::ncclRecv(r, n, t, peer, c, stream));
}

#undef REVENANT_COLL

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
