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
    LtMatmulDescCreated(d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
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
  LtMatmulDescCreated(d64, CUBLAS_COMPUTE_64F, CUDA_R_64F);
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
  LtNoteHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, nullptr, 2, results, &returned);
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
  const int64_t ld = 8;
  LtNoteAttribute(HandleKind::kLtMatrixLayout, o.l, CUBLASLT_MATRIX_LAYOUT_LD, &ld, sizeof(ld));
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_SUCCESS);
  LtNoteHeuristic(o.h, o.d, o.l, o.l, o.l, o.l, nullptr, 2, results, &returned);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_INVALID_VALUE);
  SetInt(o.d, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  EXPECT_EQ(o.Matmul(&one, &results[0].algo, workspace, 4095), CUBLAS_STATUS_SUCCESS);
}

// The heuristic asked again for descriptors of the same contents is
// answered from the agent's earlier answer, whatever the descriptors' handles
// and the order their attributes were set in; any difference in what the
// answer is a function of (a layout's creation or attribute, the
// preference's workspace, the count, the library handle) asks the agent.
TEST(BlasLtChecks, HeuristicAnswersFollowContentsNotHandles) {
  const cublasLtHandle_t h = Fake<cublasLtHandle_t>(0x7e0b000000000101);
  LtCreated(HandleKind::kLtHandle, h);
  struct Set {
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t a, b, c;
    cublasLtMatmulPreference_t p;
  };
  const uint64_t workspace = 1 << 20;
  const int32_t transpose = CUBLAS_OP_T;
  const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  const uint64_t bias = 0x200000001000ull;
  auto make = [&](uint64_t base, bool reversed) {
    Set s{Fake<cublasLtMatmulDesc_t>(base + 1), Fake<cublasLtMatrixLayout_t>(base + 2),
          Fake<cublasLtMatrixLayout_t>(base + 3), Fake<cublasLtMatrixLayout_t>(base + 4),
          Fake<cublasLtMatmulPreference_t>(base + 5)};
    LtMatmulDescCreated(s.d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (reversed) {
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
    } else {
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose));
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue));
      LtNoteMatmulDescAttribute(s.d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    }
    LtLayoutCreated(s.a, CUDA_R_32F, 64, 32, 64);
    LtLayoutCreated(s.b, CUDA_R_32F, 64, 16, 64);
    LtLayoutCreated(s.c, CUDA_R_32F, 32, 16, 32);
    LtCreated(HandleKind::kLtMatmulPreference, s.p);
    LtNoteAttribute(HandleKind::kLtMatmulPreference, s.p, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                    &workspace, sizeof(workspace));
    return s;
  };
  const Set first = make(0x7e00100000000000ull, false);
  cublasLtMatmulHeuristicResult_t agent[2];
  std::memset(agent, 0, sizeof(agent));
  agent[0].algo.data[0] = 41;
  agent[0].workspaceSize = 4096;
  agent[0].wavesCount = 1.5f;
  agent[1].algo.data[0] = 42;
  const int agent_returned = 2;
  cublasLtMatmulHeuristicResult_t got[4];
  int returned = -1;
  EXPECT_FALSE(LtAnswerHeuristic(h, first.d, first.a, first.b, first.c, first.c, first.p, 4, got,
                                 &returned))
      << "nothing answered before the agent did";
  LtNoteHeuristic(h, first.d, first.a, first.b, first.c, first.c, first.p, 4, agent,
                  &agent_returned);

  // Other handles, the same contents (attributes set in another order).
  const Set second = make(0x7e00200000000000ull, true);
  const uint64_t before = LtHeuristicsAnswered();
  std::memset(got, 0xff, sizeof(got));
  ASSERT_TRUE(LtAnswerHeuristic(h, second.d, second.a, second.b, second.c, second.c, second.p, 4,
                                got, &returned));
  EXPECT_EQ(LtHeuristicsAnswered(), before + 1);
  ASSERT_EQ(returned, 2);
  EXPECT_EQ(std::memcmp(got, agent, 2 * sizeof(agent[0])), 0);
  // The answer's workspace needs hold for the new objects too.
  const float one = 1;
  char* ws = reinterpret_cast<char*>(0x200000008000ull);
  EXPECT_EQ(LtCheckMatmul(h, second.d, &one, second.a, second.b, &one, second.c, second.c,
                          &got[0].algo, ws, 4095),
            CUBLAS_STATUS_INVALID_VALUE);

  // Each difference asks the agent.
  EXPECT_FALSE(LtAnswerHeuristic(h, second.d, second.a, second.b, second.c, second.c, second.p, 3,
                                 got, &returned))
      << "another count";
  const cublasLtHandle_t h2 = Fake<cublasLtHandle_t>(0x7e0b000000000102);
  LtCreated(HandleKind::kLtHandle, h2);
  EXPECT_FALSE(LtAnswerHeuristic(h2, second.d, second.a, second.b, second.c, second.c, second.p, 4,
                                 got, &returned))
      << "another library handle";
  EXPECT_FALSE(LtAnswerHeuristic(h, second.d, second.b, second.a, second.c, second.c, second.p, 4,
                                 got, &returned))
      << "layouts swapped";
  const uint64_t smaller = 4096;
  LtNoteAttribute(HandleKind::kLtMatmulPreference, second.p,
                  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &smaller, sizeof(smaller));
  EXPECT_FALSE(LtAnswerHeuristic(h, second.d, second.a, second.b, second.c, second.c, second.p, 4,
                                 got, &returned))
      << "another workspace";
  LtNoteAttribute(HandleKind::kLtMatmulPreference, second.p,
                  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace));
  EXPECT_TRUE(LtAnswerHeuristic(h, second.d, second.a, second.b, second.c, second.c, second.p, 4,
                                got, &returned))
      << "the same workspace again";
  const int64_t padded = 128;
  LtNoteAttribute(HandleKind::kLtMatrixLayout, second.a, CUBLASLT_MATRIX_LAYOUT_LD, &padded,
                  sizeof(padded));
  EXPECT_FALSE(LtAnswerHeuristic(h, second.d, second.a, second.b, second.c, second.c, second.p, 4,
                                 got, &returned))
      << "a layout attribute set";
  const Set third = make(0x7e00300000000000ull, false);
  const int32_t no_transpose = CUBLAS_OP_N;
  LtNoteMatmulDescAttribute(third.d, CUBLASLT_MATMUL_DESC_TRANSA, &no_transpose,
                            sizeof(no_transpose));
  EXPECT_FALSE(LtAnswerHeuristic(h, third.d, third.a, third.b, third.c, third.c, third.p, 4, got,
                                 &returned))
      << "a descriptor attribute of another value";
  const cublasLtMatrixLayout_t other_shape = Fake<cublasLtMatrixLayout_t>(0x7e00400000000001ull);
  LtLayoutCreated(other_shape, CUDA_R_32F, 64, 32, 65);
  EXPECT_FALSE(LtAnswerHeuristic(h, first.d, other_shape, first.b, first.c, first.c, first.p, 4,
                                 got, &returned))
      << "a layout created otherwise";
  LtGone(HandleKind::kLtMatrixLayout, first.b);
  EXPECT_FALSE(LtAnswerHeuristic(h, first.d, first.a, first.b, first.c, first.c, first.p, 4, got,
                                 &returned))
      << "a descriptor destroyed";
}

// Which creations go without waiting: known types, real matrices.
TEST(BlasLtChecks, CreationsOfKnownArgumentsAreAssignedByTheShim) {
  EXPECT_TRUE(LtAssignPreference());
  EXPECT_TRUE(LtAssignMatmulDesc(CUBLAS_COMPUTE_32F, CUDA_R_32F));
  EXPECT_TRUE(LtAssignMatmulDesc(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F));
  EXPECT_TRUE(LtAssignMatmulDesc(CUBLAS_COMPUTE_64F, CUDA_R_64F));
  EXPECT_FALSE(LtAssignMatmulDesc(CUBLAS_COMPUTE_64F, CUDA_R_32F));
  EXPECT_FALSE(LtAssignMatmulDesc(static_cast<cublasComputeType_t>(999), CUDA_R_32F));
  EXPECT_TRUE(LtAssignLayout(CUDA_R_16BF, 64, 32, 64));
  EXPECT_FALSE(LtAssignLayout(CUDA_R_32F, 64, 32, 32)) << "a short leading dimension";
  EXPECT_FALSE(LtAssignLayout(CUDA_R_32F, 0, 32, 32));
  EXPECT_FALSE(LtAssignLayout(static_cast<cudaDataType>(12345), 8, 8, 8));
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
