// cuDNN state and checks the shim keeps for the legacy API's rows
// (shim_check / shim_done / length of the rows in api/cudnn.textproto).
//
// The shim remembers, per legacy tensor and filter descriptor this process
// set (the agent's virtual ids), its data type and dimensions:
//   - the data type decides how many bytes a host scalar (alpha, beta) of a
//     computation on it has: cuDNN reads a double for CUDNN_DATA_DOUBLE data
//     and a float for every other type (float, half, bfloat16, int8...);
//   - the dimensions size the host arrays of cudnnCTCLoss and
//     cudnnGetCTCLossWorkspaceSize (one label length and one input length
//     per batch entry: dimension 1 of the probabilities [T, N, A]).
//
//   length: "::revenant::shim::DnnScalarBytes(yDesc)"   // 4 or 8
//
// A descriptor the shim has not seen set (or one of another kind) has float
// scalars and no dimensions; a CTC call on one is refused before anything is
// sent (CUDNN_STATUS_BAD_PARAM, as cuDNN answers an unset descriptor).
//
// Thread safety: the registry is process-wide and locked.
#ifndef REVENANT_SHIM_DNN_CHECKS_H_
#define REVENANT_SHIM_DNN_CHECKS_H_

#include <cudnn.h>

#include <cstddef>
#include <cstdint>

namespace revenant {
namespace shim {

// After a successful cudnnSetTensorNdDescriptor / cudnnSetFilterNdDescriptor
// (and the descriptor's destruction).
void DnnNoteDescriptor(const void* desc, cudnnDataType_t type, int nb_dims, const int* dims);
void DnnForgetDescriptor(const void* desc);

// cuDNN handles this process holds (cudnnCreate, cudnnDestroy), and
// cudnnSetStream's check of one: CUDNN_STATUS_BAD_PARAM for a null, unknown
// or destroyed handle (as the agent answers), else 0.
void DnnHandleCreated(const void* handle);
void DnnHandleGone(const void* handle);
int32_t DnnCheckHandle(const void* handle);

// Backend descriptors (cudnnBackendCreateDescriptor) this process holds,
// with their type (-1: one the library wrote into a descriptor-typed
// attribute) and whether they were finalized.
void DnnBackendCreated(const void* desc, int type = -1);
void DnnBackendFinalized(const void* desc);
void DnnBackendGone(const void* desc);
// cudnnBackendDestroyDescriptor's checks: a null descriptor is
// CUDNN_STATUS_BAD_PARAM_NULL_POINTER, one this process does not hold
// CUDNN_STATUS_BAD_PARAM (as the agent answers it), else 0.
int32_t DnnCheckBackendDestroy(const void* desc);
// With ShimAnswers() (shim/call.h): a backend descriptor of a known type
// (`type` within cudnnBackendDescriptorType_t) is created without waiting,
// with a handle the shim assigns.
bool DnnAssignBackendDescriptor(cudnnBackendDescriptorType_t type);
// cudnnBackendGetAttribute of a value-typed attribute of a descriptor this
// process finalized: answered from the agent's earlier answer to the same
// read (name, type, requested count, count and array asked or not), as a
// finalized descriptor does not change. DnnAnswerGetAttribute writes it and
// returns true, or false (ask the agent); DnnNoteGetAttribute keeps a
// successful answer (`element_bytes` of elements written).
bool DnnAnswerGetAttribute(const void* desc, int name, int type, int64_t requested,
                           int64_t* count, void* elements);
void DnnNoteGetAttribute(const void* desc, int name, int type, int64_t requested,
                         const int64_t* count, const void* elements, size_t element_bytes);
// Whether cudnnBackendSetAttribute may go without waiting: a variant pack
// this process created and has not finalized, its tensors' unique ids
// (INT64), data pointers (VOID_PTR) or its one workspace pointer — what a
// training step sets at every convolution, and what cuDNN accepts whatever
// the values (they are checked at Finalize and Execute, which wait).
bool DnnSetAttributeSendAsync(const void* desc, int name, int type, int64_t count,
                              const void* elements);

// A variant pack's unique ids, data pointers (which are null) and
// workspace, kept after a successful cudnnBackendSetAttribute.
void DnnNoteSetAttribute(const void* desc, int name, int type, int64_t count,
                         const void* elements);
// Whether cudnnBackendFinalize of `desc` may go without waiting: a variant
// pack this process made, not finalized, whose unique ids, null data
// pointers and null workspace are those of a pack the agent finalized with
// success before (cuDNN checks no more of a variant pack; a PyTorch step
// makes one per convolution). DnnBackendFinalized keeps that success.
bool DnnFinalizeSendAsync(const void* desc);
// Whether cudnnBackendExecute may go without waiting: a live handle, a
// finalized execution plan and a finalized variant pack of the same form
// (as above) as one the agent executed this plan with, with success, before
// (whether a pack fits a plan only cuDNN knows: the first of each form
// waits). DnnExecuted keeps that success. A failure of an execution sent
// without waiting is reported as a launch failure, as a kernel's.
bool DnnExecuteSendAsync(const void* handle, const void* plan, const void* pack);
void DnnExecuted(const void* plan, const void* pack);

// Bytes of one host scalar of a computation whose data `desc` describes.
size_t DnnScalarBytes(const void* desc);

// The host arrays of cudnnCTCLoss / cudnnGetCTCLossWorkspaceSize: 0 or the
// status cuDNN answers (probsDesc unknown or not 3-D, a null array, a
// negative length, more labels than one request carries: CUDNN_STATUS_BAD_PARAM
// or CUDNN_STATUS_NOT_SUPPORTED); then their byte sizes.
int32_t DnnCheckCtcHostArrays(const void* probs_desc, const int* labels,
                              const int* label_lengths, const int* input_lengths);
size_t DnnCtcBatchBytes(const void* probs_desc);
size_t DnnCtcLabelBytes(const void* probs_desc, const int* label_lengths);

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_DNN_CHECKS_H_
