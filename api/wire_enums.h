// Which integers name a value of each enum type that crosses the wire.
//
// An application may put any integer where the CUDA, NCCL, cuBLAS or cuDNN
// API takes an enum; natively the library refuses what it does not know. In
// the agent, holding such an integer in the enum type is undefined
// behaviour, so no decoder converts before it has checked:
//
//   - wire::Decoder::Get(&e) of an enum type reads the enum's underlying
//     integer and succeeds only if WireEnum<E>::Valid(raw) (wire.h); the
//     caller answers its library's "invalid value" code as for a truncated
//     request (cudaErrorInvalidValue, ncclInvalidArgument,
//     CUBLAS_STATUS_INVALID_VALUE, CUDNN_STATUS_BAD_PARAM);
//   - hand-written decoders that read a plain integer (a copy's kind in a
//     hook header) convert it with wire::ToEnum(raw, &e), false outside.
//
// An enum used with Get() but missing here does not compile (WireEnum<E> is
// an incomplete type), so a new row with a new enum type cannot skip the
// check. Valid() is about the type, not the call: a value the type names but
// a call does not accept (a data type a backend has no kernel for) is the
// backend's to refuse, as the library would. The generated decoder checks a
// few enums itself first, to answer a more specific native code
// (cudaErrorUnsupportedLimit, cudaErrorInvalidMemcpyDirection; codegen/
// apigen.cc kEnumRanges).
//
// Example:
//   cudaMemcpyKind kind;
//   if (!in.Get(&kind)) return cudaErrorInvalidValue;  // short, or not a kind
//   int32_t raw = head.kind;
//   if (!wire::ToEnum(raw, &kind)) return cudaErrorInvalidMemcpyDirection;
#ifndef REVENANT_API_WIRE_ENUMS_H_
#define REVENANT_API_WIRE_ENUMS_H_

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <library_types.h>
#include <nccl.h>

#include <cstdint>
#include <type_traits>

namespace revenant {
namespace wire {

// Specialized below for each enum type; Valid(raw) is true when `raw` names
// a value of the type. No definition for other types, on purpose.
template <typename E>
struct WireEnum;

// true when `raw` is a value of E (and then *out holds it); else *out is
// untouched. Cost: a comparison or a switch.
template <typename E, typename I>
bool ToEnum(I raw, E* out) {
  static_assert(std::is_enum<E>::value && std::is_integral<I>::value, "an integer to an enum");
  using U = std::underlying_type_t<E>;
  // An integer the underlying type cannot hold is no value of E.
  if (static_cast<int64_t>(raw) != static_cast<int64_t>(static_cast<U>(raw)) ||
      (raw < 0) != (static_cast<U>(raw) < 0)) {
    return false;
  }
  if (!WireEnum<E>::Valid(static_cast<U>(raw))) return false;
  *out = static_cast<E>(static_cast<U>(raw));
  return true;
}

namespace wire_enums_internal {
// [first, last]: both enumerators, so a renamed bound fails to compile.
template <typename E>
struct Dense {
  using U = std::underlying_type_t<E>;
  static constexpr bool In(U raw, E first, E last) {
    return raw >= static_cast<U>(first) && raw <= static_cast<U>(last);
  }
};
}  // namespace wire_enums_internal

#define REVENANT_WIRE_ENUM_RANGE(E, first, last)                          \
  template <>                                                            \
  struct WireEnum<E> {                                                   \
    static constexpr bool Valid(std::underlying_type_t<E> raw) {         \
      return wire_enums_internal::Dense<E>::In(raw, first, last);        \
    }                                                                    \
  }

// CUDA runtime. (The kEnumRanges ones are also checked here, for the
// hand-written hooks.)
REVENANT_WIRE_ENUM_RANGE(cudaMemcpyKind, cudaMemcpyHostToHost, cudaMemcpyDefault);
REVENANT_WIRE_ENUM_RANGE(cudaStreamCaptureMode, cudaStreamCaptureModeGlobal,
                         cudaStreamCaptureModeRelaxed);
REVENANT_WIRE_ENUM_RANGE(cudaStreamCaptureStatus, cudaStreamCaptureStatusNone,
                         cudaStreamCaptureStatusInvalidated);
REVENANT_WIRE_ENUM_RANGE(cudaGraphExecUpdateResult, cudaGraphExecUpdateSuccess,
                         cudaGraphExecUpdateErrorAttributesChanged);
REVENANT_WIRE_ENUM_RANGE(cudaGraphConditionalNodeType, cudaGraphCondTypeIf,
                         cudaGraphCondTypeSwitch);
// cudaGraphNodeType skips 0x0c.
template <>
struct WireEnum<cudaGraphNodeType> {
  static constexpr bool Valid(std::underlying_type_t<cudaGraphNodeType> raw) {
    return (raw >= cudaGraphNodeTypeKernel && raw <= cudaGraphNodeTypeMemFree) ||
           raw == cudaGraphNodeTypeConditional;
  }
};
// A launch attribute's id (15 is none).
template <>
struct WireEnum<cudaLaunchAttributeID> {
  static constexpr bool Valid(std::underlying_type_t<cudaLaunchAttributeID> raw) {
    return (raw >= cudaLaunchAttributeIgnore &&
            raw <= cudaLaunchAttributePreferredSharedMemoryCarveout) ||
           raw == cudaLaunchAttributeNvlinkUtilCentricScheduling;
  }
};
REVENANT_WIRE_ENUM_RANGE(cudaFuncCache, cudaFuncCachePreferNone, cudaFuncCachePreferEqual);
REVENANT_WIRE_ENUM_RANGE(cudaDataType, CUDA_R_32F, CUDA_R_4F_E2M1);
REVENANT_WIRE_ENUM_RANGE(libraryPropertyType, MAJOR_VERSION, PATCH_LEVEL);

// NCCL: the built-in operations and the ones ncclRedOpCreatePreMulSum makes,
// which NCCL numbers from ncclNumOps up to ncclMaxRedOp; never negative.
REVENANT_WIRE_ENUM_RANGE(ncclRedOp_t, ncclSum, ncclMaxRedOp);

// cuBLAS. cublasMath_t is a mode, optionally or-ed with the
// reduced-precision flag.
template <>
struct WireEnum<cublasMath_t> {
  static constexpr bool Valid(std::underlying_type_t<cublasMath_t> raw) {
    const auto base = raw & ~static_cast<std::underlying_type_t<cublasMath_t>>(
                                CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    switch (base) {
      case CUBLAS_DEFAULT_MATH:
      case CUBLAS_TENSOR_OP_MATH:
      case CUBLAS_PEDANTIC_MATH:
      case CUBLAS_TF32_TENSOR_OP_MATH:
      case CUBLAS_FP32_EMULATED_BF16X9_MATH:
      case CUBLAS_FP64_EMULATED_FIXEDPOINT_MATH:
        return true;
      default:
        return false;
    }
  }
};
template <>
struct WireEnum<cublasComputeType_t> {
  static constexpr bool Valid(std::underlying_type_t<cublasComputeType_t> raw) {
    switch (raw) {
      case CUBLAS_COMPUTE_16F:
      case CUBLAS_COMPUTE_16F_PEDANTIC:
      case CUBLAS_COMPUTE_32F:
      case CUBLAS_COMPUTE_32F_PEDANTIC:
      case CUBLAS_COMPUTE_32F_FAST_16F:
      case CUBLAS_COMPUTE_32F_FAST_16BF:
      case CUBLAS_COMPUTE_32F_FAST_TF32:
      case CUBLAS_COMPUTE_32F_EMULATED_16BFX9:
      case CUBLAS_COMPUTE_64F:
      case CUBLAS_COMPUTE_64F_PEDANTIC:
      case CUBLAS_COMPUTE_64F_EMULATED_FIXEDPOINT:
      case CUBLAS_COMPUTE_32I:
      case CUBLAS_COMPUTE_32I_PEDANTIC:
        return true;
      default:
        return false;
    }
  }
};
template <>
struct WireEnum<cublasGemmAlgo_t> {
  static constexpr bool Valid(std::underlying_type_t<cublasGemmAlgo_t> raw) {
    return (raw >= CUBLAS_GEMM_DEFAULT && raw <= CUBLAS_GEMM_ALGO23) ||
           (raw >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && raw <= CUBLAS_GEMM_ALGO15_TENSOR_OP) ||
           raw == CUBLAS_GEMM_AUTOTUNE;
  }
};

// cuBLASLt attributes.
REVENANT_WIRE_ENUM_RANGE(cublasLtMatrixLayoutAttribute_t, CUBLASLT_MATRIX_LAYOUT_TYPE,
                         CUBLASLT_MATRIX_LAYOUT_BATCH_MODE);
template <>
struct WireEnum<cublasLtMatmulDescAttributes_t> {
  static constexpr bool Valid(std::underlying_type_t<cublasLtMatmulDescAttributes_t> raw) {
    // 9, 16 and 27-30 are not attributes.
    return (raw >= CUBLASLT_MATMUL_DESC_COMPUTE_TYPE && raw <= CUBLASLT_MATMUL_DESC_BIAS_POINTER) ||
           (raw >= CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE &&
            raw <= CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET) ||
           (raw >= CUBLASLT_MATMUL_DESC_A_SCALE_POINTER &&
            raw <= CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) ||
           (raw >= CUBLASLT_MATMUL_DESC_A_SCALE_MODE &&
            raw <= CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR);
  }
};
template <>
struct WireEnum<cublasLtMatmulPreferenceAttributes_t> {
  static constexpr bool Valid(std::underlying_type_t<cublasLtMatmulPreferenceAttributes_t> raw) {
    switch (raw) {
      case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK:
      case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT:
      case CUBLASLT_MATMUL_PREF_IMPL_MASK:
        return true;
      default:
        return false;
    }
  }
};

// cuDNN.
REVENANT_WIRE_ENUM_RANGE(cudnnDataType_t, CUDNN_DATA_FLOAT, CUDNN_DATA_COMPLEX_FP64);
REVENANT_WIRE_ENUM_RANGE(cudnnMathType_t, CUDNN_DEFAULT_MATH, CUDNN_FMA_MATH);
REVENANT_WIRE_ENUM_RANGE(cudnnNanPropagation_t, CUDNN_NOT_PROPAGATE_NAN, CUDNN_PROPAGATE_NAN);
REVENANT_WIRE_ENUM_RANGE(cudnnTensorFormat_t, CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NCHW_VECT_C);
REVENANT_WIRE_ENUM_RANGE(cudnnConvolutionMode_t, CUDNN_CONVOLUTION, CUDNN_CROSS_CORRELATION);
REVENANT_WIRE_ENUM_RANGE(cudnnActivationMode_t, CUDNN_ACTIVATION_SIGMOID,
                         CUDNN_ACTIVATION_SWISH);
REVENANT_WIRE_ENUM_RANGE(cudnnBackendDescriptorType_t, CUDNN_BACKEND_POINTWISE_DESCRIPTOR,
                         CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR);
REVENANT_WIRE_ENUM_RANGE(cudnnBackendAttributeType_t, CUDNN_TYPE_HANDLE,
                         CUDNN_TYPE_MOE_GROUPED_MATMUL_MODE);
// The legacy API's modes and algorithms (cudnn_ops.h, cudnn_cnn.h,
// cudnn_adv.h). cuDNN 9.19 itself refuses most values outside them
// (CUDNN_STATUS_BAD_PARAM); an unknown CTC normalization mode it accepts,
// which the agent answers CUDNN_STATUS_BAD_PARAM at decode.
REVENANT_WIRE_ENUM_RANGE(cudnnPoolingMode_t, CUDNN_POOLING_MAX, CUDNN_POOLING_MAX_DETERMINISTIC);
REVENANT_WIRE_ENUM_RANGE(cudnnBatchNormMode_t, CUDNN_BATCHNORM_PER_ACTIVATION,
                         CUDNN_BATCHNORM_SPATIAL_PERSISTENT);
REVENANT_WIRE_ENUM_RANGE(cudnnBatchNormOps_t, CUDNN_BATCHNORM_OPS_BN,
                         CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION);
REVENANT_WIRE_ENUM_RANGE(cudnnConvolutionFwdAlgo_t, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
REVENANT_WIRE_ENUM_RANGE(cudnnConvolutionBwdDataAlgo_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
                         CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
REVENANT_WIRE_ENUM_RANGE(cudnnConvolutionBwdFilterAlgo_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0,
                         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
REVENANT_WIRE_ENUM_RANGE(cudnnRNNAlgo_t, CUDNN_RNN_ALGO_STANDARD, CUDNN_RNN_ALGO_COUNT);
REVENANT_WIRE_ENUM_RANGE(cudnnRNNMode_t, CUDNN_RNN_RELU, CUDNN_GRU);
REVENANT_WIRE_ENUM_RANGE(cudnnRNNBiasMode_t, CUDNN_RNN_NO_BIAS, CUDNN_RNN_SINGLE_REC_BIAS);
REVENANT_WIRE_ENUM_RANGE(cudnnDirectionMode_t, CUDNN_UNIDIRECTIONAL, CUDNN_BIDIRECTIONAL);
REVENANT_WIRE_ENUM_RANGE(cudnnRNNInputMode_t, CUDNN_LINEAR_INPUT, CUDNN_SKIP_INPUT);
REVENANT_WIRE_ENUM_RANGE(cudnnRNNDataLayout_t, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                         CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED);
REVENANT_WIRE_ENUM_RANGE(cudnnForwardMode_t, CUDNN_FWD_MODE_INFERENCE, CUDNN_FWD_MODE_TRAINING);
REVENANT_WIRE_ENUM_RANGE(cudnnWgradMode_t, CUDNN_WGRAD_MODE_ADD, CUDNN_WGRAD_MODE_SET);
REVENANT_WIRE_ENUM_RANGE(cudnnLossNormalizationMode_t, CUDNN_LOSS_NORMALIZATION_NONE,
                         CUDNN_LOSS_NORMALIZATION_SOFTMAX);
REVENANT_WIRE_ENUM_RANGE(cudnnCTCGradMode_t, CUDNN_CTC_ZERO_OOB_GRADIENTS,
                         CUDNN_CTC_SKIP_OOB_GRADIENTS);
REVENANT_WIRE_ENUM_RANGE(cudnnCTCLossAlgo_t, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC,
                         CUDNN_CTC_LOSS_ALGO_NON_DETERMINISTIC);
REVENANT_WIRE_ENUM_RANGE(cudnnSamplerType_t, CUDNN_SAMPLER_BILINEAR, CUDNN_SAMPLER_BILINEAR);
// Attribute names are sparse (about 300 values in groups of a hundred): the
// range keeps the enum defined; the backends refuse the names they do not
// know, value by value, as cuDNN does.
REVENANT_WIRE_ENUM_RANGE(cudnnBackendAttributeName_t, CUDNN_ATTR_POINTWISE_MODE,
                         CUDNN_ATTR_OPERATION_MOE_GROUPED_MATMUL_TOP_K);

#undef REVENANT_WIRE_ENUM_RANGE

}  // namespace wire
}  // namespace revenant

#endif  // REVENANT_API_WIRE_ENUMS_H_
