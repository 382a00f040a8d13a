#include "collective/gloo_engine.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace collective {
namespace {

// Writing to a dead peer's socket raises SIGPIPE; the agent ignores it (its
// main does), so must the tests that kill peers.
const bool kIgnoreSigpipe = [] {
  signal(SIGPIPE, SIG_IGN);
  return true;
}();


using ::testing::HasSubstr;

std::string NewDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base ? base : "/tmp", "/rdvXXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  EXPECT_NE(mkdtemp(buf.data()), nullptr);
  return std::string(buf.data());
}

GlooEngineOptions Options(const std::string& dir, int rank, int size,
                          absl::Duration timeout = absl::Seconds(30)) {
  GlooEngineOptions o;
  o.rendezvous_dir = dir;
  o.prefix = "test";
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  return o;
}

// Runs body(rank, engine) on `n` threads, one engine each.
void RunRanks(int n, const std::function<void(int, CollectiveEngine*)>& body) {
  const std::string dir = NewDir();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<GlooEngine>> e = GlooEngine::Create(Options(dir, r, n));
      ASSERT_TRUE(e.ok()) << e.status();
      EXPECT_EQ((*e)->rank(), r);
      EXPECT_EQ((*e)->size(), n);
      body(r, e->get());
    });
  }
  for (auto& t : threads) t.join();
}

class Sizes : public ::testing::TestWithParam<int> {};

TEST_P(Sizes, AllReduceEveryOpAndType) {
  const int n = GetParam();
  RunRanks(n, [n](int r, CollectiveEngine* e) {
    const size_t count = 37;
    for (RedOp op : {RedOp::kSum, RedOp::kProd, RedOp::kMax, RedOp::kMin, RedOp::kAvg}) {
      std::vector<int32_t> in(count), out(count, -1);
      for (size_t i = 0; i < count; ++i) in[i] = static_cast<int32_t>((r + 1) * (i % 5 + 1));
      ASSERT_TRUE(e->AllReduce(in.data(), out.data(), count, DataType::kInt32, op).ok());
      for (size_t i = 0; i < count; ++i) {
        int64_t want = op == RedOp::kProd ? 1 : (op == RedOp::kMin ? INT32_MAX : 0);
        for (int k = 0; k < n; ++k) {
          const int64_t v = (k + 1) * static_cast<int64_t>(i % 5 + 1);
          if (op == RedOp::kSum || op == RedOp::kAvg) want += v;
          if (op == RedOp::kProd) want *= v;
          if (op == RedOp::kMax) want = std::max(want, v);
          if (op == RedOp::kMin) want = std::min(want, v);
        }
        if (op == RedOp::kAvg) want /= n;
        ASSERT_EQ(out[i], want) << "op " << static_cast<int>(op) << " i " << i;
      }
    }
    // Other types, in place.
    std::vector<double> d(5, 0.5 * (r + 1));
    ASSERT_TRUE(e->AllReduce(d.data(), d.data(), d.size(), DataType::kFloat64, RedOp::kSum).ok());
    EXPECT_EQ(d[4], 0.5 * n * (n + 1) / 2);
    std::vector<uint8_t> u(3, static_cast<uint8_t>(r + 1));
    ASSERT_TRUE(e->AllReduce(u.data(), u.data(), 3, DataType::kUint8, RedOp::kMax).ok());
    EXPECT_EQ(u[2], n);
    std::vector<int64_t> l(2, int64_t{1} << 40);
    ASSERT_TRUE(e->AllReduce(l.data(), l.data(), 2, DataType::kInt64, RedOp::kSum).ok());
    EXPECT_EQ(l[1], (int64_t{1} << 40) * n);
    std::vector<uint16_t> h(3, 0x3e00);  // half 1.5
    ASSERT_TRUE(e->AllReduce(h.data(), h.data(), 3, DataType::kFloat16, RedOp::kSum).ok());
    const uint16_t half_sum[] = {0, 0x3e00, 0x4200, 0, 0x4600};  // 1.5, 3, -, 6
    EXPECT_EQ(h[1], half_sum[n]);
    std::vector<uint16_t> bf(2, 0x3fc0);  // bfloat16 1.5
    ASSERT_TRUE(e->AllReduce(bf.data(), bf.data(), 2, DataType::kBfloat16, RedOp::kMax).ok());
    EXPECT_EQ(bf[0], 0x3fc0);
    std::vector<float> f(4, 1.5f);
    ASSERT_TRUE(e->AllReduce(f.data(), f.data(), 4, DataType::kFloat32, RedOp::kAvg).ok());
    EXPECT_EQ(f[0], 1.5f);
  });
}

TEST_P(Sizes, BroadcastReduceGatherScatter) {
  const int n = GetParam();
  RunRanks(n, [n](int r, CollectiveEngine* e) {
    const size_t count = 11;
    for (int root = 0; root < n; ++root) {
      std::vector<float> b(count, r == root ? 3.25f + root : -1.0f);
      ASSERT_TRUE(e->Broadcast(b.data(), b.data(), count, DataType::kFloat32, root).ok());
      EXPECT_EQ(b[count - 1], 3.25f + root);

      std::vector<int32_t> in(count, r + 1), out(count, 0);
      ASSERT_TRUE(e->Reduce(in.data(), out.data(), count, DataType::kInt32, RedOp::kSum, root)
                      .ok());
      EXPECT_EQ(out[0], r == root ? n * (n + 1) / 2 : 0);

      std::vector<int32_t> g(count * n, -1);
      ASSERT_TRUE(e->Gather(in.data(), g.data(), count, DataType::kInt32, root).ok());
      if (r == root) {
        for (int k = 0; k < n; ++k) EXPECT_EQ(g[k * count + 3], k + 1);
      }

      std::vector<int32_t> src(count * n), dst(count, -1);
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<int32_t>(i / count) * 10;
      ASSERT_TRUE(e->Scatter(src.data(), dst.data(), count, DataType::kInt32, root).ok());
      EXPECT_EQ(dst[5], r * 10);
    }
  });
}

TEST_P(Sizes, AllGatherReduceScatterAllToAll) {
  const int n = GetParam();
  RunRanks(n, [n](int r, CollectiveEngine* e) {
    const size_t count = 7;
    std::vector<int64_t> mine(count, 100 + r), all(count * n, -1);
    ASSERT_TRUE(e->AllGather(mine.data(), all.data(), count, DataType::kInt64).ok());
    for (int k = 0; k < n; ++k) EXPECT_EQ(all[k * count + 6], 100 + k);
    // In place: rank r's block already sits at r * count.
    std::vector<int64_t> inplace(count * n, -1);
    for (size_t i = 0; i < count; ++i) inplace[r * count + i] = 7 * r;
    ASSERT_TRUE(e->AllGather(inplace.data() + r * count, inplace.data(), count, DataType::kInt64)
                    .ok());
    for (int k = 0; k < n; ++k) EXPECT_EQ(inplace[k * count], 7 * k);

    std::vector<float> rs_in(count * n), rs_out(count, 0);
    for (size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = static_cast<float>(i / count + r);
    ASSERT_TRUE(e->ReduceScatter(rs_in.data(), rs_out.data(), count, DataType::kFloat32,
                                 RedOp::kSum)
                    .ok());
    // Block r from every rank k: r + k.
    EXPECT_EQ(rs_out[2], static_cast<float>(n * r + n * (n - 1) / 2));

    std::vector<int32_t> a(count * n), b(count * n, -1);
    for (int j = 0; j < n; ++j) {
      for (size_t i = 0; i < count; ++i) a[j * count + i] = 1000 * r + j;
    }
    ASSERT_TRUE(e->AllToAll(a.data(), b.data(), count, DataType::kInt32).ok());
    for (int k = 0; k < n; ++k) EXPECT_EQ(b[k * count + 1], 1000 * k + r);
    ASSERT_TRUE(e->AllToAll(a.data(), a.data(), count, DataType::kInt32).ok());  // in place
    EXPECT_EQ(a, b);
  });
}

TEST_P(Sizes, SendRecvRingInOneGroup) {
  const int n = GetParam();
  RunRanks(n, [n](int r, CollectiveEngine* e) {
    std::vector<int32_t> out(9, r), in(9, -1);
    Operation s, v;
    s.kind = Operation::Kind::kSend;
    s.send = out.data();
    s.count = out.size();
    s.dtype = DataType::kInt32;
    s.root = (r + 1) % n;
    v.kind = Operation::Kind::kRecv;
    v.recv = in.data();
    v.count = in.size();
    v.dtype = DataType::kInt32;
    v.root = (r + n - 1) % n;
    // Receive first on odd ranks: order inside a group does not matter.
    std::vector<Operation> ops = r % 2 ? std::vector<Operation>{v, s} : std::vector<Operation>{s, v};
    ASSERT_TRUE(e->Run(ops).ok());
    EXPECT_EQ(in[8], (r + n - 1) % n);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, Sizes, ::testing::Values(1, 2, 4));

// Values whose float sum depends on the order of additions.
std::vector<float> OrderSensitive(int rank, size_t count, uint32_t seed) {
  std::mt19937 gen(seed + 7919u * rank);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(count);
  for (auto& x : v) x = std::ldexp(mant(gen), expo(gen));
  return v;
}

TEST(GlooEngine, ReductionsAreBitwiseDeterministicInRankOrder) {
  const uint32_t seed = 20240611;
  std::cout << "seed " << seed << std::endl;
  const int n = 4;
  const size_t count = 4096;
  // The expected result: a sequential fold in rank order 0..n-1.
  std::vector<float> want(count, 0);
  {
    std::vector<std::vector<float>> c;
    for (int r = 0; r < n; ++r) c.push_back(OrderSensitive(r, count, seed));
    for (size_t i = 0; i < count; ++i) {
      float acc = c[0][i];
      for (int r = 1; r < n; ++r) acc += c[r][i];
      want[i] = acc;
    }
    // The data must really be order-sensitive, or the test proves nothing.
    size_t differs = 0;
    for (size_t i = 0; i < count; ++i) {
      float rev = c[n - 1][i];
      for (int r = n - 2; r >= 0; --r) rev += c[r][i];
      if (std::memcmp(&rev, &want[i], sizeof(float)) != 0) ++differs;
    }
    ASSERT_GT(differs, count / 20) << "seed " << seed;
  }
  for (int run = 0; run < 2; ++run) {
    std::vector<std::vector<float>> results(n);
    RunRanks(n, [&](int r, CollectiveEngine* e) {
      std::vector<float> v = OrderSensitive(r, count, seed);
      results[r].resize(count);
      ASSERT_TRUE(
          e->AllReduce(v.data(), results[r].data(), count, DataType::kFloat32, RedOp::kSum).ok());
    });
    for (int r = 0; r < n; ++r) {
      ASSERT_EQ(std::memcmp(results[r].data(), want.data(), count * sizeof(float)), 0)
          << "rank " << r << " run " << run << " seed " << seed;
    }
  }
}

TEST(FoldInOrder, SixteenBitFloatsRoundEveryStep) {
  // half: 2048 + 1 rounds back to 2048 (ties to even), twice; a float sum would give 2050.
  const uint16_t h[] = {0x6800, 0x3c00, 0x3c00};
  uint16_t out = 0;
  ASSERT_TRUE(FoldInOrder(h, 3, 1, DataType::kFloat16, RedOp::kSum, &out).ok());
  EXPECT_EQ(out, 0x6800);
  // The other order differs: 1 + 1 = 2, then 2048 + 2 = 2050 (0x6801).
  const uint16_t h2[] = {0x3c00, 0x3c00, 0x6800};
  ASSERT_TRUE(FoldInOrder(h2, 3, 1, DataType::kFloat16, RedOp::kSum, &out).ok());
  EXPECT_EQ(out, 0x6801);
  // bfloat16: 256 + 1 stays 256.
  const uint16_t b[] = {0x4380, 0x3f80};
  ASSERT_TRUE(FoldInOrder(b, 2, 1, DataType::kBfloat16, RedOp::kSum, &out).ok());
  EXPECT_EQ(out, 0x4380);
  // Subnormal and overflow edges of half: 2^-24 + 2^-24 = 2^-23; 65504 + 65504 = inf.
  const uint16_t sub[] = {0x0001, 0x0001};
  ASSERT_TRUE(FoldInOrder(sub, 2, 1, DataType::kFloat16, RedOp::kSum, &out).ok());
  EXPECT_EQ(out, 0x0002);
  const uint16_t big[] = {0x7bff, 0x7bff};
  ASSERT_TRUE(FoldInOrder(big, 2, 1, DataType::kFloat16, RedOp::kSum, &out).ok());
  EXPECT_EQ(out, 0x7c00);
}

TEST(GlooEngine, MismatchedCountsFailEverywhereAndTheEngineStaysUsable) {
  RunRanks(3, [](int r, CollectiveEngine* e) {
    std::vector<float> buf(16, 1.0f);
    absl::Status s = e->AllReduce(buf.data(), buf.data(), r == 1 ? 8 : 16, DataType::kFloat32,
                                  RedOp::kSum);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("disagrees"));
    EXPECT_EQ(buf[0], 1.0f);  // nothing moved
    // A bad root on one rank fails the operation on all of them.
    s = e->Broadcast(buf.data(), buf.data(), 16, DataType::kFloat32, r == 2 ? 7 : 0);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    // Send/recv size mismatch.
    if (r < 2) {
      s = r == 0 ? e->Send(buf.data(), 4, DataType::kFloat32, 1)
                 : e->Recv(buf.data(), 5, DataType::kFloat32, 0);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    }
    // Still usable.
    ASSERT_TRUE(e->AllReduce(buf.data(), buf.data(), 16, DataType::kFloat32, RedOp::kSum).ok());
    EXPECT_EQ(buf[15], 3.0f);
    // Unsupported types are refused locally (and agreed upon).
    EXPECT_EQ(e->AllReduce(buf.data(), buf.data(), 2, static_cast<DataType>(10), RedOp::kSum)
                  .code(),
              absl::StatusCode::kInvalidArgument);  // fp8: not supported
  });
}

TEST(GlooEngine, PeerThatNeverJoinsTimesOut) {
  const std::string dir = NewDir();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooEngine>> e =
      GlooEngine::Create(Options(dir, 0, 2, absl::Seconds(1)));
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(e.status().code(), absl::StatusCode::kDeadlineExceeded) << e.status();
  EXPECT_LT(took, absl::Seconds(20));
}

TEST(GlooEngine, PeerThatNeverCallsTimesOut) {
  const std::string dir = NewDir();
  std::atomic<bool> done{false};
  std::thread idle([&] {
    auto e = GlooEngine::Create(Options(dir, 1, 2, absl::Seconds(2)));
    ASSERT_TRUE(e.ok()) << e.status();
    while (!done.load()) absl::SleepFor(absl::Milliseconds(20));
  });
  auto e = GlooEngine::Create(Options(dir, 0, 2, absl::Seconds(2)));
  ASSERT_TRUE(e.ok()) << e.status();
  int32_t x = 1;
  const absl::Time start = absl::Now();
  absl::Status s = (*e)->AllReduce(&x, &x, 1, DataType::kInt32, RedOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // Broken from now on.
  EXPECT_EQ((*e)->AllReduce(&x, &x, 1, DataType::kInt32, RedOp::kSum).code(),
            absl::StatusCode::kAborted);
  done.store(true);
  idle.join();
}

TEST(GlooEngine, PeerDeathIsUnavailable) {
  const std::string dir = NewDir();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The peer joins, then dies without taking part in the collective.
    auto e = GlooEngine::Create(Options(dir, 1, 2, absl::Seconds(20)));
    _exit(e.ok() ? 3 : 4);
  }
  auto e = GlooEngine::Create(Options(dir, 0, 2, absl::Seconds(20)));
  ASSERT_TRUE(e.ok()) << e.status();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;
  std::vector<float> buf(64, 1.0f);
  const absl::Time start = absl::Now();
  absl::Status s = (*e)->AllReduce(buf.data(), buf.data(), buf.size(), DataType::kFloat32,
                                   RedOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(15));
}

TEST(GlooEngine, AbortUnblocksAWaitingCall) {
  const std::string dir = NewDir();
  std::atomic<bool> done{false};
  std::thread idle([&] {
    auto e = GlooEngine::Create(Options(dir, 1, 2));
    ASSERT_TRUE(e.ok()) << e.status();
    while (!done.load()) absl::SleepFor(absl::Milliseconds(20));
  });
  auto e = GlooEngine::Create(Options(dir, 0, 2));
  ASSERT_TRUE(e.ok()) << e.status();
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(300));
    (*e)->Abort();
  });
  int32_t x = 1;
  const absl::Time start = absl::Now();
  absl::Status s = (*e)->AllReduce(&x, &x, 1, DataType::kInt32, RedOp::kSum);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  aborter.join();
  done.store(true);
  idle.join();
}

TEST(GlooEngine, VirtualRanksOrderResultsByApplicationRank) {
  // Engine ranks reversed: results must still come in application order.
  const int n = 3;
  const std::string dir = NewDir();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      GlooEngineOptions o = Options(dir, r, n);
      o.app_to_engine = {2, 1, 0};
      auto e = GlooEngine::Create(o);
      ASSERT_TRUE(e.ok()) << e.status();
      int32_t mine = 10 + r;
      std::vector<int32_t> all(n, -1);
      ASSERT_TRUE((*e)->AllGather(&mine, all.data(), 1, DataType::kInt32).ok());
      EXPECT_EQ(all, (std::vector<int32_t>{10, 11, 12}));
      int32_t b = r == 1 ? 99 : 0;
      ASSERT_TRUE((*e)->Broadcast(&b, &b, 1, DataType::kInt32, 1).ok());
      EXPECT_EQ(b, 99);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace
}  // namespace collective
}  // namespace revenant
