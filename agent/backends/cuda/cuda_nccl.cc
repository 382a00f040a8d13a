#include "agent/backends/cuda/cuda_nccl.h"

#include <unistd.h>

#include <algorithm>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "agent/backends/cuda/cuda_nccl_start.h"
#include "common/events.h"
#include "common/knobs.h"
#include "common/logging.h"

extern char** environ;

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr char kLog[] = "cuda-nccl";
constexpr absl::Duration kPoll = absl::Microseconds(100);
constexpr absl::Duration kFirstPolls = absl::Microseconds(5);
constexpr absl::Duration kWatchPeriod = absl::Milliseconds(100);
constexpr absl::Duration kAbortBound = absl::Seconds(10);

std::string LastError(ncclComm_t comm) {
  const char* m = ::ncclGetLastError(comm);
  return m != nullptr && *m != '\0' ? m : "(no message)";
}

int64_t NowNs() { return absl::ToUnixNanos(absl::Now()); }

}  // namespace

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

CudaNccl::CudaNccl(int device, const std::string& job_dir)
    : device_(device),
      job_root_(job_dir.empty() ? "" : job_dir.substr(0, job_dir.find_last_of('/'))),
      timeout_(TimeoutFromEnv()) {
  epoch_at_start_.store(ReadEpoch());
  warm_up_ = knobs::Bool(knobs::Id::kNcclWarmup).value_or(true);
}

CudaNccl::~CudaNccl() {
  stop_.store(true);
  if (watchdog_.joinable()) watchdog_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [raw, c] : comms_) {
    if (!c->aborted.load()) AbortComm(*c, ncclInvalidUsage, "the agent is shutting down");
  }
  comms_.clear();
}

int CudaNccl::ReadEpoch() const { return ReadRecoveryEpoch(job_root_); }

ncclResult_t CudaNccl::Refused(const char* what, int nranks) {
  REVENANT_LOG(ERROR, kLog)
      << what << " during a replay: a communicator of " << nranks
      << " ranks over real NCCL cannot be re-created by a replacement agent (its peers' NCCL "
         "state cannot take a new member: NCCL 2.28 has ncclCommShrink but no ncclCommGrow, "
         "and the survivors' queued work behind the failed collective runs once it is "
         "aborted; docs/recovery.md, Limits). Only 1-rank communicators are recovered.";
  return ncclInvalidUsage;
}

void CudaNccl::SetReplaying(bool replaying) {
  if (replaying) {
    // A spare started before the job declared this epoch: the epoch that
    // made it a replacement is not a reason to abort what it re-creates.
    epoch_at_start_.store(ReadEpoch());
  }
  replaying_.store(replaying);
}

std::shared_ptr<CudaNccl::Comm> CudaNccl::Find(ncclComm_t comm) {
  auto it = comms_.find(comm);
  return it == comms_.end() ? nullptr : it->second;
}

void CudaNccl::Register(ncclComm_t comm) {
  auto c = std::make_shared<Comm>();
  c->comm = comm;
  comms_[comm] = c;
  if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
}

void CudaNccl::AbortComm(Comm& c, ncclResult_t error, const std::string& why) {
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
  const absl::Time deadline = absl::Now() + kAbortBound;
  while (!done->load() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(1));
  if (!done->load()) {
    REVENANT_LOG(ERROR, kLog) << "ncclCommAbort did not return within "
                              << absl::FormatDuration(kAbortBound) << "; left running";
  }
}

ncclResult_t CudaNccl::Settle(Comm& c, const char* what) {
  const absl::Time deadline = absl::Now() + timeout_;
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
    // Short operations (a connection to set up) settle within tens of
    // microseconds: poll finely at first, then every kPoll.
    absl::SleepFor(polls < 20 ? kFirstPolls : kPoll);
  }
}

template <typename F>
ncclResult_t CudaNccl::OnComm(ncclComm_t comm, const char* what, F call) {
  std::lock_guard<std::mutex> lock(mu_);
  // During a replay every communicator this agent knows was re-created by
  // it, hence has one rank (CommInitRankConfig): its calls run for real.
  std::shared_ptr<Comm> c = Find(comm);
  if (c == nullptr) return ncclInvalidArgument;
  if (c->aborted.load()) return static_cast<ncclResult_t>(c->error.load());
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
    if (!epoch_seen && epoch > epoch_at_start_.load()) {
      epoch_seen = true;
      why = absl::StrCat("the job declared recovery epoch ", epoch,
                         " (recovery over NCCL is not implemented in the cuda backend)");
      error = ncclRemoteError;
      cuda_error = cudaErrorLaunchFailure;
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
        if (c->aborted.load()) continue;
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
    bool any = false;
    for (auto& [raw, c] : comms_) any = any || !c->aborted.load();
    if (!any) continue;
    REVENANT_LOG(ERROR, kLog) << "aborting every communicator: " << why;
    abort_cuda_error_.store(cuda_error);
    abort_generation_.fetch_add(1);
    for (auto& [raw, c] : comms_) AbortComm(*c, error, why);
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
  REVENANT_LOG(INFO, kLog) << "NCCL start agreement: " << nranks << " ranks, NCCL "
                           << self.nccl_version << ", every rank on its own GPU ("
                           << absl::FormatDuration(absl::Now() - start) << ")";
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

ncclResult_t CudaNccl::CheckReplayable(Comm& parent, const char* what) {
  if (!replaying_.load()) return ncclSuccess;
  int n = 0;
  if (::ncclCommCount(parent.comm, &n) != ncclSuccess) n = -1;
  return n == 1 ? ncclSuccess : Refused(what, n);
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
  if (replaying_.load()) {
    if (nranks != 1) return Refused("ncclCommInitRank", nranks);
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
  *comm = nullptr;
  ncclResult_t r = ::ncclCommInitRankConfig(comm, nranks, id, rank, &cfg);
  if ((r != ncclSuccess && r != ncclInProgress) || *comm == nullptr) {
    REVENANT_LOG(ERROR, kLog) << "ncclCommInitRankConfig(nranks " << nranks << ", rank " << rank
                              << ", device " << device_ << "): " << ::ncclGetErrorString(r)
                              << ": " << LastError(*comm);
    return r == ncclSuccess ? ncclInternalError : r;
  }
  Register(*comm);
  std::shared_ptr<Comm> c = Find(*comm);
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
  REVENANT_LOG(DEBUG, kLog) << "communicator " << static_cast<void*>(*comm) << ": rank " << rank
                            << " of " << nranks << " on GPU " << device_;
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
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) cfg = *config;
  cfg.blocking = 0;
  *newcomm = nullptr;
  ncclResult_t r = ::ncclCommSplit(comm, color, key, newcomm, &cfg);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  if (r == ncclInProgress) r = Settle(*parent, "ncclCommSplit");
  if (*newcomm == nullptr) return r;  // NCCL_SPLIT_NOCOLOR
  Register(*newcomm);
  if (r == ncclSuccess) r = Settle(*Find(*newcomm), "ncclCommSplit (new communicator)");
  return r;
}

ncclResult_t CudaNccl::CommShrink(ncclComm_t comm, int* exclude, int exclude_count,
                                  ncclComm_t* newcomm, ncclConfig_t* config, int flags) {
  std::lock_guard<std::mutex> lock(mu_);
  std::shared_ptr<Comm> parent = Find(comm);
  if (parent == nullptr || newcomm == nullptr) return ncclInvalidArgument;
  if (parent->aborted.load()) return static_cast<ncclResult_t>(parent->error.load());
  if (ncclResult_t x = CheckReplayable(*parent, "ncclCommShrink"); x != ncclSuccess) return x;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  if (config != nullptr) cfg = *config;
  cfg.blocking = 0;
  *newcomm = nullptr;
  ncclResult_t r = ::ncclCommShrink(comm, exclude, exclude_count, newcomm, &cfg, flags);
  if (r != ncclSuccess && r != ncclInProgress) return r;
  if (r == ncclInProgress) r = Settle(*parent, "ncclCommShrink");
  if (*newcomm == nullptr) return r;
  Register(*newcomm);
  if (r == ncclSuccess) r = Settle(*Find(*newcomm), "ncclCommShrink (new communicator)");
  return r;
}

ncclResult_t CudaNccl::CommFinalize(ncclComm_t comm) {
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
  if (c->aborted.load()) return ncclSuccess;  // its resources went with the abort
  // Finalize first (flushes outstanding work) unless the application did.
  ncclResult_t r = c->finalized ? ncclSuccess : ::ncclCommFinalize(comm);
  if (r == ncclInProgress) r = Settle(*c, "ncclCommFinalize (destroy)");
  if (c->aborted.load()) return ncclSuccess;
  if (r == ncclSuccess) {
    r = ::ncclCommDestroy(comm);
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
  AbortComm(*c, ncclInvalidUsage, "ncclCommAbort from the application");
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
  return ::ncclCommGetAsyncError(comm, error);
}

ncclResult_t CudaNccl::CommCount(ncclComm_t comm, int* count) {
  return OnComm(comm, "ncclCommCount", [&](ncclComm_t c) { return ::ncclCommCount(c, count); });
}
ncclResult_t CudaNccl::CommUserRank(ncclComm_t comm, int* rank) {
  return OnComm(comm, "ncclCommUserRank",
                [&](ncclComm_t c) { return ::ncclCommUserRank(c, rank); });
}
ncclResult_t CudaNccl::CommCuDevice(ncclComm_t comm, int* device) {
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
  if (r != ncclSuccess && r != ncclInProgress) {
    REVENANT_LOG(WARNING, kLog) << "ncclGroupEnd: " << ::ncclGetErrorString(r) << ": "
                                << (comms.empty() ? std::string("-") : LastError(comms[0]->comm));
    return r;
  }
  ncclResult_t first = ncclSuccess;
  for (auto& c : comms) {
    if (c->aborted.load()) continue;
    ncclResult_t s = Settle(*c, "ncclGroupEnd");
    if (first == ncclSuccess) first = s;
  }
  return first;
}

#define REVENANT_COLL(what, expr) \
  OnComm(comm, what, [&](ncclComm_t c) { return expr; })

ncclResult_t CudaNccl::AllReduce(const void* s, void* r, size_t n, ncclDataType_t t,
                                 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclAllReduce", ::ncclAllReduce(s, r, n, t, op, c, stream));
}
ncclResult_t CudaNccl::Broadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                                 ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclBroadcast", ::ncclBroadcast(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Reduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                              int root, ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclReduce", ::ncclReduce(s, r, n, t, op, root, c, stream));
}
ncclResult_t CudaNccl::AllGather(const void* s, void* r, size_t n, ncclDataType_t t,
                                 ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclAllGather", ::ncclAllGather(s, r, n, t, c, stream));
}
ncclResult_t CudaNccl::ReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t,
                                     ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclReduceScatter", ::ncclReduceScatter(s, r, n, t, op, c, stream));
}
ncclResult_t CudaNccl::AlltoAll(const void* s, void* r, size_t n, ncclDataType_t t,
                                ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclAlltoAll", ::ncclAlltoAll(s, r, n, t, c, stream));
}
ncclResult_t CudaNccl::Gather(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclGather", ::ncclGather(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Scatter(const void* s, void* r, size_t n, ncclDataType_t t, int root,
                               ncclComm_t comm, cudaStream_t stream) {
  return REVENANT_COLL("ncclScatter", ::ncclScatter(s, r, n, t, root, c, stream));
}
ncclResult_t CudaNccl::Send(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  return REVENANT_COLL("ncclSend", ::ncclSend(s, n, t, peer, c, stream));
}
ncclResult_t CudaNccl::Recv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t comm,
                            cudaStream_t stream) {
  return REVENANT_COLL("ncclRecv", ::ncclRecv(r, n, t, peer, c, stream));
}

#undef REVENANT_COLL

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
