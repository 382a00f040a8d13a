// collectives_bad: bad NCCL input gives NCCL error codes, never a hang or a
// crash (for Revenant; real NCCL may hang on the mismatched counts).
//   - an id that did not come from ncclGetUniqueId, a rank out of range:
//     ncclCommInitRank returns ncclInvalidArgument at once;
//   - an invalid communicator: ncclInvalidArgument;
//   - all-reduce counts that differ between ranks: the operation fails on
//     every rank; the stream's synchronization reports an error and
//     ncclCommGetAsyncError a non-success code.
// Prints "PASS collectives_bad".
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"

int main() {
  const Launch l = ReadLaunch();
  SelectDevice(l);
  EXPECT_APP(l.world >= 2, "needs 2 ranks or more");
  const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id-bad");

  ncclComm_t comm = nullptr;
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  ncclResult_t rc = ncclCommInitRank(&comm, l.world, zero, l.rank);
  EXPECT_APP(rc == ncclInvalidArgument, "init with a zero id returned %d", static_cast<int>(rc));
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

  ncclComm_t bogus = reinterpret_cast<ncclComm_t>(static_cast<uintptr_t>(0x5151));
  rc = ncclAllReduce(buf, buf, 16, ncclFloat, ncclSum, bogus, s);
  // Refused at the call, or (an asynchronous call under a remoting layer)
  // reported later, by the next synchronization or cudaGetLastError.
  cudaError_t bogus_sync = cudaStreamSynchronize(s);
  cudaError_t bogus_last = cudaGetLastError();
  std::printf("invalid communicator: call %d, sync %d, last error %d\n", static_cast<int>(rc),
              static_cast<int>(bogus_sync), static_cast<int>(bogus_last));
  EXPECT_APP(rc == ncclInvalidArgument ||
                 (rc == ncclSuccess && (bogus_sync != cudaSuccess || bogus_last != cudaSuccess)),
             "all-reduce on an invalid communicator went unnoticed");

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
