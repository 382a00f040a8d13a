#include "agent/backends/cuda/cuda_blas.h"

#include <dlfcn.h>

#include "common/logging.h"

namespace revenant {
namespace agent {
namespace cuda {

namespace {
constexpr char kLibrary[] = "libcublas.so.13";
constexpr char kLtLibrary[] = "libcublasLt.so.13";
}  // namespace

bool CudaBlas::Load() {
  std::call_once(once_, [this] {
    void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      REVENANT_LOG(ERROR, "cuda-backend")
          << "cannot load " << kLibrary << " (" << dlerror()
          << "): cuBLAS calls answer CUBLAS_STATUS_NOT_INITIALIZED";
      return;
    }
    bool ok = true;
#define REVENANT_CUDA_BLAS_RESOLVE(fn, params, args)                                      \
  fn = reinterpret_cast<decltype(fn)>(dlsym(lib, #fn));                                   \
  if (fn == nullptr) {                                                                    \
    REVENANT_LOG(ERROR, "cuda-backend") << kLibrary << " has no " #fn                     \
                                        << ": cuBLAS calls answer CUBLAS_STATUS_NOT_INITIALIZED"; \
    ok = false;                                                                           \
  }
    REVENANT_CUBLAS_ROWS(REVENANT_CUDA_BLAS_RESOLVE)
#undef REVENANT_CUDA_BLAS_RESOLVE
    // The library stays loaded for the agent's life (handles point into it).
    loaded_ = ok;
  });
  return loaded_;
}

bool CudaBlasLt::Load() {
  std::call_once(once_, [this] {
    void* lib = dlopen(kLtLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      REVENANT_LOG(ERROR, "cuda-backend")
          << "cannot load " << kLtLibrary << " (" << dlerror()
          << "): cuBLASLt calls answer CUBLAS_STATUS_NOT_INITIALIZED";
      return;
    }
    bool ok = true;
#define REVENANT_CUDA_BLASLT_RESOLVE(fn, params, args)                                      \
  fn = reinterpret_cast<decltype(fn)>(dlsym(lib, #fn));                                     \
  if (fn == nullptr) {                                                                      \
    REVENANT_LOG(ERROR, "cuda-backend") << kLtLibrary << " has no " #fn                     \
                                        << ": cuBLASLt calls answer CUBLAS_STATUS_NOT_INITIALIZED"; \
    ok = false;                                                                             \
  }
    REVENANT_CUBLASLT_ROWS(REVENANT_CUDA_BLASLT_RESOLVE)
#undef REVENANT_CUDA_BLASLT_RESOLVE
    // The library stays loaded for the agent's life (handles point into it).
    loaded_ = ok;
  });
  return loaded_;
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
