// Misbehaving control-socket clients for misbehave_test.sh. Each connects to
// an agent's socket the way the shim does, misbehaves in one way, and prints
// the agent's answer (one line) on stdout.
//
//   bad_client past_ring <socket> <job_dir>
//       creates a channel in <job_dir>, is welcomed, then publishes a request
//       whose length runs past the end of the request ring; expects the
//       agent to answer "op=dropped" (exit 0) on the control socket
//   bad_client claim <socket> <job_dir>
//       a second process claiming a rank that is being served; expects
//       "op=refused" (exit 0)
//   bad_client other_uid <socket> <uid>
//       forks a child that drops to <uid> (setresgid/setresuid), connects and
//       sends a hello; expects "op=refused" (exit 0). Needs root.
// Exit status 3: could not connect, 4: no answer within 10 s, 5: another
// answer than expected, 2: usage or setup error.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/kv.h"
#include "transport/control_socket.h"
#include "transport/shm_channel.h"

namespace {

using revenant::FormatKv;
using revenant::ParseKv;
namespace transport = revenant::transport;

std::string OneLine(const std::string& s) { return absl::StrReplaceAll(s, {{"\n", " "}}); }

// Connects, sends a hello naming `channel`, and returns the first answer.
int Hello(const std::string& socket, const std::string& channel, std::string* answer,
          int* fd_out) {
  absl::StatusOr<int> fd = transport::ConnectUnix(socket, absl::Now() + absl::Seconds(5));
  if (!fd.ok()) {
    std::printf("connect: %s\n", fd.status().ToString().c_str());
    return 3;
  }
  (void)transport::SendFrame(*fd, FormatKv({{"op", "hello"},
                                             {"version", "1"},
                                             {"pid", std::to_string(getpid())},
                                             {"channel", channel},
                                             {"recover", "0"}}));
  absl::StatusOr<std::string> reply = transport::RecvFrame(*fd, absl::Now() + absl::Seconds(10));
  if (!reply.ok()) {
    std::printf("no answer: %s\n", reply.status().ToString().c_str());
    close(*fd);
    return 4;
  }
  *answer = *reply;
  if (fd_out != nullptr) {
    *fd_out = *fd;
  } else {
    close(*fd);
  }
  return 0;
}

int Expect(const std::string& answer, const std::string& op) {
  std::printf("%s\n", OneLine(answer).c_str());
  return ParseKv(answer)["op"] == op ? 0 : 5;
}

// Publishes, past the shim's checks, a record whose size field runs past the
// end of the request ring. The offsets are those of transport/shm_channel.cc
// (layout version 2): the ring's capacity and control/data offsets in the
// channel header, the head and last seq at the start of the ring control.
int PastRing(const std::string& socket, const std::string& job_dir) {
  const std::string path = absl::StrCat(job_dir, "/chan-", getpid());
  absl::StatusOr<std::unique_ptr<transport::ShmClientChannel>> ch =
      transport::ShmClientChannel::Create(path, transport::ChannelOptions());
  if (!ch.ok()) {
    std::printf("channel: %s\n", ch.status().ToString().c_str());
    return 2;
  }
  std::string answer;
  int fd = -1;
  if (int rc = Hello(socket, path, &answer, &fd); rc != 0) return rc;
  if (ParseKv(answer)["op"] != "welcome") return Expect(answer, "welcome");
  const int file = open(path.c_str(), O_RDWR | O_CLOEXEC);
  struct stat st {};
  if (file < 0 || fstat(file, &st) != 0) return 2;
  void* base = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                    file, 0);
  if (base == MAP_FAILED) return 2;
  char* b = static_cast<char*>(base);
  uint32_t version = 0;
  uint64_t capacity = 0, ctrl_offset = 0, data_offset = 0;
  std::memcpy(&version, b + 8, 4);
  std::memcpy(&capacity, b + 24, 8);
  std::memcpy(&ctrl_offset, b + 32, 8);
  std::memcpy(&data_offset, b + 40, 8);
  if (version != transport::kChannelLayoutVersion || capacity < 4096 ||
      (capacity & (capacity - 1)) != 0 || data_offset + capacity > uint64_t(st.st_size)) {
    std::printf("unexpected channel layout (version %u)\n", version);
    return 2;
  }
  auto* head = reinterpret_cast<std::atomic<uint64_t>*>(b + ctrl_offset);
  auto* last_seq = reinterpret_cast<std::atomic<uint64_t>*>(b + ctrl_offset + 8);
  const uint64_t pos = head->load();
  transport::RecordHeader h{};
  h.size = static_cast<uint32_t>(2 * capacity);  // twice the whole ring
  h.api_id = 1;
  h.seq = last_seq->load() + 1;
  h.reply_slot = -1;
  std::memcpy(b + data_offset + (pos & (capacity - 1)), &h, sizeof(h));
  last_seq->store(h.seq);
  head->store(pos + 64);  // the record's own header and a little body
  // The agent reads the ring every 200 ms at the latest without a wake-up.
  absl::StatusOr<std::string> reply = transport::RecvFrame(fd, absl::Now() + absl::Seconds(10));
  if (!reply.ok()) {
    std::printf("no answer: %s\n", reply.status().ToString().c_str());
    return 4;
  }
  return Expect(*reply, "dropped");
}

int OtherUid(const std::string& socket, uid_t uid) {
  int out[2];
  if (pipe(out) != 0) return 2;
  const pid_t child = fork();
  if (child < 0) return 2;
  if (child == 0) {
    close(out[0]);
    if (setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0 || geteuid() != uid) {
      std::printf("cannot switch to uid %u: %s\n", uid, std::strerror(errno));
      _exit(2);
    }
    std::string answer;
    const int rc = Hello(socket, "/nonexistent", &answer, nullptr);
    if (rc == 0) (void)!write(out[1], answer.data(), answer.size());
    _exit(rc);
  }
  close(out[1]);
  std::string answer;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) answer.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return WIFEXITED(status) ? WEXITSTATUS(status) : 2;
  }
  return Expect(answer, "refused");
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "past_ring" && argc == 4) return PastRing(argv[2], argv[3]);
  if (mode == "claim" && argc == 4) {
    std::string answer;
    if (int rc = Hello(argv[2], absl::StrCat(argv[3], "/chan-", getpid()), &answer, nullptr);
        rc != 0) {
      return rc;
    }
    return Expect(answer, "refused");
  }
  if (mode == "other_uid" && argc == 4) {
    return OtherUid(argv[2], static_cast<uid_t>(std::strtoul(argv[3], nullptr, 10)));
  }
  std::fprintf(stderr,
               "usage: bad_client past_ring <socket> <job_dir> | claim <socket> <job_dir> | "
               "other_uid <socket> <uid>\n");
  return 2;
}
