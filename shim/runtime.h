// Runtime: the shim's connection to its agent and its process-wide state.
//
// The first forwarded call connects (lazily: nvcc's static constructors run
// before main and must not block on an agent): it reads the job's
// environment (REVENANT_AGENT_SOCKET, REVENANT_JOB_DIR, REVENANT_RANK, set by
// revenant-run), creates the shared-memory channel in the job directory,
// says hello on the control socket (the agent checks our uid), and starts
//  - a PeerMonitor on the socket: the agent's death wakes every blocked
//    call within milliseconds (they return cudaErrorDevicesUnavailable);
//  - the callback thread, which runs host callbacks the agent asks for, in
//    stream order, in this process.
//
//   shim::Runtime* rt = shim::Runtime::Get();   // never null
//   transport::ShmClientChannel* ch = rt->Channel();  // null: unreachable
#ifndef REVENANT_SHIM_RUNTIME_H_
#define REVENANT_SHIM_RUNTIME_H_

#include <atomic>
#include <set>
#include <condition_variable>
#include <vector>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "common/upload_hold.h"
#include "common/write_guard.h"
#include "absl/time/time.h"
#include "transport/control_socket.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace shim {

// What the agent told us in its welcome.
struct AgentInfo {
  int agent_pid = 0;
  std::string backend;        // "host" or "cuda"
  uint64_t device_base = 0;   // device pointers live in [base, base + size)
  uint64_t device_size = 0;
  int rank = 0;
};

// Host memory shared with the agent (cudaMallocHost/cudaHostAlloc, and
// application memory registered with cudaHostRegister).
struct PinnedRange {
  uint64_t addr = 0;
  uint64_t size = 0;
  unsigned int flags = 0;
  std::string path;
  // cudaHostRegister: the pointer and size the application registered (the
  // range is their pages); 0 for memory the shim allocated.
  uint64_t registered = 0;
  uint64_t registered_size = 0;
};

class Runtime {
 public:
  static Runtime* Get();

  // The channel, connecting on first use. nullptr when the agent cannot be
  // reached (dead, or never configured); the reason is logged once.
  transport::ShmClientChannel* Channel();
  bool connected() const { return connected_.load(std::memory_order_acquire); }
  // The channel when connected to a live agent, without connecting or
  // waiting for a replacement; nullptr otherwise.
  transport::ShmClientChannel* LiveChannel() const {
    return connected() && !channel_->peer_dead() ? channel_.get() : nullptr;
  }
  const AgentInfo& agent() const { return agent_; }

  // Deadline for one call (REVENANT_CALL_TIMEOUT_S, default 300 s).
  absl::Time CallDeadline() const { return absl::Now() + call_timeout_; }
  absl::Duration CallTimeout() const { return call_timeout_; }

  // Classification of application pointers.
  bool IsDevicePointer(const void* p, size_t len = 1) const;
  // A module variable's range in the agent (cudaGetSymbolAddress handed it
  // out): IsDevicePointer counts it as device memory from then on.
  void AddDeviceSymbol(uint64_t addr, uint64_t size);
  // The pinned range holding [p, p+len), if any (copies it out).
  bool FindPinned(const void* p, size_t len, PinnedRange* out);

  // Pinned memory: maps shared memory at a fixed address in our range and
  // has the agent map it at the same address. Status codes as CUDA's.
  int AllocPinned(void** out, size_t size, unsigned int flags);
  int FreePinned(void* p);
  // cudaHostRegister: makes the pages of the application's [p, p+size)
  // shared memory in place (their bytes copied into a file of the job
  // directory, which is then mapped over them) and has the agent map it at
  // the same address, as pinned memory. Fails without changing anything
  // (*why says why) when the pages are not private read-write memory of the
  // process or overlap shared memory; codes as CUDA's.
  int RegisterHost(void* p, size_t size, unsigned int flags, std::string* why);
  // cudaHostUnregister of a pointer RegisterHost shared: the agent unmaps it
  // and the pages become private memory again with the same bytes (unless
  // the application unmapped them itself). cudaErrorHostMemoryNotRegistered
  // for any other pointer.
  int UnregisterHost(void* p);

  // The staging area is shared by the process's calls one at a time.
  std::mutex& staging_mutex() { return staging_mu_; }

  // Recovery: after the agent died, waits (until `deadline`) for a
  // replacement to take over the channel. True once one did; false when
  // recovery is off (REVENANT_RECOVERY_TIMEOUT_S unset or 0), failed, or
  // timed out -- calls then fail with cudaErrorDevicesUnavailable.
  bool WaitForRecovery(absl::Time deadline);
  bool recovery_enabled() const { return recovery_timeout_ > absl::ZeroDuration(); }

  // Stream captures this process began (cudaStreamBeginCapture*, answered
  // successfully) and has not ended. While there are none, capture-status
  // queries are answered here without a round trip (docs/performance.md,
  // "Queries answered by the shim").
  void NoteCaptureBegun(uint64_t stream);
  // `status` is cudaStreamEndCapture's: the capture ended with success,
  // cudaErrorStreamCaptureInvalidated or cudaErrorIllegalState (the stream
  // was not capturing); other errors leave it as it was.
  void NoteCaptureEnd(uint64_t stream, int32_t status);
  bool AnyCaptureActive() const { return captures_active_.load(std::memory_order_acquire) != 0; }

  // Held uploads (common/upload_hold.h; the agent asks for them in its
  // welcome): an upload of `count` bytes from pinned memory at `src` was
  // sent; its source is write-protected until its bytes are copied out.
  bool holding() const { return holding_.load(std::memory_order_acquire); }
  void HoldUploadSource(const void* src, size_t count);

  // Deferred errors from asynchronous calls that failed in the agent.
  void NoteDeferredError(int32_t error);
  int32_t TakeDeferredError();

 private:
  Runtime();
  absl::Mutex capture_mu_;
  std::set<uint64_t> capturing_ ABSL_GUARDED_BY(capture_mu_);
  std::atomic<int> captures_active_{0};
  bool Connect();
  // Says hello on a fresh control socket; `recover` asks the agent to take
  // over from a dead predecessor. Fills agent_ from the welcome.
  // *refused is set when the agent answered with a refusal (final), as
  // opposed to a broken connection (worth retrying).
  bool Handshake(int fd, bool recover, absl::Time deadline, bool* refused = nullptr);
  void StartMonitor();
  void OnAgentDeath();
  void Reconnect();
  void CallbackLoop();
  void RestorePrivate(const PinnedRange& r);
  // Held uploads: the table the welcome names (empty: none); the held
  // uploads overlapping [lo, hi) copied into their places.
  bool StartHolding(const std::string& table_path);
  void CopyOutHolds(uint64_t lo, uint64_t hi, bool agent_dead = false);
  void GuardPinned(uint64_t addr, uint64_t size);
  void UnguardPinned(uint64_t addr, uint64_t size);

  std::mutex connect_mu_;
  std::atomic<bool> connected_{false};
  bool connect_failed_ = false;
  std::unique_ptr<transport::ShmClientChannel> channel_;
  int control_fd_ = -1;
  std::unique_ptr<transport::PeerMonitor> monitor_;
  std::thread callback_thread_;
  std::atomic<bool> stopping_{false};
  AgentInfo agent_;
  std::string job_dir_;
  absl::Duration call_timeout_ = absl::Seconds(300);
  absl::Duration recovery_timeout_ = absl::ZeroDuration();
  std::string socket_path_;
  std::string channel_path_;
  // Monitors of earlier agents: their threads may still be unwinding.
  std::vector<std::unique_ptr<transport::PeerMonitor>> old_monitors_;
  std::mutex recover_mu_;
  std::condition_variable recover_cv_;
  bool recovering_ = false;
  bool recovery_failed_ = false;

  std::mutex pinned_mu_;
  std::map<uint64_t, PinnedRange> pinned_;  // by address
  uint64_t pinned_next_ = 0;
  uint64_t pinned_serial_ = 0;

  mutable std::mutex symbols_mu_;
  std::map<uint64_t, uint64_t> symbols_;  // start -> size, guarded by symbols_mu_
  std::atomic<bool> has_symbols_{false};

  std::mutex staging_mu_;
  std::atomic<int32_t> deferred_error_{0};

  std::mutex hold_mu_;  // the table and places (the guard has its own)
  std::unique_ptr<WriteGuard> guard_;
  std::unique_ptr<HoldTable> holds_;
  std::unique_ptr<HoldPlaces> hold_places_;
  std::atomic<bool> holding_{false};
};

// Per-thread CUDA error state (cudaGetLastError/cudaPeekAtLastError).
void SetLastError(int32_t error);
int32_t PeekLastError();
int32_t TakeLastError();

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_RUNTIME_H_
