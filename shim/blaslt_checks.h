// cuBLASLt state and checks the shim keeps (shim_check / shim_done /
// device_if / length of the rows in api/cublaslt.textproto).
//
// The shim knows every cuBLASLt handle and descriptor this process holds
// (the agent's virtual ids), and per matmul descriptor what decides how
// cublasLtMatmul's alpha/beta travel:
//   - CUBLASLT_MATMUL_DESC_POINTER_MODE: by value in the request (host) or
//     as a device address the agent resolves (device); the vector modes are
//     refused (CUBLAS_STATUS_NOT_SUPPORTED, one log line);
//   - CUBLASLT_MATMUL_DESC_SCALE_TYPE (cublasLtMatmulDescCreate's scaleType
//     or the setter): the scalars' size.
// cublasLtMatmul, the setters and the descriptors' destroys are
// asynchronous: they still fail at the call, with
// cuBLASLt's codes, for what the application can get wrong locally: a null
// or destroyed handle (CUBLAS_STATUS_NOT_INITIALIZED), a null or destroyed
// descriptor, an attribute id the descriptor does not have or a value of
// another size, a null scalar, a workspace size without a workspace, a bias
// epilogue without a bias, less workspace than the heuristic said the
// algorithm needs (CUBLAS_STATUS_INVALID_VALUE). What only the agent's library can judge
// (a type combination, an algorithm, too small a workspace) comes back from
// the synchronous cublasLtMatmulAlgoGetHeuristic, or, at cublasLtMatmul, as
// a CUDA error of the next synchronizing call.
//
// Thread safety: the registry is process-wide and locked.
#ifndef REVENANT_SHIM_BLASLT_CHECKS_H_
#define REVENANT_SHIM_BLASLT_CHECKS_H_

#include <cublasLt.h>

#include <cstddef>
#include <cstdint>

#include "api/traits.h"

namespace revenant {
namespace shim {

// Handles and descriptors this process holds, by kind (kLtHandle,
// kLtMatmulDesc, kLtMatrixLayout, kLtMatmulPreference), with what each
// descriptor holds (its creation's arguments and attribute values).
void LtCreated(api::HandleKind kind, const void* handle);
void LtGone(api::HandleKind kind, const void* handle);
// A new matmul descriptor: host pointer mode, scalars of `scale_type`.
void LtMatmulDescCreated(cublasLtMatmulDesc_t desc, cublasComputeType_t compute_type,
                         cudaDataType_t scale_type);
// A new matrix layout.
void LtLayoutCreated(cublasLtMatrixLayout_t layout, cudaDataType type, uint64_t rows,
                     uint64_t cols, int64_t ld);
// After a successful attribute setter of a layout or a preference: its
// latest value of `attr` (and what the heuristic said of the object no
// longer holds for cublasLtMatmul's workspace check).
void LtNoteAttribute(api::HandleKind kind, const void* handle, int32_t attr, const void* buf,
                     size_t size);
// After a successful cublasLtMatmulDescSetAttribute: as LtNoteAttribute, and
// notes the pointer mode, the scale type, the epilogue and whether a bias is
// set.
void LtNoteMatmulDescAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                               const void* buf, size_t size);

// Whether a creation is sent without waiting, with a handle the shim
// assigns (the assign_if of its row): REVENANT_SHIM_ANSWERS is on and the
// arguments are of the kinds cuBLASLt accepts (a matmul descriptor of a
// documented compute/scale type pair; a layout of a known type whose
// leading dimension holds a column).
bool LtAssignMatmulDesc(cublasComputeType_t compute_type, cudaDataType_t scale_type);
bool LtAssignLayout(cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld);
bool LtAssignPreference();

// After a successful cublasLtMatmulAlgoGetHeuristic: the workspace each
// returned algorithm needs for this descriptor and these layouts, so that
// cublasLtMatmul refuses a smaller one at the call, as cuBLASLt does
// (forgotten when one of them changes or goes); and the answer itself, by
// the handle, the count and the contents of the five descriptors.
void LtNoteHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                     cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                     const cublasLtMatmulHeuristicResult_t* results, const int* returned);
// The heuristic asked again for the same handle, count and contents: writes
// the agent's earlier answer and returns true (the shim_answer of the row;
// the call's checks passed before). False: ask the agent.
bool LtAnswerHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                       cublasLtMatmulPreference_t pref, int requested,
                       cublasLtMatmulHeuristicResult_t* results, int* returned);
// How many heuristics the shim answered (for tests and call statistics).
uint64_t LtHeuristicsAnswered();

// Whether the descriptor's alpha/beta are device pointers (false for an
// unknown descriptor, whose call the checks refuse first).
bool LtDevicePointers(cublasLtMatmulDesc_t desc);
// Byte size of one alpha/beta of the descriptor's scale type; 0 when the
// descriptor or the type is unknown (the checks refuse the call first).
size_t LtScalarSize(cublasLtMatmulDesc_t desc);
// Byte size of one scalar of `type` (a cudaDataType), 0 for one the shim
// does not know.
size_t LtTypeSize(int32_t type);

// Each returns 0 (CUBLAS_STATUS_SUCCESS) or the status cuBLASLt would.
// A live cuBLAS handle passes for a cuBLASLt handle (cuBLAS documents that a
// cublasHandle_t may be cast to one; PyTorch does).
int32_t LtCheckHandle(cublasLtHandle_t handle);
// cublasLtDestroy: a null handle is a bad argument (INVALID_VALUE), a
// destroyed one not initialized.
int32_t LtCheckDestroyHandle(cublasLtHandle_t handle);
int32_t LtCheckDescriptor(api::HandleKind kind, const void* desc);
// A setter: a live descriptor of `kind`, an attribute it has
// (api/blaslt_attrs.h), a value of the attribute's size.
int32_t LtCheckSetAttribute(api::HandleKind kind, const void* desc, int attr, const void* buf,
                            size_t size);
int32_t LtCheckMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                      cublasLtMatmulDescAttributes_t attr, const void* buf,
                                      size_t size);
int32_t LtCheckHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                         cublasLtMatmulPreference_t pref, int requested,
                         const cublasLtMatmulHeuristicResult_t* results, const int* returned);
int32_t LtCheckMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, const void* beta,
                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                      const cublasLtMatmulAlgo_t* algo, const void* workspace,
                      size_t workspace_size);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_BLASLT_CHECKS_H_
