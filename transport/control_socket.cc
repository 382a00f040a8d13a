#include "transport/control_socket.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace revenant {
namespace transport {
namespace {

absl::Status FillAddress(const std::string& path, struct sockaddr_un* addr) {
  if (path.empty() || path.size() > kMaxUnixPathLength) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unix socket path of %u bytes is empty or exceeds the limit of %u "
        "bytes: %s",
        path.size(), kMaxUnixPathLength, path));
  }
  std::memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, path.data(), path.size());
  return absl::OkStatus();
}

// Milliseconds until `deadline`, clamped to [0, 1000] so that long waits
// re-check the clock.
int PollTimeoutMs(absl::Time deadline) {
  absl::Duration left = deadline - absl::Now();
  if (left <= absl::ZeroDuration()) return 0;
  return static_cast<int>(
      std::min<int64_t>(1000, absl::ToInt64Milliseconds(absl::Ceil(
                                  left, absl::Milliseconds(1)))));
}

// Waits until `fd` is ready for `events` or `deadline` passes.
absl::Status PollUntil(int fd, short events, absl::Time deadline,
                       const char* what) {
  while (true) {
    struct pollfd p = {fd, events, 0};
    int timeout = PollTimeoutMs(deadline);
    int n = poll(&p, 1, timeout);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) {
      return absl::ErrnoToStatus(errno, absl::StrCat("poll for ", what));
    }
    if (n == 0 && absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("deadline exceeded waiting for ", what));
    }
  }
}

absl::Status ReadFull(int fd, char* buf, size_t len, absl::Time deadline,
                      bool at_frame_start) {
  size_t done = 0;
  while (done < len) {
    ssize_t n = recv(fd, buf + done, len - done, MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return absl::UnavailableError(at_frame_start && done == 0
                                        ? "peer closed"
                                        : "peer closed in the middle of a frame");
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      absl::Status st = PollUntil(fd, POLLIN, deadline, "a frame");
      if (!st.ok()) return st;
      continue;
    }
    if (errno == ECONNRESET) return absl::UnavailableError("peer closed (reset)");
    return absl::ErrnoToStatus(errno, "recv");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> ListenUnix(const std::string& path, int backlog) {
  struct sockaddr_un addr;
  absl::Status st = FillAddress(path, &addr);
  if (!st.ok()) return st;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
  struct stat sb;
  if (lstat(path.c_str(), &sb) == 0 && S_ISSOCK(sb.st_mode)) {
    unlink(path.c_str());  // A stale socket from an earlier agent.
  }
  // The socket's directory is expected to be private (0700); chmod right
  // after bind closes the remaining window without touching the
  // process-wide umask, which the application may be using concurrently.
  if (bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    absl::Status err = absl::ErrnoToStatus(errno, absl::StrCat("bind ", path));
    close(fd);
    return err;
  }
  if (chmod(path.c_str(), 0600) != 0 || listen(fd, backlog) != 0) {
    absl::Status err =
        absl::ErrnoToStatus(errno, absl::StrCat("chmod/listen ", path));
    close(fd);
    unlink(path.c_str());
    return err;
  }
  return fd;
}

absl::StatusOr<int> ConnectUnix(const std::string& path, absl::Time deadline) {
  struct sockaddr_un addr;
  absl::Status st = FillAddress(path, &addr);
  if (!st.ok()) return st;
  while (true) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return absl::ErrnoToStatus(errno, "socket");
    if (connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) ==
        0) {
      return fd;
    }
    int err = errno;
    close(fd);
    if (err != ENOENT && err != ECONNREFUSED && err != EAGAIN &&
        err != EINTR) {
      return absl::ErrnoToStatus(err, absl::StrCat("connect ", path));
    }
    absl::Time now = absl::Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no server listening at ", path, " before the deadline: ",
          std::strerror(err)));
    }
    absl::SleepFor(std::min(absl::Milliseconds(10), deadline - now));
  }
}

absl::StatusOr<int> AcceptWithDeadline(int listen_fd, absl::Time deadline) {
  while (true) {
    absl::Status st = PollUntil(listen_fd, POLLIN, deadline, "a connection");
    if (!st.ok()) return st;
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      // Blocking mode for the caller; our own reads use MSG_DONTWAIT.
      fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
        errno != ECONNABORTED) {
      return absl::ErrnoToStatus(errno, "accept");
    }
  }
}

absl::Status SendFrame(int fd, absl::string_view data) {
  if (data.size() > kMaxFrameSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "frame of %u bytes exceeds the limit of %u bytes", data.size(),
        kMaxFrameSize));
  }
  const uint32_t len = static_cast<uint32_t>(data.size());
  char prefix[4] = {static_cast<char>(len & 0xff),
                    static_cast<char>((len >> 8) & 0xff),
                    static_cast<char>((len >> 16) & 0xff),
                    static_cast<char>((len >> 24) & 0xff)};
  struct iovec iov[2] = {{prefix, 4},
                         {const_cast<char*>(data.data()), data.size()}};
  size_t total = 4 + data.size();
  size_t sent = 0;
  while (sent < total) {
    struct msghdr msg;
    std::memset(&msg, 0, sizeof(msg));
    struct iovec cur[2];
    int n_iov = 0;
    size_t skip = sent;
    for (const auto& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      cur[n_iov].iov_base = static_cast<char*>(v.iov_base) + skip;
      cur[n_iov].iov_len = v.iov_len - skip;
      skip = 0;
      ++n_iov;
    }
    msg.msg_iov = cur;
    msg.msg_iovlen = n_iov;
    ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) {
      return absl::UnavailableError("peer closed");
    }
    return absl::ErrnoToStatus(errno, "sendmsg");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RecvFrame(int fd, absl::Time deadline,
                                      size_t max_size) {
  unsigned char prefix[4];
  absl::Status st = ReadFull(fd, reinterpret_cast<char*>(prefix), 4, deadline,
                             /*at_frame_start=*/true);
  if (!st.ok()) return st;
  const size_t len = size_t{prefix[0]} | size_t{prefix[1]} << 8 |
                     size_t{prefix[2]} << 16 | size_t{prefix[3]} << 24;
  if (len > max_size) {
    return absl::DataLossError(absl::StrFormat(
        "incoming frame of %u bytes exceeds the limit of %u bytes", len,
        max_size));
  }
  std::string out(len, '\0');
  st = ReadFull(fd, out.data(), len, deadline, /*at_frame_start=*/false);
  if (!st.ok()) return st;
  return out;
}

absl::StatusOr<PeerCred> PeerCredentials(int fd) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return absl::ErrnoToStatus(errno, "getsockopt(SO_PEERCRED)");
  }
  PeerCred out;
  out.pid = cred.pid;
  out.uid = cred.uid;
  out.gid = cred.gid;
  return out;
}

absl::Status CheckPeerUid(int fd) {
  absl::StatusOr<PeerCred> cred = PeerCredentials(fd);
  if (!cred.ok()) return cred.status();
  if (cred->uid != geteuid()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "peer pid %d runs as uid %u, expected uid %u", cred->pid, cred->uid,
        geteuid()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PeerMonitor>> PeerMonitor::Start(
    int fd, std::function<void()> on_dead) {
  int stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (stop_fd < 0) return absl::ErrnoToStatus(errno, "eventfd");
  std::unique_ptr<PeerMonitor> m(
      new PeerMonitor(fd, stop_fd, std::move(on_dead)));
  try {
    m->thread_ = std::thread([p = m.get()] { p->Run(); });
  } catch (const std::system_error& e) {
    // Nothing may throw across the shim's API.
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the peer monitor thread: ", e.what()));
  }
  return m;
}

PeerMonitor::~PeerMonitor() {
  uint64_t one = 1;
  ssize_t ignored = write(stop_fd_, &one, sizeof(one));
  (void)ignored;
  if (thread_.joinable()) thread_.join();
  close(stop_fd_);
}

void PeerMonitor::Run() {
  while (true) {
    // POLLRDHUP without POLLIN: pending data does not wake us, only the
    // peer's shutdown or death (POLLHUP/POLLERR are always reported).
    struct pollfd p[2] = {{fd_, POLLRDHUP, 0}, {stop_fd_, POLLIN, 0}};
    int n = poll(p, 2, 1000);
    if (n < 0) {
      if (errno == EINTR) continue;
      REVENANT_LOG(ERROR, "transport")
          << "peer monitor poll failed: " << std::strerror(errno);
      return;
    }
    if (p[1].revents != 0) return;
    if (p[0].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
      fired_.store(true);
      on_dead_();
      return;
    }
  }
}

}  // namespace transport
}  // namespace revenant
