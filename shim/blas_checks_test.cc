// The shim's cuBLAS handle registry and checks (shim/blas_checks.h): cuBLAS's
// own codes at the call, nothing forwarded; the pointer mode that decides how
// scalars travel.
#include "shim/blas_checks.h"

#include <cublas_api.h>

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

extern "C" const char* cublasGetStatusName(cublasStatus_t status);
extern "C" const char* cublasGetStatusString(cublasStatus_t status);

namespace revenant {
namespace shim {
namespace {

cublasHandle_t Fake(uintptr_t v) { return reinterpret_cast<cublasHandle_t>(v); }

int32_t Gemm(cublasHandle_t h, int m, int lda, cublasOperation_t ta = CUBLAS_OP_N) {
  const float one = 1;
  return BlasCheckGemm(h, ta, CUBLAS_OP_N, m, 4, 4, lda, 4, m > 1 ? m : 1, 1, &one, &one);
}

TEST(BlasChecks, HandlesMustBeLive) {
  EXPECT_EQ(BlasCheckHandle(nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(Gemm(Fake(0x10), 4, 4), CUBLAS_STATUS_NOT_INITIALIZED);
  BlasHandleCreated(Fake(0x10));
  EXPECT_EQ(Gemm(Fake(0x10), 4, 4), CUBLAS_STATUS_SUCCESS);
  BlasHandleGone(Fake(0x10));
  EXPECT_EQ(Gemm(Fake(0x10), 4, 4), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(BlasCheckPointerMode(Fake(0x10), CUBLAS_POINTER_MODE_HOST), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(BlasChecks, PointerModeDecidesHowScalarsTravel) {
  const cublasHandle_t h = Fake(0x20);
  BlasHandleCreated(h);
  EXPECT_FALSE(BlasDevicePointers(h)) << "a new handle is in host pointer mode";
  BlasNotePointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
  EXPECT_TRUE(BlasDevicePointers(h));
  BlasNotePointerMode(h, CUBLAS_POINTER_MODE_HOST);
  EXPECT_FALSE(BlasDevicePointers(h));
  BlasNotePointerMode(h, CUBLAS_POINTER_MODE_DEVICE);
  BlasHandleGone(h);
  BlasHandleCreated(h);  // the same value again: a new handle, host mode
  EXPECT_FALSE(BlasDevicePointers(h));
  BlasHandleGone(h);
}

TEST(BlasChecks, ArgumentsGetInvalidValue) {
  const cublasHandle_t h = Fake(0x30);
  BlasHandleCreated(h);
  const float one = 1;
  EXPECT_EQ(Gemm(h, -1, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(Gemm(h, 4, 3), CUBLAS_STATUS_INVALID_VALUE) << "lda < m";
  EXPECT_EQ(Gemm(h, 4, 4, CUBLAS_OP_T), CUBLAS_STATUS_SUCCESS) << "op(A) = A^T: lda >= k";
  EXPECT_EQ(Gemm(h, 4, 4, static_cast<cublasOperation_t>(3)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckGemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, -1, &one, &one),
            CUBLAS_STATUS_INVALID_VALUE) << "negative batch count";
  EXPECT_EQ(BlasCheckGemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, 1, nullptr, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, 4, 4, 4, 1, &one, &one,
                            static_cast<cublasComputeType_t>(1234), CUDA_R_32F),
            CUBLAS_STATUS_INVALID_VALUE);
  // cuBLAS 13 accepts a zero increment in gemv (measured on the H200).
  EXPECT_EQ(BlasCheckGemv(h, CUBLAS_OP_N, 4, 4, 4, 0, 1, &one, &one), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(BlasCheckGemv(h, CUBLAS_OP_N, 5, 4, 4, 1, 1, &one, &one), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckGemv(h, CUBLAS_OP_N, 4, 4, 4, -1, 1, &one, &one), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(BlasCheckDot(h, nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(BlasCheckMathMode(h, static_cast<cublasMath_t>(
                                     CUBLAS_PEDANTIC_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(BlasCheckMathMode(h, static_cast<cublasMath_t>(9)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckPointerMode(h, static_cast<cublasPointerMode_t>(2)), CUBLAS_STATUS_INVALID_VALUE);
  // TRSM: A is m x m on the left, n x n on the right; B is m x n.
  EXPECT_EQ(BlasCheckTrsm(h, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 8, 2, 2,
                          8, &one),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(BlasCheckTrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 8, 2, 2,
                          8, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckTrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_FULL, CUBLAS_OP_N, CUBLAS_DIAG_UNIT, 2, 2, 2,
                          2, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(BlasCheckTrsm(h, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_N,
                          static_cast<cublasDiagType_t>(4), 2, 2, 2, 2, &one),
            CUBLAS_STATUS_INVALID_VALUE);
  BlasHandleGone(h);
}

// A handle's math mode is answered by the shim once known: from the agent's
// answer to a read, then from each mode this process set; never for a
// handle it does not hold or after the handle is gone.
TEST(BlasChecks, MathModeIsAnsweredOnceKnown) {
  cublasHandle_t h = reinterpret_cast<cublasHandle_t>(0x7e0a000000000077ull);
  cublasMath_t mode = CUBLAS_PEDANTIC_MATH;
  BlasNoteMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);
  EXPECT_FALSE(BlasAnswerMathMode(h, &mode)) << "a handle this process does not hold";
  BlasHandleCreated(h);
  EXPECT_FALSE(BlasAnswerMathMode(h, &mode)) << "not known before the agent's answer";
  BlasNoteMathMode(h, CUBLAS_DEFAULT_MATH);  // the agent's answer
  ASSERT_TRUE(BlasAnswerMathMode(h, &mode));
  EXPECT_EQ(mode, CUBLAS_DEFAULT_MATH);
  BlasNoteMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH);  // cublasSetMathMode sent
  ASSERT_TRUE(BlasAnswerMathMode(h, &mode));
  EXPECT_EQ(mode, CUBLAS_TF32_TENSOR_OP_MATH);
  EXPECT_FALSE(BlasAnswerMathMode(h, nullptr)) << "a null pointer gets the agent's answer";
  BlasHandleGone(h);
  EXPECT_FALSE(BlasAnswerMathMode(h, &mode)) << "destroyed";
}

TEST(BlasChecks, ScalarSizesFollowTheComputeType) {
  EXPECT_EQ(BlasScalarSize(CUBLAS_COMPUTE_32F, CUDA_R_32F), 4u);
  EXPECT_EQ(BlasScalarSize(CUBLAS_COMPUTE_32F, CUDA_R_16F), 4u);
  EXPECT_EQ(BlasScalarSize(CUBLAS_COMPUTE_16F, CUDA_R_16F), 2u);
  EXPECT_EQ(BlasScalarSize(CUBLAS_COMPUTE_64F, CUDA_R_64F), 8u);
  EXPECT_EQ(BlasScalarSize(CUBLAS_COMPUTE_32F, CUDA_C_32F), 8u) << "complex scalars";
  EXPECT_EQ(BlasScalarSize(static_cast<cublasComputeType_t>(1234), CUDA_R_32F), 0u);
}

TEST(BlasChecks, StatusNamesAndStrings) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED), "CUBLAS_STATUS_NOT_INITIALIZED");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasGetStatusName(static_cast<cublasStatus_t>(999)), "CUBLAS_STATUS_UNKNOWN");
  EXPECT_NE(std::strstr(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), "invalid"), nullptr);
}

}  // namespace
}  // namespace shim
}  // namespace revenant
