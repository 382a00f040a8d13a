// The cuBLAS rows on the host backend: OpenBLAS on the device memory, in
// stream order (host_backend.h says what runs and what is refused).
#include <cblas.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/backends/host/host_backend.h"
#include "agent/backends/host/host_blas_internal.h"
#include "api/blas_args.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

using blas_internal::Aligned;
using blas_internal::Gemm1;
using blas_internal::kLog;
using blas_internal::MatrixBytes;
using blas_internal::RefuseTypes;
using blas_internal::Scalar;
using blas_internal::SingleThreadedBlas;
using blas_internal::ToCblas;
using blas_internal::Unreachable;

template <typename T>
uint64_t VectorBytes(int n, int inc) {
  if (n <= 0) return 0;
  const uint64_t step = inc < 0 ? -static_cast<int64_t>(inc) : inc;
  return ((n - 1) * step + 1) * sizeof(T);
}

void Gemv1(CBLAS_TRANSPOSE t, int m, int n, float alpha, const float* a, int lda, const float* x,
           int incx, float beta, float* y, int incy) {
  cblas_sgemv(CblasColMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void Gemv1(CBLAS_TRANSPOSE t, int m, int n, double alpha, const double* a, int lda,
           const double* x, int incx, double beta, double* y, int incy) {
  cblas_dgemv(CblasColMajor, t, m, n, alpha, a, lda, x, incx, beta, y, incy);
}
void Gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, cuComplex alpha,
           const cuComplex* a, int lda, const cuComplex* b, int ldb, cuComplex beta, cuComplex* c,
           int ldc) {
  cblas_cgemm(CblasColMajor, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
void Gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, cuDoubleComplex alpha,
           const cuDoubleComplex* a, int lda, const cuDoubleComplex* b, int ldb,
           cuDoubleComplex beta, cuDoubleComplex* c, int ldc) {
  cblas_zgemm(CblasColMajor, ta, tb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc);
}
void Gemv1(CBLAS_TRANSPOSE t, int m, int n, cuComplex alpha, const cuComplex* a, int lda,
           const cuComplex* x, int incx, cuComplex beta, cuComplex* y, int incy) {
  cblas_cgemv(CblasColMajor, t, m, n, &alpha, a, lda, x, incx, &beta, y, incy);
}
void Gemv1(CBLAS_TRANSPOSE t, int m, int n, cuDoubleComplex alpha, const cuDoubleComplex* a,
           int lda, const cuDoubleComplex* x, int incx, cuDoubleComplex beta, cuDoubleComplex* y,
           int incy) {
  cblas_zgemv(CblasColMajor, t, m, n, &alpha, a, lda, x, incx, &beta, y, incy);
}
float Dot1(int n, const float* x, int incx, const float* y, int incy, bool) {
  return cblas_sdot(n, x, incx, y, incy);
}
double Dot1(int n, const double* x, int incx, const double* y, int incy, bool) {
  return cblas_ddot(n, x, incx, y, incy);
}
cuComplex Dot1(int n, const cuComplex* x, int incx, const cuComplex* y, int incy, bool conj) {
  cuComplex r{};
  (conj ? cblas_cdotc_sub : cblas_cdotu_sub)(n, x, incx, y, incy, &r);
  return r;
}
cuDoubleComplex Dot1(int n, const cuDoubleComplex* x, int incx, const cuDoubleComplex* y,
                     int incy, bool conj) {
  cuDoubleComplex r{};
  (conj ? cblas_zdotc_sub : cblas_zdotu_sub)(n, x, incx, y, incy, &r);
  return r;
}
struct TrsmOps {
  CBLAS_SIDE side;
  CBLAS_UPLO uplo;
  CBLAS_TRANSPOSE trans;
  CBLAS_DIAG diag;
};
void Trsm1(const TrsmOps& o, int m, int n, float alpha, const float* a, int lda, float* b,
           int ldb) {
  cblas_strsm(CblasColMajor, o.side, o.uplo, o.trans, o.diag, m, n, alpha, a, lda, b, ldb);
}
void Trsm1(const TrsmOps& o, int m, int n, double alpha, const double* a, int lda, double* b,
           int ldb) {
  cblas_dtrsm(CblasColMajor, o.side, o.uplo, o.trans, o.diag, m, n, alpha, a, lda, b, ldb);
}
void Trsm1(const TrsmOps& o, int m, int n, cuComplex alpha, const cuComplex* a, int lda,
           cuComplex* b, int ldb) {
  cblas_ctrsm(CblasColMajor, o.side, o.uplo, o.trans, o.diag, m, n, &alpha, a, lda, b, ldb);
}
void Trsm1(const TrsmOps& o, int m, int n, cuDoubleComplex alpha, const cuDoubleComplex* a,
           int lda, cuDoubleComplex* b, int ldb) {
  cblas_ztrsm(CblasColMajor, o.side, o.uplo, o.trans, o.diag, m, n, &alpha, a, lda, b, ldb);
}

}  // namespace

cublasStatus_t HostBackend::BlasState(cublasHandle_t handle, BlasHandle* state) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  if (it == blas_handles_.end()) return CUBLAS_STATUS_NOT_INITIALIZED;
  *state = *it->second;
  return CUBLAS_STATUS_SUCCESS;
}

bool HostBackend::DevicePointers(api::HandleKind kind, uint64_t handle) {
  if (kind == api::HandleKind::kLtMatmulDesc) return LtDevicePointers(handle);
  if (kind != api::HandleKind::kBlasHandle) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  return it != blas_handles_.end() && it->second->pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
}

cublasStatus_t HostBackend::cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  SingleThreadedBlas();
  auto h = std::make_unique<BlasHandle>();
  std::lock_guard<std::mutex> lock(mu_);
  *handle = reinterpret_cast<cublasHandle_t>(h.get());
  blas_handles_[h.get()] = std::move(h);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasDestroy_v2(cublasHandle_t handle) {
  // Queued operations hold copies of what they need: nothing waits.
  std::lock_guard<std::mutex> lock(mu_);
  return blas_handles_.erase(reinterpret_cast<BlasHandle*>(handle)) > 0
             ? CUBLAS_STATUS_SUCCESS
             : CUBLAS_STATUS_NOT_INITIALIZED;
}

cublasStatus_t HostBackend::cublasGetVersion_v2(cublasHandle_t handle, int* version) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (version == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *version = CUBLAS_VERSION;  // the headers the API table follows
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasSetStream_v2(cublasHandle_t handle, cudaStream_t streamId) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  if (it == blas_handles_.end()) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (ResolveStream(streamId) == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  it->second->stream = streamId;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* streamId) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (streamId == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *streamId = h.stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasSetWorkspace_v2(cublasHandle_t handle, void* workspace,
                                                  size_t workspaceSizeInBytes) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  if (it == blas_handles_.end()) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (workspaceSizeInBytes > 0 && !DeviceAccessible(workspace, workspaceSizeInBytes)) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  it->second->workspace = workspace;  // OpenBLAS needs none; kept for completeness
  it->second->workspace_size = workspaceSizeInBytes;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  if (it == blas_handles_.end()) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int base =
      static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
      base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  it->second->math_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h.math_mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasSetPointerMode_v2(cublasHandle_t handle,
                                                    cublasPointerMode_t mode) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blas_handles_.find(reinterpret_cast<BlasHandle*>(handle));
  if (it == blas_handles_.end()) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  it->second->pointer_mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasGetPointerMode_v2(cublasHandle_t handle,
                                                    cublasPointerMode_t* mode) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = h.pointer_mode;
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t HostBackend::Gemm(const char* api, cublasHandle_t handle, const GemmArgs& g) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (int32_t s = api::GemmArgsStatus(g.transa, g.transb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc,
                                      g.batch_count)) {
    return static_cast<cublasStatus_t>(s);
  }
  if (g.alpha == nullptr || g.beta == nullptr || g.stride_a < 0 || g.stride_b < 0 ||
      g.stride_c < 0) {
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  if (g.m == 0 || g.n == 0 || g.batch_count == 0) return CUBLAS_STATUS_SUCCESS;
  const bool device = h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  Scalar<T> alpha, beta;
  if (device) {
    alpha.device = static_cast<const T*>(g.alpha);
    beta.device = static_cast<const T*>(g.beta);
  } else {
    std::memcpy(&alpha.value, g.alpha, sizeof(T));
    std::memcpy(&beta.value, g.beta, sizeof(T));
  }
  const int rows_a = g.transa == CUBLAS_OP_N ? g.m : g.k;
  const int cols_a = g.transa == CUBLAS_OP_N ? g.k : g.m;
  const int rows_b = g.transb == CUBLAS_OP_N ? g.k : g.n;
  const int cols_b = g.transb == CUBLAS_OP_N ? g.n : g.k;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto reach = [&](const void* p, uint64_t n) {
      return n == 0 || (Aligned<T>(p) && DeviceAccessible(p, n));
    };
    if (device && (!reach(g.alpha, sizeof(T)) || !reach(g.beta, sizeof(T)))) {
      return Unreachable(api, "alpha/beta are not aligned device memory (pointer mode device)");
    }
    if (!reach(g.a, MatrixBytes<T>(rows_a, cols_a, g.lda, g.stride_a, g.batch_count)) ||
        !reach(g.b, MatrixBytes<T>(rows_b, cols_b, g.ldb, g.stride_b, g.batch_count)) ||
        !reach(g.c, MatrixBytes<T>(g.m, g.n, g.ldc, g.stride_c, g.batch_count))) {
      return Unreachable(api, "A, B or C is not aligned device memory of that size");
    }
  }
  const GemmArgs a = g;
  const cudaError_t e = EnqueueFallible(h.stream, [a, alpha, beta]() {
    const T al = alpha.Get(), be = beta.Get();
    for (int i = 0; i < a.batch_count; ++i) {
      Gemm1(ToCblas(a.transa), ToCblas(a.transb), a.m, a.n, a.k, al,
            static_cast<const T*>(a.a) + i * a.stride_a, a.lda,
            static_cast<const T*>(a.b) + i * a.stride_b, a.ldb, be,
            static_cast<T*>(a.c) + i * a.stride_c, a.ldc);
    }
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : Unreachable(api, "the handle's stream is gone");
}

template <typename T>
cublasStatus_t HostBackend::Gemv(const char* api, cublasHandle_t handle, cublasOperation_t trans,
                                 int m, int n, const T* alpha, const T* a, int lda, const T* x,
                                 int incx, const T* beta, T* y, int incy) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (int32_t s = api::GemvArgsStatus(trans, m, n, lda, incx, incy)) {
    return static_cast<cublasStatus_t>(s);
  }
  if (incx == 0 || incy == 0) {
    // cuBLAS accepts it; what it then computes is not documented, and the
    // CPU BLAS refuses it: not supported here.
    REVENANT_LOG(WARNING, "host-blas") << api << ": a zero increment is not supported by the "
                                          "host backend";
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool device = h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  Scalar<T> al, be;
  if (device) {
    al.device = alpha;
    be.device = beta;
  } else {
    al.value = *alpha;
    be.value = *beta;
  }
  const int len_x = trans == CUBLAS_OP_N ? n : m;
  const int len_y = trans == CUBLAS_OP_N ? m : n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device && (!(Aligned<T>(alpha) && DeviceAccessible(alpha, sizeof(T))) ||
                   !(Aligned<T>(beta) && DeviceAccessible(beta, sizeof(T))))) {
      return Unreachable(api, "alpha/beta are not aligned device memory (pointer mode device)");
    }
    if (!(Aligned<T>(a) && DeviceAccessible(a, MatrixBytes<T>(m, n, lda, 0, 1))) ||
        !(Aligned<T>(x) && DeviceAccessible(x, VectorBytes<T>(len_x, incx))) ||
        !(Aligned<T>(y) && DeviceAccessible(y, VectorBytes<T>(len_y, incy)))) {
      return Unreachable(api, "A, x or y is not aligned device memory of that size");
    }
  }
  const cudaError_t e = EnqueueFallible(h.stream, [=]() {
    Gemv1(ToCblas(trans), m, n, al.Get(), a, lda, x, incx, be.Get(), y, incy);
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : Unreachable(api, "the handle's stream is gone");
}

template <typename T>
cublasStatus_t HostBackend::Dot(const char* api, cublasHandle_t handle, int n, const T* x,
                                int incx, const T* y, int incy, T* result, bool conj) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (result == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  const bool device = h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device && !(Aligned<T>(result) && DeviceAccessible(result, sizeof(T)))) {
      return Unreachable(api, "the result is not aligned device memory (pointer mode device)");
    }
    if (n > 0 && (!(Aligned<T>(x) && DeviceAccessible(x, VectorBytes<T>(n, incx))) ||
                  !(Aligned<T>(y) && DeviceAccessible(y, VectorBytes<T>(n, incy))))) {
      return Unreachable(api, "x or y is not aligned device memory of that size");
    }
  }
  // cuBLAS: n <= 0 gives 0. A host result is written by the time the call
  // returns (the agent's reply carries it), after the stream's earlier work.
  std::shared_ptr<Marker> done;
  const cudaError_t e = Enqueue(
      h.stream,
      [=]() {
        *result = n > 0 ? Dot1(n, x, incx, y, incy, conj) : T{};
        return cudaSuccess;
      },
      device ? nullptr : &done);
  if (e != cudaSuccess) return Unreachable(api, "the handle's stream is gone");
  if (done != nullptr) done->Wait();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::GemmEx(const char* api, cublasHandle_t handle, const GemmArgs& g,
                                   cudaDataType a_type, cudaDataType b_type, cudaDataType c_type,
                                   cublasComputeType_t compute_type) {
  const bool same = a_type == b_type && b_type == c_type;
  if (same && a_type == CUDA_R_32F &&
      (compute_type == CUBLAS_COMPUTE_32F || compute_type == CUBLAS_COMPUTE_32F_PEDANTIC)) {
    return Gemm<float>(api, handle, g);
  }
  if (same && a_type == CUDA_R_64F &&
      (compute_type == CUBLAS_COMPUTE_64F || compute_type == CUBLAS_COMPUTE_64F_PEDANTIC)) {
    return Gemm<double>(api, handle, g);
  }
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  return RefuseTypes(absl::StrCat(api, ": A/B/C types ", a_type, "/", b_type, "/", c_type,
                                  " with compute type ", compute_type),
                     "CUDA_R_32F with CUBLAS_COMPUTE_32F and CUDA_R_64F with CUBLAS_COMPUTE_64F");
}

template <typename T>
cublasStatus_t HostBackend::Trsm(const char* api, cublasHandle_t handle, cublasSideMode_t side,
                                 cublasFillMode_t uplo, cublasOperation_t trans,
                                 cublasDiagType_t diag, int m, int n, const T* alpha, const T* a,
                                 int lda, T* b, int ldb) {
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  if (int32_t s = api::TrsmArgsStatus(side, uplo, trans, diag, m, n, lda, ldb)) {
    return static_cast<cublasStatus_t>(s);
  }
  if (alpha == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  const bool device = h.pointer_mode == CUBLAS_POINTER_MODE_DEVICE;
  Scalar<T> al;
  if (device) {
    al.device = alpha;
  } else {
    std::memcpy(&al.value, alpha, sizeof(T));
  }
  const int order = side == CUBLAS_SIDE_LEFT ? m : n;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (device && !(Aligned<T>(alpha) && DeviceAccessible(alpha, sizeof(T)))) {
      return Unreachable(api, "alpha is not device memory (pointer mode device)");
    }
    if (!(Aligned<T>(a) && DeviceAccessible(a, MatrixBytes<T>(order, order, lda, 0, 1))) ||
        !(Aligned<T>(b) && DeviceAccessible(b, MatrixBytes<T>(m, n, ldb, 0, 1)))) {
      return Unreachable(api, "A or B is not aligned device memory of that size");
    }
  }
  const TrsmOps ops{side == CUBLAS_SIDE_LEFT ? CblasLeft : CblasRight,
                    uplo == CUBLAS_FILL_MODE_LOWER ? CblasLower : CblasUpper, ToCblas(trans),
                    diag == CUBLAS_DIAG_UNIT ? CblasUnit : CblasNonUnit};
  const cudaError_t e = EnqueueFallible(h.stream, [=]() {
    Trsm1(ops, m, n, al.Get(), a, lda, b, ldb);
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : Unreachable(api, "the handle's stream is gone");
}

cublasStatus_t HostBackend::cublasSgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const float* alpha, const float* A, int lda,
                                           const float* B, int ldb, const float* beta, float* C,
                                           int ldc) {
  return Gemm<float>("cublasSgemm_v2", handle,
                     {transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1});
}

cublasStatus_t HostBackend::cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t transa,
                                           cublasOperation_t transb, int m, int n, int k,
                                           const double* alpha, const double* A, int lda,
                                           const double* B, int ldb, const double* beta,
                                           double* C, int ldc) {
  return Gemm<double>("cublasDgemm_v2", handle,
                      {transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1});
}

cublasStatus_t HostBackend::cublasSgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const float* alpha, const float* A, int lda, long long int strideA, const float* B, int ldb,
    long long int strideB, const float* beta, float* C, int ldc, long long int strideC,
    int batchCount) {
  return Gemm<float>("cublasSgemmStridedBatched", handle,
                     {transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                      ldc, strideC, batchCount});
}

cublasStatus_t HostBackend::cublasDgemmStridedBatched(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const double* alpha, const double* A, int lda, long long int strideA, const double* B,
    int ldb, long long int strideB, const double* beta, double* C, int ldc,
    long long int strideC, int batchCount) {
  return Gemm<double>("cublasDgemmStridedBatched", handle,
                      {transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C,
                       ldc, strideC, batchCount});
}

cublasStatus_t HostBackend::cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const void* alpha, const void* A, cudaDataType Atype,
                                         int lda, const void* B, cudaDataType Btype, int ldb,
                                         const void* beta, void* C, cudaDataType Ctype, int ldc,
                                         cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;  // one algorithm on the CPU
  return GemmEx("cublasGemmEx", handle,
                {transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1}, Atype,
                Btype, Ctype, computeType);
}

cublasStatus_t HostBackend::cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void* alpha, const void* A, cudaDataType Atype, int lda, long long int strideA,
    const void* B, cudaDataType Btype, int ldb, long long int strideB, const void* beta, void* C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  (void)algo;
  return GemmEx("cublasGemmStridedBatchedEx", handle,
                {transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc,
                 strideC, batchCount},
                Atype, Btype, Ctype, computeType);
}

cublasStatus_t HostBackend::cublasSgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
                                           int n, const float* alpha, const float* A, int lda,
                                           const float* x, int incx, const float* beta, float* y,
                                           int incy) {
  return Gemv<float>("cublasSgemv_v2", handle, trans, m, n, alpha, A, lda, x, incx, beta, y,
                     incy);
}

cublasStatus_t HostBackend::cublasDgemv_v2(cublasHandle_t handle, cublasOperation_t trans, int m,
                                           int n, const double* alpha, const double* A, int lda,
                                           const double* x, int incx, const double* beta,
                                           double* y, int incy) {
  return Gemv<double>("cublasDgemv_v2", handle, trans, m, n, alpha, A, lda, x, incx, beta, y,
                      incy);
}

cublasStatus_t HostBackend::cublasSdot_v2(cublasHandle_t handle, int n, const float* x, int incx,
                                          const float* y, int incy, float* result) {
  return Dot<float>("cublasSdot_v2", handle, n, x, incx, y, incy, result, false);
}

cublasStatus_t HostBackend::cublasDdot_v2(cublasHandle_t handle, int n, const double* x, int incx,
                                          const double* y, int incy, double* result) {
  return Dot<double>("cublasDdot_v2", handle, n, x, incx, y, incy, result, false);
}

// Complex GEMM/GEMV/dot, triangular solves, cublasSgemmEx: the same families
// in the other element types.
#define REVENANT_HOST_GEMM(api, T)                                                           \
  cublasStatus_t HostBackend::api(cublasHandle_t handle, cublasOperation_t transa,           \
                                  cublasOperation_t transb, int m, int n, int k,             \
                                  const T* alpha, const T* A, int lda, const T* B, int ldb,  \
                                  const T* beta, T* C, int ldc) {                            \
    return Gemm<T>(#api, handle,                                                             \
                   {transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1}); \
  }
REVENANT_HOST_GEMM(cublasCgemm_v2, cuComplex)
REVENANT_HOST_GEMM(cublasZgemm_v2, cuDoubleComplex)
#undef REVENANT_HOST_GEMM

#define REVENANT_HOST_GEMM_BATCHED(api, T)                                                    \
  cublasStatus_t HostBackend::api(                                                            \
      cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, \
      int k, const T* alpha, const T* A, int lda, long long int strideA, const T* B, int ldb, \
      long long int strideB, const T* beta, T* C, int ldc, long long int strideC,             \
      int batchCount) {                                                                       \
    return Gemm<T>(#api, handle,                                                              \
                   {transa, transb, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, \
                    ldc, strideC, batchCount});                                               \
  }
REVENANT_HOST_GEMM_BATCHED(cublasCgemmStridedBatched, cuComplex)
REVENANT_HOST_GEMM_BATCHED(cublasZgemmStridedBatched, cuDoubleComplex)
#undef REVENANT_HOST_GEMM_BATCHED

#define REVENANT_HOST_GEMV(api, T)                                                             \
  cublasStatus_t HostBackend::api(cublasHandle_t handle, cublasOperation_t trans, int m, int n, \
                                  const T* alpha, const T* A, int lda, const T* x, int incx,    \
                                  const T* beta, T* y, int incy) {                              \
    return Gemv<T>(#api, handle, trans, m, n, alpha, A, lda, x, incx, beta, y, incy);          \
  }
REVENANT_HOST_GEMV(cublasCgemv_v2, cuComplex)
REVENANT_HOST_GEMV(cublasZgemv_v2, cuDoubleComplex)
#undef REVENANT_HOST_GEMV

#define REVENANT_HOST_DOT(api, T, conj)                                                        \
  cublasStatus_t HostBackend::api(cublasHandle_t handle, int n, const T* x, int incx,          \
                                  const T* y, int incy, T* result) {                           \
    return Dot<T>(#api, handle, n, x, incx, y, incy, result, conj);                            \
  }
REVENANT_HOST_DOT(cublasCdotu_v2, cuComplex, false)
REVENANT_HOST_DOT(cublasCdotc_v2, cuComplex, true)
REVENANT_HOST_DOT(cublasZdotu_v2, cuDoubleComplex, false)
REVENANT_HOST_DOT(cublasZdotc_v2, cuDoubleComplex, true)
#undef REVENANT_HOST_DOT

#define REVENANT_HOST_TRSM(api, T)                                                              \
  cublasStatus_t HostBackend::api(cublasHandle_t handle, cublasSideMode_t side,                 \
                                  cublasFillMode_t uplo, cublasOperation_t trans,               \
                                  cublasDiagType_t diag, int m, int n, const T* alpha,          \
                                  const T* A, int lda, T* B, int ldb) {                         \
    return Trsm<T>(#api, handle, side, uplo, trans, diag, m, n, alpha, A, lda, B, ldb);         \
  }
REVENANT_HOST_TRSM(cublasStrsm_v2, float)
REVENANT_HOST_TRSM(cublasDtrsm_v2, double)
REVENANT_HOST_TRSM(cublasCtrsm_v2, cuComplex)
REVENANT_HOST_TRSM(cublasZtrsm_v2, cuDoubleComplex)
#undef REVENANT_HOST_TRSM

cublasStatus_t HostBackend::cublasSgemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const float* alpha, const void* A, cudaDataType Atype,
                                          int lda, const void* B, cudaDataType Btype, int ldb,
                                          const float* beta, void* C, cudaDataType Ctype,
                                          int ldc) {
  if (Atype == CUDA_R_32F && Btype == CUDA_R_32F && Ctype == CUDA_R_32F) {
    return Gemm<float>("cublasSgemmEx", handle,
                       {transa, transb, m, n, k, alpha, A, lda, 0, B, ldb, 0, beta, C, ldc, 0, 1});
  }
  BlasHandle h;
  if (cublasStatus_t s = BlasState(handle, &h)) return s;
  return RefuseTypes(absl::StrCat("cublasSgemmEx: A/B/C types ", Atype, "/", Btype, "/", Ctype),
                     "CUDA_R_32F");
}

}  // namespace host
}  // namespace agent
}  // namespace revenant
