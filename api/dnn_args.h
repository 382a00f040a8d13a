// cuDNN backend-API attribute values as they cross the wire, shared by the
// shim's hooks (shim/hooks_cudnn.cc) and the agent's (agent/hooks_cudnn.cc).
// Header-only: the shim links no agent code.
//
//   const size_t size = api::DnnElementSize(attributeType);   // 0: unknown type
//   if (size == 0 || !api::DnnElementCountOk(elementCount)) return CUDNN_STATUS_BAD_PARAM;
//   send elementCount * size bytes of arrayOfElements
//
// Element sizes follow cudnnBackendAttributeType_t's documentation: every
// enumeration-valued type is a C enum (4 bytes), CUDNN_TYPE_BOOLEAN a bool,
// CUDNN_TYPE_CHAR a char, CUDNN_TYPE_FRACTION a cudnnFraction_t (two
// int64_t), CUDNN_TYPE_HANDLE / CUDNN_TYPE_BACKEND_DESCRIPTOR / CUDNN_TYPE_VOID_PTR
// a pointer.
#ifndef REVENANT_API_DNN_ARGS_H_
#define REVENANT_API_DNN_ARGS_H_

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

#include "api/traits.h"

namespace revenant {
namespace api {

// Byte size of one element of an attribute of `type`; 0 for a value that is
// no cudnnBackendAttributeType_t this build knows.
inline size_t DnnElementSize(int64_t type) {
  switch (type) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_CHAR: return sizeof(char);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_INT32: return sizeof(int32_t);
    case CUDNN_TYPE_FLOAT: return sizeof(float);
    case CUDNN_TYPE_DOUBLE: return sizeof(double);
    case CUDNN_TYPE_FRACTION: return sizeof(cudnnFraction_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_CONVOLUTION_MODE: return sizeof(cudnnConvolutionMode_t);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_KNOB_TYPE: return sizeof(cudnnBackendKnobType_t);
    case 10:  // CUDNN_TYPE_NAN_PROPOGATION (deprecated): cudnnNanPropagation_t
      return sizeof(cudnnNanPropagation_t);
    case CUDNN_TYPE_NUMERICAL_NOTE: return sizeof(cudnnBackendNumericalNote_t);
    case CUDNN_TYPE_LAYOUT_TYPE: return sizeof(cudnnBackendLayoutType_t);
    case CUDNN_TYPE_ATTRIB_NAME: return sizeof(cudnnBackendAttributeName_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_GENSTATS_MODE: return sizeof(cudnnGenStatsMode_t);
    case CUDNN_TYPE_BN_FINALIZE_STATS_MODE: return sizeof(cudnnBnFinalizeStatsMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_BEHAVIOR_NOTE: return sizeof(cudnnBackendBehaviorNote_t);
    case CUDNN_TYPE_TENSOR_REORDERING_MODE: return sizeof(cudnnBackendTensorReordering_t);
    case CUDNN_TYPE_RESAMPLE_MODE: return sizeof(cudnnResampleMode_t);
    case CUDNN_TYPE_PADDING_MODE: return sizeof(cudnnPaddingMode_t);
    case CUDNN_TYPE_SIGNAL_MODE: return sizeof(cudnnSignalMode_t);
    case CUDNN_TYPE_NORM_MODE: return sizeof(cudnnBackendNormMode_t);
    case CUDNN_TYPE_NORM_FWD_PHASE: return sizeof(cudnnBackendNormFwdPhase_t);
    case CUDNN_TYPE_RNG_DISTRIBUTION: return sizeof(cudnnRngDistribution_t);
    case CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE: return sizeof(cudnnMoeGroupedMatmulMode_t);
    default: return 0;
  }
}

// The virtual-handle kind an attribute's elements hold (their values are
// translated element by element), or kNone for plain values.
inline HandleKind DnnElementHandleKind(int64_t type) {
  if (type == CUDNN_TYPE_BACKEND_DESCRIPTOR) return HandleKind::kDnnDescriptor;
  if (type == CUDNN_TYPE_HANDLE) return HandleKind::kDnnHandle;
  return HandleKind::kNone;
}

// The most elements one attribute call may carry. cuDNN's attributes are
// short arrays (dimensions, strides, a graph's operations, a variant pack's
// pointers); the bound keeps every byte count far from overflowing and
// within one request.
inline constexpr int64_t kDnnMaxElements = int64_t{1} << 16;

inline bool DnnElementCountOk(int64_t count) { return count >= 0 && count <= kDnnMaxElements; }

// The most element bytes one cudnnBackendGetAttribute brings back (they
// travel in the call's reply slot). A larger request is refused with
// CUDNN_STATUS_NOT_SUPPORTED and one log line.
inline constexpr uint64_t kDnnMaxReplyElementBytes = 32 << 10;

// The legacy descriptors' arrays (cudnnSetTensorNdDescriptor and friends):
// cuDNN answers a negative count CUDNN_STATUS_BAD_PARAM and more than
// CUDNN_DIM_MAX dimensions CUDNN_STATUS_NOT_SUPPORTED; a null array it
// dereferences, so it is refused with CUDNN_STATUS_BAD_PARAM. The bytes of
// `n` ints then never exceed CUDNN_DIM_MAX of them.
inline int32_t DnnNdArgsStatus(int n, const int* a, const int* b) {
  if (n < 0) return CUDNN_STATUS_BAD_PARAM;
  if (n > CUDNN_DIM_MAX) return CUDNN_STATUS_NOT_SUPPORTED;
  if (n > 0 && (a == nullptr || b == nullptr)) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}
inline int32_t DnnConvArgsStatus(int n, const int* pad, const int* stride, const int* dilation) {
  if (int32_t s = DnnNdArgsStatus(n, pad, stride)) return s;
  return DnnNdArgsStatus(n, dilation, dilation);
}
// The bytes a cudnnGet*NdDescriptor may write per array: cuDNN writes at
// most min(requested, the descriptor's dimensions) ints, and a descriptor has
// at most CUDNN_DIM_MAX.
inline size_t DnnDimsBytes(int requested) {
  const int n = requested < 0 ? 0 : requested > CUDNN_DIM_MAX ? CUDNN_DIM_MAX : requested;
  return static_cast<size_t>(n) * sizeof(int);
}

// cudnnSetRNNDataDescriptor's seqLengthArray (batchSize ints, by value): a
// negative batch or a null array cuDNN answers CUDNN_STATUS_BAD_PARAM; more
// entries than one request carries (kDnnMaxRnnBatch) are refused with
// CUDNN_STATUS_NOT_SUPPORTED.
inline constexpr int kDnnMaxRnnBatch = 1 << 18;
inline int32_t DnnRnnDataArgsStatus(int batch_size, const int* seq_lengths) {
  if (batch_size < 0 || seq_lengths == nullptr) return CUDNN_STATUS_BAD_PARAM;
  if (batch_size > kDnnMaxRnnBatch) return CUDNN_STATUS_NOT_SUPPORTED;
  return CUDNN_STATUS_SUCCESS;
}

// The bytes of an algorithm query's results (cudnnGetConvolution*Algorithm_v7,
// cudnnFindConvolution*AlgorithmEx): cuDNN writes at most one entry per
// algorithm of the kind, whatever was requested.
inline size_t DnnAlgoPerfBytes(int requested, int algo_count, size_t entry_size) {
  const int n = requested < 0 ? 0 : requested > algo_count ? algo_count : requested;
  return static_cast<size_t>(n) * entry_size;
}
// A non-positive count or a null out-pointer (which the query writes):
// CUDNN_STATUS_BAD_PARAM, before anything is sent.
inline int32_t DnnAlgoQueryStatus(int requested, const int* returned, const void* results) {
  if (requested <= 0 || returned == nullptr || results == nullptr) return CUDNN_STATUS_BAD_PARAM;
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace api
}  // namespace revenant

#endif  // REVENANT_API_DNN_ARGS_H_
