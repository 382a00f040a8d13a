#include "transport/shm_channel.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "transport/control_socket.h"

namespace revenant {
namespace transport {
namespace {

using ::testing::HasSubstr;

std::string TempPath() {
  static std::atomic<int> counter{0};
  return absl::StrCat("/dev/shm/revenant-test-", getpid(), "-",
                      counter.fetch_add(1));
}

ChannelOptions SmallOptions(size_t ring = 64 << 10) {
  ChannelOptions o;
  o.ring_capacity = ring;
  o.callback_ring_capacity = 4096;
  o.reply_slots = 8;
  o.reply_data_size = 4096;
  o.staging_size = 64 << 10;
  return o;
}

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// Waits for a forked child and returns its exit code (or 128 + signal).
int WaitChild(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return -1;
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// Writes one record with `body` and returns its seq (0 on failure).
uint64_t Send(ShmClientChannel* c, uint16_t api, const std::string& body,
              int slot = -1) {
  auto w = c->BeginRecord(body.size(), In(absl::Seconds(10)));
  if (!w.ok()) {
    ADD_FAILURE() << w.status();
    return 0;
  }
  std::memcpy(w->body(), body.data(), body.size());
  w->header().api_id = api;
  w->header().reply_slot = slot;
  return c->Commit(std::move(*w));
}

TEST(ShmChannelTest, SingleThreadRoundTrip) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok()) << client.status();
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_EQ((*server)->client_pid(), static_cast<uint32_t>(getpid()));
  EXPECT_EQ((*client)->server_epoch(), 1u);

  absl::StatusOr<int> slot = (*client)->AcquireReplySlot(In(absl::Seconds(1)));
  ASSERT_TRUE(slot.ok());
  EXPECT_EQ(Send(client->get(), 7, "hello", *slot), 1u);
  EXPECT_EQ(Send(client->get(), 8, "", -1), 2u);

  auto rec = (*server)->Peek(In(absl::Seconds(5)));
  ASSERT_TRUE(rec.ok()) << rec.status();
  EXPECT_EQ((*rec)->seq, 1u);
  EXPECT_EQ((*rec)->api_id, 7);
  EXPECT_EQ((*rec)->reply_slot, *slot);
  EXPECT_EQ((*rec)->size, 29u);  // 24 + 5, exact.
  EXPECT_EQ((*rec)->stride(), 32u);
  EXPECT_EQ(std::string((*rec)->body(), 5), "hello");
  std::memcpy((*server)->ReplyBuffer(*slot), "world!", 6);
  (*server)->PostReply(*slot, 1, 42, 6);
  (*server)->Advance();

  rec = (*server)->Peek(In(absl::Seconds(5)));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ((*rec)->seq, 2u);
  EXPECT_EQ((*rec)->body_size(), 0u);
  (*server)->Advance();
  (*server)->Release(2);

  auto reply = (*client)->WaitReply(*slot, 1, In(absl::Seconds(5)));
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 42u);
  EXPECT_EQ(std::string(reply->data, reply->length), "world!");
  (*client)->ReleaseReplySlot(*slot);

  EXPECT_THAT((*server)->Peek(In(absl::Milliseconds(20))).status().code(),
              absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ((*server)->requests().released_seq(), 2u);
  EXPECT_EQ((*server)->staging_size(), (*client)->staging_size());
  (*client)->staging()[100] = 'x';
  EXPECT_EQ((*server)->staging()[100], 'x');
}

TEST(ShmChannelTest, BodyLargerThanQuarterRingIsRefused) {
  auto client = ShmClientChannel::Create(TempPath(), SmallOptions(4096));
  ASSERT_TRUE(client.ok());
  auto w = (*client)->BeginRecord(1025, In(absl::Seconds(1)));
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("chunk"));
  EXPECT_TRUE((*client)->BeginRecord(1024, In(absl::Seconds(1))).ok());
}

TEST(ShmChannelTest, CreateRefusesExistingFile) {
  const std::string path = TempPath();
  auto a = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(a.ok());
  auto b = ShmClientChannel::Create(path, SmallOptions());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAlreadyExists);
  struct stat sb;
  ASSERT_EQ(stat(path.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
}

struct Payload {
  uint32_t producer;
  uint32_t index;
};

// Fills body[sizeof(Payload)..] with a pattern derived from producer/index.
void FillBody(char* body, uint32_t size, uint32_t producer, uint32_t index) {
  Payload p{producer, index};
  std::memcpy(body, &p, sizeof(p));
  for (uint32_t i = sizeof(p); i < size; ++i) {
    body[i] = static_cast<char>((producer * 31 + index * 7 + i) & 0xff);
  }
}

bool CheckBody(const char* body, uint32_t size, Payload* out) {
  if (size < sizeof(Payload)) return false;
  std::memcpy(out, body, sizeof(*out));
  for (uint32_t i = sizeof(Payload); i < size; ++i) {
    if (body[i] != static_cast<char>((out->producer * 31 + out->index * 7 + i) &
                                     0xff)) {
      return false;
    }
  }
  return true;
}

// Runs `producers` threads of `per_producer` records each against one
// consumer thread and checks: no loss, no duplicate, per-producer order,
// contiguous seq and intact contents.
// With `expect_blocked`, the consumer first idles so the ring fills, and
// checks that the producers are then blocked (not dropping or overwriting).
void RunProducersConsumer(size_t ring, int producers, int per_producer,
                          absl::Duration consumer_delay_every_16,
                          bool expect_blocked = false) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions(ring));
  ASSERT_TRUE(client.ok()) << client.status();
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok()) << server.status();
  const uint32_t max_extra = static_cast<uint32_t>(ring / 16);

  std::atomic<int> failures{0};
  std::atomic<int> committed{0};
  std::vector<std::thread> threads;
  for (int p = 0; p < producers; ++p) {
    threads.emplace_back([&, p] {
      for (int i = 0; i < per_producer; ++i) {
        uint32_t size = sizeof(Payload) + (i * 37 + p * 11) % max_extra;
        auto w = (*client)->BeginRecord(size, In(absl::Seconds(30)));
        if (!w.ok()) {
          failures.fetch_add(1);
          return;
        }
        FillBody(w->body(), size, p, i);
        w->header().api_id = static_cast<uint16_t>(p);
        (*client)->Commit(std::move(*w));
        committed.fetch_add(1);
      }
    });
  }

  // On an assertion failure, unblock and join the producers before returning.
  struct JoinGuard {
    ShmClientChannel* client;
    std::vector<std::thread>* threads;
    ~JoinGuard() {
      bool pending = false;
      for (auto& t : *threads) pending |= t.joinable();
      if (!pending) return;
      client->MarkPeerDead();
      for (auto& t : *threads) t.join();
    }
  } guard{client->get(), &threads};

  const int total = producers * per_producer;
  if (expect_blocked) {
    absl::SleepFor(absl::Milliseconds(100));
    const int before = committed.load();
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(committed.load(), before) << "producers did not block";
    EXPECT_GT(before, 0);
    EXPECT_LE(before, static_cast<int>(ring / sizeof(RecordHeader)));
  }
  std::vector<int> next_index(producers, 0);
  uint64_t expected_seq = 1;
  int received = 0;
  while (received < total) {
    // Like the agent: release what was consumed before going to sleep, or a
    // ring full of advanced-but-unreleased records would stall producers.
    auto rec = (*server)->requests().TryPeek();
    ASSERT_TRUE(rec.ok()) << rec.status();
    if (*rec == nullptr) {
      (*server)->Release(expected_seq - 1);
      rec = (*server)->Peek(In(absl::Seconds(30)));
    }
    ASSERT_TRUE(rec.ok()) << rec.status() << " after " << received;
    const RecordHeader* h = *rec;
    ASSERT_EQ(h->seq, expected_seq);
    Payload pl;
    ASSERT_TRUE(CheckBody(h->body(), h->body_size(), &pl))
        << "corrupt body at seq " << h->seq;
    ASSERT_LT(pl.producer, static_cast<uint32_t>(producers));
    ASSERT_EQ(h->api_id, pl.producer);
    ASSERT_EQ(pl.index, static_cast<uint32_t>(next_index[pl.producer]))
        << "producer " << pl.producer << " out of order";
    ++next_index[pl.producer];
    (*server)->Advance();
    ++expected_seq;
    ++received;
    if (received % 16 == 0) {
      (*server)->Release(h->seq);
      if (consumer_delay_every_16 > absl::ZeroDuration()) {
        absl::SleepFor(consumer_delay_every_16);
      }
    }
  }
  (*server)->Release(expected_seq - 1);
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  for (int p = 0; p < producers; ++p) EXPECT_EQ(next_index[p], per_producer);
  EXPECT_THAT((*server)->Peek(In(absl::Milliseconds(10))).status().code(),
              absl::StatusCode::kDeadlineExceeded);
}

TEST(ShmChannelTest, FourProducersTwentyThousandRecordsEach) {
  RunProducersConsumer(64 << 10, 4, 20000, absl::ZeroDuration());
}

TEST(ShmChannelTest, BackPressureSlowConsumerDropsNothing) {
  // A 4 KiB ring holds only a handful of records; the consumer sleeps, so
  // producers must block on space many times.
  RunProducersConsumer(4096, 3, 1500, absl::Microseconds(500),
                       /*expect_blocked=*/true);
}

TEST(ShmChannelTest, FullRingReturnsDeadlineExceeded) {
  auto client = ShmClientChannel::Create(TempPath(), SmallOptions(4096));
  ASSERT_TRUE(client.ok());
  int written = 0;
  absl::Status last;
  for (int i = 0; i < 100; ++i) {
    auto w = (*client)->BeginRecord(512, In(absl::Milliseconds(30)));
    if (!w.ok()) {
      last = w.status();
      break;
    }
    (*client)->Commit(std::move(*w));
    ++written;
  }
  // 4096 / (24 + 512 rounded) = 7 records fit.
  EXPECT_EQ(written, 7);
  EXPECT_EQ(last.code(), absl::StatusCode::kDeadlineExceeded);
  // The failed attempt released the producer token.
  auto w = (*client)->BeginRecord(8, In(absl::Milliseconds(10)));
  EXPECT_TRUE(w.ok()) << w.status();
}

TEST(ShmChannelTest, HeldProducerTokenBoundsOtherWritersAndIsHandedOn) {
  auto client = ShmClientChannel::Create(TempPath(), SmallOptions());
  ASSERT_TRUE(client.ok());
  auto held = (*client)->BeginRecord(8, absl::Seconds(1));
  ASSERT_TRUE(held.ok()) << held.status();
  // Another writer waits for the token no longer than its timeout.
  std::thread other([&] {
    auto w = (*client)->BeginRecord(8, absl::Milliseconds(30));
    EXPECT_EQ(w.status().code(), absl::StatusCode::kDeadlineExceeded);
  });
  other.join();
  // A writer that waits longer gets the token once the holder commits.
  absl::Notification waiting;
  std::atomic<uint64_t> seq{0};
  std::thread second([&] {
    waiting.Notify();
    auto w = (*client)->BeginRecord(8, absl::Seconds(10));
    ASSERT_TRUE(w.ok()) << w.status();
    seq = (*client)->Commit(std::move(*w));
  });
  waiting.WaitForNotification();
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ((*client)->Commit(std::move(*held)), 1u);
  second.join();
  EXPECT_EQ(seq.load(), 2u);
  EXPECT_EQ((*client)->last_request_seq(), 2u);
}

TEST(ShmChannelTest, MarkPeerDeadUnblocksFullRingProducer) {
  auto client = ShmClientChannel::Create(TempPath(), SmallOptions(4096));
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 7; ++i) {
    auto w = (*client)->BeginRecord(512, In(absl::Seconds(1)));
    ASSERT_TRUE(w.ok());
    (*client)->Commit(std::move(*w));
  }
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (*client)->MarkPeerDead();
  });
  absl::Time start = absl::Now();
  auto w = (*client)->BeginRecord(512, In(absl::Seconds(10)));
  absl::Duration took = absl::Now() - start;
  killer.join();
  EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(ShmChannelTest, WrapAroundWithVariableSizes) {
  const uint32_t seed = 12345;
  std::mt19937 rng(seed);
  SCOPED_TRACE(absl::StrCat("seed ", seed));
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions(4096));
  ASSERT_TRUE(client.ok());
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok());
  // At most 3 x 728 bytes + one padding record fit in the empty ring.
  std::uniform_int_distribution<uint32_t> size_dist(0, 700);
  std::uniform_int_distribution<int> batch_dist(1, 3);
  uint64_t seq = 0;
  for (int round = 0; round < 3000; ++round) {
    int batch = batch_dist(rng);
    std::vector<std::string> sent;
    for (int b = 0; b < batch; ++b) {
      std::string body(size_dist(rng), '\0');
      for (auto& ch : body) ch = static_cast<char>(rng());
      auto w = (*client)->BeginRecord(body.size(), In(absl::Seconds(5)));
      ASSERT_TRUE(w.ok()) << w.status();
      std::memcpy(w->body(), body.data(), body.size());
      (*client)->Commit(std::move(*w));
      sent.push_back(std::move(body));
    }
    for (const std::string& body : sent) {
      auto rec = (*server)->Peek(In(absl::Seconds(5)));
      ASSERT_TRUE(rec.ok()) << rec.status() << " round " << round;
      ASSERT_EQ((*rec)->seq, ++seq);
      ASSERT_EQ((*rec)->body_size(), body.size());
      ASSERT_EQ(std::string((*rec)->body(), body.size()), body)
          << "round " << round;
      (*server)->Advance();
    }
    (*server)->Release(seq);
  }
  EXPECT_GT(seq, 3000u);  // Wrapped many times around a 4 KiB ring.
}

TEST(ShmChannelTest, ReplySlotsAcrossProcesses) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Server: reply with the reversed body, status = api_id + 1.
    auto server = ShmServerChannel::Attach(path);
    if (!server.ok()) _exit(2);
    while (true) {
      auto rec = (*server)->Peek(In(absl::Seconds(20)));
      if (!rec.ok()) _exit(3);
      const RecordHeader* h = *rec;
      if (h->api_id == 99) _exit(0);
      std::string body(h->body(), h->body_size());
      std::reverse(body.begin(), body.end());
      std::memcpy((*server)->ReplyBuffer(h->reply_slot), body.data(),
                  body.size());
      (*server)->PostReply(h->reply_slot, h->seq, h->api_id + 1, body.size());
      uint64_t seq = h->seq;
      (*server)->Advance();
      (*server)->Release(seq);
    }
  }
  std::vector<std::thread> threads;
  std::atomic<int> ok_count{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto slot = (*client)->AcquireReplySlot(In(absl::Seconds(10)));
        if (!slot.ok()) return;
        std::string body = absl::StrCat("req-", t, "-", i);
        uint64_t seq = Send(client->get(), static_cast<uint16_t>(t), body,
                            *slot);
        auto reply = (*client)->WaitReply(*slot, seq, In(absl::Seconds(10)));
        std::string want(body.rbegin(), body.rend());
        if (reply.ok() && reply->status == static_cast<uint32_t>(t + 1) &&
            std::string(reply->data, reply->length) == want) {
          ok_count.fetch_add(1);
        }
        (*client)->ReleaseReplySlot(*slot);
      }
    });
  }
  for (auto& th : threads) th.join();
  Send(client->get(), 99, "");
  EXPECT_EQ(WaitChild(child), 0);
  EXPECT_EQ(ok_count.load(), 1500);
}

TEST(ShmChannelTest, KilledServerMakesWaitReplyUnavailableQuickly) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(sv[0]);
    auto server = ShmServerChannel::Attach(path);
    char ready = server.ok() ? 'r' : 'x';
    if (write(sv[1], &ready, 1) != 1) _exit(2);
    // Reads requests but never replies; killed by the parent.
    for (int i = 0; i < 300; ++i) absl::SleepFor(absl::Milliseconds(100));
    _exit(0);
  }
  close(sv[1]);
  char ready = 0;
  ASSERT_EQ(read(sv[0], &ready, 1), 1);
  ASSERT_EQ(ready, 'r');
  EXPECT_EQ((*client)->server_pid(), static_cast<uint32_t>(child));

  auto monitor =
      PeerMonitor::Start(sv[0], [&] { (*client)->MarkPeerDead(); });
  ASSERT_TRUE(monitor.ok());
  auto slot = (*client)->AcquireReplySlot(In(absl::Seconds(1)));
  ASSERT_TRUE(slot.ok());
  uint64_t seq = Send(client->get(), 1, "sync", *slot);

  std::atomic<int64_t> kill_ns{0};
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(100));
    kill_ns.store(absl::GetCurrentTimeNanos());
    kill(child, SIGKILL);
  });
  auto reply = (*client)->WaitReply(*slot, seq, In(absl::Seconds(10)));
  const int64_t returned_ns = absl::GetCurrentTimeNanos();
  killer.join();
  EXPECT_EQ(reply.status().code(), absl::StatusCode::kUnavailable);
  const absl::Duration latency = absl::Nanoseconds(returned_ns - kill_ns.load());
  EXPECT_LT(latency, absl::Milliseconds(200));
  std::cout << "death noticed " << absl::FormatDuration(latency)
            << " after SIGKILL\n";
  EXPECT_EQ(WaitChild(child), 128 + SIGKILL);
  EXPECT_TRUE((*monitor)->fired());
  monitor->reset();
  close(sv[0]);
}

TEST(ShmChannelTest, ReplacementServerSeesExactlyUnreleasedRecords) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions(4096));
  ASSERT_TRUE(client.ok());
  // Enough records to wrap the 4 KiB ring once the first ones are released.
  for (int i = 1; i <= 10; ++i) {
    Send(client->get(), 1, std::string(200, static_cast<char>('a' + i)));
  }
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // First server: reads all ten, journals (releases) through 4, dies.
    auto server = ShmServerChannel::Attach(path);
    if (!server.ok()) _exit(2);
    for (int i = 1; i <= 10; ++i) {
      auto rec = (*server)->Peek(In(absl::Seconds(5)));
      if (!rec.ok() || (*rec)->seq != static_cast<uint64_t>(i)) _exit(3);
      (*server)->Advance();
      if (i == 4) (*server)->Release(4);
    }
    raise(SIGKILL);
    _exit(4);
  }
  ASSERT_EQ(WaitChild(child), 128 + SIGKILL);
  // More requests arrive while no server runs; they reuse released space.
  for (int i = 11; i <= 19; ++i) {
    Send(client->get(), 1, std::string(200, static_cast<char>('a' + i)));
  }

  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok());
  EXPECT_EQ((*server)->server_epoch(), 2u);
  EXPECT_EQ((*server)->requests().released_seq(), 4u);
  std::vector<uint64_t> seen;
  while (true) {
    auto rec = (*server)->Peek(In(absl::Milliseconds(20)));
    if (!rec.ok()) {
      EXPECT_EQ(rec.status().code(), absl::StatusCode::kDeadlineExceeded);
      break;
    }
    EXPECT_EQ(std::string((*rec)->body(), 200),
              std::string(200, static_cast<char>('a' + (*rec)->seq)));
    seen.push_back((*rec)->seq);
    (*server)->Advance();
  }
  EXPECT_EQ(seen, (std::vector<uint64_t>{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18,
                                   19}));

  // Rewind and skip what the journal already holds (through 7).
  (*server)->ResetReadCursorToReleased();
  ASSERT_TRUE((*server)->SkipThrough(7).ok());
  auto rec = (*server)->Peek(In(absl::Seconds(1)));
  ASSERT_TRUE(rec.ok());
  EXPECT_EQ((*rec)->seq, 8u);
  (*server)->Advance();
  (*server)->Release(8);
  EXPECT_EQ((*server)->requests().released_seq(), 8u);
}

TEST(ShmChannelTest, AttachRefusesBadMagicVersionAndSize) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);

  uint64_t magic = 0;
  ASSERT_EQ(pread(fd, &magic, 8, 0), 8);
  EXPECT_EQ(magic, kChannelMagic);
  const uint64_t bad_magic = 0x1234;
  ASSERT_EQ(pwrite(fd, &bad_magic, 8, 0), 8);
  auto s = ShmServerChannel::Attach(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("bad magic"));
  ASSERT_EQ(pwrite(fd, &magic, 8, 0), 8);

  uint32_t version = 0;
  ASSERT_EQ(pread(fd, &version, 4, 8), 4);
  EXPECT_EQ(version, kChannelLayoutVersion);
  const uint32_t bad_version = 77;
  ASSERT_EQ(pwrite(fd, &bad_version, 4, 8), 4);
  s = ShmServerChannel::Attach(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("layout version 77"));
  ASSERT_EQ(pwrite(fd, &version, 4, 8), 4);

  struct stat sb;
  ASSERT_EQ(fstat(fd, &sb), 0);
  ASSERT_EQ(ftruncate(fd, sb.st_size + 4096), 0);
  s = ShmServerChannel::Attach(path);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("inconsistent"));
  ASSERT_EQ(ftruncate(fd, sb.st_size), 0);
  close(fd);

  EXPECT_TRUE(ShmServerChannel::Attach(path).ok());
  EXPECT_EQ(ShmServerChannel::Attach("/dev/shm/revenant-no-such").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ShmChannelTest, MalformedRecordIsDataLoss) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok());
  Send(client->get(), 1, "abc");
  // The request ring's data starts after the header and control pages.
  int fd = open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  const uint32_t bad_size = 7;  // Smaller than a RecordHeader.
  ASSERT_EQ(pwrite(fd, &bad_size, 4, 8192), 4);
  close(fd);
  auto rec = (*server)->Peek(In(absl::Seconds(1)));
  EXPECT_EQ(rec.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(rec.status().message()), HasSubstr("malformed"));
}

TEST(ShmChannelTest, ServerPeekReturnsUnavailableWhenClientMarkedDead) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok());
  std::thread killer([&] {
    absl::SleepFor(absl::Milliseconds(30));
    (*server)->MarkPeerDead();
  });
  absl::Time start = absl::Now();
  auto rec = (*server)->Peek(In(absl::Seconds(10)));
  killer.join();
  EXPECT_EQ(rec.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(ShmChannelTest, CallbackRingAndCompletionCounter) {
  const std::string path = TempPath();
  auto client = ShmClientChannel::Create(path, SmallOptions());
  ASSERT_TRUE(client.ok());
  auto server = ShmServerChannel::Attach(path);
  ASSERT_TRUE(server.ok());

  for (int i = 0; i < 3; ++i) {
    auto w = (*server)->callbacks().BeginRecord(8, In(absl::Seconds(1)));
    ASSERT_TRUE(w.ok());
    uint64_t cookie = 1000 + i;
    std::memcpy(w->body(), &cookie, 8);
    EXPECT_EQ((*server)->callbacks().Commit(std::move(*w)),
              static_cast<uint64_t>(i + 1));
  }
  std::thread runner([&] {
    for (int i = 0; i < 3; ++i) {
      auto rec = (*client)->callbacks().Peek(In(absl::Seconds(5)));
      if (!rec.ok()) return;
      uint64_t cookie = 0;
      std::memcpy(&cookie, (*rec)->body(), 8);
      EXPECT_EQ(cookie, 1000u + i);
      uint64_t seq = (*rec)->seq;
      (*client)->callbacks().Advance();
      (*client)->callbacks().Release(seq);
      (*client)->PostCallbackDone();
    }
  });
  EXPECT_TRUE((*server)->WaitCallbacksDone(3, In(absl::Seconds(5))).ok());
  runner.join();
  EXPECT_EQ((*server)->callbacks_done(), 3u);
  EXPECT_EQ((*server)->WaitCallbacksDone(4, In(absl::Milliseconds(20))).code(),
            absl::StatusCode::kDeadlineExceeded);
  (*server)->MarkPeerDead();
  EXPECT_EQ((*server)->WaitCallbacksDone(4, In(absl::Seconds(5))).code(),
            absl::StatusCode::kUnavailable);
}

TEST(ShmChannelTest, ReplySlotExhaustionIsBounded) {
  auto client = ShmClientChannel::Create(TempPath(), SmallOptions());
  ASSERT_TRUE(client.ok());
  std::vector<int> slots;
  for (int i = 0; i < 8; ++i) {
    auto s = (*client)->AcquireReplySlot(In(absl::Seconds(1)));
    ASSERT_TRUE(s.ok());
    slots.push_back(*s);
  }
  std::sort(slots.begin(), slots.end());
  EXPECT_EQ(slots, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ((*client)->AcquireReplySlot(In(absl::Milliseconds(20)))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
  std::thread releaser([&] {
    absl::SleepFor(absl::Milliseconds(20));
    (*client)->ReleaseReplySlot(5);
  });
  auto s = (*client)->AcquireReplySlot(In(absl::Seconds(5)));
  releaser.join();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, 5);
  EXPECT_EQ((*client)->WaitReply(5, 1, In(absl::Milliseconds(20)))
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace transport
}  // namespace revenant
