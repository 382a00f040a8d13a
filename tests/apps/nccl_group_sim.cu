// nccl_group_sim: ncclGroupSimulateEnd as NCCL 2.28 answers it -- outside a
// group, on a nested level, on an empty group (simInfo left as it was), with
// an uninitialized simInfo -- and over a group holding an all-reduce:
// natively NCCL estimates its time without running it; under Revenant that
// is refused (ncclInvalidUsage) and the group stays open, so ncclGroupEnd
// then runs the all-reduce. Any number of ranks (RANK/WORLD_SIZE).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"

#define EXPECT_NCCL(call, expected)                                                     \
  do {                                                                                  \
    ncclResult_t expect_res_ = (call);                                                  \
    EXPECT_APP(expect_res_ == (expected), "%s returned %d (%s), expected %d", #call,    \
               static_cast<int>(expect_res_), ncclGetErrorString(expect_res_),          \
               static_cast<int>(expected));                                             \
  } while (0)

int main() {
  const bool under_revenant = std::getenv("REVENANT_AGENT_SOCKET") != nullptr;
  Launch l = ReadLaunch();
  SelectDevice(l);

  // No communicator needed for these.
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  EXPECT_NCCL(ncclGroupSimulateEnd(&info), ncclInvalidUsage);
  // Empty group: simInfo untouched.
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclGroupSimulateEnd(&info));
  const ncclSimInfo_t fresh = NCCL_SIM_INFO_INITIALIZER;
  // Field by field: the struct has 4 bytes of padding after estimatedTime.
  EXPECT_APP(info.size == fresh.size && info.magic == fresh.magic &&
                 info.version == fresh.version &&
                 std::memcmp(&info.estimatedTime, &fresh.estimatedTime, sizeof(float)) == 0,
             "an empty group changed simInfo (estimatedTime %f)", info.estimatedTime);
  EXPECT_NCCL(ncclGroupEnd(), ncclInvalidUsage);  // the group is over
  // Nested: the inner level only.
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclGroupSimulateEnd(&info));
  CHECK_NCCL(ncclGroupEnd());
  EXPECT_NCCL(ncclGroupEnd(), ncclInvalidUsage);
  // A null simInfo simulates too.
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclGroupSimulateEnd(nullptr));
  // simInfo not made with NCCL_SIM_INFO_INITIALIZER: refused, the group ends.
  ncclSimInfo_t bad;
  std::memset(&bad, 0, sizeof(bad));
  bad.size = sizeof(bad);
  CHECK_NCCL(ncclGroupStart());
  EXPECT_NCCL(ncclGroupSimulateEnd(&bad), ncclInvalidArgument);
  EXPECT_NCCL(ncclGroupEnd(), ncclInvalidUsage);

  // A group holding an all-reduce.
  ncclUniqueId id = ExchangeUniqueId(l, "nccl-id");
  ncclComm_t comm = nullptr;
  CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreate(&s));
  const int n = 1024;
  float* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, n * sizeof(float)));
  std::vector<float> h(n, 1.0f);
  CHECK_CUDA(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclGroupStart());
  CHECK_NCCL(ncclAllReduce(d, d, n, ncclFloat, ncclSum, comm, s));
  ncclSimInfo_t est = NCCL_SIM_INFO_INITIALIZER;
  if (under_revenant) {
    EXPECT_NCCL(ncclGroupSimulateEnd(&est), ncclInvalidUsage);
    CHECK_NCCL(ncclGroupEnd());  // the group stayed open: this runs the all-reduce
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      EXPECT_APP(h[i] == float(l.world), "all-reduce after the refused simulation: [%d] = %f",
                 i, h[i]);
    }
    std::printf("group with an all-reduce: refused under Revenant, then run by ncclGroupEnd\n");
  } else {
    CHECK_NCCL(ncclGroupSimulateEnd(&est));
    // One rank: NCCL leaves the estimate undefined (-1, measured with NCCL
    // 2.28.3 on an H200); several: a time.
    if (l.world == 1) {
      EXPECT_APP(est.estimatedTime == fresh.estimatedTime, "estimated time %f on one rank",
                 est.estimatedTime);
    } else {
      EXPECT_APP(est.estimatedTime > 0 && std::isfinite(est.estimatedTime),
                 "estimated time %f", est.estimatedTime);
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; ++i) {
      EXPECT_APP(h[i] == 1.0f, "a simulated all-reduce ran: [%d] = %f", i, h[i]);
    }
    std::printf("group with an all-reduce: simulated natively, estimated %f us\n",
                est.estimatedTime);
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  if (l.rank == 0) RemoveUniqueId(l, "nccl-id");
  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS nccl_group_sim\n");
  return 0;
}
