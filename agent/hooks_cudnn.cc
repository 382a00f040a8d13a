// The agent side of the cuDNN HOOK rows (api/cudnn.textproto; requests and
// replies: api/hook_structs.h): versions, the last error message and the backend
// API's attribute calls. An attribute whose elements are descriptors
// (CUDNN_TYPE_BACKEND_DESCRIPTOR) or handles (CUDNN_TYPE_HANDLE) holds the
// application's virtual handles: each element is translated to the
// backend's object before the call (an unknown one answers
// CUDNN_STATUS_BAD_PARAM and the backend is not called) and, for a get,
// back to its virtual handle after it. A malformed request answers
// CUDNN_STATUS_BAD_PARAM and never reaches the backend.
#include <cudnn.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/backend.h"
#include "agent/dispatch.h"
#include "agent/session.h"
#include "api/agent_hooks.h"
#include "api/dnn_args.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace {

Backend* B(DispatchContext& ctx) { return static_cast<Backend*>(ctx.backend); }

int32_t Refuse(const char* api, const char* why, cudnnStatus_t status = CUDNN_STATUS_BAD_PARAM) {
  REVENANT_LOG(WARNING, "agent") << api << " refused: " << why << " (" << static_cast<int>(status)
                                 << ")";
  return status;
}

// Translates `count` virtual handles of `kind` at `elements` in place.
bool ToBackendAll(DispatchContext& ctx, api::HandleKind kind, uint64_t* elements, int64_t count) {
  for (int64_t i = 0; i < count; ++i)
    if (!ctx.handles->ToBackendRaw(kind, &elements[i])) return false;
  return true;
}

// CUDNN_TYPE_VOID_PTR elements are addresses cuDNN reads and writes when it
// executes (a variant pack's tensors and workspace). Device memory and host
// memory shared with the application are the same here as in the
// application; any other host address (a pass-by-value scalar in the
// application's own memory) does not exist in the agent and is refused.
bool AgentAddressable(DispatchContext& ctx, uint64_t p) {
  if (p == 0) return true;
  const DeviceRange r = B(ctx)->device_range();
  if (p >= r.base && p - r.base < r.size) return true;
  return ctx.session != nullptr && ctx.session->IsSharedHost(reinterpret_cast<const void*>(p), 1);
}

// The head every attribute request starts with.
struct AttributeHead {
  uint64_t descriptor = 0;
  int32_t name = 0;
  int32_t type = 0;
  int64_t count = 0;
  size_t element_size = 0;
  // name and type as enums, once they are known to be values of them.
  cudnnBackendAttributeName_t attribute{};
  cudnnBackendAttributeType_t attribute_type{};
};

// cudnnGetVersion and cudnnGetCudartVersion (one layout): the version as an
// 8-byte field.
int32_t VersionHook(wire::Decoder& in, wire::Encoder& out, DispatchContext& ctx, bool cudart) {
  hooks::cudnnGetVersionRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return CUDNN_STATUS_BAD_PARAM;
  const uint64_t version = cudart ? B(ctx)->DnnGetCudartVersion() : B(ctx)->DnnGetVersion();
  hooks::cudnnGetVersionReply reply;
  reply.version = wire::Bytes::Of(&version, sizeof(version));
  reply.Encode(out);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

int32_t Hook_cudnnGetVersion(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return VersionHook(in, out, ctx, /*cudart=*/false);
}

int32_t Hook_cudnnGetCudartVersion(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out) {
  return VersionHook(in, out, ctx, /*cudart=*/true);
}

int32_t Hook_cudnnGetLastErrorString(DispatchContext& ctx, wire::Decoder& in,
                                     wire::Encoder& out) {
  hooks::cudnnGetLastErrorStringRequest r;
  if (!r.Decode(in) || in.remaining() != 0 || r.capacity == 0 ||
      r.capacity > hooks::kDnnMaxErrorString) {
    return CUDNN_STATUS_BAD_PARAM;
  }
  const uint64_t capacity = r.capacity;
  hooks::cudnnGetLastErrorStringReply reply;
  reply.message = wire::Bytes::Reserved(capacity);
  reply.Encode(out);
  char* message = reply.message.fill;
  if (message == nullptr) return CUDNN_STATUS_BAD_PARAM;
  std::memset(message, 0, capacity);
  B(ctx)->DnnGetLastErrorString(message, capacity);
  message[capacity - 1] = '\0';
  return CUDNN_STATUS_SUCCESS;
}

int32_t Hook_cudnnBackendSetAttribute(DispatchContext& ctx, wire::Decoder& in, wire::Encoder&) {
  constexpr const char* kApi = "cudnnBackendSetAttribute";
  hooks::cudnnBackendSetAttributeRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return Refuse(kApi, "malformed request");
  AttributeHead h;
  h.descriptor = r.descriptor;
  h.name = r.name;
  h.type = r.type;
  h.count = r.count;
  const char* data = r.elements.data;
  const uint64_t size = r.elements.size;
  h.element_size = api::DnnElementSize(h.type);
  if (h.element_size == 0 || !wire::ToEnum(h.type, &h.attribute_type))
    return Refuse(kApi, "unknown attribute type", CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  if (!wire::ToEnum(h.name, &h.attribute)) return Refuse(kApi, "unknown attribute name");
  if (!api::DnnElementCountOk(h.count)) return Refuse(kApi, "bad element count");
  // cuDNN answers a null array so (whatever the count); it never reaches it.
  if (data == nullptr) return Refuse(kApi, "null array");
  if (size != static_cast<uint64_t>(h.count) * h.element_size)
    return Refuse(kApi, "element bytes disagree with the count");
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kDnnDescriptor, &h.descriptor))
    return Refuse(kApi, "not a live backend descriptor");
  const api::HandleKind kind = api::DnnElementHandleKind(h.type);
  std::vector<uint64_t> handles;
  const void* elements = data;
  if (kind != api::HandleKind::kNone) {
    handles.resize(static_cast<size_t>(h.count));
    if (size != 0) std::memcpy(handles.data(), data, size);
    if (!ToBackendAll(ctx, kind, handles.data(), h.count))
      return Refuse(kApi, kind == api::HandleKind::kDnnDescriptor
                              ? "an element is not a live backend descriptor"
                              : "an element is not a live cuDNN handle");
    elements = handles.data();
  }
  if (h.type == CUDNN_TYPE_VOID_PTR) {
    for (int64_t i = 0; i < h.count; ++i) {
      uint64_t p = 0;
      std::memcpy(&p, data + i * sizeof(p), sizeof(p));
      if (!AgentAddressable(ctx, p)) {
        REVENANT_LOG(WARNING, "agent")
            << kApi << ": element " << i << " (0x" << std::hex << p << std::dec
            << ") is neither device memory nor host memory shared with the agent (a "
               "pass-by-value scalar in application memory is not supported): "
               "CUDNN_STATUS_NOT_SUPPORTED";
        return CUDNN_STATUS_NOT_SUPPORTED;
      }
    }
  }
  return B(ctx)->DnnBackendSetAttribute(
      reinterpret_cast<cudnnBackendDescriptor_t>(h.descriptor),
      h.attribute, h.attribute_type, h.count, elements);
}

int32_t Hook_cudnnBackendGetAttribute(DispatchContext& ctx, wire::Decoder& in,
                                      wire::Encoder& out) {
  constexpr const char* kApi = "cudnnBackendGetAttribute";
  hooks::cudnnBackendGetAttributeRequest r;
  if (!r.Decode(in) || in.remaining() != 0) return Refuse(kApi, "malformed request");
  AttributeHead h;
  h.descriptor = r.descriptor;
  h.name = r.name;
  h.type = r.type;
  h.count = r.requested;
  const bool has_count = r.has_count, has_array = r.has_array;
  const char* data = r.in_elements.data;
  const uint64_t size = r.in_elements.size;
  h.element_size = api::DnnElementSize(h.type);
  if (h.element_size == 0 || !wire::ToEnum(h.type, &h.attribute_type))
    return Refuse(kApi, "unknown attribute type", CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  if (!wire::ToEnum(h.name, &h.attribute)) return Refuse(kApi, "unknown attribute name");
  if (!api::DnnElementCountOk(h.count)) return Refuse(kApi, "bad requested element count");
  const uint64_t bytes = static_cast<uint64_t>(h.count) * h.element_size;
  if (has_array && bytes > api::kDnnMaxReplyElementBytes)
    return Refuse(kApi, "more element bytes than a reply carries");
  const api::HandleKind kind = api::DnnElementHandleKind(h.type);
  // Handle-typed elements come with the request (the caller's descriptors
  // to fill); nothing else does.
  const bool expects_elements = has_array && kind != api::HandleKind::kNone;
  if (expects_elements != (data != nullptr) || (data != nullptr && size != bytes))
    return Refuse(kApi, "element bytes disagree with the request");
  if (!ctx.handles->ToBackendRaw(api::HandleKind::kDnnDescriptor, &h.descriptor))
    return Refuse(kApi, "not a live backend descriptor");

  // Elements are 8-byte aligned here whatever their type.
  std::vector<uint64_t> elements(has_array ? (bytes + 7) / 8 : 0);
  std::vector<uint64_t> virtual_in;
  if (expects_elements) {
    if (bytes != 0) std::memcpy(elements.data(), data, bytes);
    virtual_in = elements;
    if (!ToBackendAll(ctx, kind, elements.data(), h.count)) {
      return Refuse(kApi, kind == api::HandleKind::kDnnDescriptor
                              ? "an element is not a live backend descriptor"
                              : "an element is not a live cuDNN handle");
    }
  }
  int64_t count = 0;
  const cudnnStatus_t rc = B(ctx)->DnnBackendGetAttribute(
      reinterpret_cast<cudnnBackendDescriptor_t>(h.descriptor),
      h.attribute, h.attribute_type, h.count, has_count ? &count : nullptr,
      has_array ? elements.data() : nullptr);
  if (rc != CUDNN_STATUS_SUCCESS) return rc;
  hooks::cudnnBackendGetAttributeReply reply;
  reply.count = wire::Bytes::Of(&count, sizeof(count));
  if (has_array) {
    const int64_t written = has_count ? std::max<int64_t>(0, std::min(h.count, count)) : h.count;
    if (kind != api::HandleKind::kNone) {
      for (int64_t i = 0; i < written; ++i) {
        uint64_t& e = elements[static_cast<size_t>(i)];
        // The caller's own descriptors come back as they went; another
        // value the library wrote (a handle) is named by its virtual id.
        uint64_t real = virtual_in.empty() ? 0 : virtual_in[static_cast<size_t>(i)];
        if (!virtual_in.empty() && ctx.handles->ToBackendRaw(kind, &real) && real == e) {
          e = virtual_in[static_cast<size_t>(i)];
        } else if (e != 0) {
          e = ctx.handles->ToVirtualRaw(kind, e);
        }
      }
    }
    reply.elements =
        wire::Bytes::Of(elements.data(), static_cast<uint64_t>(written) * h.element_size);
  }
  reply.Encode(out, r);
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace agent
}  // namespace revenant
