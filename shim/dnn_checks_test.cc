// The shim's cuDNN descriptor registry: host scalar sizes by data type and
// the CTC loss host arrays' sizes and checks (no agent needed).
#include "shim/dnn_checks.h"

#include <cudnn.h>

#include <vector>

#include "api/dnn_args.h"
#include "shim/call.h"
#include "gtest/gtest.h"

namespace revenant {
namespace shim {
namespace {

const void* Desc(uintptr_t v) { return reinterpret_cast<const void*>(v); }

TEST(DnnChecks, ScalarsAreDoublesOnlyForDoubleData) {
  const int dims[4] = {2, 3, 4, 5};
  EXPECT_EQ(DnnScalarBytes(Desc(0x11)), sizeof(float)) << "unknown descriptor";
  DnnNoteDescriptor(Desc(0x11), CUDNN_DATA_DOUBLE, 4, dims);
  EXPECT_EQ(DnnScalarBytes(Desc(0x11)), sizeof(double));
  DnnNoteDescriptor(Desc(0x12), CUDNN_DATA_HALF, 4, dims);
  EXPECT_EQ(DnnScalarBytes(Desc(0x12)), sizeof(float));
  DnnNoteDescriptor(Desc(0x13), CUDNN_DATA_BFLOAT16, 4, dims);
  EXPECT_EQ(DnnScalarBytes(Desc(0x13)), sizeof(float));
  // Set again as float, then destroyed.
  DnnNoteDescriptor(Desc(0x11), CUDNN_DATA_FLOAT, 4, dims);
  EXPECT_EQ(DnnScalarBytes(Desc(0x11)), sizeof(float));
  DnnNoteDescriptor(Desc(0x11), CUDNN_DATA_DOUBLE, 4, dims);
  DnnForgetDescriptor(Desc(0x11));
  EXPECT_EQ(DnnScalarBytes(Desc(0x11)), sizeof(float));
}

TEST(DnnChecks, CtcHostArraysAreSizedByTheBatch) {
  const int probs[3] = {10, 3, 6};  // T, N, A
  DnnNoteDescriptor(Desc(0x21), CUDNN_DATA_FLOAT, 3, probs);
  const int labels[6] = {1, 2, 3, 4, 5, 1}, label_lengths[3] = {2, 3, 1}, input_lengths[3] = {10, 9, 8};
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x21), labels, label_lengths, input_lengths),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(DnnCtcBatchBytes(Desc(0x21)), 3 * sizeof(int));
  EXPECT_EQ(DnnCtcLabelBytes(Desc(0x21), label_lengths), 6 * sizeof(int));
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x21), nullptr, label_lengths, input_lengths),
            CUDNN_STATUS_BAD_PARAM);
  const int negative[3] = {2, -1, 1};
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x21), labels, negative, input_lengths),
            CUDNN_STATUS_BAD_PARAM);
  // Unknown, or not [T, N, A].
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x22), labels, label_lengths, input_lengths),
            CUDNN_STATUS_BAD_PARAM);
  const int four[4] = {10, 3, 6, 1};
  DnnNoteDescriptor(Desc(0x23), CUDNN_DATA_FLOAT, 4, four);
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x23), labels, label_lengths, input_lengths),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(DnnCtcBatchBytes(Desc(0x23)), 0u);
  const int huge[3] = {1 << 20, 1, 0};
  EXPECT_EQ(DnnCheckCtcHostArrays(Desc(0x21), labels, huge, input_lengths),
            CUDNN_STATUS_NOT_SUPPORTED);
}

TEST(DnnArgs, AlgorithmResultsAreBoundedByTheAlgorithmCount) {
  const size_t entry = sizeof(cudnnConvolutionFwdAlgoPerf_t);
  EXPECT_EQ(api::DnnAlgoPerfBytes(3, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, entry), 3 * entry);
  EXPECT_EQ(api::DnnAlgoPerfBytes(1000, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, entry),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT * entry);
  EXPECT_EQ(api::DnnAlgoPerfBytes(-4, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, entry), 0u);
  int returned = 0;
  cudnnConvolutionFwdAlgoPerf_t perf[1];
  EXPECT_EQ(api::DnnAlgoQueryStatus(1, &returned, perf), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(api::DnnAlgoQueryStatus(0, &returned, perf), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(api::DnnAlgoQueryStatus(1, nullptr, perf), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(api::DnnAlgoQueryStatus(1, &returned, nullptr), CUDNN_STATUS_BAD_PARAM);
  const int seq[2] = {3, 2};
  EXPECT_EQ(api::DnnRnnDataArgsStatus(2, seq), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(api::DnnRnnDataArgsStatus(-1, seq), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(api::DnnRnnDataArgsStatus(2, nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(api::DnnRnnDataArgsStatus(api::kDnnMaxRnnBatch + 1, seq), CUDNN_STATUS_NOT_SUPPORTED);
}

// Backend descriptors are destroyed without waiting for the agent, so the
// shim answers what the agent answered for a bad one: null, unknown and
// already destroyed descriptors never leave the process.
TEST(DnnChecks, BackendDestroysAreCheckedAgainstTheDescriptorsHeld) {
  const void* d = reinterpret_cast<const void*>(0x7e10004000000001ull);
  EXPECT_EQ(DnnCheckBackendDestroy(nullptr), CUDNN_STATUS_BAD_PARAM_NULL_POINTER);
  EXPECT_EQ(DnnCheckBackendDestroy(d), CUDNN_STATUS_BAD_PARAM) << "never created";
  DnnBackendCreated(d);
  EXPECT_EQ(DnnCheckBackendDestroy(d), CUDNN_STATUS_SUCCESS);
  DnnBackendGone(d);
  EXPECT_EQ(DnnCheckBackendDestroy(d), CUDNN_STATUS_BAD_PARAM) << "destroyed twice";
  // Which creations the shim assigns: the types cuDNN 9 names, no others.
  EXPECT_TRUE(ShimAnswers());
  EXPECT_TRUE(DnnAssignBackendDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR));
  EXPECT_TRUE(DnnAssignBackendDescriptor(CUDNN_BACKEND_POINTWISE_DESCRIPTOR));
  EXPECT_FALSE(DnnAssignBackendDescriptor(static_cast<cudnnBackendDescriptorType_t>(999)));
  EXPECT_FALSE(DnnAssignBackendDescriptor(static_cast<cudnnBackendDescriptorType_t>(-1)));
}

// A variant pack's per-step attributes go without waiting until it is
// finalized; anything else (another attribute, type or descriptor kind, a
// library-written descriptor, a finalized pack) waits for cuDNN's answer.
TEST(DnnChecks, OnlyAVariantPacksStepAttributesGoWithoutWaiting) {
  const void* pack = reinterpret_cast<const void*>(0x7e10004000000011ull);
  const void* tensor = reinterpret_cast<const void*>(0x7e10004000000012ull);
  const void* written = reinterpret_cast<const void*>(0x7e10000000000013ull);
  DnnBackendCreated(pack, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  DnnBackendCreated(tensor, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  DnnBackendCreated(written);
  int64_t uids[3] = {1, 2, 3};
  void* ptrs[3] = {nullptr, nullptr, nullptr};
  EXPECT_TRUE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                       3, uids));
  EXPECT_TRUE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                       CUDNN_TYPE_VOID_PTR, 3, ptrs));
  EXPECT_TRUE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
                                       1, ptrs));
  EXPECT_FALSE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                        CUDNN_TYPE_VOID_PTR, 2, ptrs))
      << "two workspaces";
  EXPECT_FALSE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                        CUDNN_TYPE_INT32, 3, uids))
      << "another element type";
  EXPECT_FALSE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        3, nullptr))
      << "no elements";
  EXPECT_FALSE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_INTERMEDIATES,
                                        CUDNN_TYPE_VOID_PTR, 1, ptrs));
  EXPECT_FALSE(DnnSetAttributeSendAsync(tensor, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                        CUDNN_TYPE_INT64, 3, uids))
      << "not a variant pack";
  EXPECT_FALSE(DnnSetAttributeSendAsync(written, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                        CUDNN_TYPE_INT64, 3, uids))
      << "a descriptor of unknown type";
  DnnBackendFinalized(pack);
  EXPECT_FALSE(DnnSetAttributeSendAsync(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        3, uids))
      << "finalized";
  DnnBackendGone(pack);
  DnnBackendGone(tensor);
  DnnBackendGone(written);
  const void* gone = pack;
  EXPECT_FALSE(DnnSetAttributeSendAsync(gone, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                                        3, uids))
      << "destroyed";
}

// cudnnSetStream goes without waiting once the shim knows the handle is
// live: null, unknown and destroyed handles get the agent's answer at once.
TEST(DnnChecks, SetStreamChecksTheHandlesHeld) {
  const void* h = reinterpret_cast<const void*>(0x7e0f000000000031ull);
  EXPECT_EQ(DnnCheckHandle(nullptr), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(DnnCheckHandle(h), CUDNN_STATUS_BAD_PARAM) << "never created";
  DnnHandleCreated(h);
  EXPECT_EQ(DnnCheckHandle(h), CUDNN_STATUS_SUCCESS);
  DnnHandleGone(h);
  EXPECT_EQ(DnnCheckHandle(h), CUDNN_STATUS_BAD_PARAM) << "destroyed";
}

// Value-typed reads of a finalized descriptor are answered from the agent's
// earlier answer to the same read; before finalization, for descriptor-typed
// reads (which fill the caller's descriptors) and for another read, the
// agent is asked.
TEST(DnnChecks, ReadsOfFinalizedDescriptorsAreAnsweredAgain) {
  const void* plan = reinterpret_cast<const void*>(0x7e10004000000021ull);
  DnnBackendCreated(plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  int64_t count = -1;
  int64_t size = -1;
  const int64_t agent_size = 4096, agent_count = 1;
  // Not finalized: nothing kept, nothing answered.
  DnnNoteGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                      &agent_count, &agent_size, sizeof(agent_size));
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &count, &size));
  DnnBackendFinalized(plan);
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &count, &size))
      << "never asked since";
  DnnNoteGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                      &agent_count, &agent_size, sizeof(agent_size));
  ASSERT_TRUE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                    CUDNN_TYPE_INT64, 1, &count, &size));
  EXPECT_EQ(count, 1);
  EXPECT_EQ(size, 4096);
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, nullptr, &size))
      << "asked without the count";
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 2, &count, &size))
      << "another requested count";
  // Descriptor-typed reads fill descriptors: never answered here.
  uint64_t config = 0x7e10004000000022ull;
  DnnNoteGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                      1, &agent_count, &config, sizeof(config));
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &config));
  // Destroyed: its answers go with it.
  DnnBackendGone(plan);
  DnnBackendCreated(plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  DnnBackendFinalized(plan);
  EXPECT_FALSE(DnnAnswerGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &count, &size));
  DnnBackendGone(plan);
}

}  // namespace
}  // namespace shim
}  // namespace revenant

namespace revenant {
namespace shim {
namespace {

// Sets a variant pack's unique ids, data pointers and workspace as the
// shim's hook does after cuDNN accepted them.
void SetPack(const void* pack, std::vector<int64_t> uids, std::vector<void*> ptrs, void* ws) {
  DnnNoteSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
                      static_cast<int64_t>(uids.size()), uids.data());
  DnnNoteSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                      static_cast<int64_t>(ptrs.size()), ptrs.data());
  DnnNoteSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
}

// A variant pack's Finalize goes without waiting only once the agent
// finalized a pack of the same unique ids, null pointers and null workspace
// with success; another form, an unset pack, a finalized one or another
// descriptor type waits.
TEST(DnnChecks, AVariantPacksFinalizeWaitsUntilOneOfItsFormSucceeded) {
  void* a = reinterpret_cast<void*>(0x1000);
  void* b = reinterpret_cast<void*>(0x2000);
  const void* first = reinterpret_cast<const void*>(0x7e10004000000101ull);
  const void* second = reinterpret_cast<const void*>(0x7e10004000000102ull);
  const void* other = reinterpret_cast<const void*>(0x7e10004000000103ull);
  const void* nulls = reinterpret_cast<const void*>(0x7e10004000000104ull);
  const void* unset = reinterpret_cast<const void*>(0x7e10004000000105ull);
  const void* tensor = reinterpret_cast<const void*>(0x7e10004000000106ull);
  for (const void* p : {first, second, other, nulls, unset}) {
    DnnBackendCreated(p, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  }
  DnnBackendCreated(tensor, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  SetPack(first, {101, 102}, {a, b}, a);
  EXPECT_FALSE(DnnFinalizeSendAsync(first)) << "no pack of its form was finalized yet";
  DnnBackendFinalized(first);  // the agent's success
  EXPECT_FALSE(DnnFinalizeSendAsync(first)) << "already finalized";
  SetPack(second, {101, 102}, {b, a}, b);
  EXPECT_TRUE(DnnFinalizeSendAsync(second)) << "same ids, other addresses";
  SetPack(other, {101, 103}, {a, b}, a);
  EXPECT_FALSE(DnnFinalizeSendAsync(other)) << "other unique ids";
  SetPack(nulls, {101, 102}, {a, nullptr}, a);
  EXPECT_FALSE(DnnFinalizeSendAsync(nulls)) << "a null data pointer";
  EXPECT_FALSE(DnnFinalizeSendAsync(unset)) << "nothing set";
  EXPECT_FALSE(DnnFinalizeSendAsync(tensor)) << "not a variant pack";
  EXPECT_FALSE(DnnFinalizeSendAsync(nullptr));
  for (const void* p : {first, second, other, nulls, unset, tensor}) DnnBackendGone(p);
}

// An Execute goes without waiting only for a live handle, a finalized plan
// and a finalized pack of a form the agent executed that plan with before.
TEST(DnnChecks, AnExecuteWaitsUntilThePlanRanAPackOfItsForm) {
  void* a = reinterpret_cast<void*>(0x1000);
  const void* handle = reinterpret_cast<const void*>(0x7e0f000000000201ull);
  const void* plan = reinterpret_cast<const void*>(0x7e10004000000202ull);
  const void* plan2 = reinterpret_cast<const void*>(0x7e10004000000203ull);
  const void* p1 = reinterpret_cast<const void*>(0x7e10004000000204ull);
  const void* p2 = reinterpret_cast<const void*>(0x7e10004000000205ull);
  const void* p3 = reinterpret_cast<const void*>(0x7e10004000000206ull);
  DnnHandleCreated(handle);
  DnnBackendCreated(plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  DnnBackendCreated(plan2, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  for (const void* p : {p1, p2, p3}) DnnBackendCreated(p, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  SetPack(p1, {7}, {a}, a);
  SetPack(p2, {7}, {a}, nullptr);
  SetPack(p3, {7}, {a}, a);
  for (const void* p : {plan, plan2, p1, p2}) DnnBackendFinalized(p);
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan, p1)) << "the first of its form waits";
  DnnExecuted(plan, p1);  // the agent's success
  EXPECT_TRUE(DnnExecuteSendAsync(handle, plan, p1));
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan, p2)) << "a null workspace: another form";
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan, p3)) << "the pack is not finalized";
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan2, p1)) << "another plan";
  EXPECT_FALSE(DnnExecuteSendAsync(handle, p1, p1)) << "not an execution plan";
  DnnHandleGone(handle);
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan, p1)) << "destroyed handle";
  DnnHandleCreated(handle);
  DnnBackendGone(plan);
  DnnBackendCreated(plan, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  DnnBackendFinalized(plan);
  EXPECT_FALSE(DnnExecuteSendAsync(handle, plan, p1)) << "a new plan of the same handle value";
  DnnHandleGone(handle);
  for (const void* p : {plan, plan2, p1, p2, p3}) DnnBackendGone(p);
}

}  // namespace
}  // namespace shim
}  // namespace revenant
