// Revenant benchmark: the app-visible cost of CUDA calls. The same binary
// runs natively and under `revenant-run --backend=cuda`; each run prints
//   RESULT <metric> <value> <unit>
// lines that bench/compare.sh turns into a ratio table (shim / native).
//
//   ./shim_bench.bin [--quick] [--small] [--h2d_iters N] [--latency_only]
//
// --small shrinks the training step's kernels to 256 elements: under the host
// backend (kernels run on the CPU) the step then measures the launch path,
// not the CPU's arithmetic. --h2d_iters: the 256 MiB copies' iterations (8,
// 2 with --quick; given, each iteration's figure is printed too); under the
// one-rank default snapshots the first few make the capture files that later
// ones reuse, so a longer loop shows the steady state. --latency_only runs
// the launch cost and the round-trip rows alone (4 B D2H, empty stream
// sync, event record + query: well under a second), for many short pairs
// of runs whose median ratio is steadier than a few long ones' (a run's
// placement on the CPUs moves these rows by +-15 % from one process to the
// next, the launch cost by up to 2x).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "bench/cuda_check.h"

#include "bench/bench_kernels.cuh"

namespace {

using Clock = std::chrono::steady_clock;

double Us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void Result(const char* metric, double value, const char* unit) {
  std::printf("RESULT %s %.4f %s\n", metric, value, unit);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, small = false, latency_only = false;
  int h2d_iters = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) quick = true;
    if (std::strcmp(argv[i], "--small") == 0) small = true;
    if (std::strcmp(argv[i], "--latency_only") == 0) latency_only = true;
    if (std::strcmp(argv[i], "--h2d_iters") == 0 && i + 1 < argc) h2d_iters = std::atoi(argv[++i]);
  }
  const bool h2d_each = h2d_iters > 0;  // asked for: each iteration's figure too
  if (h2d_iters <= 0) h2d_iters = quick ? 2 : 8;
  const int reps = quick ? 5 : 1;
  CHECK(cudaSetDevice(0));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  // Warm up: module load, first launch, first copy.
  for (int i = 0; i < 100; ++i) empty_kernel<<<1, 1, 0, s>>>();
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s));

  // 1. App-visible cost of one asynchronous launch: batches of 256 launches
  // (well below the launch queue depth), timed without the sync that follows.
  {
    std::vector<double> per;
    for (int r = 0; r < 200 / reps; ++r) {
      auto t0 = Clock::now();
      for (int i = 0; i < 256; ++i) empty_kernel<<<1, 32, 0, s>>>();
      auto t1 = Clock::now();
      CHECK(cudaStreamSynchronize(s));
      per.push_back(Us(t0, t1) / 256);
    }
    CHECK(cudaGetLastError());
    Result("launch_cost", Median(per), "us");
  }
  // 2. Sustained launch throughput: launches enqueued and completed.
  if (!latency_only) {
    const int n = 100000 / reps;
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, s>>>();
    CHECK(cudaStreamSynchronize(s));
    auto t1 = Clock::now();
    CHECK(cudaGetLastError());
    Result("launch_throughput", n / (Us(t0, t1) * 1e-6), "launches/s");
  }
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 1 << 20));
  CHECK(cudaMemset(d, 0, 1 << 20));
  // 3. 4-byte device-to-host cudaMemcpy into pageable memory.
  {
    std::vector<double> t;
    float h = 0;
    for (int i = 0; i < 3000 / reps; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpy(&h, d, 4, cudaMemcpyDeviceToHost));
      t.push_back(Us(t0, Clock::now()));
    }
    Result("d2h_4b_latency", Median(t), "us");
  }
  // 4. 256 MiB host<->device bandwidth from pinned memory.
  if (!latency_only) {
    const size_t bytes = 256ull << 20;
    void* host = nullptr;
    void* dev = nullptr;
    CHECK(cudaMallocHost(&host, bytes));
    CHECK(cudaMalloc(&dev, bytes));
    std::memset(host, 1, bytes);
    CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));  // warm-up
    std::vector<double> h2d, d2h;
    for (int i = 0; i < h2d_iters; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
      auto t1 = Clock::now();
      CHECK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
      auto t2 = Clock::now();
      h2d.push_back(bytes / (Us(t0, t1) * 1e-6) / 1e9);
      d2h.push_back(bytes / (Us(t1, t2) * 1e-6) / 1e9);
      if (h2d_each) std::printf("h2d iteration %d: %.2f GB/s\n", i, h2d.back());
    }
    Result("h2d_256mib_bandwidth", Median(h2d), "GB/s");
    Result("d2h_256mib_bandwidth", Median(d2h), "GB/s");
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(host));
  }
  // 5. Synchronizing an idle stream.
  {
    std::vector<double> t;
    for (int i = 0; i < 5000 / reps; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaStreamSynchronize(s));
      t.push_back(Us(t0, Clock::now()));
    }
    Result("empty_stream_sync", Median(t), "us");
  }
  // 6. Event record + query on an idle stream.
  {
    cudaEvent_t ev;
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    std::vector<double> t;
    for (int i = 0; i < 5000 / reps; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaEventRecord(ev, s));
      cudaError_t q = cudaEventQuery(ev);
      t.push_back(Us(t0, Clock::now()));
      if (q != cudaSuccess && q != cudaErrorNotReady) CHECK(q);
    }
    CHECK(cudaEventSynchronize(ev));
    CHECK(cudaEventDestroy(ev));
    Result("event_record_query", Median(t), "us");
  }
  // 7. Training-like step: 2000 small kernels, then the loss read back.
  if (!latency_only) {
    const int n = small ? 256 : 1 << 16;
    float *x = nullptr, *y = nullptr;
    CHECK(cudaMalloc(&x, n * sizeof(float)));
    CHECK(cudaMalloc(&y, n * sizeof(float)));
    CHECK(cudaMemset(x, 0, n * sizeof(float)));
    CHECK(cudaMemset(y, 0, n * sizeof(float)));
    std::vector<double> t;
    const int steps = quick ? 8 : 30;
    for (int step = 0; step < steps + 3; ++step) {
      auto t0 = Clock::now();
      for (int i = 0; i < 2000; ++i) axpy<<<(n + 255) / 256, 256, 0, s>>>(y, x, 0.5f, n);
      CHECK(cudaGetLastError());
      float loss = 0;
      CHECK(cudaMemcpyAsync(&loss, y, 4, cudaMemcpyDeviceToHost, s));
      CHECK(cudaStreamSynchronize(s));
      if (step >= 3) t.push_back(Us(t0, Clock::now()) / 1000.0);
    }
    Result("train_step_2000_launches", Median(t), "ms");
    CHECK(cudaFree(x));
    CHECK(cudaFree(y));
  }
  CHECK(cudaFree(d));
  CHECK(cudaStreamDestroy(s));
  std::printf("PASS shim_bench\n");
  return 0;
}
