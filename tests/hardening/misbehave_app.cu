// A well-behaved application for the misbehaving-client test, in three
// forms (no kernels: it runs on the host backend without a kernel library):
//
//   misbehave_app check        a device round trip (cudaMalloc, cudaMemset,
//                              cudaMemcpy back, verified); "PASS check"
//   misbehave_app hold <ms>    allocates, prints "HOLDING pid=<pid>" and waits <ms>
//                              (its agent serving it), then the round trip
//   misbehave_app callback     a host function on a stream that prints
//                              "IN CALLBACK pid=<pid>", then sleeps 60 s, while
//                              the main thread waits in
//                              cudaStreamSynchronize: killed there, the
//                              process dies while the agent serves it
//   misbehave_app mallocs <n>  <n> small cudaMalloc calls, never freed and
//                              with no minibatch boundary: every one stays
//                              in the journal; "PASS mallocs"
// Exit status 0 on success, 1 on a CUDA error (printed with its name).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL %s: %s (%s)\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
  std::fflush(stdout);
  return false;
}

int RoundTrip() {
  constexpr size_t kBytes = 1 << 20;
  void* d = nullptr;
  if (!Ok(cudaMalloc(&d, kBytes), "cudaMalloc")) return 1;
  if (!Ok(cudaMemset(d, 0x5a, kBytes), "cudaMemset")) return 1;
  std::vector<unsigned char> h(kBytes, 0);
  if (!Ok(cudaMemcpy(h.data(), d, kBytes, cudaMemcpyDeviceToHost), "cudaMemcpy")) return 1;
  for (size_t i = 0; i < kBytes; ++i) {
    if (h[i] != 0x5a) {
      std::printf("FAIL byte %zu is 0x%02x, not 0x5a\n", i, h[i]);
      return 1;
    }
  }
  if (!Ok(cudaFree(d), "cudaFree")) return 1;
  std::printf("PASS check\n");
  return 0;
}

void CUDART_CB SleepInCallback(void*) {
  std::printf("IN CALLBACK pid=%d\n", static_cast<int>(getpid()));
  std::fflush(stdout);
  sleep(60);
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "check";
  if (std::strcmp(mode, "check") == 0) return RoundTrip();
  if (std::strcmp(mode, "hold") == 0 && argc > 2) {
    void* d = nullptr;
    if (!Ok(cudaMalloc(&d, 4096), "cudaMalloc")) return 1;
    std::printf("HOLDING pid=%d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    usleep(static_cast<useconds_t>(std::atoi(argv[2])) * 1000);
    return RoundTrip();
  }
  if (std::strcmp(mode, "callback") == 0) {
    cudaStream_t s;
    if (!Ok(cudaStreamCreate(&s), "cudaStreamCreate")) return 1;
    if (!Ok(cudaLaunchHostFunc(s, SleepInCallback, nullptr), "cudaLaunchHostFunc")) return 1;
    Ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return 1;  // not reached within the test: the process is killed first
  }
  if (std::strcmp(mode, "mallocs") == 0 && argc > 2) {
    const int n = std::atoi(argv[2]);
    for (int i = 0; i < n; ++i) {
      void* d = nullptr;
      if (cudaError_t e = cudaMalloc(&d, 256); e != cudaSuccess) {
        std::printf("FAIL cudaMalloc %d of %d: %s (%s)\n", i + 1, n, cudaGetErrorName(e),
                    cudaGetErrorString(e));
        return 1;
      }
    }
    std::printf("PASS mallocs\n");
    return 0;
  }
  std::fprintf(stderr, "usage: misbehave_app check | hold <ms> | callback | mallocs <n>\n");
  return 2;
}
