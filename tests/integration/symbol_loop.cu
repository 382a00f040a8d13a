// A training-like loop whose kernel reads a __device__ variable the host
// sets only every 4 steps (cudaMemcpyToSymbol). Each step starts with the
// same input upload, so the agent finds minibatch boundaries. Killed in a
// later minibatch, a replacement must restore the variable as the host last
// set it before that minibatch -- the variable is outside the device memory
// a boundary snapshot restores -- for the final result to be exact.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/integration/symbol_loop_kernels.cuh"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 24;
  const int n = 2048;
  std::vector<int> in(n), expected(n, 0), out(n);
  for (int i = 0; i < n; ++i) in[i] = i % 7 + 1;
  int *d_in = nullptr, *d_acc = nullptr;
  CHECK_CUDA(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&d_acc, n * sizeof(int)));
  CHECK_CUDA(cudaMemset(d_acc, 0, n * sizeof(int)));
  int w = 0;
  for (int step = 0; step < steps; ++step) {
    CHECK_CUDA(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
    if (step % 4 == 0) {
      w = step / 4 + 2;
      CHECK_CUDA(cudaMemcpyToSymbol(sl_weight, &w, sizeof(w)));
    }
    sl_step<<<(n + 255) / 256, 256>>>(d_acc, d_in, n);
    CHECK_CUDA(cudaGetLastError());
    for (int i = 0; i < n; ++i) expected[i] += in[i] * w;
    CHECK_CUDA(cudaDeviceSynchronize());
  }
  CHECK_CUDA(cudaMemcpy(out.data(), d_acc, n * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(out[i] == expected[i], "acc[%d] = %d, expected %d", i, out[i], expected[i]);
  }
  int back = -1;
  CHECK_CUDA(cudaMemcpyFromSymbol(&back, sl_weight, sizeof(back)));
  EXPECT_APP(back == w, "sl_weight = %d, expected %d", back, w);
  CHECK_CUDA(cudaFree(d_in));
  CHECK_CUDA(cudaFree(d_acc));
  std::printf("PASS symbol_loop\n");
  return 0;
}
