#include "agent/backends/common/gloo_collectives.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "agent/backends/common/recovery_plan.h"
#include "collective/gloo_engine.h"
#include "common/events.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "common/random.h"

namespace revenant {
namespace agent {
namespace {

constexpr char kLog[] = "nccl";
constexpr char kIdMagic[8] = {'R', 'V', 'N', 'T', 'N', 'C', 'C', 'L'};
constexpr size_t kTokenBytes = 16;

using collective::DataType;
using collective::Operation;
using collective::RedOp;
using Kind = collective::Operation::Kind;

ncclResult_t ToNccl(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return ncclSuccess;
    case absl::StatusCode::kInvalidArgument: return ncclInvalidArgument;
    case absl::StatusCode::kUnavailable: return ncclRemoteError;
    case absl::StatusCode::kDeadlineExceeded: return ncclSystemError;
    case absl::StatusCode::kAborted: return ncclRemoteError;
    default: return ncclInternalError;
  }
}

cudaError_t ToCuda(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk: return cudaSuccess;
    case absl::StatusCode::kInvalidArgument: return cudaErrorInvalidValue;
    case absl::StatusCode::kDeadlineExceeded: return cudaErrorLaunchTimeout;
    default: return cudaErrorLaunchFailure;
  }
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  remove(path);
  return 0;
}

void RemoveTree(const std::string& dir) {
  if (!dir.empty()) nftw(dir.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace

GlooCollectivesOptions GlooCollectivesOptions::From(const BackendOptions& options,
                                                    const std::string& backend) {
  GlooCollectivesOptions o;
  o.job_dir = options.job_dir;
  if (options.recovery_timeout_s > 0) o.recovery_timeout = absl::Seconds(options.recovery_timeout_s);
  o.crash_in_recovery = options.crash_in_recovery;
  o.cache_results = options.journal;
  o.backend = backend;
  o.store_endpoint = knobs::String(knobs::Id::kRdzvEndpoint).value_or("");
  o.store_prefix = knobs::String(knobs::Id::kRdzvPrefix).value_or("");
  o.hostname = knobs::String(knobs::Id::kCollectiveAddr).value_or("127.0.0.1");
  return o;
}

GlooCollectives::GlooCollectives(CollectiveDevice* device, const GlooCollectivesOptions& options)
    : device_(device), log_name_(options.backend) {
  if (!options.job_dir.empty()) {
    job_root_ = options.job_dir.substr(0, options.job_dir.find_last_of('/'));
  }
  store_endpoint_ = options.store_endpoint;
  store_prefix_ = options.store_prefix;
  hostname_ = options.hostname;
  recovery_timeout_ = options.recovery_timeout;
  crash_in_recovery_ = options.crash_in_recovery;
  cache_results_ = options.cache_results;
  if (recovery_timeout_ > absl::ZeroDuration() && !job_root_.empty()) {
    watcher_ = std::thread([this] { WatchEpochs(); });
  }
}

void GlooCollectives::WatchEpochs() {
  while (!stop_watcher_.load()) {
    absl::SleepFor(absl::Milliseconds(100));
    const int declared = ReadEpoch();
    if (declared == 0) continue;
    std::vector<std::shared_ptr<Comm>> comms;
    {
      std::lock_guard<std::mutex> lock(nccl_mu_);
      for (auto& [raw, c] : comms_) comms.push_back(c);
    }
    for (auto& c : comms) {
      std::lock_guard<std::mutex> lock(c->rmu);
      if (declared > c->epoch && c->engine != nullptr && !c->recovering) {
        REVENANT_LOG(INFO, kLog) << "rank " << c->rank << ": recovery epoch " << declared
                                 << " declared; aborting the collective in flight";
        c->engine->Abort();
        c->recovering = true;
      }
    }
  }
}

GlooCollectives::~GlooCollectives() {
  StopWatcher();
  Clear();
}

void GlooCollectives::StopWatcher() {
  stop_watcher_.store(true);
  if (watcher_.joinable()) watcher_.join();
}

void GlooCollectives::Clear() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  for (auto& [raw, c] : comms_) device_->ForgetComm(raw);
  comms_.clear();
}

std::shared_ptr<GlooCollectives::Comm> GlooCollectives::FindComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  auto it = comms_.find(reinterpret_cast<Comm*>(comm));
  if (it == comms_.end()) return nullptr;
  return it->second;
}

ncclResult_t GlooCollectives::ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = kGlooNcclVersion;
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  if (absl::Status s = RandomBytes(id->internal + sizeof(kIdMagic), kTokenBytes); !s.ok()) {
    REVENANT_LOG(ERROR, kLog) << "ncclGetUniqueId: " << s;
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommInitRank(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t GlooCollectives::ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
                                                           ncclUniqueId commId, int rank,
                                                           ncclConfig_t* /*config*/) {
  if (comm == nullptr) return ncclInvalidArgument;
  if (std::memcmp(commId.internal, kIdMagic, sizeof(kIdMagic)) != 0) {
    REVENANT_LOG(WARNING, kLog) << "ncclCommInitRank: not an id from ncclGetUniqueId";
    return ncclInvalidArgument;
  }
  if (nranks <= 0 || rank < 0 || rank >= nranks) {
    REVENANT_LOG(WARNING, kLog) << "ncclCommInitRank: rank " << rank << " out of range for "
                                << nranks << " ranks";
    return ncclInvalidArgument;
  }
  const std::string token = absl::BytesToHexString(
      absl::string_view(commId.internal + sizeof(kIdMagic), kTokenBytes));
  auto c = std::make_shared<Comm>();
  c->rank = rank;
  c->nranks = nranks;
  c->token = token;
  // In the job's directory (0700, shared by the job's agents on this node),
  // so no other user can list the token or create the rendezvous first.
  // Agents always have one; only in-process tests have none.
  c->dir = absl::StrCat(job_root_.empty() ? std::string("/dev/shm/revenant-") : job_root_ + "/",
                        "collectives-", token);
  if (replay_phase_ != ReplayPhase::kNone && nranks > 1) {
    // A replacement replaying its journal: the other members connected long
    // ago; this communicator joins them at the recovery's epoch
    // (JoinRecovery), not here. A communicator of one rank has no one to
    // rejoin: it is created afresh below (its state comes from a boundary
    // snapshot, agent/snapshot.h).
    c->joining = true;
    std::lock_guard<std::mutex> lock(nccl_mu_);
    Comm* raw = c.get();
    comms_.emplace(raw, std::move(c));
    *comm = reinterpret_cast<ncclComm_t>(raw);
    return ncclSuccess;
  }
  // Recovery epochs declared before this communicator existed (a one-rank
  // communicator re-created by a replacement) are not its own to recover from.
  c->epoch = ReadEpoch();
  collective::GlooEngineOptions o;
  o.rendezvous_dir = c->dir;
  o.prefix = "comm";
  o.rank = rank;
  o.size = nranks;
  o.store_endpoint = store_endpoint_;
  o.store_prefix = store_prefix_;
  o.hostname = hostname_;
  absl::StatusOr<std::unique_ptr<collective::GlooEngine>> engine =
      collective::GlooEngine::Create(o);
  if (!engine.ok()) {
    REVENANT_LOG(WARNING, kLog) << "ncclCommInitRank(rank " << rank << " of " << nranks
                                << "): " << engine.status();
    return engine.status().code() == absl::StatusCode::kInvalidArgument ? ncclInvalidArgument
                                                                         : ncclSystemError;
  }
  c->engine = *std::move(engine);
  // Every member passed the engine's barrier: the store is no longer read.
  if (rank == 0) RemoveTree(c->dir);
  REVENANT_LOG(DEBUG, kLog) << "communicator rank " << rank << " of " << nranks << " ready";
  std::lock_guard<std::mutex> lock(nccl_mu_);
  Comm* raw = c.get();
  comms_.emplace(raw, std::move(c));
  *comm = reinterpret_cast<ncclComm_t>(raw);
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommSplit(ncclComm_t, int, int, ncclComm_t*,
                                                  ncclConfig_t*) {
  REVENANT_LOG(WARNING, kLog) << "ncclCommSplit is not supported by the host backend yet";
  return ncclInvalidUsage;
}

ncclResult_t GlooCollectives::ncclCommFinalize(ncclComm_t comm) {
  // Operations run in stream order; nothing is left to flush here.
  return FindComm(comm) ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t GlooCollectives::ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    auto it = comms_.find(reinterpret_cast<Comm*>(comm));
    if (it == comms_.end()) return ncclInvalidArgument;
    c = std::move(it->second);
    comms_.erase(it);
  }
  c->aborted.store(true);
  {
    std::lock_guard<std::mutex> lock(c->rmu);
    if (c->engine != nullptr) c->engine->Abort();
  }
  device_->ForgetComm(c.get());
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommDestroy(ncclComm_t comm) {
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    auto it = comms_.find(reinterpret_cast<Comm*>(comm));
    if (it == comms_.end()) return ncclInvalidArgument;
    c = std::move(it->second);
    comms_.erase(it);
  }
  if (c->rank == 0) RemoveTree(c->dir);
  // Operations still queued keep the engine until they ran.
  device_->ForgetComm(c.get());
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommGetAsyncError(ncclComm_t comm,
                                                          ncclResult_t* asyncError) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || asyncError == nullptr) return ncclInvalidArgument;
  *asyncError = static_cast<ncclResult_t>(c->async_error.load());
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || count == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || device == nullptr) return ncclInvalidArgument;
  *device = 0;
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclGroupStart() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  ++group_depth_;
  return ncclSuccess;
}

ncclResult_t GlooCollectives::ncclGroupEnd() {
  std::vector<Queued> queued;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (group_depth_ == 0) return ncclInvalidUsage;
    if (--group_depth_ > 0) return ncclSuccess;
    queued.swap(group_);
  }
  // Per communicator, in order of first appearance.
  ncclResult_t result = ncclSuccess;
  std::vector<bool> taken(queued.size(), false);
  for (size_t i = 0; i < queued.size(); ++i) {
    if (taken[i]) continue;
    std::vector<Operation> ops;
    std::vector<cudaStream_t> streams;
    for (size_t j = i; j < queued.size(); ++j) {
      if (taken[j] || queued[j].comm != queued[i].comm) continue;
      taken[j] = true;
      ops.push_back(queued[j].op);
      bool known = false;
      for (cudaStream_t s : streams) known |= s == queued[j].stream;
      if (!known) streams.push_back(queued[j].stream);
    }
    const ncclResult_t r = Launch(queued[i].comm, std::move(ops), std::move(streams));
    if (result == ncclSuccess) result = r;
  }
  return result;
}

ncclResult_t GlooCollectives::Launch(std::shared_ptr<Comm> comm, std::vector<Operation> ops,
                                     std::vector<cudaStream_t> streams) {
  const Ordinal ordinal{comm->minibatch, comm->next_index++};
  if (replay_phase_.load() == ReplayPhase::kSetupLog) {
    // History: every member ran this unit long ago. The state it produced
    // arrives with the recovery's state transfer.
    return ncclSuccess;
  }
  CollectiveDevice::Unit unit;
  unit.comm = comm.get();
  unit.send_bytes = SendBytes(*comm, ops);
  unit.recv_bytes = RecvBytes(*comm, ops);
  unit.ops = std::move(ops);
  if (validating_) {
    // A validation replay: the unit ran once; its results stand in for it.
    unit.run = [this, comm, ordinal](const std::vector<Operation>& staged) -> cudaError_t {
      if (!AnswerFromCache(*comm, ordinal, staged)) validation_misses_.fetch_add(1);
      return cudaSuccess;
    };
    const cudaError_t verr = device_->EnqueueUnit(streams, std::move(unit));
    return verr == cudaSuccess ? ncclSuccess : ncclInvalidArgument;
  }
  unit.run = [this, comm, ordinal](const std::vector<Operation>& staged) -> cudaError_t {
    const absl::Status s = RunUnit(*comm, ordinal, staged);
    if (s.ok()) return cudaSuccess;
    if (comm->aborted.load()) return cudaSuccess;  // the application asked for it
    int expected = ncclSuccess;
    comm->async_error.compare_exchange_strong(expected, ToNccl(s));
    REVENANT_LOG(WARNING, kLog) << log_name_ << " rank " << comm->rank << ": collective ("
                                << ordinal.first << ", " << ordinal.second << ") failed: " << s;
    return ToCuda(s);
  };
  const cudaError_t err = device_->EnqueueUnit(streams, std::move(unit));
  return err == cudaSuccess ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t GlooCollectives::Submit(ncclComm_t comm, Operation op, cudaStream_t stream) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c) return ncclInvalidArgument;
  const size_t es = collective::DataTypeSize(op.dtype);
  if (es == 0) {
    REVENANT_LOG(WARNING, kLog) << "data type " << static_cast<int>(op.dtype)
                                << " is not supported by the host backend";
    return ncclInvalidArgument;
  }
  const bool reduction =
      op.kind == Kind::kAllReduce || op.kind == Kind::kReduce || op.kind == Kind::kReduceScatter;
  if (reduction && (static_cast<int>(op.op) < 0 || static_cast<int>(op.op) > 4)) {
    return ncclInvalidArgument;
  }
  const bool rooted = op.kind == Kind::kBroadcast || op.kind == Kind::kReduce ||
                      op.kind == Kind::kGather || op.kind == Kind::kScatter ||
                      op.kind == Kind::kSend || op.kind == Kind::kRecv;
  if (rooted && (op.root < 0 || op.root >= c->nranks)) return ncclInvalidArgument;
  // Buffer extents, as NCCL defines them.
  const size_t n = static_cast<size_t>(c->nranks);
  const bool root = op.root == c->rank;
  size_t send_elems = op.count, recv_elems = op.count;
  switch (op.kind) {
    case Kind::kAllGather: recv_elems = op.count * n; break;
    case Kind::kReduceScatter: send_elems = op.count * n; break;
    case Kind::kAllToAll: send_elems = recv_elems = op.count * n; break;
    case Kind::kGather: recv_elems = root ? op.count * n : 0; break;
    case Kind::kScatter: send_elems = root ? op.count * n : 0; break;
    case Kind::kBroadcast: send_elems = root ? op.count : 0; break;
    case Kind::kReduce: recv_elems = root ? op.count : 0; break;
    case Kind::kSend: recv_elems = 0; break;
    case Kind::kRecv: send_elems = 0; break;
    default: break;
  }
  if (!device_->Accessible(op.send, send_elems * es) ||
      !device_->Accessible(op.recv, recv_elems * es)) {
    REVENANT_LOG(WARNING, kLog) << "a buffer is not device memory";
    return ncclInvalidArgument;
  }
  if (!device_->ValidStream(stream)) return ncclInvalidArgument;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    if (group_depth_ > 0) {
      group_.push_back({c, op, stream});
      return ncclSuccess;
    }
  }
  return Launch(std::move(c), {op}, {stream});
}

namespace {
Operation Op(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t t,
             ncclRedOp_t op, int root) {
  Operation o;
  o.kind = kind;
  o.send = send;
  o.recv = recv;
  o.count = count;
  o.dtype = static_cast<DataType>(t);
  o.op = static_cast<RedOp>(op);
  o.root = root;
  return o;
}
}  // namespace

ncclResult_t GlooCollectives::ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                  size_t count, ncclDataType_t datatype,
                                                  ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0), stream);
}

ncclResult_t GlooCollectives::ncclAllGather(const void* sendbuff, void* recvbuff,
                                                  size_t sendcount, ncclDataType_t datatype,
                                                  ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0),
                stream);
}

ncclResult_t GlooCollectives::ncclBroadcast(const void* sendbuff, void* recvbuff,
                                                  size_t count, ncclDataType_t datatype,
                                                  int root, ncclComm_t comm,
                                                  cudaStream_t stream) {
  return Submit(comm, Op(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t GlooCollectives::ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                              int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t GlooCollectives::ncclReduce(const void* sendbuff, void* recvbuff,
                                               size_t count, ncclDataType_t datatype,
                                               ncclRedOp_t op, int root, ncclComm_t comm,
                                               cudaStream_t stream) {
  return Submit(comm, Op(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root), stream);
}

ncclResult_t GlooCollectives::ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                      size_t recvcount, ncclDataType_t datatype,
                                                      ncclRedOp_t op, ncclComm_t comm,
                                                      cudaStream_t stream) {
  return Submit(comm, Op(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0),
                stream);
}

ncclResult_t GlooCollectives::ncclAlltoAll(const void* sendbuff, void* recvbuff,
                                                 size_t count, ncclDataType_t datatype,
                                                 ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllToAll, sendbuff, recvbuff, count, datatype, ncclSum, 0),
                stream);
}

ncclResult_t GlooCollectives::ncclGather(const void* sendbuff, void* recvbuff,
                                               size_t count, ncclDataType_t datatype, int root,
                                               ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t GlooCollectives::ncclScatter(const void* sendbuff, void* recvbuff,
                                                size_t count, ncclDataType_t datatype, int root,
                                                ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t GlooCollectives::ncclSend(const void* sendbuff, size_t count,
                                             ncclDataType_t datatype, int peer, ncclComm_t comm,
                                             cudaStream_t stream) {
  return Submit(comm, Op(Kind::kSend, sendbuff, nullptr, count, datatype, ncclSum, peer), stream);
}

ncclResult_t GlooCollectives::ncclRecv(void* recvbuff, size_t count,
                                             ncclDataType_t datatype, int peer, ncclComm_t comm,
                                             cudaStream_t stream) {
  return Submit(comm, Op(Kind::kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer), stream);
}

// ---------------------------------------------------------------------------
// Recovery. Protocol and reasoning: docs/recovery.md.

namespace {

struct Report {
  uint64_t pending_minibatch;
  uint64_t pending_index;
  uint64_t replacement;  // 1 for a replacement
  uint64_t minibatch;    // a replacement's journal minibatch
  uint64_t restored;     // 1: a replacement restored from its boundary snapshot
};

bool operator<(const Report& a, const Report& b) {
  return std::make_pair(a.pending_minibatch, a.pending_index) <
         std::make_pair(b.pending_minibatch, b.pending_index);
}

}  // namespace

std::vector<size_t> GlooCollectives::SendBytes(const Comm& comm,
                                               const std::vector<Operation>& ops) {
  std::vector<size_t> out;
  const size_t n = static_cast<size_t>(comm.nranks);
  for (const Operation& op : ops) {
    const size_t es = collective::DataTypeSize(op.dtype);
    const bool root = op.root == comm.rank;
    size_t elems = op.count;
    switch (op.kind) {
      case Kind::kReduceScatter:
      case Kind::kAllToAll: elems = op.count * n; break;
      case Kind::kScatter: elems = root ? op.count * n : 0; break;
      case Kind::kBroadcast: elems = root ? op.count : 0; break;
      case Kind::kRecv: elems = 0; break;
      default: break;
    }
    out.push_back(op.send == nullptr ? 0 : elems * es);
  }
  return out;
}

std::vector<size_t> GlooCollectives::RecvBytes(const Comm& comm,
                                               const std::vector<Operation>& ops) {
  std::vector<size_t> out;
  const size_t n = static_cast<size_t>(comm.nranks);
  for (const Operation& op : ops) {
    const size_t es = collective::DataTypeSize(op.dtype);
    const bool root = op.root == comm.rank;
    size_t elems = op.count;
    switch (op.kind) {
      case Kind::kAllGather:
      case Kind::kAllToAll: elems = op.count * n; break;
      case Kind::kGather: elems = root ? op.count * n : 0; break;
      case Kind::kReduce: elems = root ? op.count : 0; break;
      case Kind::kSend: elems = 0; break;
      default: break;
    }
    out.push_back(op.recv == nullptr ? 0 : elems * es);
  }
  return out;
}

int GlooCollectives::ReadEpoch() const { return ReadRecoveryEpoch(job_root_); }

void GlooCollectives::SetReplayPhase(ReplayPhase phase) { replay_phase_ = phase; }

void GlooCollectives::MarkBoundary(uint64_t minibatch) {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    for (auto& [raw, c] : comms_) comms.push_back(c);
  }
  for (auto& c : comms) {
    c->minibatch = minibatch;
    c->next_index = 0;
    std::lock_guard<std::mutex> lock(c->rmu);
    // Keep the current and the previous minibatch's results.
    for (auto it = c->cache.begin(); it != c->cache.end();) {
      it = it->first.first + 1 < minibatch ? c->cache.erase(it) : std::next(it);
    }
  }
}

absl::Status GlooCollectives::BeginValidationReplay() {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    for (auto& [raw, c] : comms_) comms.push_back(c);
  }
  validation_saved_.clear();
  validation_misses_.store(0);
  for (auto& c : comms) {
    validation_saved_.emplace_back(c, c->next_index);
    c->next_index = 0;  // the minibatch's units again, from its first
  }
  validating_ = true;
  return absl::OkStatus();
}

absl::Status GlooCollectives::EndValidationReplay() {
  validating_ = false;
  for (auto& [c, next] : validation_saved_) c->next_index = next;
  validation_saved_.clear();
  const uint64_t misses = validation_misses_.exchange(0);
  if (misses > 0) {
    return absl::DataLossError(absl::StrCat(
        misses, " replayed collective unit(s) had no cached result of the same sizes"));
  }
  return absl::OkStatus();
}

bool GlooCollectives::AnswerFromCache(Comm& comm, Ordinal ordinal,
                                      const std::vector<Operation>& ops) {
  const std::vector<size_t> sizes = RecvBytes(comm, ops);
  std::lock_guard<std::mutex> lock(comm.rmu);
  auto it = comm.cache.find(ordinal);
  if (it == comm.cache.end() || it->second.size() != ops.size()) return false;
  for (size_t k = 0; k < ops.size(); ++k) {
    if (it->second[k].size() != sizes[k]) return false;
  }
  for (size_t k = 0; k < ops.size(); ++k) {
    if (sizes[k] > 0) std::memcpy(ops[k].recv, it->second[k].data(), sizes[k]);
  }
  return true;
}

absl::Status GlooCollectives::RunUnit(Comm& comm, Ordinal ordinal,
                                            const std::vector<Operation>& ops) {
  const std::vector<size_t> sizes = RecvBytes(comm, ops);
  auto from_prereceived = [&]() -> bool {
    std::lock_guard<std::mutex> lock(comm.rmu);
    auto it = comm.prereceived.find(ordinal);
    if (it == comm.prereceived.end()) return false;
    for (size_t k = 0; k < ops.size() && k < it->second.size(); ++k) {
      if (sizes[k] > 0 && it->second[k].size() == sizes[k]) {
        std::memcpy(ops[k].recv, it->second[k].data(), sizes[k]);
      }
    }
    comm.prereceived.erase(it);
    return true;
  };
  absl::Status s;
  if (comm.engine == nullptr && comm.joining) {
    // A replacement still in its first minibatch: nothing to transfer, the
    // replay rebuilt everything; join for the collectives' results.
    bool behind = false;
    s = RecoverComm(comm, ordinal, /*replacement=*/true, comm.minibatch, &behind);
    if (!s.ok()) return s;
    comm.joining = false;
  }
  if (!from_prereceived()) {
    s = comm.engine != nullptr ? comm.engine->Run(ops)
                               : absl::UnavailableError("the communicator has no engine");
    // A member died (or stopped answering): recover and retry, as long as
    // the job recovers and the application did not abort the communicator.
    while (!s.ok() && recovery_timeout_ > absl::ZeroDuration() && !comm.aborted.load() &&
           (absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s) || absl::IsAborted(s))) {
      RecordEvent(job_root_, "survivor_collective_failed", comm.rank, 0,
                  absl::StrCat("collective (", ordinal.first, ", ", ordinal.second, ")"));
      REVENANT_LOG(WARNING, kLog) << "rank " << comm.rank << ": collective (" << ordinal.first
                                  << ", " << ordinal.second << ") failed (" << s
                                  << "); waiting for the job's recovery";
      bool behind = false;
      absl::Status r = RecoverComm(comm, ordinal, /*replacement=*/false, comm.minibatch, &behind);
      if (!r.ok()) {
        s = r;
        break;
      }
      s = from_prereceived() ? absl::OkStatus() : comm.engine->Run(ops);
    }
  }
  if (!s.ok()) return s;
  if (!cache_results_) return absl::OkStatus();
  std::vector<std::string> results;
  for (size_t k = 0; k < ops.size(); ++k) {
    results.emplace_back(static_cast<const char*>(ops[k].recv), sizes[k]);
  }
  std::lock_guard<std::mutex> lock(comm.rmu);
  comm.cache[ordinal] = std::move(results);
  return absl::OkStatus();
}

absl::Status GlooCollectives::RecoverComm(Comm& comm, Ordinal pending, bool replacement,
                                                uint64_t minibatch, bool* behind) {
  if (crash_in_recovery_ && !replacement) crash_in_recovery_();
  const absl::Time deadline = absl::Now() + recovery_timeout_;
  absl::Status last = absl::DeadlineExceededError("no recovery epoch was declared");
  while (absl::Now() < deadline) {
    const int declared = WaitForEpoch(comm, deadline);
    if (declared == 0) break;
    const absl::Time start = absl::Now();
    std::string rendezvous_dir;
    absl::StatusOr<std::unique_ptr<collective::GlooEngine>> engine =
        FormEpoch(comm, declared, deadline, &rendezvous_dir);
    if (!engine.ok()) {
      last = engine.status();
      REVENANT_LOG(WARNING, kLog) << "rank " << comm.rank << ": epoch " << declared
                                  << " did not form: " << last;
      continue;  // a member died during recovery: the next epoch
    }
    if (comm.rank == 0) RemoveTree(rendezvous_dir);
    bool no_survivor = false;
    absl::Status s =
        RejoinEpoch(comm, **engine, pending, replacement, minibatch, behind, start, &no_survivor);
    if (s.ok()) {
      std::unique_ptr<collective::CollectiveEngine> old;
      {
        std::lock_guard<std::mutex> lock(comm.rmu);
        old = std::move(comm.engine);
        comm.engine = *std::move(engine);
        comm.recovering = false;
      }
      return absl::OkStatus();
    }
    last = s;
    REVENANT_LOG(WARNING, kLog) << "rank " << comm.rank << ": recovery epoch " << declared
                                << " failed: " << s;
    // No survivor: a later epoch cannot bring one back.
    if (no_survivor) break;
  }
  return last;
}

int GlooCollectives::WaitForEpoch(Comm& comm, absl::Time deadline) {
  // The job's next epoch (revenant-run declares it when it replaces agents).
  int epoch = 0;
  {
    std::lock_guard<std::mutex> lock(comm.rmu);
    epoch = comm.epoch;
  }
  int declared = ReadEpoch();
  while (declared <= epoch && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    declared = ReadEpoch();
  }
  if (declared <= epoch) return 0;
  std::lock_guard<std::mutex> lock(comm.rmu);
  comm.epoch = declared;
  return declared;
}

absl::StatusOr<std::unique_ptr<collective::GlooEngine>> GlooCollectives::FormEpoch(
    const Comm& comm, int declared, absl::Time deadline, std::string* rendezvous_dir) {
  collective::GlooEngineOptions o;
  o.rendezvous_dir = absl::StrCat(comm.dir, "-e", declared);
  o.prefix = "comm";
  o.rank = comm.rank;
  o.size = comm.nranks;
  o.store_endpoint = store_endpoint_;
  o.store_prefix = store_prefix_;
  o.hostname = hostname_;
  *rendezvous_dir = o.rendezvous_dir;
  // Bounds the rendezvous (a member that died during the recovery makes
  // the epoch fail and the next one form) and every later collective.
  o.timeout = std::min(absl::Seconds(60), deadline - absl::Now());
  // The rendezvous runs on a thread of its own so that a newer epoch
  // (another member died meanwhile and was replaced) preempts it: every
  // member then moves to the newest epoch instead of timing out in turn.
  struct Pending {
    std::mutex mu;
    bool done = false;
    absl::StatusOr<std::unique_ptr<collective::GlooEngine>> result =
        absl::UnknownError("not finished");
  };
  auto rendezvous = std::make_shared<Pending>();
  std::thread([rendezvous, o] {
    auto r = collective::GlooEngine::Create(o);
    std::lock_guard<std::mutex> lock(rendezvous->mu);
    rendezvous->result = std::move(r);
    rendezvous->done = true;
  }).detach();
  while (true) {
    {
      std::lock_guard<std::mutex> lock(rendezvous->mu);
      if (rendezvous->done) return std::move(rendezvous->result);
    }
    if (ReadEpoch() > declared) {
      return absl::AbortedError("a newer recovery epoch was declared");  // the thread cleans up
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::Status GlooCollectives::RejoinEpoch(Comm& comm, collective::CollectiveEngine& e,
                                          Ordinal pending, bool replacement, uint64_t minibatch,
                                          bool* behind, absl::Time start, bool* no_survivor) {
  const size_t n = static_cast<size_t>(comm.nranks);
  // 1. Where everyone stands.
  const uint64_t restored =
      replacement && minibatch > 0 && restored_minibatch_.load() == minibatch ? 1u : 0u;
  Report mine{pending.first, pending.second, replacement ? 1u : 0u, minibatch, restored};
  std::vector<Report> all(n);
  if (absl::Status s = e.AllGather(&mine, all.data(), sizeof(Report), DataType::kUint8);
      !s.ok()) {
    return s;
  }
  // 2. The plan (recovery_plan.h): the same on every member.
  std::vector<RecoveryReport> reports(n);
  for (size_t r = 0; r < n; ++r) {
    reports[r].pending = {all[r].pending_minibatch, all[r].pending_index};
    reports[r].replacement = all[r].replacement != 0;
    reports[r].minibatch = all[r].minibatch;
    reports[r].restored = all[r].restored != 0;
  }
  const RecoveryPlan plan = PlanRecovery(reports);
  if (!plan.error.empty()) {
    *no_survivor = true;
    return absl::FailedPreconditionError(plan.error);
  }
  if (plan.all_restored) {
    RecordEvent(job_root_, "replacement_joined", comm.rank, comm.epoch,
                absl::StrCat("every member restored minibatch ", all[0].minibatch,
                             " from its boundary snapshot"));
    REVENANT_LOG(INFO, kLog) << log_name_ << " rank " << comm.rank << ": recovery epoch "
                             << comm.epoch << ": every member restored minibatch "
                             << all[0].minibatch << " from its boundary snapshot";
    return absl::OkStatus();
  }
  const int provider = plan.provider;
  // State: to the replacements, from the plan's source.
  if (plan.state_source >= 0) {
    if (replacement && behind != nullptr) *behind = plan.Skips(comm.rank);
    if (absl::Status s = TransferState(comm, e, plan.state_source, replacement); !s.ok()) {
      return s;
    }
  }
  // 3. Results of the units some members completed and others did not.
  uint64_t nunits = 0;
  if (absl::Status s = ShareCompletedUnits(comm, e, plan, pending, &nunits); !s.ok()) return s;
  RecordEvent(job_root_, replacement ? "replacement_joined" : "survivor_joined", comm.rank,
              comm.epoch, absl::StrCat(nunits, " completed collectives from rank ", provider));
  REVENANT_LOG(INFO, kLog) << "rank " << comm.rank << ": recovery epoch " << comm.epoch
                           << " done in " << absl::ToInt64Milliseconds(absl::Now() - start)
                           << " ms (" << nunits << " completed collectives from rank "
                           << provider << ")";
  return absl::OkStatus();
}

absl::Status GlooCollectives::ShareCompletedUnits(Comm& comm, collective::CollectiveEngine& e,
                                                  const RecoveryPlan& plan, Ordinal pending,
                                                  uint64_t* shared) {
  const int provider = plan.provider;
  std::vector<std::pair<Ordinal, std::vector<std::string>>> units;
  if (comm.rank == provider) {
    std::lock_guard<std::mutex> lock(comm.rmu);
    const Ordinal from = plan.units_from;
    const Ordinal to = plan.units_to;
    for (const auto& [ord, bufs] : comm.cache) {
      if (!(ord < from) && ord < to) units.emplace_back(ord, bufs);
    }
  }
  uint64_t nunits = units.size();
  if (absl::Status s = e.Broadcast(&nunits, &nunits, 1, DataType::kUint64, provider); !s.ok()) {
    return s;
  }
  units.resize(nunits);
  for (auto& [ord, bufs] : units) {
    uint64_t head[3] = {ord.first, ord.second, bufs.size()};
    if (absl::Status s = e.Broadcast(head, head, 3, DataType::kUint64, provider); !s.ok()) {
      return s;
    }
    ord = {head[0], head[1]};
    bufs.resize(head[2]);
    for (std::string& b : bufs) {
      uint64_t len = b.size();
      if (absl::Status s = e.Broadcast(&len, &len, 1, DataType::kUint64, provider); !s.ok()) {
        return s;
      }
      b.resize(len);
      if (absl::Status s = e.Broadcast(b.data(), b.data(), len, DataType::kUint8, provider);
          !s.ok()) {
        return s;
      }
    }
  }
  if (comm.rank != provider) {
    std::lock_guard<std::mutex> lock(comm.rmu);
    for (auto& [ord, bufs] : units) {
      if (!(ord < pending)) comm.prereceived[ord] = bufs;
    }
  }
  *shared = nunits;
  return absl::OkStatus();
}

absl::Status GlooCollectives::TransferState(Comm& comm, collective::CollectiveEngine& e,
                                            int source, bool replacement) {
  const absl::Time start = absl::Now();
  // Allocations travel as offsets into the device range: every rank makes
  // the same allocations, each in its own range.
  const uint64_t base = device_->Range().base;
  std::vector<std::pair<uint64_t, uint64_t>> allocs;
  if (comm.rank == source) {
    allocs = device_->LiveAllocations();
    for (auto& a : allocs) a.first -= base;
  }
  uint64_t count = allocs.size();
  if (absl::Status s = e.Broadcast(&count, &count, 1, DataType::kUint64, source); !s.ok()) {
    return s;
  }
  allocs.resize(count);
  if (absl::Status s =
          e.Broadcast(allocs.data(), allocs.data(), 2 * count, DataType::kUint64, source);
      !s.ok()) {
    return s;
  }
  std::vector<std::pair<uint64_t, uint64_t>> local;
  if (replacement) {
    local = device_->LiveAllocations();
    for (auto& a : local) a.first -= base;
  }
  // Every allocation moves in pieces of at most kStateChunk bytes: the
  // source reads a piece from its device, everyone receives it, a
  // replacement holding the same allocation writes it to its device.
  std::string piece;
  size_t matched = 0;
  uint64_t bytes = 0;
  for (const auto& [offset, size] : allocs) {
    const bool mine =
        replacement &&
        std::find(local.begin(), local.end(), std::make_pair(offset, size)) != local.end();
    if (mine) ++matched;
    for (uint64_t done = 0; done < size; done += kStateChunk) {
      const size_t len = static_cast<size_t>(std::min<uint64_t>(kStateChunk, size - done));
      piece.resize(len);
      if (comm.rank == source) {
        if (absl::Status s = device_->ReadDevice(piece.data(), base + offset + done, len);
            !s.ok()) {
          return s;
        }
      }
      if (absl::Status s = e.Broadcast(piece.data(), piece.data(), len, DataType::kUint8, source);
          !s.ok()) {
        return s;
      }
      if (mine) {
        if (absl::Status s = device_->WriteDevice(base + offset + done, piece.data(), len);
            !s.ok()) {
          return s;
        }
      }
      bytes += len;
    }
  }
  if (replacement && matched != count) {
    REVENANT_LOG(WARNING, kLog) << log_name_ << " rank " << comm.rank << ": only " << matched
                                << " of " << count << " allocations of rank " << source
                                << " exist here";
  }
  REVENANT_LOG(INFO, kLog) << log_name_ << " rank " << comm.rank << ": state of " << count
                           << " allocations (" << bytes << " bytes) from rank " << source
                           << " in " << absl::ToInt64Milliseconds(absl::Now() - start) << " ms";
  return absl::OkStatus();
}

absl::Status GlooCollectives::JoinRecovery(uint64_t minibatch, bool* behind) {
  std::vector<std::shared_ptr<Comm>> comms;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    for (auto& [raw, c] : comms_) {
      if (c->joining) comms.push_back(c);  // one-rank communicators have no peers
    }
  }
  if (comms.empty()) return absl::UnimplementedError("no communicator to recover through");
  *behind = false;
  for (auto& c : comms) {
    bool b = false;
    absl::Status s = RecoverComm(*c, Ordinal{minibatch, 0}, /*replacement=*/true, minibatch, &b);
    if (!s.ok()) return s;
    c->joining = false;
    *behind |= b;
  }
  return absl::OkStatus();
}

}  // namespace agent
}  // namespace revenant
