// cuBLAS's argument rules, shared by the shim's checks at the call
// (shim/blas_checks.h) and the agent's backends, so both answer a bad call
// with the status cuBLAS gives it. Header-only: the shim links no agent code.
//
//   if (int32_t s = api::GemmArgsStatus(transa, transb, m, n, k, lda, ldb, ldc, 1)) return s;
#ifndef REVENANT_API_BLAS_ARGS_H_
#define REVENANT_API_BLAS_ARGS_H_

#include <cublas_api.h>

#include <cstdint>

namespace revenant {
namespace api {

inline bool ValidBlasOp(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// GEMM families (column-major: op(A) is m x k, op(B) k x n, C m x n):
// CUBLAS_STATUS_INVALID_VALUE for an unknown operation, a negative size or
// batch count, or a leading dimension below max(1, rows).
inline int32_t GemmArgsStatus(cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                              int k, int lda, int ldb, int ldc, int batch_count) {
  auto max1 = [](int v) { return v > 1 ? v : 1; };
  if (!ValidBlasOp(transa) || !ValidBlasOp(transb)) return CUBLAS_STATUS_INVALID_VALUE;
  if (m < 0 || n < 0 || k < 0 || batch_count < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int rows_a = transa == CUBLAS_OP_N ? m : k;
  const int rows_b = transb == CUBLAS_OP_N ? k : n;
  if (lda < max1(rows_a) || ldb < max1(rows_b) || ldc < max1(m)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// GEMV: an unknown operation, a negative size or lda below max(1, m). A zero
// increment is accepted, as cuBLAS 13 does (measured on the H200: Sgemv with
// incx = 0 returns CUBLAS_STATUS_SUCCESS); the host backend refuses it when
// the operation runs (HostBackend::Gemv).
inline int32_t GemvArgsStatus(cublasOperation_t trans, int m, int n, int lda, int incx,
                              int incy) {
  (void)incx;
  (void)incy;
  if (!ValidBlasOp(trans) || m < 0 || n < 0) return CUBLAS_STATUS_INVALID_VALUE;
  if (lda < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

// TRSM (op(A) X = alpha B or X op(A) = alpha B, A triangular, B m x n): an
// unknown side, fill mode, operation or diagonal type, a negative size, lda
// below max(1, order of A) or ldb below max(1, m).
inline int32_t TrsmArgsStatus(cublasSideMode_t side, cublasFillMode_t uplo,
                              cublasOperation_t trans, cublasDiagType_t diag, int m, int n,
                              int lda, int ldb) {
  if (side != CUBLAS_SIDE_LEFT && side != CUBLAS_SIDE_RIGHT) return CUBLAS_STATUS_INVALID_VALUE;
  if (uplo != CUBLAS_FILL_MODE_LOWER && uplo != CUBLAS_FILL_MODE_UPPER) return CUBLAS_STATUS_INVALID_VALUE;
  if (diag != CUBLAS_DIAG_NON_UNIT && diag != CUBLAS_DIAG_UNIT) return CUBLAS_STATUS_INVALID_VALUE;
  if (!ValidBlasOp(trans) || m < 0 || n < 0) return CUBLAS_STATUS_INVALID_VALUE;
  const int order = side == CUBLAS_SIDE_LEFT ? m : n;
  if (lda < (order > 1 ? order : 1) || ldb < (m > 1 ? m : 1)) return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace api
}  // namespace revenant

#endif  // REVENANT_API_BLAS_ARGS_H_
