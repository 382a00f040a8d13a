// CudaDnn: the real libcudnn.so.9, loaded into the agent on first use.
//
//   CudaDnn dnn;
//   if (dnn.Load()) dnn.cudnnCreate(&handle);   // the library's own function
//
// cuDNN carries the CUDA runtime statically and drives the GPU itself, so it
// runs here, next to the memory it addresses; the application's cuDNN calls
// reach it through the API table's cuDNN rows (api/cudnn.textproto). It is
// dlopen'ed, not linked: an agent that serves no cuDNN call never loads it
// (with its engine sub-libraries, over a GiB), and one started where it is
// missing answers the rows with CUDNN_STATUS_NOT_INITIALIZED and one log line.
//
// Thread safety: Load may be called from several threads; the function
// pointers are set once, before Load first returns true.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_DNN_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_DNN_H_

#include <cudnn.h>

#include <mutex>

#include "api/library_rows.h"

namespace revenant {
namespace agent {
namespace cuda {

class CudaDnn {
 public:
  // Loads the library and resolves every function below once; false (and
  // one log line) when the library or one of its functions is missing.
  bool Load();

  // The rows with a generated dispatcher, then those the agent's hooks
  // (agent/hooks_cudnn.cc) reach through the Backend.
#define REVENANT_CUDA_DNN_POINTER(name, params, args) cudnnStatus_t (*name) params = nullptr;
  REVENANT_CUDNN_ROWS(REVENANT_CUDA_DNN_POINTER)
#undef REVENANT_CUDA_DNN_POINTER
  size_t (*cudnnGetVersion)() = nullptr;
  size_t (*cudnnGetCudartVersion)() = nullptr;
  void (*cudnnGetLastErrorString)(char* message, size_t max_size) = nullptr;
  cudnnStatus_t (*cudnnBackendSetAttribute)(cudnnBackendDescriptor_t descriptor,
                                            cudnnBackendAttributeName_t attributeName,
                                            cudnnBackendAttributeType_t attributeType,
                                            int64_t elementCount,
                                            const void* arrayOfElements) = nullptr;
  cudnnStatus_t (*cudnnBackendGetAttribute)(cudnnBackendDescriptor_t const descriptor,
                                            cudnnBackendAttributeName_t attributeName,
                                            cudnnBackendAttributeType_t attributeType,
                                            int64_t requestedElementCount,
                                            int64_t* elementCount,
                                            void* arrayOfElements) = nullptr;

 private:
  std::once_flag once_;
  bool loaded_ = false;
};

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_DNN_H_
