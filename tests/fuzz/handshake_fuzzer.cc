// Fuzzes the control-socket handshake parse: RecvFrame over a socketpair fed
// fuzz bytes (length prefix and payload as an application could send them),
// then ParseKv on what it returns and the agent's hello checks. Every input
// must give a frame or an error status within the deadline, never a crash.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kv.h"
#include "transport/control_socket.h"

namespace {

// The agent's hello checks (agent/agent_main.cc Serve), on parsed fields.
bool HelloAcceptable(std::map<std::string, std::string> m, const std::string& job_dir) {
  if (m["op"] != "hello" || m["version"] != "1") return false;
  const std::string& channel = m["channel"];
  return channel.rfind(job_dir + "/chan-", 0) == 0 && channel.find("..") == std::string::npos;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The parse alone, on the raw bytes.
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::map<std::string, std::string> direct = revenant::ParseKv(text);
  (void)HelloAcceptable(direct, "/dev/shm/revenant-fuzz/rank0");
  for (const auto& [k, v] : direct) {
    if (k.size() + v.size() > size) std::abort();
  }

  // The frame reader: the fuzz bytes as the peer's whole stream, then EOF.
  // Inputs fit in the socket buffer, so the write never blocks.
  if (size > 64 * 1024) return 0;
  int fds[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) std::abort();
  size_t off = 0;
  while (off < size) {
    const ssize_t n = write(fds[1], data + off, size - off);
    if (n <= 0) std::abort();
    off += static_cast<size_t>(n);
  }
  close(fds[1]);
  // A small max_size exercises the oversized-frame refusal as well.
  const size_t max_size = size > 0 && (data[0] & 1) ? 64 : 1 << 20;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<std::string> frame =
        revenant::transport::RecvFrame(fds[0], absl::Now() + absl::Seconds(1), max_size);
    if (!frame.ok()) break;
    if (frame->size() > size || frame->size() > max_size) std::abort();
    std::map<std::string, std::string> m = revenant::ParseKv(*frame);
    (void)HelloAcceptable(m, "/dev/shm/revenant-fuzz/rank0");
  }
  close(fds[0]);
  return 0;
}
