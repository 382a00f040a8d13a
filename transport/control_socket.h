// Unix-domain stream socket helpers for the shim <-> agent handshake and for
// noticing a peer's death.
//
// The control socket carries a few length-prefixed frames at connection time
// (the handshake) and then stays open for its whole life only so that each
// side learns within milliseconds when the other process dies: the kernel
// closes a dead process's sockets, and PeerMonitor turns that into a callback.
//
//   absl::StatusOr<int> lfd = ListenUnix("/dev/shm/revenant-job/rank0/agent.sock");
//   // client:
//   absl::StatusOr<int> fd = ConnectUnix(path, absl::Now() + absl::Seconds(10));
//   SendFrame(*fd, hello);
//   auto monitor = PeerMonitor::Start(*fd, [ch] { ch->MarkPeerDead(); });
//   // server:
//   absl::StatusOr<int> cfd = AcceptWithDeadline(*lfd, deadline);
//   absl::Status ok = CheckPeerUid(*cfd);
//   absl::StatusOr<std::string> hello = RecvFrame(*cfd, deadline);
//
// Frame format: a 4-byte little-endian length, then that many bytes. Frames
// larger than kMaxFrameSize are refused on both ends.
//
// Every function returns file descriptors with FD_CLOEXEC set; the caller
// owns and closes them. Nothing here throws or raises SIGPIPE.
#ifndef REVENANT_TRANSPORT_CONTROL_SOCKET_H_
#define REVENANT_TRANSPORT_CONTROL_SOCKET_H_

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace revenant {
namespace transport {

// sun_path holds 108 bytes including the terminating NUL.
inline constexpr size_t kMaxUnixPathLength = 107;
inline constexpr size_t kMaxFrameSize = size_t{16} << 20;

// Creates a listening socket at `path` (an existing stale socket file is
// unlinked first) and sets the file's mode to 0600. kInvalidArgument if the
// path is longer than kMaxUnixPathLength bytes.
absl::StatusOr<int> ListenUnix(const std::string& path, int backlog = 16);

// Connects to `path`, retrying every 10 ms while the server is not yet
// listening (ENOENT, ECONNREFUSED) until `deadline` (kDeadlineExceeded).
absl::StatusOr<int> ConnectUnix(const std::string& path, absl::Time deadline);

// Accepts one connection, waiting at most until `deadline`.
absl::StatusOr<int> AcceptWithDeadline(int listen_fd, absl::Time deadline);

// Writes one frame (blocking until fully written). kInvalidArgument if
// data.size() > kMaxFrameSize; kUnavailable if the peer closed.
absl::Status SendFrame(int fd, absl::string_view data);

// Reads one frame. kUnavailable "peer closed" on EOF, kDeadlineExceeded at
// `deadline`, kDataLoss if the announced length exceeds `max_size`.
absl::StatusOr<std::string> RecvFrame(int fd, absl::Time deadline,
                                      size_t max_size = kMaxFrameSize);

struct PeerCred {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The connected peer's credentials (SO_PEERCRED, as of connect time).
absl::StatusOr<PeerCred> PeerCredentials(int fd);

// kPermissionDenied unless the peer's uid equals geteuid().
absl::Status CheckPeerUid(int fd);

// Watches one connected socket for the peer's death (POLLHUP / POLLRDHUP /
// POLLERR) on a helper thread and invokes `on_dead` exactly once. It polls
// without consuming data (pending bytes do not wake it), with a 1 s poll
// timeout and an eventfd to stop it; no busy loop. The monitor does not own
// `fd`; it must stay open until the monitor is destroyed.
//
//   auto m = PeerMonitor::Start(fd, [&] { channel->MarkPeerDead(); });
class PeerMonitor {
 public:
  static absl::StatusOr<std::unique_ptr<PeerMonitor>> Start(
      int fd, std::function<void()> on_dead);
  // Stops and joins the thread. Must not be called from `on_dead`.
  ~PeerMonitor();
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;

  bool fired() const { return fired_.load(); }

 private:
  PeerMonitor(int fd, int stop_fd, std::function<void()> on_dead)
      : fd_(fd), stop_fd_(stop_fd), on_dead_(std::move(on_dead)) {}
  void Run();

  const int fd_;
  const int stop_fd_;
  std::function<void()> on_dead_;
  std::atomic<bool> fired_{false};
  std::thread thread_;
};

}  // namespace transport
}  // namespace revenant

#endif  // REVENANT_TRANSPORT_CONTROL_SOCKET_H_
