// train_mlp: data-parallel training of a 2-layer MLP with plain CUDA + NCCL.
//
//   RANK=r WORLD_SIZE=n MASTER_PORT=p train_mlp [--iters 20] [--hidden 128] [--batch 32]
//       [--time_after W] [--host_fn] [--out_of_place]
//       [--alternate NAME --arm K --arms N --burst B] [--call_times]
// With --time_after W (0 < W < iters), rank 0 prints the mean step time of
// iterations W .. iters-1 (steady clock, the last step's work synchronized)
// as "RESULT train_step_us <us>": start-up, warm-up and teardown excluded.
// With --alternate, N single-rank jobs (arms K = 0..N-1, e.g. the same job
// with and without the journal) take turns on the machine: a shared-memory
// turn counter /dev/shm/NAME lets one job run B iterations (a burst) while
// the others wait, so that drifting load on the machine hits every arm
// alike. Each burst's steady part (its first B/10 iterations excluded, the
// last one synchronized) is printed as "RESULT train_step_burst_us J <us>";
// bursts J of different arms ran next to each other in time
// (bench/journal_step.sh pairs them).
// With --call_times (and --time_after W), rank 0 also prints the mean time
// the application spent in each kind of call of iterations W .. iters-1 as
// "RESULT train_call_us sync <us> copy <us> launch <us> allreduce <us>
// issue <us>" (issue: a whole step less its first synchronize): natively
// the libraries' own cost per call, under the shim what posting a call
// costs and, at the synchronize, the wait for the agent's backlog.
// With --out_of_place, the gradient buckets are all-reduced into a second
// buffer that the SGD step reads (the same sums: the same checksum).
// With --host_fn, each iteration ends with a cudaLaunchHostFunc that counts
// the iterations in this process: the count must equal --iters at the end
// (a recovery must neither lose nor repeat a host function).
//
// Deterministic by construction: a fixed-seed synthetic dataset (each rank
// trains on its own shard), fixed-seed initial parameters (the same on every
// rank), kernels without atomics (collectives_bootstrap.h for the launch).
// Per iteration: H2D copy of the batch from pinned memory, forward, loss,
// backward, gradient all-reduce (ncclSum) in several buckets, SGD with the
// summed gradients scaled by 1/world. Rank 0 prints "iter N loss X" every few
// iterations; every rank prints "final checksum <hex>" (FNV-1a of the raw
// parameter bytes), the ranks compare their checksums with an all-gather and
// exit 1 on any mismatch, then print "PASS train_mlp".
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"
#include "tests/apps/train_mlp_kernels.cuh"

namespace {

constexpr int kIn = 64;
constexpr int kOut = 10;
constexpr int kDatasetSize = 512;
constexpr int kBuckets = 4;
constexpr int kLossEvery = 5;
constexpr float kLearningRate = 0.2f;
constexpr int kThreads = 128;

// A small fixed-seed generator (same sequence everywhere).
struct Rng {
  uint64_t s;
  uint32_t Next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
  float Uniform() { return (Next() & 0xffffff) / 16777216.0f * 2.0f - 1.0f; }  // [-1, 1)
};

int Blocks(int n) { return (n + kThreads - 1) / kThreads; }

uint64_t Fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

const char* StringFlag(int argc, char** argv, const char* name) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return nullptr;
}

// --alternate: jobs taking turns in bursts (see the top of the file).
struct Turns {
  std::atomic<uint64_t> joined;
  std::atomic<uint64_t> turn;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics");

Turns* OpenTurns(const char* name) {
  const std::string shm = std::string("/") + name;
  const int fd = shm_open(shm.c_str(), O_CREAT | O_RDWR, 0600);
  EXPECT_APP(fd >= 0, "--alternate: shm_open %s failed", shm.c_str());
  // Every arm may size it; a new object is zero-filled.
  EXPECT_APP(ftruncate(fd, sizeof(Turns)) == 0, "--alternate: ftruncate %s", shm.c_str());
  void* p = mmap(nullptr, sizeof(Turns), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  EXPECT_APP(p != MAP_FAILED, "--alternate: mmap %s", shm.c_str());
  return static_cast<Turns*>(p);
}

// Waits (sleeping 100 us between looks) until `done` holds; false after 120 s.
template <typename F>
bool WaitTurn(F done) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (!done()) {
    if (std::chrono::steady_clock::now() > give_up) return false;
    usleep(100);
  }
  return true;
}

// --call_times: the time spent in each kind of call (steady clock).
enum CallKind { kSyncCall, kCopyCall, kLaunchCall, kAllReduceCall, kIssue, kCallKinds };
struct CallTimes {
  bool on = false;
  double us[kCallKinds] = {};
  long n[kCallKinds] = {};
  void Add(CallKind k, std::chrono::steady_clock::time_point since) {
    us[k] += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - since)
                 .count();
    ++n[k];
  }
  double Mean(CallKind k) const { return n[k] > 0 ? us[k] / static_cast<double>(n[k]) : 0.0; }
};
// Runs `stmt`, adding its time to `kind` when `timing`.
#define TIMED_CALL(times, timing, kind, stmt)                        \
  do {                                                               \
    const auto call_start_ = std::chrono::steady_clock::now();      \
    stmt;                                                            \
    if (timing) (times).Add(kind, call_start_);                      \
  } while (0)

std::atomic<int> host_fn_runs{0};
void CUDART_CB CountIteration(void* runs) { ++*static_cast<std::atomic<int>*>(runs); }

}  // namespace

int main(int argc, char** argv) {
  const int iters = IntFlag(argc, argv, "--iters", 20);
  const int hidden = IntFlag(argc, argv, "--hidden", 128);
  const int batch = IntFlag(argc, argv, "--batch", 32);
  const int time_after = IntFlag(argc, argv, "--time_after", 0);
  bool host_fn = false;
  for (int i = 1; i < argc; ++i) host_fn = host_fn || std::string(argv[i]) == "--host_fn";
  bool out_of_place = false;
  for (int i = 1; i < argc; ++i) {
    out_of_place = out_of_place || std::string(argv[i]) == "--out_of_place";
  }
  CallTimes calls;
  for (int i = 1; i < argc; ++i) calls.on = calls.on || std::string(argv[i]) == "--call_times";
  EXPECT_APP(iters > 0 && hidden > 0 && batch > 0, "bad arguments");
  EXPECT_APP(time_after >= 0 && time_after < iters, "--time_after must be in [0, iters)");
  const char* alternate = StringFlag(argc, argv, "--alternate");
  const int arm = IntFlag(argc, argv, "--arm", 0);
  const int arms = IntFlag(argc, argv, "--arms", 1);
  const int burst = IntFlag(argc, argv, "--burst", 1000);
  EXPECT_APP(alternate == nullptr || (arms >= 1 && arm >= 0 && arm < arms && burst >= 10),
             "--alternate needs --arm K < --arms N and --burst >= 10");
  const Launch l = ReadLaunch();
  SelectDevice(l);

  // The dataset: inputs in [-1, 1), labels from a fixed random linear teacher.
  std::vector<float> data(static_cast<size_t>(kDatasetSize) * kIn);
  std::vector<int> labels(kDatasetSize);
  {
    Rng rng{12345};
    std::vector<float> teacher(kOut * kIn);
    for (float& t : teacher) t = rng.Uniform();
    for (float& x : data) x = rng.Uniform();
    for (int i = 0; i < kDatasetSize; ++i) {
      int best = 0;
      float best_v = -1e30f;
      for (int o = 0; o < kOut; ++o) {
        float v = 0;
        for (int k = 0; k < kIn; ++k) v += teacher[o * kIn + k] * data[i * kIn + k];
        if (v > best_v) best_v = v, best = o;
      }
      labels[i] = best;
    }
  }
  // This rank's shard: samples i with i % world == rank.
  std::vector<int> shard;
  for (int i = l.rank; i < kDatasetSize; i += l.world) shard.push_back(i);

  // Parameters [w1 | b1 | w2 | b2], one buffer; gradients alike.
  const size_t n_w1 = static_cast<size_t>(hidden) * kIn, n_b1 = hidden;
  const size_t n_w2 = static_cast<size_t>(kOut) * hidden, n_b2 = kOut;
  const size_t n_params = n_w1 + n_b1 + n_w2 + n_b2;
  std::vector<float> init(n_params, 0.0f);
  {
    Rng rng{777};
    const float s1 = 1.0f / std::sqrt(static_cast<float>(kIn));
    const float s2 = 1.0f / std::sqrt(static_cast<float>(hidden));
    for (size_t i = 0; i < n_w1; ++i) init[i] = rng.Uniform() * s1;
    for (size_t i = 0; i < n_w2; ++i) init[n_w1 + n_b1 + i] = rng.Uniform() * s2;
  }

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  float *params, *grads, *x, *hpre, *hact, *logits, *dlogits, *dh, *loss, *loss_total;
  int* y;
  CHECK_CUDA(cudaMalloc(&params, n_params * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&grads, n_params * sizeof(float)));
  float* reduced = grads;
  if (out_of_place) CHECK_CUDA(cudaMalloc(&reduced, n_params * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&x, static_cast<size_t>(batch) * kIn * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&y, batch * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&hpre, static_cast<size_t>(batch) * hidden * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&hact, static_cast<size_t>(batch) * hidden * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dh, static_cast<size_t>(batch) * hidden * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&logits, static_cast<size_t>(batch) * kOut * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dlogits, static_cast<size_t>(batch) * kOut * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&loss, batch * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&loss_total, sizeof(float)));
  CHECK_CUDA(cudaMemcpy(params, init.data(), n_params * sizeof(float), cudaMemcpyHostToDevice));
  float* w1 = params;
  float* b1 = w1 + n_w1;
  float* w2 = b1 + n_b1;
  float* b2 = w2 + n_w2;
  float* dw1 = grads;
  float* db1 = dw1 + n_w1;
  float* dw2 = db1 + n_b1;
  float* db2 = dw2 + n_w2;

  // Pinned staging for batches and the loss.
  float* pinned_x;
  int* pinned_y;
  float* pinned_loss;
  CHECK_CUDA(cudaMallocHost(&pinned_x, static_cast<size_t>(batch) * kIn * sizeof(float)));
  CHECK_CUDA(cudaMallocHost(&pinned_y, batch * sizeof(int)));
  CHECK_CUDA(cudaMallocHost(&pinned_loss, sizeof(float)));

  const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id");
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
  RemoveUniqueId(l, "nccl-id");

  const float scale = 1.0f / static_cast<float>(l.world);
  std::chrono::steady_clock::time_point timed_start;
  Turns* turns = nullptr;
  if (alternate != nullptr) {
    EXPECT_APP(l.world == 1, "--alternate is for single-rank jobs");
    turns = OpenTurns(alternate);
    turns->joined.fetch_add(1);
    EXPECT_APP(WaitTurn([&] { return turns->joined.load() >= static_cast<uint64_t>(arms); }),
               "--alternate: only %d of %d arms started within 120 s",
               static_cast<int>(turns->joined.load()), arms);
  }
  const int burst_skip = burst / 10;
  double burst_total_us = 0;
  int burst_timed_iters = 0;
  std::chrono::steady_clock::time_point burst_start;
  for (int it = 0; it < iters; ++it) {
    if (turns != nullptr && it % burst == 0) {
      // This arm's turn: the (it / burst)-th round of all arms.
      const uint64_t mine = static_cast<uint64_t>(it / burst) * arms + arm;
      EXPECT_APP(WaitTurn([&] { return turns->turn.load() == mine; }),
                 "--alternate: turn %d never came (another arm stopped?)", static_cast<int>(mine));
    }
    if (turns != nullptr && it % burst == burst_skip && it >= time_after) {
      burst_start = std::chrono::steady_clock::now();
    }
    if (turns == nullptr && time_after > 0 && it == time_after) {
      timed_start = std::chrono::steady_clock::now();
    }
    const bool timing = calls.on && it >= time_after;
    // The previous iteration's copies are done once the stream is idle.
    TIMED_CALL(calls, timing, kSyncCall, CHECK_CUDA(cudaStreamSynchronize(stream)));
    const auto issue_start = std::chrono::steady_clock::now();
    for (int j = 0; j < batch; ++j) {
      const int sample = shard[(static_cast<size_t>(it) * batch + j) % shard.size()];
      std::memcpy(pinned_x + static_cast<size_t>(j) * kIn, &data[sample * kIn],
                  kIn * sizeof(float));
      pinned_y[j] = labels[sample];
    }
    TIMED_CALL(calls, timing, kCopyCall,
               CHECK_CUDA(cudaMemcpyAsync(x, pinned_x,
                                          static_cast<size_t>(batch) * kIn * sizeof(float),
                                          cudaMemcpyHostToDevice, stream)));
    TIMED_CALL(calls, timing, kCopyCall,
               CHECK_CUDA(cudaMemcpyAsync(y, pinned_y, batch * sizeof(int),
                                          cudaMemcpyHostToDevice, stream)));

    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_fc1_forward<<<Blocks(batch * hidden), kThreads, 0, stream>>>(
                   x, w1, b1, hpre, hact, batch, kIn, hidden)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_fc2_forward<<<Blocks(batch * kOut), kThreads, 0, stream>>>(
                   hact, w2, b2, logits, batch, hidden, kOut)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_softmax_xent<<<Blocks(batch), kThreads, 0, stream>>>(logits, y, dlogits, loss,
                                                                          batch, kOut)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_loss_sum<<<1, 1, 0, stream>>>(loss, batch, loss_total)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_fc2_backward<<<Blocks(kOut * hidden + kOut), kThreads, 0, stream>>>(
                   dlogits, hact, dw2, db2, batch, hidden, kOut)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_hidden_backward<<<Blocks(batch * hidden), kThreads, 0, stream>>>(
                   dlogits, w2, hpre, dh, batch, hidden, kOut)));
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_fc1_backward<<<Blocks(hidden * kIn + hidden), kThreads, 0, stream>>>(
                   dh, x, dw1, db1, batch, kIn, hidden)));
    CHECK_CUDA(cudaGetLastError());

    // Gradient all-reduce in buckets (in place unless --out_of_place).
    const size_t per = (n_params + kBuckets - 1) / kBuckets;
    for (size_t off = 0; off < n_params; off += per) {
      const size_t n = off + per <= n_params ? per : n_params - off;
      TIMED_CALL(calls, timing, kAllReduceCall,
                 CHECK_NCCL(ncclAllReduce(grads + off, reduced + off, n, ncclFloat, ncclSum, comm,
                                          stream)));
    }
    TIMED_CALL(calls, timing, kLaunchCall,
               (mlp_sgd<<<Blocks(static_cast<int>(n_params)), kThreads, 0, stream>>>(
                   params, reduced, static_cast<int>(n_params), kLearningRate, scale)));
    CHECK_CUDA(cudaGetLastError());
    if (host_fn) CHECK_CUDA(cudaLaunchHostFunc(stream, CountIteration, &host_fn_runs));

    if (timing) calls.Add(kIssue, issue_start);
    if (it % kLossEvery == 0 || it == iters - 1) {
      CHECK_CUDA(cudaMemcpyAsync(pinned_loss, loss_total, sizeof(float), cudaMemcpyDeviceToHost,
                                 stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      if (l.rank == 0) std::printf("iter %d loss %.6f\n", it, *pinned_loss);
    }
    if (turns != nullptr && (it % burst == burst - 1 || it == iters - 1)) {
      // End of this arm's burst: its work finished before the next arm runs.
      CHECK_CUDA(cudaStreamSynchronize(stream));
      const int first = it - it % burst + burst_skip;
      if (first >= time_after && it >= first) {
        const double us = std::chrono::duration<double, std::micro>(
                              std::chrono::steady_clock::now() - burst_start)
                              .count();
        const int n = it - first + 1;
        burst_total_us += us;
        burst_timed_iters += n;
        std::printf("RESULT train_step_burst_us %d %.3f\n", it / burst, us / n);
      }
      turns->turn.fetch_add(1);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));
  if (host_fn) {
    EXPECT_APP(host_fn_runs.load() == iters, "the host function ran %d times in %d iterations",
               host_fn_runs.load(), iters);
    std::printf("host function runs %d\n", host_fn_runs.load());
  }
  if (turns != nullptr) {
    EXPECT_APP(burst_timed_iters > 0, "--alternate: no burst was timed");
    std::printf("RESULT train_step_us %.3f (%d iterations in bursts of %d, each from its %dth)\n",
                burst_total_us / burst_timed_iters, burst_timed_iters, burst, burst_skip);
  } else if (time_after > 0 && l.rank == 0) {
    const double us = std::chrono::duration<double, std::micro>(
                          std::chrono::steady_clock::now() - timed_start)
                          .count();
    std::printf("RESULT train_step_us %.3f (iterations %d..%d)\n", us / (iters - time_after),
                time_after, iters - 1);
  }
  if (calls.on && l.rank == 0) {
    std::printf("RESULT train_call_us sync %.3f copy %.3f launch %.3f allreduce %.3f issue %.3f\n",
                calls.Mean(kSyncCall), calls.Mean(kCopyCall), calls.Mean(kLaunchCall),
                calls.Mean(kAllReduceCall), calls.Mean(kIssue));
  }
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  EXPECT_APP(async == ncclSuccess, "NCCL async error %d", static_cast<int>(async));

  std::vector<float> final_params(n_params);
  CHECK_CUDA(cudaMemcpy(final_params.data(), params, n_params * sizeof(float),
                        cudaMemcpyDeviceToHost));
  const uint64_t checksum = Fnv1a(final_params.data(), n_params * sizeof(float));
  std::printf("final checksum %016llx\n", static_cast<unsigned long long>(checksum));

  // Every rank must hold the same parameters.
  uint64_t *mine, *all;
  CHECK_CUDA(cudaMalloc(&mine, sizeof(uint64_t)));
  CHECK_CUDA(cudaMalloc(&all, l.world * sizeof(uint64_t)));
  CHECK_CUDA(cudaMemcpy(mine, &checksum, sizeof(uint64_t), cudaMemcpyHostToDevice));
  CHECK_NCCL(ncclAllGather(mine, all, 1, ncclUint64, comm, stream));
  std::vector<uint64_t> sums(l.world);
  CHECK_CUDA(cudaStreamSynchronize(stream));
  CHECK_CUDA(cudaMemcpy(sums.data(), all, l.world * sizeof(uint64_t), cudaMemcpyDeviceToHost));
  for (int r = 0; r < l.world; ++r) {
    EXPECT_APP(sums[r] == checksum, "rank %d has checksum %016llx, rank %d has %016llx", r,
               static_cast<unsigned long long>(sums[r]), l.rank,
               static_cast<unsigned long long>(checksum));
  }

  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_CUDA(cudaFreeHost(pinned_x));
  CHECK_CUDA(cudaFreeHost(pinned_y));
  CHECK_CUDA(cudaFreeHost(pinned_loss));
  if (out_of_place) CHECK_CUDA(cudaFree(reduced));
  for (void* p : std::vector<void*>{params, grads, x, y, hpre, hact, dh, logits, dlogits, loss,
                                    loss_total, mine, all}) {
    CHECK_CUDA(cudaFree(p));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("PASS train_mlp\n");
  return 0;
}
