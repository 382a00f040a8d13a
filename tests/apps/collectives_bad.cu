// collectives_bad: bad NCCL input gives NCCL error codes, never a hang or a
// crash (for Revenant; real NCCL may hang on the mismatched counts). With one
// rank, the parts that need a peer (zero id, mismatched counts) are skipped.
//   - an id that did not come from ncclGetUniqueId, a rank out of range:
//     ncclCommInitRank returns ncclInvalidArgument at once;
//   - an invalid communicator: ncclInvalidArgument at the call;
//   - a bad data type or reduction operation, a null buffer with count > 0,
//     a root out of range: ncclInvalidArgument at the call; ncclGroupEnd
//     without ncclGroupStart: ncclInvalidUsage at the call;
//   - under Revenant only (natively undefined): an all-reduce on a destroyed
//     stream is refused by the agent after the call returned; the error is
//     deferred to the next synchronous NCCL call (docs/design.md, "NCCL
//     calls"): ncclCommGetAsyncError reports it once (also right after polls
//     the shim answered itself), CUDA calls never see it;
//   - all-reduce counts that differ between ranks: the operation fails on
//     every rank; the stream's synchronization reports an error and
//     ncclCommGetAsyncError a non-success code.
// Prints "PASS collectives_bad".
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"

int main() {
  const Launch l = ReadLaunch();
  SelectDevice(l);
  const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id-bad");

  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclSuccess;
  if (l.world >= 2) {
    // (One rank needs no bootstrap peer: what NCCL does with a zero id there
    // is not defined.)
    ncclUniqueId zero;
    std::memset(&zero, 0, sizeof(zero));
    rc = ncclCommInitRank(&comm, l.world, zero, l.rank);
    EXPECT_APP(rc == ncclInvalidArgument, "init with a zero id returned %d", static_cast<int>(rc));
  }
  rc = ncclCommInitRank(&comm, l.world, id, l.world);
  EXPECT_APP(rc == ncclInvalidArgument, "init with rank %d of %d returned %d", l.world, l.world,
             static_cast<int>(rc));

  CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
  RemoveUniqueId(l, "nccl-id-bad");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  float* buf = nullptr;
  CHECK_CUDA(cudaMalloc(&buf, 256 * sizeof(float)));
  CHECK_CUDA(cudaMemset(buf, 0, 256 * sizeof(float)));

  const bool remoted = std::getenv("REVENANT_JOB_DIR") != nullptr;
  ncclComm_t bogus = reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x5151));
  if (remoted) {
    // Natively a pointer that is no communicator is undefined behaviour;
    // Revenant refuses it at the call.
    rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, bogus, s);
    EXPECT_APP(rc == ncclInvalidArgument, "all-reduce on an invalid communicator returned %d",
               static_cast<int>(rc));
  }
  rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, nullptr, s);
  EXPECT_APP(rc == ncclInvalidArgument, "all-reduce on a null communicator returned %d",
             static_cast<int>(rc));
  rc = ncclAllReduce(buf, buf, 16, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, s);
  EXPECT_APP(rc == ncclInvalidArgument, "bad data type returned %d", static_cast<int>(rc));
  rc = ncclAllReduce(buf, buf, 16, ncclFloat, static_cast<ncclRedOp_t>(ncclNumOps), comm, s);
  EXPECT_APP(rc == ncclInvalidArgument, "bad reduction op returned %d", static_cast<int>(rc));
  rc = ncclBroadcast(buf, buf, 16, ncclFloat, l.world, comm, s);
  EXPECT_APP(rc == ncclInvalidArgument, "root %d of %d returned %d", l.world, l.world,
             static_cast<int>(rc));
  if (remoted) {
    // NCCL checks pointers only with NCCL_CHECK_POINTERS=1; Revenant always.
    rc = ncclAllReduce(nullptr, buf, 16, ncclFloat, ncclSum, comm, s);
    EXPECT_APP(rc == ncclInvalidArgument, "null send buffer returned %d", static_cast<int>(rc));
  }
  rc = ncclGroupEnd();
  EXPECT_APP(rc == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart returned %d",
             static_cast<int>(rc));
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(cudaGetLastError() == cudaSuccess, "refused NCCL calls left a CUDA error");

  if (remoted) {
    // The communicator is healthy, just asked: the shim answers the next
    // polls itself (shim/hooks_nccl.cc), yet the error below must be
    // reported at the first poll after the agent kept it.
    for (int i = 0; i < 8; ++i) {
      ncclResult_t healthy = ncclInProgress;
      CHECK_NCCL(ncclCommGetAsyncError(comm, &healthy));
      EXPECT_APP(healthy == ncclSuccess, "healthy communicator reported %d",
                 static_cast<int>(healthy));
    }
    // An error only the agent sees: the stream is gone there.
    cudaStream_t gone;
    CHECK_CUDA(cudaStreamCreate(&gone));
    CHECK_CUDA(cudaStreamDestroy(gone));
    rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, gone);
    EXPECT_APP(rc == ncclSuccess, "asynchronous all-reduce returned %d at the call",
               static_cast<int>(rc));
    CHECK_CUDA(cudaStreamSynchronize(s));  // CUDA calls do not carry NCCL errors
    EXPECT_APP(cudaGetLastError() == cudaSuccess, "an NCCL error reached CUDA's error state");
    ncclResult_t deferred = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(comm, &deferred));
    EXPECT_APP(deferred == ncclInvalidArgument, "deferred error reported as %d",
               static_cast<int>(deferred));
    CHECK_NCCL(ncclCommGetAsyncError(comm, &deferred));
    EXPECT_APP(deferred == ncclSuccess, "the deferred error was reported twice (%d)",
               static_cast<int>(deferred));
    // The same through another synchronous NCCL call: it executes and
    // returns the error.
    rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, comm, gone);
    EXPECT_APP(rc == ncclSuccess, "asynchronous all-reduce returned %d", static_cast<int>(rc));
    int count = 0;
    rc = ncclCommCount(comm, &count);
    EXPECT_APP(rc == ncclInvalidArgument && count == l.world,
               "ncclCommCount after a failed all-reduce: %d (count %d)", static_cast<int>(rc),
               count);
    CHECK_NCCL(ncclCommCount(comm, &count));
    std::printf("deferred NCCL error: reported once by the next synchronous NCCL call\n");
  }

  if (l.world < 2) {
    CHECK_NCCL(ncclCommDestroy(comm));
    CHECK_CUDA(cudaFree(buf));
    std::printf("one rank: the zero id and mismatched counts (they need a peer) skipped\n");
    std::printf("PASS collectives_bad\n");
    return 0;
  }
  // Rank 0 reduces 256 elements, the others 128.
  rc = ncclAllReduce(buf, buf, l.rank == 0 ? 256 : 128, ncclFloat, ncclSum, comm, s);
  cudaError_t sync = cudaStreamSynchronize(s);
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  std::printf("mismatched all-reduce: call %d, sync %s, async error %d (%s)\n",
              static_cast<int>(rc), cudaGetErrorName(sync), static_cast<int>(async),
              ncclGetErrorString(async));
  EXPECT_APP(rc != ncclSuccess || async != ncclSuccess,
             "mismatched counts went unnoticed (call %d, async %d)", static_cast<int>(rc),
             static_cast<int>(async));
  EXPECT_APP(sync != cudaSuccess || rc != ncclSuccess, "the stream reported no error");

  CHECK_NCCL(ncclCommAbort(comm));
  CHECK_CUDA(cudaFree(buf));
  std::printf("PASS collectives_bad\n");
  return 0;
}
