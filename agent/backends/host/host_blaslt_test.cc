// The cuBLASLt rows of the host backend (host_blaslt.cc): OpenBLAS results
// with the epilogues, C apart from D, batches, the descriptors' attributes,
// the heuristic, and refusals before any memory is touched.
#include <cstdint>
#include <cstring>
#include <vector>

#include "agent/backends/host/host_backend.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

class HostBlasLtTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<HostBackend>> b = HostBackend::Create(BackendOptions());
    ASSERT_TRUE(b.ok()) << b.status();
    b_ = std::move(*b);
    ASSERT_EQ(b_->cublasLtCreate(&h_), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(b_->cublasLtMatmulDescCreate(&d_, CUBLAS_COMPUTE_32F, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&l_, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(b_->cublasLtMatmulPreferenceCreate(&p_), CUBLAS_STATUS_SUCCESS);
  }
  // Device memory of the host backend is plain memory of this process.
  float* Floats(std::vector<float> values) {
    void* p = nullptr;
    EXPECT_EQ(b_->cudaMalloc(&p, values.size() * sizeof(float)), cudaSuccess);
    std::memcpy(p, values.data(), values.size() * sizeof(float));
    return static_cast<float*>(p);
  }
  cublasStatus_t Set(cublasLtMatmulDescAttributes_t attr, int32_t v) {
    return b_->cublasLtMatmulDescSetAttribute(d_, attr, &v, sizeof(v));
  }
  cublasStatus_t Matmul(const void* a, const void* b, const void* c, void* d, const float* alpha,
                        const float* beta) {
    return b_->cublasLtMatmul(h_, d_, alpha, a, l_, b, l_, beta, c, l_, d, l_, nullptr, nullptr, 0,
                              nullptr);
  }

  std::unique_ptr<HostBackend> b_;
  cublasLtHandle_t h_ = nullptr;
  cublasLtMatmulDesc_t d_ = nullptr;
  cublasLtMatrixLayout_t l_ = nullptr;
  cublasLtMatmulPreference_t p_ = nullptr;
};

TEST_F(HostBlasLtTest, MatmulWithBiasAndReluIntoAnotherD) {
  // A = [1 3; 2 4], B = [5 7; 6 8] (column-major): A B = [23 31; 34 46].
  float* a = Floats({1, 2, 3, 4});
  float* b = Floats({5, 6, 7, 8});
  float* c = Floats({1, 1, 1, 1});
  float* d = Floats({9, 9, 9, 9});
  float* bias = Floats({-100, 1});
  const float alpha = 1, beta = 2;
  ASSERT_EQ(Matmul(a, b, c, d, &alpha, &beta), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d, d + 4), (std::vector<float>{25, 36, 33, 48}));
  EXPECT_EQ(std::vector<float>(c, c + 4), (std::vector<float>{1, 1, 1, 1})) << "C is read only";
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_RELU_BIAS), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                               sizeof(bias)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Matmul(a, b, c, d, &alpha, &beta), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  // Row 0 gets -100 (then ReLU: 0), row 1 gets +1.
  EXPECT_EQ(std::vector<float>(d, d + 4), (std::vector<float>{0, 37, 0, 49}));
}

TEST_F(HostBlasLtTest, DeviceScalarsAreReadWhenTheMatmulRuns) {
  float* a = Floats({1, 0, 0, 1});
  float* b = Floats({1, 2, 3, 4});
  float* d = Floats({0, 0, 0, 0});
  float* scalars = Floats({3, 0});
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(b_->DevicePointers(api::HandleKind::kLtMatmulDesc, reinterpret_cast<uint64_t>(d_)));
  ASSERT_EQ(Matmul(a, b, d, d, scalars, scalars + 1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d, d + 4), (std::vector<float>{3, 6, 9, 12}));
}

TEST_F(HostBlasLtTest, AttributesReadBackAndAreCheckedForSize) {
  int32_t v = 0;
  size_t written = 0;
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_T), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatmulDescGetAttribute(d_, CUBLASLT_MATMUL_DESC_TRANSB, &v, sizeof(v), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(v, CUBLAS_OP_T);
  EXPECT_EQ(written, sizeof(v));
  ASSERT_EQ(b_->cublasLtMatmulDescGetAttribute(d_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(void*)) << "size 0 asks for the size";
  EXPECT_EQ(b_->cublasLtMatmulDescGetAttribute(d_, CUBLASLT_MATMUL_DESC_TRANSB, &v, 2, &written),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, CUBLASLT_MATMUL_DESC_TRANSB, &v, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, static_cast<cublasLtMatmulDescAttributes_t>(9999), &v, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  uint64_t rows = 0;
  ASSERT_EQ(b_->cublasLtMatrixLayoutGetAttribute(l_, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows),
                                                 &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(rows, 2u);
  int32_t batch = 0;
  ASSERT_EQ(b_->cublasLtMatrixLayoutGetAttribute(l_, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                                 sizeof(batch), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(batch, 1);
  uint64_t workspace = 1;
  ASSERT_EQ(b_->cublasLtMatmulPreferenceGetAttribute(p_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &workspace, sizeof(workspace), &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(workspace, 0u);
  // Objects of another kind are no descriptors.
  EXPECT_EQ(b_->cublasLtMatmulDescGetAttribute(reinterpret_cast<cublasLtMatmulDesc_t>(l_),
                                               CUBLASLT_MATMUL_DESC_TRANSB, &v, 4, &written),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(HostBlasLtTest, HeuristicOffersOneAlgorithmForWhatRuns) {
  cublasLtMatmulHeuristicResult_t r[3];
  int n = 0;
  ASSERT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, l_, l_, l_, l_, p_, 3, r, &n), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(n, 1);
  EXPECT_EQ(r[0].workspaceSize, 0u);
  EXPECT_EQ(r[0].state, CUBLAS_STATUS_SUCCESS);
  float* a = Floats({1, 0, 0, 1});
  float* d = Floats({0, 0, 0, 0});
  const float one = 1, zero = 0;
  EXPECT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, l_, a, l_, &zero, d, l_, d, l_, &r[0].algo, nullptr, 0,
                               nullptr),
            CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulAlgo_t foreign = r[0].algo;
  foreign.data[0] ^= 1;
  EXPECT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, l_, a, l_, &zero, d, l_, d, l_, &foreign, nullptr, 0,
                               nullptr),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // fp16 layouts, and an fp64 A with fp32 others: not run here.
  cublasLtMatrixLayout_t half, dbl;
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&half, CUDA_R_16F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&dbl, CUDA_R_64F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, half, half, half, half, p_, 1, r, &n),
            CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, dbl, l_, l_, l_, p_, 1, r, &n),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // Unsupported epilogues and unknown values.
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DGELU), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, l_, l_, l_, l_, p_, 1, r, &n),
            CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, 12345), CUBLAS_STATUS_SUCCESS) << "checked at use";
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, l_, l_, l_, l_, p_, 1, r, &n),
            CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT), CUBLAS_STATUS_SUCCESS);
  // Shapes that do not fit, and leading dimensions below the rows.
  cublasLtMatrixLayout_t wide, short_ld;
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&wide, CUDA_R_32F, 2, 3, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&short_ld, CUDA_R_32F, 2, 2, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, wide, l_, l_, l_, p_, 1, r, &n),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, short_ld, l_, l_, l_, p_, 1, r, &n),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(h_, d_, l_, l_, l_, l_, p_, 0, r, &n),
            CUBLAS_STATUS_INVALID_VALUE);
}

// Arguments the host backend cannot run on are refused before anything is
// read or written.
TEST_F(HostBlasLtTest, BadMemoryIsRefusedBeforeItIsTouched) {
  float* a = Floats({1, 2, 3, 4, 5});
  float* d = Floats({7, 7, 7, 7, 7});
  const float one = 1, zero = 0;
  const char* misaligned = reinterpret_cast<const char*>(a) + 1;
  EXPECT_EQ(Matmul(misaligned, a, d, d, &one, &zero), CUBLAS_STATUS_EXECUTION_FAILED);
  float stack[4] = {1, 2, 3, 4};  // not device memory
  EXPECT_EQ(Matmul(a, a, stack, stack, &one, &zero), CUBLAS_STATUS_EXECUTION_FAILED);
  // A bias epilogue without a bias, and a bias outside device memory.
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Matmul(a, a, d, d, &one, &zero), CUBLAS_STATUS_INVALID_VALUE);
  const float* bias = stack;
  ASSERT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Matmul(a, a, d, d, &one, &zero), CUBLAS_STATUS_EXECUTION_FAILED);
  // Device scalars outside device memory.
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_DEFAULT), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Matmul(a, a, d, d, stack, stack), CUBLAS_STATUS_EXECUTION_FAILED);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d, d + 5), (std::vector<float>{7, 7, 7, 7, 7})) << "D was written";
  // In place with another layout for D than C.
  cublasLtMatrixLayout_t padded;
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&padded, CUDA_R_32F, 2, 2, 3), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, l_, a, l_, &zero, d, l_, d, padded, nullptr, nullptr, 0,
                               nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  // Dead objects.
  ASSERT_EQ(b_->cublasLtMatmulDescDestroy(d_), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Matmul(a, a, d, d, &one, &zero), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(b_->cublasLtMatmulDescDestroy(d_), CUBLAS_STATUS_INVALID_VALUE);
  ASSERT_EQ(b_->cublasLtDestroy(h_), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, l_, a, l_, &zero, d, l_, d, l_, nullptr, nullptr, 0,
                               nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

// A cuBLAS handle serves as a cuBLASLt handle, as cuBLAS documents.
TEST_F(HostBlasLtTest, ACublasHandleIsACublasLtHandle) {
  cublasHandle_t blas = nullptr;
  ASSERT_EQ(b_->cublasCreate_v2(&blas), CUBLAS_STATUS_SUCCESS);
  const auto lt = reinterpret_cast<cublasLtHandle_t>(blas);
  float* a = Floats({1, 0, 0, 1});
  float* d = Floats({0, 0, 0, 0});
  const float two = 2, zero = 0;
  ASSERT_EQ(b_->cublasLtMatmul(lt, d_, &two, a, l_, a, l_, &zero, d, l_, d, l_, nullptr, nullptr, 0,
                               nullptr),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d, d + 4), (std::vector<float>{2, 0, 0, 2}));
  cublasLtMatmulHeuristicResult_t r;
  int n = 0;
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(lt, d_, l_, l_, l_, l_, p_, 1, &r, &n), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasDestroy_v2(blas), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(b_->cublasLtMatmulAlgoGetHeuristic(lt, d_, l_, l_, l_, l_, p_, 1, &r, &n),
            CUBLAS_STATUS_NOT_INITIALIZED);
}

// Strided batches: each batch its own A, B, C, D and bias.
TEST_F(HostBlasLtTest, StridedBatchesWithABiasPerBatch) {
  cublasLtMatrixLayout_t batched;
  ASSERT_EQ(b_->cublasLtMatrixLayoutCreate(&batched, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  const int32_t count = 2;
  const int64_t stride = 4;
  ASSERT_EQ(b_->cublasLtMatrixLayoutSetAttribute(batched, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                                 sizeof(count)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatrixLayoutSetAttribute(batched, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                 &stride, sizeof(stride)),
            CUBLAS_STATUS_SUCCESS);
  float* a = Floats({1, 0, 0, 1, 2, 0, 0, 2});  // I, 2I
  float* b = Floats({1, 2, 3, 4, 1, 2, 3, 4});
  float* d = Floats(std::vector<float>(8, 0));
  float* bias = Floats({10, 20, 30, 40});
  const int64_t bias_stride = 2;
  ASSERT_EQ(Set(CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cublasLtMatmulDescSetAttribute(d_, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &bias_stride,
                                               sizeof(bias_stride)),
            CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0;
  ASSERT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, batched, b, batched, &zero, d, batched, d, batched, nullptr,
                               nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(b_->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(std::vector<float>(d, d + 8), (std::vector<float>{11, 22, 13, 24, 32, 44, 36, 48}));
  // Batch counts that differ between the layouts.
  EXPECT_EQ(b_->cublasLtMatmul(h_, d_, &one, a, l_, b, batched, &zero, d, batched, d, batched, nullptr,
                               nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
}

}  // namespace
}  // namespace host
}  // namespace agent
}  // namespace revenant
