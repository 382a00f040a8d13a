// The hook rows' generated structs (api/hook_structs.h): every one round
// trips, refuses a short body, and a few encode exactly the bytes the hooks
// have always put on the wire (journals written before replay unchanged).
#include "api/hook_structs.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "api/hook_protocol.h"
#include "api/hook_structs_testing.h"
#include "api/wire.h"
#include "gtest/gtest.h"

namespace revenant {
namespace hooks {
namespace {

// Size/Encode/Decode with or without the request (replies whose layout
// depends on it take it).
template <typename T, typename R>
auto SizeOf(const T& x, const R& req, int) -> decltype(x.Size(req)) {
  return x.Size(req);
}
template <typename T, typename R>
size_t SizeOf(const T& x, const R&, long) {
  return x.Size();
}
template <typename T, typename R>
auto EncodeInto(const T& x, wire::Encoder& w, const R& req, int) -> decltype(x.Encode(w, req)) {
  x.Encode(w, req);
}
template <typename T, typename R>
void EncodeInto(const T& x, wire::Encoder& w, const R&, long) {
  x.Encode(w);
}
template <typename T, typename R>
auto DecodeFrom(T& x, wire::Decoder& r, const R& req, int) -> decltype(x.Decode(r, req)) {
  return x.Decode(r, req);
}
template <typename T, typename R>
bool DecodeFrom(T& x, wire::Decoder& r, const R&, long) {
  return x.Decode(r);
}

template <typename T, typename R>
std::string Encode(const T& x, const R& req) {
  const size_t size = SizeOf(x, req, 0);
  std::string body(size, '\xee');
  wire::Encoder w(body.data(), body.size());
  EncodeInto(x, w, req, 0);
  EXPECT_FALSE(w.overflow());
  EXPECT_EQ(w.size(), size);
  return body;
}

struct NoRequest {};

template <typename T, typename R>
void CheckRoundTrip(const std::string& what, const T& x, const R& req) {
  SCOPED_TRACE(what);
  const std::string body = Encode(x, req);
  T back;
  wire::Decoder in(body.data(), body.size());
  ASSERT_TRUE(DecodeFrom(back, in, req, 0));
  EXPECT_EQ(in.remaining(), 0u);
  EXPECT_EQ(Encode(back, req), body);
  // A short body never decodes, except when only trailing padding is cut.
  for (size_t n = 0; n < body.size(); ++n) {
    T cut;
    wire::Decoder short_in(body.data(), n);
    if (!DecodeFrom(cut, short_in, req, 0)) continue;
    const std::string rest = body.substr(n);
    EXPECT_LT(rest.size(), 8u) << "a prefix of " << n << " bytes decoded";
    EXPECT_EQ(rest, std::string(rest.size(), '\0')) << "a prefix of " << n << " bytes decoded";
  }
}

// Round trips of a row's structs filled from seeds 0..63.
template <typename Request, typename Reply>
void CheckRowRoundTrips(const char* name, Request, Reply) {
  for (uint64_t seed = 0; seed < 64; ++seed) {
    Request req;
    testing::FillForTest(&req, seed);
    CheckRoundTrip(std::string(name) + " request, seed " + std::to_string(seed), req, NoRequest{});
    Reply rep;
    testing::FillForTest(&rep, seed * 7 + 3);
    CheckRoundTrip(std::string(name) + " reply, seed " + std::to_string(seed), rep, req);
  }
}

TEST(HookStructsTest, EveryRowRoundTrips) {
  int rows = 0;
  auto check = [&](const char* name, auto request, auto reply) {
    ++rows;
    CheckRowRoundTrips(name, request, reply);
  };
  testing::ForEachHookRow(check);
  EXPECT_GT(rows, 30);
  const int hook_rows = rows;
  testing::ForEachShimHookRow(check);
  EXPECT_GE(rows - hook_rows, 12);
}

TEST(HookStructsTest, ReservedBytesAreFilledInPlace) {
  cudnnGetLastErrorStringReply rep;
  rep.message = wire::Bytes::Reserved(5);
  std::string body(rep.Size(), '\0');
  wire::Encoder w(body.data(), body.size());
  rep.Encode(w);
  ASSERT_NE(rep.message.fill, nullptr);
  std::memcpy(rep.message.fill, "oops", 5);
  cudnnGetLastErrorStringReply back;
  wire::Decoder in(body.data(), body.size());
  ASSERT_TRUE(back.Decode(in));
  ASSERT_EQ(back.message.size, 5u);
  EXPECT_STREQ(back.message.data, "oops");

  // No room: no place to fill.
  cudnnGetLastErrorStringReply big;
  big.message = wire::Bytes::Reserved(4096);
  char small[32];
  wire::Encoder tight(small, sizeof(small));
  big.Encode(tight);
  EXPECT_TRUE(tight.overflow());
  EXPECT_EQ(big.message.fill, nullptr);
}

// The layouts as the hooks wrote them by hand, field by field.
class Legacy {
 public:
  template <typename T>
  Legacy& Put(const T& v) {
    sizer_.Put(v);
    ops_.push_back([v](wire::Encoder& e) { e.Put(v); });
    return *this;
  }
  Legacy& Flag(bool v) {
    sizer_.PutFlag();
    ops_.push_back([v](wire::Encoder& e) { e.PutFlag(v); });
    return *this;
  }
  Legacy& Bytes(const void* p, uint64_t n) {
    sizer_.PutBytes(p, n);
    ops_.push_back([p, n](wire::Encoder& e) { e.PutBytes(p, n); });
    return *this;
  }
  std::string Body() const {
    std::string body(sizer_.size(), '\xee');
    wire::Encoder e(body.data(), body.size());
    for (const auto& op : ops_) op(e);
    EXPECT_FALSE(e.overflow());
    return body;
  }

 private:
  wire::Sizer sizer_;
  std::vector<std::function<void(wire::Encoder&)>> ops_;
};

template <typename T>
std::string Body(const T& x) {
  return Encode(x, NoRequest{});
}

TEST(HookStructsTest, CopyRequestsKeepTheirBytes) {
  const char data[] = "eleven byte";
  cudaMemcpyRequest r;
  r.head = CopyHead{};
  r.head.dst = 0x7f0000001000;
  r.head.src = 0x1234;
  r.head.count = 11;
  r.head.kind = cudaMemcpyHostToDevice;
  r.head.stream = 7;
  r.head.mode = kInlineSource;
  r.data = wire::Bytes::Of(data, 11);
  EXPECT_EQ(Body(r), Legacy()
                         .Put(uint64_t{0x7f0000001000})
                         .Put(uint64_t{0x1234})
                         .Put(uint64_t{11})
                         .Put(int32_t{cudaMemcpyHostToDevice})
                         .Put(uint64_t{7})
                         .Put(uint8_t{kInlineSource})
                         .Bytes(data, 11)
                         .Body());

  cudaMemcpyToSymbolRequest s;
  const std::string name = "_Z3varv";
  s.module_key = 3;
  s.device_name = wire::Bytes::Of(name.data(), name.size());
  s.offset = 16;
  s.head.src = 0x99;
  s.head.count = 8;
  s.head.kind = cudaMemcpyDeviceToHost;
  s.head.mode = kStagingDest;
  s.staging_offset = 4096;
  EXPECT_EQ(Body(s), Legacy()
                         .Put(uint64_t{3})
                         .Bytes(name.data(), name.size())
                         .Put(uint64_t{16})
                         .Put(uint64_t{0})
                         .Put(uint64_t{0x99})
                         .Put(uint64_t{8})
                         .Put(int32_t{cudaMemcpyDeviceToHost})
                         .Put(uint64_t{0})
                         .Put(uint8_t{kStagingDest})
                         .Put(uint64_t{4096})
                         .Body());
}

TEST(HookStructsTest, LaunchAndModuleRequestsKeepTheirBytes) {
  const char packed[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeCooperative;
  attr.val.cooperative = 1;
  cudaLaunchKernelExCRequest r;
  r.launch.function_id = 42;
  r.launch.grid = dim3(4, 2, 1);
  r.launch.block = dim3(128, 1, 1);
  r.launch.shared_bytes = 256;
  r.launch.stream = 5;
  r.launch.cooperative = 0;
  r.launch.args = wire::Bytes::Of(packed, sizeof(packed));
  r.attrs = wire::Bytes::Of(&attr, sizeof(attr));
  EXPECT_EQ(Body(r), Legacy()
                         .Put(uint64_t{42})
                         .Put(dim3(4, 2, 1))
                         .Put(dim3(128, 1, 1))
                         .Put(uint64_t{256})
                         .Put(uint64_t{5})
                         .Put(uint8_t{0})
                         .Bytes(packed, sizeof(packed))
                         .Bytes(&attr, sizeof(attr))
                         .Body());

  const std::string path = "/usr/lib/libx.so", name = "_Z6kernelPf";
  __cudaRegisterFatBinaryEndRequest m;
  m.module.module_key = 9;
  m.module.has_image = true;
  m.module.by_file = true;
  m.module.path = wire::Bytes::Of(path.data(), path.size());
  m.module.offset = 4096;
  m.module.size = 1000;
  m.module.st_dev = 2049;
  m.module.st_ino = 77;
  m.module.mtime_ns = 1700000000123456789;
  m.mangled_name = wire::Bytes::Of(name.data(), name.size());
  EXPECT_EQ(Body(m), Legacy()
                         .Put(uint64_t{9})
                         .Flag(true)
                         .Flag(true)
                         .Bytes(path.data(), path.size())
                         .Put(uint64_t{4096})
                         .Put(uint64_t{1000})
                         .Put(uint64_t{2049})
                         .Put(uint64_t{77})
                         .Put(int64_t{1700000000123456789})
                         .Bytes(name.data(), name.size())
                         .Body());

  // A module already sent: key, no image, the name, want_address.
  __cudaRegisterVarRequest v;
  v.module.module_key = 9;
  v.device_name = wire::Bytes::Of(name.data(), name.size());
  v.want_address = true;
  EXPECT_EQ(Body(v), Legacy()
                         .Put(uint64_t{9})
                         .Flag(false)
                         .Bytes(name.data(), name.size())
                         .Flag(true)
                         .Body());
  __cudaRegisterVarReply vr;
  vr.size = 4;
  vr.address = 0x7f0000000200;
  EXPECT_EQ(Encode(vr, v), Legacy().Put(uint64_t{4}).Put(uint64_t{0x7f0000000200}).Body());
  v.want_address = false;
  EXPECT_EQ(Encode(vr, v), Legacy().Put(uint64_t{4}).Body());
}

TEST(HookStructsTest, GraphRequestsAndRepliesKeepTheirBytes) {
  static const uint64_t kNone = 0;
  cudaGraphAddKernelNodeRequest k;
  k.graph = 11;
  k.deps = wire::Bytes::Of(&kNone, 0);  // present, empty
  k.kernel.function_id = 3;
  k.kernel.grid = dim3(1, 1, 1);
  k.kernel.block = dim3(32, 1, 1);
  k.kernel.shared_bytes = 0;
  std::vector<char> empty;
  empty.reserve(1);
  k.kernel.args = wire::Bytes::Of(empty.data(), 0);
  EXPECT_EQ(Body(k), Legacy()
                         .Put(uint64_t{11})
                         .Bytes(&kNone, 0)
                         .Put(uint64_t{3})
                         .Put(dim3(1, 1, 1))
                         .Put(dim3(32, 1, 1))
                         .Put(uint64_t{0})
                         .Bytes(empty.data(), 0)
                         .Body());

  const uint64_t deps[2] = {5, 6};
  cudaGraphAddNodeRequest c;
  c.graph = 11;
  c.deps = wire::Bytes::Of(deps, sizeof(deps));
  c.type = cudaGraphNodeTypeConditional;
  c.conditional.handle = 0xabc;
  c.conditional.type = cudaGraphCondTypeWhile;
  c.conditional.size = 2;
  EXPECT_EQ(Body(c), Legacy()
                         .Put(uint64_t{11})
                         .Bytes(deps, sizeof(deps))
                         .Put(int32_t{cudaGraphNodeTypeConditional})
                         .Put(uint64_t{0xabc})
                         .Put(int32_t{cudaGraphCondTypeWhile})
                         .Put(uint32_t{2})
                         .Body());
  const uint64_t node = 77, bodies[2] = {21, 22};
  cudaGraphAddNodeReply cr;
  cr.node = wire::Bytes::Of(&node, sizeof(node));
  cr.dptr = 0;
  cr.bodies = wire::Bytes::Of(bodies, sizeof(bodies));
  EXPECT_EQ(Encode(cr, c), Legacy()
                               .Bytes(&node, sizeof(node))
                               .Put(uint64_t{0})
                               .Bytes(bodies, sizeof(bodies))
                               .Body());
  c.type = cudaGraphNodeTypeEmpty;
  EXPECT_EQ(Encode(cr, c), Legacy().Bytes(&node, sizeof(node)).Body());

  cudaStreamGetCaptureInfoReply info;
  info.status = cudaStreamCaptureStatusActive;
  info.id = 12;
  info.graph = 13;
  info.deps = wire::Bytes::Of(deps, sizeof(deps));
  EXPECT_EQ(Body(info), Legacy()
                            .Put(int32_t{cudaStreamCaptureStatusActive})
                            .Put(uint64_t{12})
                            .Put(uint64_t{13})
                            .Bytes(deps, sizeof(deps))
                            .Body());
}

TEST(HookStructsTest, DnnAttributeRequestsAndRepliesKeepTheirBytes) {
  const uint64_t handles[3] = {1, 2, 3};
  cudnnBackendGetAttributeRequest g;
  g.descriptor = 0x55;
  g.name = 7;
  g.type = 15;
  g.requested = 3;
  g.has_count = true;
  g.has_array = true;
  g.in_elements = wire::Bytes::Of(handles, sizeof(handles));
  EXPECT_EQ(Body(g), Legacy()
                         .Put(uint64_t{0x55})
                         .Put(int32_t{7})
                         .Put(int32_t{15})
                         .Put(int64_t{3})
                         .Flag(true)
                         .Flag(true)
                         .Bytes(handles, sizeof(handles))
                         .Body());
  const int64_t count = 2;
  cudnnBackendGetAttributeReply gr;
  gr.count = wire::Bytes::Of(&count, sizeof(count));
  gr.elements = wire::Bytes::Of(handles, 2 * sizeof(uint64_t));
  EXPECT_EQ(Encode(gr, g), Legacy()
                               .Bytes(&count, sizeof(count))
                               .Bytes(handles, 2 * sizeof(uint64_t))
                               .Body());
  g.has_count = false;
  EXPECT_EQ(Encode(gr, g), Legacy().Bytes(handles, 2 * sizeof(uint64_t)).Body());

  cudaHostAllocRequest h;
  const std::string path = "/dev/shm/revenant-pinned-1";
  h.addr = 0x7e0000000000;
  h.size = 2 << 20;
  h.flags = 1;
  h.path = wire::Bytes::Of(path.data(), path.size());
  EXPECT_EQ(Body(h), Legacy()
                         .Put(uint64_t{0x7e0000000000})
                         .Put(uint64_t{2 << 20})
                         .Put(uint32_t{1})
                         .Bytes(path.data(), path.size())
                         .Body());
}

// A SHIM_HOOK row's structs, derived from its parameters, encode what a
// generated stub encodes for the same parameters (the layout its generated
// dispatcher decodes), and decode, byte for byte, the reply the dispatcher
// writes: the hand-written shim side and the generated agent side agree.
TEST(HookStructsTest, ShimHookStructsAreTheGeneratedLayouts) {
  std::vector<uint64_t> seeds;
  for (uint64_t seed = 0; seed < 64; ++seed) seeds.push_back(seed);
  std::mt19937_64 rng(19);
  for (int i = 0; i < 64; ++i) seeds.push_back(rng());
  int rows = 0;
  testing::ForEachShimHookRow([&](const char* name, auto request, auto reply) {
    ++rows;
    for (uint64_t seed : seeds) {
      SCOPED_TRACE(std::string(name) + ", seed " + std::to_string(seed));
      decltype(request) req;
      testing::FillForTest(&req, seed);
      EXPECT_EQ(Body(req), testing::GenericRequestForTest(req));
      const std::string generic = testing::GenericReplyForTest(req, seed);
      decltype(reply) rep;
      wire::Decoder in(generic.data(), generic.size());
      ASSERT_TRUE(DecodeFrom(rep, in, req, 0));
      EXPECT_EQ(in.remaining(), 0u);
      EXPECT_EQ(Encode(rep, req), generic);
    }
  });
  EXPECT_GE(rows, 12);
}

// What the shim's hooks of SHIM_HOOK rows wrote by hand before they used the
// structs: the parameters themselves, an OUT parameter as its presence flag.
TEST(HookStructsTest, ShimHookRequestsKeepTheirBytes) {
  const auto stream = reinterpret_cast<cudaStream_t>(uintptr_t{0x5000000000000003});
  cudaStreamBeginCaptureRequest b;
  b.stream = 0x5000000000000003;
  b.mode = cudaStreamCaptureModeRelaxed;
  EXPECT_EQ(Body(b), Legacy().Put(stream).Put(cudaStreamCaptureModeRelaxed).Body());

  cudaStreamEndCaptureRequest e;
  e.stream = 0x5000000000000003;
  e.pGraph = true;
  EXPECT_EQ(Body(e), Legacy().Put(stream).Flag(true).Body());
  const cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(uintptr_t{0x4000000000000009});
  std::string reply(32, '\0');
  wire::Encoder w(reply.data(), reply.size());
  std::memcpy(w.ReserveBytes(sizeof(graph)), &graph, sizeof(graph));
  reply.resize(w.size());
  cudaStreamEndCaptureReply er;
  wire::Decoder in(reply.data(), reply.size());
  ASSERT_TRUE(er.Decode(in, e));
  cudaGraph_t back = nullptr;
  EXPECT_EQ(er.pGraph.CopyTo(&back, sizeof(back)), sizeof(back));
  EXPECT_EQ(back, graph);

  cudaFuncSetAttributeRequest f;
  f.func = 12;
  f.attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
  f.value = 98304;
  EXPECT_EQ(Body(f), Legacy()
                         .Put(uint64_t{12})
                         .Put(cudaFuncAttributeMaxDynamicSharedMemorySize)
                         .Put(int{98304})
                         .Body());

  cudnnDestroyTensorDescriptorRequest d;
  d.desc = 0x3000000000000001;
  EXPECT_EQ(Body(d), Legacy().Put(reinterpret_cast<void*>(uintptr_t{0x3000000000000001})).Body());
}

}  // namespace
}  // namespace hooks
}  // namespace revenant
