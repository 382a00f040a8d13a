// The cuBLAS handle registry and checks (blas_checks.h) and the cuBLAS rows
// answered in the shim (cublasGetStatusString/Name).
#include <cublas_api.h>

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "api/blas_args.h"
#include "common/logging.h"
#include "shim/blas_checks.h"
#include "shim/runtime.h"
#include "shim/call.h"

namespace revenant {
namespace shim {
namespace {

struct Registry {
  std::mutex mu;
  // Live handles -> whether their pointer mode is CUBLAS_POINTER_MODE_DEVICE.
  absl::flat_hash_map<cublasHandle_t, bool> device_pointers;
  // Live handles -> their math mode, once the shim knows it (the agent's
  // answer to cublasGetMathMode, or a cublasSetMathMode this process sent).
  absl::flat_hash_map<cublasHandle_t, int> math_modes;
};

Registry& Handles() {
  static Registry* r = new Registry();  // never destroyed: used until exit
  return *r;
}

int32_t Invalid(const char* why) {
  REVENANT_LOG(DEBUG, "shim") << "cuBLAS call refused: " << why;
  return CUBLAS_STATUS_INVALID_VALUE;
}

}  // namespace

void BlasHandleCreated(cublasHandle_t handle) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  r.device_pointers[handle] = false;  // cuBLAS starts in CUBLAS_POINTER_MODE_HOST
}

void BlasHandleGone(cublasHandle_t handle) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  r.device_pointers.erase(handle);
  r.math_modes.erase(handle);
}

void BlasNoteMathMode(cublasHandle_t handle, int mode) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.device_pointers.contains(handle)) r.math_modes[handle] = mode;
}

bool BlasAnswerMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (mode == nullptr || !ShimAnswers()) return false;
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.math_modes.find(handle);
  if (it == r.math_modes.end()) return false;
  *mode = static_cast<cublasMath_t>(it->second);
  return true;
}

void BlasNotePointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.device_pointers.find(handle);
  if (it != r.device_pointers.end()) it->second = mode == CUBLAS_POINTER_MODE_DEVICE;
}

bool BlasDevicePointers(cublasHandle_t handle) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.device_pointers.find(handle);
  return it != r.device_pointers.end() && it->second;
}

size_t BlasScalarSize(cublasComputeType_t compute_type, cudaDataType c_type) {
  const bool complex = c_type == CUDA_C_16F || c_type == CUDA_C_16BF || c_type == CUDA_C_32F ||
                       c_type == CUDA_C_64F || c_type == CUDA_C_8I || c_type == CUDA_C_32I;
  size_t size = 0;
  switch (compute_type) {
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      size = 2;
      break;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      size = 4;
      break;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      size = 8;
      break;
    default:
      return 0;
  }
  return complex ? 2 * size : size;
}

int32_t BlasCheckHandle(cublasHandle_t handle) {
  Registry& r = Handles();
  std::lock_guard<std::mutex> lock(r.mu);
  if (handle == nullptr || !r.device_pointers.contains(handle)) {
    REVENANT_LOG(DEBUG, "shim") << "cuBLAS call refused: " << (handle ? "unknown" : "null")
                                << " handle";
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  const int base = static_cast<int>(mode) & ~static_cast<int>(CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
  if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH && base != CUBLAS_PEDANTIC_MATH &&
      base != CUBLAS_TF32_TENSOR_OP_MATH) {
    return Invalid("unknown math mode");
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckPointerMode(cublasHandle_t handle, cublasPointerMode_t mode) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  if (mode != CUBLAS_POINTER_MODE_HOST && mode != CUBLAS_POINTER_MODE_DEVICE) {
    return Invalid("unknown pointer mode");
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckGemm(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                      int m, int n, int k, int lda, int ldb, int ldc, int batch_count,
                      const void* alpha, const void* beta) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  if (api::GemmArgsStatus(transa, transb, m, n, k, lda, ldb, ldc, batch_count) != 0) {
    return Invalid("bad operation, size or leading dimension");
  }
  if (alpha == nullptr || beta == nullptr) return Invalid("null scalar");
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                        cublasOperation_t transb, int m, int n, int k, int lda, int ldb, int ldc,
                        int batch_count, const void* alpha, const void* beta,
                        cublasComputeType_t compute_type, cudaDataType c_type) {
  if (int32_t s = BlasCheckGemm(handle, transa, transb, m, n, k, lda, ldb, ldc, batch_count,
                                alpha, beta)) {
    return s;
  }
  if (BlasScalarSize(compute_type, c_type) == 0) return Invalid("unknown compute type");
  return CUBLAS_STATUS_SUCCESS;
}

bool BlasGemmExSendAsync(cudaDataType a_type, cudaDataType b_type, cudaDataType c_type,
                         cublasComputeType_t compute_type, cublasGemmAlgo_t algo) {
  if (a_type != b_type) return false;
  if (algo != CUBLAS_GEMM_DEFAULT && algo != CUBLAS_GEMM_DEFAULT_TENSOR_OP) return false;
  Runtime* rt = Runtime::Get();
  if (rt->Channel() == nullptr) return false;
  const bool host = rt->agent().backend != "cuda";
  switch (compute_type) {
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return a_type == CUDA_R_64F && c_type == CUDA_R_64F;
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
      if (a_type == CUDA_R_32F) return c_type == CUDA_R_32F;
      if (host) return false;
      return (a_type == CUDA_R_16F || a_type == CUDA_R_16BF) &&
             (c_type == a_type || c_type == CUDA_R_32F);
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return !host && a_type == CUDA_R_32F && c_type == CUDA_R_32F;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return !host && a_type == CUDA_R_16F && c_type == CUDA_R_16F;
    default:
      return false;
  }
}

int32_t BlasCheckGemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n, int lda,
                      int incx, int incy, const void* alpha, const void* beta) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  if (api::GemvArgsStatus(trans, m, n, lda, incx, incy) != 0) {
    return Invalid("bad operation, size, leading dimension or increment");
  }
  if (alpha == nullptr || beta == nullptr) return Invalid("null scalar");
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckDot(cublasHandle_t handle, const void* result) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  if (result == nullptr) return Invalid("null result");
  return CUBLAS_STATUS_SUCCESS;
}

int32_t BlasCheckTrsm(cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo,
                      cublasOperation_t trans, cublasDiagType_t diag, int m, int n, int lda,
                      int ldb, const void* alpha) {
  if (int32_t s = BlasCheckHandle(handle)) return s;
  if (api::TrsmArgsStatus(side, uplo, trans, diag, m, n, lda, ldb) != 0) {
    return Invalid("bad side, fill mode, operation, diagonal, size or leading dimension");
  }
  if (alpha == nullptr) return Invalid("null scalar");
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace shim
}  // namespace revenant

namespace {

struct StatusText {
  cublasStatus_t status;
  const char* name;
  const char* text;
};

constexpr StatusText kStatusTexts[] = {
    {CUBLAS_STATUS_SUCCESS, "CUBLAS_STATUS_SUCCESS", "the operation completed successfully"},
    {CUBLAS_STATUS_NOT_INITIALIZED, "CUBLAS_STATUS_NOT_INITIALIZED",
     "the library was not initialized"},
    {CUBLAS_STATUS_ALLOC_FAILED, "CUBLAS_STATUS_ALLOC_FAILED", "the resource allocation failed"},
    {CUBLAS_STATUS_INVALID_VALUE, "CUBLAS_STATUS_INVALID_VALUE",
     "an invalid numeric value was used as an argument"},
    {CUBLAS_STATUS_ARCH_MISMATCH, "CUBLAS_STATUS_ARCH_MISMATCH",
     "an absent device architectural feature is required"},
    {CUBLAS_STATUS_MAPPING_ERROR, "CUBLAS_STATUS_MAPPING_ERROR",
     "an access to GPU memory space failed"},
    {CUBLAS_STATUS_EXECUTION_FAILED, "CUBLAS_STATUS_EXECUTION_FAILED",
     "the GPU program failed to execute"},
    {CUBLAS_STATUS_INTERNAL_ERROR, "CUBLAS_STATUS_INTERNAL_ERROR",
     "an internal operation failed"},
    {CUBLAS_STATUS_NOT_SUPPORTED, "CUBLAS_STATUS_NOT_SUPPORTED",
     "the functionality requested is not supported"},
    {CUBLAS_STATUS_LICENSE_ERROR, "CUBLAS_STATUS_LICENSE_ERROR",
     "the functionality requested requires some license"},
};

const StatusText* FindStatus(cublasStatus_t status) {
  for (const StatusText& t : kStatusTexts)
    if (t.status == status) return &t;
  return nullptr;
}

}  // namespace

extern "C" REVENANT_EXPORT const char* cublasGetStatusName(cublasStatus_t status) {
  const StatusText* t = FindStatus(status);
  return t != nullptr ? t->name : "CUBLAS_STATUS_UNKNOWN";
}

extern "C" REVENANT_EXPORT const char* cublasGetStatusString(cublasStatus_t status) {
  const StatusText* t = FindStatus(status);
  return t != nullptr ? t->text : "unknown error";
}
