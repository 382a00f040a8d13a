// Revenant benchmark: all-reduce through NCCL as the application sees it.
// The same binary runs natively and under `revenant-run --backend=cuda`;
// every rank runs, rank 0 prints
//   RESULT <metric> <value> <unit>
// lines for bench/compare.sh (ratio = revenant / native).
//
//   RANK=r WORLD_SIZE=n LOCAL_RANK=r MASTER_PORT=p ./nccl_bench.bin [--quick]
//       [--mark_steps[=K]] [--only=1mib,16mib,256mib] [--scale=PCT]
//
// --only: just the bandwidth of these sizes (no 4 KiB latency, no issue
// cost); --scale: every size's warm-up and burst at PCT percent of its
// iterations (at least one; 1-1000: longer bursts for one rank, whose 1 MiB
// burst of 200 all-reduces lasts ~1 ms). Short runs for many alternating pairs
// (scripts/gpu/nccl_multi.sh, NB_BW_PAIRS): ranks time-sharing one GPU
// land on multiples of a time slice, run by run, so one pair says little.
//
// --mark_steps=K: every K all-reduces of the bandwidth bursts are a training
// step (revenantMarkStep() after the K-th, found with dlsym; natively there
// is none and nothing happens); --mark_steps is K = 1, a step per all-reduce. Under Revenant a multi-rank communicator's
// results are kept for a replacement until the minibatch boundary after
// next; a loop that places no boundary keeps every result (host memory
// grows, each new result takes new pinned memory), as a training loop that
// marks its steps does not.
//
// Metrics, per message size (float sum, out of place -- in place on one
// rank NCCL has nothing to move -- one stream):
//   allreduce_<size>_algbw   bytes / time per all-reduce (GB/s)
//   allreduce_<size>_busbw   algbw * 2(n-1)/n, as nccl-tests reports it
//                            (only for n > 1: the factor is 0 on one rank)
//   allreduce_4k_latency     one 4 KiB all-reduce + stream synchronize (us)
//   allreduce_first_call     the first 4 KiB all-reduce after ncclCommInitRank,
//                            + stream synchronize (us): connection setup
//                            not taken out by a warm-up lands here
//   allreduce_issue          what issuing one 4 KiB all-reduce costs the
//                            application (a burst of 500, no synchronize
//                            inside; us per call; median of the reps)
// Times are host-clock over a burst of back-to-back all-reduces closed by
// one cudaStreamSynchronize (what a training loop does), after a warm-up.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"
#define CHECK_NCCL(call)                                                                  \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      std::printf("FAIL %s:%d: %s returned %s\n", __FILE__, __LINE__, #call,              \
                  ncclGetErrorString(r_));                                                \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

namespace {

using Clock = std::chrono::steady_clock;

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Rank 0 writes the id to /dev/shm/revenant-bench-<port>/id (atomically);
// the others poll for it for at most 60 s.
ncclUniqueId ExchangeId(int rank, const std::string& port) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const std::string dir = "/dev/shm/revenant-bench-" + port;
  const std::string path = dir + "/id";
  if (rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      std::printf("FAIL mkdir %s\n", dir.c_str());
      std::exit(1);
    }
    FILE* f = std::fopen((path + ".tmp").c_str(), "wb");
    if (f == nullptr || std::fwrite(&id, sizeof(id), 1, f) != 1 || std::fclose(f) != 0 ||
        std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
      std::printf("FAIL cannot publish the NCCL id at %s\n", path.c_str());
      std::exit(1);
    }
    return id;
  }
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  for (;;) {
    FILE* f = std::fopen(path.c_str(), "rb");
    if (f != nullptr) {
      const bool ok = std::fread(&id, sizeof(id), 1, f) == 1;
      std::fclose(f);
      if (ok) return id;
    }
    if (Clock::now() > deadline) {
      std::printf("FAIL rank %d: no NCCL id at %s after 60 s\n", rank, path.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// The bandwidth bursts: message size, all-reduces per burst.
struct Size {
  const char* name;
  size_t bytes;
  int iters;
};
const Size kSizes[] = {{"1mib", 1ull << 20, 200}, {"16mib", 16ull << 20, 60},
                       {"256mib", 256ull << 20, 12}};

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, mark_steps = false;
  int step_every = 1, scale = 100;
  std::string only;  // empty: every size, the latency and the issue cost
  for (int i = 1; i < argc; ++i) {
    quick = quick || std::strcmp(argv[i], "--quick") == 0;
    if (std::strncmp(argv[i], "--only=", 7) == 0) only = std::string(",") + (argv[i] + 7) + ",";
    if (std::strncmp(argv[i], "--scale=", 8) == 0) {
      scale = std::atoi(argv[i] + 8);
      if (scale < 1 || scale > 1000) {
        std::fprintf(stderr, "--scale=PCT needs 1 <= PCT <= 1000\n");
        return 2;
      }
    }
    if (std::strcmp(argv[i], "--mark_steps") == 0) mark_steps = true;
    if (std::strncmp(argv[i], "--mark_steps=", 13) == 0) {
      mark_steps = true;
      step_every = std::atoi(argv[i] + 13);
      if (step_every < 1) {
        std::fprintf(stderr, "--mark_steps=K needs K >= 1\n");
        return 2;
      }
    }
  }
  // --only names sizes of kSizes, nothing else (a typo would measure nothing).
  for (size_t b = 1; b < only.size(); b = only.find(',', b) + 1) {
    const std::string name = only.substr(b, only.find(',', b) - b);
    bool known = false;
    for (const Size& z : kSizes) known = known || name == z.name;
    if (!known) {
      std::fprintf(stderr, "--only: no size %s (1mib, 16mib, 256mib)\n", name.c_str());
      return 2;
    }
  }
  using MarkStepFn = void (*)();
  MarkStepFn mark_step =
      mark_steps ? reinterpret_cast<MarkStepFn>(dlsym(RTLD_DEFAULT, "revenantMarkStep")) : nullptr;
  if (EnvInt("RANK", 0) == 0 && mark_steps) {
    if (mark_step != nullptr) {
      std::printf("mark_steps: revenantMarkStep after every %d all-reduce(s)\n", step_every);
    } else {
      std::printf("mark_steps: no revenantMarkStep here (native)\n");
    }
  }
  const int rank = EnvInt("RANK", 0);
  const int world = EnvInt("WORLD_SIZE", 1);
  const int local = EnvInt("LOCAL_RANK", rank);
  const std::string port = std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "0";
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  CHECK(cudaSetDevice(local % count));

  const ncclUniqueId id = ExchangeId(rank, port);
  ncclComm_t comm;
  CHECK_NCCL(ncclCommInitRank(&comm, world, id, rank));
  if (rank == 0) {
    const std::string dir = "/dev/shm/revenant-bench-" + port;
    std::remove((dir + "/id").c_str());
    rmdir(dir.c_str());
  }
  cudaStream_t s;
  CHECK(cudaStreamCreate(&s));
  const size_t max_bytes = 256ull << 20;
  float *buf, *out;
  CHECK(cudaMalloc(&buf, max_bytes));
  CHECK(cudaMalloc(&out, max_bytes));
  CHECK(cudaMemset(buf, 0, max_bytes));
  CHECK(cudaDeviceSynchronize());
  {
    const auto t0 = Clock::now();
    CHECK_NCCL(ncclAllReduce(buf, out, 1024, ncclFloat, ncclSum, comm, s));
    CHECK(cudaStreamSynchronize(s));
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (rank == 0) std::printf("RESULT allreduce_first_call %.4f us\n", us);
  }

  const int reps = quick ? 3 : 5;
  const double bus = world > 1 ? 2.0 * (world - 1) / world : 0.0;
  for (const Size& z : kSizes) {
    if (!only.empty() && only.find(std::string(",") + z.name + ",") == std::string::npos) continue;
    const size_t n = z.bytes / sizeof(float);
    const int warm = std::max(1, 5 * scale / 100), iters = std::max(1, z.iters * scale / 100);
    for (int w = 0; w < warm; ++w) {
      CHECK_NCCL(ncclAllReduce(buf, out, n, ncclFloat, ncclSum, comm, s));
      if (mark_step != nullptr && (w + 1) % step_every == 0) mark_step();
    }
    CHECK(cudaStreamSynchronize(s));
    std::vector<double> sec;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        CHECK_NCCL(ncclAllReduce(buf, out, n, ncclFloat, ncclSum, comm, s));
        if (mark_step != nullptr && (i + 1) % step_every == 0) mark_step();
      }
      CHECK(cudaStreamSynchronize(s));
      sec.push_back(std::chrono::duration<double>(Clock::now() - t0).count() / iters);
    }
    const double algbw = z.bytes / Median(sec) / 1e9;
    if (rank == 0) {
      std::printf("RESULT allreduce_%s_algbw %.4f GB/s\n", z.name, algbw);
      if (world > 1) std::printf("RESULT allreduce_%s_busbw %.4f GB/s\n", z.name, algbw * bus);
    }
  }
  if (only.empty()) {
    const size_t n = 1024;  // 4 KiB
    std::vector<double> us;
    for (int i = 0; i < (quick ? 200 : 1000); ++i) {
      const auto t0 = Clock::now();
      CHECK_NCCL(ncclAllReduce(buf, out, n, ncclFloat, ncclSum, comm, s));
      CHECK(cudaStreamSynchronize(s));
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    }
    if (rank == 0) std::printf("RESULT allreduce_4k_latency %.4f us\n", Median(us));
  }
  if (only.empty()) {
    const int calls = 500;
    std::vector<double> us;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = Clock::now();
      for (int i = 0; i < calls; ++i) {
        CHECK_NCCL(ncclAllReduce(buf, out, 1024, ncclFloat, ncclSum, comm, s));
      }
      us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / calls);
      CHECK(cudaStreamSynchronize(s));
    }
    if (rank == 0) std::printf("RESULT allreduce_issue %.4f us\n", Median(us));
  }
  ncclResult_t async = ncclSuccess;
  CHECK_NCCL(ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess) {
    std::printf("FAIL async error %s\n", ncclGetErrorString(async));
    return 1;
  }
  CHECK_NCCL(ncclCommDestroy(comm));
  CHECK(cudaFree(buf));
  CHECK(cudaFree(out));
  CHECK(cudaStreamDestroy(s));
  std::printf("PASS nccl_bench rank %d of %d\n", rank, world);
  return 0;
}
