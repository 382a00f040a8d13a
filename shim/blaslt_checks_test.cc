// The shim's cuBLASLt registry and checks (shim/blaslt_checks.h): cuBLASLt's
// own codes at the call, nothing forwarded; the matmul descriptor's pointer
// mode and scale type that decide how alpha/beta travel; the heuristic's
// workspace answers.
#include "shim/blaslt_checks.h"

#include "shim/blas_checks.h"

#include <cublasLt.h>

#include <cstdint>
#include <cstring>

#include "gtest/gtest.h"

extern "C" size_t cublasLtGetVersion(void);
extern "C" const char* cublasLtGetStatusName(cublasStatus_t status);

namespace revenant {
namespace shim {
namespace {

using api::HandleKind;

template <typename T>
T Fake(uintptr_t v) {
  return reinterpret_cast<T>(v);
}

void SetInt(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, int32_t v) {
  ASSERT_EQ(LtCheckMatmulDescSetAttribute(d, attr, &v, sizeof(v)), CUBLAS_STATUS_SUCCESS);
  LtNoteMatmulDescAttribute(d, attr, &v, sizeof(v));
}

struct Objects {
  cublasLtHandle_t h = Fake<cublasLtHandle_t>(0x7e0b000000000001);
  cublasLtMatmulDesc_t d = Fake<cublasLtMatmulDesc_t>(0x7e0c000000000001);
  cublasLtMatrixLayout_t l = Fake<cublasLtMatrixLayout_t>(0x7e0d000000000001);
  Objects() {
    LtCreated(HandleKind::kLtHandle, h);
    LtMatmulDescCreated(d, CUDA_R_32F);
    LtCreated(HandleKind::kLtMatrixLayout, l);
  }
  ~Objects() {
    LtGone(HandleKind::kLtHandle, h);
    LtGone(HandleKind::kLtMatmulDesc, d);
    LtGone(HandleKind::kLtMatrixLayout, l);
  }
  int32_t Matmul(const void* alpha, const cublasLtMatmulAlgo_t* algo = nullptr,
                 const void* workspace = nullptr, size_t size = 0) const {
    return LtCheckMatmul(h, d, alpha, l, l, alpha, l, l, algo, workspace, size);
  }
};

TEST(BlasLtChecks, HandlesAndDescriptorsMustBeLive) {
  const float one = 1;
  {
    Objects o;
    EXPECT_EQ(o.Matmul(&one), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(LtCheckMatmul(nullptr, o.d, &one, o.l, o.l, &one, o.l, o.l, nullptr, nullptr, 0),
              CUBLAS_STATUS_NOT_INITIALIZED);
    EXPECT_EQ(LtCheckMatmul(o.h, nullptr, &one, o.l, o.l, &one, o.l, o.l, nullptr, nullptr, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    // A layout where a matmul descriptor belongs, and the other way round.
    EXPECT_EQ(LtCheckMatmul(o.h, reinterpret_cast<cublasLtMatmulDesc_t>(o.l), &one, o.l, o.l, &one,
                            o.l, o.l, nullptr, nullptr, 0),
              CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(LtCheckDescriptor(HandleKind::kLtMatrixLayout, o.d), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(LtCheckDestroyHandle(nullptr), CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_EQ(LtCheckDestroyHandle(o.h), CUBLAS_STATUS_SUCCESS);
  }
  // Destroyed: the handle is not initialized, a descriptor a bad argument.
  Objects gone;
  LtGone(HandleKind::kLtHandle, gone.h);
  EXPECT_EQ(gone.Matmul(&one), CUBLAS_STATUS_NOT_INITIALIZED);
  LtCreated(HandleKind::kLtHandle, gone.h);
  LtGone(HandleKind::kLtMatmulDesc, gone.d);
  EXPECT_EQ(gone.Matmul(&one), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatmulDesc, gone.d, CUBLASLT_MATMUL_DESC_TRANSA, &one, 4),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST(BlasLtChecks, BadMatmulArgumentsAreRefusedAtTheCall) {
  Objects o;
  const float one = 1;
  EXPECT_EQ(o.Matmul(nullptr), CUBLAS_STATUS_INVALID_VALUE) << "null scalars";
  EXPECT_EQ(o.Matmul(&one, nullptr, nullptr, 64), CUBLAS_STATUS_INVALID_VALUE)
      << "a workspace size without a workspace";
  const uint32_t bias = CUBLASLT_EPILOGUE_RELU_BIAS;
  ASSERT_EQ(LtCheckMatmulDescSetAttribute(o.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias, sizeof(bias)), 0);
  LtNoteMatmulDescAttribute(o.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias, sizeof(bias));
  EXPECT_EQ(o.Matmul(&one), CUBLAS_STATUS_INVALID_VALUE) << "a bias epilogue without a bias";
  const uint64_t bias_pointer = 0x200000004000ull;
  LtNoteMatmulDescAttribute(o.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_pointer,
                            sizeof(bias_pointer));
  EXPECT_EQ(o.Matmul(&one), CUBLAS_STATUS_SUCCESS);
  // The heuristic.
  cublasLtMatmulPreference_t pref = Fake<cublasLtMatmulPreference_t>(0x7e0e000000000001);
  cublasLtMatmulHeuristicResult_t results[2];
  int returned = 0;
  EXPECT_EQ(LtCheckHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, pref, 1, results, &returned),
            CUBLAS_STATUS_INVALID_VALUE) << "an unknown preference";
  LtCreated(HandleKind::kLtMatmulPreference, pref);
  EXPECT_EQ(LtCheckHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, pref, 1, results, &returned), 0);
  EXPECT_EQ(LtCheckHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, pref, 0, results, &returned),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, pref, 1, results, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckHeuristic(nullptr, o.d, o.l, o.l, o.l, o.l, pref, 1, results, &returned),
            CUBLAS_STATUS_NOT_INITIALIZED);
  LtGone(HandleKind::kLtMatmulPreference, pref);
}

// The setters are asynchronous: what cuBLASLt checks at them (the attribute
// id, the value's size, a value given), the shim checks with its codes.
TEST(BlasLtChecks, SettersCheckTheAttributeIdAndSize) {
  Objects o;
  const int64_t v = 0;
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatrixLayout, o.l, CUBLASLT_MATRIX_LAYOUT_LD, &v, 8), 0);
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatrixLayout, o.l, CUBLASLT_MATRIX_LAYOUT_LD, &v, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatrixLayout, o.l, 999, &v, 8), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatrixLayout, o.l, CUBLASLT_MATRIX_LAYOUT_LD, nullptr, 8),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckMatmulDescSetAttribute(o.d, CUBLASLT_MATMUL_DESC_TRANSA, &v, 1),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckMatmulDescSetAttribute(o.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &v, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckMatmulDescSetAttribute(o.d, static_cast<cublasLtMatmulDescAttributes_t>(9999), &v, 4),
            CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(LtCheckMatmulDescSetAttribute(o.d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &v, 1), 0);
  // A preference attribute is no layout attribute.
  EXPECT_EQ(LtCheckSetAttribute(HandleKind::kLtMatmulPreference, o.l,
                                CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &v, 8),
            CUBLAS_STATUS_INVALID_VALUE);
}

TEST(BlasLtChecks, PointerModeAndScaleTypeDecideHowScalarsTravel) {
  Objects o;
  EXPECT_FALSE(LtDevicePointers(o.d)) << "a new descriptor is in host pointer mode";
  EXPECT_EQ(LtScalarSize(o.d), sizeof(float));
  SetInt(o.d, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
  EXPECT_TRUE(LtDevicePointers(o.d));
  SetInt(o.d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, CUDA_C_64F);
  EXPECT_EQ(LtScalarSize(o.d), 16u);
  SetInt(o.d, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_HOST);
  EXPECT_FALSE(LtDevicePointers(o.d));
  // The vector modes have no form on the wire: refused, nothing noted.
  const int32_t vector = CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST;
  EXPECT_EQ(LtCheckMatmulDescSetAttribute(o.d, CUBLASLT_MATMUL_DESC_POINTER_MODE, &vector,
                                          sizeof(vector)),
            CUBLAS_STATUS_NOT_SUPPORTED);
  // A scale type the shim cannot size: the matmul is refused, never sent
  // with a guessed size.
  SetInt(o.d, CUBLASLT_MATMUL_DESC_SCALE_TYPE, 12345);
  EXPECT_EQ(LtScalarSize(o.d), 0u);
  const float one = 1;
  EXPECT_EQ(o.Matmul(&one), CUBLAS_STATUS_INVALID_VALUE);
  // A descriptor created with fp64 scalars.
  const cublasLtMatmulDesc_t d64 = Fake<cublasLtMatmulDesc_t>(0x7e0c000000000002);
  LtMatmulDescCreated(d64, CUDA_R_64F);
  EXPECT_EQ(LtScalarSize(d64), sizeof(double));
  LtGone(HandleKind::kLtMatmulDesc, d64);
  EXPECT_EQ(LtScalarSize(d64), 0u);
}

// What the heuristic said an algorithm needs holds for the descriptor and
// layouts it was asked about, until one of them changes or goes.
TEST(BlasLtChecks, TooSmallWorkspacesAreRefusedAtTheCall) {
  Objects o;
  const float one = 1;
  cublasLtMatmulHeuristicResult_t results[2];
  std::memset(results, 0, sizeof(results));
  results[0].algo.data[0] = 11;
  results[0].workspaceSize = 4096;
  results[1].algo.data[0] = 22;
  results[1].workspaceSize = 0;
  const int returned = 2;
  LtNoteHeuristic(o.d, o.l, o.l, o.l, o.l, results, &returned);
  char* workspace = reinterpret_cast<char*>(0x200000008000ull);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4096), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(o.Matmul(&one, &results[1].algo, nullptr, 0), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(o.Matmul(&one, nullptr, nullptr, 0), CUBLAS_STATUS_SUCCESS) << "no algorithm given";
  // Another algorithm than the heuristic's: the agent's library judges.
  cublasLtMatmulAlgo_t other = results[0].algo;
  other.data[1] = 1;
  EXPECT_EQ(o.Matmul(&one, &other, workspace, 1), CUBLAS_STATUS_SUCCESS);
  // A layout setter forgets the answer (the requirement may have changed).
  LtNoteLayoutChanged(o.l);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_SUCCESS);
  LtNoteHeuristic(o.d, o.l, o.l, o.l, o.l, results, &returned);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_INVALID_VALUE);
  SetInt(o.d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_SUCCESS);
}

// A cuBLAS handle passes for a cuBLASLt handle (cuBLAS documents the cast;
// PyTorch passes its cuBLAS handle to cublasLtMatmul), but cublasLtDestroy
// takes only its own.
TEST(BlasLtChecks, ACublasHandleIsACublasLtHandle) {
  const cublasHandle_t blas = Fake<cublasHandle_t>(0x7e0a000000000001);
  const cublasLtHandle_t as_lt = reinterpret_cast<cublasLtHandle_t>(blas);
  EXPECT_EQ(LtCheckHandle(as_lt), CUBLAS_STATUS_NOT_INITIALIZED);
  BlasHandleCreated(blas);
  EXPECT_EQ(LtCheckHandle(as_lt), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(LtCheckDestroyHandle(as_lt), CUBLAS_STATUS_NOT_INITIALIZED);
  BlasHandleGone(blas);
  EXPECT_EQ(LtCheckHandle(as_lt), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST(BlasLtChecks, AnsweredInTheShim) {
  EXPECT_EQ(cublasLtGetVersion(), static_cast<size_t>(CUBLAS_VERSION));
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
}

}  // namespace
}  // namespace shim
}  // namespace revenant
