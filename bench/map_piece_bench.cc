// What dropping a large file mapping costs the other threads of the
// process: one thread unmaps a resident tmpfs file of --mib MiB whole (one
// munmap) and then in pieces (common/populate.h: UnmapInPieces), while a
// second thread maps and unmaps 64 KiB every 0.1 ms (the memory map taken
// for writing, as the agent's executor does when its journal window grows
// or a large malloc is freed) and records how long each took. A whole
// unmapping holds the memory map while it drops every page-table entry: the
// second thread waits for all of it (docs/performance.md, "The copy kernel
// by default").
//
//   map_piece_bench [--mib 684] [--rounds 3]
//
// Output per round and way: the unmapping's own time and the second
// thread's median and worst wait; then "RESULT map_piece_unmap_worst_ms_<whole|pieces> <ms>"
// (the median of the rounds) and "RESULT map_piece_unmap_worst_ratio <pieces / whole>".
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/populate.h"

namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

struct Waits {
  double own_ms = 0, median_ms = 0, worst_ms = 0;
  size_t count = 0;
};

// A fresh, unlinked tmpfs file of `bytes` mapped shared, its pages
// resident, or nullptr.
char* MapResidentFile(size_t bytes) {
  char path[] = "/dev/shm/revenant-map-piece-bench-XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return nullptr;
  unlink(path);
  void* m = ftruncate(fd, static_cast<off_t>(bytes)) == 0
                ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                : MAP_FAILED;
  close(fd);
  if (m == MAP_FAILED) return nullptr;
  if (!revenant::PopulateWritable(m, bytes).ok()) {
    munmap(m, bytes);
    return nullptr;
  }
  return static_cast<char*>(m);
}

// Runs `work` on this thread while a second one maps and unmaps 64 KiB
// every 0.1 ms; what the second thread waited.
template <typename Work>
Waits Measure(Work work) {
  std::atomic<bool> stop{false};
  std::atomic<bool> started{false};
  std::vector<double> waits;
  waits.reserve(1 << 16);
  std::thread other([&] {
    while (!stop.load()) {
      const Clock::time_point t0 = Clock::now();
      void* p = mmap(nullptr, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p != MAP_FAILED) munmap(p, 1 << 16);
      if (started.load()) waits.push_back(Ms(t0, Clock::now()));
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  started.store(true);
  const Clock::time_point t0 = Clock::now();
  work();
  Waits w;
  w.own_ms = Ms(t0, Clock::now());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  stop.store(true);
  other.join();
  std::sort(waits.begin(), waits.end());
  w.count = waits.size();
  if (!waits.empty()) {
    w.median_ms = waits[waits.size() / 2];
    w.worst_ms = waits.back();
  }
  return w;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 684;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--mib") == 0) mib = std::strtoull(argv[++i], nullptr, 10);
    else if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[++i]);
  }
  const size_t bytes = mib << 20;
  std::printf("map_piece_bench: a %zu MiB tmpfs file, %d round(s), pieces of %zu MiB\n", mib,
              rounds, revenant::kUnmapPieceBytes >> 20);
  std::vector<double> worst[2];
  for (int r = 0; r < rounds; ++r) {
    for (int pieces = 0; pieces < 2; ++pieces) {
      char* m = MapResidentFile(bytes);
      if (m == nullptr) {
        std::fprintf(stderr, "map_piece_bench: cannot make a %zu MiB file in /dev/shm\n", mib);
        return 1;
      }
      const Waits w = Measure([&] {
        if (pieces) {
          revenant::UnmapInPieces(m, bytes);
        } else {
          munmap(m, bytes);
        }
      });
      std::printf("  round %d, unmap %-6s: %8.1f ms; the other thread's map+unmap: %zu, median "
                  "%.3f ms, worst %.2f ms\n",
                  r + 1, pieces ? "pieces" : "whole", w.own_ms, w.count, w.median_ms, w.worst_ms);
      worst[pieces].push_back(w.worst_ms);
    }
  }
  const double whole = Median(worst[0]), pieces = Median(worst[1]);
  std::printf("RESULT map_piece_unmap_worst_ms_whole %.3f ms\n", whole);
  std::printf("RESULT map_piece_unmap_worst_ms_pieces %.3f ms\n", pieces);
  std::printf("RESULT map_piece_unmap_worst_ratio %.4f\n", whole > 0 ? pieces / whole : 0.0);
  return 0;
}
