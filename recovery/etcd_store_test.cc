// The etcd client and store against a real etcd (recovery/etcd_test_env.h).
// Without etcd every test fails: the test is tagged "etcd" so that
// scripts/test.sh leaves it out only outside CI on a machine without
// etcd-server.
#include "recovery/etcd_store.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/events.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recovery/coordinator.h"
#include "recovery/etcd_test_env.h"

namespace revenant {
namespace recovery {
namespace {

using ::testing::HasSubstr;

std::unique_ptr<EtcdClient> Client(EtcdClientOptions options = {}) {
  const std::string e = TestEtcdEndpoint();
  if (e.empty()) return nullptr;
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create(e, options);
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : nullptr;
}

std::string JobId() { return "test-" + RandomHex(6).value_or("x"); }

std::string TempDir() {
  std::string t = std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
                  "/etcdXXXXXX";
  return mkdtemp(t.data());
}

TEST(EtcdClientTest, PutGetPrefixCompareAndSwapDelete) {
  std::unique_ptr<EtcdClient> c = Client();
  ASSERT_NE(nullptr, c);
  const std::string p = "/revenant/" + JobId() + "/";
  ASSERT_TRUE(c->Put(p + "a", std::string("v\0\xff", 3)).ok());
  absl::StatusOr<std::optional<EtcdKv>> got = c->Get(p + "a");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(std::string("v\0\xff", 3), (*got)->value) << "bytes survive base64 both ways";
  got = c->Get(p + "missing");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());

  std::string existing;
  absl::StatusOr<bool> created = c->CreateIfAbsent(p + "b", "first", 0, &existing);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_TRUE(*created);
  created = c->CreateIfAbsent(p + "b", "second", 0, &existing);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE(*created);
  EXPECT_EQ("first", existing);

  std::string current;
  absl::StatusOr<bool> swapped = c->CompareAndSwap(p + "b", std::string("nope"), "x", &current);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_FALSE(*swapped);
  EXPECT_EQ("first", current);
  swapped = c->CompareAndSwap(p + "b", std::string("first"), "x", &current);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_TRUE(*swapped);
  swapped = c->CompareAndSwap(p + "c", std::nullopt, "new", &current);
  ASSERT_TRUE(swapped.ok() && *swapped) << "absent expected: creates";

  absl::StatusOr<std::vector<EtcdKv>> all = c->GetPrefix(p);
  ASSERT_TRUE(all.ok()) << all.status();
  ASSERT_EQ(3u, all->size());
  EXPECT_EQ(p + "a", (*all)[0].key);
  EXPECT_EQ("x", (*all)[1].value);
  absl::StatusOr<int64_t> deleted = c->DeletePrefix(p);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(3, *deleted);
  all = c->GetPrefix(p);
  ASSERT_TRUE(all.ok());
  EXPECT_TRUE(all->empty());
}

TEST(EtcdClientTest, AKeyOnARevokedLeaseGoesAndTheLeaseCannotBeRenewed) {
  std::unique_ptr<EtcdClient> c = Client();
  ASSERT_NE(nullptr, c);
  const std::string key = "/revenant/" + JobId() + "/leased";
  absl::StatusOr<int64_t> lease = c->GrantLease(30);
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(c->Put(key, "alive", *lease).ok());
  absl::StatusOr<int64_t> ttl = c->KeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status();
  EXPECT_GT(*ttl, 0);
  ASSERT_TRUE(c->RevokeLease(*lease).ok());
  absl::StatusOr<std::optional<EtcdKv>> got = c->Get(key);
  ASSERT_TRUE(got.ok());
  EXPECT_FALSE(got->has_value()) << "the key went with its lease";
  ttl = c->KeepAlive(*lease);
  EXPECT_EQ(absl::StatusCode::kNotFound, ttl.status().code()) << ttl.status();
}

TEST(EtcdClientTest, AnUnreachableEtcdFailsWithinTheBoundNamingTheEndpoint) {
  // A port nobody listens on (bound, never listened to, then closed).
  EtcdClientOptions o;
  o.unreachable_timeout = absl::Milliseconds(700);
  o.request_timeout = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<EtcdClient>> c = EtcdClient::Create("127.0.0.1:1", o);
  ASSERT_TRUE(c.ok());
  const absl::Time t0 = absl::Now();
  absl::Status s = (*c)->Put("/revenant/x", "y");
  const absl::Duration took = absl::Now() - t0;
  EXPECT_EQ(absl::StatusCode::kUnavailable, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("http://127.0.0.1:1 unreachable"));
  EXPECT_GE(took, absl::Milliseconds(600));
  EXPECT_LT(took, absl::Seconds(3));
}

TEST(EtcdClientTest, BadEndpointsAreRefused) {
  EXPECT_FALSE(EtcdClient::Create("localhost").ok());
  EXPECT_FALSE(EtcdClient::Create("https://h:1").ok());
  EXPECT_FALSE(EtcdClient::Create("http://h:1/path").ok());
  EXPECT_TRUE(EtcdClient::Create("http://h:1/").ok());
}

TEST(EtcdStoreTest, RacingEpochClaimsOfTwoNodesNeverDeclareOneEpochTwice) {
  const std::string job = JobId();
  const std::string dir0 = TempDir(), dir1 = TempDir();
  std::unique_ptr<EtcdClient> c0 = Client(), c1 = Client();
  ASSERT_NE(nullptr, c0);
  ASSERT_NE(nullptr, c1);
  EtcdStore s0(std::move(c0), {job, 0, 2, dir0});
  EtcdStore s1(std::move(c1), {job, 1, 2, dir1});
  constexpr int kEach = 25;
  std::vector<int> got0, got1;
  auto claim = [](EtcdStore* s, std::vector<int>* out) {
    for (int i = 0; i < kEach; ++i) {
      absl::StatusOr<int> e = s->ClaimNextEpoch();
      ASSERT_TRUE(e.ok()) << e.status();
      out->push_back(*e);
    }
  };
  std::thread t0(claim, &s0, &got0), t1(claim, &s1, &got1);
  t0.join();
  t1.join();
  std::set<int> all(got0.begin(), got0.end());
  all.insert(got1.begin(), got1.end());
  EXPECT_EQ(2u * kEach, all.size()) << "an epoch was claimed twice";
  EXPECT_EQ(1, *all.begin());
  EXPECT_EQ(2 * kEach, *all.rbegin());
  EXPECT_TRUE(std::is_sorted(got0.begin(), got0.end()));
  EXPECT_EQ(got0.back(), ReadRecoveryEpoch(dir0)) << "each claim is mirrored locally";
  EXPECT_EQ(got1.back(), ReadRecoveryEpoch(dir1));
  ASSERT_TRUE(s0.client()->DeletePrefix(s0.prefix()).ok());
}

TEST(EtcdStoreTest, TheWatcherMirrorsAnotherNodesEpochIntoTheLocalJobDirectory) {
  const std::string job = JobId();
  const std::string dir0 = TempDir(), dir1 = TempDir();
  EtcdStore s0(Client(), {job, 0, 2, dir0});
  EtcdStore s1(Client(), {job, 1, 2, dir1});
  ASSERT_TRUE(s0.Join(2, "127.0.0.1").ok());
  ASSERT_TRUE(s1.Join(2, "127.0.0.1").ok());
  ASSERT_TRUE(s0.WaitForNodes(2, absl::Seconds(5)).ok());
  s1.StartWatcher();
  // Node 0's coordinator replaces a killed agent: epoch 1, claimed in etcd.
  Coordinator coord({dir0, true, 8, absl::Milliseconds(0), 3, absl::Seconds(30), &s0});
  const absl::Time t = absl::Now();
  ASSERT_TRUE(coord.AgentDied(1, SIGKILL, t));
  ASSERT_EQ(1u, coord.DueReplacements(t).size());
  EXPECT_EQ(1, coord.epoch());
  EXPECT_EQ(1, ReadRecoveryEpoch(dir0));
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  while (ReadRecoveryEpoch(dir1) != 1 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ(1, ReadRecoveryEpoch(dir1)) << "node 1's agents see node 0's epoch";
  EXPECT_EQ(1, s1.LatestEpoch());
  absl::StatusOr<std::vector<EtcdKv>> events = s0.client()->GetPrefix(s0.prefix() + "events/");
  ASSERT_TRUE(events.ok());
  ASSERT_FALSE(events->empty());
  EXPECT_THAT(events->front().value, HasSubstr("\"event\":\"agent_died\""));
  EXPECT_TRUE(s0.Finish(true, "").ok());
  EXPECT_TRUE(s1.Finish(true, "").ok());
  absl::StatusOr<std::vector<EtcdKv>> left = s0.client()->GetPrefix(s0.prefix());
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty()) << "the last node done removes the job's keys";
}

TEST(EtcdStoreTest, ANodeRankIsTakenOnceAndMissingNodesAreNamed) {
  const std::string job = JobId();
  EtcdStore a(Client(), {job, 0, 3, TempDir()});
  EtcdStore b(Client(), {job, 0, 3, TempDir()});
  ASSERT_TRUE(a.Join(2, "127.0.0.1").ok());
  absl::Status s = b.Join(2, "127.0.0.1");
  EXPECT_EQ(absl::StatusCode::kAlreadyExists, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node rank 0"));
  const absl::Time t0 = absl::Now();
  s = a.WaitForNodes(2, absl::Milliseconds(500));
  EXPECT_EQ(absl::StatusCode::kDeadlineExceeded, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node(s) 1, 2 did not join"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EtcdStore c(Client(), {job, 1, 3, TempDir()});
  ASSERT_TRUE(c.Join(4, "127.0.0.1").ok());
  s = a.WaitForNodes(2, absl::Seconds(2));
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 1 runs 4 rank(s), this node 2"));
  EXPECT_TRUE(a.Finish(false, "test over").ok());
  EXPECT_TRUE(c.Finish(false, "test over").ok());
  // The failure markers stay: a new run under the same id is refused.
  EtcdStore again(Client(), {job, 0, 3, TempDir()});
  s = again.Join(2, "127.0.0.1");
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("earlier run"));
  ASSERT_TRUE(a.client()->DeletePrefix(a.prefix()).ok());
}

TEST(EtcdStoreTest, ALauncherThatStopsRenewingIsLostWhenItsLeaseExpires) {
  const std::string job = JobId();
  EtcdStore s0(Client(), {job, 0, 2, TempDir(), 2, absl::Milliseconds(100)});
  auto s1 = std::make_unique<EtcdStore>(Client(),
                                        EtcdStoreOptions{job, 1, 2, TempDir(), 2});
  ASSERT_TRUE(s0.Join(1, "127.0.0.1").ok());
  ASSERT_TRUE(s1->Join(1, "127.0.0.1").ok());
  ASSERT_TRUE(s0.WaitForNodes(1, absl::Seconds(5)).ok());
  s0.StartWatcher();
  absl::SleepFor(absl::Seconds(3));
  EXPECT_TRUE(s0.health().lost_nodes.empty()) << "renewed leases outlive their TTL";
  s1.reset();  // stops renewing without Finish: a launcher killed
  const absl::Time t0 = absl::Now();
  std::vector<int> lost;
  while (lost.empty() && absl::Now() - t0 < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(100));
    lost = s0.health().lost_nodes;
  }
  EXPECT_EQ(std::vector<int>{1}, lost);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5)) << "lost within TTL plus a watch round";
  EXPECT_TRUE(s0.health().status.ok()) << s0.health().status;
  EXPECT_TRUE(s0.Finish(false, "test over").ok());
  ASSERT_TRUE(s0.client()->DeletePrefix(s0.prefix()).ok());
}

TEST(EtcdStoreTest, ARestartedNodeClaimsTheNextRoundTheOthersSeeItAndRestartsAreBounded) {
  const std::string job = JobId();
  EtcdStoreOptions o0{job, 0, 2, TempDir(), 2, absl::Milliseconds(100)};
  o0.max_restarts = 1;
  EtcdStoreOptions o1 = o0;
  o1.node_rank = 1;
  o1.job_dir = TempDir();
  o1.holder_wait = absl::Seconds(5);
  auto s0 = std::make_unique<EtcdStore>(Client(), o0);
  auto s1 = std::make_unique<EtcdStore>(Client(), o1);
  ASSERT_TRUE(s0->Join(1, "127.0.0.1").ok());
  ASSERT_TRUE(s1->Join(1, "127.0.0.1").ok());
  ASSERT_TRUE(s0->WaitForNodes(1, absl::Seconds(5)).ok());
  ASSERT_TRUE(s1->WaitForNodes(1, absl::Seconds(5)).ok());
  EXPECT_EQ(0, s0->round());
  EXPECT_EQ("/revenant/" + job + "/round0/", s0->round_prefix());
  s0->StartWatcher();
  s1.reset();  // node 1's launcher killed: its lease runs 2 s more
  // Restarted at once: it waits for the dead launcher's lease, then finds
  // round 0 started without it and claims round 1.
  const absl::Time t0 = absl::Now();
  s1 = std::make_unique<EtcdStore>(Client(), o1);
  absl::Status s = s1->Join(1, "127.0.0.1");
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(1, s1->round());
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  int newer = -1;
  while (newer < 0 && absl::Now() - t0 < absl::Seconds(10)) {
    absl::SleepFor(absl::Milliseconds(100));
    newer = s0->health().newer_round;
  }
  EXPECT_EQ(1, newer) << "node 0 sees the job move to round 1";
  // Node 0 restarts: leaves and joins again, into round 1 (not a round 2).
  s0->Leave();
  EXPECT_TRUE(s0->Finish(false, "after Leave: nothing").ok());
  s0 = std::make_unique<EtcdStore>(Client(), o0);
  ASSERT_TRUE(s0->Join(1, "127.0.0.1").ok());
  EXPECT_EQ(1, s0->round());
  ASSERT_TRUE(s0->WaitForNodes(1, absl::Seconds(5)).ok());
  ASSERT_TRUE(s1->WaitForNodes(1, absl::Seconds(5)).ok());
  // Node 1 lost again: no restart is left.
  s1.reset();
  s1 = std::make_unique<EtcdStore>(Client(), o1);
  s = s1->Join(1, "127.0.0.1");
  EXPECT_EQ(absl::StatusCode::kFailedPrecondition, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("node 1 cannot rejoin job '" + job +
                                                  "': its round 1 started without this launcher"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("--max-restarts=1 allows no more"));
  EXPECT_TRUE(s1->Finish(false, "refused").ok());
  EXPECT_TRUE(s0->Finish(false, "test over").ok());
  ASSERT_TRUE(s0->client()->DeletePrefix(s0->prefix()).ok());
}

}  // namespace
}  // namespace recovery
}  // namespace revenant
