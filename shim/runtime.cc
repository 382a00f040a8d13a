#include "shim/runtime.h"

#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "api/hook_protocol.h"
#include "common/daemon_paths.h"
#include "common/events.h"
#include "common/knobs.h"
#include "common/kv.h"
#include "common/logging.h"
#include "shim/call.h"

namespace revenant {
namespace shim {
namespace {

uint64_t ParseU64(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  uint64_t v = 0;
  if (it != m.end()) (void)absl::SimpleAtoi(it->second, &v);
  return v;
}

// Pinned host memory of rank r lives in [kPinnedBase + r * kPinnedSpan, ...):
// a range the application's own allocations are unlikely to use, mapped with
// MAP_FIXED_NOREPLACE in both processes so neither can clobber a mapping.
// Device ranges sit below (host backend 0x200000000000 + rank * 64 GiB, cuda
// backend 0x300000000000 + rank * 1 TiB), so the agent can hold both.
constexpr uint64_t kPinnedBase = 0x600000000000ull;
constexpr uint64_t kPinnedSpan = 1ull << 38;

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
  // As in the agent: no lock-order graph on the application's request path
  // (Debian's abseil keeps one on every absl::Mutex Lock and Unlock).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (knobs::Bool(knobs::Id::kWaitStats).value_or(false)) {
    std::atexit([] {
      std::fprintf(stderr, "revenant shim (pid %d): waits: %s\n", static_cast<int>(getpid()),
                   transport::shm_internal::WaitStatsReport().c_str());
    });
  }
  if (CallStatsOn()) {
    std::atexit([] {
      std::fprintf(stderr, "revenant shim (pid %d): calls: %s\n", static_cast<int>(getpid()),
                   CallStatsReport().c_str());
    });
  }
  if (std::optional<double> s = knobs::Double(knobs::Id::kRecoveryTimeoutS, 0, 1e7)) {
    recovery_timeout_ = absl::Seconds(*s);
  }
  if (std::optional<double> s = knobs::Double(knobs::Id::kCallTimeoutS, 1e-3, 1e7)) {
    call_timeout_ = absl::Seconds(*s);
  }
}

transport::ShmClientChannel* Runtime::Channel() {
  if (connected_.load(std::memory_order_acquire)) {
    if (!channel_->peer_dead()) return channel_.get();
    return WaitForRecovery(absl::Now() + recovery_timeout_) ? channel_.get() : nullptr;
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
  const std::optional<std::string> socket_env = knobs::String(knobs::Id::kAgentSocket);
  const std::optional<std::string> job_dir_env = knobs::String(knobs::Id::kJobDir);
  const char* socket_path = socket_env ? socket_env->c_str() : nullptr;
  const char* job_dir = job_dir_env ? job_dir_env->c_str() : nullptr;
  std::string daemon_dir, daemon_socket;
  if (socket_path == nullptr && job_dir == nullptr) {
    // Started by another launcher: a standalone agent serves our GPU.
    daemon_dir = DaemonDir(LocalRankFromEnvironment());
    daemon_socket = daemon_dir + "/agent.sock";
    if (access(daemon_socket.c_str(), F_OK) == 0) {
      socket_path = daemon_socket.c_str();
      job_dir = daemon_dir.c_str();
    }
  }
  if (socket_path == nullptr || job_dir == nullptr) {
    REVENANT_LOG(ERROR, "shim")
        << "no Revenant agent configured (REVENANT_AGENT_SOCKET/REVENANT_JOB_DIR unset, no "
           "standalone agent at "
        << DaemonDir(LocalRankFromEnvironment())
        << "): start the program with revenant-run or start revenant-agent --gpu; CUDA calls "
           "fail with cudaErrorDevicesUnavailable";
    return false;
  }
  job_dir_ = job_dir;
  const double connect_s = knobs::Double(knobs::Id::kConnectTimeoutS, 0, 1e7).value_or(30);
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
  socket_path_ = socket_path;
  channel_path_ = chan_path;
  if (!Handshake(control_fd_, /*recover=*/false, deadline)) return false;
  pinned_next_ = kPinnedBase + static_cast<uint64_t>(agent_.rank) * kPinnedSpan;
  StartMonitor();
  callback_thread_ = std::thread([this] { CallbackLoop(); });
  callback_thread_.detach();
  // A normal exit says so in the channel, so that the agent tells an
  // application that ended from one killed while being served.
  std::atexit([] {
    Runtime* r = Runtime::Get();
    if (r->channel_ != nullptr) r->channel_->SetShutdown();
  });
  REVENANT_LOG(DEBUG, "shim") << "connected to agent pid " << agent_.agent_pid << " ("
                              << agent_.backend << " backend, rank " << agent_.rank << ")";
  return true;
}

bool Runtime::Handshake(int fd, bool recover, absl::Time deadline, bool* refused) {
  // Whether this process can hold uploads (an agent with --upload_hold asks
  // for it in its welcome): probed once.
  static const absl::Status can_hold = WriteGuard::Available();
  absl::Status sent = transport::SendFrame(
      fd, FormatKv({{"op", "hello"},
                    {"version", "1"},
                    {"pid", std::to_string(getpid())},
                    {"channel", channel_path_},
                    {"recover", recover ? "1" : "0"},
                    {"hold", can_hold.ok() ? "1" : "0"},
                    {"hold_why", std::string(can_hold.message())}}));
  absl::StatusOr<std::string> welcome =
      sent.ok() ? transport::RecvFrame(fd, deadline) : absl::StatusOr<std::string>(sent);
  if (!welcome.ok()) {
    REVENANT_LOG(ERROR, "shim") << "handshake with the agent failed: " << welcome.status();
    return false;
  }
  std::map<std::string, std::string> m = ParseKv(*welcome);
  if (m["op"] != "welcome") {
    REVENANT_LOG(ERROR, "shim") << "the agent refused us: " << m["error"];
    if (refused != nullptr) *refused = true;
    return false;
  }
  agent_.agent_pid = static_cast<int>(ParseU64(m, "pid"));
  agent_.backend = m["backend"];
  agent_.device_base = ParseU64(m, "device_base");
  agent_.device_size = ParseU64(m, "device_size");
  agent_.rank = static_cast<int>(ParseU64(m, "rank"));
  if (!m["holds"].empty() && !StartHolding(m["holds"])) {
    // The agent holds uploads on the promise that their sources are
    // protected here: without that it must not run.
    if (refused != nullptr) *refused = true;
    return false;
  }
  return true;
}

bool Runtime::StartHolding(const std::string& table_path) {
  absl::StatusOr<std::unique_ptr<HoldTable>> t = HoldTable::Open(table_path);
  if (!t.ok()) {
    REVENANT_LOG(ERROR, "shim") << "held uploads: " << t.status();
    return false;
  }
  if (guard_ == nullptr) {
    // Made once, at the first welcome that asks (handshakes do not overlap).
    absl::StatusOr<std::unique_ptr<WriteGuard>> g =
        WriteGuard::Create([this](uint64_t lo, uint64_t hi) { CopyOutHolds(lo, hi); });
    if (!g.ok()) {
      REVENANT_LOG(ERROR, "shim") << "held uploads: " << g.status();
      return false;
    }
    guard_ = std::move(*g);
    // Pinned memory made before (none in practice: it needs the agent).
    std::lock_guard<std::mutex> plock(pinned_mu_);
    for (const auto& [addr, r] : pinned_) (void)guard_->Register(r.addr, r.size);
  }
  {
    std::lock_guard<std::mutex> lock(hold_mu_);
    holds_ = std::move(*t);
    hold_places_ =
        std::make_unique<HoldPlaces>(table_path.substr(0, table_path.rfind('/')));
  }
  holding_.store(true, std::memory_order_release);
  return true;
}

void Runtime::CopyOutHolds(uint64_t lo, uint64_t hi, bool agent_dead) {
  std::lock_guard<std::mutex> lock(hold_mu_);
  if (holds_ == nullptr) return;
  int lost = 0;
  const uint64_t changed_before = holds_->changed();
  // With the agent dead, a hold it was copying out is finished here (this
  // lock keeps the shim's own handler out meanwhile).
  holds_->CopyOut(lo, hi, hold_places_->Fn(), /*by_app=*/true, 8, &lost, agent_dead);
  if (lost > 0) {
    REVENANT_LOG(ERROR, "shim") << "held uploads: " << lost
                                << " could not be copied out (no room in the journal's tmpfs): a "
                                   "recovery that needs them is refused";
  }
  if (const uint64_t changed = holds_->changed() - changed_before; changed > 0) {
    REVENANT_LOG(WARNING, "shim")
        << "held uploads: " << changed
        << " source(s) no longer held what the device received when copied out (written by "
           "something neither this process nor the agent saw): a recovery that needs them is "
           "refused";
  }
}

void Runtime::GuardPinned(uint64_t addr, uint64_t size) {
  if (!holding()) return;
  if (absl::Status s = guard_->Register(addr, size); !s.ok()) {
    REVENANT_LOG(WARNING, "shim") << "held uploads: pinned memory at 0x" << std::hex << addr
                                  << std::dec << " cannot be write-protected (" << s
                                  << "): its uploads are copied out as they are held";
  }
}

void Runtime::UnguardPinned(uint64_t addr, uint64_t size) {
  if (!holding()) return;
  guard_->Release(addr);  // held uploads from it copied out first
  guard_->Unregister(addr, size);
}

void Runtime::HoldUploadSource(const void* src, size_t count) {
  if (!holding()) return;
  if (absl::Status s = guard_->Protect(reinterpret_cast<uint64_t>(src), count); !s.ok()) {
    // Not protectable (registration failed): the held bytes go to their
    // place now, as a write would have them.
    const uint64_t a = reinterpret_cast<uint64_t>(src);
    CopyOutHolds(a, a + count);
  }
}

void Runtime::StartMonitor() {
  absl::StatusOr<std::unique_ptr<transport::PeerMonitor>> mon =
      transport::PeerMonitor::Start(control_fd_, [this] { OnAgentDeath(); });
  if (!mon.ok()) {
    REVENANT_LOG(ERROR, "shim") << "cannot watch the agent: " << mon.status();
    return;
  }
  if (monitor_ != nullptr) old_monitors_.push_back(std::move(monitor_));
  monitor_ = std::move(*mon);
}

void Runtime::OnAgentDeath() {
  // A live agent that drops this process (its request ring was malformed)
  // says why before it closes the socket: no replacement is coming, and
  // reconnecting would only hand it the same ring.
  if (absl::StatusOr<std::string> last =
          transport::RecvFrame(control_fd_, absl::Now() + absl::Milliseconds(100));
      last.ok()) {
    std::map<std::string, std::string> m = ParseKv(*last);
    if (m["op"] == "dropped") {
      REVENANT_LOG(ERROR, "shim") << "the agent of rank " << agent_.rank << " (pid "
                                  << agent_.agent_pid << ") dropped this process: " << m["error"]
                                  << "; CUDA calls now fail with cudaErrorDevicesUnavailable";
      {
        // Final: a call waiting for its reply (or for a replacement) fails
        // now rather than wait out the recovery timeout for an agent that
        // revenant-run does not replace.
        std::lock_guard<std::mutex> lock(recover_mu_);
        recovery_failed_ = true;
      }
      channel_->MarkPeerDead();
      recover_cv_.notify_all();
      return;
    }
  }
  const bool recover = recovery_enabled();
  if (holding()) {
    // Every held upload's bytes into its place before a replacement reads
    // the journal (it connects only after this).
    const absl::Time t0 = absl::Now();
    CopyOutHolds(0, ~uint64_t{0}, /*agent_dead=*/true);
    REVENANT_LOG(INFO, "shim") << "held uploads copied out for the replacement in "
                               << absl::ToDoubleMilliseconds(absl::Now() - t0) << " ms";
  }
  REVENANT_LOG(ERROR, "shim") << "the agent of rank " << agent_.rank << " (pid "
                              << agent_.agent_pid << ") is gone"
                              << (recover ? "; waiting for a replacement"
                                          : "; CUDA calls now fail with "
                                            "cudaErrorDevicesUnavailable");
  {
    std::lock_guard<std::mutex> lock(recover_mu_);
    recovering_ = recover;
  }
  channel_->MarkPeerDead();
  if (recover) std::thread([this] { Reconnect(); }).detach();
}

// Connects to the replacement agent (revenant-run starts it on the same
// socket) and hands it the channel, which kept every request the dead agent
// had not finished.
void Runtime::Reconnect() {
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + recovery_timeout_;
  bool ok = false;
  while (!ok && absl::Now() < deadline) {
    absl::StatusOr<int> fd = transport::ConnectUnix(socket_path_, deadline);
    if (!fd.ok()) break;
    bool refused = false;
    if (!transport::CheckPeerUid(*fd).ok()) {
      close(*fd);
      break;
    }
    if (!Handshake(*fd, /*recover=*/true, deadline, &refused)) {
      close(*fd);
      if (refused) break;  // the replacement could not recover: final
      // A broken connection (an agent that was going away): try again.
      absl::SleepFor(absl::Milliseconds(50));
      continue;
    }
    close(control_fd_);
    control_fd_ = *fd;
    StartMonitor();
    ok = true;
  }
  std::lock_guard<std::mutex> lock(recover_mu_);
  recovering_ = false;
  if (ok) {
    channel_->ClearPeerDead();
    RecordEvent(JobRootOf(job_dir_), "application_resumed", agent_.rank, 0,
                absl::StrCat("waited ", absl::ToInt64Milliseconds(absl::Now() - start), " ms"));
    REVENANT_LOG(INFO, "shim") << "rank " << agent_.rank << " continues with agent pid "
                               << agent_.agent_pid << " after "
                               << absl::ToInt64Milliseconds(absl::Now() - start) << " ms";
  } else {
    recovery_failed_ = true;
    REVENANT_LOG(ERROR, "shim") << "no replacement agent took over for rank " << agent_.rank
                                << "; CUDA calls now fail with cudaErrorDevicesUnavailable";
  }
  recover_cv_.notify_all();
}

bool Runtime::WaitForRecovery(absl::Time deadline) {
  if (!recovery_enabled()) return false;
  std::unique_lock<std::mutex> lock(recover_mu_);
  while (true) {
    if (recovery_failed_) return false;
    if (!recovering_ && !channel_->peer_dead()) return true;
    if (absl::Now() >= deadline) return false;
    recover_cv_.wait_for(lock, std::chrono::milliseconds(50));
  }
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
      // The agent is gone: a replacement posts callbacks on the same ring.
      if (WaitForRecovery(absl::Now() + recovery_timeout_)) continue;
      return;
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
  if (agent_.device_size != 0 && a >= agent_.device_base &&
      a - agent_.device_base < agent_.device_size &&
      len <= agent_.device_size - (a - agent_.device_base)) {
    return true;
  }
  if (!has_symbols_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(symbols_mu_);
  auto it = symbols_.upper_bound(a);
  if (it == symbols_.begin()) return false;
  --it;
  const uint64_t end = it->first + it->second;
  return a < end && len <= end - a;
}

void Runtime::AddDeviceSymbol(uint64_t addr, uint64_t size) {
  std::lock_guard<std::mutex> lock(symbols_mu_);
  symbols_[addr] = size;
  has_symbols_.store(true, std::memory_order_release);
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

void Runtime::NoteCaptureBegun(uint64_t stream) {
  absl::MutexLock l(&capture_mu_);
  capturing_.insert(stream);
  captures_active_.store(static_cast<int>(capturing_.size()), std::memory_order_release);
}

void Runtime::NoteCaptureEnd(uint64_t stream, int32_t status) {
  if (status != cudaSuccess && status != cudaErrorStreamCaptureInvalidated &&
      status != cudaErrorIllegalState) {
    return;
  }
  absl::MutexLock l(&capture_mu_);
  capturing_.erase(stream);
  captures_active_.store(static_cast<int>(capturing_.size()), std::memory_order_release);
}

}  // namespace shim
}  // namespace revenant
