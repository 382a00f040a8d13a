// Fuzzes the agent's whole request path as an application reaches it: a
// real Session (executor loop, journaling, replies, host callbacks, the
// hooks that need a session: staging, shared host memory, kernels,
// callbacks) over a real shared-memory channel, on the host backend. The
// fuzzer plays a misbehaving application: it writes arbitrary requests into
// the request ring, names valid, absent and nonexistent reply slots, waits
// for the replies it asked for, drains the callback ring (acknowledging
// each callback without running it) and disconnects at the end, which must
// end the session. ASan and UBSan (with its enum check) turn memory errors
// and undefined behaviour into crashes; libFuzzer's -timeout catches a
// session that never answers or never ends.
//
// Input: byte 0 holds options (bit 0: journal on), then requests, each
// [u16 api_id][u8 reply][u16 body_len][body]; reply % 4 = 0: no reply
// (asynchronous), 1: a reply slot, waited for, 2: a slot past the
// channel's, 3: a reply slot, not waited for. A short tail is one last
// request with the bytes that remain.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <system_error>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/backends/host/host_backend.h"
#include "agent/journaling.h"
#include "agent/session.h"
#include "transport/shm_channel.h"

namespace {

using revenant::agent::BackendOptions;
using revenant::agent::RequestJournal;
using revenant::agent::Session;
using revenant::agent::SessionOptions;
using revenant::agent::host::HostBackend;
using revenant::transport::ChannelOptions;
using revenant::transport::ShmClientChannel;
using revenant::transport::ShmServerChannel;

constexpr uint64_t kFuzzDeviceBase = 0x340000000000ull;
constexpr uint64_t kFuzzDeviceSize = 64ull << 20;
constexpr int kMaxRequests = 48;
constexpr uint32_t kReplySlots = 4;

void Die(const char* what, const std::string& why) {
  std::fprintf(stderr, "session_fuzzer: %s: %s\n", what, why.c_str());
  std::abort();
}

HostBackend* Backend() {
  static HostBackend* backend = [] {
    BackendOptions options;
    options.device_range.base = kFuzzDeviceBase;
    options.device_range.size = kFuzzDeviceSize;
    auto b = HostBackend::Create(options);
    if (!b.ok()) Die("cannot create the host backend", b.status().ToString());
    return b->release();
  }();
  return backend;
}

// A private job directory for the channel and the journal, in memory as a
// job's (/dev/shm; a test's TMPDIR on disk costs each input a few times
// more), else in TMPDIR or /tmp; removed at exit.
const std::string& JobDir() {
  static const std::string dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    const std::string base = access("/dev/shm", W_OK) == 0        ? std::string("/dev/shm")
                             : tmp != nullptr && *tmp != '\0' ? std::string(tmp)
                                                              : std::string("/tmp");
    std::string t = base + "/revenant-session-fuzz-XXXXXX";
    if (mkdtemp(t.data()) == nullptr) Die("mkdtemp", std::strerror(errno));
    return t;
  }();
  return dir;
}
void RemoveJobDir() {
  std::error_code ignored;
  std::filesystem::remove_all(JobDir(), ignored);
}

// Acknowledges every host callback the agent posts, without running it
// (the fuzzer's callback records name no real functions).
void DrainCallbacks(ShmClientChannel* client, const std::atomic<bool>* stop) {
  while (!stop->load()) {
    auto rec = client->callbacks().Peek(absl::Now() + absl::Milliseconds(1));
    if (!rec.ok() || *rec == nullptr) continue;
    const uint64_t seq = (*rec)->seq;
    client->callbacks().Advance();
    client->callbacks().Release(seq);
    if (seq != 0) client->PostCallbackDone();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One line per refused request would cost more than the request.
  setenv("REVENANT_LOG_LEVEL", "error", 0);
  JobDir();
  std::atexit(RemoveJobDir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  HostBackend* backend = Backend();
  const std::string& dir = JobDir();
  const uint8_t flags = data[0];
  size_t pos = 1;

  ChannelOptions co;
  co.ring_capacity = 64 << 10;
  co.callback_ring_capacity = 4 << 10;
  co.reply_slots = kReplySlots;
  co.reply_data_size = 16 << 10;
  co.staging_size = 64 << 10;
  const std::string path = dir + "/channel";
  auto client = ShmClientChannel::Create(path, co);
  if (!client.ok()) Die("cannot create the channel", client.status().ToString());
  auto server = ShmServerChannel::Attach(path);
  if (!server.ok()) Die("cannot attach to the channel", server.status().ToString());
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    Die("socketpair", std::strerror(errno));

  SessionOptions options;
  options.callback_timeout = absl::Milliseconds(200);
  if (flags & 1) {
    auto journal = RequestJournal::Open(dir + "/journal", "fuzz", 0, RequestJournal::Options());
    if (!journal.ok()) Die("cannot open the journal", journal.status().ToString());
    options.journal = std::move(*journal);
  }
  auto session =
      std::make_unique<Session>(backend, std::move(*server), fds[0], dir, std::move(options));
  std::thread executor([&] { session->Run(); });
  std::atomic<bool> stop{false};
  std::thread callbacks(DrainCallbacks, client->get(), &stop);

  ShmClientChannel* ch = client->get();
  std::vector<int> unwaited;
  for (int i = 0; i < kMaxRequests && pos + 2 <= size; ++i) {
    uint16_t id = 0;
    std::memcpy(&id, data + pos, 2);
    pos += 2;
    uint8_t reply = 0;
    if (pos < size) reply = data[pos++];
    uint16_t len = 0;
    if (pos + 2 <= size) {
      std::memcpy(&len, data + pos, 2);
      pos += 2;
    }
    const size_t n = len < size - pos ? len : size - pos;
    int slot = -1;
    if (reply % 4 == 1 || reply % 4 == 3) {
      auto s = ch->AcquireReplySlot(absl::Now() + absl::Milliseconds(100));
      if (!s.ok()) break;  // every slot held by unwaited requests
      slot = *s;
    } else if (reply % 4 == 2) {
      slot = static_cast<int>(kReplySlots) + reply;
    }
    auto w = ch->BeginRecord(static_cast<uint32_t>(n), absl::Now() + absl::Seconds(5));
    if (!w.ok()) break;  // the agent stopped reading (it dropped a bad ring)
    if (n > 0) std::memcpy(w->body(), data + pos, n);
    pos += n;
    w->header().api_id = id;
    w->header().flags = 0;
    w->header().reply_slot = slot;
    const uint64_t seq = ch->Commit(std::move(*w));
    if (reply % 4 == 1) {
      // A request that never answers is a hang; -timeout reports it.
      (void)ch->WaitReply(slot, seq, absl::Now() + absl::Seconds(30));
      ch->ReleaseReplySlot(slot);
    } else if (reply % 4 == 3) {
      unwaited.push_back(slot);
    }
    if (!session->serving()) break;
  }
  // The application goes away: the session must end.
  ch->SetShutdown();
  close(fds[1]);
  executor.join();
  stop.store(true);
  callbacks.join();
  for (int s : unwaited) ch->ReleaseReplySlot(s);
  session.reset();  // resets the backend
  client->reset();
  return 0;
}
