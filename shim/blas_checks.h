// cuBLAS state and checks the shim keeps (shim_check / shim_done / device_if
// of the rows in api/cublas.textproto).
//
// The shim knows every cuBLAS handle this process holds and its pointer mode:
//   - the pointer mode decides how alpha/beta (and a dot's result) travel:
//     by value in the request (CUBLAS_POINTER_MODE_HOST) or as a device
//     address the agent resolves (CUBLAS_POINTER_MODE_DEVICE);
//   - the asynchronous rows (GEMM, GEMV, setters) still fail at the call, with
//     cuBLAS's own codes, for what the application can get wrong locally:
//     a null or destroyed handle (CUBLAS_STATUS_NOT_INITIALIZED); a bad
//     operation, math or pointer mode, negative sizes, leading dimensions too
//     small, zero increments, a null scalar, an unknown compute type
//     (CUBLAS_STATUS_INVALID_VALUE).
// Errors only the agent can see (an unsupported type on the host backend)
// come back from the SYNC rows; a failure of an ASYNC row in the agent
// becomes a CUDA error of the next synchronizing call, as a faulting cuBLAS
// kernel's would.
//
// Thread safety: the handle registry is process-wide and locked.
#ifndef REVENANT_SHIM_BLAS_CHECKS_H_
#define REVENANT_SHIM_BLAS_CHECKS_H_

#include <cublas_api.h>

#include <cstddef>
#include <cstdint>

namespace revenant {
namespace shim {

// Handles this process holds (the agent's virtual ids), pointer mode host.
void BlasHandleCreated(cublasHandle_t handle);
void BlasHandleGone(cublasHandle_t handle);
void BlasNotePointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
// A live handle's math mode: kept from the agent's answer to
// cublasGetMathMode and from each cublasSetMathMode this process sent (its
// mode checked at the call); BlasAnswerMathMode writes it and returns true
// once known (REVENANT_SHIM_ANSWERS on), else false (ask the agent). PyTorch
// reads it around every cuBLAS matmul.
void BlasNoteMathMode(cublasHandle_t handle, int mode);
bool BlasAnswerMathMode(cublasHandle_t handle, cublasMath_t* mode);
// Whether the handle's scalars are device pointers (false for an unknown
// handle, whose call the checks refuse first).
bool BlasDevicePointers(cublasHandle_t handle);

// Byte size of one alpha/beta scalar of cublasGemmEx and friends: the
// compute type's scalar (complex when the output type is); 0 when unknown.
size_t BlasScalarSize(cublasComputeType_t compute_type, cudaDataType c_type);

// Each returns 0 (CUBLAS_STATUS_SUCCESS) or the status cuBLAS would.
int32_t BlasCheckHandle(cublasHandle_t handle);
int32_t BlasCheckMathMode(cublasHandle_t handle, cublasMath_t mode);
int32_t BlasCheckPointerMode(cublasHandle_t handle, cublasPointerMode_t mode);
int32_t BlasCheckGemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                      int m, int n, int k, int lda, int ldb, int ldc, int batch_count,
                      const void* alpha, const void* beta);
int32_t BlasCheckGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                        cublasOperation_t transb, int m, int n, int k, int lda, int ldb, int ldc,
                        int batch_count, const void* alpha, const void* beta,
                        cublasComputeType_t compute_type, cudaDataType c_type);
// cublasGemmEx / cublasGemmStridedBatchedEx need no reply (their success is
// the shim's checks' and this type combination's): Atype = Btype, and
// (Atype, Ctype, computeType) one of the real combinations cuBLAS documents
// for cublasGemmEx that the backend runs (the host backend: fp32 and fp64
// only), with the default algorithm. Other combinations wait for the agent,
// which answers the library's own status.
bool BlasGemmExSendAsync(cudaDataType a_type, cudaDataType b_type, cudaDataType c_type,
                         cublasComputeType_t compute_type, cublasGemmAlgo_t algo);
int32_t BlasCheckGemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, int lda,
                      int incx, int incy, const void* alpha, const void* beta);
int32_t BlasCheckDot(cublasHandle_t handle, const void* result);
int32_t BlasCheckTrsm(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                      cublasOperation_t trans, cublasDiagType_t diag, int m, int n, int lda,
                      int ldb, const void* alpha);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_BLAS_CHECKS_H_
