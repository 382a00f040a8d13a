// The cuDNN rows with a hand-written shim side (api/cudnn.textproto): the
// versions (asked of the agent once, then cached), the status strings
// (answered here), the last error message, and the backend API's attribute
// calls, whose element arrays are sized by their attribute type
// (api/dnn_args.h). Requests and replies: api/hook_structs.h.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "api/dnn_args.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "common/logging.h"
#include "shim/call.h"
#include "shim/dnn_checks.h"

namespace revenant {
namespace shim {
namespace {

struct DnnDescriptorInfo {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::vector<int> dims;
};
struct DnnRegistry {
  std::mutex mu;
  absl::flat_hash_map<const void*, DnnDescriptorInfo> descriptors;
  struct Backend {
    int type = -1;
    bool finalized = false;
    // Value-typed reads of the finalized descriptor the agent answered:
    // (name, type, requested, has count, has array) -> the count and the
    // elements it wrote.
    std::map<std::tuple<int, int, int64_t, bool, bool>, std::pair<int64_t, std::string>> reads;
    // A variant pack's unique ids (their bytes), which of its data pointers
    // are null, and whether its workspace is (-1: not set): what cuDNN's
    // Finalize and Execute check of it, apart from the addresses' values.
    std::string uids;
    std::string null_pointers;
    int64_t pointers = -1;  // -1: data pointers not set (unlike a set of none)
    int workspace_null = -1;
    // An execution plan: the variant packs (VariantPackKey) an Execute with
    // it succeeded for in the agent.
    absl::flat_hash_set<std::string> executed;
  };
  absl::flat_hash_map<const void*, Backend> backend;  // live backend descriptors
  // Variant packs (VariantPackKey) a Finalize succeeded for in the agent.
  absl::flat_hash_set<std::string> finalized_packs;
  absl::flat_hash_set<const void*> handles;           // live cudnnHandle_t
};
DnnRegistry& Dnn() {
  static DnnRegistry* r = new DnnRegistry();  // used by atexit-time calls too
  return *r;
}

// The most label ints one CTC request carries (the labels travel in it).
constexpr int64_t kDnnMaxCtcLabels = int64_t{1} << 20;

// Bounds of what the shim learns from the agent's answers.
constexpr size_t kMaxFinalizedPacks = 4096;
constexpr size_t kMaxExecutedPerPlan = 256;

// What the agent's checks of a variant pack depend on; empty while its
// unique ids or data pointers are not set (or their counts differ).
std::string VariantPackKey(const DnnRegistry::Backend& b) {
  if (b.type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR || b.pointers < 0 ||
      static_cast<size_t>(b.pointers) * sizeof(int64_t) != b.uids.size()) {
    return std::string();
  }
  std::string key = b.uids;
  key += b.null_pointers;
  key.push_back(static_cast<char>('0' + b.workspace_null + 1));
  return key;
}

}  // namespace

void DnnNoteDescriptor(const void* desc, cudnnDataType_t type, int nb_dims, const int* dims) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  DnnDescriptorInfo& info = r.descriptors[desc];
  info.type = type;
  info.dims.assign(dims, dims + std::max(0, nb_dims));
}

void DnnHandleCreated(const void* handle) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  r.handles.insert(handle);
}

void DnnHandleGone(const void* handle) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  r.handles.erase(handle);
}

int32_t DnnCheckHandle(const void* handle) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  return handle != nullptr && r.handles.contains(handle) ? CUDNN_STATUS_SUCCESS
                                                         : CUDNN_STATUS_BAD_PARAM;
}

void DnnBackendCreated(const void* desc, int type) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backend.try_emplace(desc, DnnRegistry::Backend{type, false});
}

void DnnBackendFinalized(const void* desc) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  if (it == r.backend.end()) return;
  it->second.finalized = true;
  std::string key = VariantPackKey(it->second);
  if (!key.empty() && r.finalized_packs.size() < kMaxFinalizedPacks) {
    r.finalized_packs.insert(std::move(key));
  }
}

void DnnNoteSetAttribute(const void* desc, int name, int type, int64_t count,
                         const void* elements) {
  if (count < 0 || (count > 0 && elements == nullptr)) return;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  if (it == r.backend.end() || it->second.type != CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR ||
      it->second.finalized) {
    return;
  }
  DnnRegistry::Backend& b = it->second;
  if (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS && type == CUDNN_TYPE_INT64) {
    b.uids.assign(static_cast<const char*>(elements),
                  static_cast<size_t>(count) * sizeof(int64_t));
  } else if (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && type == CUDNN_TYPE_VOID_PTR) {
    b.pointers = count;
    b.null_pointers.assign(static_cast<size_t>(count), '1');
    for (int64_t i = 0; i < count; ++i) {
      if (static_cast<void* const*>(elements)[i] == nullptr) b.null_pointers[i] = '0';
    }
  } else if (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && type == CUDNN_TYPE_VOID_PTR &&
             count == 1) {
    b.workspace_null = *static_cast<void* const*>(elements) == nullptr ? 1 : 0;
  }
}

bool DnnFinalizeSendAsync(const void* desc) {
  if (!ShimAnswers() || desc == nullptr) return false;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  if (it == r.backend.end() || it->second.finalized) return false;
  const std::string key = VariantPackKey(it->second);
  return !key.empty() && r.finalized_packs.contains(key);
}

bool DnnExecuteSendAsync(const void* handle, const void* plan, const void* pack) {
  if (!ShimAnswers() || handle == nullptr || plan == nullptr || pack == nullptr) return false;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.handles.contains(handle)) return false;
  auto p = r.backend.find(plan);
  auto v = r.backend.find(pack);
  if (p == r.backend.end() || v == r.backend.end() || !p->second.finalized ||
      !v->second.finalized || p->second.type != CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    return false;
  }
  const std::string key = VariantPackKey(v->second);
  return !key.empty() && p->second.executed.contains(key);
}

void DnnExecuted(const void* plan, const void* pack) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto p = r.backend.find(plan);
  auto v = r.backend.find(pack);
  if (p == r.backend.end() || v == r.backend.end() ||
      p->second.executed.size() >= kMaxExecutedPerPlan) {
    return;
  }
  std::string key = VariantPackKey(v->second);
  if (!key.empty()) p->second.executed.insert(std::move(key));
}

bool DnnAnswerGetAttribute(const void* desc, int name, int type, int64_t requested,
                           int64_t* count, void* elements) {
  if (!ShimAnswers() || api::DnnElementHandleKind(type) != api::HandleKind::kNone) return false;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  if (it == r.backend.end() || !it->second.finalized) return false;
  auto read = it->second.reads.find({name, type, requested, count != nullptr, elements != nullptr});
  if (read == it->second.reads.end()) return false;
  if (count != nullptr) *count = read->second.first;
  if (elements != nullptr) {
    std::memcpy(elements, read->second.second.data(), read->second.second.size());
  }
  return true;
}

void DnnNoteGetAttribute(const void* desc, int name, int type, int64_t requested,
                         const int64_t* count, const void* elements, size_t element_bytes) {
  if (!ShimAnswers() || api::DnnElementHandleKind(type) != api::HandleKind::kNone) return;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  if (it == r.backend.end() || !it->second.finalized) return;
  // A handful per descriptor (a plan's workspace size, its engine's
  // numerical notes...); a descriptor read in many ways is not cached more.
  constexpr size_t kMaxReadsPerDescriptor = 64;
  if (it->second.reads.size() >= kMaxReadsPerDescriptor) return;
  it->second.reads[{name, type, requested, count != nullptr, elements != nullptr}] = {
      count != nullptr ? *count : 0,
      std::string(static_cast<const char*>(elements), elements != nullptr ? element_bytes : 0)};
}

bool DnnSetAttributeSendAsync(const void* desc, int name, int type, int64_t count,
                              const void* elements) {
  if (!ShimAnswers() || count < 0 || (count > 0 && elements == nullptr)) return false;
  const bool known = (name == CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS && type == CUDNN_TYPE_INT64) ||
                     (name == CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS && type == CUDNN_TYPE_VOID_PTR) ||
                     (name == CUDNN_ATTR_VARIANT_PACK_WORKSPACE && type == CUDNN_TYPE_VOID_PTR &&
                      count == 1);
  if (!known) return false;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.backend.find(desc);
  return it != r.backend.end() && it->second.type == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR &&
         !it->second.finalized;
}

void DnnBackendGone(const void* desc) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  r.backend.erase(desc);
}

int32_t DnnCheckBackendDestroy(const void* desc) {
  if (desc == nullptr) return CUDNN_STATUS_BAD_PARAM_NULL_POINTER;
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.backend.contains(desc)) {
    REVENANT_LOG(DEBUG, "shim") << "cudnnBackendDestroyDescriptor of a descriptor this process "
                                   "does not hold: CUDNN_STATUS_BAD_PARAM";
    return CUDNN_STATUS_BAD_PARAM;
  }
  return CUDNN_STATUS_SUCCESS;
}

bool DnnAssignBackendDescriptor(cudnnBackendDescriptorType_t type) {
  return ShimAnswers() && type >= CUDNN_BACKEND_POINTWISE_DESCRIPTOR &&
         type <= CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR;
}

void DnnForgetDescriptor(const void* desc) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  r.descriptors.erase(desc);
}

size_t DnnScalarBytes(const void* desc) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.descriptors.find(desc);
  return it != r.descriptors.end() && it->second.type == CUDNN_DATA_DOUBLE ? sizeof(double)
                                                                           : sizeof(float);
}

size_t DnnCtcBatchBytes(const void* probs_desc) {
  DnnRegistry& r = Dnn();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.descriptors.find(probs_desc);
  if (it == r.descriptors.end() || it->second.dims.size() != 3 || it->second.dims[1] < 0) return 0;
  return static_cast<size_t>(it->second.dims[1]) * sizeof(int);
}

size_t DnnCtcLabelBytes(const void* probs_desc, const int* label_lengths) {
  const size_t batch = DnnCtcBatchBytes(probs_desc) / sizeof(int);
  if (label_lengths == nullptr) return 0;
  int64_t total = 0;
  for (size_t i = 0; i < batch; ++i) total += std::max(0, label_lengths[i]);
  return static_cast<size_t>(std::min(total, kDnnMaxCtcLabels)) * sizeof(int);
}

int32_t DnnCheckCtcHostArrays(const void* probs_desc, const int* labels,
                              const int* label_lengths, const int* input_lengths) {
  if (labels == nullptr || label_lengths == nullptr || input_lengths == nullptr)
    return CUDNN_STATUS_BAD_PARAM;
  const size_t batch = DnnCtcBatchBytes(probs_desc) / sizeof(int);
  if (batch == 0) return CUDNN_STATUS_BAD_PARAM;  // unset, not [T, N, A], or empty
  int64_t total = 0;
  for (size_t i = 0; i < batch; ++i) {
    if (label_lengths[i] < 0 || input_lengths[i] < 0) return CUDNN_STATUS_BAD_PARAM;
    total += label_lengths[i];
  }
  if (total > kDnnMaxCtcLabels) {
    REVENANT_LOG(WARNING, "shim") << "cuDNN CTC loss with " << total
                                  << " labels: more than one request carries "
                                     "(CUDNN_STATUS_NOT_SUPPORTED)";
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace shim
}  // namespace revenant

namespace {

using revenant::api::ApiId;
using revenant::shim::Call;

cudnnStatus_t Refuse(const char* api, const char* why, cudnnStatus_t status) {
  REVENANT_LOG(DEBUG, "shim") << api << " refused: " << why;
  return status;
}

// cudnnGetVersion / cudnnGetCudartVersion: the agent's answer, cached once
// it is known (a version does not change; 0 when the agent cannot be
// reached, asked again next time).
size_t AskVersion(ApiId id, std::atomic<size_t>* cache) {
  size_t v = cache->load(std::memory_order_relaxed);
  if (v != 0) return v;
  // cudnnGetCudartVersion is laid out as cudnnGetVersion.
  const revenant::hooks::cudnnGetVersionRequest req;
  Call call(id, req.Size());
  if (!call.ok()) return 0;
  req.Encode(call.args());
  if (!call.Send() || call.status() != 0) return 0;
  uint64_t version = 0;
  revenant::hooks::cudnnGetVersionReply reply;
  if (reply.Decode(call.reply()) && reply.version.data != nullptr)
    std::memcpy(&version, reply.version.data, std::min<uint64_t>(reply.version.size, sizeof(version)));
  cache->store(static_cast<size_t>(version), std::memory_order_relaxed);
  return static_cast<size_t>(version);
}

struct StatusName {
  cudnnStatus_t status;
  const char* name;
};

#define REVENANT_DNN_STATUS(s) {s, #s}
constexpr StatusName kStatusNames[] = {
    REVENANT_DNN_STATUS(CUDNN_STATUS_SUCCESS),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_INITIALIZED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_DEPRECATED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_LICENSE_ERROR),
    REVENANT_DNN_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS),
    REVENANT_DNN_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW),
    REVENANT_DNN_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM),
    {static_cast<cudnnStatus_t>(2001), "CUDNN_STATUS_INVALID_VALUE"},
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API),
    REVENANT_DNN_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM),
    REVENANT_DNN_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED),
    REVENANT_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER),
    REVENANT_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS),
    REVENANT_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART),
    REVENANT_DNN_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND),
};
#undef REVENANT_DNN_STATUS

}  // namespace

extern "C" REVENANT_EXPORT size_t cudnnGetVersion(void) {
  static std::atomic<size_t> cache{0};
  return AskVersion(ApiId::cudnnGetVersion, &cache);
}

extern "C" REVENANT_EXPORT size_t cudnnGetCudartVersion(void) {
  static std::atomic<size_t> cache{0};
  return AskVersion(ApiId::cudnnGetCudartVersion, &cache);
}

extern "C" REVENANT_EXPORT const char* cudnnGetErrorString(cudnnStatus_t status) {
  for (const StatusName& s : kStatusNames)
    if (s.status == status) return s.name;
  return "CUDNN_UNKNOWN_STATUS";
}

extern "C" REVENANT_EXPORT void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  message[0] = '\0';
  const uint64_t capacity = std::min<uint64_t>(max_size, revenant::hooks::kDnnMaxErrorString);
  revenant::hooks::cudnnGetLastErrorStringRequest req;
  req.capacity = capacity;
  Call call(ApiId::cudnnGetLastErrorString, req.Size());
  if (!call.ok()) return;
  req.Encode(call.args());
  if (!call.Send() || call.status() != 0) return;
  revenant::hooks::cudnnGetLastErrorStringReply reply;
  if (reply.Decode(call.reply()) && reply.message.data != nullptr)
    std::memcpy(message, reply.message.data, std::min<uint64_t>(reply.message.size, capacity));
  message[capacity - 1] = '\0';
}

// cuDNN destroys a null handle or legacy descriptor successfully (nothing to
// do); anything else is the row's request (`Request`, whose `field` holds
// the handle), answered by its generated dispatcher.
namespace {
template <typename Request, typename T>
cudnnStatus_t DestroyHandle(ApiId id, uint64_t Request::*field, T handle) {
  if (handle == nullptr) return CUDNN_STATUS_SUCCESS;
  Request req;
  req.*field = reinterpret_cast<uint64_t>(handle);
  Call call(id, req.Size());
  if (!call.ok()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  return static_cast<cudnnStatus_t>(call.status());
}
}  // namespace

extern "C" REVENANT_EXPORT cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  const cudnnStatus_t s =
      DestroyHandle(ApiId::cudnnDestroy, &revenant::hooks::cudnnDestroyRequest::handle, handle);
  if (s == CUDNN_STATUS_SUCCESS) revenant::shim::DnnHandleGone(handle);
  return s;
}
extern "C" REVENANT_EXPORT cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t desc) {
  const cudnnStatus_t s = DestroyHandle(ApiId::cudnnDestroyTensorDescriptor,
                                        &revenant::hooks::cudnnDestroyTensorDescriptorRequest::desc, desc);
  if (s == CUDNN_STATUS_SUCCESS) revenant::shim::DnnForgetDescriptor(desc);
  return s;
}
extern "C" REVENANT_EXPORT cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t desc) {
  const cudnnStatus_t s = DestroyHandle(ApiId::cudnnDestroyFilterDescriptor,
                                        &revenant::hooks::cudnnDestroyFilterDescriptorRequest::desc, desc);
  if (s == CUDNN_STATUS_SUCCESS) revenant::shim::DnnForgetDescriptor(desc);
  return s;
}
extern "C" REVENANT_EXPORT cudnnStatus_t
cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t desc) {
  return DestroyHandle(ApiId::cudnnDestroyConvolutionDescriptor,
                       &revenant::hooks::cudnnDestroyConvolutionDescriptorRequest::desc, desc);
}
extern "C" REVENANT_EXPORT cudnnStatus_t
cudnnDestroyActivationDescriptor(cudnnActivationDescriptor_t desc) {
  return DestroyHandle(ApiId::cudnnDestroyActivationDescriptor,
                       &revenant::hooks::cudnnDestroyActivationDescriptorRequest::desc, desc);
}

extern "C" REVENANT_EXPORT cudnnStatus_t cudnnBackendSetAttribute(
    cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t attributeName,
    cudnnBackendAttributeType_t attributeType, int64_t elementCount, const void* arrayOfElements) {
  constexpr const char* kApi = "cudnnBackendSetAttribute";
  // cuDNN's own codes for what it checks first.
  if (descriptor == nullptr)
    return Refuse(kApi, "null descriptor", CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  const size_t size = revenant::api::DnnElementSize(attributeType);
  if (size == 0)
    return Refuse(kApi, "unknown attribute type", CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  if (!revenant::api::DnnElementCountOk(elementCount))
    return Refuse(kApi, "bad element count", CUDNN_STATUS_BAD_PARAM);
  const uint64_t bytes = static_cast<uint64_t>(elementCount) * size;
  revenant::hooks::cudnnBackendSetAttributeRequest req;
  req.descriptor = reinterpret_cast<uint64_t>(descriptor);
  req.name = static_cast<int32_t>(attributeName);
  req.type = static_cast<int32_t>(attributeType);
  req.count = elementCount;
  req.elements = revenant::wire::Bytes::Of(arrayOfElements, bytes);
  // A variant pack's per-step attributes go without waiting (their failure
  // in the agent, a pointer it cannot reach, surfaces as a deferred error and
  // at the pack's Finalize, which waits).
  Call call(ApiId::cudnnBackendSetAttribute, req.Size(),
            revenant::shim::DnnSetAttributeSendAsync(descriptor, attributeName, attributeType,
                                                     elementCount, arrayOfElements));
  if (!call.ok()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  if (call.status() == CUDNN_STATUS_SUCCESS) {
    revenant::shim::DnnNoteSetAttribute(descriptor, attributeName, attributeType, elementCount,
                                        arrayOfElements);
  }
  return static_cast<cudnnStatus_t>(call.status());
}

extern "C" REVENANT_EXPORT cudnnStatus_t cudnnBackendGetAttribute(
    cudnnBackendDescriptor_t const descriptor, cudnnBackendAttributeName_t attributeName,
    cudnnBackendAttributeType_t attributeType, int64_t requestedElementCount,
    int64_t* elementCount, void* arrayOfElements) {
  constexpr const char* kApi = "cudnnBackendGetAttribute";
  const size_t size = revenant::api::DnnElementSize(attributeType);
  if (size == 0)
    return Refuse(kApi, "unknown attribute type", CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  if (!revenant::api::DnnElementCountOk(requestedElementCount))
    return Refuse(kApi, "bad requested element count", CUDNN_STATUS_BAD_PARAM);
  const bool has_array = arrayOfElements != nullptr;
  // Handle elements go both ways: a descriptor-typed get fills descriptors
  // the caller created (cudnn_graph.h), so the agent needs to know them.
  const bool send_elements =
      has_array && revenant::api::DnnElementHandleKind(attributeType) !=
                       revenant::api::HandleKind::kNone;
  const uint64_t bytes = static_cast<uint64_t>(requestedElementCount) * size;
  if (has_array && bytes > revenant::api::kDnnMaxReplyElementBytes) {
    REVENANT_LOG(WARNING, "shim") << kApi << ": " << bytes
                                  << " bytes of elements exceed what one reply carries ("
                                  << revenant::api::kDnnMaxReplyElementBytes
                                  << "): CUDNN_STATUS_NOT_SUPPORTED";
    return CUDNN_STATUS_NOT_SUPPORTED;
  }
  // A value-typed read of a finalized descriptor, asked before: finalized
  // descriptors do not change, the shim answers as the agent did.
  if (revenant::shim::DnnAnswerGetAttribute(descriptor, attributeName, attributeType,
                                            requestedElementCount, elementCount,
                                            arrayOfElements)) {
    return CUDNN_STATUS_SUCCESS;
  }
  const void* in_elements = send_elements ? arrayOfElements : nullptr;
  revenant::hooks::cudnnBackendGetAttributeRequest req;
  req.descriptor = reinterpret_cast<uint64_t>(descriptor);
  req.name = static_cast<int32_t>(attributeName);
  req.type = static_cast<int32_t>(attributeType);
  req.requested = requestedElementCount;
  req.has_count = elementCount != nullptr;
  req.has_array = has_array;
  req.in_elements = revenant::wire::Bytes::Of(in_elements, bytes);
  Call call(ApiId::cudnnBackendGetAttribute, req.Size());
  if (!call.ok()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  req.Encode(call.args());
  if (!call.Send()) return static_cast<cudnnStatus_t>(call.FailureStatus(CUDNN_STATUS_INTERNAL_ERROR));
  if (call.executed_status() == 0) {
    // Each field is copied as it decodes (a short reply leaves the rest).
    // Only the elements the library wrote come back: the rest of the
    // caller's array stays as it was, as natively.
    revenant::hooks::cudnnBackendGetAttributeReply reply;
    reply.Decode(call.reply(), req);
    auto copy_out = [](const revenant::wire::Bytes& b, void* dst, uint64_t size) {
      if (b.data != nullptr) std::memcpy(dst, b.data, std::min<uint64_t>(b.size, size));
    };
    if (elementCount != nullptr) copy_out(reply.count, elementCount, sizeof(*elementCount));
    if (has_array) copy_out(reply.elements, arrayOfElements, bytes);
    if (call.status() == CUDNN_STATUS_SUCCESS) {
      revenant::shim::DnnNoteGetAttribute(
          descriptor, attributeName, attributeType, requestedElementCount, elementCount,
          arrayOfElements,
          reply.elements.data != nullptr ? std::min<uint64_t>(reply.elements.size, bytes) : 0);
    }
    // A descriptor the library wrote in place of one the caller passed is a
    // descriptor the application now holds (the agent named it virtually):
    // the shim's destroy check must know it.
    if (has_array && reply.elements.data != nullptr &&
        revenant::api::DnnElementHandleKind(attributeType) ==
            revenant::api::HandleKind::kDnnDescriptor) {
      const uint64_t n = std::min<uint64_t>(reply.elements.size, bytes) / sizeof(uint64_t);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t element = 0;
        std::memcpy(&element, reply.elements.data + i * sizeof(uint64_t), sizeof(element));
        if (element != 0) revenant::shim::DnnBackendCreated(reinterpret_cast<const void*>(element));
      }
    }
  }
  return static_cast<cudnnStatus_t>(call.status());
}
