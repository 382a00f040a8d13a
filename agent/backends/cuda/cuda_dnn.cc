#include "agent/backends/cuda/cuda_dnn.h"

#include <dlfcn.h>

#include <type_traits>

#include "common/logging.h"

namespace revenant {
namespace agent {
namespace cuda {

namespace {
constexpr char kLibrary[] = "libcudnn.so.9";

// Out-pointers cuDNN dereferences unchecked (a request built without the
// shim could carry a null one): refused here, so the agent never faults.
cudnnStatus_t (*real_create_descriptor)(cudnnBackendDescriptorType_t,
                                        cudnnBackendDescriptor_t*) = nullptr;
cudnnStatus_t (*real_get_stream)(cudnnHandle_t, cudaStream_t*) = nullptr;
cudnnStatus_t CreateDescriptorChecked(cudnnBackendDescriptorType_t type,
                                      cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  return real_create_descriptor(type, descriptor);
}
cudnnStatus_t GetStreamChecked(cudnnHandle_t handle, cudaStream_t* stream) {
  if (stream == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return real_get_stream(handle, stream);
}
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
    if (ok) {
      real_create_descriptor = cudnnBackendCreateDescriptor;
      cudnnBackendCreateDescriptor = &CreateDescriptorChecked;
      real_get_stream = cudnnGetStream;
      cudnnGetStream = &GetStreamChecked;
    }
    // The library stays loaded for the agent's life (handles point into it).
    loaded_ = ok;
  });
  return loaded_;
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
