#include "agent/backends/cuda/cuda_dnn.h"

#include <dlfcn.h>

#include <type_traits>

#include "common/logging.h"

namespace revenant {
namespace agent {
namespace cuda {

namespace {
constexpr char kLibrary[] = "libcudnn.so.9";
}  // namespace

bool CudaDnn::Load() {
  std::call_once(once_, [this] {
    void* lib = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      REVENANT_LOG(ERROR, "cuda-backend")
          << "cannot load " << kLibrary << " (" << dlerror()
          << "): cuDNN calls answer CUDNN_STATUS_NOT_INITIALIZED";
      return;
    }
    bool ok = true;
    auto resolve = [&](auto** fn, const char* name) {
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, name));
      if (*fn == nullptr) {
        REVENANT_LOG(ERROR, "cuda-backend")
            << kLibrary << " has no " << name
            << ": cuDNN calls answer CUDNN_STATUS_NOT_INITIALIZED";
        ok = false;
      }
    };
#define REVENANT_CUDA_DNN_RESOLVE(fn, params, args) resolve(&fn, #fn);
    REVENANT_CUDNN_ROWS(REVENANT_CUDA_DNN_RESOLVE)
#undef REVENANT_CUDA_DNN_RESOLVE
    resolve(&cudnnGetVersion, "cudnnGetVersion");
    resolve(&cudnnGetCudartVersion, "cudnnGetCudartVersion");
    resolve(&cudnnGetLastErrorString, "cudnnGetLastErrorString");
    resolve(&cudnnBackendSetAttribute, "cudnnBackendSetAttribute");
    resolve(&cudnnBackendGetAttribute, "cudnnBackendGetAttribute");
    // The library stays loaded for the agent's life (handles point into it).
    loaded_ = ok;
  });
  return loaded_;
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
