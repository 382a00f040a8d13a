#include "agent/profiler.h"

#include <chrono>
#include <string>

#include "gtest/gtest.h"

namespace revenant::agent::profiler {
namespace {

// A function the samples land in: spins on the wall clock.
__attribute__((noinline)) double SpinFor(std::chrono::milliseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  volatile double x = 1;
  while (std::chrono::steady_clock::now() < end) {
    for (int i = 0; i < 100000; ++i) x = x * 1.0000001 + 1e-9;
  }
  return x;
}

TEST(ProfilerTest, AttributesSamplesToTheRequestAndItsFunction) {
  ASSERT_TRUE(StartOnThisThread(2000));
  EXPECT_TRUE(Running());
  Enter(7);
  SpinFor(std::chrono::milliseconds(200));
  Leave();
  SpinFor(std::chrono::milliseconds(50));
  const std::string report = Report([](uint32_t id) { return "api" + std::to_string(id); });
  // Most samples are in request 7, and the executable's own symbol table
  // names the function they were taken in.
  EXPECT_NE(report.find("executor profile: "), std::string::npos) << report;
  EXPECT_NE(report.find("api7"), std::string::npos) << report;
  EXPECT_NE(report.find("SpinFor"), std::string::npos) << report;
  EXPECT_NE(report.find("between requests"), std::string::npos) << report;
  // At 2 kHz, 250 ms of wall clock: ~500 samples (timer overruns while the
  // thread was not running count as samples where it stopped).
  EXPECT_GT(std::stoul(report.substr(std::string("executor profile: ").size())), 250u) << report;
}

}  // namespace
}  // namespace revenant::agent::profiler
