// GlooEngine's rendezvous through etcd (members on several nodes): engines
// connect through keys under a prefix, compute, and leave no keys behind; a
// member that never joins fails the others within the timeout, naming etcd.
// Needs etcd (recovery/etcd_test_env.h; tagged "etcd").
#include <signal.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "collective/gloo_engine.h"
#include "common/random.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "recovery/etcd_client.h"
#include "recovery/etcd_test_env.h"

namespace revenant {
namespace collective {
namespace {

using ::testing::HasSubstr;

GlooEngineOptions Options(const std::string& endpoint, const std::string& prefix, int rank,
                          int size, absl::Duration timeout) {
  GlooEngineOptions o;
  o.rendezvous_dir = "/nonexistent/dir/collectives-test";  // only its last component is used
  o.prefix = "comm";
  o.rank = rank;
  o.size = size;
  o.timeout = timeout;
  o.store_endpoint = endpoint;
  o.store_prefix = prefix;
  return o;
}

TEST(EtcdRendezvous, FourMembersConnectThroughEtcdAndLeaveNoKeys) {
  const std::string endpoint = recovery::TestEtcdEndpoint();
  ASSERT_FALSE(endpoint.empty());
  const std::string prefix = absl::StrCat("/revenant/test-", RandomHex(6).value_or("x"), "/gloo/");
  constexpr int kN = 4;
  std::vector<std::thread> threads;
  std::vector<std::vector<float>> out(kN, std::vector<float>(5, -1));
  for (int r = 0; r < kN; ++r) {
    threads.emplace_back([&, r] {
      absl::StatusOr<std::unique_ptr<GlooEngine>> e =
          GlooEngine::Create(Options(endpoint, prefix, r, kN, absl::Seconds(30)));
      ASSERT_TRUE(e.ok()) << e.status();
      std::vector<float> in(5, 0.25f * (r + 1));
      ASSERT_TRUE((*e)->AllReduce(in.data(), out[r].data(), 5, DataType::kFloat32, RedOp::kSum).ok());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < kN; ++r) EXPECT_EQ(0.25f * (1 + 2 + 3 + 4), out[r][4]) << "rank " << r;
  auto client = recovery::EtcdClient::Create(endpoint);
  ASSERT_TRUE(client.ok());
  absl::StatusOr<std::vector<recovery::EtcdKv>> left = (*client)->GetPrefix(prefix);
  ASSERT_TRUE(left.ok()) << left.status();
  EXPECT_TRUE(left->empty()) << "rank 0 removes the rendezvous keys: " << left->size() << " left";
}

TEST(EtcdRendezvous, AMemberThatNeverJoinsTimesOutNamingEtcd) {
  const std::string endpoint = recovery::TestEtcdEndpoint();
  ASSERT_FALSE(endpoint.empty());
  const std::string prefix = absl::StrCat("/revenant/test-", RandomHex(6).value_or("x"), "/gloo/");
  const absl::Time t0 = absl::Now();
  absl::StatusOr<std::unique_ptr<GlooEngine>> e =
      GlooEngine::Create(Options(endpoint, prefix, 0, 2, absl::Seconds(2)));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(6));
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(absl::StatusCode::kDeadlineExceeded, e.status().code()) << e.status();
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("in etcd at"));
  auto client = recovery::EtcdClient::Create(endpoint);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->DeletePrefix(prefix).ok());
}

}  // namespace
}  // namespace collective
}  // namespace revenant
