// launch_path_bench: what a small training step's launches cost natively on
// each path the agent could take, in one process, rounds alternating:
//
//   runtime  cudaLaunchKernel (<<<>>>), what the application calls natively
//   driver   cuLaunchKernel from cudaGetDriverEntryPointByVersion, with the
//            CUfunction of cudaGetFuncBySymbol: what the agent's cuda
//            backend calls for every cudaLaunchKernel request
//   buffer   cuLaunchKernel given the packed parameter block itself
//            (CU_LAUNCH_PARAM_BUFFER_POINTER) instead of a pointer per
//            parameter: the agent receives the block packed at the kernel's
//            offsets
//   busy     the driver path while a second thread of the process keeps
//            querying another stream (cuStreamQuery every ~20 us), as a
//            thread of the agent polling events would
//   spin     the driver path while two more threads spin reading a word
//            (as the agent's journal thread and the application's waiting
//            thread do under Revenant): what busy cores cost a launch
//
// Then the step's input uploads (8 KiB and 128 B, then
// cudaStreamSynchronize), per copy:
//   mallochost  cudaMemcpyAsync from cudaMallocHost memory into cudaMalloc
//               memory, as the application copies natively
//   registered  the same from a shared memory file mapped and registered
//               with cudaHostRegister, as the agent holds the application's
//               pinned memory
//   vmm         from the registered file into memory mapped with cuMemCreate
//               and cuMemMap in a reserved range, as the agent's device
//               memory is
//   vmm_driver  the same with the driver's cuMemcpyHtoDAsync
//   fill_here   mallochost, the source written by the copying thread before
//               each step's copies (an application's data loader, natively)
//   fill_other  the same, written by another thread (the application's core)
//               before this one copies (the agent's executor under Revenant)
//
// A step is train_mlp's shape: 8 launches of a 9-parameter kernel on one
// stream, then cudaStreamSynchronize. Printed per path: the CPU time of a
// launch (mean over the steps' launches) and of a whole step, and
// "RESULT launch_path_<path>_us <us>" lines; ratios to the runtime path.
//
//   launch_path_bench [--steps 20000] [--rounds 5]
#include <cuda.h>
#include <cuda_runtime.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"

namespace {

__global__ void step_kernel(float* a, const float* b, const float* c, float* d, int n, int m,
                            int k, float alpha, float beta) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = alpha * b[i % m] + beta * c[i % k] + d[i];
}

int IntFlag(int argc, char** argv, const char* name, int def) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::atoi(argv[i + 1]);
  }
  return def;
}

// The driver's entry point `name`, typed as `T` (the program ends on failure).
template <typename T>
T DriverEntry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  CHECK(cudaGetDriverEntryPointByVersion(name, &fn, CUDA_VERSION, cudaEnableDefault, &q));
  return reinterpret_cast<T>(fn);
}
#define DRIVER_ENTRY(fn) DriverEntry<decltype(&fn)>(#fn)

using Clock = std::chrono::steady_clock;
double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

struct Figures {
  double launch_us = 0;  // mean CPU time of one launch
  double step_us = 0;    // mean wall time of a step (8 launches + synchronize)
};

}  // namespace

int main(int argc, char** argv) {
  const int steps = IntFlag(argc, argv, "--steps", 20000);
  const int rounds = IntFlag(argc, argv, "--rounds", 5);
  if (steps < 100 || rounds < 1) {
    std::printf("FAIL launch_path_bench: --steps >= 100 and --rounds >= 1\n");
    return 1;
  }
  CHECK(cudaSetDevice(0));
  constexpr int kN = 4096;
  float *a, *b, *c, *d;
  CHECK(cudaMalloc(&a, kN * sizeof(float)));
  CHECK(cudaMalloc(&b, kN * sizeof(float)));
  CHECK(cudaMalloc(&c, kN * sizeof(float)));
  CHECK(cudaMalloc(&d, kN * sizeof(float)));
  CHECK(cudaMemset(a, 0, kN * sizeof(float)));
  CHECK(cudaMemset(b, 0, kN * sizeof(float)));
  CHECK(cudaMemset(c, 0, kN * sizeof(float)));
  CHECK(cudaMemset(d, 0, kN * sizeof(float)));
  cudaStream_t stream, other;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaStreamCreate(&other));

  auto cu_launch = DRIVER_ENTRY(cuLaunchKernel);
  auto cu_query = DRIVER_ENTRY(cuStreamQuery);
  cudaFunction_t func = nullptr;
  CHECK(cudaGetFuncBySymbol(&func, reinterpret_cast<const void*>(&step_kernel)));

  int n = kN, m = 1024, k = 512;
  float alpha = 0.5f, beta = 0.25f;
  void* params[] = {&a, &b, &c, &d, &n, &m, &k, &alpha, &beta};
  constexpr int kLaunches = 8;
  constexpr int kThreads = 128;
  const int blocks = (kN + kThreads - 1) / kThreads;

  // The packed block: every parameter at its offset (cuFuncGetParamInfo).
  auto cu_param_info = DRIVER_ENTRY(cuFuncGetParamInfo);
  constexpr int kParams = 9;
  const size_t sizes[kParams] = {sizeof(a), sizeof(b), sizeof(c), sizeof(d), sizeof(n),
                                 sizeof(m), sizeof(k), sizeof(alpha), sizeof(beta)};
  alignas(16) char block[256] = {};
  size_t block_size = 0;
  for (int i = 0; i < kParams; ++i) {
    size_t offset = 0, size = 0;
    if (cu_param_info(reinterpret_cast<CUfunction>(func), i, &offset, &size) != CUDA_SUCCESS ||
        size != sizes[i] || offset + size > sizeof(block)) {
      std::printf("FAIL launch_path_bench: cuFuncGetParamInfo of parameter %d\n", i);
      return 1;
    }
    std::memcpy(block + offset, params[i], size);
    block_size = std::max(block_size, offset + size);
  }
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, block, CU_LAUNCH_PARAM_BUFFER_SIZE, &block_size,
                   CU_LAUNCH_PARAM_END};

  enum Path { kRuntime, kDriver, kBuffer, kBusy, kSpin, kPaths };
  const char* names[kPaths] = {"runtime", "driver", "buffer", "busy", "spin"};

  auto run = [&](Path path) {
    std::atomic<bool> stop{false};
    std::thread poller;
    if (path == kBusy) {
      poller = std::thread([&] {
        CHECK(cudaSetDevice(0));
        while (!stop.load(std::memory_order_relaxed)) {
          (void)cu_query(reinterpret_cast<CUstream>(other));
          const auto until = Clock::now() + std::chrono::microseconds(20);
          while (Clock::now() < until) {
          }
        }
      });
    }
    std::atomic<uint64_t> word{0};
    std::vector<std::thread> spinners;
    if (path == kSpin) {
      for (int t = 0; t < 2; ++t) {
        spinners.emplace_back([&] {
          uint64_t seen = 0;
          while (!stop.load(std::memory_order_relaxed)) seen += word.load(std::memory_order_acquire);
          word.fetch_add(seen == 1 ? 1 : 0);  // keeps the loop from being optimized away
        });
      }
    }
    double launch_total = 0;
    const auto start = Clock::now();
    for (int s = 0; s < steps; ++s) {
      for (int l = 0; l < kLaunches; ++l) {
        const auto t0 = Clock::now();
        if (path == kRuntime) {
          step_kernel<<<blocks, kThreads, 0, stream>>>(a, b, c, d, n, m, k, alpha, beta);
        } else if (path == kBuffer) {
          const CUresult r = cu_launch(reinterpret_cast<CUfunction>(func), blocks, 1, 1, kThreads,
                                       1, 1, 0, reinterpret_cast<CUstream>(stream), nullptr,
                                       extra);
          if (r != CUDA_SUCCESS) {
            std::printf("FAIL launch_path_bench: cuLaunchKernel (buffer) returned %d\n",
                        static_cast<int>(r));
            std::exit(1);
          }
        } else {  // driver, busy, spin
          const CUresult r = cu_launch(reinterpret_cast<CUfunction>(func), blocks, 1, 1, kThreads,
                                       1, 1, 0, reinterpret_cast<CUstream>(stream), params,
                                       nullptr);
          if (r != CUDA_SUCCESS) {
            std::printf("FAIL launch_path_bench: cuLaunchKernel returned %d\n", static_cast<int>(r));
            std::exit(1);
          }
        }
        launch_total += Us(t0, Clock::now());
      }
      CHECK(cudaStreamSynchronize(stream));
    }
    const auto end = Clock::now();
    stop.store(true);
    if (poller.joinable()) poller.join();
    for (std::thread& t : spinners) t.join();
    CHECK(cudaGetLastError());
    Figures f;
    f.launch_us = launch_total / (static_cast<double>(steps) * kLaunches);
    f.step_us = Us(start, end) / steps;
    return f;
  };

  for (int p = 0; p < kPaths; ++p) (void)run(static_cast<Path>(p));  // warm-up
  std::vector<double> launch[kPaths], step[kPaths];
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < kPaths; ++i) {
      // The order turns every round so that no path always runs first.
      const auto p = static_cast<Path>((i + r) % kPaths);
      const Figures f = run(p);
      launch[p].push_back(f.launch_us);
      step[p].push_back(f.step_us);
      std::printf("round %d %-8s launch %.3f us  step %.3f us\n", r, names[p], f.launch_us,
                  f.step_us);
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double base_launch = median(launch[kRuntime]), base_step = median(step[kRuntime]);
  for (int p = 0; p < kPaths; ++p) {
    const double ml = median(launch[p]), ms = median(step[p]);
    std::printf("RESULT launch_path_%s_us %.3f (step %.3f us; to runtime: launch %.3f, step %.3f)\n",
                names[p], ml, ms, ml / base_launch, ms / base_step);
  }

  // The same step's launches issued as a CUDA graph, as an executor could
  // replay a recurring sequence of launch requests:
  //   graph_relaunch  one instantiated graph of the step's launches, launched
  //                   as it is (the lower bound)
  //   graph_setparams the same graph, each node's parameters set again
  //                   (cudaGraphExecKernelNodeSetParams) before the launch, as
  //                   requests with new arguments would need
  //   graph_capture   the launches captured from the stream each step and the
  //                   instantiated graph updated with cudaGraphExecUpdate
  // each for a step of 8 launches (train_mlp's) and of 2000 launches in
  // graphs of 64 nodes (shim_bench's 2000-launch step); against the driver path.
  enum GraphPath { kDirect, kRelaunch, kSetParams, kCapture, kGraphPaths };
  const char* graph_names[kGraphPaths] = {"direct", "graph_relaunch", "graph_setparams",
                                          "graph_capture"};
  auto capture_graph = [&](int nodes) {
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int l = 0; l < nodes; ++l) {
      if (cu_launch(reinterpret_cast<CUfunction>(func), blocks, 1, 1, kThreads, 1, 1, 0,
                    reinterpret_cast<CUstream>(stream), params, nullptr) != CUDA_SUCCESS) {
        std::printf("FAIL launch_path_bench: cuLaunchKernel in a capture\n");
        std::exit(1);
      }
    }
    CHECK(cudaStreamEndCapture(stream, &graph));
    return graph;
  };
  auto graph_run = [&](GraphPath path, int launches, int per_graph, int graph_steps) {
    cudaGraph_t graph = capture_graph(per_graph);
    cudaGraphExec_t exec = nullptr;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    size_t count = 0;
    CHECK(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
    std::vector<cudaKernelNodeParams> node_params(count);
    for (size_t i = 0; i < count; ++i) CHECK(cudaGraphKernelNodeGetParams(nodes[i], &node_params[i]));
    double issue_total = 0;
    const int graphs = launches / per_graph;
    const auto start = Clock::now();
    for (int s = 0; s < graph_steps; ++s) {
      const auto t0 = Clock::now();
      if (path == kDirect) {
        for (int l = 0; l < launches; ++l) {
          if (cu_launch(reinterpret_cast<CUfunction>(func), blocks, 1, 1, kThreads, 1, 1, 0,
                        reinterpret_cast<CUstream>(stream), params, nullptr) != CUDA_SUCCESS) {
            std::printf("FAIL launch_path_bench: cuLaunchKernel\n");
            std::exit(1);
          }
        }
      } else {
        for (int g = 0; g < graphs; ++g) {
          if (path == kSetParams) {
            for (size_t i = 0; i < count; ++i) {
              CHECK(cudaGraphExecKernelNodeSetParams(exec, nodes[i], &node_params[i]));
            }
          } else if (path == kCapture) {
            cudaGraph_t next = capture_graph(per_graph);
            cudaGraphExecUpdateResultInfo info{};
            CHECK(cudaGraphExecUpdate(exec, next, &info));
            CHECK(cudaGraphDestroy(next));
          }
          CHECK(cudaGraphLaunch(exec, stream));
        }
      }
      issue_total += Us(t0, Clock::now());
      CHECK(cudaStreamSynchronize(stream));
    }
    Figures f;
    f.launch_us = issue_total / (static_cast<double>(graph_steps) * launches);
    f.step_us = Us(start, Clock::now()) / graph_steps;
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    return f;
  };
  struct Shape {
    const char* name;
    int launches, per_graph, steps_div;
  };
  const Shape shapes[] = {{"step8", kLaunches, kLaunches, 1}, {"step2000", 2000, 64, 100}};
  for (const Shape& shape : shapes) {
    const int shape_steps = std::max(100, steps / shape.steps_div);
    std::vector<double> issue[kGraphPaths], wall[kGraphPaths];
    for (int r = -1; r < rounds; ++r) {  // round -1: warm-up
      for (int i = 0; i < kGraphPaths; ++i) {
        const auto p = static_cast<GraphPath>((i + std::max(r, 0)) % kGraphPaths);
        const Figures f = graph_run(p, shape.launches, shape.per_graph, shape_steps);
        if (r < 0) continue;
        issue[p].push_back(f.launch_us);
        wall[p].push_back(f.step_us);
        std::printf("round %d %s %-16s issue %.3f us per launch  step %.3f us\n", r, shape.name,
                    graph_names[p], f.launch_us, f.step_us);
      }
    }
    const double base_issue = median(issue[kDirect]), base_wall = median(wall[kDirect]);
    for (int p = 0; p < kGraphPaths; ++p) {
      std::printf("RESULT graph_%s_%s_us %.3f per launch (step %.3f us; to direct: issue %.3f, "
                  "step %.3f)\n",
                  shape.name, graph_names[p], median(issue[p]), median(wall[p]),
                  median(issue[p]) / base_issue, median(wall[p]) / base_wall);
    }
  }

  // Uploads: cudaMallocHost memory against a registered shared mapping.
  constexpr size_t kBig = 8192, kSmall = 128;
  char* malloc_host = nullptr;
  CHECK(cudaMallocHost(&malloc_host, kBig + kSmall));
  const int fd = memfd_create("launch_path_bench", MFD_CLOEXEC);
  const size_t map_size = 1 << 16;
  if (fd < 0 || ftruncate(fd, map_size) != 0) {
    std::printf("FAIL launch_path_bench: memfd\n");
    return 1;
  }
  char* shared = static_cast<char*>(
      mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  if (shared == MAP_FAILED) {
    std::printf("FAIL launch_path_bench: mmap\n");
    return 1;
  }
  std::memset(shared, 1, map_size);
  std::memset(malloc_host, 1, kBig + kSmall);
  CHECK(cudaHostRegister(shared, map_size, cudaHostRegisterDefault));
  // Device memory as the agent maps it: a reserved range, one mapping.
  auto cu_reserve = DRIVER_ENTRY(cuMemAddressReserve);
  auto cu_create = DRIVER_ENTRY(cuMemCreate);
  auto cu_map = DRIVER_ENTRY(cuMemMap);
  auto cu_access = DRIVER_ENTRY(cuMemSetAccess);
  auto cu_granularity = DRIVER_ENTRY(cuMemGetAllocationGranularity);
  auto cu_htod = DRIVER_ENTRY(cuMemcpyHtoDAsync);
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  size_t gran = 0;
  CUdeviceptr vmm = 0;
  CUmemGenericAllocationHandle handle = 0;
  CUmemAccessDesc access{};
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (cu_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS ||
      cu_reserve(&vmm, size_t{1} << 34, gran, 0, 0) != CUDA_SUCCESS ||
      cu_create(&handle, gran, &prop, 0) != CUDA_SUCCESS ||
      cu_map(vmm, gran, 0, handle, 0) != CUDA_SUCCESS ||
      cu_access(vmm, gran, &access, 1) != CUDA_SUCCESS) {
    std::printf("FAIL launch_path_bench: mapping device memory\n");
    return 1;
  }
  char* vmm_dst = reinterpret_cast<char*>(vmm);
  enum CopyPath { kMallocHost, kRegistered, kVmm, kVmmDriver, kFillHere, kFillOther, kCopyPaths };
  const char* copy_names[kCopyPaths] = {"mallochost", "registered", "vmm",
                                        "vmm_driver", "fill_here",  "fill_other"};
  auto copies = [&](CopyPath path) {
    char* host = path == kRegistered || path == kVmm || path == kVmmDriver ? shared : malloc_host;
    char* dst = path == kVmm || path == kVmmDriver ? vmm_dst : reinterpret_cast<char*>(a);
    // fill_other: a helper thread writes the source when `turn` is odd.
    std::atomic<int> turn{0};
    std::atomic<bool> done{false};
    std::thread filler;
    if (path == kFillOther) {
      filler = std::thread([&] {
        int seen = 0;
        while (!done.load(std::memory_order_relaxed)) {
          const int t = turn.load(std::memory_order_acquire);
          if (t == seen || t % 2 == 0) continue;
          std::memset(host, t & 0xff, kBig + kSmall);
          seen = t + 1;
          turn.store(seen, std::memory_order_release);
        }
      });
    }
    double copy_total = 0;
    const auto start = Clock::now();
    for (int s = 0; s < steps; ++s) {
      if (path == kFillHere) std::memset(host, (2 * s + 1) & 0xff, kBig + kSmall);
      if (path == kFillOther) {
        const int t = 2 * s + 1;
        turn.store(t, std::memory_order_release);
        while (turn.load(std::memory_order_acquire) != t + 1) {
        }
      }
      auto t0 = Clock::now();
      if (path == kVmmDriver) {
        auto cs = reinterpret_cast<CUstream>(stream);
        if (cu_htod(reinterpret_cast<CUdeviceptr>(dst), host, kBig, cs) != CUDA_SUCCESS ||
            cu_htod(reinterpret_cast<CUdeviceptr>(dst + kBig), host + kBig, kSmall, cs) !=
                CUDA_SUCCESS) {
          std::printf("FAIL launch_path_bench: cuMemcpyHtoDAsync\n");
          std::exit(1);
        }
      } else {
        CHECK(cudaMemcpyAsync(dst, host, kBig, cudaMemcpyHostToDevice, stream));
        CHECK(cudaMemcpyAsync(dst + kBig, host + kBig, kSmall, cudaMemcpyHostToDevice, stream));
      }
      copy_total += Us(t0, Clock::now());
      CHECK(cudaStreamSynchronize(stream));
    }
    done.store(true);
    if (filler.joinable()) filler.join();
    Figures f;
    f.launch_us = copy_total / (2.0 * steps);
    f.step_us = Us(start, Clock::now()) / steps;
    return f;
  };
  for (int p = 0; p < kCopyPaths; ++p) (void)copies(static_cast<CopyPath>(p));
  std::vector<double> copy_us[kCopyPaths];
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < kCopyPaths; ++i) {
      const auto p = static_cast<CopyPath>((i + r) % kCopyPaths);
      const Figures f = copies(p);
      copy_us[p].push_back(f.launch_us);
      std::printf("round %d copy %-10s %.3f us per copy  step %.3f us\n", r, copy_names[p],
                  f.launch_us, f.step_us);
    }
  }
  const double base_copy = median(copy_us[kMallocHost]);
  for (int p = 0; p < kCopyPaths; ++p) {
    std::printf("RESULT copy_path_%s_us %.3f (to mallochost: %.3f)\n", copy_names[p],
                median(copy_us[p]), median(copy_us[p]) / base_copy);
  }
  CHECK(cudaHostUnregister(shared));
  munmap(shared, map_size);
  close(fd);
  CHECK(cudaFreeHost(malloc_host));
  std::printf("PASS launch_path_bench\n");
  return 0;
}
