// A minimal control-socket client for the privacy test: connects to an
// agent's socket, sends a hello and prints the agent's answer.
//   peer_probe <socket>
// Exit status: 0 the agent answered (its reply on stdout, one line),
// 3 the connection itself was refused (reason on stderr), 4 the agent closed
// the connection without an answer or did not answer within 10 s.
#include <cstdio>
#include <string>

#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kv.h"
#include "transport/control_socket.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: peer_probe <socket>\n");
    return 2;
  }
  absl::StatusOr<int> fd = revenant::transport::ConnectUnix(argv[1], absl::Now() + absl::Seconds(2));
  if (!fd.ok()) {
    std::fprintf(stderr, "connect: %s\n", fd.status().ToString().c_str());
    return 3;
  }
  // A hello naming a channel outside any job: an agent that accepted the
  // peer would refuse it for that reason instead ("not in this job's directory").
  (void)revenant::transport::SendFrame(
      *fd, revenant::FormatKv({{"op", "hello"}, {"version", "1"}, {"channel", "/nonexistent"}}));
  absl::StatusOr<std::string> reply =
      revenant::transport::RecvFrame(*fd, absl::Now() + absl::Seconds(10));
  if (!reply.ok()) {
    std::fprintf(stderr, "no answer: %s\n", reply.status().ToString().c_str());
    return 4;
  }
  std::printf("%s\n", absl::StrReplaceAll(*reply, {{"\n", " "}}).c_str());
  return 0;
}
