// cuBLASLt matmuls checked against a plain CPU reference: fp32 and fp64,
// transposes, leading dimensions larger than the rows, C apart from D and in
// place, strided batches, the epilogues DEFAULT, BIAS, RELU, RELU_BIAS and
// GELU_BIAS, alpha/beta in host and in device memory (the descriptor's
// pointer mode), the algorithm from cublasLtMatmulAlgoGetHeuristic, a cuBLAS
// handle in place of the cuBLASLt handle, the attribute getters, and
// cuBLASLt's own codes for bad calls. Plain CUDA + cuBLAS(Lt) code.
//
//   cublaslt_ops                 every case once; prints "RESULT <case> <checksum>"
//                                per case and "PASS cublaslt_ops"
//   cublaslt_ops --iters N       a training-like loop, descriptors made and
//                                dropped at every matmul as PyTorch does
//                                (Linear forward with bias and ReLU, a weight
//                                update); prints "final checksum <hex>"
//
// Inputs are small multiples of 1/4: every product and partial sum is exact,
// so any summation order gives the same bits and the cases compare bitwise
// with the reference (GELU, a tanh, within a tolerance). Calls that crash
// the native library (null scalars, destroyed descriptors) are made only
// under Revenant (REVENANT_AGENT_SOCKET set), which refuses them.
#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "app_check.h"

#define CHECK_LT(call)                                                                   \
  do {                                                                                   \
    cublasStatus_t check_lt_st_ = (call);                                                \
    if (check_lt_st_ != CUBLAS_STATUS_SUCCESS) {                                         \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %s (%s)\n", __FILE__, __LINE__, #call, \
                   cublasLtGetStatusName(check_lt_st_), cublasLtGetStatusString(check_lt_st_)); \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define EXPECT_LT_STATUS(call, expected)                                                 \
  do {                                                                                   \
    cublasStatus_t expect_st_ = (call);                                                  \
    EXPECT_APP(expect_st_ == (expected), "%s returned %s, expected %s", #call,           \
               cublasLtGetStatusName(expect_st_), cublasLtGetStatusName(expected));      \
  } while (0)

namespace {

uint64_t Checksum(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

template <typename T>
T* ToDevice(const std::vector<T>& v) {
  T* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, v.size() * sizeof(T) + 1));
  CHECK_CUDA(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> v(n);
  CHECK_CUDA(cudaMemcpy(v.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

template <typename T> struct Types;
template <> struct Types<float> {
  static constexpr cudaDataType kType = CUDA_R_32F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_32F;
};
template <> struct Types<double> {
  static constexpr cudaDataType kType = CUDA_R_64F;
  static constexpr cublasComputeType_t kCompute = CUBLAS_COMPUTE_64F;
};

void SetDesc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, int32_t v) {
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
}

// Layout of a rows x cols column-major matrix, batched.
cublasLtMatrixLayout_t Layout(cudaDataType type, int rows, int cols, int ld, int batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t l;
  CHECK_LT(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld));
  if (batch > 1) {
    CHECK_LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                              sizeof(batch)));
    CHECK_LT(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &stride, sizeof(stride)));
  }
  return l;
}

// One heuristic answer for the configuration (the first algorithm).
cublasLtMatmulAlgo_t Heuristic(cublasLtHandle_t h, cublasLtMatmulDesc_t desc,
                               cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                               cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                               uint64_t workspace) {
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int returned = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, d, pref, 1, &result, &returned));
  EXPECT_APP(returned == 1 && result.state == CUBLAS_STATUS_SUCCESS,
             "heuristic returned %d algorithms (state %d)", returned, static_cast<int>(result.state));
  EXPECT_APP(result.workspaceSize <= workspace, "the algorithm needs %zu bytes of workspace",
             result.workspaceSize);
  CHECK_LT(cublasLtMatmulPreferenceDestroy(pref));
  return result.algo;
}

constexpr size_t kWorkspace = 4 << 20;

struct Case {
  const char* tag;
  cublasOperation_t transa, transb;
  int m, n, k;
  int pad;    // leading dimensions exceed the rows by this much
  int batch;  // > 1: strided batches
  uint32_t epilogue;
  bool in_place;  // C is D
};

double Gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }

template <typename T>
void MatmulCase(cublasLtHandle_t h, cudaStream_t stream, void* workspace, const Case& c,
                bool device_scalars) {
  const std::string tag = std::string(c.tag) + (device_scalars ? "/device" : "/host");
  const cudaDataType type = Types<T>::kType;
  const bool ta = c.transa != CUBLAS_OP_N, tb = c.transb != CUBLAS_OP_N;
  const int rows_a = ta ? c.k : c.m, cols_a = ta ? c.m : c.k;
  const int rows_b = tb ? c.n : c.k, cols_b = tb ? c.k : c.n;
  const int lda = rows_a + c.pad, ldb = rows_b + c.pad, ldc = c.m + c.pad;
  const int ldd = c.in_place ? ldc : c.m + c.pad + 1;
  const int64_t sa = int64_t(lda) * cols_a + 3, sb = int64_t(ldb) * cols_b + 1;
  const int64_t sc = int64_t(ldc) * c.n + 2, sd = c.in_place ? sc : int64_t(ldd) * c.n + 5;
  const int64_t sbias = c.m + 1;
  std::vector<T> a(sa * c.batch), b(sb * c.batch), cm(sc * c.batch), bias(sbias * c.batch);
  for (size_t i = 0; i < a.size(); ++i) a[i] = T(int((i * 7) % 9) - 4) * T(0.25);
  for (size_t i = 0; i < b.size(); ++i) b[i] = T(int((i * 5) % 7) - 3) * T(0.25);
  for (size_t i = 0; i < cm.size(); ++i) cm[i] = T(int((i * 3) % 5) - 2) * T(0.5);
  for (size_t i = 0; i < bias.size(); ++i) bias[i] = T(int((i * 11) % 13) - 6) * T(0.25);
  std::vector<T> d0(sd * c.batch, T(99));  // what D holds outside the matrices
  const T alpha = T(0.5), beta = c.in_place ? T(1) : T(-0.75);

  T* da = ToDevice(a);
  T* db = ToDevice(b);
  T* dbias = ToDevice(bias);
  T* dc = ToDevice(c.in_place ? d0 : cm);
  T* dd = c.in_place ? dc : ToDevice(d0);
  if (c.in_place) {
    // C's values inside the matrices, 99 outside (as D's sentinel).
    std::vector<T> init = d0;
    for (int s = 0; s < c.batch; ++s)
      for (int j = 0; j < c.n; ++j)
        for (int i = 0; i < c.m; ++i) init[s * sc + i + j * ldc] = cm[s * sc + i + j * ldc];
    CHECK_CUDA(cudaMemcpy(dc, init.data(), init.size() * sizeof(T), cudaMemcpyHostToDevice));
  }
  T* dscalars = ToDevice(std::vector<T>{alpha, beta});

  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, Types<T>::kCompute, type));
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, c.transa);
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, c.transb);
  if (device_scalars) SetDesc(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &c.epilogue,
                                          sizeof(c.epilogue)));
  const bool has_bias = (c.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0;
  if (has_bias) {
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dbias,
                                            sizeof(dbias)));
    if (c.batch > 1) {
      CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE,
                                              &sbias, sizeof(sbias)));
    }
  }
  // The getters give back what was set.
  int32_t got = -1;
  size_t written = 0;
  CHECK_LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &got, sizeof(got),
                                          &written));
  EXPECT_APP(got == c.transa && written == sizeof(got), "TRANSA reads back as %d (%zu bytes)",
             got, written);
  CHECK_LT(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, nullptr, 0,
                                          &written));
  EXPECT_APP(written == sizeof(int32_t), "the pointer mode needs %zu bytes", written);

  cublasLtMatrixLayout_t la = Layout(type, rows_a, cols_a, lda, c.batch, sa);
  cublasLtMatrixLayout_t lb = Layout(type, rows_b, cols_b, ldb, c.batch, sb);
  cublasLtMatrixLayout_t lc = Layout(type, c.m, c.n, ldc, c.batch, sc);
  cublasLtMatrixLayout_t ld = c.in_place ? lc : Layout(type, c.m, c.n, ldd, c.batch, sd);
  uint64_t rows = 0;
  CHECK_LT(cublasLtMatrixLayoutGetAttribute(la, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, sizeof(rows),
                                            &written));
  EXPECT_APP(rows == uint64_t(rows_a), "A's rows read back as %llu", (unsigned long long)rows);

  const cublasLtMatmulAlgo_t algo = Heuristic(h, desc, la, lb, lc, ld, kWorkspace);
  const T* pa = device_scalars ? dscalars : &alpha;
  const T* pb = device_scalars ? dscalars + 1 : &beta;
  CHECK_LT(cublasLtMatmul(h, desc, pa, da, la, db, lb, pb, dc, lc, dd, ld, &algo, workspace,
                          kWorkspace, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<T> out = ToHost(dd, d0.size());

  // The reference.
  std::vector<T> want = d0;
  if (c.in_place) {
    for (int s = 0; s < c.batch; ++s)
      for (int j = 0; j < c.n; ++j)
        for (int i = 0; i < c.m; ++i) want[s * sc + i + j * ldc] = cm[s * sc + i + j * ldc];
  }
  const bool relu = c.epilogue == CUBLASLT_EPILOGUE_RELU || c.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool gelu = c.epilogue == CUBLASLT_EPILOGUE_GELU || c.epilogue == CUBLASLT_EPILOGUE_GELU_BIAS;
  for (int s = 0; s < c.batch; ++s)
    for (int j = 0; j < c.n; ++j)
      for (int i = 0; i < c.m; ++i) {
        double acc = 0;
        for (int l = 0; l < c.k; ++l) {
          const double av = ta ? a[s * sa + l + i * lda] : a[s * sa + i + l * lda];
          const double bv = tb ? b[s * sb + j + l * ldb] : b[s * sb + l + j * ldb];
          acc += av * bv;
        }
        double v = double(alpha) * acc + double(beta) * double(cm[s * sc + i + j * ldc]);
        if (has_bias) v += double(bias[s * sbias + i]);
        if (relu) v = v > 0 ? v : 0;
        if (gelu) v = Gelu(v);
        want[s * sd + i + j * ldd] = T(v);
      }
  for (size_t i = 0; i < want.size(); ++i) {
    const bool close = gelu ? std::fabs(double(out[i]) - double(want[i])) <= 1e-4 * (1 + std::fabs(double(want[i])))
                            : out[i] == want[i];
    EXPECT_APP(close, "%s: D[%zu] is %.9g, expected %.9g", tag.c_str(), i, double(out[i]),
               double(want[i]));
  }
  std::printf("RESULT %s %016llx\n", tag.c_str(),
              static_cast<unsigned long long>(Checksum(out.data(), out.size() * sizeof(T))));
  CHECK_LT(cublasLtMatrixLayoutDestroy(la));
  CHECK_LT(cublasLtMatrixLayoutDestroy(lb));
  CHECK_LT(cublasLtMatrixLayoutDestroy(lc));
  if (!c.in_place) CHECK_LT(cublasLtMatrixLayoutDestroy(ld));
  CHECK_LT(cublasLtMatmulDescDestroy(desc));
  cudaFree(da); cudaFree(db); cudaFree(dbias); cudaFree(dc); cudaFree(dscalars);
  if (!c.in_place) cudaFree(dd);
}

// cuBLASLt's own answers to calls it refuses; the handle and the agent
// still work after them.
void ErrorCases(cublasLtHandle_t h, cudaStream_t stream, void* workspace) {
  const bool under_revenant = std::getenv("REVENANT_AGENT_SOCKET") != nullptr;
  float one = 1, zero = 0;
  float *dm = nullptr;
  CHECK_CUDA(cudaMalloc(&dm, 3 * 64 * sizeof(float)));
  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t l = Layout(CUDA_R_32F, 8, 8, 8, 1, 0);
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  cublasLtMatmulHeuristicResult_t result[4];
  int returned = 0;
  const int32_t op_t = CUBLAS_OP_T;
  const int64_t i64 = 0;

  // A null handle.
  EXPECT_LT_STATUS(cublasLtMatmul(nullptr, desc, &one, dm, l, dm, l, &zero, dm, l, dm, l, nullptr,
                                  nullptr, 0, stream),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(nullptr, desc, l, l, l, l, pref, 1, result,
                                                  &returned),
                   CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_LT_STATUS(cublasLtDestroy(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtCreate(nullptr), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescCreate(nullptr, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                   CUBLAS_STATUS_INVALID_VALUE);
  // Destroying nothing succeeds.
  EXPECT_LT_STATUS(cublasLtMatmulDescDestroy(nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_LT_STATUS(cublasLtMatrixLayoutDestroy(nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_LT_STATUS(cublasLtMatmulPreferenceDestroy(nullptr), CUBLAS_STATUS_SUCCESS);
  // Attribute ids and sizes.
  EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(desc, static_cast<cublasLtMatmulDescAttributes_t>(9999),
                                                  &op_t, sizeof(op_t)),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, 1),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &dm, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(nullptr, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatrixLayoutSetAttribute(l, static_cast<cublasLtMatrixLayoutAttribute_t>(999),
                                                    &i64, sizeof(i64)),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_LD, &i64, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                        &i64, 4),
                   CUBLAS_STATUS_INVALID_VALUE);
  int32_t v = 0;
  size_t written = 77;
  EXPECT_LT_STATUS(cublasLtMatmulDescGetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &v, 2, &written),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatmulDescGetAttribute(desc, static_cast<cublasLtMatmulDescAttributes_t>(9999),
                                                  &v, 4, &written),
                   CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_LT_STATUS(cublasLtMatrixLayoutGetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ROWS, &v, 4, &written),
                   CUBLAS_STATUS_INVALID_VALUE);
  // The heuristic: no algorithm asked for; layouts that do not fit; types
  // that do not go together.
  EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 0, result, &returned),
                   CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayout_t short_ld = Layout(CUDA_R_32F, 8, 8, 4, 1, 0);
  EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, desc, short_ld, l, l, l, pref, 1, result, &returned),
                   CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayout_t other_rows = Layout(CUDA_R_32F, 4, 8, 8, 1, 0);
  EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, desc, other_rows, l, l, l, pref, 1, result, &returned),
                   CUBLAS_STATUS_INVALID_VALUE);
  cublasLtMatrixLayout_t fp64 = Layout(CUDA_R_64F, 8, 8, 8, 1, 0);
  EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, desc, fp64, l, l, l, pref, 1, result, &returned),
                   CUBLAS_STATUS_NOT_SUPPORTED);
  // The matmul: a workspace size without a workspace; a bias epilogue
  // without a bias.
  EXPECT_LT_STATUS(cublasLtMatmul(h, desc, &one, dm, l, dm, l, &zero, dm, l, dm, l, nullptr, nullptr,
                                  1 << 20, stream),
                   CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t bias_epilogue = CUBLASLT_EPILOGUE_BIAS;
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &bias_epilogue,
                                          sizeof(bias_epilogue)));
  EXPECT_LT_STATUS(cublasLtMatmul(h, desc, &one, dm, l, dm, l, &zero, dm, l, dm, l, nullptr, nullptr,
                                  0, stream),
                   CUBLAS_STATUS_INVALID_VALUE);
  const uint32_t default_epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &default_epilogue,
                                          sizeof(default_epilogue)));
  // Less workspace than an algorithm needs (a long k: split-K algorithms
  // need one), when the heuristic offers one that needs any.
  {
    const int m = 64, k = 8192;
    cublasLtMatrixLayout_t wa = Layout(CUDA_R_32F, m, k, m, 1, 0);
    cublasLtMatrixLayout_t wb = Layout(CUDA_R_32F, k, m, k, 1, 0);
    cublasLtMatrixLayout_t wc = Layout(CUDA_R_32F, m, m, m, 1, 0);
    float *A = nullptr, *B = nullptr, *C = nullptr;
    CHECK_CUDA(cudaMalloc(&A, size_t(m) * k * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&B, size_t(m) * k * sizeof(float)));
    CHECK_CUDA(cudaMalloc(&C, size_t(m) * m * sizeof(float)));
    CHECK_CUDA(cudaMemset(A, 0, size_t(m) * k * sizeof(float)));
    CHECK_CUDA(cudaMemset(B, 0, size_t(m) * k * sizeof(float)));
    const uint64_t max_workspace = kWorkspace;
    CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                  &max_workspace, sizeof(max_workspace)));
    CHECK_LT(cublasLtMatmulAlgoGetHeuristic(h, desc, wa, wb, wc, wc, pref, 4, result, &returned));
    int needing = -1;
    for (int i = 0; i < returned; ++i)
      if (result[i].state == CUBLAS_STATUS_SUCCESS && result[i].workspaceSize > 0) needing = i;
    if (needing >= 0) {
      const size_t need = result[needing].workspaceSize;
      EXPECT_LT_STATUS(cublasLtMatmul(h, desc, &one, A, wa, B, wb, &zero, C, wc, C, wc,
                                      &result[needing].algo, workspace, need - 1, stream),
                       CUBLAS_STATUS_INVALID_VALUE);
      CHECK_LT(cublasLtMatmul(h, desc, &one, A, wa, B, wb, &zero, C, wc, C, wc, &result[needing].algo,
                              workspace, need, stream));
      std::printf("workspace case: an algorithm needing %zu bytes refused %zu\n", need, need - 1);
    } else {
      std::printf("workspace case not run: none of %d algorithms needs a workspace\n", returned);
    }
    CHECK_CUDA(cudaStreamSynchronize(stream));
    cudaFree(A); cudaFree(B); cudaFree(C);
    CHECK_LT(cublasLtMatrixLayoutDestroy(wa));
    CHECK_LT(cublasLtMatrixLayoutDestroy(wb));
    CHECK_LT(cublasLtMatrixLayoutDestroy(wc));
  }
  // What only Revenant answers: the native library crashes on these.
  if (under_revenant) {
    EXPECT_LT_STATUS(cublasLtMatmul(h, desc, nullptr, dm, l, dm, l, &zero, dm, l, dm, l, nullptr,
                                    nullptr, 0, stream),
                     CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, desc, l, l, l, l, pref, 1, result, nullptr),
                     CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT_STATUS(cublasLtMatmulAlgoGetHeuristic(h, nullptr, l, l, l, l, pref, 1, result, &returned),
                     CUBLAS_STATUS_INVALID_VALUE);
    cublasLtMatmulDesc_t gone;
    CHECK_LT(cublasLtMatmulDescCreate(&gone, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    CHECK_LT(cublasLtMatmulDescDestroy(gone));
    EXPECT_LT_STATUS(cublasLtMatmul(h, gone, &one, dm, l, dm, l, &zero, dm, l, dm, l, nullptr, nullptr,
                                    0, stream),
                     CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(gone, CUBLASLT_MATMUL_DESC_TRANSA, &op_t, 4),
                     CUBLAS_STATUS_INVALID_VALUE);
    EXPECT_LT_STATUS(cublasLtMatmulDescDestroy(gone), CUBLAS_STATUS_INVALID_VALUE);
    cublasLtHandle_t gone_handle;
    CHECK_LT(cublasLtCreate(&gone_handle));
    CHECK_LT(cublasLtDestroy(gone_handle));
    EXPECT_LT_STATUS(cublasLtMatmul(gone_handle, desc, &one, dm, l, dm, l, &zero, dm, l, dm, l,
                                    nullptr, nullptr, 0, stream),
                     CUBLAS_STATUS_NOT_INITIALIZED);
    const int32_t vector_mode = CUBLASLT_POINTER_MODE_DEVICE_VECTOR;
    EXPECT_LT_STATUS(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE,
                                                    &vector_mode, sizeof(vector_mode)),
                     CUBLAS_STATUS_NOT_SUPPORTED);
    std::printf("revenant-only error cases ok\n");
  }
  // Everything still works: an 8x8 identity times a matrix.
  std::vector<float> eye(64, 0.0f), x(64);
  for (int i = 0; i < 8; ++i) eye[i * 9] = 1;
  for (int i = 0; i < 64; ++i) x[i] = float(i) * 0.25f;
  CHECK_CUDA(cudaMemcpy(dm, eye.data(), 64 * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dm + 64, x.data(), 64 * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_LT(cublasLtMatmul(h, desc, &one, dm, l, dm + 64, l, &zero, dm + 128, l, dm + 128, l, nullptr,
                          nullptr, 0, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<float> y = ToHost(dm + 128, 64);
  EXPECT_APP(y == x, "the matmul after the refused calls is wrong");
  for (cublasLtMatrixLayout_t m : {l, short_ld, other_rows, fp64}) CHECK_LT(cublasLtMatrixLayoutDestroy(m));
  CHECK_LT(cublasLtMatmulPreferenceDestroy(pref));
  CHECK_LT(cublasLtMatmulDescDestroy(desc));
  cudaFree(dm);
  std::printf("RESULT errors ok\n");
}

int RunAll() {
  cublasLtHandle_t h;
  CHECK_LT(cublasLtCreate(&h));
  EXPECT_APP(cublasLtGetVersion() / 10000 == CUBLAS_VER_MAJOR, "cuBLASLt version %zu",
             cublasLtGetVersion());
  EXPECT_APP(cublasLtGetCudartVersion() / 1000 == CUDART_VERSION / 1000, "cudart version %zu",
             cublasLtGetCudartVersion());
  EXPECT_APP(std::strcmp(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED") == 0,
             "status name %s", cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspace));
  const Case cases[] = {
      {"s_nn", CUBLAS_OP_N, CUBLAS_OP_N, 5, 4, 3, 0, 1, CUBLASLT_EPILOGUE_DEFAULT, false},
      {"s_tt_padded", CUBLAS_OP_T, CUBLAS_OP_T, 6, 5, 7, 2, 1, CUBLASLT_EPILOGUE_DEFAULT, false},
      {"s_nt_bias", CUBLAS_OP_N, CUBLAS_OP_T, 7, 6, 5, 1, 1, CUBLASLT_EPILOGUE_BIAS, false},
      {"s_tn_relu", CUBLAS_OP_T, CUBLAS_OP_N, 6, 6, 4, 0, 1, CUBLASLT_EPILOGUE_RELU, false},
      {"s_nn_relu_bias", CUBLAS_OP_N, CUBLAS_OP_N, 8, 3, 6, 3, 1, CUBLASLT_EPILOGUE_RELU_BIAS, false},
      {"s_nn_gelu_bias", CUBLAS_OP_N, CUBLAS_OP_N, 5, 5, 5, 0, 1, CUBLASLT_EPILOGUE_GELU_BIAS, false},
      {"s_nt_in_place", CUBLAS_OP_N, CUBLAS_OP_T, 4, 6, 3, 1, 1, CUBLASLT_EPILOGUE_DEFAULT, true},
      {"s_strided_batched_bias", CUBLAS_OP_T, CUBLAS_OP_N, 5, 4, 6, 1, 3, CUBLASLT_EPILOGUE_RELU_BIAS, false},
  };
  for (int device = 0; device < 2; ++device) {
    for (const Case& c : cases) MatmulCase<float>(h, stream, workspace, c, device);
    Case d = cases[1];
    d.tag = "d_tt_padded";
    MatmulCase<double>(h, stream, workspace, d, device);
    d = cases[7];
    d.tag = "d_strided_batched_bias";
    MatmulCase<double>(h, stream, workspace, d, device);
    d = cases[6];
    d.tag = "d_nt_in_place";
    MatmulCase<double>(h, stream, workspace, d, device);
  }
  // A cuBLAS handle where cuBLASLt takes its own (cuBLAS documents the cast;
  // PyTorch passes its cuBLAS handle).
  {
    cublasHandle_t blas;
    EXPECT_APP(cublasCreate_v2(&blas) == CUBLAS_STATUS_SUCCESS, "cublasCreate_v2 failed");
    Case c = cases[4];
    c.tag = "s_nn_relu_bias_on_a_cublas_handle";
    MatmulCase<float>(reinterpret_cast<cublasLtHandle_t>(blas), stream, workspace, c, false);
    EXPECT_APP(cublasDestroy_v2(blas) == CUBLAS_STATUS_SUCCESS, "cublasDestroy_v2 failed");
  }
  ErrorCases(h, stream, workspace);
  CHECK_LT(cublasLtDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaFree(workspace));
  std::printf("PASS cublaslt_ops\n");
  return 0;
}

// D = act(W X + b) through cuBLASLt with descriptors made for this call and
// dropped after it, as PyTorch's addmm does.
void LinearLt(cublasLtHandle_t h, cudaStream_t stream, void* workspace, cublasOperation_t ta,
              cublasOperation_t tb, int m, int n, int k, const float* alpha, const float* w,
              int ldw, const float* x, int ldx, const float* beta, float* y, uint32_t epilogue,
              const float* bias, bool device_scalars) {
  cublasLtMatmulDesc_t desc;
  CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  SetDesc(desc, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  if (device_scalars) SetDesc(desc, CUBLASLT_MATMUL_DESC_POINTER_MODE, CUBLASLT_POINTER_MODE_DEVICE);
  CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                          sizeof(epilogue)));
  if (bias != nullptr) {
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias)));
  }
  cublasLtMatrixLayout_t la = Layout(CUDA_R_32F, ta == CUBLAS_OP_N ? m : k,
                                     ta == CUBLAS_OP_N ? k : m, ldw, 1, 0);
  cublasLtMatrixLayout_t lb = Layout(CUDA_R_32F, tb == CUBLAS_OP_N ? k : n,
                                     tb == CUBLAS_OP_N ? n : k, ldx, 1, 0);
  cublasLtMatrixLayout_t lc = Layout(CUDA_R_32F, m, n, m, 1, 0);
  const cublasLtMatmulAlgo_t algo = Heuristic(h, desc, la, lb, lc, lc, kWorkspace);
  CHECK_LT(cublasLtMatmul(h, desc, alpha, w, la, x, lb, beta, y, lc, y, lc, &algo, workspace,
                          kWorkspace, stream));
  CHECK_LT(cublasLtMatrixLayoutDestroy(la));
  CHECK_LT(cublasLtMatrixLayoutDestroy(lb));
  CHECK_LT(cublasLtMatrixLayoutDestroy(lc));
  CHECK_LT(cublasLtMatmulDescDestroy(desc));
}

// A training-like loop: per iteration an input copy, a forward layer
// H = relu(W X + b) (host scalars), a weight update W -= 1e-3 H X^T (device
// scalars) and a loss read back.
int RunLoop(int iters) {
  const int d = 48, batch = 32;
  cublasLtHandle_t h;
  CHECK_LT(cublasLtCreate(&h));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, kWorkspace));
  std::vector<float> w(d * d), bias(d);
  for (size_t i = 0; i < w.size(); ++i) w[i] = ((i * 37) % 11 == 0 ? 1.0f : 0.0f) + 0.01f * ((i % 7) - 3.0f);
  for (int i = 0; i < d; ++i) bias[i] = 0.05f * ((i % 5) - 2);
  float* dw = ToDevice(w);
  float* dbias = ToDevice(bias);
  float *dx, *dh;
  CHECK_CUDA(cudaMalloc(&dx, d * batch * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dh, d * batch * sizeof(float)));
  float* dscalars = ToDevice(std::vector<float>{-1e-3f, 1.0f});
  std::vector<float> ref_w = w, x(d * batch);
  double last_loss = 0, ref_loss = 0;
  for (int it = 0; it < iters; ++it) {
    for (int i = 0; i < d * batch; ++i) x[i] = std::sin(0.1f * (i % 97) + 0.37f * it);
    CHECK_CUDA(cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    const float one = 1, zero = 0;
    LinearLt(h, stream, workspace, CUBLAS_OP_N, CUBLAS_OP_N, d, batch, d, &one, dw, d, dx, d, &zero, dh,
             CUBLASLT_EPILOGUE_RELU_BIAS, dbias, false);
    LinearLt(h, stream, workspace, CUBLAS_OP_N, CUBLAS_OP_T, d, d, batch, dscalars, dh, d, dx, d,
             dscalars + 1, dw, CUBLASLT_EPILOGUE_DEFAULT, nullptr, true);
    std::vector<float> hv(d * batch);
    CHECK_CUDA(cudaMemcpyAsync(hv.data(), dh, hv.size() * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    last_loss = 0;
    for (float v : hv) last_loss += double(v) * v;

    // The CPU reference of the same step.
    std::vector<float> hs(d * batch);
    for (int j = 0; j < batch; ++j)
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int l = 0; l < d; ++l) acc += double(ref_w[i + l * d]) * x[l + j * d];
        const float v = static_cast<float>(acc) + bias[i];
        hs[i + j * d] = v > 0 ? v : 0;
      }
    ref_loss = 0;
    for (float v : hs) ref_loss += double(v) * v;
    for (int j = 0; j < d; ++j)
      for (int i = 0; i < d; ++i) {
        double acc = 0;
        for (int l = 0; l < batch; ++l) acc += double(hs[i + l * d]) * x[j + l * d];
        ref_w[i + j * d] += static_cast<float>(-1e-3 * acc);
      }
  }
  std::vector<float> final_w = ToHost(dw, w.size());
  double worst = 0;
  for (size_t i = 0; i < w.size(); ++i)
    worst = std::fmax(worst, std::fabs(final_w[i] - ref_w[i]) / (std::fabs(ref_w[i]) + 1e-2));
  EXPECT_APP(worst < 1e-3, "weights differ from the CPU reference by %g (relative)", worst);
  EXPECT_APP(std::fabs(last_loss - ref_loss) <= 1e-3 * std::fabs(ref_loss) + 1e-3,
             "loss %g, reference %g", last_loss, ref_loss);
  std::printf("loss %.6g (reference %.6g) after %d iterations\n", last_loss, ref_loss, iters);
  std::printf("final checksum %016llx\n",
              static_cast<unsigned long long>(Checksum(final_w.data(), final_w.size() * sizeof(float))));
  CHECK_LT(cublasLtDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("PASS cublaslt_ops\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 3 && std::strcmp(argv[1], "--iters") == 0) return RunLoop(std::atoi(argv[2]));
  EXPECT_APP(argc == 1, "usage: cublaslt_ops [--iters N]");
  return RunAll();
}
