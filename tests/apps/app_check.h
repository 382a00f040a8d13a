// Result checking shared by the Revenant CUDA test programs.
//
//   CHECK_CUDA(cudaMalloc(&p, bytes));        // exits 1 naming the error
//   EXPECT_APP(v == 3, "v is %d", v);         // exits 1 with the message
//   EXPECT_APP(WaitFor([&] { return *flag == 1; }, 10.0), "flag never set");
//
// The programs run natively and under the Revenant shim, so every failure
// must say which call, which line and which error name.
#ifndef REVENANT_TESTS_APPS_APP_CHECK_H_
#define REVENANT_TESTS_APPS_APP_CHECK_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#define CHECK_CUDA(call)                                                        \
  do {                                                                          \
    cudaError_t check_cuda_err_ = (call);                                       \
    if (check_cuda_err_ != cudaSuccess) {                                       \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %s (%s)\n", __FILE__,       \
                   __LINE__, #call, cudaGetErrorName(check_cuda_err_),          \
                   cudaGetErrorString(check_cuda_err_));                        \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

#define EXPECT_APP(cond, ...)                                                   \
  do {                                                                          \
    if (!(cond)) {                                                              \
      std::fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);      \
      std::fprintf(stderr, __VA_ARGS__);                                        \
      std::fprintf(stderr, "\n");                                               \
      std::exit(1);                                                             \
    }                                                                           \
  } while (0)

// Expects `call` to return exactly `expected`.
#define EXPECT_CUDA_ERROR(call, expected)                                       \
  do {                                                                          \
    cudaError_t expect_err_ = (call);                                           \
    EXPECT_APP(expect_err_ == (expected), "%s returned %s, expected %s", #call, \
               cudaGetErrorName(expect_err_), cudaGetErrorName(expected));      \
  } while (0)

// Polls `done` every 100 us until it holds or `seconds` passed. Every wait in
// these programs is bounded so that a lost completion fails instead of hanging.
template <typename Pred>
bool WaitFor(Pred done, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(seconds);
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

#endif  // REVENANT_TESTS_APPS_APP_CHECK_H_
