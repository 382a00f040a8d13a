// Which CPUs of this machine slow each other down: for every pair (a, b) of
// the CPUs given (default: all this process may use), a workload pinned to a
// runs alone and then beside a second one pinned to b; the slowdown of a is
// printed as a matrix. Two hardware threads of one core (SMT siblings, which
// a virtual machine may expose as separate "cores") show tens of percent;
// separate cores a few percent at most. The agent's threads (executor,
// journal thread) and the application's are busy at once: knowing which CPUs
// share a core tells where to place them (docs/performance.md).
//
//   cpu_pairs [--ms 40] [--cpus 0,1,2,...]
//
// Output: one row per CPU a, the percent slowdown beside each b, then
// "RESULT cpu_pairs_sibling a b <percent>" for every pair over 15 %.
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

bool Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Throughput-bound work on an L1-resident array: independent accumulators
// keep the core's load and integer units busy (what SMT siblings share).
uint64_t Work(const uint64_t* data, size_t n, int rounds) {
  uint64_t a = 0, b = 1, c = 2, d = 3;
  for (int r = 0; r < rounds; ++r) {
    for (size_t i = 0; i + 4 <= n; i += 4) {
      a += data[i] * 3 + (b >> 1);
      b ^= data[i + 1] + a;
      c += data[i + 2] ^ (d << 1);
      d -= data[i + 3] + c;
    }
  }
  return a + b + c + d;
}

// Rounds of Work per second on `cpu` for `ms`, while another thread may run
// the same work on `other` (-1: alone).
double Rate(int cpu, int other, int ms) {
  std::atomic<bool> stop{false};
  std::atomic<bool> ready{other < 0};
  std::thread aggressor;
  if (other >= 0) {
    aggressor = std::thread([&] {
      if (!Pin(other)) std::fprintf(stderr, "cpu_pairs: cannot pin to cpu %d\n", other);
      std::vector<uint64_t> mine(512, 7);
      volatile uint64_t sink = 0;
      ready.store(true);
      while (!stop.load(std::memory_order_relaxed)) sink = sink + Work(mine.data(), mine.size(), 8);
    });
  }
  double rate = 0;
  std::thread victim([&] {
    if (!Pin(cpu)) std::fprintf(stderr, "cpu_pairs: cannot pin to cpu %d\n", cpu);
    std::vector<uint64_t> data(512, 5);
    while (!ready.load()) std::this_thread::yield();
    volatile uint64_t sink = 0;
    sink = sink + Work(data.data(), data.size(), 200);  // warm up
    const auto t0 = std::chrono::steady_clock::now();
    const auto end = t0 + std::chrono::milliseconds(ms);
    uint64_t rounds = 0;
    auto now = t0;
    while (now < end) {
      sink = sink + Work(data.data(), data.size(), 50);
      rounds += 50;
      now = std::chrono::steady_clock::now();
    }
    rate = rounds / std::chrono::duration<double>(now - t0).count();
  });
  victim.join();
  stop.store(true);
  if (aggressor.joinable()) aggressor.join();
  return rate;
}

}  // namespace

int main(int argc, char** argv) {
  int ms = 40;
  std::vector<int> cpus;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--ms") == 0 && i + 1 < argc) {
      ms = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--cpus") == 0 && i + 1 < argc) {
      for (char* p = argv[++i]; *p != '\0';) {
        cpus.push_back(static_cast<int>(std::strtol(p, &p, 10)));
        if (*p == ',') ++p;
      }
    } else {
      std::fprintf(stderr, "usage: cpu_pairs [--ms 40] [--cpus 0,1,...]\n");
      return 2;
    }
  }
  if (ms <= 0 || ms > 10000) {
    std::fprintf(stderr, "cpu_pairs: --ms must be in 1..10000\n");
    return 2;
  }
  if (cpus.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
      std::perror("sched_getaffinity");
      return 1;
    }
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
    }
  }
  std::printf("cpu_pairs: %zu cpus, %d ms per measurement; slowdown of the row's cpu (%%) with "
              "the column's cpu busy too\n      ",
              cpus.size(), ms);
  for (int b : cpus) std::printf("%5d", b);
  std::printf("\n");
  std::vector<std::string> siblings;
  for (int a : cpus) {
    const double alone = Rate(a, -1, ms);
    std::printf("%5d:", a);
    for (int b : cpus) {
      if (b == a) {
        std::printf("    -");
        continue;
      }
      const double busy = Rate(a, b, ms);
      const double slowdown = 100.0 * (alone / busy - 1.0);
      std::printf("%5.0f", slowdown);
      if (slowdown > 15.0 && a < b) {
        char line[96];
        std::snprintf(line, sizeof(line), "RESULT cpu_pairs_sibling %d %d %.1f", a, b, slowdown);
        siblings.emplace_back(line);
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  for (const std::string& s : siblings) std::printf("%s\n", s.c_str());
  std::printf("RESULT cpu_pairs_pairs_over_15pct %zu\n", siblings.size());
  return 0;
}
