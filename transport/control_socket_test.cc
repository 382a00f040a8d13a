#include "transport/control_socket.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace transport {
namespace {

using ::testing::HasSubstr;

// Short paths: TEST_TMPDIR can exceed the 107-byte sun_path limit.
std::string SocketPath() {
  static std::atomic<int> counter{0};
  return absl::StrCat("/tmp/rvt-", getpid(), "-", counter.fetch_add(1),
                      ".sock");
}

absl::Time In(absl::Duration d) { return absl::Now() + d; }

struct Pair {
  int listen_fd = -1, client = -1, server = -1;
  std::string path;
  ~Pair() {
    for (int fd : {listen_fd, client, server}) {
      if (fd >= 0) close(fd);
    }
    if (!path.empty()) unlink(path.c_str());
  }
};

void Connect(Pair* p) {
  p->path = SocketPath();
  absl::StatusOr<int> l = ListenUnix(p->path);
  ASSERT_TRUE(l.ok()) << l.status();
  p->listen_fd = *l;
  absl::StatusOr<int> c = ConnectUnix(p->path, In(absl::Seconds(5)));
  ASSERT_TRUE(c.ok()) << c.status();
  p->client = *c;
  absl::StatusOr<int> s = AcceptWithDeadline(p->listen_fd, In(absl::Seconds(5)));
  ASSERT_TRUE(s.ok()) << s.status();
  p->server = *s;
}

TEST(ControlSocketTest, FramesRoundTrip) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  const std::string big(300000, 'z');  // Larger than the socket buffer.
  std::thread sender([&] {
    EXPECT_TRUE(SendFrame(p.client, "hello").ok());
    EXPECT_TRUE(SendFrame(p.client, "").ok());
    EXPECT_TRUE(SendFrame(p.client, big).ok());
  });
  auto a = RecvFrame(p.server, In(absl::Seconds(5)));
  auto b = RecvFrame(p.server, In(absl::Seconds(5)));
  auto c = RecvFrame(p.server, In(absl::Seconds(5)));
  sender.join();
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, "hello");
  EXPECT_EQ(*b, "");
  EXPECT_EQ(*c, big);
  // And the other direction.
  ASSERT_TRUE(SendFrame(p.server, "reply").ok());
  auto r = RecvFrame(p.client, In(absl::Seconds(5)));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "reply");
}

TEST(ControlSocketTest, EofIsUnavailablePeerClosed) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  close(p.client);
  p.client = -1;
  auto r = RecvFrame(p.server, In(absl::Seconds(5)));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("peer closed"));
  EXPECT_EQ(SendFrame(p.server, "x").code(), absl::StatusCode::kUnavailable);
}

TEST(ControlSocketTest, TornFrameIsUnavailable) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  const char partial[] = {10, 0, 0, 0, 'a', 'b'};  // Announces 10, sends 2.
  ASSERT_EQ(write(p.client, partial, sizeof(partial)), 6);
  close(p.client);
  p.client = -1;
  auto r = RecvFrame(p.server, In(absl::Seconds(5)));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("middle"));
}

TEST(ControlSocketTest, RecvDeadline) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  absl::Time start = absl::Now();
  auto r = RecvFrame(p.server, In(absl::Milliseconds(30)));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(25));
}

TEST(ControlSocketTest, OversizeFramesRefused) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  std::string huge(kMaxFrameSize + 1, 'h');
  absl::Status s = SendFrame(p.client, huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("exceeds the limit"));

  ASSERT_TRUE(SendFrame(p.client, std::string(11, 'x')).ok());
  auto r = RecvFrame(p.server, In(absl::Seconds(5)), /*max_size=*/10);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);

  const unsigned char bogus[] = {0xff, 0xff, 0xff, 0x7f};
  Pair q;
  ASSERT_NO_FATAL_FAILURE(Connect(&q));
  ASSERT_EQ(write(q.client, bogus, 4), 4);
  r = RecvFrame(q.server, In(absl::Seconds(5)));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ControlSocketTest, PeerCredentialsAreOurs) {
  Pair p;
  ASSERT_NO_FATAL_FAILURE(Connect(&p));
  auto cred = PeerCredentials(p.server);
  ASSERT_TRUE(cred.ok()) << cred.status();
  EXPECT_EQ(cred->uid, geteuid());
  EXPECT_EQ(cred->gid, getegid());
  EXPECT_EQ(cred->pid, getpid());
  EXPECT_TRUE(CheckPeerUid(p.server).ok());
  EXPECT_FALSE(PeerCredentials(-1).ok());
}

TEST(ControlSocketTest, PathTooLongIsInvalidArgument) {
  const std::string path = "/tmp/" + std::string(120, 'p');
  auto l = ListenUnix(path);
  EXPECT_EQ(l.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(l.status().message()), HasSubstr("107"));
  auto c = ConnectUnix(path, In(absl::Seconds(1)));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  // Exactly 107 bytes is accepted by the length check.
  const std::string edge = "/tmp/" + std::string(102, 'e');
  ASSERT_EQ(edge.size(), kMaxUnixPathLength);
  auto e = ListenUnix(edge);
  ASSERT_TRUE(e.ok()) << e.status();
  close(*e);
  unlink(edge.c_str());
}

TEST(ControlSocketTest, SocketFileModeIs0600AndStaleFileReplaced) {
  const std::string path = SocketPath();
  auto a = ListenUnix(path);
  ASSERT_TRUE(a.ok());
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISSOCK(sb.st_mode));
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  close(*a);  // The file stays behind, stale.
  auto b = ListenUnix(path);
  ASSERT_TRUE(b.ok()) << b.status();
  close(*b);
  unlink(path.c_str());
}

TEST(ControlSocketTest, ConnectRetriesUntilServerListens) {
  const std::string path = SocketPath();
  std::atomic<int> listen_fd{-1};
  std::thread server([&] {
    absl::SleepFor(absl::Milliseconds(60));
    auto l = ListenUnix(path);
    if (l.ok()) listen_fd.store(*l);
  });
  auto c = ConnectUnix(path, In(absl::Seconds(5)));
  server.join();
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_GE(listen_fd.load(), 0);
  auto s = AcceptWithDeadline(listen_fd.load(), In(absl::Seconds(5)));
  ASSERT_TRUE(s.ok());
  close(*s);
  close(*c);
  close(listen_fd.load());
  unlink(path.c_str());
}

TEST(ControlSocketTest, ConnectAndAcceptHonourDeadlines) {
  const std::string path = SocketPath();
  auto c = ConnectUnix(path, In(absl::Milliseconds(40)));
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  auto l = ListenUnix(path);
  ASSERT_TRUE(l.ok());
  auto s = AcceptWithDeadline(*l, In(absl::Milliseconds(30)));
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded);
  close(*l);
  unlink(path.c_str());
}

TEST(ControlSocketTest, PeerMonitorFiresOnceOnClose) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::atomic<int> calls{0};
  absl::Notification fired;
  auto m = PeerMonitor::Start(sv[0], [&] {
    calls.fetch_add(1);
    fired.Notify();
  });
  ASSERT_TRUE(m.ok());
  // Pending data must neither fire it nor make it spin.
  ASSERT_EQ(write(sv[1], "data", 4), 4);
  EXPECT_FALSE(fired.WaitForNotificationWithTimeout(absl::Milliseconds(50)));
  absl::Time closed = absl::Now();
  close(sv[1]);
  ASSERT_TRUE(fired.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - closed, absl::Milliseconds(100));
  m->reset();
  EXPECT_EQ(calls.load(), 1);
  close(sv[0]);
}

TEST(ControlSocketTest, PeerMonitorStopsPromptlyWithoutFiring) {
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::atomic<int> calls{0};
  auto m = PeerMonitor::Start(sv[0], [&] { calls.fetch_add(1); });
  ASSERT_TRUE(m.ok());
  absl::Time start = absl::Now();
  m->reset();
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(calls.load(), 0);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
}  // namespace transport
}  // namespace revenant
