// The generated dispatcher against a fake backend: argument decoding, OUT
// values, handle virtualization, and refusal of malformed requests.
#include "agent/dispatch.h"

#include <vector>

#include "api/backend_api.h"
#include "api/wire.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

class FakeBackend : public api::BackendApi {
 public:
  cudaError_t cudaMalloc(void** devPtr, size_t size) override {
    ++calls;
    last_size = size;
    *devPtr = reinterpret_cast<void*>(0x200000001000ull);
    return cudaSuccess;
  }
  cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) override {
    ++calls;
    last_flags = flags;
    *s = reinterpret_cast<cudaStream_t>(0xabc0 + calls);
    return cudaSuccess;
  }
  cudaError_t cudaStreamSynchronize(cudaStream_t s) override {
    ++calls;
    last_stream = s;
    return cudaSuccess;
  }
  cudaError_t cudaStreamDestroy(cudaStream_t s) override {
    ++calls;
    last_stream = s;
    return cudaSuccess;
  }
  int calls = 0;
  size_t last_size = 0;
  unsigned last_flags = 0;
  cudaStream_t last_stream = nullptr;
};

struct Request {
  std::vector<char> body = std::vector<char>(256);
  wire::Encoder enc{body.data(), body.size()};
};

class DispatchTest : public testing::Test {
 protected:
  int32_t Run(api::ApiId id, Request& req) {
    reply_.assign(1024, 0);
    wire::Decoder in(req.body.data(), req.enc.size());
    out_ = wire::Encoder(reply_.data(), reply_.size());
    return Dispatch(id, in, out_, ctx_);
  }
  template <typename T>
  T Out(int index) {
    wire::Decoder d(reply_.data(), out_.size());
    const char* data = nullptr;
    uint64_t n = 0;
    for (int i = 0; i <= index; ++i) EXPECT_TRUE(d.GetBytes(&data, &n));
    T v{};
    EXPECT_EQ(n, sizeof(T));
    std::memcpy(&v, data, sizeof(T));
    return v;
  }

  FakeBackend backend_;
  HandleTable handles_;
  DispatchContext ctx_{&backend_, &handles_, nullptr, 0};
  std::vector<char> reply_;
  wire::Encoder out_;
};

TEST_F(DispatchTest, DecodesArgumentsAndReturnsOutValues) {
  Request r;
  r.enc.PutFlag(true);
  r.enc.Put(size_t{4096});
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, r), cudaSuccess);
  EXPECT_EQ(backend_.last_size, 4096u);
  EXPECT_EQ(Out<uint64_t>(0), 0x200000001000ull);
}

TEST_F(DispatchTest, StreamsAreVirtualizedAndTranslatedBack) {
  Request create;
  create.enc.PutFlag(true);
  create.enc.Put(1u);  // cudaStreamNonBlocking
  ASSERT_EQ(Run(api::ApiId::cudaStreamCreateWithFlags, create), cudaSuccess);
  EXPECT_EQ(backend_.last_flags, 1u);
  const auto virtual_stream = Out<cudaStream_t>(0);
  EXPECT_NE(reinterpret_cast<uint64_t>(virtual_stream), 0xabc1u) << "backend handle leaked";

  Request sync;
  sync.enc.Put(virtual_stream);
  ASSERT_EQ(Run(api::ApiId::cudaStreamSynchronize, sync), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_stream), 0xabc1u);

  Request destroy;
  destroy.enc.Put(virtual_stream);
  ASSERT_EQ(Run(api::ApiId::cudaStreamDestroy, destroy), cudaSuccess);
  // The destroyed handle no longer translates: the native error, no backend call.
  const int calls = backend_.calls;
  EXPECT_EQ(Run(api::ApiId::cudaStreamSynchronize, sync), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(backend_.calls, calls);
}

TEST_F(DispatchTest, MalformedRequestsNeverReachTheBackend) {
  Request truncated;
  truncated.enc.PutFlag(true);  // size_t missing
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, truncated), cudaErrorInvalidValue);
  Request trailing;
  trailing.enc.PutFlag(true);
  trailing.enc.Put(size_t{1});
  trailing.enc.Put(uint32_t{7});  // extra bytes
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, trailing), cudaErrorInvalidValue);
  Request bad_flag;
  bad_flag.enc.Put(uint8_t{9});
  bad_flag.enc.Put(size_t{1});
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, bad_flag), cudaErrorInvalidValue);
  EXPECT_EQ(backend_.calls, 0);
}

TEST_F(DispatchTest, EveryForwardedRowHasADispatcher) {
  // A one-byte garbage body: every dispatcher must refuse it with the
  // library's invalid-argument error, and none may be missing.
  for (int i = 1; i < api::kApiCount; ++i) {
    const api::ApiTraits& t = api::Traits(static_cast<uint32_t>(i));
    Request r;
    r.enc.Put(uint8_t{0xee});
    const int32_t status = Run(static_cast<api::ApiId>(i), r);
    if (t.dispatched) {
      EXPECT_NE(status, kNoDispatcher) << t.name;
      EXPECT_NE(status, 0) << t.name << " accepted a garbage request";
    } else {
      EXPECT_EQ(status, kNoDispatcher) << t.name;
    }
  }
  EXPECT_EQ(backend_.calls, 0);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
