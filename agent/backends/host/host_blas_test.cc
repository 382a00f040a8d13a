// The cuBLAS rows of the host backend (host_blas.cc): OpenBLAS results, stream
// order, the two pointer modes' timing, refusals and cuBLAS's error codes.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <vector>

#include "agent/backends/host/host_backend.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

class Gate {
 public:
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [this] { return open_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

class HostBlasTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(BackendOptions());
    ASSERT_TRUE(b.ok()) << b.status();
    b_ = std::move(*b);
    ASSERT_EQ(b_->cublasCreate_v2(&h_), CUBLAS_STATUS_SUCCESS);
  }
  // Device memory of the host backend is plain memory of this process.
  float* Floats(std::vector<float> values) {
    void* p = nullptr;
    EXPECT_EQ(b_->cudaMalloc(&p, values.size() * sizeof(float)), cudaSuccess);
    std::memcpy(p, values.data(), values.size() * sizeof(float));
    return static_cast<float*>(p);
  }

  std::unique_ptr<HostBackend> b_;
  cublasHandle_t h_ = nullptr;
};

TEST_F(HostBlasTest, SgemmIsColumnMajorAndTransposes) {
  // A = [1 3; 2 4] (column-major), B = [5 7; 6 8].
  float* a = Floats({1, 2, 3, 4});
  float* b = Floats({5, 6, 7, 8});
  float* c = Floats({1, 1, 1, 1});
  const float alpha = 1, beta = 2;
  ASSERT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &alpha, a, 2, b, 2, &beta, c, 2),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  // A B = [23 31; 34 46], + 2.
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{25, 36, 33, 48}));
  ASSERT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_T, CUBLAS_OP_N, 2, 2, 2, &alpha, a, 2, b, 2, &beta, c, 2),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  // A^T B = [17 23; 39 53], + 2 * previous.
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{67, 111, 89, 149}));
}

TEST_F(HostBlasTest, RunsInStreamOrderAndReadsScalarsByPointerMode) {
  cudaStream_t s = nullptr;
  ASSERT_EQ(b_->cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(b_->cublasSetStream_v2(h_, s), CUBLAS_STATUS_SUCCESS);
  float* x = Floats({1, 2, 3});
  float* result = Floats({0});
  float* scalars = Floats({1, 0});  // device alpha, beta
  float* y = Floats({0, 0, 0});
  float* z = Floats({0, 0, 0});
  Gate gate;
  ASSERT_EQ(b_->EnqueueHostCallback(s, [&] { gate.Wait(); }), cudaSuccess);
  // Host pointer mode: alpha is read at the call.
  float host_alpha = 2, host_beta = 0;
  ASSERT_EQ(b_->cublasSgemv_v2(h_, CUBLAS_OP_N, 3, 1, &host_alpha, x, 3, x, 1, &host_beta, y, 1),
            CUBLAS_STATUS_SUCCESS);
  host_alpha = 100;
  // Device pointer mode: alpha is read when the operation runs.
  ASSERT_EQ(b_->cublasSetPointerMode_v2(h_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasSdot_v2(h_, 3, x, 1, x, 1, result), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasSgemv_v2(h_, CUBLAS_OP_N, 3, 1, scalars, x, 3, x, 1, scalars + 1, z, 1),
            CUBLAS_STATUS_SUCCESS);
  scalars[0] = 3;
  EXPECT_EQ(y[0], 0) << "ran before the stream's earlier work";
  EXPECT_EQ(*result, 0) << "ran before the stream's earlier work";
  gate.Open();
  ASSERT_EQ(b_->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(std::vector<float>(y, y + 3), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(*result, 14);
  EXPECT_EQ(std::vector<float>(z, z + 3), (std::vector<float>{3, 6, 9}));
  cudaStream_t got = nullptr;
  ASSERT_EQ(b_->cublasGetStream_v2(h_, &got), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(got, s);
}

TEST_F(HostBlasTest, HostResultIsCompleteWhenTheCallReturns) {
  float* x = Floats({1, 2, 3, 4});
  float result = -1;
  ASSERT_EQ(b_->cublasSdot_v2(h_, 4, x, 1, x, 1, &result), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(result, 30);
  ASSERT_EQ(b_->cublasSdot_v2(h_, 0, x, 1, x, 1, &result), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(result, 0) << "cuBLAS gives 0 for n <= 0";
}

TEST_F(HostBlasTest, GemmExRunsFp32AndFp64AndRefusesTheRest) {
  float* a = Floats({1, 2, 3, 4});
  float* c = Floats({0, 0, 0, 0});
  const float one = 1, zero = 0;
  EXPECT_EQ(b_->cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, CUDA_R_32F, 2, a, CUDA_R_32F,
                             2, &zero, c, CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{7, 10, 15, 22}));
  EXPECT_EQ(b_->cublasGemmEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, CUDA_R_16F, 2, a, CUDA_R_16F,
                             2, &zero, c, CUDA_R_16F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(b_->cublasGemmStridedBatchedEx(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, CUDA_R_32F, 2,
                                           0, a, CUDA_R_32F, 2, 0, &zero, c, CUDA_R_32F, 2, 0, 1,
                                           CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(HostBlasTest, BadCallsGetCublasCodesAndNeverTouchMemory) {
  float* a = Floats({1, 2, 3, 4});
  const float one = 1;
  // Sizes, operations, leading dimensions, modes.
  EXPECT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, -1, 2, 2, &one, a, 2, a, 2, &one, a, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasSgemm_v2(h_, static_cast<cublasOperation_t>(9), CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a,
                               2, &one, a, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 1, a, 2, &one, a, 2),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasSetPointerMode_v2(h_, static_cast<cublasPointerMode_t>(3)),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasSetMathMode(h_, static_cast<cublasMath_t>(77)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasSetStream_v2(h_, reinterpret_cast<cudaStream_t>(0x1234)),
            CUBLAS_STATUS_INVALID_VALUE);
  // Memory that is not the device's: refused before anything runs.
  std::vector<float> host(16);
  EXPECT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, host.data(), 2, a, 2, &one, a,
                               2),
            CUBLAS_STATUS_EXECUTION_FAILED);
  EXPECT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, 64, 64, 64, &one, a, 64, a, 64, &one, a, 64),
            CUBLAS_STATUS_EXECUTION_FAILED)
      << "A spans far beyond its allocation";
  // Misaligned arrays and a misaligned device-mode result (the dispatch
  // fuzzer's regression_blas_misaligned_result): refused, nothing written.
  float* b = Floats({1, 2, 3, 4, 5, 6, 7, 8});
  const float* odd = reinterpret_cast<const float*>(reinterpret_cast<const char*>(b) + 1);
  EXPECT_EQ(b_->cublasSdot_v2(h_, 2, odd, 1, b, 1, &host[0]), CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(b_->cublasSetPointerMode_v2(h_, CUBLAS_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasSdot_v2(h_, 2, b, 1, b, 1, const_cast<float*>(odd)),
            CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(b_->cublasSetPointerMode_v2(h_, CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(b, b + 8), (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}));
  // Strides whose extent overflows 64 bits.
  EXPECT_EQ(b_->cublasSgemmStridedBatched(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2,
                                          1ll << 62, a, 2, 0, &one, a, 2, 0, 1 << 20),
            CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(a, a + 4), (std::vector<float>{1, 2, 3, 4}));
  // A destroyed handle.
  ASSERT_EQ(b_->cublasDestroy_v2(h_), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasSgemm_v2(h_, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a, 2, a, 2, &one, a, 2),
            CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(b_->cublasSetStream_v2(h_, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(b_->cublasDestroy_v2(h_), CUBLAS_STATUS_NOT_INITIALIZED);
  int version = 0;
  EXPECT_EQ(b_->cublasGetVersion_v2(nullptr, &version), CUBLAS_STATUS_NOT_INITIALIZED);
}

}  // namespace
}  // namespace host
}  // namespace agent
}  // namespace revenant
