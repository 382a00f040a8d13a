// cuBLAS operations checked against a plain CPU reference: GEMM (fp32,
// fp64, transposes), strided batched GEMM, cublasGemmEx and
// cublasGemmStridedBatchedEx, GEMV and dot, each with scalars in host
// memory and in device memory (both pointer modes), plus cuBLAS's own error
// codes for bad calls. Plain CUDA + cuBLAS code.
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

namespace {

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
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<T>(static_cast<int>((i * 7 + seed * 13) % 13) - 6) / 4;
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
T At(const std::vector<T>& x, size_t offset, int ld, bool trans, int i, int j) {
  return trans ? x[offset + j + static_cast<size_t>(i) * ld] : x[offset + i + static_cast<size_t>(j) * ld];
}

// C = alpha op(A) op(B) + beta C, column-major, `batch` times.
template <typename T>
void RefGemm(bool ta, bool tb, int m, int n, int k, T alpha, const std::vector<T>& a, int lda,
             long long sa, const std::vector<T>& b, int ldb, long long sb, T beta,
             std::vector<T>* c, int ldc, long long sc, int batch) {
  for (int p = 0; p < batch; ++p)
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        T acc = 0;
        for (int l = 0; l < k; ++l) acc += At(a, p * sa, lda, ta, i, l) * At(b, p * sb, ldb, tb, l, j);
        T& out = (*c)[p * sc + i + static_cast<size_t>(j) * ldc];
        out = alpha * acc + beta * out;
      }
}

template <typename T>
void ExpectEqual(const char* name, const std::vector<T>& got, const std::vector<T>& want) {
  EXPECT_APP(got.size() == want.size(), "%s: size", name);
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_APP(std::memcmp(&got[i], &want[i], sizeof(T)) == 0, "%s: element %zu is %.9g, expected %.9g",
               name, i, static_cast<double>(got[i]), static_cast<double>(want[i]));
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
void GemmCase(cublasHandle_t h, bool device, bool ta, bool tb, const char* tag) {
  const int m = 37, n = 29, k = 23;
  const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 1, ldc = m + 2;
  const auto a = Pattern<T>(static_cast<size_t>(lda) * (ta ? m : k), 1);
  const auto b = Pattern<T>(static_cast<size_t>(ldb) * (tb ? k : n), 2);
  auto c = Pattern<T>(static_cast<size_t>(ldc) * n, 3);
  T *da = ToDevice(a), *db = ToDevice(b), *dc = ToDevice(c);
  SetMode(h, device);
  Scalars<T> s(device, T(1.5), T(-0.5));
  const cublasOperation_t oa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, ob = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (sizeof(T) == 4) {
    CHECK_CUBLAS(cublasSgemm_v2(h, oa, ob, m, n, k, reinterpret_cast<const float*>(s.alpha()),
                                reinterpret_cast<const float*>(da), lda,
                                reinterpret_cast<const float*>(db), ldb,
                                reinterpret_cast<const float*>(s.beta()), reinterpret_cast<float*>(dc), ldc));
  } else {
    CHECK_CUBLAS(cublasDgemm_v2(h, oa, ob, m, n, k, reinterpret_cast<const double*>(s.alpha()),
                                reinterpret_cast<const double*>(da), lda,
                                reinterpret_cast<const double*>(db), ldb,
                                reinterpret_cast<const double*>(s.beta()), reinterpret_cast<double*>(dc), ldc));
  }
  RefGemm<T>(ta, tb, m, n, k, T(1.5), a, lda, 0, b, ldb, 0, T(-0.5), &c, ldc, 0, 1);
  ExpectEqual(tag, ToHost(dc, c.size()), c);
  cudaFree(da); cudaFree(db); cudaFree(dc);
}

// cublasSgemmStridedBatched, or with `ex` cublasGemmEx (batch 1) /
// cublasGemmStridedBatchedEx in T's real type and compute type.
template <typename T>
void BatchedCase(cublasHandle_t h, bool device, bool ex, int batch, const char* tag) {
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
  if (ex && batch == 1) {
    CHECK_CUBLAS(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, s.alpha(), da, type, lda, db, type,
                              ldb, s.beta(), dc, type, ldc, compute, CUBLAS_GEMM_DEFAULT));
  } else if (ex) {
    CHECK_CUBLAS(cublasGemmStridedBatchedEx(h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, s.alpha(), da, type,
                                            lda, sa, db, type, ldb, sb, s.beta(), dc, type, ldc, sc,
                                            batch, compute, CUBLAS_GEMM_DEFAULT));
  } else {
    EXPECT_APP(sizeof(T) == 4, "cublasSgemmStridedBatched is fp32");
    CHECK_CUBLAS(cublasSgemmStridedBatched(
        h, CUBLAS_OP_N, CUBLAS_OP_T, m, n, k, reinterpret_cast<const float*>(s.alpha()),
        reinterpret_cast<const float*>(da), lda, sa, reinterpret_cast<const float*>(db), ldb, sb,
        reinterpret_cast<const float*>(s.beta()), reinterpret_cast<float*>(dc), ldc, sc, batch));
  }
  RefGemm<T>(false, true, m, n, k, T(-2), a, lda, sa, b, ldb, sb, T(0.25), &c, ldc, sc, batch);
  ExpectEqual(tag, ToHost(dc, c.size()), c);
  cudaFree(da); cudaFree(db); cudaFree(dc);
}

template <typename T>
void GemvCase(cublasHandle_t h, bool device, bool trans, const char* tag) {
  const int m = 41, n = 17, lda = m + 4, incx = 2, incy = 3;
  const int lx = trans ? m : n, ly = trans ? n : m;
  const auto a = Pattern<T>(static_cast<size_t>(lda) * n, 7);
  const auto x = Pattern<T>(static_cast<size_t>(lx) * incx, 8);
  auto y = Pattern<T>(static_cast<size_t>(ly) * incy, 9);
  T *da = ToDevice(a), *dx = ToDevice(x), *dy = ToDevice(y);
  SetMode(h, device);
  Scalars<T> s(device, T(0.75), T(2));
  const cublasOperation_t op = trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  if (sizeof(T) == 4) {
    CHECK_CUBLAS(cublasSgemv_v2(h, op, m, n, reinterpret_cast<const float*>(s.alpha()),
                                reinterpret_cast<const float*>(da), lda, reinterpret_cast<const float*>(dx),
                                incx, reinterpret_cast<const float*>(s.beta()), reinterpret_cast<float*>(dy),
                                incy));
  } else {
    CHECK_CUBLAS(cublasDgemv_v2(h, op, m, n, reinterpret_cast<const double*>(s.alpha()),
                                reinterpret_cast<const double*>(da), lda,
                                reinterpret_cast<const double*>(dx), incx,
                                reinterpret_cast<const double*>(s.beta()), reinterpret_cast<double*>(dy),
                                incy));
  }
  for (int i = 0; i < ly; ++i) {
    T acc = 0;
    for (int l = 0; l < lx; ++l) acc += At(a, 0, lda, trans, i, l) * x[static_cast<size_t>(l) * incx];
    y[static_cast<size_t>(i) * incy] = T(0.75) * acc + T(2) * y[static_cast<size_t>(i) * incy];
  }
  ExpectEqual(tag, ToHost(dy, y.size()), y);
  cudaFree(da); cudaFree(dx); cudaFree(dy);
}

template <typename T>
void DotCase(cublasHandle_t h, bool device, const char* tag) {
  const int n = 301, incx = 1, incy = 2;
  const auto x = Pattern<T>(n * incx, 10), y = Pattern<T>(n * incy, 11);
  T *dx = ToDevice(x), *dy = ToDevice(y);
  SetMode(h, device);
  T result = T(-99);
  T* dresult = nullptr;
  if (device) dresult = ToDevice(std::vector<T>{T(-99)});
  T* where = device ? dresult : &result;
  if (sizeof(T) == 4) {
    CHECK_CUBLAS(cublasSdot_v2(h, n, reinterpret_cast<const float*>(dx), incx,
                               reinterpret_cast<const float*>(dy), incy, reinterpret_cast<float*>(where)));
  } else {
    CHECK_CUBLAS(cublasDdot_v2(h, n, reinterpret_cast<const double*>(dx), incx,
                               reinterpret_cast<const double*>(dy), incy, reinterpret_cast<double*>(where)));
  }
  if (device) {
    result = ToHost(dresult, 1)[0];  // a synchronous copy: after the dot
    cudaFree(dresult);
  }
  T want = 0;
  for (int i = 0; i < n; ++i) want += x[i * incx] * y[i * incy];
  ExpectEqual(tag, std::vector<T>{result}, std::vector<T>{want});
  cudaFree(dx); cudaFree(dy);
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
  EXPECT_CUBLAS_STATUS(cublasSgemv_v2(h, CUBLAS_OP_N, 4, 4, &one, d, 4, d, 0, &one, d, 1),
                       CUBLAS_STATUS_INVALID_VALUE);
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
    GemmCase<float>(h, device, false, false, tag("sgemm_nn").c_str());
    GemmCase<float>(h, device, true, false, tag("sgemm_tn").c_str());
    GemmCase<double>(h, device, false, true, tag("dgemm_nt").c_str());
    BatchedCase<float>(h, device, false, 3, tag("sgemm_strided_batched").c_str());
    BatchedCase<float>(h, device, true, 1, tag("gemm_ex_32f").c_str());
    BatchedCase<double>(h, device, true, 1, tag("gemm_ex_64f").c_str());
    BatchedCase<double>(h, device, true, 4, tag("gemm_strided_batched_ex_64f").c_str());
    GemvCase<float>(h, device, false, tag("sgemv_n").c_str());
    GemvCase<float>(h, device, true, tag("sgemv_t").c_str());
    GemvCase<double>(h, device, false, tag("dgemv_n").c_str());
    DotCase<float>(h, device, tag("sdot").c_str());
    DotCase<double>(h, device, tag("ddot").c_str());
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
