// Cross-process round-trip latency of a small request/reply over the
// shared-memory channel, with a pipe ping-pong between the same two
// processes as the reference.
//
//   bazel run //transport:ring_bench -- [iterations]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "transport/shm_channel.h"

namespace {

using revenant::transport::ChannelOptions;
using revenant::transport::ShmClientChannel;
using revenant::transport::ShmServerChannel;

constexpr uint16_t kStop = 99;

struct Stats {
  double median_us, p99_us;
};

Stats Summarize(std::vector<int64_t> ns) {
  std::sort(ns.begin(), ns.end());
  return {ns[ns.size() / 2] / 1e3, ns[ns.size() * 99 / 100] / 1e3};
}

[[noreturn]] void ServeChannel(const std::string& path) {
  auto server = ShmServerChannel::Attach(path);
  if (!server.ok()) _exit(2);
  while (true) {
    auto rec = (*server)->Peek(absl::Now() + absl::Seconds(1));
    if (!rec.ok()) {
      if (rec.status().code() == absl::StatusCode::kDeadlineExceeded) continue;
      _exit(3);
    }
    const auto* h = *rec;
    if (h->api_id == kStop) _exit(0);
    std::memcpy((*server)->ReplyBuffer(h->reply_slot), h->body(), 8);
    (*server)->PostReply(h->reply_slot, h->seq, 0, 8);
    const uint64_t seq = h->seq;
    (*server)->Advance();
    (*server)->Release(seq);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 20000;
  const std::string path =
      absl::StrCat("/dev/shm/revenant-ring-bench-", getpid());
  ChannelOptions opts;
  opts.ring_capacity = 1 << 20;
  opts.staging_size = 4096;
  auto client = ShmClientChannel::Create(path, opts);
  if (!client.ok()) {
    std::fprintf(stderr, "create: %s\n", client.status().ToString().c_str());
    return 1;
  }
  pid_t child = fork();
  if (child == 0) ServeChannel(path);

  auto slot = (*client)->AcquireReplySlot(absl::Now() + absl::Seconds(5));
  std::vector<int64_t> shm_ns;
  shm_ns.reserve(iters);
  for (int i = 0; i < iters + 1000; ++i) {
    const int64_t t0 = absl::GetCurrentTimeNanos();
    auto w = (*client)->BeginRecord(8, absl::Now() + absl::Seconds(5));
    if (!w.ok()) return 1;
    uint64_t v = i;
    std::memcpy(w->body(), &v, 8);
    w->header().api_id = 1;
    w->header().reply_slot = *slot;
    const uint64_t seq = (*client)->Commit(std::move(*w));
    auto r = (*client)->WaitReply(*slot, seq, absl::Now() + absl::Seconds(5));
    if (!r.ok()) {
      std::fprintf(stderr, "reply: %s\n", r.status().ToString().c_str());
      return 1;
    }
    if (i >= 1000) shm_ns.push_back(absl::GetCurrentTimeNanos() - t0);
  }
  auto w = (*client)->BeginRecord(0, absl::Now() + absl::Seconds(5));
  if (w.ok()) {
    w->header().api_id = kStop;
    (*client)->Commit(std::move(*w));
  }
  int status = 0;
  waitpid(child, &status, 0);

  // Reference: a one-byte pipe ping-pong between two processes.
  int to_child[2], to_parent[2];
  if (pipe(to_child) != 0 || pipe(to_parent) != 0) return 1;
  child = fork();
  if (child == 0) {
    close(to_child[1]);  // So that the parent's close means EOF here.
    close(to_parent[0]);
    char c;
    while (read(to_child[0], &c, 1) == 1) {
      if (write(to_parent[1], &c, 1) != 1) break;
    }
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  std::vector<int64_t> pipe_ns;
  pipe_ns.reserve(iters);
  for (int i = 0; i < iters + 1000; ++i) {
    const int64_t t0 = absl::GetCurrentTimeNanos();
    char c = 'x';
    if (write(to_child[1], &c, 1) != 1 || read(to_parent[0], &c, 1) != 1) {
      return 1;
    }
    if (i >= 1000) pipe_ns.push_back(absl::GetCurrentTimeNanos() - t0);
  }
  close(to_child[1]);
  waitpid(child, &status, 0);

  const Stats shm = Summarize(shm_ns), ref = Summarize(pipe_ns);
  std::printf("shm channel round trip (8-byte request + reply), %d iters:\n"
              "  median %.2f us  p99 %.2f us\n",
              iters, shm.median_us, shm.p99_us);
  std::printf("pipe ping-pong reference:\n  median %.2f us  p99 %.2f us\n",
              ref.median_us, ref.p99_us);
  std::printf("ratio shm/pipe: median %.2f  p99 %.2f\n",
              shm.median_us / ref.median_us, shm.p99_us / ref.p99_us);
  return 0;
}
