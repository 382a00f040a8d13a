// Helpers of the host backend's cuBLAS and cuBLASLt rows (host_blas.cc,
// host_blaslt.cc): bounds, alignment, scalars, OpenBLAS calls, refusals.
#ifndef REVENANT_AGENT_BACKENDS_HOST_HOST_BLAS_INTERNAL_H_
#define REVENANT_AGENT_BACKENDS_HOST_HOST_BLAS_INTERNAL_H_

#include <cblas.h>
#include <cublas_api.h>

#include <cstdint>
#include <mutex>
#include <set>
#include <string>

#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {
namespace blas_internal {

inline constexpr char kLog[] = "host-backend";

// cuBLAS's arrays and scalars are aligned to their element type (a
// misaligned one faults on the GPU); the host backend refuses one rather
// than access it.
template <typename T>
inline bool Aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % alignof(T) == 0;
}

inline CBLAS_TRANSPOSE ToCblas(cublasOperation_t op) {
  // CblasConjTrans of a real matrix is its transpose, as CUBLAS_OP_C's.
  return op == CUBLAS_OP_N ? CblasNoTrans : op == CUBLAS_OP_T ? CblasTrans : CblasConjTrans;
}

// Bytes a column-major rows x cols matrix with leading dimension ld spans,
// repeated `batch` times `stride` (>= 0) elements apart; 0 when it is empty,
// UINT64_MAX when it exceeds any address space (no device range holds it).
template <typename T>
inline uint64_t MatrixBytes(int rows, int cols, int ld, long long stride, int batch) {
  if (rows == 0 || cols == 0 || batch == 0) return 0;
  using Wide = unsigned __int128;
  const Wide one = static_cast<Wide>(cols - 1) * static_cast<Wide>(ld) + static_cast<Wide>(rows);
  const Wide all = (static_cast<Wide>(batch - 1) * static_cast<Wide>(stride) + one) * sizeof(T);
  return all > static_cast<Wide>(UINT64_MAX) ? UINT64_MAX : static_cast<uint64_t>(all);
}

// A cuBLAS scalar: its value (host pointer mode, read at the call) or where
// it lives in device memory (read when the operation runs, as on a GPU).
template <typename T>
struct Scalar {
  const T* device = nullptr;
  T value{};
  T Get() const { return device != nullptr ? *device : value; }
};

inline void Gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                  const float* a, int lda, const float* b, int ldb, float beta, float* c,
                  int ldc) {
  cblas_sgemm(CblasColMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
inline void Gemm1(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
                  const double* a, int lda, const double* b, int ldb, double beta, double* c,
                  int ldc) {
  cblas_dgemm(CblasColMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// One log line per refused type combination.
inline cublasStatus_t RefuseTypes(const std::string& what, const char* supported) {
  static std::mutex mu;
  static std::set<std::string>* logged = new std::set<std::string>();
  std::lock_guard<std::mutex> lock(mu);
  if (logged->insert(what).second) {
    REVENANT_LOG(WARNING, kLog) << what << " are not supported by the host backend (it runs "
                                << supported << "): CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return CUBLAS_STATUS_NOT_SUPPORTED;
}

// OpenBLAS runs on the stream's worker thread: its own thread pool would
// only compete with the other streams (and spin).
inline void SingleThreadedBlas() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

inline cublasStatus_t Unreachable(const char* api, const std::string& what) {
  REVENANT_LOG(WARNING, kLog) << api << ": " << what;
  return CUBLAS_STATUS_EXECUTION_FAILED;
}

}  // namespace blas_internal
}  // namespace host
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_HOST_HOST_BLAS_INTERNAL_H_
