// Fuzzes the agent's request decoding and dispatch: arbitrary (api_id, body)
// requests against a real host backend and handle table, with no session
// (the hooks that need one must refuse). Invalid handles, pointers outside
// the rank's device range and absurd sizes must give an error code; ASan and
// UBSan turn any out-of-bounds access or undefined behaviour into a crash.
//
// Input: a sequence of requests, each [u16 api_id][u16 body_len][body]; a
// short tail is one last request with whatever bytes remain. Requests share
// the handle table so later ones can name handles earlier ones created
// (virtual ids are deterministic). After each input the backend is reset and
// the handle table replaced, so inputs do not accumulate streams or memory.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "agent/backends/host/host_backend.h"
#include "agent/dispatch.h"
#include "agent/handles.h"
#include "api/api_ids.h"
#include "api/wire.h"

namespace {

using revenant::agent::BackendOptions;
using revenant::agent::DispatchContext;
using revenant::agent::HandleTable;
using revenant::agent::host::HostBackend;

// A small device range far from the default one, so the fuzzer's mapping
// never meets an agent's.
constexpr uint64_t kFuzzDeviceBase = 0x300000000000ull;
constexpr uint64_t kFuzzDeviceSize = 64ull << 20;
constexpr size_t kReplyCapacity = 1 << 16;
constexpr int kMaxRequests = 64;

HostBackend* Backend() {
  static HostBackend* backend = [] {
    BackendOptions options;
    options.device_range.base = kFuzzDeviceBase;
    options.device_range.size = kFuzzDeviceSize;
    auto b = HostBackend::Create(options);
    if (!b.ok()) {
      std::fprintf(stderr, "dispatch_fuzzer: cannot create the host backend: %s\n",
                   b.status().ToString().c_str());
      std::abort();
    }
    return b->release();
  }();
  return backend;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  HostBackend* backend = Backend();
  HandleTable handles;
  DispatchContext ctx{backend, &handles, nullptr, 0};
  std::vector<char> reply(kReplyCapacity);
  size_t pos = 0;
  for (int i = 0; i < kMaxRequests && pos + 2 <= size; ++i) {
    uint16_t id = 0;
    std::memcpy(&id, data + pos, 2);
    pos += 2;
    uint16_t len = 0;
    if (pos + 2 <= size) {
      std::memcpy(&len, data + pos, 2);
      pos += 2;
    }
    const size_t n = len < size - pos ? len : size - pos;
    // A copy of exactly the body, so ASan sees any read past its end.
    std::vector<char> body(data + pos, data + pos + n);
    pos += n;
    revenant::wire::Decoder in(body.data(), body.size());
    revenant::wire::Encoder out(reply.data(), reply.size());
    ctx.seq = static_cast<uint64_t>(i) + 1;
    (void)revenant::agent::Dispatch(static_cast<revenant::api::ApiId>(id), in, out, ctx);
    if (out.size() > reply.size()) std::abort();  // the encoder wrote past its buffer
  }
  backend->Reset();
  return 0;
}
