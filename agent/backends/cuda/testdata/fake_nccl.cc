#include "agent/backends/cuda/testdata/fake_nccl.h"

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agent/backends/cuda/testdata/fake_cudart.h"

namespace fake_nccl {
namespace {

struct Pending {
  std::vector<std::vector<float>> contributions;
  int arrived = 0;
  int consumed = 0;
};

struct Group {
  int nranks = 0;
  int joined = 0;
  bool broken = false;
  long completed = 0;
  std::map<long, Pending> pending;  // by sequence number
};

struct Comm {
  Group* group = nullptr;
  int rank = 0;
  long next_seq = 0;
  bool aborted = false;
};

std::mutex g_mu;
std::condition_variable g_cv;
std::map<std::string, Group*>& Groups() {
  static auto* g = new std::map<std::string, Group*>;
  return *g;
}
long g_ids = 0;
long g_comms = 0;

std::string Key(const ncclUniqueId& id) { return std::string(id.internal, sizeof(id.internal)); }
Comm* C(ncclComm_t c) { return reinterpret_cast<Comm*>(c); }

}  // namespace

void BreakGroup(const ncclUniqueId& id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Groups().find(Key(id));
  if (it != Groups().end()) it->second->broken = true;
  g_cv.notify_all();
}

long CompletedAllReduces(const ncclUniqueId& id) {
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = Groups().find(Key(id));
  return it == Groups().end() ? 0 : it->second->completed;
}

long CommsCreated() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_comms;
}

}  // namespace fake_nccl

using fake_nccl::C;
using fake_nccl::g_cv;
using fake_nccl::g_mu;

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = 22803;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclSystemError: return "unhandled system error";
    case ncclInvalidUsage: return "invalid usage";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "fake NCCL error";
  }
}

const char* ncclGetLastError(ncclComm_t) { return ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::memset(id, 0, sizeof(*id));
  const long n = ++fake_nccl::g_ids;
  std::memcpy(id->internal, "FAKENCCL", 8);
  std::memcpy(id->internal + 8, &n, sizeof(n));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t*) {
  std::lock_guard<std::mutex> lock(g_mu);
  fake_nccl::Group*& g = fake_nccl::Groups()[fake_nccl::Key(id)];
  if (g == nullptr) {
    g = new fake_nccl::Group;
    g->nranks = nranks;
  }
  if (g->nranks != nranks || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  auto* c = new fake_nccl::Comm;
  c->group = g;
  c->rank = rank;
  ++g->joined;
  ++fake_nccl::g_comms;
  *comm = reinterpret_cast<ncclComm_t>(c);
  g_cv.notify_all();
  return ncclInProgress;  // non-blocking: settles once every member joined
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  std::lock_guard<std::mutex> lock(g_mu);
  fake_nccl::Comm* c = C(comm);
  if (c->group->broken) {
    *error = ncclRemoteError;
  } else if (c->group->joined < c->group->nranks) {
    *error = ncclInProgress;
  } else {
    *error = ncclSuccess;
  }
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    C(comm)->aborted = true;
    g_cv.notify_all();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t) { return ncclSuccess; }
ncclResult_t ncclCommDestroy(ncclComm_t) { return ncclSuccess; }

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  *count = C(comm)->group->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  *rank = C(comm)->rank;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t, int* device) {
  *device = 0;
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() { return ncclSuccess; }
ncclResult_t ncclGroupEnd() { return ncclSuccess; }

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream) {
  if (datatype != ncclFloat || op != ncclSum) return ncclInvalidUsage;
  fake_nccl::Comm* c = C(comm);
  long seq = 0;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (c->group->broken) return ncclRemoteError;
    seq = c->next_seq++;
  }
  const float* send = static_cast<const float*>(sendbuff);
  float* recv = static_cast<float*>(recvbuff);
  fake_cudart::Enqueue(stream, [=] {
    std::unique_lock<std::mutex> lock(g_mu);
    fake_nccl::Group* g = c->group;
    fake_nccl::Pending& p = g->pending[seq];
    if (p.contributions.empty()) p.contributions.resize(g->nranks);
    p.contributions[c->rank].assign(send, send + count);
    ++p.arrived;
    g_cv.notify_all();
    // Like a spinning kernel: bounded here only so that a broken test ends.
    g_cv.wait_for(lock, std::chrono::seconds(120),
                  [&] { return p.arrived == g->nranks || g->broken || c->aborted; });
    if (p.arrived == g->nranks) {
      for (size_t i = 0; i < count; ++i) {
        float sum = 0;
        for (int r = 0; r < g->nranks; ++r) sum += p.contributions[r][i];
        recv[i] = sum;
      }
      ++g->completed;
    } else {
      for (size_t i = 0; i < count; ++i) recv[i] = std::numeric_limits<float>::quiet_NaN();
    }
    if (++p.consumed == p.arrived && (p.arrived == g->nranks || g->broken)) {
      g->pending.erase(seq);
    }
  });
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t, int, int, ncclComm_t*, ncclConfig_t*) {
  return ncclInvalidUsage;
}
ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) {
  return ncclInvalidUsage;
}
ncclResult_t ncclBroadcast(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                           cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclReduce(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                        cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclAllGather(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclReduceScatter(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclAlltoAll(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclGather(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                        cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclScatter(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                         cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclSend(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}
ncclResult_t ncclRecv(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t) {
  return ncclInvalidUsage;
}

}  // extern "C"
