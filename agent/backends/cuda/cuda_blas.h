// CudaBlas: the real libcublas.so.13, loaded into the agent on first use.
//
//   CudaBlas blas;
//   if (blas.Load()) blas.cublasSgemm_v2(handle, ...);   // the library's own function
//
// cuBLAS carries the CUDA runtime statically and drives the GPU itself, so
// it runs here, next to the memory it addresses; the application's cuBLAS
// calls reach it through the API table's cuBLAS rows (api/cublas.textproto).
// It is dlopen'ed, not linked: an agent that serves no cuBLAS call never
// loads the library (hundreds of MiB with libcublasLt), and one started
// where it is missing answers the rows with CUBLAS_STATUS_NOT_INITIALIZED
// and one log line.
//
// Thread safety: Load may be called from several threads; the function
// pointers are set once, before Load first returns true.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_BLAS_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_BLAS_H_

#include <cublasLt.h>
#include <cublas_api.h>

#include <mutex>

#include "api/library_rows.h"

namespace revenant {
namespace agent {
namespace cuda {

class CudaBlas {
 public:
  // Loads the library and resolves every row's function once; false (and
  // one log line) when the library or one of its functions is missing.
  bool Load();

#define REVENANT_CUDA_BLAS_POINTER(name, params, args) cublasStatus_t (*name) params = nullptr;
  REVENANT_CUBLAS_ROWS(REVENANT_CUDA_BLAS_POINTER)
#undef REVENANT_CUDA_BLAS_POINTER

 private:
  std::once_flag once_;
  bool loaded_ = false;
};

// CudaBlasLt: the real libcublasLt.so.13, alike (the API table's cuBLASLt
// rows, api/cublaslt.textproto); CUBLAS_STATUS_NOT_INITIALIZED and one log
// line where it is missing.
class CudaBlasLt {
 public:
  bool Load();

#define REVENANT_CUDA_BLASLT_POINTER(name, params, args) cublasStatus_t (*name) params = nullptr;
  REVENANT_CUBLASLT_ROWS(REVENANT_CUDA_BLASLT_POINTER)
#undef REVENANT_CUDA_BLASLT_POINTER

 private:
  std::once_flag once_;
  bool loaded_ = false;
};

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_BLAS_H_
