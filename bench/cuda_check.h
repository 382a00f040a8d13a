// CHECK(call) for the benchmarks: a CUDA runtime call that fails ends the
// program with "FAIL file:line: call returned <error name>" and exit code 1
// (the GPU pack's runner counts a benchmark without its PASS line as FAIL).
#ifndef REVENANT_BENCH_CUDA_CHECK_H_
#define REVENANT_BENCH_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                   \
  do {                                                                                \
    cudaError_t e_ = (call);                                                          \
    if (e_ != cudaSuccess) {                                                          \
      std::printf("FAIL %s:%d: %s returned %s\n", __FILE__, __LINE__, #call,          \
                  cudaGetErrorName(e_));                                              \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

#endif  // REVENANT_BENCH_CUDA_CHECK_H_
