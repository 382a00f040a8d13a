// revenant-chaos: kills agents of a running job on purpose.
//
//   revenant-chaos --job=3f9c2e71a04b8d15 --rank=1                 # now
//   revenant-chaos --job=3f9c2e71a04b8d15 --rank=1 --delay_ms=500  # in 0.5 s
//   revenant-chaos --job=3f9c2e71a04b8d15 --random --seed=7 --count=3 --interval_ms=2000
//
// The job id is the one revenant-run prints ("job <id>: ..."); --job also
// takes the job directory itself. Each agent writes its pid to
// <job>/rank<r>/agent.pid (a replacement overwrites it), so a later kill hits
// the current agent of that rank. For kills at exact points inside an agent
// (a request number, a crash point, during recovery) use revenant-run
// --chaos, which the agent carries out itself.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"

ABSL_FLAG(std::string, job, "", "job id (as revenant-run prints it) or job directory");
ABSL_FLAG(std::string, job_root, "/dev/shm", "where revenant-run makes job directories");
ABSL_FLAG(int, rank, -1, "the rank whose agent to kill");
ABSL_FLAG(int, delay_ms, 0, "wait this long before the (first) kill");
ABSL_FLAG(bool, random, false, "kill random ranks (seeded)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the random mode (printed)");
ABSL_FLAG(int, count, 1, "kills in random mode");
ABSL_FLAG(int, interval_ms, 1000, "time between kills in random mode");
ABSL_FLAG(int, signal, SIGKILL, "the signal to send");

namespace fs = std::filesystem;

namespace {

int ReadPid(const std::string& path) {
  std::ifstream f(path);
  int pid = 0;
  return (f >> pid) ? pid : 0;
}

std::vector<int> Ranks(const std::string& dir) {
  std::vector<int> ranks;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("rank", 0) == 0) ranks.push_back(std::atoi(name.c_str() + 4));
  }
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

bool Kill(const std::string& dir, int rank, int sig) {
  const std::string pidfile = dir + "/rank" + std::to_string(rank) + "/agent.pid";
  const int pid = ReadPid(pidfile);
  if (pid <= 0) {
    std::fprintf(stderr, "revenant-chaos: no agent pid in %s\n", pidfile.c_str());
    return false;
  }
  if (kill(pid, sig) != 0) {
    std::fprintf(stderr, "revenant-chaos: cannot signal the agent of rank %d (pid %d): %s\n",
                 rank, pid, strerror(errno));
    return false;
  }
  std::printf("revenant-chaos: sent signal %d to the agent of rank %d (pid %d)\n", sig, rank,
              pid);
  std::fflush(stdout);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "revenant-chaos --job=ID (--rank=R [--delay_ms=D] | --random --seed=S --count=K)");
  absl::ParseCommandLine(argc, argv);
  std::string dir = absl::GetFlag(FLAGS_job);
  if (dir.empty()) {
    std::fprintf(stderr, "revenant-chaos: --job is required\n");
    return 2;
  }
  if (dir.find('/') == std::string::npos) dir = absl::GetFlag(FLAGS_job_root) + "/revenant-" + dir;
  if (!fs::is_directory(dir)) {
    std::fprintf(stderr, "revenant-chaos: no running job at %s\n", dir.c_str());
    return 2;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_delay_ms)));
  const int sig = absl::GetFlag(FLAGS_signal);
  if (!absl::GetFlag(FLAGS_random)) {
    if (absl::GetFlag(FLAGS_rank) < 0) {
      std::fprintf(stderr, "revenant-chaos: --rank or --random is required\n");
      return 2;
    }
    return Kill(dir, absl::GetFlag(FLAGS_rank), sig) ? 0 : 1;
  }
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  std::printf("revenant-chaos: random mode, seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  int failures = 0;
  for (int k = 0; k < absl::GetFlag(FLAGS_count); ++k) {
    if (k > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_interval_ms)));
    }
    const std::vector<int> ranks = Ranks(dir);
    if (ranks.empty()) {
      std::fprintf(stderr, "revenant-chaos: the job at %s has ended\n", dir.c_str());
      return failures == 0 && k > 0 ? 0 : 1;
    }
    if (!Kill(dir, ranks[rng() % ranks.size()], sig)) ++failures;
  }
  return failures == 0 ? 0 : 1;
}
