// The cuDNN rows on the host backend, which has no cuDNN (host_backend.h
// says what works and what is refused). Bad input gets the codes cuDNN 9.19
// answers (null out-pointers of the handle functions CUDNN_STATUS_BAD_PARAM,
// an unknown descriptor type CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED).
#include <cudnn.h>

#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "agent/backends/host/host_backend.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

constexpr char kLog[] = "host-backend";

}  // namespace

cudnnStatus_t HostBackend::DnnFail(cudnnStatus_t status, const std::string& message) {
  std::lock_guard<std::mutex> lock(mu_);
  dnn_last_error_ = message;
  return status;
}

cudnnStatus_t HostBackend::DnnNotSupported(const char* api) {
  const std::string message =
      absl::StrCat(api, ": the host backend has no cuDNN (CUDNN_STATUS_NOT_SUPPORTED); run with "
                        "--backend=cuda for cuDNN computations");
  {
    static std::mutex logged_mu;
    static std::set<std::string>* logged = new std::set<std::string>();
    std::lock_guard<std::mutex> lock(logged_mu);
    if (logged->insert(api).second) {
      REVENANT_LOG(WARNING, kLog) << message;
    }
  }
  return DnnFail(CUDNN_STATUS_NOT_SUPPORTED, message);
}

size_t HostBackend::DnnGetVersion() { return CUDNN_VERSION; }

size_t HostBackend::DnnGetCudartVersion() { return CUDART_VERSION; }

void HostBackend::DnnGetLastErrorString(char* message, size_t max_size) {
  std::lock_guard<std::mutex> lock(mu_);
  std::snprintf(message, max_size, "%s", dnn_last_error_.c_str());
}

cudnnStatus_t HostBackend::cudnnGetProperty(libraryPropertyType type, int* value) {
  if (value == nullptr) {
    return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty: value is null");
  }
  switch (type) {
    case MAJOR_VERSION: *value = CUDNN_MAJOR; return CUDNN_STATUS_SUCCESS;
    case MINOR_VERSION: *value = CUDNN_MINOR; return CUDNN_STATUS_SUCCESS;
    case PATCH_LEVEL: *value = CUDNN_PATCHLEVEL; return CUDNN_STATUS_SUCCESS;
    default:
      return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnGetProperty: unknown property type");
  }
}

cudnnStatus_t HostBackend::cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) {
    return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: handle is null");
  }
  auto h = std::make_unique<DnnHandle>();
  std::lock_guard<std::mutex> lock(mu_);
  *handle = reinterpret_cast<cudnnHandle_t>(h.get());
  dnn_handles_[h.get()] = std::move(h);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t HostBackend::cudnnDestroy(cudnnHandle_t handle) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dnn_handles_.erase(reinterpret_cast<DnnHandle*>(handle)) > 0) return CUDNN_STATUS_SUCCESS;
  }
  return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live cuDNN handle");
}

cudnnStatus_t HostBackend::cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = dnn_handles_.find(reinterpret_cast<DnnHandle*>(handle));
    if (it != dnn_handles_.end()) {
      if (ResolveStream(streamId) != nullptr) {
        it->second->stream = streamId;
        return CUDNN_STATUS_SUCCESS;
      }
    } else {
      dnn_last_error_ = "cudnnSetStream: not a live cuDNN handle";
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: not a live stream");
}

cudnnStatus_t HostBackend::cudnnGetStream(cudnnHandle_t handle, cudaStream_t* streamId) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = dnn_handles_.find(reinterpret_cast<DnnHandle*>(handle));
    if (it != dnn_handles_.end() && streamId != nullptr) {
      *streamId = it->second->stream;
      return CUDNN_STATUS_SUCCESS;
    }
    if (it == dnn_handles_.end()) {
      dnn_last_error_ = "cudnnGetStream: not a live cuDNN handle";
      return CUDNN_STATUS_BAD_PARAM;
    }
  }
  return DnnFail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: streamId is null");
}

cudnnStatus_t HostBackend::cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t descriptorType,
                                                        cudnnBackendDescriptor_t* descriptor) {
  if (descriptor == nullptr) {
    return DnnFail(CUDNN_STATUS_BAD_PARAM_NULL_POINTER,
                   "cudnnBackendCreateDescriptor: descriptor is null");
  }
  if (static_cast<int>(descriptorType) < CUDNN_BACKEND_POINTWISE_DESCRIPTOR ||
      static_cast<int>(descriptorType) > CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR) {
    // cuDNN 9.19's answer to an unknown type.
    return DnnFail(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED,
                   absl::StrCat("cudnnBackendCreateDescriptor: unknown descriptor type ",
                                static_cast<int>(descriptorType)));
  }
  auto d = std::make_unique<DnnDescriptor>();
  d->type = descriptorType;
  std::lock_guard<std::mutex> lock(mu_);
  *descriptor = reinterpret_cast<cudnnBackendDescriptor_t>(d.get());
  dnn_descriptors_[d.get()] = std::move(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t HostBackend::cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (dnn_descriptors_.erase(reinterpret_cast<DnnDescriptor*>(descriptor)) > 0)
      return CUDNN_STATUS_SUCCESS;
  }
  return DnnFail(CUDNN_STATUS_BAD_PARAM,
                 "cudnnBackendDestroyDescriptor: not a live backend descriptor");
}

cudnnStatus_t HostBackend::cudnnBackendFinalize(cudnnBackendDescriptor_t) {
  return DnnNotSupported("cudnnBackendFinalize");
}

cudnnStatus_t HostBackend::cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t,
                                               cudnnBackendDescriptor_t) {
  return DnnNotSupported("cudnnBackendExecute");
}

cudnnStatus_t HostBackend::DnnBackendSetAttribute(cudnnBackendDescriptor_t,
                                                  cudnnBackendAttributeName_t,
                                                  cudnnBackendAttributeType_t, int64_t,
                                                  const void*) {
  return DnnNotSupported("cudnnBackendSetAttribute");
}

cudnnStatus_t HostBackend::DnnBackendGetAttribute(cudnnBackendDescriptor_t,
                                                  cudnnBackendAttributeName_t,
                                                  cudnnBackendAttributeType_t, int64_t,
                                                  int64_t*, void*) {
  return DnnNotSupported("cudnnBackendGetAttribute");
}

cudnnStatus_t HostBackend::DnnCreateLegacy(api::HandleKind kind, void** desc) {
  if (desc == nullptr) return DnnFail(CUDNN_STATUS_BAD_PARAM, "a descriptor out-pointer is null");
  auto d = std::make_unique<DnnLegacyDescriptor>();
  d->kind = kind;
  std::lock_guard<std::mutex> lock(mu_);
  *desc = d.get();
  dnn_legacy_[d.get()] = std::move(d);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t HostBackend::DnnDestroyLegacy(api::HandleKind kind, void* desc, const char* api) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = dnn_legacy_.find(static_cast<DnnLegacyDescriptor*>(desc));
    if (it != dnn_legacy_.end() && it->second->kind == kind) {
      dnn_legacy_.erase(it);
      return CUDNN_STATUS_SUCCESS;
    }
  }
  return DnnFail(CUDNN_STATUS_BAD_PARAM, absl::StrCat(api, ": not a live descriptor of its kind"));
}

#define REVENANT_HOST_DNN_LEGACY(Name, Kind)                                                    \
  cudnnStatus_t HostBackend::cudnnCreate##Name##Descriptor(cudnn##Name##Descriptor_t* desc) {  \
    return DnnCreateLegacy(api::HandleKind::Kind, reinterpret_cast<void**>(desc));             \
  }                                                                                             \
  cudnnStatus_t HostBackend::cudnnDestroy##Name##Descriptor(cudnn##Name##Descriptor_t desc) {  \
    return DnnDestroyLegacy(api::HandleKind::Kind, desc, "cudnnDestroy" #Name "Descriptor");   \
  }
REVENANT_HOST_DNN_LEGACY(Tensor, kDnnTensor)
REVENANT_HOST_DNN_LEGACY(Filter, kDnnFilter)
REVENANT_HOST_DNN_LEGACY(Convolution, kDnnConvolution)
REVENANT_HOST_DNN_LEGACY(Activation, kDnnActivation)
REVENANT_HOST_DNN_LEGACY(Pooling, kDnnPooling)
REVENANT_HOST_DNN_LEGACY(Dropout, kDnnDropout)
REVENANT_HOST_DNN_LEGACY(RNN, kDnnRnn)
REVENANT_HOST_DNN_LEGACY(RNNData, kDnnRnnData)
REVENANT_HOST_DNN_LEGACY(CTCLoss, kDnnCtcLoss)
REVENANT_HOST_DNN_LEGACY(SpatialTransformer, kDnnSpatialTransformer)
#undef REVENANT_HOST_DNN_LEGACY

// What a legacy descriptor holds is cuDNN's: setting and reading it needs the
// library.
cudnnStatus_t HostBackend::cudnnSetTensorNdDescriptor(cudnnTensorDescriptor_t, cudnnDataType_t,
                                                      int, const int*, const int*) {
  return DnnNotSupported("cudnnSetTensorNdDescriptor");
}
cudnnStatus_t HostBackend::cudnnGetTensorNdDescriptor(const cudnnTensorDescriptor_t, int,
                                                      cudnnDataType_t*, int*, int*, int*) {
  return DnnNotSupported("cudnnGetTensorNdDescriptor");
}
cudnnStatus_t HostBackend::cudnnSetFilterNdDescriptor(cudnnFilterDescriptor_t, cudnnDataType_t,
                                                      cudnnTensorFormat_t, int, const int*) {
  return DnnNotSupported("cudnnSetFilterNdDescriptor");
}
cudnnStatus_t HostBackend::cudnnGetFilterNdDescriptor(const cudnnFilterDescriptor_t, int,
                                                      cudnnDataType_t*, cudnnTensorFormat_t*,
                                                      int*, int*) {
  return DnnNotSupported("cudnnGetFilterNdDescriptor");
}
cudnnStatus_t HostBackend::cudnnSetConvolutionNdDescriptor(cudnnConvolutionDescriptor_t, int,
                                                           const int*, const int*, const int*,
                                                           cudnnConvolutionMode_t,
                                                           cudnnDataType_t) {
  return DnnNotSupported("cudnnSetConvolutionNdDescriptor");
}
cudnnStatus_t HostBackend::cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t, int) {
  return DnnNotSupported("cudnnSetConvolutionGroupCount");
}
cudnnStatus_t HostBackend::cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t,
                                                       cudnnMathType_t) {
  return DnnNotSupported("cudnnSetConvolutionMathType");
}
cudnnStatus_t HostBackend::cudnnSetActivationDescriptor(cudnnActivationDescriptor_t,
                                                        cudnnActivationMode_t,
                                                        cudnnNanPropagation_t, double) {
  return DnnNotSupported("cudnnSetActivationDescriptor");
}

}  // namespace host
}  // namespace agent
}  // namespace revenant
