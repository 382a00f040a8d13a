// The attributes of cuBLASLt's descriptors: id, size and default, as
// cublasLt.h documents them. Shared by the shim (which checks a setter's
// attribute id and size at the call, as cuBLASLt does, so the setters can be
// asynchronous) and the host backend (which keeps every attribute).
//
//   const LtAttr* a = FindLtAttr(HandleKind::kLtMatmulDesc, CUBLASLT_MATMUL_DESC_TRANSA);
//   if (a == nullptr || size != a->size) return CUBLAS_STATUS_INVALID_VALUE;
#ifndef REVENANT_API_BLASLT_ATTRS_H_
#define REVENANT_API_BLASLT_ATTRS_H_

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>
#include <iterator>

#include "api/traits.h"

namespace revenant {
namespace api {

// One attribute: its id, its size in bytes and its default (the low `size`
// bytes of `value`; those given at creation -- types, rows, columns, leading
// dimension -- are 0 here).
struct LtAttr {
  int id;
  uint8_t size;
  int64_t value;
};

inline constexpr LtAttr kLtMatmulDescAttrs[] = {
    {CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, 4, 0},
    {CUBLASLT_MATMUL_DESC_SCALE_TYPE, 4, 0},
    {CUBLASLT_MATMUL_DESC_POINTER_MODE, 4, CUBLASLT_POINTER_MODE_HOST},
    {CUBLASLT_MATMUL_DESC_TRANSA, 4, CUBLAS_OP_N},
    {CUBLASLT_MATMUL_DESC_TRANSB, 4, CUBLAS_OP_N},
    {CUBLASLT_MATMUL_DESC_TRANSC, 4, CUBLAS_OP_N},
    {CUBLASLT_MATMUL_DESC_FILL_MODE, 4, CUBLAS_FILL_MODE_FULL},
    {CUBLASLT_MATMUL_DESC_EPILOGUE, 4, CUBLASLT_EPILOGUE_DEFAULT},
    {CUBLASLT_MATMUL_DESC_BIAS_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, 8, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, 8, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE, 8, 0},
    {CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE, 8, 0},
    {CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, 4, 0},
    {CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, 4, -1},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_FAST_ACCUM, 1, 0},
    {CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, 4, -1},
    {CUBLASLT_MATMUL_DESC_A_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_B_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_C_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_D_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER, 8, 0},
    {CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE, 4, 0},
    {CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR, 8, 0},
};

inline constexpr LtAttr kLtLayoutAttrs[] = {
    {CUBLASLT_MATRIX_LAYOUT_TYPE, 4, 0},
    {CUBLASLT_MATRIX_LAYOUT_ORDER, 4, CUBLASLT_ORDER_COL},
    {CUBLASLT_MATRIX_LAYOUT_ROWS, 8, 0},
    {CUBLASLT_MATRIX_LAYOUT_COLS, 8, 0},
    {CUBLASLT_MATRIX_LAYOUT_LD, 8, 0},
    {CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, 4, 1},
    {CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, 8, 0},
    {CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET, 8, 0},
};

inline constexpr LtAttr kLtPreferenceAttrs[] = {
    {CUBLASLT_MATMUL_PREF_SEARCH_MODE, 4, CUBLASLT_SEARCH_BEST_FIT},
    {CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, 8, 0},
    {CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, 4, CUBLASLT_REDUCTION_SCHEME_MASK},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 4, 256},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, 4, 256},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, 4, 256},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 4, 256},
    {CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT, 4, 0},  // float 0.0f
    {CUBLASLT_MATMUL_PREF_IMPL_MASK, 8, -1},
};

// The attribute `id` of a descriptor of `kind` (kLtMatmulDesc,
// kLtMatrixLayout, kLtMatmulPreference), or null for one cuBLASLt does not
// have (it answers CUBLAS_STATUS_INVALID_VALUE).
inline const LtAttr* FindLtAttr(HandleKind kind, int id) {
  auto find = [id](const LtAttr* begin, const LtAttr* end) -> const LtAttr* {
    for (const LtAttr* a = begin; a != end; ++a)
      if (a->id == id) return a;
    return nullptr;
  };
  switch (kind) {
    case HandleKind::kLtMatmulDesc:
      return find(std::begin(kLtMatmulDescAttrs), std::end(kLtMatmulDescAttrs));
    case HandleKind::kLtMatrixLayout:
      return find(std::begin(kLtLayoutAttrs), std::end(kLtLayoutAttrs));
    case HandleKind::kLtMatmulPreference:
      return find(std::begin(kLtPreferenceAttrs), std::end(kLtPreferenceAttrs));
    default:
      return nullptr;
  }
}

}  // namespace api
}  // namespace revenant

#endif  // REVENANT_API_BLASLT_ATTRS_H_
