// The cuDNN hooks (agent/hooks_cudnn.cc) through the dispatcher against a
// recording backend: descriptor and handle elements are translated one by
// one in both directions, unknown ones and malformed requests are refused
// with CUDNN_STATUS_BAD_PARAM before the backend is called.
#include <algorithm>
#include <cstring>
#include <vector>

#include "agent/backend.h"
#include "agent/dispatch.h"
#include "api/dnn_args.h"
#include "api/hook_protocol.h"
#include "api/wire.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

// Backend objects are small integers the test can recognize.
class FakeDnnBackend : public Backend {
 public:
  const char* name() const override { return "fake-dnn"; }
  DeviceRange device_range() const override { return {0x200000000000ull, 1ull << 30}; }
  absl::Status LoadModule(uint64_t, absl::string_view) override { return absl::OkStatus(); }
  absl::StatusOr<KernelInfo> GetKernel(uint64_t, const std::string&) override {
    return absl::NotFoundError("none");
  }
  cudaError_t LaunchKernel(const KernelInfo&, dim3, dim3, size_t, cudaStream_t, const void*,
                           bool) override {
    return cudaErrorNotSupported;
  }
  cudaError_t Memcpy(void*, const void*, size_t, cudaMemcpyKind, cudaStream_t, bool) override {
    return cudaErrorNotSupported;
  }  cudaError_t MemcpyCaptured(void*, const void*, size_t, cudaStream_t, bool, void*, uint64_t*,
                             uint64_t, bool*) override {
    return cudaErrorNotSupported;
  }

  cudaError_t RegisterSharedHost(void*, size_t, unsigned int) override {
    return cudaErrorNotSupported;
  }
  cudaError_t UnregisterSharedHost(void*) override { return cudaErrorNotSupported; }
  cudaError_t EnqueueHostCallback(cudaStream_t, std::function<void()>) override {
    return cudaErrorNotSupported;
  }
  cudaError_t Reset() override { return cudaSuccess; }

  cudnnStatus_t cudnnCreate(cudnnHandle_t* h) override {
    *h = reinterpret_cast<cudnnHandle_t>(0xd00 + ++handles);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t,
                                             cudnnBackendDescriptor_t* d) override {
    *d = reinterpret_cast<cudnnBackendDescriptor_t>(0xde50 + ++descriptors);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t) override {
    return CUDNN_STATUS_SUCCESS;
  }
  size_t DnnGetVersion() override { return 91900; }
  void DnnGetLastErrorString(char* message, size_t max_size) override {
    std::strncpy(message, "the last error", max_size);
  }
  cudnnStatus_t DnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t type, int64_t count,
                                       const void* elements) override {
    ++calls;
    last_descriptor = reinterpret_cast<uint64_t>(d);
    const size_t n = static_cast<size_t>(count) * api::DnnElementSize(type);
    last_bytes.assign(static_cast<const char*>(elements),
                      static_cast<const char*>(elements) + n);
    return CUDNN_STATUS_SUCCESS;
  }
  // Answers `count_answer` elements: for handle-typed attributes it keeps
  // what it was handed (cuDNN fills the caller's descriptors in place) and
  // writes `new_handle` at index 1; value-typed ones get 7, 8, 9...
  cudnnStatus_t DnnBackendGetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t type, int64_t requested,
                                       int64_t* count, void* elements) override {
    ++calls;
    last_descriptor = reinterpret_cast<uint64_t>(d);
    if (count != nullptr) *count = count_answer;
    if (elements != nullptr) {
      auto* e = static_cast<uint64_t*>(elements);
      last_bytes.assign(static_cast<const char*>(elements),
                        static_cast<const char*>(elements) + requested * 8);
      const int64_t n = std::min(requested, count_answer);
      if (api::DnnElementHandleKind(type) == api::HandleKind::kNone) {
        for (int64_t i = 0; i < n; ++i) e[i] = 7 + static_cast<uint64_t>(i);
      } else if (n > 1 && new_handle != 0) {
        e[1] = new_handle;
      }
    }
    return CUDNN_STATUS_SUCCESS;
  }

  int handles = 0, descriptors = 0, calls = 0;
  uint64_t last_descriptor = 0;
  std::vector<char> last_bytes;
  int64_t count_answer = 0;
  uint64_t new_handle = 0;
};

struct Request {
  std::vector<char> body = std::vector<char>(1024);
  wire::Encoder enc{body.data(), body.size()};
};

class HooksCudnnTest : public testing::Test {
 protected:
  int32_t Run(api::ApiId id, Request& req) {
    reply_.assign(4096, 0);
    wire::Decoder in(req.body.data(), req.enc.size());
    out_ = wire::Encoder(reply_.data(), reply_.size());
    return Dispatch(id, in, out_, ctx_);
  }
  // The index-th byte field of the last reply.
  std::vector<char> Out(int index) {
    wire::Decoder d(reply_.data(), out_.size());
    const char* data = nullptr;
    uint64_t n = 0;
    for (int i = 0; i <= index; ++i) EXPECT_TRUE(d.GetBytes(&data, &n));
    return data == nullptr ? std::vector<char>() : std::vector<char>(data, data + n);
  }
  uint64_t NewDescriptor() {
    Request r;
    r.enc.Put(uint64_t{0});  // no id assigned by the shim: the agent assigns one
    r.enc.Put(int32_t{CUDNN_BACKEND_TENSOR_DESCRIPTOR});
    r.enc.PutFlag(true);
    EXPECT_EQ(Run(api::ApiId::cudnnBackendCreateDescriptor, r), CUDNN_STATUS_SUCCESS);
    uint64_t v = 0;
    std::vector<char> o = Out(0);
    EXPECT_EQ(o.size(), sizeof(v));
    std::memcpy(&v, o.data(), sizeof(v));
    return v;
  }
  uint64_t NewHandle() {
    Request r;
    r.enc.PutFlag(true);
    EXPECT_EQ(Run(api::ApiId::cudnnCreate, r), CUDNN_STATUS_SUCCESS);
    uint64_t v = 0;
    std::memcpy(&v, Out(0).data(), sizeof(v));
    return v;
  }
  static Request Set(uint64_t descriptor, int32_t type, int64_t count, const void* elements,
                     uint64_t bytes) {
    Request r;
    r.enc.Put(descriptor);
    r.enc.Put(int32_t{CUDNN_ATTR_OPERATIONGRAPH_OPS});
    r.enc.Put(type);
    r.enc.Put(count);
    r.enc.PutBytes(elements, bytes);
    return r;
  }
  static Request Get(uint64_t descriptor, int32_t type, int64_t requested, bool has_count,
                     bool has_array, const void* elements, uint64_t bytes) {
    Request r;
    r.enc.Put(descriptor);
    r.enc.Put(int32_t{CUDNN_ATTR_ENGINEHEUR_RESULTS});
    r.enc.Put(type);
    r.enc.Put(requested);
    r.enc.PutFlag(has_count);
    r.enc.PutFlag(has_array);
    r.enc.PutBytes(elements, bytes);
    return r;
  }

  FakeDnnBackend backend_;
  HandleTable handles_;
  DispatchContext ctx_{&backend_, &handles_, nullptr, 0};
  std::vector<char> reply_;
  wire::Encoder out_;
};

// A creation the shim sent without waiting carries the id it assigned: the
// descriptor is registered under it; an id of another form or kind, or one
// already live, is refused before the backend creates anything.
TEST_F(HooksCudnnTest, CreationsTakeTheIdTheShimAssigned) {
  auto create = [&](uint64_t assigned) {
    Request r;
    r.enc.Put(assigned);
    r.enc.Put(int32_t{CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR});
    r.enc.PutFlag(true);
    return Run(api::ApiId::cudnnBackendCreateDescriptor, r);
  };
  const uint64_t id = api::ShimAssignedId(api::HandleKind::kDnnDescriptor, 3);
  ASSERT_EQ(create(id), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(backend_.descriptors, 1);
  uint64_t raw = id;
  ASSERT_TRUE(handles_.ToBackendRaw(api::HandleKind::kDnnDescriptor, &raw));
  EXPECT_EQ(raw, 0xde51u);
  // Refused, nothing created: live, another kind's, the agent's own form.
  EXPECT_EQ(create(id), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(create(api::ShimAssignedId(api::HandleKind::kLtMatmulDesc, 4)), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(create(HandleTable::kVirtualTag |
                   (static_cast<uint64_t>(api::HandleKind::kDnnDescriptor) << 40) | 4),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(backend_.descriptors, 1);
  // Set through its id; destroyed, the id may be taken again (a replay).
  const int64_t dims = 4;
  Request set = Set(id, CUDNN_TYPE_INT64, 1, &dims, sizeof(dims));
  ASSERT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, set), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(backend_.last_descriptor, 0xde51u);
  Request destroy;
  destroy.enc.Put(id);
  ASSERT_EQ(Run(api::ApiId::cudnnBackendDestroyDescriptor, destroy), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(create(id), CUDNN_STATUS_SUCCESS);
}

TEST_F(HooksCudnnTest, SetAttributeTranslatesEveryDescriptorElement) {
  const uint64_t graph = NewDescriptor(), a = NewDescriptor(), b = NewDescriptor();
  ASSERT_NE(a, 0xde52u) << "backend descriptor leaked to the application";
  const uint64_t ops[2] = {b, a};
  Request r = Set(graph, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, ops, sizeof(ops));
  ASSERT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(backend_.last_descriptor, 0xde51u);
  ASSERT_EQ(backend_.last_bytes.size(), sizeof(ops));
  uint64_t got[2];
  std::memcpy(got, backend_.last_bytes.data(), sizeof(got));
  EXPECT_EQ(got[0], 0xde53u);
  EXPECT_EQ(got[1], 0xde52u);

  const uint64_t handle = NewHandle();
  Request h = Set(graph, CUDNN_TYPE_HANDLE, 1, &handle, sizeof(handle));
  ASSERT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, h), CUDNN_STATUS_SUCCESS);
  uint64_t real_handle = 0;
  std::memcpy(&real_handle, backend_.last_bytes.data(), sizeof(real_handle));
  EXPECT_EQ(real_handle, 0xd01u);

  // Plain values and device pointers travel as they are.
  const uint64_t pointers[2] = {0x200000001000ull, 0x200000002000ull};
  Request p = Set(graph, CUDNN_TYPE_VOID_PTR, 2, pointers, sizeof(pointers));
  ASSERT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, p), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(std::memcmp(backend_.last_bytes.data(), pointers, sizeof(pointers)), 0);

  // An address outside device memory (host memory the agent does not
  // share) is refused before cuDNN could dereference it.
  const int calls = backend_.calls;
  const uint64_t host[2] = {0x200000001000ull, 0x7ffc00001000ull};
  Request q = Set(graph, CUDNN_TYPE_VOID_PTR, 2, host, sizeof(host));
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, q), CUDNN_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(backend_.calls, calls);
}

TEST_F(HooksCudnnTest, UnknownElementsAndMalformedRequestsNeverReachTheBackend) {
  const uint64_t graph = NewDescriptor(), a = NewDescriptor();
  Request destroy;
  destroy.enc.Put(a);
  ASSERT_EQ(Run(api::ApiId::cudnnBackendDestroyDescriptor, destroy), CUDNN_STATUS_SUCCESS);
  const uint64_t live = NewDescriptor();
  const uint64_t with_destroyed[2] = {live, a};
  Request r1 = Set(graph, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, with_destroyed, 16);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r1), CUDNN_STATUS_BAD_PARAM);
  const uint64_t made_up = 0x1234;
  Request r2 = Set(graph, CUDNN_TYPE_HANDLE, 1, &made_up, 8);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r2), CUDNN_STATUS_BAD_PARAM);
  Request r3 = Set(a, CUDNN_TYPE_INT64, 1, &made_up, 8);  // a destroyed descriptor
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r3), CUDNN_STATUS_BAD_PARAM);
  Request r4 = Set(graph, CUDNN_TYPE_INT64, 2, &made_up, 8);  // bytes for 1 of 2 elements
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r4), CUDNN_STATUS_BAD_PARAM);
  Request r5 = Set(graph, 999, 1, &made_up, 8);  // no such attribute type
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r5), CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE);
  Request r6 = Set(graph, CUDNN_TYPE_INT64, -1, nullptr, 0);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r6), CUDNN_STATUS_BAD_PARAM);
  Request r7 = Set(graph, CUDNN_TYPE_INT64, 1, &made_up, 8);
  r7.enc.Put(uint8_t{1});  // trailing bytes
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r7), CUDNN_STATUS_BAD_PARAM);
  Request r8;
  r8.enc.Put(graph);  // truncated
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r8), CUDNN_STATUS_BAD_PARAM);
  Request r9 = Set(graph, CUDNN_TYPE_INT64, 0, nullptr, 0);  // a null array, as cuDNN answers it
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r9), CUDNN_STATUS_BAD_PARAM);
  const uint64_t null_element = 0;
  Request r10 = Set(graph, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &null_element, 8);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendSetAttribute, r10), CUDNN_STATUS_BAD_PARAM);
  // Gets: a destroyed element, elements the type does not take, a count too big.
  Request g1 = Get(graph, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, true, true, with_destroyed, 16);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, g1), CUDNN_STATUS_BAD_PARAM);
  Request g2 = Get(graph, CUDNN_TYPE_INT64, 1, true, true, &made_up, 8);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, g2), CUDNN_STATUS_BAD_PARAM);
  Request g3 = Get(graph, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, true, true, &live, 8);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, g3), CUDNN_STATUS_BAD_PARAM);
  Request g4 = Get(graph, CUDNN_TYPE_INT64, api::kDnnMaxElements, true, true, nullptr, 0);
  EXPECT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, g4), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(backend_.calls, 0);
}

// Attribute names and types are enums: an integer that names none of their
// values is refused at decode with cuDNN's code and never becomes an enum
// the backend sees; the same request with a real name reaches it.
TEST_F(HooksCudnnTest, AttributeNamesOutsideTheEnumNeverReachTheBackend) {
  const uint64_t d = NewDescriptor();
  const int64_t v = 7;
  auto set = [&](int32_t name) {
    Request r;
    r.enc.Put(d);
    r.enc.Put(name);
    r.enc.Put(int32_t{CUDNN_TYPE_INT64});
    r.enc.Put(int64_t{1});
    r.enc.PutBytes(&v, sizeof(v));
    return Run(api::ApiId::cudnnBackendSetAttribute, r);
  };
  auto get = [&](int32_t name) {
    Request r;
    r.enc.Put(d);
    r.enc.Put(name);
    r.enc.Put(int32_t{CUDNN_TYPE_INT64});
    r.enc.Put(int64_t{1});
    r.enc.PutFlag(true);
    r.enc.PutFlag(true);
    r.enc.PutBytes(&v, sizeof(v));
    return Run(api::ApiId::cudnnBackendGetAttribute, r);
  };
  const int calls = backend_.calls;
  for (int32_t name : {-1, 2909, 1 << 30}) {
    EXPECT_EQ(set(name), CUDNN_STATUS_BAD_PARAM) << "name " << name;
    EXPECT_EQ(get(name), CUDNN_STATUS_BAD_PARAM) << "name " << name;
  }
  EXPECT_EQ(backend_.calls, calls);
  EXPECT_EQ(set(CUDNN_ATTR_TENSOR_UNIQUE_ID), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(backend_.calls, calls + 1);
}

TEST_F(HooksCudnnTest, DescriptorTypedGetsFillTheCallersDescriptors) {
  const uint64_t heur = NewDescriptor(), c0 = NewDescriptor(), c1 = NewDescriptor(),
                 c2 = NewDescriptor();
  // The count alone (no array).
  backend_.count_answer = 5;
  Request count = Get(heur, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, true, false, nullptr, 0);
  ASSERT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, count), CUDNN_STATUS_SUCCESS);
  int64_t n = 0;
  std::memcpy(&n, Out(0).data(), sizeof(n));
  EXPECT_EQ(n, 5);

  // Three configs asked, two filled: the backend sees its own descriptors,
  // the caller gets its virtual ones back for the two written.
  backend_.count_answer = 2;
  const uint64_t cfgs[3] = {c0, c1, c2};
  Request fill = Get(heur, CUDNN_TYPE_BACKEND_DESCRIPTOR, 3, true, true, cfgs, sizeof(cfgs));
  ASSERT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, fill), CUDNN_STATUS_SUCCESS);
  uint64_t seen[3];
  std::memcpy(seen, backend_.last_bytes.data(), sizeof(seen));
  EXPECT_EQ(seen[0], 0xde52u);
  EXPECT_EQ(seen[1], 0xde53u);
  EXPECT_EQ(seen[2], 0xde54u);
  std::memcpy(&n, Out(0).data(), sizeof(n));
  EXPECT_EQ(n, 2);
  std::vector<char> elements = Out(1);
  ASSERT_EQ(elements.size(), 2 * sizeof(uint64_t)) << "only the written elements come back";
  uint64_t back[2];
  std::memcpy(back, elements.data(), sizeof(back));
  EXPECT_EQ(back[0], c0);
  EXPECT_EQ(back[1], c1);

  // A backend object the library wrote in place of one is named virtually.
  backend_.new_handle = 0xde99;
  Request replaced = Get(heur, CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, true, true, cfgs, 16);
  ASSERT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, replaced), CUDNN_STATUS_SUCCESS);
  std::memcpy(back, Out(1).data(), sizeof(back));
  EXPECT_EQ(back[0], c0);
  EXPECT_NE(back[1], 0xde99u) << "backend descriptor leaked to the application";
  uint64_t real = back[1];
  ASSERT_TRUE(handles_.ToBackendRaw(api::HandleKind::kDnnDescriptor, &real));
  EXPECT_EQ(real, 0xde99u);

  // Plain values come back as bytes, without a count too (all requested).
  Request values = Get(heur, CUDNN_TYPE_INT64, 2, false, true, nullptr, 0);
  ASSERT_EQ(Run(api::ApiId::cudnnBackendGetAttribute, values), CUDNN_STATUS_SUCCESS);
  std::vector<char> v = Out(0);
  ASSERT_EQ(v.size(), 16u);
  int64_t got[2];
  std::memcpy(got, v.data(), sizeof(got));
  EXPECT_EQ(got[0], 7);
  EXPECT_EQ(got[1], 8);
}

TEST_F(HooksCudnnTest, VersionsAndLastErrorString) {
  Request version;
  ASSERT_EQ(Run(api::ApiId::cudnnGetVersion, version), CUDNN_STATUS_SUCCESS);
  uint64_t v = 0;
  std::memcpy(&v, Out(0).data(), sizeof(v));
  EXPECT_EQ(v, 91900u);
  Request message;
  message.enc.Put(uint64_t{8});
  ASSERT_EQ(Run(api::ApiId::cudnnGetLastErrorString, message), CUDNN_STATUS_SUCCESS);
  std::vector<char> text = Out(0);
  ASSERT_EQ(text.size(), 8u);
  EXPECT_STREQ(text.data(), "the las") << "truncated and NUL-terminated";
  Request too_big;
  too_big.enc.Put(uint64_t{hooks::kDnnMaxErrorString + 1});
  EXPECT_EQ(Run(api::ApiId::cudnnGetLastErrorString, too_big), CUDNN_STATUS_BAD_PARAM);
  Request zero;
  zero.enc.Put(uint64_t{0});
  EXPECT_EQ(Run(api::ApiId::cudnnGetLastErrorString, zero), CUDNN_STATUS_BAD_PARAM);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
