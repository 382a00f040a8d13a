#include "shim/runtime.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "common/kv.h"
#include "common/logging.h"

namespace revenant {
namespace shim {
namespace {

const char* Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || *v == '\0' ? nullptr : v;
}

uint64_t ParseU64(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  uint64_t v = 0;
  if (it != m.end()) (void)absl::SimpleAtoi(it->second, &v);
  return v;
}

// Pinned host memory of rank r lives in [kPinnedBase + r * kPinnedSpan, ...):
// a range the application's own allocations are unlikely to use, mapped with
// MAP_FIXED_NOREPLACE in both processes so neither can clobber a mapping.
constexpr uint64_t kPinnedBase = 0x300000000000ull;
constexpr uint64_t kPinnedSpan = 1ull << 40;

thread_local int32_t tls_last_error = 0;

}  // namespace

void SetLastError(int32_t error) {
  if (error != 0) tls_last_error = error;
}
int32_t PeekLastError() { return tls_last_error; }
int32_t TakeLastError() {
  int32_t e = tls_last_error;
  tls_last_error = 0;
  return e;
}

Runtime* Runtime::Get() {
  // Leaked on purpose: atexit handlers of the application (and nvcc's module
  // unregistration) may still call into the shim during exit.
  static Runtime* runtime = new Runtime();
  return runtime;
}

Runtime::Runtime() {
  if (const char* t = Env("REVENANT_CALL_TIMEOUT_S")) {
    double s = 0;
    if (absl::SimpleAtod(t, &s) && s > 0) call_timeout_ = absl::Seconds(s);
  }
}

transport::ShmClientChannel* Runtime::Channel() {
  if (connected_.load(std::memory_order_acquire)) {
    return channel_->peer_dead() ? nullptr : channel_.get();
  }
  std::lock_guard<std::mutex> lock(connect_mu_);
  if (connected_.load(std::memory_order_acquire)) {
    return channel_->peer_dead() ? nullptr : channel_.get();
  }
  if (connect_failed_) return nullptr;
  if (!Connect()) {
    connect_failed_ = true;
    return nullptr;
  }
  connected_.store(true, std::memory_order_release);
  return channel_.get();
}

bool Runtime::Connect() {
  const char* socket_path = Env("REVENANT_AGENT_SOCKET");
  const char* job_dir = Env("REVENANT_JOB_DIR");
  if (socket_path == nullptr || job_dir == nullptr) {
    REVENANT_LOG(ERROR, "shim")
        << "no Revenant agent configured (REVENANT_AGENT_SOCKET/REVENANT_JOB_DIR unset): "
           "start the program with revenant-run; CUDA calls fail with "
           "cudaErrorDevicesUnavailable";
    return false;
  }
  job_dir_ = job_dir;
  double connect_s = 30;
  if (const char* t = Env("REVENANT_CONNECT_TIMEOUT_S")) (void)absl::SimpleAtod(t, &connect_s);
  const absl::Time deadline = absl::Now() + absl::Seconds(connect_s);

  absl::StatusOr<int> fd = transport::ConnectUnix(socket_path, deadline);
  if (!fd.ok()) {
    REVENANT_LOG(ERROR, "shim") << "cannot reach the agent at " << socket_path << ": "
                                << fd.status();
    return false;
  }
  control_fd_ = *fd;
  if (absl::Status s = transport::CheckPeerUid(control_fd_); !s.ok()) {
    REVENANT_LOG(ERROR, "shim") << "refusing the agent at " << socket_path << ": " << s;
    return false;
  }

  const std::string chan_path = absl::StrCat(job_dir_, "/chan-", getpid());
  unlink(chan_path.c_str());  // a stale file of a recycled pid
  transport::ChannelOptions options;
  absl::StatusOr<std::unique_ptr<transport::ShmClientChannel>> ch =
      transport::ShmClientChannel::Create(chan_path, options);
  if (!ch.ok()) {
    REVENANT_LOG(ERROR, "shim") << "cannot create the channel " << chan_path << ": "
                                << ch.status();
    return false;
  }
  channel_ = std::move(*ch);

  absl::Status sent = transport::SendFrame(
      control_fd_, FormatKv({{"op", "hello"},
                             {"version", "1"},
                             {"pid", std::to_string(getpid())},
                             {"channel", chan_path}}));
  absl::StatusOr<std::string> welcome =
      sent.ok() ? transport::RecvFrame(control_fd_, deadline) : absl::StatusOr<std::string>(sent);
  if (!welcome.ok()) {
    REVENANT_LOG(ERROR, "shim") << "handshake with the agent failed: " << welcome.status();
    return false;
  }
  std::map<std::string, std::string> m = ParseKv(*welcome);
  if (m["op"] != "welcome") {
    REVENANT_LOG(ERROR, "shim") << "the agent refused us: " << m["error"];
    return false;
  }
  agent_.agent_pid = static_cast<int>(ParseU64(m, "pid"));
  agent_.backend = m["backend"];
  agent_.device_base = ParseU64(m, "device_base");
  agent_.device_size = ParseU64(m, "device_size");
  agent_.rank = static_cast<int>(ParseU64(m, "rank"));
  pinned_next_ = kPinnedBase + static_cast<uint64_t>(agent_.rank) * kPinnedSpan;

  transport::ShmClientChannel* raw = channel_.get();
  const int rank = agent_.rank;
  const int agent_pid = agent_.agent_pid;
  absl::StatusOr<std::unique_ptr<transport::PeerMonitor>> mon =
      transport::PeerMonitor::Start(control_fd_, [raw, rank, agent_pid] {
        REVENANT_LOG(ERROR, "shim") << "the agent of rank " << rank << " (pid " << agent_pid
                                    << ") is gone; CUDA calls now fail with "
                                       "cudaErrorDevicesUnavailable";
        raw->MarkPeerDead();
      });
  if (!mon.ok()) {
    REVENANT_LOG(ERROR, "shim") << "cannot watch the agent: " << mon.status();
    return false;
  }
  monitor_ = std::move(*mon);
  callback_thread_ = std::thread([this] { CallbackLoop(); });
  callback_thread_.detach();
  REVENANT_LOG(DEBUG, "shim") << "connected to agent pid " << agent_.agent_pid << " ("
                              << agent_.backend << " backend, rank " << agent_.rank << ")";
  return true;
}

// Host callbacks requested by the agent, run here in the order it sent them.
// Each record is a hooks::CallbackRecord.
void Runtime::CallbackLoop() {
  transport::RingConsumer& ring = channel_->callbacks();
  while (!stopping_.load()) {
    absl::StatusOr<const transport::RecordHeader*> rec =
        ring.Peek(absl::Now() + absl::Milliseconds(500));
    if (!rec.ok()) {
      if (absl::IsDeadlineExceeded(rec.status())) continue;
      return;  // the agent is gone
    }
    const transport::RecordHeader* r = *rec;
    hooks::CallbackRecord b{};
    if (r->body_size() >= sizeof(b)) {
      std::memcpy(&b, r->body(), sizeof(b));
      if (b.kind == hooks::kCallbackHostFn) {
        reinterpret_cast<void (*)(void*)>(b.fn)(reinterpret_cast<void*>(b.user_data));
      } else {
        reinterpret_cast<void (*)(void*, int, void*)>(b.fn)(
            reinterpret_cast<void*>(b.stream), b.status, reinterpret_cast<void*>(b.user_data));
      }
    }
    const uint64_t seq = r->seq;
    ring.Advance();
    ring.Release(seq);
    channel_->PostCallbackDone();
  }
}

bool Runtime::IsDevicePointer(const void* p, size_t len) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  return agent_.device_size != 0 && a >= agent_.device_base &&
         a - agent_.device_base < agent_.device_size &&
         len <= agent_.device_size - (a - agent_.device_base);
}

bool Runtime::FindPinned(const void* p, size_t len, PinnedRange* out) {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  std::lock_guard<std::mutex> lock(pinned_mu_);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return false;
  --it;
  const PinnedRange& r = it->second;
  if (a - r.addr >= r.size || len > r.size - (a - r.addr)) return false;
  if (out != nullptr) *out = r;
  return true;
}

void Runtime::NoteDeferredError(int32_t error) {
  int32_t expected = 0;
  if (error != 0) deferred_error_.compare_exchange_strong(expected, error);
}

int32_t Runtime::TakeDeferredError() { return deferred_error_.exchange(0); }

}  // namespace shim
}  // namespace revenant
