#include "agent/backends/host/host_collectives.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "collective/gloo_engine.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {
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

bool ReadRandom(void* out, size_t n) {
  const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t got = 0;
  while (got < n) {
    const ssize_t r = read(fd, static_cast<char*>(out) + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += static_cast<size_t>(r);
  }
  close(fd);
  return got == n;
}

}  // namespace

absl::StatusOr<std::unique_ptr<HostCollectiveBackend>> HostCollectiveBackend::Create(
    const BackendOptions& options) {
  // Same preparation as HostBackend::Create: the range, the kernels, the map.
  DeviceRange range = options.device_range;
  if (range.base == 0 && range.size == 0) {
    range.base = kDefaultDeviceBase + static_cast<uint64_t>(options.rank) * kDefaultDeviceSize;
    range.size = kDefaultDeviceSize;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (range.base == 0 || range.size == 0 || range.base % page != 0 || range.size % page != 0) {
    return absl::InvalidArgumentError(absl::StrCat("device range [0x", absl::Hex(range.base),
                                                   ", +", range.size,
                                                   ") must be non-empty and page aligned"));
  }
  std::unique_ptr<hostkernel::HostKernelRegistry> registry;
  if (!options.host_kernel_libraries.empty()) {
    absl::StatusOr<std::unique_ptr<hostkernel::HostKernelRegistry>> loaded =
        hostkernel::HostKernelRegistry::Load(options.host_kernel_libraries);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("loading host kernel libraries (",
                                       absl::StrJoin(options.host_kernel_libraries, ":"),
                                       "): ", loaded.status().message()));
    }
    registry = std::move(*loaded);
  }
  void* mapped = mmap(reinterpret_cast<void*>(range.base), range.size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (mapped == MAP_FAILED) {
    const int err = errno;
    return absl::Status(
        err == EEXIST ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kResourceExhausted,
        absl::StrCat("cannot map the device range at 0x", absl::Hex(range.base), ": ",
                     strerror(err)));
  }
  if (mapped != reinterpret_cast<void*>(range.base)) {
    munmap(mapped, range.size);
    return absl::AlreadyExistsError(absl::StrCat(
        "cannot map the device range at 0x", absl::Hex(range.base), ": already in use"));
  }
  return std::unique_ptr<HostCollectiveBackend>(
      new HostCollectiveBackend(range, std::move(registry)));
}

HostCollectiveBackend::HostCollectiveBackend(
    DeviceRange range, std::unique_ptr<hostkernel::HostKernelRegistry> registry)
    : HostBackend(range, std::move(registry)) {}

HostCollectiveBackend::~HostCollectiveBackend() {
  // Queued operations hold their communicator; finish them before the
  // engines go (the base destructor drains the streams too, later).
  cudaDeviceSynchronize();
  std::lock_guard<std::mutex> lock(nccl_mu_);
  comms_.clear();
}

std::shared_ptr<HostCollectiveBackend::Comm> HostCollectiveBackend::FindComm(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  auto it = comms_.find(reinterpret_cast<Comm*>(comm));
  if (it == comms_.end()) return nullptr;
  return it->second;
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

ncclResult_t HostCollectiveBackend::ncclGetVersion(int* version) {
  if (version == nullptr) return ncclInvalidArgument;
  *version = kHostNcclVersion;
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id->internal, kIdMagic, sizeof(kIdMagic));
  if (!ReadRandom(id->internal + sizeof(kIdMagic), kTokenBytes)) {
    REVENANT_LOG(ERROR, kLog) << "cannot read /dev/urandom";
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommInitRank(ncclComm_t* comm, int nranks,
                                                     ncclUniqueId commId, int rank) {
  return ncclCommInitRankConfig(comm, nranks, commId, rank, nullptr);
}

ncclResult_t HostCollectiveBackend::ncclCommInitRankConfig(ncclComm_t* comm, int nranks,
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
  c->dir = absl::StrCat("/dev/shm/revenant-collectives-", token);
  collective::GlooEngineOptions o;
  o.rendezvous_dir = c->dir;
  o.prefix = "comm";
  o.rank = rank;
  o.size = nranks;
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

ncclResult_t HostCollectiveBackend::ncclCommSplit(ncclComm_t, int, int, ncclComm_t*,
                                                  ncclConfig_t*) {
  REVENANT_LOG(WARNING, kLog) << "ncclCommSplit is not supported by the host backend yet";
  return ncclInvalidUsage;
}

ncclResult_t HostCollectiveBackend::ncclCommFinalize(ncclComm_t comm) {
  // Operations run in stream order; nothing is left to flush here.
  return FindComm(comm) ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t HostCollectiveBackend::ncclCommAbort(ncclComm_t comm) {
  std::shared_ptr<Comm> c;
  {
    std::lock_guard<std::mutex> lock(nccl_mu_);
    auto it = comms_.find(reinterpret_cast<Comm*>(comm));
    if (it == comms_.end()) return ncclInvalidArgument;
    c = std::move(it->second);
    comms_.erase(it);
  }
  c->aborted.store(true);
  c->engine->Abort();
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommDestroy(ncclComm_t comm) {
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
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommGetAsyncError(ncclComm_t comm,
                                                          ncclResult_t* asyncError) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || asyncError == nullptr) return ncclInvalidArgument;
  *asyncError = static_cast<ncclResult_t>(c->async_error.load());
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommCount(const ncclComm_t comm, int* count) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || count == nullptr) return ncclInvalidArgument;
  *count = c->nranks;
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommUserRank(const ncclComm_t comm, int* rank) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || rank == nullptr) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclCommCuDevice(const ncclComm_t comm, int* device) {
  std::shared_ptr<Comm> c = FindComm(comm);
  if (!c || device == nullptr) return ncclInvalidArgument;
  *device = 0;
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclGroupStart() {
  std::lock_guard<std::mutex> lock(nccl_mu_);
  ++group_depth_;
  return ncclSuccess;
}

ncclResult_t HostCollectiveBackend::ncclGroupEnd() {
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

ncclResult_t HostCollectiveBackend::Launch(std::shared_ptr<Comm> comm, std::vector<Operation> ops,
                                           std::vector<cudaStream_t> streams) {
  const cudaStream_t launch = streams[0];
  // The other streams' earlier work comes first, their later work after.
  auto order = [this](cudaStream_t before, cudaStream_t after) {
    cudaEvent_t ev = nullptr;
    if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) return;
    if (cudaEventRecord(ev, before) == cudaSuccess) (void)cudaStreamWaitEvent(after, ev, 0);
    (void)cudaEventDestroy(ev);
  };
  for (size_t k = 1; k < streams.size(); ++k) order(streams[k], launch);
  const cudaError_t err = EnqueueFallible(launch, [comm, ops = std::move(ops)]() -> cudaError_t {
    const absl::Status s = comm->engine->Run(ops);
    if (s.ok()) return cudaSuccess;
    if (comm->aborted.load()) return cudaSuccess;  // the application asked for it
    int expected = ncclSuccess;
    comm->async_error.compare_exchange_strong(expected, ToNccl(s));
    REVENANT_LOG(WARNING, kLog) << "rank " << comm->rank << ": " << s;
    return ToCuda(s);
  });
  for (size_t k = 1; k < streams.size(); ++k) order(launch, streams[k]);
  return err == cudaSuccess ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t HostCollectiveBackend::Submit(ncclComm_t comm, Operation op, cudaStream_t stream) {
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
  if (!Accessible(op.send, send_elems * es) || !Accessible(op.recv, recv_elems * es)) {
    REVENANT_LOG(WARNING, kLog) << "a buffer is not device memory";
    return ncclInvalidArgument;
  }
  if (cudaStreamQuery(stream) == cudaErrorInvalidResourceHandle) return ncclInvalidArgument;
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

ncclResult_t HostCollectiveBackend::ncclAllReduce(const void* sendbuff, void* recvbuff,
                                                  size_t count, ncclDataType_t datatype,
                                                  ncclRedOp_t op, ncclComm_t comm,
                                                  cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllReduce, sendbuff, recvbuff, count, datatype, op, 0), stream);
}

ncclResult_t HostCollectiveBackend::ncclAllGather(const void* sendbuff, void* recvbuff,
                                                  size_t sendcount, ncclDataType_t datatype,
                                                  ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclBroadcast(const void* sendbuff, void* recvbuff,
                                                  size_t count, ncclDataType_t datatype,
                                                  int root, ncclComm_t comm,
                                                  cudaStream_t stream) {
  return Submit(comm, Op(Kind::kBroadcast, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclBcast(void* buff, size_t count, ncclDataType_t datatype,
                                              int root, ncclComm_t comm, cudaStream_t stream) {
  return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}

ncclResult_t HostCollectiveBackend::ncclReduce(const void* sendbuff, void* recvbuff,
                                               size_t count, ncclDataType_t datatype,
                                               ncclRedOp_t op, int root, ncclComm_t comm,
                                               cudaStream_t stream) {
  return Submit(comm, Op(Kind::kReduce, sendbuff, recvbuff, count, datatype, op, root), stream);
}

ncclResult_t HostCollectiveBackend::ncclReduceScatter(const void* sendbuff, void* recvbuff,
                                                      size_t recvcount, ncclDataType_t datatype,
                                                      ncclRedOp_t op, ncclComm_t comm,
                                                      cudaStream_t stream) {
  return Submit(comm, Op(Kind::kReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclAlltoAll(const void* sendbuff, void* recvbuff,
                                                 size_t count, ncclDataType_t datatype,
                                                 ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kAllToAll, sendbuff, recvbuff, count, datatype, ncclSum, 0),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclGather(const void* sendbuff, void* recvbuff,
                                               size_t count, ncclDataType_t datatype, int root,
                                               ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kGather, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclScatter(const void* sendbuff, void* recvbuff,
                                                size_t count, ncclDataType_t datatype, int root,
                                                ncclComm_t comm, cudaStream_t stream) {
  return Submit(comm, Op(Kind::kScatter, sendbuff, recvbuff, count, datatype, ncclSum, root),
                stream);
}

ncclResult_t HostCollectiveBackend::ncclSend(const void* sendbuff, size_t count,
                                             ncclDataType_t datatype, int peer, ncclComm_t comm,
                                             cudaStream_t stream) {
  return Submit(comm, Op(Kind::kSend, sendbuff, nullptr, count, datatype, ncclSum, peer), stream);
}

ncclResult_t HostCollectiveBackend::ncclRecv(void* recvbuff, size_t count,
                                             ncclDataType_t datatype, int peer, ncclComm_t comm,
                                             cudaStream_t stream) {
  return Submit(comm, Op(Kind::kRecv, nullptr, recvbuff, count, datatype, ncclSum, peer), stream);
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
