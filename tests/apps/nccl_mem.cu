// nccl_mem: communication buffers allocated with ncclMemAlloc, as NCCL's own
// benchmarks and programs using NCCL's buffer registration do. A training-like
// loop (one input upload per step, an all-reduce, a kernel accumulating the
// result) on buffers from ncclMemAlloc, registered with ncclCommRegister and
// ncclCommWindowRegister; every fourth step (--scratch_every) a scratch buffer is
// freed and allocated again with ncclMemFree/ncclMemAlloc and a broadcast
// fills it. The accumulated result is checked exactly against a host
// reference (small integers: every sum is exact in float), and its checksum
// printed, so a recovered run can be compared bitwise with an unkilled one.
// Bad input gets NCCL 2.28's codes. Any number of ranks (RANK/WORLD_SIZE).
//
//   nccl_mem [--iters N] [--n ELEMENTS] [--seed S] [--alloc nccl|cuda] [--scratch_every K]
// (--alloc cuda: the same loop on cudaMalloc'd buffers, to compare.)
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"
#include "tests/apps/nccl_mem_kernels.cuh"

#define EXPECT_NCCL(call, expected)                                                     \
  do {                                                                                  \
    ncclResult_t expect_res_ = (call);                                                  \
    EXPECT_APP(expect_res_ == (expected), "%s returned %d (%s), expected %d", #call,    \
               static_cast<int>(expect_res_), ncclGetErrorString(expect_res_),          \
               static_cast<int>(expected));                                             \
  } while (0)

namespace {

// Rank r's input at step `step`: integers in [-8, 8].
float Input(uint32_t seed, int rank, int step, int j) {
  const uint32_t h = seed + static_cast<uint32_t>(rank) * 7919u +
                     static_cast<uint32_t>(step) * 31u + static_cast<uint32_t>(j) * 13u;
  return static_cast<float>(static_cast<int>(h % 17u) - 8);
}

bool use_cuda_malloc = false;

void* Alloc(size_t bytes) {
  void* p = nullptr;
  if (use_cuda_malloc) CHECK_CUDA(cudaMalloc(&p, bytes));
  else CHECK_NCCL(ncclMemAlloc(&p, bytes));
  return p;
}

void Free(void* p) {
  if (use_cuda_malloc) CHECK_CUDA(cudaFree(p));
  else CHECK_NCCL(ncclMemFree(p));
}

uint64_t Fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 16, n = 4096, scratch_every = 4;
  uint32_t seed = 20261202u;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--n") == 0) n = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0) seed = static_cast<uint32_t>(std::atoll(argv[i + 1]));
    else if (std::strcmp(argv[i], "--alloc") == 0) use_cuda_malloc = std::strcmp(argv[i + 1], "cuda") == 0;
    else if (std::strcmp(argv[i], "--scratch_every") == 0) scratch_every = std::atoi(argv[i + 1]);
  }
  EXPECT_APP(iters > 0 && n > 0 && scratch_every > 0, "bad --iters %d / --n %d / --scratch_every %d",
             iters, n, scratch_every);
  Launch l = ReadLaunch();
  SelectDevice(l);
  if (l.rank == 0) {
    std::printf("nccl_mem: seed %u, %d iterations, %d floats, %d rank(s), buffers from %s\n", seed,
                iters, n, l.world, use_cuda_malloc ? "cudaMalloc" : "ncclMemAlloc");
  }

  // Bad input, no communicator needed. Natively a null out-pointer fails in
  // NCCL's cudaMalloc fallback; size 0 is cudaMalloc(0): success, null.
  EXPECT_NCCL(ncclMemAlloc(nullptr, 64), ncclUnhandledCudaError);
  int sentinel = 0;
  void* zero = &sentinel;
  CHECK_NCCL(ncclMemAlloc(&zero, 0));
  EXPECT_APP(zero == nullptr, "ncclMemAlloc(&p, 0) gave %p", zero);
  CHECK_NCCL(ncclMemFree(nullptr));
  EXPECT_NCCL(ncclMemFree(&sentinel), ncclUnhandledCudaError);  // not NCCL's memory
  (void)cudaGetLastError();  // natively the failed cudaMalloc inside NCCL may set it

  ncclUniqueId id = ExchangeUniqueId(l, "nccl-id");
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
  RemoveUniqueId(l, "nccl-id");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  float *grad = nullptr, *sum = nullptr, *acc = nullptr, *scratch = nullptr;
  grad = static_cast<float*>(Alloc(bytes));
  sum = static_cast<float*>(Alloc(bytes));
  acc = static_cast<float*>(Alloc(bytes));
  EXPECT_APP(grad && sum && acc && grad != sum && sum != acc && grad != acc,
             "ncclMemAlloc gave %p %p %p", grad, sum, acc);
  // Registered for zero-copy (NCCL may answer a null handle: registration
  // skipped), and a window; both are given back at the end.
  void *grad_reg = nullptr, *sum_reg = nullptr;
  ncclWindow_t acc_win = nullptr;
  CHECK_NCCL(ncclCommRegister(comm, grad, bytes, &grad_reg));
  CHECK_NCCL(ncclCommRegister(comm, sum, bytes, &sum_reg));
  // A window needs symmetric-memory support natively (printed if missing);
  // under Revenant it must succeed (a null window).
  const bool under_revenant = std::getenv("REVENANT_AGENT_SOCKET") != nullptr;
  const ncclResult_t win_res = ncclCommWindowRegister(comm, acc, bytes, &acc_win, NCCL_WIN_DEFAULT);
  if (under_revenant) EXPECT_APP(win_res == ncclSuccess, "ncclCommWindowRegister returned %d", win_res);
  if (win_res != ncclSuccess) {
    std::printf("ncclCommWindowRegister: %s (no window)\n", ncclGetErrorString(win_res));
  }
  cudaPointerAttributes attr;
  CHECK_CUDA(cudaPointerGetAttributes(&attr, acc));
  EXPECT_APP(attr.type == cudaMemoryTypeDevice, "ncclMemAlloc memory has type %d",
             static_cast<int>(attr.type));
  CHECK_CUDA(cudaMemsetAsync(acc, 0, bytes, s));

  std::vector<float> in(n), host_acc(n, 0.0f), out(n), total(n);
  for (int step = 0; step < iters; ++step) {
    for (int j = 0; j < n; ++j) in[j] = Input(seed, l.rank, step, j);
    // The step's input, in the order of the non-blocking stream (a pageable
    // source: copied before the call returns).
    CHECK_CUDA(cudaMemcpyAsync(grad, in.data(), bytes, cudaMemcpyHostToDevice, s));
    CHECK_NCCL(ncclAllReduce(grad, sum, n, ncclFloat, ncclSum, comm, s));
    accumulate<<<(n + 255) / 256, 256, 0, s>>>(acc, sum, 0.5f, n);
    CHECK_CUDA(cudaGetLastError());
    for (int j = 0; j < n; ++j) {
      float t = 0.0f;
      for (int r = 0; r < l.world; ++r) t += Input(seed, r, step, j);
      host_acc[j] += 0.5f * t;
    }
    if (step % scratch_every == scratch_every - 1) {
      // Buffers come and go: the journal's setup log keeps only live ones.
      CHECK_CUDA(cudaStreamSynchronize(s));
      if (scratch != nullptr) Free(scratch);
      scratch = static_cast<float*>(Alloc(bytes));
      CHECK_NCCL(ncclBroadcast(acc, scratch, n, ncclFloat, 0, comm, s));
      CHECK_CUDA(cudaMemcpyAsync(out.data(), scratch, bytes, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      for (int j = 0; j < n; ++j) {
        EXPECT_APP(out[j] == host_acc[j], "step %d: scratch[%d] = %g, expected %g", step, j,
                   out[j], host_acc[j]);
      }
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(out.data(), acc, bytes, cudaMemcpyDeviceToHost));  // after the sync
  for (int j = 0; j < n; ++j) {
    EXPECT_APP(out[j] == host_acc[j], "acc[%d] = %g, expected %g", j, out[j], host_acc[j]);
  }
  std::printf("final checksum %016llx\n", static_cast<unsigned long long>(Fnv1a(out.data(), bytes)));
  CHECK_NCCL(ncclCommDeregister(comm, grad_reg));
  CHECK_NCCL(ncclCommDeregister(comm, sum_reg));
  if (win_res == ncclSuccess) CHECK_NCCL(ncclCommWindowDeregister(comm, acc_win));
  if (scratch != nullptr) Free(scratch);
  Free(grad);
  Free(sum);
  Free(acc);
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_NCCL(ncclCommDestroy(comm));
  std::printf("PASS nccl_mem\n");
  return 0;
}
