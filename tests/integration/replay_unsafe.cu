// replay_unsafe: a training-like loop whose device state depends on memory
// the host writes directly, which no journaled call carries: replaying one of
// its minibatches from the boundary does not reproduce the state. The journal
// validator (revenant-run --validate_every=K) must report it.
//
//   RANK=r WORLD_SIZE=n MASTER_PORT=p replay_unsafe [--iters 9] [--seed 7] [--safe]
//                                                   [--mark_steps] [--event_each_step]
//                                                   [--big_pageable]
//
// Per iteration (one minibatch): the host writes this step's scale factors,
// uploads its input x from pinned memory (the boundary's anchor), then
//   acc = acc / 2 + x * scale        (ru_accumulate)
//   total = all-reduce(acc)          (ncclSum over the ranks; a copy on 1 rank)
//   params -= lr * total             (ru_update)
// and then a host callback counts the step and params[0] is copied back (a
// synchronous copy to pageable memory): a validation replay must deliver
// neither again (the program checks the count and the values it got).
// The scale factors live in managed memory the kernel reads directly: the
// host rewrites them every step, so a replay of step s reads step s + 1's
// values. With --safe they travel through a journaled copy from pinned
// memory instead, and a replay reproduces the state exactly. With
// --mark_steps each step starts with revenantMarkStep() (found with dlsym:
// only under the Revenant shim), for agents that place boundaries only there.
// With --event_each_step each step also creates and destroys an event
// (state-class requests: the validator skips such minibatches).
// With --big_pageable each step also uploads 2 MiB from pageable memory: a
// copy that large travels through the shim's staging area, whose bytes the
// journal does not keep; the step waits for its input upload first and ends
// with a staged upload of constant bytes, so a replay of the step reads those
// instead of the step's own, deterministically.
// Deterministic (fixed seed, printed); every rank prints "final checksum
// <hex>" (FNV-1a of the parameters) and "PASS replay_unsafe".
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/collectives_bootstrap.h"
#include "tests/integration/replay_unsafe_kernels.cuh"

namespace {

void CountStep(void* count) { ++*static_cast<int*>(count); }

constexpr int kN = 4096;
constexpr int kThreads = 128;
constexpr float kLearningRate = 0.01f;

int IntFlag(int argc, char** argv, const char* name, int fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return fallback;
}

bool BoolFlag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return true;
  }
  return false;
}

// Values in [-1, 1) from (seed, a, b, c): a stateless hash, same everywhere.
float Value(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t h = seed * 0x9e3779b97f4a7c15ull ^ (a + 1) * 0xbf58476d1ce4e5b9ull ^
               (b + 1) * 0x94d049bb133111ebull ^ (c + 7);
  h ^= h >> 31;
  h *= 0xd6e8feb86659fd93ull;
  h ^= h >> 32;
  return static_cast<float>(h & 0xffffff) / 16777216.0f * 2.0f - 1.0f;
}

uint64_t Fnv1a(const void* data, size_t n) {
  uint64_t h = 1469598103934665603ull;
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = IntFlag(argc, argv, "--iters", 9);
  const uint64_t seed = static_cast<uint64_t>(IntFlag(argc, argv, "--seed", 7));
  const bool safe = BoolFlag(argc, argv, "--safe");
  const bool event_each_step = BoolFlag(argc, argv, "--event_each_step");
  const bool big_pageable = BoolFlag(argc, argv, "--big_pageable");
  constexpr size_t kBig = size_t{2} << 20;  // above the shim's 1 MiB inline limit
  std::vector<char> big_host(kBig), big_const(kBig, 0x5a);
  void *big_dev = nullptr, *big_scratch = nullptr;
  using MarkStepFn = void (*)();
  MarkStepFn mark_step = nullptr;
  if (BoolFlag(argc, argv, "--mark_steps")) {
    mark_step = reinterpret_cast<MarkStepFn>(dlsym(RTLD_DEFAULT, "revenantMarkStep"));
    EXPECT_APP(mark_step != nullptr, "--mark_steps needs the Revenant shim (revenantMarkStep)");
  }
  const Launch l = ReadLaunch();
  std::printf("replay_unsafe: rank %d of %d, %d iterations, seed %llu, %s\n", l.rank, l.world,
              iters, static_cast<unsigned long long>(seed),
              safe ? "safe (scale through a journaled copy)"
                   : "unsafe (scale read from managed memory)");
  const size_t bytes = kN * sizeof(float);
  const int blocks = (kN + kThreads - 1) / kThreads;

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  float *x, *acc, *total, *params, *scale_dev;
  CHECK_CUDA(cudaMalloc(&x, bytes));
  CHECK_CUDA(cudaMalloc(&acc, bytes));
  CHECK_CUDA(cudaMalloc(&total, bytes));
  CHECK_CUDA(cudaMalloc(&params, bytes));
  CHECK_CUDA(cudaMalloc(&scale_dev, bytes));
  CHECK_CUDA(cudaMemset(acc, 0, bytes));
  std::vector<float> init(kN);
  for (int i = 0; i < kN; ++i) init[i] = Value(seed, 0xffff, 0, i);
  CHECK_CUDA(cudaMemcpy(params, init.data(), bytes, cudaMemcpyHostToDevice));
  if (big_pageable) {
    CHECK_CUDA(cudaMalloc(&big_dev, kBig));
    CHECK_CUDA(cudaMalloc(&big_scratch, kBig));
  }

  float *pinned_x, *pinned_scale, *managed_scale;
  CHECK_CUDA(cudaMallocHost(&pinned_x, bytes));
  CHECK_CUDA(cudaMallocHost(&pinned_scale, bytes));
  CHECK_CUDA(cudaMallocManaged(&managed_scale, bytes));

  ncclComm_t comm = nullptr;
  if (l.world > 1) {
    const ncclUniqueId id = ExchangeUniqueId(l, "nccl-id");
    CHECK_NCCL(ncclCommInitRank(&comm, l.world, id, l.rank));
    RemoveUniqueId(l, "nccl-id");
  }

  int callbacks = 0;
  std::vector<float> first_params;  // params[0] after each step, as copied back
  for (int it = 0; it < iters; ++it) {
    // The previous step is done: its inputs may be rewritten.
    CHECK_CUDA(cudaStreamSynchronize(stream));
    float* scale_host = safe ? pinned_scale : managed_scale;
    for (int i = 0; i < kN; ++i) {
      pinned_x[i] = Value(seed, it, l.rank, i);
      scale_host[i] = 0.5f + 0.5f * Value(seed, it, 1000, i);
    }
    if (mark_step != nullptr) mark_step();  // where a detected boundary would sit
    CHECK_CUDA(cudaMemcpyAsync(x, pinned_x, bytes, cudaMemcpyHostToDevice, stream));
    const float* scale = managed_scale;
    if (safe) {
      CHECK_CUDA(cudaMemcpyAsync(scale_dev, pinned_scale, bytes, cudaMemcpyHostToDevice, stream));
      scale = scale_dev;
    }
    if (big_pageable) {
      CHECK_CUDA(cudaStreamSynchronize(stream));  // the boundary is behind us
      for (size_t i = 0; i < kBig; ++i) big_host[i] = static_cast<char>(it * 31 + i * 7);
      CHECK_CUDA(cudaMemcpy(big_dev, big_host.data(), kBig, cudaMemcpyHostToDevice));
    }
    ru_accumulate<<<blocks, kThreads, 0, stream>>>(x, scale, acc, kN);
    CHECK_CUDA(cudaGetLastError());
    if (comm != nullptr) {
      CHECK_NCCL(ncclAllReduce(acc, total, kN, ncclFloat, ncclSum, comm, stream));
    } else {
      CHECK_CUDA(cudaMemcpyAsync(total, acc, bytes, cudaMemcpyDeviceToDevice, stream));
    }
    ru_update<<<blocks, kThreads, 0, stream>>>(params, total, kLearningRate, kN);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaLaunchHostFunc(stream, CountStep, &callbacks));
    float p0 = 0;
    CHECK_CUDA(cudaMemcpy(&p0, params, sizeof(p0), cudaMemcpyDeviceToHost));
    first_params.push_back(p0);
    if (big_pageable) {
      CHECK_CUDA(cudaMemcpy(big_scratch, big_const.data(), kBig, cudaMemcpyHostToDevice));
    }
    if (event_each_step) {
      cudaEvent_t done;
      CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
      CHECK_CUDA(cudaEventRecord(done, stream));
      CHECK_CUDA(cudaEventSynchronize(done));
      CHECK_CUDA(cudaEventDestroy(done));
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(stream));

  std::vector<float> final_params(kN);
  CHECK_CUDA(cudaMemcpy(final_params.data(), params, bytes, cudaMemcpyDeviceToHost));
  EXPECT_APP(callbacks == iters, "%d host callbacks ran for %d steps", callbacks, iters);
  EXPECT_APP(first_params.back() == final_params[0], "params[0] copied back %g, final %g",
             first_params.back(), final_params[0]);
  std::printf("final checksum %016llx\n",
              static_cast<unsigned long long>(Fnv1a(final_params.data(), bytes)));
  if (comm != nullptr) CHECK_NCCL(ncclCommDestroy(comm));
  CHECK_CUDA(cudaFree(managed_scale));
  CHECK_CUDA(cudaFreeHost(pinned_scale));
  CHECK_CUDA(cudaFreeHost(pinned_x));
  for (float* p : {x, acc, total, params, scale_dev}) CHECK_CUDA(cudaFree(p));
  if (big_pageable) {
    CHECK_CUDA(cudaFree(big_dev));
    CHECK_CUDA(cudaFree(big_scratch));
  }
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("PASS replay_unsafe\n");
  return 0;
}
