// collectives_all: every NCCL collective of Revenant's API surface, with
// result checks, on WORLD_SIZE ranks (collectives_bootstrap.h):
// all-reduce with each op (and half/bfloat16 sums), broadcast, bcast, reduce, all-gather,
// reduce-scatter, all-to-all, gather, scatter, a send/recv ring in a group,
// and the communicator queries. Prints "PASS collectives_all".
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"

namespace {

constexpr size_t kCount = 33;

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  T* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, v.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return p;
}

template <typename T>
std::vector<T> ToHost(const T* p, size_t n, cudaStream_t s) {
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaFree(const_cast<T*>(p)));
  return v;
}

// Rank r's value at index i.
int V(int r, size_t i) { return (r + 1) * 10 + static_cast<int>(i % 7); }

}  // namespace

int main() {
  const Launch l = ReadLaunch();
  SelectDevice(l);
  const int n = l.world, r = l.rank;
  const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id-collectives");
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, n, id, r));
  RemoveUniqueId(l, "nccl-id-collectives");
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));

  int count = 0, user_rank = -1, device = -1, version = 0;
  CHECK_NCCL(ncclCommCount(comm, &count));
  CHECK_NCCL(ncclCommUserRank(comm, &user_rank));
  CHECK_NCCL(ncclCommCuDevice(comm, &device));
  CHECK_NCCL(ncclGetVersion(&version));
  EXPECT_APP(count == n && user_rank == r && device >= 0 && version > 0,
             "count %d rank %d device %d version %d", count, user_rank, device, version);

  std::vector<int> mine(kCount);
  for (size_t i = 0; i < kCount; ++i) mine[i] = V(r, i);

  // All-reduce, every op, int32 and float.
  for (ncclRedOp_t op : {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg}) {
    int* in = ToDevice(mine);
    int* out = ToDevice(std::vector<int>(kCount, 0));
    std::vector<float> fmine(mine.begin(), mine.end());
    float* fin = ToDevice(fmine);
    CHECK_NCCL(ncclAllReduce(in, out, kCount, ncclInt32, op, comm, s));
    CHECK_NCCL(ncclAllReduce(fin, fin, kCount, ncclFloat, op, comm, s));  // in place
    std::vector<int> got = ToHost(out, kCount, s);
    std::vector<float> fgot = ToHost(fin, kCount, s);
    CHECK_CUDA(cudaFree(in));
    for (size_t i = 0; i < kCount; ++i) {
      long long want = op == ncclProd ? 1 : (op == ncclMin ? 1 << 30 : 0);
      double fwant = op == ncclProd ? 1 : (op == ncclMin ? 1e30 : 0);
      for (int k = 0; k < n; ++k) {
        const int v = V(k, i);
        if (op == ncclSum || op == ncclAvg) want += v, fwant += v;
        if (op == ncclProd) want *= v, fwant *= v;
        if (op == ncclMax) want = want > v ? want : v, fwant = fwant > v ? fwant : v;
        if (op == ncclMin) want = want < v ? want : v, fwant = fwant < v ? fwant : v;
      }
      if (op == ncclAvg) want /= n, fwant /= n;
      EXPECT_APP(got[i] == static_cast<int>(want), "all-reduce op %d [%zu]: %d, want %lld",
                 static_cast<int>(op), i, got[i], want);
      EXPECT_APP(fgot[i] == static_cast<float>(fwant), "float all-reduce op %d [%zu]: %g vs %g",
                 static_cast<int>(op), i, fgot[i], fwant);
    }
  }

  // Half and bfloat16 sums of 1.0 (as raw bits): n exactly, for n <= 4.
  if (n <= 4) {
    uint16_t* h = ToDevice(std::vector<uint16_t>(kCount, 0x3c00));
    uint16_t* b = ToDevice(std::vector<uint16_t>(kCount, 0x3f80));
    CHECK_NCCL(ncclAllReduce(h, h, kCount, ncclFloat16, ncclSum, comm, s));
    CHECK_NCCL(ncclAllReduce(b, b, kCount, ncclBfloat16, ncclSum, comm, s));
    std::vector<uint16_t> hg = ToHost(h, kCount, s), bg = ToHost(b, kCount, s);
    const uint16_t half_n[] = {0, 0x3c00, 0x4000, 0x4200, 0x4400};
    const uint16_t bf16_n[] = {0, 0x3f80, 0x4000, 0x4040, 0x4080};
    EXPECT_APP(hg[kCount - 1] == half_n[n], "half all-reduce: 0x%04x", hg[kCount - 1]);
    EXPECT_APP(bg[0] == bf16_n[n], "bfloat16 all-reduce: 0x%04x", bg[0]);
  }

  // Broadcast from the last rank; bcast (in place) from rank 0.
  {
    int* in = ToDevice(mine);
    int* out = ToDevice(std::vector<int>(kCount, -1));
    CHECK_NCCL(ncclBroadcast(in, out, kCount, ncclInt32, n - 1, comm, s));
    std::vector<int> got = ToHost(out, kCount, s);
    for (size_t i = 0; i < kCount; ++i) EXPECT_APP(got[i] == V(n - 1, i), "broadcast [%zu]", i);
    CHECK_NCCL(ncclBcast(in, kCount, ncclInt32, 0, comm, s));
    got = ToHost(in, kCount, s);
    for (size_t i = 0; i < kCount; ++i) EXPECT_APP(got[i] == V(0, i), "bcast [%zu]", i);
  }

  // Reduce (max) to rank n/2.
  {
    const int root = n / 2;
    int* in = ToDevice(mine);
    int* out = ToDevice(std::vector<int>(kCount, -1));
    CHECK_NCCL(ncclReduce(in, out, kCount, ncclInt32, ncclMax, root, comm, s));
    std::vector<int> got = ToHost(out, kCount, s);
    CHECK_CUDA(cudaFree(in));
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_APP(got[i] == (r == root ? V(n - 1, i) : -1), "reduce [%zu]: %d", i, got[i]);
    }
  }

  // All-gather; gather to the last rank.
  {
    int* in = ToDevice(mine);
    int* out = ToDevice(std::vector<int>(kCount * n, -1));
    int* gout = ToDevice(std::vector<int>(kCount * n, -1));
    CHECK_NCCL(ncclAllGather(in, out, kCount, ncclInt32, comm, s));
    CHECK_NCCL(ncclGather(in, gout, kCount, ncclInt32, n - 1, comm, s));
    std::vector<int> got = ToHost(out, kCount * n, s);
    std::vector<int> ggot = ToHost(gout, kCount * n, s);
    CHECK_CUDA(cudaFree(in));
    for (int k = 0; k < n; ++k) {
      for (size_t i = 0; i < kCount; ++i) {
        EXPECT_APP(got[k * kCount + i] == V(k, i), "all-gather block %d [%zu]", k, i);
        EXPECT_APP(ggot[k * kCount + i] == (r == n - 1 ? V(k, i) : -1), "gather block %d", k);
      }
    }
  }

  // Reduce-scatter (sum), all-to-all, scatter from rank 0.
  {
    std::vector<int> blocks(kCount * n);  // block j of rank r: 100 * r + j
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < kCount; ++i) blocks[j * kCount + i] = 100 * r + j;
    }
    int* in = ToDevice(blocks);
    int* rs = ToDevice(std::vector<int>(kCount, -1));
    int* a2a = ToDevice(std::vector<int>(kCount * n, -1));
    int* sc = ToDevice(std::vector<int>(kCount, -1));
    CHECK_NCCL(ncclReduceScatter(in, rs, kCount, ncclInt32, ncclSum, comm, s));
    CHECK_NCCL(ncclAlltoAll(in, a2a, kCount, ncclInt32, comm, s));
    CHECK_NCCL(ncclScatter(in, sc, kCount, ncclInt32, 0, comm, s));
    std::vector<int> rs_got = ToHost(rs, kCount, s);
    std::vector<int> a2a_got = ToHost(a2a, kCount * n, s);
    std::vector<int> sc_got = ToHost(sc, kCount, s);
    CHECK_CUDA(cudaFree(in));
    const int rs_want = 100 * (n * (n - 1) / 2) + n * r;
    EXPECT_APP(rs_got[kCount - 1] == rs_want, "reduce-scatter: %d, want %d", rs_got[kCount - 1],
               rs_want);
    for (int k = 0; k < n; ++k) {
      EXPECT_APP(a2a_got[k * kCount] == 100 * k + r, "all-to-all block %d: %d", k,
                 a2a_got[k * kCount]);
    }
    EXPECT_APP(sc_got[3] == r, "scatter: %d, want %d", sc_got[3], r);
  }

  // Send/recv ring inside a group (receive posted first: must not deadlock).
  {
    int* in = ToDevice(mine);
    int* out = ToDevice(std::vector<int>(kCount, -1));
    CHECK_NCCL(ncclGroupStart());
    CHECK_NCCL(ncclRecv(out, kCount, ncclInt32, (r + n - 1) % n, comm, s));
    CHECK_NCCL(ncclSend(in, kCount, ncclInt32, (r + 1) % n, comm, s));
    CHECK_NCCL(ncclGroupEnd());
    std::vector<int> got = ToHost(out, kCount, s);
    CHECK_CUDA(cudaFree(in));
    for (size_t i = 0; i < kCount; ++i) {
      EXPECT_APP(got[i] == V((r + n - 1) % n, i), "ring recv [%zu]: %d", i, got[i]);
    }
  }

  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT_APP(async == ncclSuccess, "async error %d", static_cast<int>(async));
  CHECK_NCCL(ncclCommFinalize(comm));
  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS collectives_all\n");
  return 0;
}
