#include "agent/profiler.h"

#include <pthread.h>
#include <signal.h>

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
  // A paused stretch takes no signal (its periods arrive as one signal's
  // overruns when it ends, counted toward the request), and the thread's
  // signal mask is as before afterwards.
  auto blocked = [] {
    sigset_t now;
    pthread_sigmask(SIG_BLOCK, nullptr, &now);
    return sigismember(&now, SIGPROF) == 1;
  };
  EXPECT_FALSE(blocked());
  Enter(9);
  {
    ScopedPause pause(true);
    EXPECT_TRUE(blocked());
    SpinFor(std::chrono::milliseconds(100));
  }
  EXPECT_FALSE(blocked());
  Leave();
  {
    ScopedPause off(false);
    EXPECT_FALSE(blocked());
  }
  SpinFor(std::chrono::milliseconds(50));
  const std::string report = Report([](uint32_t id) { return "api" + std::to_string(id); });
  EXPECT_NE(report.find("api9"), std::string::npos) << report;
  // Most samples are in request 7, and the executable's own symbol table
  // names the function they were taken in.
  EXPECT_NE(report.find("executor profile: "), std::string::npos) << report;
  EXPECT_NE(report.find("api7"), std::string::npos) << report;
  EXPECT_NE(report.find("SpinFor"), std::string::npos) << report;
  EXPECT_NE(report.find("between requests"), std::string::npos) << report;
  // At 2 kHz, 350 ms of wall clock: ~700 samples (timer overruns while the
  // thread was not running count as samples where it stopped).
  EXPECT_GT(std::stoul(report.substr(std::string("executor profile: ").size())), 250u) << report;
}

}  // namespace
}  // namespace revenant::agent::profiler
