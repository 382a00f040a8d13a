// cuBLAS operations checked against a plain CPU reference: GEMM (real and
// complex, transposes, conjugate transposes), strided batched GEMM,
// cublasGemmEx, cublasGemmStridedBatchedEx, cublasSgemmEx, GEMV, dot (dotu,
// dotc) and triangular solves, each with scalars in host memory and in device
// memory (both pointer modes), plus cuBLAS's own error codes for bad calls.
// Plain CUDA + cuBLAS code.
//
//   cublas_ops                 every case once; prints "RESULT <case> <checksum>"
//                              per case and "PASS cublas_ops"
//   cublas_ops --iters N       a training-like loop (an input copy, GEMMs,
//                              GEMV, dot, a loss read back per iteration);
//                              prints "final checksum <hex>"
//
// Inputs are multiples of 1/4 small enough that every product and partial sum
// is exact in fp32: any summation order gives the same bits, so the one-shot
// cases compare bitwise with the reference (the loop, whose values round,
// compares within a relative tolerance and prints its checksum for runs to
// compare bitwise with each other).
#include <cuComplex.h>
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

#define CHECK_CUBLAS(call)                                                               \
  do {                                                                                   \
    cublasStatus_t check_cublas_st_ = (call);                                            \
    if (check_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                     \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %s (%s)\n", __FILE__, __LINE__, #call, \
                   cublasGetStatusName(check_cublas_st_),                                \
                   cublasGetStatusString(check_cublas_st_));                             \
      std::exit(1);                                                                      \
    }                                                                                    \
  } while (0)

#define EXPECT_CUBLAS_STATUS(call, expected)                                             \
  do {                                                                                   \
    cublasStatus_t expect_st_ = (call);                                                  \
    EXPECT_APP(expect_st_ == (expected), "%s returned %s, expected %s", #call,           \
               cublasGetStatusName(expect_st_), cublasGetStatusName(expected));          \
  } while (0)

// Complex arithmetic for the reference (real types need none of it).
inline cuComplex operator+(cuComplex a, cuComplex b) { return cuCaddf(a, b); }
inline cuComplex operator*(cuComplex a, cuComplex b) { return cuCmulf(a, b); }
inline cuComplex& operator+=(cuComplex& a, cuComplex b) { return a = a + b; }
inline cuDoubleComplex operator+(cuDoubleComplex a, cuDoubleComplex b) { return cuCadd(a, b); }
inline cuDoubleComplex operator*(cuDoubleComplex a, cuDoubleComplex b) { return cuCmul(a, b); }
inline cuDoubleComplex& operator+=(cuDoubleComplex& a, cuDoubleComplex b) { return a = a + b; }

namespace {

float Conj(float v) { return v; }
double Conj(double v) { return v; }
cuComplex Conj(cuComplex v) { return cuConjf(v); }
cuDoubleComplex Conj(cuDoubleComplex v) { return cuConj(v); }
// Elements of each type from a small real value (complex: a second part).
template <typename T> T Make(double re, double im = 0);
template <> float Make<float>(double re, double) { return static_cast<float>(re); }
template <> double Make<double>(double re, double) { return re; }
template <> cuComplex Make<cuComplex>(double re, double im) {
  return make_cuComplex(static_cast<float>(re), static_cast<float>(im));
}
template <> cuDoubleComplex Make<cuDoubleComplex>(double re, double im) {
  return make_cuDoubleComplex(re, im);
}
double Real(float v) { return v; }
double Real(double v) { return v; }
double Real(cuComplex v) { return v.x; }
double Real(cuDoubleComplex v) { return v.x; }

// The cuBLAS function of each element type.
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const float* al, const float* a, int lda, const float* b, int ldb, const float* be,
                    float* c, int ldc) {
  return cublasSgemm_v2(h, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const double* al, const double* a, int lda, const double* b, int ldb,
                    const double* be, double* c, int ldc) {
  return cublasDgemm_v2(h, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const cuComplex* al, const cuComplex* a, int lda, const cuComplex* b, int ldb,
                    const cuComplex* be, cuComplex* c, int ldc) {
  return cublasCgemm_v2(h, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
cublasStatus_t Gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const cuDoubleComplex* al, const cuDoubleComplex* a, int lda,
                    const cuDoubleComplex* b, int ldb, const cuDoubleComplex* be, cuDoubleComplex* c,
                    int ldc) {
  return cublasZgemm_v2(h, ta, tb, m, n, k, al, a, lda, b, ldb, be, c, ldc);
}
#define REVENANT_APP_BATCHED(T, fn)                                                               \
  cublasStatus_t GemmBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, \
                             int n, int k, const T* al, const T* a, int lda, long long sa,        \
                             const T* b, int ldb, long long sb, const T* be, T* c, int ldc,       \
                             long long sc, int batch) {                                           \
    return fn(h, ta, tb, m, n, k, al, a, lda, sa, b, ldb, sb, be, c, ldc, sc, batch);             \
  }
REVENANT_APP_BATCHED(float, cublasSgemmStridedBatched)
REVENANT_APP_BATCHED(double, cublasDgemmStridedBatched)
REVENANT_APP_BATCHED(cuComplex, cublasCgemmStridedBatched)
REVENANT_APP_BATCHED(cuDoubleComplex, cublasZgemmStridedBatched)
#undef REVENANT_APP_BATCHED
#define REVENANT_APP_GEMV(T, fn)                                                                  \
  cublasStatus_t Gemv(cublasHandle_t h, cublasOperation_t t, int m, int n, const T* al, const T* a, \
                      int lda, const T* x, int incx, const T* be, T* y, int incy) {               \
    return fn(h, t, m, n, al, a, lda, x, incx, be, y, incy);                                      \
  }
REVENANT_APP_GEMV(float, cublasSgemv_v2)
REVENANT_APP_GEMV(double, cublasDgemv_v2)
REVENANT_APP_GEMV(cuComplex, cublasCgemv_v2)
REVENANT_APP_GEMV(cuDoubleComplex, cublasZgemv_v2)
#undef REVENANT_APP_GEMV
#define REVENANT_APP_TRSM(T, fn)                                                                  \
  cublasStatus_t Trsm(cublasHandle_t h, cublasSideMode_t side, cublasFillMode_t uplo,              \
                      cublasOperation_t t, cublasDiagType_t diag, int m, int n, const T* al,       \
                      const T* a, int lda, T* b, int ldb) {                                        \
    return fn(h, side, uplo, t, diag, m, n, al, a, lda, b, ldb);                                   \
  }
REVENANT_APP_TRSM(float, cublasStrsm_v2)
REVENANT_APP_TRSM(double, cublasDtrsm_v2)
REVENANT_APP_TRSM(cuComplex, cublasCtrsm_v2)
REVENANT_APP_TRSM(cuDoubleComplex, cublasZtrsm_v2)
#undef REVENANT_APP_TRSM
cublasStatus_t Dot(cublasHandle_t h, int n, const float* x, int incx, const float* y, int incy,
                   float* r, bool) {
  return cublasSdot_v2(h, n, x, incx, y, incy, r);
}
cublasStatus_t Dot(cublasHandle_t h, int n, const double* x, int incx, const double* y, int incy,
                   double* r, bool) {
  return cublasDdot_v2(h, n, x, incx, y, incy, r);
}
cublasStatus_t Dot(cublasHandle_t h, int n, const cuComplex* x, int incx, const cuComplex* y,
                   int incy, cuComplex* r, bool conj) {
  return (conj ? cublasCdotc_v2 : cublasCdotu_v2)(h, n, x, incx, y, incy, r);
}
cublasStatus_t Dot(cublasHandle_t h, int n, const cuDoubleComplex* x, int incx,
                   const cuDoubleComplex* y, int incy, cuDoubleComplex* r, bool conj) {
  return (conj ? cublasZdotc_v2 : cublasZdotu_v2)(h, n, x, incx, y, incy, r);
}

// FNV-1a over the bytes of a result.
uint64_t Checksum(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <typename T>
std::vector<T> Pattern(size_t n, int seed) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const int re = static_cast<int>((i * 7 + seed * 13) % 13) - 6;
    const int im = static_cast<int>((i * 5 + seed * 3) % 11) - 5;
    v[i] = Make<T>(re / 4.0, im / 4.0);
  }
  return v;
}

template <typename T>
T* ToDevice(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, h.size() * sizeof(T)));
  CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> h(n);
  CHECK_CUDA(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// op(X)(i, j) of a column-major matrix.
template <typename T>
T At(const std::vector<T>& x, size_t offset, int ld, cublasOperation_t op, int i, int j) {
  if (op == CUBLAS_OP_N) return x[offset + i + static_cast<size_t>(j) * ld];
  const T v = x[offset + j + static_cast<size_t>(i) * ld];
  return op == CUBLAS_OP_C ? Conj(v) : v;
}

// C = alpha op(A) op(B) + beta C, column-major, `batch` times.
template <typename T>
void RefGemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, T alpha,
             const std::vector<T>& a, int lda, long long sa, const std::vector<T>& b, int ldb,
             long long sb, T beta, std::vector<T>* c, int ldc, long long sc, int batch) {
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        T acc = Make<T>(0);
        for (int l = 0; l < k; ++l) acc += At(a, p * sa, lda, ta, i, l) * At(b, p * sb, ldb, tb, l, j);
        T& out = (*c)[p * sc + i + static_cast<size_t>(j) * ldc];
        out = alpha * acc + beta * out;
      }
}

template <typename T>
void ExpectEqual(const char* name, const std::vector<T>& got, const std::vector<T>& want) {
  EXPECT_APP(got.size() == want.size(), "%s: size", name);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_APP(std::memcmp(&got[i], &want[i], sizeof(T)) == 0,
               "%s: element %zu (real part) is %.9g, expected %.9g", name, i, Real(got[i]), Real(want[i]));
  std::printf("RESULT %s %016llx\n", name,
              static_cast<unsigned long long>(Checksum(got.data(), got.size() * sizeof(T))));
}

// Scalars where the pointer mode wants them: host values, or device copies.
template <typename T>
struct Scalars {
  Scalars(bool device, T a, T b) : host{a, b} {
    if (device) dev = ToDevice(std::vector<T>{a, b});
  }
  ~Scalars() {
    if (dev) cudaFree(dev);
  }
  const T* alpha() const { return dev ? dev : &host[0]; }
  const T* beta() const { return dev ? dev + 1 : &host[1]; }
  T host[2];
  T* dev = nullptr;
};

void SetMode(cublasHandle_t h, bool device) {
  CHECK_CUBLAS(cublasSetPointerMode_v2(h, device ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST));
  cublasPointerMode_t mode;
  CHECK_CUBLAS(cublasGetPointerMode_v2(h, &mode));
  EXPECT_APP(mode == (device ? CUBLAS_POINTER_MODE_DEVICE : CUBLAS_POINTER_MODE_HOST),
             "pointer mode %d", static_cast<int>(mode));
}

template <typename T>
void GemmCase(cublasHandle_t h, bool device, cublasOperation_t oa, cublasOperation_t ob, int batch,
              const char* tag) {
  const int m = 37, n = 29, k = 23;
  const bool ta = oa != CUBLAS_OP_N, tb = ob != CUBLAS_OP_N;
  const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
  const long long sa = static_cast<long long>(lda) * (ta ? m : k) + 1,
                  sb = static_cast<long long>(ldb) * (tb ? k : n) + 2,
                  sc = static_cast<long long>(ldc) * n + 3;
  const auto a = Pattern<T>(sa * batch, 1);
  const auto b = Pattern<T>(sb * batch, 2);
  auto c = Pattern<T>(sc * batch, 3);
  T *da = ToDevice(a), *db = ToDevice(b), *dc = ToDevice(c);
  SetMode(h, device);
  const T alpha = Make<T>(1.5, -0.5), beta = Make<T>(-0.5, 0.25);
  Scalars<T> s(device, alpha, beta);
  if (batch == 1) {
    CHECK_CUBLAS(Gemm(h, oa, ob, m, n, k, s.alpha(), da, lda, db, ldb, s.beta(), dc, ldc));
  } else {
    CHECK_CUBLAS(GemmBatched(h, oa, ob, m, n, k, s.alpha(), da, lda, sa, db, ldb, sb, s.beta(), dc, ldc,
                             sc, batch));
  }
  RefGemm<T>(oa, ob, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, &c, ldc, sc, batch);
  ExpectEqual(tag, ToHost(dc, c.size()), c);
  cudaFree(da); cudaFree(db); cudaFree(dc);
}

// cublasGemmEx (batch 1) / cublasGemmStridedBatchedEx in T's real type and
// compute type; with `sgemm_ex`, cublasSgemmEx (fp32, batch 1).
template <typename T>
void ExCase(cublasHandle_t h, bool device, bool sgemm_ex, int batch, const char* tag) {
  const int m = 19, n = 13, k = 11, lda = m, ldb = n, ldc = m;  // B transposed
  const long long sa = static_cast<long long>(lda) * k + 5, sb = static_cast<long long>(ldb) * k + 3,
                  sc = static_cast<long long>(ldc) * n + 7;
  const auto a = Pattern<T>(sa * batch, 4);
  const auto b = Pattern<T>(sb * batch, 5);
  auto c = Pattern<T>(sc * batch, 6);
  T *da = ToDevice(a), *db = ToDevice(b), *dc = ToDevice(c);
  SetMode(h, device);
  Scalars<T> s(device, T(-2), T(0.25));
  const cudaDataType type = sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_64F;
  const cublasComputeType_t compute = sizeof(T) == 4 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_64F;
  if (sgemm_ex) {
    EXPECT_APP(sizeof(T) == 4 && batch == 1, "cublasSgemmEx is fp32");
    CHECK_CUBLAS(cublasSgemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, reinterpret_cast<const float*>(s.alpha()),
                               da, type, lda, db, type, ldb, reinterpret_cast<const float*>(s.beta()), dc,
                               type, ldc));
  } else if (batch == 1) {
    CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, s.alpha(), da, type, lda, db, type,
                              ldb, s.beta(), dc, type, ldc, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, s.alpha(), da, type,
                                            lda, sa, db, type, ldb, sb, s.beta(), dc, type, ldc, sc,
                                            batch, compute, CUBLAS_GEMM_DEFAULT));
  }
  RefGemm<T>(CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, T(-2), a, lda, sa, b, ldb, sb, T(0.25), &c, ldc, sc, batch);
  ExpectEqual(tag, ToHost(dc, c.size()), c);
  cudaFree(da); cudaFree(db); cudaFree(dc);
}

template <typename T>
void GemvCase(cublasHandle_t h, bool device, cublasOperation_t op, const char* tag) {
  const int m = 41, n = 17, lda = m + 4, incx = 2, incy = 3;
  const bool trans = op != CUBLAS_OP_N;
  const int lx = trans ? m : n, ly = trans ? n : m;
  const auto a = Pattern<T>(static_cast<size_t>(lda) * n, 7);
  const auto x = Pattern<T>(static_cast<size_t>(lx) * incx, 8);
  auto y = Pattern<T>(static_cast<size_t>(ly) * incy, 9);
  T *da = ToDevice(a), *dx = ToDevice(x), *dy = ToDevice(y);
  SetMode(h, device);
  const T alpha = Make<T>(0.75, 0.5), beta = Make<T>(2, -1);
  Scalars<T> s(device, alpha, beta);
  CHECK_CUBLAS(Gemv(h, op, m, n, s.alpha(), da, lda, dx, incx, s.beta(), dy, incy));
  for (int i = 0; i < ly; ++i) {
    T acc = Make<T>(0);
    for (int l = 0; l < lx; ++l) acc += At(a, 0, lda, op, i, l) * x[static_cast<size_t>(l) * incx];
    y[static_cast<size_t>(i) * incy] = alpha * acc + beta * y[static_cast<size_t>(i) * incy];
  }
  ExpectEqual(tag, ToHost(dy, y.size()), y);
  cudaFree(da); cudaFree(dx); cudaFree(dy);
}

template <typename T>
void DotCase(cublasHandle_t h, bool device, bool conj, const char* tag) {
  const int n = 301, incx = 1, incy = 2;
  const auto x = Pattern<T>(n * incx, 10), y = Pattern<T>(n * incy, 11);
  T *dx = ToDevice(x), *dy = ToDevice(y);
  SetMode(h, device);
  T result = Make<T>(-99);
  T* dresult = nullptr;
  if (device) dresult = ToDevice(std::vector<T>{Make<T>(-99)});
  CHECK_CUBLAS(Dot(h, n, dx, incx, dy, incy, device ? dresult : &result, conj));
  if (device) {
    result = ToHost(dresult, 1)[0];  // a synchronous copy: after the dot
    cudaFree(dresult);
  }
  T want = Make<T>(0);
  for (int i = 0; i < n; ++i) want += (conj ? Conj(x[i * incx]) : x[i * incx]) * y[i * incy];
  ExpectEqual(tag, std::vector<T>{result}, std::vector<T>{want});
  cudaFree(dx); cudaFree(dy);
}

// op(A) X = alpha B (left) or X op(A) = alpha B (right), A triangular with
// off-diagonal entries in {-1, 0, 1} and a diagonal of 1 (unit: the stored
// diagonal, 100, must be ignored) or 2, so that X is exact. Checked by
// multiplying back: op(A) X (or X op(A)) must equal alpha B bitwise.
template <typename T>
void TrsmCase(cublasHandle_t h, bool device, cublasSideMode_t side, cublasFillMode_t uplo,
              cublasOperation_t op, cublasDiagType_t diag, const char* tag) {
  const int m = 6, n = 4, order = side == CUBLAS_SIDE_LEFT ? m : n, lda = order + 2, ldb = m + 1;
  std::vector<T> a(static_cast<size_t>(lda) * order), tri(static_cast<size_t>(order) * order, Make<T>(0));
  for (int j = 0; j < order; ++j)
    for (int i = 0; i < lda; ++i) {
      const bool in = i < order && (uplo == CUBLAS_FILL_MODE_LOWER ? i > j : i < j);
      T v = in ? Make<T>((i * 3 + j * 5) % 3 - 1, (i + j) % 3 - 1) : Make<T>(100, 100);
      if (i == j) v = diag == CUBLAS_DIAG_UNIT ? Make<T>(100, 100) : Make<T>(2);
      a[i + static_cast<size_t>(j) * lda] = v;
      if (i < order) tri[i + static_cast<size_t>(j) * order] = in ? v : i == j ? (diag == CUBLAS_DIAG_UNIT ? Make<T>(1) : v) : Make<T>(0);
    }
  const auto b = Pattern<T>(static_cast<size_t>(ldb) * n, 12);
  T *da = ToDevice(a), *db = ToDevice(b);
  SetMode(h, device);
  const T alpha = Make<T>(2, 0.5);
  Scalars<T> s(device, alpha, Make<T>(0));
  CHECK_CUBLAS(Trsm(h, side, uplo, op, diag, m, n, s.alpha(), da, lda, db, ldb));
  const std::vector<T> x = ToHost(db, b.size());
  std::vector<T> got = b, want = b;  // rows m..ldb-1 of B untouched
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      T acc = Make<T>(0);
      if (side == CUBLAS_SIDE_LEFT) {
        for (int l = 0; l < m; ++l) acc += At(tri, 0, order, op, i, l) * x[l + static_cast<size_t>(j) * ldb];
      } else {
        for (int l = 0; l < n; ++l) acc += x[i + static_cast<size_t>(l) * ldb] * At(tri, 0, order, op, l, j);
      }
      got[i + static_cast<size_t>(j) * ldb] = acc;
      want[i + static_cast<size_t>(j) * ldb] = alpha * b[i + static_cast<size_t>(j) * ldb];
    }
  for (size_t i = 0; i < b.size(); ++i)
    if (i % ldb >= static_cast<size_t>(m)) got[i] = x[i];
  ExpectEqual(tag, got, want);
  std::printf("RESULT %s/x %016llx\n", tag,
              static_cast<unsigned long long>(Checksum(x.data(), x.size() * sizeof(T))));
  cudaFree(da); cudaFree(db);
}

// cuBLAS's own answers to calls it refuses.
void ErrorCases(cublasHandle_t h) {
  SetMode(h, false);
  float one = 1, *d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 64 * sizeof(float)));
  EXPECT_CUBLAS_STATUS(cublasSgemm_v2(nullptr, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 4, d, 4, &one, d, 4),
                       CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_CUBLAS_STATUS(cublasSetStream_v2(nullptr, nullptr), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_CUBLAS_STATUS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, -1, 4, 4, &one, d, 4, d, 4, &one, d, 4),
                       CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_CUBLAS_STATUS(cublasSgemm_v2(h, static_cast<cublasOperation_t>(7), CUBLAS_OP_N, 4, 4, 4, &one, d,
                                      4, d, 4, &one, d, 4),
                       CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_CUBLAS_STATUS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, d, 3, d, 4, &one, d, 4),
                       CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_CUBLAS_STATUS(cublasSgemv_v2(h, CUBLAS_OP_N, 5, 4, &one, d, 4, d, 1, &one, d, 1),
                       CUBLAS_STATUS_INVALID_VALUE);  // lda 4 < m 5
  EXPECT_CUBLAS_STATUS(cublasSetPointerMode_v2(h, static_cast<cublasPointerMode_t>(5)),
                       CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_APP(std::strcmp(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE") == 0,
             "status name %s", cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE));
  // The handle still works after refused calls.
  std::vector<float> x{1, 2, 3, 4};
  float* dx = ToDevice(x);
  float r = 0;
  CHECK_CUBLAS(cublasSdot_v2(h, 4, dx, 1, dx, 1, &r));
  EXPECT_APP(r == 30, "dot after errors is %g", r);
  cudaFree(dx);
  cudaFree(d);
  std::printf("RESULT errors ok\n");
}

int RunAll() {
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate_v2(&h));
  int version = 0;
  CHECK_CUBLAS(cublasGetVersion_v2(h, &version));
  EXPECT_APP(version / 10000 == CUBLAS_VER_MAJOR, "cuBLAS version %d", version);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  CHECK_CUBLAS(cublasSetStream_v2(h, stream));
  cudaStream_t got = nullptr;
  CHECK_CUBLAS(cublasGetStream_v2(h, &got));
  EXPECT_APP(got == stream, "cublasGetStream_v2 gave another stream");
  CHECK_CUBLAS(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH));
  cublasMath_t math;
  CHECK_CUBLAS(cublasGetMathMode(h, &math));
  EXPECT_APP(math == CUBLAS_PEDANTIC_MATH, "math mode %d", static_cast<int>(math));
  void* workspace = nullptr;
  CHECK_CUDA(cudaMalloc(&workspace, 4 << 20));
  CHECK_CUBLAS(cublasSetWorkspace_v2(h, workspace, 4 << 20));

  for (int device = 0; device < 2; ++device) {
    const std::string mode = device ? "device" : "host";
    auto tag = [&](const char* what) { return what + std::string("/") + mode; };
    GemmCase<float>(h, device, CUBLAS_OP_N, CUBLAS_OP_N, 1, tag("sgemm_nn").c_str());
    GemmCase<float>(h, device, CUBLAS_OP_T, CUBLAS_OP_N, 1, tag("sgemm_tn").c_str());
    GemmCase<double>(h, device, CUBLAS_OP_N, CUBLAS_OP_T, 1, tag("dgemm_nt").c_str());
    GemmCase<cuComplex>(h, device, CUBLAS_OP_N, CUBLAS_OP_C, 1, tag("cgemm_nc").c_str());
    GemmCase<cuDoubleComplex>(h, device, CUBLAS_OP_C, CUBLAS_OP_T, 1, tag("zgemm_ct").c_str());
    GemmCase<float>(h, device, CUBLAS_OP_N, CUBLAS_OP_T, 3, tag("sgemm_strided_batched").c_str());
    GemmCase<double>(h, device, CUBLAS_OP_T, CUBLAS_OP_N, 2, tag("dgemm_strided_batched").c_str());
    GemmCase<cuComplex>(h, device, CUBLAS_OP_C, CUBLAS_OP_N, 2, tag("cgemm_strided_batched").c_str());
    GemmCase<cuDoubleComplex>(h, device, CUBLAS_OP_N, CUBLAS_OP_N, 3, tag("zgemm_strided_batched").c_str());
    ExCase<float>(h, device, false, 1, tag("gemm_ex_32f").c_str());
    ExCase<double>(h, device, false, 1, tag("gemm_ex_64f").c_str());
    ExCase<double>(h, device, false, 4, tag("gemm_strided_batched_ex_64f").c_str());
    ExCase<float>(h, device, true, 1, tag("sgemm_ex").c_str());
    GemvCase<float>(h, device, CUBLAS_OP_N, tag("sgemv_n").c_str());
    GemvCase<float>(h, device, CUBLAS_OP_T, tag("sgemv_t").c_str());
    GemvCase<double>(h, device, CUBLAS_OP_N, tag("dgemv_n").c_str());
    GemvCase<cuComplex>(h, device, CUBLAS_OP_C, tag("cgemv_c").c_str());
    GemvCase<cuDoubleComplex>(h, device, CUBLAS_OP_N, tag("zgemv_n").c_str());
    DotCase<float>(h, device, false, tag("sdot").c_str());
    DotCase<double>(h, device, false, tag("ddot").c_str());
    DotCase<cuComplex>(h, device, true, tag("cdotc").c_str());
    DotCase<cuDoubleComplex>(h, device, false, tag("zdotu").c_str());
    TrsmCase<float>(h, device, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_UNIT,
                    tag("strsm_llnu").c_str());
    TrsmCase<double>(h, device, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_T,
                     CUBLAS_DIAG_NON_UNIT, tag("dtrsm_rutn").c_str());
    TrsmCase<cuComplex>(h, device, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_UPPER, CUBLAS_OP_C,
                        CUBLAS_DIAG_NON_UNIT, tag("ctrsm_lucn").c_str());
    TrsmCase<cuDoubleComplex>(h, device, CUBLAS_SIDE_RIGHT, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N,
                              CUBLAS_DIAG_UNIT, tag("ztrsm_rlnu").c_str());
  }
  ErrorCases(h);
  CHECK_CUBLAS(cublasDestroy_v2(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaFree(workspace));
  std::printf("PASS cublas_ops\n");
  return 0;
}

// A training-like loop: per iteration an input copy, a forward GEMM, a GEMV,
// a dot in device memory, a weight update GEMM (strided batched over two
// weight sets) and a loss read back, like a step of a real job.
int RunLoop(int iters) {
  const int d = 48, batch = 32;
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate_v2(&h));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  CHECK_CUBLAS(cublasSetStream_v2(h, stream));
  std::vector<float> w(2 * d * d);
  for (size_t i = 0; i < w.size(); ++i) w[i] = ((i * 37) % 11 == 0 ? 1.0f : 0.0f) + 0.01f * ((i % 7) - 3.0f);
  float* dw = ToDevice(w);
  float *dx, *dh, *dv, *dscalars;
  CHECK_CUDA(cudaMalloc(&dx, d * batch * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&dh, 2 * d * batch * sizeof(float)));
  const float scalars[4] = {1.0f, 0.0f, -1e-3f, 1.0f};  // forward alpha/beta, update alpha/beta
  dscalars = ToDevice(std::vector<float>(scalars, scalars + 4));
  CHECK_CUDA(cudaMalloc(&dv, 2 * d * sizeof(float)));
  std::vector<float> ref_w = w, x(d * batch), loss_ref_h(2 * d * batch);
  float last_loss = 0, ref_loss = 0;
  for (int it = 0; it < iters; ++it) {
    for (int i = 0; i < d * batch; ++i) x[i] = std::sin(0.1f * (i % 97) + 0.37f * it);
    CHECK_CUDA(cudaMemcpyAsync(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice, stream));
    // The math mode alternates per iteration (the GEMMs are fp32 either way);
    // what the previous iteration set must still hold, also across a
    // replacement agent and the journal's compaction.
    cublasMath_t math;
    CHECK_CUBLAS(cublasGetMathMode(h, &math));
    const cublasMath_t before = it % 2 ? CUBLAS_PEDANTIC_MATH : CUBLAS_DEFAULT_MATH;
    EXPECT_APP(math == before, "iteration %d starts with math mode %d, expected %d", it,
               static_cast<int>(math), static_cast<int>(before));
    CHECK_CUBLAS(cublasSetMathMode(h, it % 2 ? CUBLAS_DEFAULT_MATH : CUBLAS_PEDANTIC_MATH));
    // h_s = W_s x for both weight sets (host scalars), then W_s -= 1e-3 h_s x^T
    // (device scalars).
    SetMode(h, false);
    const float one = 1, zero = 0;
    CHECK_CUBLAS(cublasSgemmStridedBatched(h, CUBLAS_OP_N, CUBLAS_OP_N, d, batch, d, &one, dw, d, d * d,
                                           dx, d, 0, &zero, dh, d, d * batch, 2));
    CHECK_CUBLAS(cublasSgemv_v2(h, CUBLAS_OP_N, d, batch, &one, dh, d, dx, d, &zero, dv, 1));
    SetMode(h, true);
    CHECK_CUBLAS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_T, d, d, batch, dscalars + 2, dh, d, dx, d,
                                dscalars + 3, dw, d));
    CHECK_CUBLAS(cublasSgemm_v2(h, CUBLAS_OP_N, CUBLAS_OP_T, d, d, batch, dscalars + 2, dh + d * batch, d,
                                dx, d, dscalars + 3, dw + d * d, d));
    CHECK_CUBLAS(cublasSdot_v2(h, d, dv, 1, dv, 1, dv + d));
    float loss = 0;
    CHECK_CUDA(cudaMemcpyAsync(&loss, dv + d, sizeof(float), cudaMemcpyDeviceToHost, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    last_loss = loss;

    // The CPU reference of the same step.
    for (int s = 0; s < 2; ++s) {
      std::vector<float> hs(d * batch, 0.0f);
      for (int j = 0; j < batch; ++j)
        for (int i = 0; i < d; ++i) {
          double acc = 0;
          for (int l = 0; l < d; ++l) acc += double(ref_w[s * d * d + i + l * d]) * x[l + j * d];
          hs[i + j * d] = static_cast<float>(acc);
        }
      if (s == 0) {
        double l2 = 0;
        for (int i = 0; i < d; ++i) {
          double v = 0;
          for (int j = 0; j < batch; ++j) v += double(hs[i + j * d]) * x[j * d];
          l2 += v * v;
        }
        ref_loss = static_cast<float>(l2);
      }
      for (int j = 0; j < d; ++j)
        for (int i = 0; i < d; ++i) {
          double acc = 0;
          for (int l = 0; l < batch; ++l) acc += double(hs[i + l * d]) * x[j + l * d];
          ref_w[s * d * d + i + j * d] += static_cast<float>(-1e-3 * acc);
        }
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
  CHECK_CUBLAS(cublasDestroy_v2(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  std::printf("PASS cublas_ops\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 3 && std::strcmp(argv[1], "--iters") == 0) return RunLoop(std::atoi(argv[2]));
  EXPECT_APP(argc == 1, "usage: cublas_ops [--iters N]");
  return RunAll();
}
