// Per-API traits, generated from the API table (api/*.textproto).
//
// The enums mirror api/api_table.proto value for value (api_traits_test
// checks it) so that the shim can use the traits without protobuf.
//
//   const api::ApiTraits& t = api::Traits(api::ApiId::cudaMemcpyAsync);
//   if (t.journal == api::JournalClass::kReplay) ...
#ifndef REVENANT_API_TRAITS_H_
#define REVENANT_API_TRAITS_H_

#include <cstdint>

#include "api/api_ids.h"  // generated: enum class ApiId, kApiCount

namespace revenant {
namespace api {

enum class Library : uint8_t {
  kUnspecified = 0, kCudart = 1, kCudartNvcc = 2, kNccl = 3, kCublas = 4, kCublasLt = 5,
  kCudnn = 6, kDriver = 7,
};
enum class HandleKind : uint8_t {
  kNone = 0, kStream = 1, kEvent = 2, kGraph = 3, kGraphExec = 4, kGraphNode = 5,
  kMemPool = 6, kComm = 7, kFunction = 8, kKernel = 9, kBlasHandle = 10,
  kLtHandle = 11, kLtMatmulDesc = 12, kLtMatrixLayout = 13, kLtMatmulPreference = 14,
  kDnnHandle = 15, kDnnDescriptor = 16, kDnnTensor = 17, kDnnFilter = 18, kDnnConvolution = 19,
  kDnnActivation = 20, kDnnPooling = 21, kDnnDropout = 22, kDnnRnn = 23, kDnnRnnData = 24,
  kDnnCtcLoss = 25, kDnnSpatialTransformer = 26,
};
inline constexpr int kHandleKindCount = 27;
enum class Mode : uint8_t { kSync = 0, kAsync = 1, kLocal = 2 };
enum class JournalClass : uint8_t { kSkip = 0, kState = 1, kReplay = 2 };
enum class Support : uint8_t { kGenerated = 0, kShimHook = 1, kHook = 2, kRefused = 3 };

struct ApiTraits {
  const char* name;
  Library library;
  Mode mode;
  JournalClass journal;
  HandleKind creates;
  HandleKind destroys;
  Support support;
  // True when the agent has a dispatch case (generated or hand-written hook).
  bool dispatched;
  // The row sets one attribute of the handle in its first parameter (the
  // table's sets_attribute).
  bool sets_attribute;
  // With sets_attribute: the second parameter (4 bytes after the 8-byte
  // handle in the request) names the attribute set (the table's
  // attribute_in_second).
  bool attribute_in_second;
  // The row's assign_if: the request's first field is the virtual id the
  // shim assigned to the handle it creates (0: none, the call went
  // synchronously and the agent assigns one).
  bool shim_assigns;
};

// Virtual handle ids (agent/handles.h): kVirtualHandleTag | kind << 40 |
// serial. The agent's serials stay below 2^38; bit 39 marks derived ids
// (HandleTable::DerivedId); bit 38 ids the shim assigned (assign_if rows), so
// neither side can hand out the other's.
inline constexpr uint64_t kVirtualHandleTag = 0x7e00000000000000ull;
inline constexpr uint64_t kShimAssignedBit = uint64_t{1} << 38;
inline constexpr uint64_t ShimAssignedId(HandleKind kind, uint64_t serial) {
  return kVirtualHandleTag | (static_cast<uint64_t>(kind) << 40) | kShimAssignedBit |
         (serial & (kShimAssignedBit - 1));
}
// Whether `id` has the form of a shim-assigned id of `kind` (serial >= 1).
inline constexpr bool IsShimAssignedId(HandleKind kind, uint64_t id) {
  return (id & ~((uint64_t{1} << 40) - 1)) ==
             (kVirtualHandleTag | (static_cast<uint64_t>(kind) << 40)) &&
         (id & (uint64_t{3} << 38)) == kShimAssignedBit && (id & (kShimAssignedBit - 1)) != 0;
}

// Whether a row belongs to the CUDA runtime (its errors are the CUDA last
// error); NCCL, cuBLAS and cuBLASLt statuses are their libraries' own.
inline bool IsCudaRuntime(Library library) {
  return library == Library::kCudart || library == Library::kCudartNvcc;
}

// The cuDNN legacy descriptor kinds added after the activation descriptor
// (pooling, dropout, RNN, RNN data, CTC loss, spatial transformer). Like the
// other cuDNN kinds their calls are never compacted out of the setup log
// (agent/journaling.cc, KeepsEveryCall): a descriptor refers to others (an
// RNN descriptor to its dropout descriptor, which holds device state) and
// their setters carry no journal keys.
inline bool IsDnnLegacyKindAfterActivation(HandleKind kind) {
  return kind >= HandleKind::kDnnPooling && kind <= HandleKind::kDnnSpatialTransformer;
}

// Traits of `id`; ApiId::kInvalid and out-of-range ids give a row named
// "<invalid>" that is not dispatched.
const ApiTraits& Traits(ApiId id);
const ApiTraits& Traits(uint32_t id);

// The id of the function called `name`, or ApiId::kInvalid.
ApiId FindApi(const char* name);

const char* HandleKindName(HandleKind kind);

}  // namespace api
}  // namespace revenant

#endif  // REVENANT_API_TRAITS_H_
