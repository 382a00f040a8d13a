// Native facts about pinned host memory on the GPU machine, which the agent's
// capture files, snapshot files and shared host memory depend on
// (docs/performance.md, "Capture and snapshot files"). Runs natively only.
//
//   ./host_memory_bench.bin [--mib N] [--dir /dev/shm] [--snap_mib N] [--only_snapshot] [--only_split]
//
// 1. Making a registered tmpfs file of N MiB (default 256): sized and
//    faulted in by cudaHostRegister, posix_fallocate, MAP_POPULATE, pages
//    faulted by 1 or 8 threads (MADV_POPULATE_WRITE), then cudaHostRegister.
// 2. Whether that stalls another thread's CUDA calls: a thread launches an
//    empty kernel and synchronizes in a loop while this one faults pages in
//    or registers them; the share of the loop's time lost per phase.
// 3. What the link allows an upload next to a copy back: a 256 MiB pinned
//    host-to-device copy alone, beside an unrelated device-to-host copy, in
//    the capture's pattern (chunks copied back behind the upload on a
//    second stream), and with a device-to-device copy behind it instead.
// 4. The CPU copying the pinned source into a registered file: 1-16
//    threads, alone and while the upload runs.
// 5. Write-protecting an upload's source (a registered shared tmpfs mapping,
//    pages resident): mprotect to read-only and back, alone and issued right
//    after the upload from it, whose bandwidth is printed against the upload
//    alone; the first write after the protection was lifted (the pages'
//    write faults); and what the kernel offers instead (its version, whether
//    userfaultfd is open to unprivileged processes).
// 6. A synchronous snapshot's copies of --snap_mib MiB (default 554, the
//    first PyTorch snapshot's size) from device memory into a fresh tmpfs
//    file whose pages are resident (as the file made ahead is), checksummed
//    (ISA-L's CRC32C, the agent's), three ways: the file registered, the
//    device copying straight into it, then the checksums on 8 threads (the
//    agent without --snapshot_staged); through two registered 32 MiB
//    staging buffers taking turns, 8 threads (and every CPU) copying 1 MiB chunks into the
//    file and checksumming them as they go (the agent's staged copies); and
//    cudaMemcpy straight into the unregistered file (the driver's own
//    staging), then the checksums. Each way's total and parts, the staged
//    and pageable totals against the registered one; and the registered
//    file's copies and checksums in 32 MiB turns, overlapped (the agent's
//    synchronous snapshot into its registered spare).
// 7. A captured upload whose capture is split between the link and the CPU
//    (docs/performance.md, "A capture split between the link and the CPU"):
//    a 256 MiB pinned upload in
//    8 MiB chunks, the first part of each chunk run copied back to a
//    registered capture file behind it on a second stream, the rest copied
//    from the source into the file by 8 or 16 CPU threads meanwhile (4 MiB
//    pieces taken in turn); the
//    time until all three are done, against the upload alone, for CPU
//    shares of 0-75 %. --only_split runs only this section.
// 8. Holding an upload's source with userfaultfd write-protection (what an
//    agent could do instead of capturing the bytes while the upload runs):
//    whether a userfaultfd that also takes the kernel's own faults can be
//    opened (the system call, else /dev/userfaultfd); the time to
//    write-protect and unprotect N MiB of a shared tmpfs mapping (the
//    application's view) while a second mapping of the same file is
//    registered (the agent's); an upload from the registered view alone and
//    with the protection issued right after it; a write into the protected
//    view, a handler thread copying the held bytes out (8 threads) before
//    it lifts the protection: the writer's wait, and whether the copy holds
//    the old bytes; read(2) into the protected view (a kernel-mode write,
//    which must wait for the handler, not fail with EFAULT). --only_uffd
//    runs only this section; --no_gpu skips its CUDA parts.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "bench/cuda_check.h"

// ISA-L's SSE4.2 CRC32C, as common/crc32c.cc calls it.
extern "C" unsigned int crc32_iscsi_01(unsigned char* buffer, int len, unsigned int init_crc);

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
double Us(Clock::time_point a, Clock::time_point b) { return Ms(a, b) * 1000; }


__global__ void Empty() {}

std::string g_dir = "/dev/shm";

// A fresh tmpfs file of n bytes, mapped shared (unlinked at once: the
// mapping keeps it).
char* MapFresh(const std::string& tag, size_t n, bool fallocate_it) {
  const std::string path = g_dir + "/host_memory_bench." + tag + "." + std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) {
    std::printf("FAIL cannot create %s\n", path.c_str());
    std::exit(1);
  }
  if (fallocate_it ? posix_fallocate(fd, 0, n) != 0 : ftruncate(fd, n) != 0) {
    std::printf("FAIL cannot size %s\n", path.c_str());
    std::exit(1);
  }
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(path.c_str());
  if (p == MAP_FAILED) {
    std::printf("FAIL mmap\n");
    std::exit(1);
  }
  return static_cast<char*>(p);
}

void Populate(char* p, size_t n, int threads) {
  std::vector<std::thread> ts;
  const size_t per = (n / threads + 4095) & ~size_t{4095};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      const size_t b = t * per, e = std::min(n, b + per);
      if (b < e) madvise(p + b, e - b, MADV_POPULATE_WRITE);
    });
  }
  for (auto& t : ts) t.join();
}

void Register(char* p, size_t n) {
  CHECK(cudaHostRegister(p, n, cudaHostRegisterMapped | cudaHostRegisterPortable));
}

void Release(char* p, size_t n) {
  (void)cudaHostUnregister(p);
  munmap(p, n);
}

void MakingFiles(size_t n) {
  std::printf("== making a registered tmpfs file of %zu MiB (ms)\n", n >> 20);
  struct Way {
    const char* name;
    int threads;  // 0: no faulting before registering
    bool fallocate_it, populate_flag;
  };
  const Way ways[] = {{"ftruncate, faulted by the registration", 0, false, false},
                      {"posix_fallocate, then register", 0, true, false},
                      {"MAP_POPULATE-like (1 thread), then register", 1, false, true},
                      {"8 threads MADV_POPULATE_WRITE, then register", 8, false, true}};
  for (const Way& w : ways) {
    for (int round = 0; round < 2; ++round) {
      const auto t0 = Clock::now();
      char* p = MapFresh("make", n, w.fallocate_it);
      if (w.populate_flag) Populate(p, n, w.threads);
      const auto t1 = Clock::now();
      Register(p, n);
      const auto t2 = Clock::now();
      std::printf("   %-48s allocating %7.1f  registering %7.1f  total %7.1f\n", w.name,
                  Ms(t0, t1), Ms(t1, t2), Ms(t0, t2));
      Release(p, n);
    }
  }
}

void Stalls(size_t n) {
  std::printf("== another thread's launch + synchronize loop while this one works on %zu MiB\n",
              n >> 20);
  std::atomic<int> phase{-1};
  std::atomic<bool> stop{false};
  std::vector<std::pair<int, double>> samples;
  std::mutex mu;
  std::thread loop([&] {
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    std::vector<std::pair<int, double>> local;
    while (!stop.load()) {
      const int ph = phase.load();
      const auto t0 = Clock::now();
      Empty<<<1, 1, 0, s>>>();
      CHECK(cudaStreamSynchronize(s));
      local.push_back({ph, Us(t0, Clock::now())});
    }
    std::lock_guard<std::mutex> lock(mu);
    samples = std::move(local);
  });
  const char* names[] = {"idle", "8 threads fault the pages in", "2 threads fault the pages in",
                         "cudaHostRegister, pages resident",
                         "cudaHostRegister, pages not resident", "idle"};
  double ms[6] = {0};
  std::vector<char*> maps;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (int ph = 0; ph < 6; ++ph) {
    phase = ph;
    const auto t0 = Clock::now();
    switch (ph) {
      case 0:
      case 5:
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        break;
      case 1:
      case 2: {
        char* p = MapFresh("stall", n, false);
        Populate(p, n, ph == 1 ? 8 : 2);
        maps.push_back(p);
        break;
      }
      case 3:
        Register(maps[0], n);
        break;
      case 4: {
        char* p = MapFresh("stall", n, false);
        Register(p, n);
        maps.push_back(p);
        break;
      }
    }
    ms[ph] = Ms(t0, Clock::now());
  }
  stop = true;
  loop.join();
  for (int ph = 0; ph < 6; ++ph) {
    std::vector<double> v;
    for (const auto& [p, u] : samples) {
      if (p == ph) v.push_back(u);
    }
    std::sort(v.begin(), v.end());
    double busy = 0;
    for (double u : v) busy += u;
    const double typical = v.empty() ? 0 : v[v.size() / 2];
    // The loop's time lost: the phase's time not spent on iterations of the
    // typical length.
    const double lost = ms[ph] > 0 ? 1.0 - std::min(1.0, v.size() * typical / (ms[ph] * 1000)) : 0;
    std::printf("   %-40s %7.1f ms: %6zu iterations, median %6.1f us, max %9.1f us, time lost %.2f\n",
                names[ph], ms[ph], v.size(), typical, v.empty() ? 0.0 : v.back(), lost);
  }
  for (char* p : maps) Release(p, n);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void CopyOut(char* dst, const char* src, size_t n, int threads) {
  std::vector<std::thread> ts;
  const size_t per = (n / threads + 4095) & ~size_t{4095};
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([=] {
      const size_t o = t * per;
      if (o < n) std::memcpy(dst + o, src + o, std::min(per, n - o));
    });
  }
  for (auto& t : ts) t.join();
}

void Link() {
  const size_t n = 256ull << 20;
  std::printf("== a 256 MiB pinned upload next to a copy back (GB/s, median of 8; ratio to alone)\n");
  char* src = nullptr;
  CHECK(cudaMallocHost(&src, n));
  std::memset(src, 1, n);
  char* cap = MapFresh("cap", n, false);
  Populate(cap, n, 8);
  Register(cap, n);
  char* plain = MapFresh("plain", n, false);
  Populate(plain, n, 8);
  char *d = nullptr, *d2 = nullptr;
  CHECK(cudaMalloc(&d, n));
  CHECK(cudaMalloc(&d2, n));
  cudaStream_t s, c;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  cudaEvent_t ev, end;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&end, cudaEventDisableTiming));
  auto gb = [&](double ms) { return n / (ms * 1e-3) / 1e9; };
  CHECK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
  for (int round = 0; round < 2; ++round) {
    std::vector<double> alone, beside, chunk8, chunk32, d2d;
    for (int i = 0; i < 8; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
      alone.push_back(gb(Ms(t0, Clock::now())));
      t0 = Clock::now();
      CHECK(cudaMemcpyAsync(cap, d2, n, cudaMemcpyDeviceToHost, c));
      CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      beside.push_back(gb(Ms(t0, Clock::now())));
      CHECK(cudaStreamSynchronize(c));
      for (size_t chunk : {size_t{8} << 20, size_t{32} << 20}) {
        t0 = Clock::now();
        for (size_t off = 0; off < n; off += chunk) {
          CHECK(cudaMemcpyAsync(d + off, src + off, chunk, cudaMemcpyHostToDevice, s));
          CHECK(cudaEventRecord(ev, s));
          CHECK(cudaStreamWaitEvent(c, ev, 0));
          CHECK(cudaMemcpyAsync(cap + off, d + off, chunk, cudaMemcpyDeviceToHost, c));
        }
        CHECK(cudaEventRecord(end, c));
        CHECK(cudaStreamWaitEvent(s, end, 0));
        CHECK(cudaStreamSynchronize(s));
        (chunk == (size_t{8} << 20) ? chunk8 : chunk32).push_back(gb(Ms(t0, Clock::now())));
      }
      t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
      CHECK(cudaMemcpyAsync(d2, d, n, cudaMemcpyDeviceToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      d2d.push_back(gb(Ms(t0, Clock::now())));
    }
    const double a = Median(alone);
    std::printf("   round %d: alone %.1f; beside a D2H %.1f (%.3f); capture pattern, 8 MiB chunks %.1f "
                "(%.3f), 32 MiB %.1f (%.3f); a D2D copy behind it %.1f (%.3f)\n",
                round, a, Median(beside), Median(beside) / a, Median(chunk8), Median(chunk8) / a,
                Median(chunk32), Median(chunk32) / a, Median(d2d), Median(d2d) / a);
    std::printf("   round %d, the CPU copying the source into a file (GB/s; with the upload: both done, ratio to the upload alone):\n", round);
    for (int threads : {1, 4, 8, 16}) {
      for (char* dst : {cap, plain}) {
        std::vector<double> cpu, both;
        for (int i = 0; i < 4; ++i) {
          auto t0 = Clock::now();
          CopyOut(dst, src, n, threads);
          cpu.push_back(gb(Ms(t0, Clock::now())));
          t0 = Clock::now();
          CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
          CopyOut(dst, src, n, threads);
          CHECK(cudaStreamSynchronize(s));
          both.push_back(gb(Ms(t0, Clock::now())));
        }
        std::printf("     %2d threads into a %s file: alone %.1f, with the upload %.1f (%.3f)\n",
                    threads, dst == cap ? "registered" : "plain     ", Median(cpu), Median(both),
                    Median(both) / a);
      }
    }
  }
  Release(cap, n);
  munmap(plain, n);
  CHECK(cudaFree(d));
  CHECK(cudaFree(d2));
  CHECK(cudaFreeHost(src));
}

void WriteProtect(size_t n) {
  std::printf("== write-protecting a %zu MiB registered shared mapping (ms; GB/s)\n", n >> 20);
  struct utsname u;
  if (uname(&u) == 0) std::printf("   kernel %s\n", u.release);
  if (FILE* f = std::fopen("/proc/sys/vm/unprivileged_userfaultfd", "r")) {
    int v = -1;
    if (std::fscanf(f, "%d", &v) == 1) std::printf("   vm.unprivileged_userfaultfd %d\n", v);
    std::fclose(f);
  }
  char* src = MapFresh("wp", n, false);
  Populate(src, n, 8);
  std::memset(src, 3, n);
  Register(src, n);
  char* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  auto gb = [n](double ms) { return n / (ms * 1e-3) / 1e9; };
  auto protect = [&](int prot) {
    if (mprotect(src, n, prot) != 0) {
      std::printf("FAIL mprotect: %s\n", std::strerror(errno));
      std::exit(1);
    }
  };
  CHECK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));  // warm-up
  for (int round = 0; round < 2; ++round) {
    std::vector<double> ro, rw, touch, alone, with, with_ro_ms, lifted;
    for (int i = 0; i < 6; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      alone.push_back(gb(Ms(t0, Clock::now())));
      t0 = Clock::now();
      protect(PROT_READ);
      const auto t1 = Clock::now();
      protect(PROT_READ | PROT_WRITE);
      const auto t2 = Clock::now();
      for (size_t o = 0; o < n; o += 4096) src[o] = static_cast<char>(i);
      const auto t3 = Clock::now();
      ro.push_back(Ms(t0, t1));
      rw.push_back(Ms(t1, t2));
      touch.push_back(Ms(t2, t3));
      // The upload from the source, protected right after it was issued.
      t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
      protect(PROT_READ);
      const auto tp = Clock::now();
      CHECK(cudaStreamSynchronize(s));
      with.push_back(gb(Ms(t0, Clock::now())));
      with_ro_ms.push_back(Ms(t0, tp));
      // Lifting it while the next upload runs (the journal done with the
      // previous one).
      t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, src, n, cudaMemcpyHostToDevice, s));
      protect(PROT_READ | PROT_WRITE);
      CHECK(cudaStreamSynchronize(s));
      lifted.push_back(gb(Ms(t0, Clock::now())));
    }
    const double a = Median(alone);
    std::printf("   round %d: read-only %.2f, writable again %.2f, then a write to every page %.2f; "
                "upload alone %.1f, protected right after it was issued %.1f (%.3f; issue + "
                "protect %.2f ms), the protection lifted during it %.1f (%.3f)\n",
                round, Median(ro), Median(rw), Median(touch), a, Median(with), Median(with) / a,
                Median(with_ro_ms), Median(lifted), Median(lifted) / a);
  }
  CHECK(cudaStreamDestroy(s));
  CHECK(cudaFree(d));
  Release(src, n);
}

uint32_t Crc(const char* p, size_t n) {
  uint32_t crc = 0xffffffffu;
  for (size_t done = 0; done < n;) {
    const int k = static_cast<int>(std::min<size_t>(n - done, size_t{1} << 30));
    crc = crc32_iscsi_01(reinterpret_cast<unsigned char*>(const_cast<char*>(p + done)), k, crc);
    done += k;
  }
  return crc;
}

// The checksums of n bytes in 4 MiB pieces on `threads` threads.
void CrcThreads(const char* p, size_t n, int threads, std::vector<uint32_t>* crcs) {
  const size_t piece = size_t{4} << 20;
  crcs->assign((n + piece - 1) / piece, 0);
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < crcs->size(); i = next.fetch_add(1)) {
      (*crcs)[i] = Crc(p + i * piece, std::min(piece, n - i * piece));
    }
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
}

// Staged: turns of `half` bytes into two registered buffers; per turn the
// caller and threads-1 helpers copy 1 MiB chunks into `dst` and checksum
// them. Returns the chunks' checksums (unused but computed).
void StagedCopy(char* dst, const char* dev, size_t n, char* staging, size_t half, int threads,
                cudaStream_t s, std::vector<uint32_t>* crcs) {
  const size_t chunk = size_t{1} << 20;
  const size_t turns = (n + half - 1) / half;
  crcs->assign((n + chunk - 1) / chunk, 0);
  std::mutex mu;
  std::condition_variable cv;
  size_t turn_seq = 0;
  int finished = 0;
  bool stop = false;
  size_t first = 0, end = 0;
  const char* buf = nullptr;
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t c = next.fetch_add(1); c < end; c = next.fetch_add(1)) {
      const size_t off = c * chunk, len = std::min(chunk, n - off);
      std::memcpy(dst + off, buf + (off - first * chunk), len);
      (*crcs)[c] = Crc(dst + off, len);
    }
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) {
    ts.emplace_back([&] {
      size_t seen = 0;
      while (true) {
        {
          std::unique_lock<std::mutex> l(mu);
          cv.wait(l, [&] { return stop || turn_seq != seen; });
          if (stop) return;
          seen = turn_seq;
        }
        work();
        std::lock_guard<std::mutex> l(mu);
        ++finished;
        cv.notify_all();
      }
    });
  }
  auto fetch = [&](size_t t) {
    const size_t off = t * half, len = std::min(half, n - off);
    CHECK(cudaMemcpyAsync(staging + (t % 2) * half, dev + off, len, cudaMemcpyDeviceToHost, s));
  };
  fetch(0);
  CHECK(cudaStreamSynchronize(s));
  for (size_t t = 0; t < turns; ++t) {
    if (t + 1 < turns) fetch(t + 1);
    {
      std::lock_guard<std::mutex> l(mu);
      buf = staging + (t % 2) * half;
      first = t * half / chunk;
      end = std::min((t + 1) * half, n);
      end = (end + chunk - 1) / chunk;
      next.store(first);
      finished = 0;
      ++turn_seq;
      cv.notify_all();
    }
    work();
    {
      std::unique_lock<std::mutex> l(mu);
      cv.wait(l, [&] { return finished == threads - 1; });
    }
    if (t + 1 < turns) CHECK(cudaStreamSynchronize(s));
  }
  {
    std::lock_guard<std::mutex> l(mu);
    stop = true;
    cv.notify_all();
  }
  for (auto& t : ts) t.join();
}

// Straight into a registered file in turns of `half` bytes: the device
// copies turn t+1 while `threads` threads checksum turn t (the agent's
// synchronous snapshot into its registered spare).
void TurnsCopy(char* f, const char* dev, size_t n, size_t half, int threads, cudaStream_t s,
               std::vector<uint32_t>* crcs) {
  const size_t turns = (n + half - 1) / half;
  auto fetch = [&](size_t t) {
    const size_t off = t * half, len = std::min(half, n - off);
    CHECK(cudaMemcpyAsync(f + off, dev + off, len, cudaMemcpyDeviceToHost, s));
  };
  fetch(0);
  CHECK(cudaStreamSynchronize(s));
  std::vector<uint32_t> part;
  for (size_t t = 0; t < turns; ++t) {
    if (t + 1 < turns) fetch(t + 1);
    const size_t off = t * half, len = std::min(half, n - off);
    CrcThreads(f + off, len, threads, &part);
    crcs->insert(crcs->end(), part.begin(), part.end());
    if (t + 1 < turns) CHECK(cudaStreamSynchronize(s));
  }
}

// A fresh tmpfs file of n bytes, its pages resident (as the file made
// ahead of the first snapshot).
char* ResidentFile(size_t n) {
  char* f = MapFresh("snap", n, false);
  Populate(f, n, 8);
  return f;
}

void SnapshotCopies(size_t n) {
  std::printf("== a synchronous snapshot's copies of %zu MiB into a resident tmpfs file (ms)\n",
              n >> 20);
  const int threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u));
  const int all_threads = static_cast<int>(std::max(std::thread::hardware_concurrency(), 1u));
  std::vector<double> staged_all;
  char* dev = nullptr;
  CHECK(cudaMalloc(&dev, n));
  CHECK(cudaMemset(dev, 0x5a, n));
  const size_t half = size_t{32} << 20;
  char* staging = static_cast<char*>(
      mmap(nullptr, 2 * half, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (staging == MAP_FAILED) {
    std::printf("FAIL mmap staging\n");
    std::exit(1);
  }
  Populate(staging, 2 * half, 8);
  auto t0 = Clock::now();
  Register(staging, 2 * half);
  const double staging_register_ms = Ms(t0, Clock::now());
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<double> reg_total, reg_register, reg_copy, reg_crc, reg_turns, staged_total,
      page_total, page_copy, page_crc;
  std::vector<uint32_t> crcs;
  for (int round = 0; round < 3; ++round) {
    // Registered, straight copies, checksums after.
    char* f = ResidentFile(n);
    t0 = Clock::now();
    Register(f, n);
    const auto t1 = Clock::now();
    CHECK(cudaMemcpyAsync(f, dev, n, cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    const auto t2 = Clock::now();
    CrcThreads(f, n, threads, &crcs);
    const auto t3 = Clock::now();
    reg_register.push_back(Ms(t0, t1));
    reg_copy.push_back(Ms(t1, t2));
    reg_crc.push_back(Ms(t2, t3));
    reg_total.push_back(Ms(t0, t3));
    // The same registered file again, copied and checksummed in turns.
    crcs.clear();
    const auto t4 = Clock::now();
    TurnsCopy(f, dev, n, half, threads, s, &crcs);
    reg_turns.push_back(Ms(t4, Clock::now()));
    Release(f, n);
    // Staged.
    f = ResidentFile(n);
    t0 = Clock::now();
    StagedCopy(f, dev, n, staging, half, threads, s, &crcs);
    staged_total.push_back(Ms(t0, Clock::now()));
    if (f[n - 1] != 0x5a || f[0] != 0x5a) {
      std::printf("FAIL staged copy\n");
      std::exit(1);
    }
    munmap(f, n);
    // Staged by every CPU (a synchronous snapshot holds the application
    // anyway): whether more threads than the agent's drain faster.
    if (all_threads > threads) {
      f = ResidentFile(n);
      t0 = Clock::now();
      StagedCopy(f, dev, n, staging, half, all_threads, s, &crcs);
      staged_all.push_back(Ms(t0, Clock::now()));
      if (f[n - 1] != 0x5a || f[0] != 0x5a) {
        std::printf("FAIL staged copy\n");
        std::exit(1);
      }
      munmap(f, n);
    }
    // Pageable: the driver stages.
    f = ResidentFile(n);
    t0 = Clock::now();
    CHECK(cudaMemcpy(f, dev, n, cudaMemcpyDeviceToHost));
    const auto p1 = Clock::now();
    CrcThreads(f, n, threads, &crcs);
    const auto p2 = Clock::now();
    page_copy.push_back(Ms(t0, p1));
    page_crc.push_back(Ms(p1, p2));
    page_total.push_back(Ms(t0, p2));
    munmap(f, n);
  }
  const double reg = Median(reg_total);
  std::printf("   registered file: total %.1f (registering %.1f, copies %.1f, checksums %.1f on %d "
              "threads)\n",
              reg, Median(reg_register), Median(reg_copy), Median(reg_crc), threads);
  std::printf("   registered file, copies and checksums in 32 MiB turns (the device copying turn "
              "t+1 while the threads checksum turn t): %.1f, against %.1f one after the other\n",
              Median(reg_turns), Median(reg_copy) + Median(reg_crc));
  std::printf("   staged (2 x 32 MiB registered once in %.1f ms, %d threads copying and "
              "checksumming): total %.1f (%.3f of the registered file's)\n",
              staging_register_ms, threads, Median(staged_total), Median(staged_total) / reg);
  if (!staged_all.empty()) {
    std::printf("   staged by %d threads: total %.1f (%.3f of the registered file's, %.3f of %d "
                "threads')\n",
                all_threads, Median(staged_all), Median(staged_all) / reg,
                Median(staged_all) / Median(staged_total), threads);
  }
  std::printf("   pageable cudaMemcpy into the unregistered file: total %.1f (copies %.1f, checksums "
              "%.1f) (%.3f of the registered file's)\n",
              Median(page_total), Median(page_copy), Median(page_crc), Median(page_total) / reg);
  std::printf("RESULT snapshot_copies mib=%zu registered_ms=%.1f staged_ms=%.1f pageable_ms=%.1f "
              "staged_ratio=%.3f\n",
              n >> 20, reg, Median(staged_total), Median(page_total), Median(staged_total) / reg);
  CHECK(cudaStreamDestroy(s));
  Release(staging, 2 * half);
  CHECK(cudaFree(dev));
}

// The CPU's part of a split capture: threads take 4 MiB pieces in turn.
void CopyPieces(char* dst, const char* src, size_t n, int threads) {
  constexpr size_t kPiece = 4 << 20;
  std::atomic<size_t> next{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&] {
      for (size_t o = next.fetch_add(kPiece); o < n; o = next.fetch_add(kPiece)) {
        std::memcpy(dst + o, src + o, std::min(kPiece, n - o));
      }
    });
  }
  for (auto& t : ts) t.join();
}

// Section 7: the capture split between the device (the first part, copied
// back chunk by chunk behind the upload) and CPU threads (the rest, from the
// source into the capture file while the upload runs).
bool SplitCapture() {
  bool ok = true;
  const size_t n = 256ull << 20;
  const size_t chunk = 8ull << 20;
  std::printf("== a 256 MiB captured upload, the capture split between the link and the CPU "
              "(GB/s of the upload until its capture is complete, median of 8; ratio to the "
              "upload alone)\n");
  char* src = nullptr;
  CHECK(cudaMallocHost(&src, n));
  std::memset(src, 3, n);
  char* cap = MapFresh("split", n, false);
  Populate(cap, n, 8);
  Register(cap, n);
  char* d = nullptr;
  CHECK(cudaMalloc(&d, n));
  cudaStream_t s, c;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  auto gb = [&](double ms) { return n / (ms * 1e-3) / 1e9; };
  CHECK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
  const int cpus = static_cast<int>(std::thread::hardware_concurrency());
  for (int round = 0; round < 2; ++round) {
    std::vector<double> alone;
    for (int i = 0; i < 8; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpy(d, src, n, cudaMemcpyHostToDevice));
      alone.push_back(gb(Ms(t0, Clock::now())));
    }
    const double a = Median(alone);
    std::printf("   round %d: alone %.1f\n", round, a);
    for (int threads : {8, 16}) {
      if (threads > cpus) continue;
      for (int share : {0, 25, 40, 50, 60, 75}) {
        const size_t cpu_bytes = (n * share / 100) & ~size_t{65535};
        const size_t dev_bytes = n - cpu_bytes;
        std::vector<double> both;
        for (int i = 0; i < 8; ++i) {
          auto t0 = Clock::now();
          for (size_t off = 0; off < n; off += chunk) {
            CHECK(cudaMemcpyAsync(d + off, src + off, chunk, cudaMemcpyHostToDevice, s));
            if (off < dev_bytes) {
              CHECK(cudaEventRecord(ev, s));
              CHECK(cudaStreamWaitEvent(c, ev, 0));
              CHECK(cudaMemcpyAsync(cap + off, d + off, std::min(chunk, dev_bytes - off),
                                    cudaMemcpyDeviceToHost, c));
            }
          }
          if (cpu_bytes > 0) CopyPieces(cap + dev_bytes, src + dev_bytes, cpu_bytes, threads);
          CHECK(cudaStreamSynchronize(s));
          CHECK(cudaStreamSynchronize(c));
          both.push_back(gb(Ms(t0, Clock::now())));
        }
        const bool same = std::memcmp(cap, src, n) == 0;
        ok = ok && same;
        std::printf("     %2d threads, CPU share %2d %%: %.1f (%.3f)%s\n", threads, share,
                    Median(both), Median(both) / a, same ? "" : "  FAIL capture differs");
        std::printf("RESULT split_capture round=%d threads=%d cpu_share=%d ratio=%.3f\n", round,
                    threads, share, Median(both) / a);
      }
    }
  }
  Release(cap, n);
  CHECK(cudaFree(d));
  CHECK(cudaFreeHost(src));
  return ok;
}

// Section 8: userfaultfd write-protection of an upload's source.
int OpenUffd(const char** how) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  if (fd >= 0) {
    *how = "the system call";
    return fd;
  }
  const int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
  if (dev >= 0) {
    fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
    close(dev);
    if (fd >= 0) {
      *how = "/dev/userfaultfd";
      return fd;
    }
  }
  *how = "none";
  return -1;
}

bool WriteProtect(int uffd, char* p, size_t n, bool on) {
  uffdio_writeprotect wp{};
  wp.range.start = reinterpret_cast<uintptr_t>(p);
  wp.range.len = n;
  wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return ioctl(uffd, UFFDIO_WRITEPROTECT, &wp) == 0;
}

bool UffdHold(size_t n, bool gpu) {
  std::printf("== holding an upload's source with userfaultfd write-protection (%zu MiB)\n",
              n >> 20);
  const char* how = nullptr;
  const int uffd = OpenUffd(&how);
  std::printf("   euid %d; a userfaultfd taking kernel faults: %s%s\n", static_cast<int>(geteuid()),
              how, uffd < 0 ? (std::string(" (") + std::strerror(errno) + ")").c_str() : "");
  if (uffd < 0) {
    std::printf("RESULT uffd_hold available=0\n");
    return true;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
  if (ioctl(uffd, UFFDIO_API, &api) != 0) {
    std::printf("   UFFDIO_API with shmem write-protection refused: %s\n", std::strerror(errno));
    std::printf("RESULT uffd_hold available=0\n");
    close(uffd);
    return true;
  }
  // One tmpfs file, two shared mappings: the application's (protected) and
  // the agent's (registered with CUDA).
  const std::string path = g_dir + "/host_memory_bench.uffd." + std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, n) != 0) {
    std::printf("FAIL cannot make %s\n", path.c_str());
    return false;
  }
  char* app = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  char* agent = static_cast<char*>(mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
  close(fd);
  unlink(path.c_str());
  if (app == MAP_FAILED || agent == MAP_FAILED) {
    std::printf("FAIL mmap\n");
    return false;
  }
  Populate(app, n, 8);
  std::memset(app, 7, n);
  if (gpu) Register(agent, n);
  uffdio_register reg{};
  reg.range.start = reinterpret_cast<uintptr_t>(app);
  reg.range.len = n;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(uffd, UFFDIO_REGISTER, &reg) != 0) {
    std::printf("   UFFDIO_REGISTER (write-protect) of a shared tmpfs mapping refused: %s\n",
                std::strerror(errno));
    std::printf("RESULT uffd_hold available=0\n");
    return true;
  }
  std::vector<double> prot, unprot, reprot;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    if (!WriteProtect(uffd, app, n, true)) {
      std::printf("FAIL UFFDIO_WRITEPROTECT: %s\n", std::strerror(errno));
      return false;
    }
    auto t1 = Clock::now();
    WriteProtect(uffd, app, n, true);
    auto t2 = Clock::now();
    WriteProtect(uffd, app, n, false);
    auto t3 = Clock::now();
    prot.push_back(Ms(t0, t1));
    reprot.push_back(Ms(t1, t2));
    unprot.push_back(Ms(t2, t3));
  }
  std::printf("   protect %.2f ms, protect again (already protected) %.2f ms, unprotect %.2f ms "
              "(median of 5)\n",
              Median(prot), Median(reprot), Median(unprot));
  double ratio = 0;
  if (gpu) {
    char* d = nullptr;
    CHECK(cudaMalloc(&d, n));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    auto gb = [&](double ms) { return n / (ms * 1e-3) / 1e9; };
    CHECK(cudaMemcpy(d, agent, n, cudaMemcpyHostToDevice));
    std::vector<double> alone, held, issue;
    for (int i = 0; i < 8; ++i) {
      auto t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, agent, n, cudaMemcpyHostToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      alone.push_back(gb(Ms(t0, Clock::now())));
      t0 = Clock::now();
      CHECK(cudaMemcpyAsync(d, agent, n, cudaMemcpyHostToDevice, s));
      WriteProtect(uffd, app, n, true);
      auto t1 = Clock::now();
      CHECK(cudaStreamSynchronize(s));
      held.push_back(gb(Ms(t0, Clock::now())));
      issue.push_back(Ms(t0, t1));
      WriteProtect(uffd, app, n, false);
    }
    ratio = Median(held) / Median(alone);
    std::printf("   upload alone %.1f GB/s; protected right after it was issued %.1f GB/s (%.3f; "
                "issue + protect %.2f ms)\n",
                Median(alone), Median(held), ratio, Median(issue));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
  }
  // The handler: on a write fault, copy the whole held range out, then lift
  // the protection (which wakes the writer).
  char* copy = MapFresh("uffdcopy", n, false);
  Populate(copy, n, 8);
  std::atomic<int> faults{0};
  std::atomic<bool> stop{false};
  std::atomic<double> handler_ms{0};
  std::thread handler([&] {
    while (!stop.load()) {
      pollfd pfd{uffd, POLLIN, 0};
      if (poll(&pfd, 1, 50) <= 0) continue;
      uffd_msg msg;
      if (read(uffd, &msg, sizeof(msg)) != sizeof(msg)) continue;
      if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
      auto t0 = Clock::now();
      CopyOut(copy, app, n, 8);
      WriteProtect(uffd, app, n, false);
      handler_ms.store(Ms(t0, Clock::now()));
      faults.fetch_add(1);
    }
  });
  bool ok = true;
  WriteProtect(uffd, app, n, true);
  auto t0 = Clock::now();
  app[n / 2] = 9;  // a user-mode write
  const double user_ms = Ms(t0, Clock::now());
  const bool user_ok = faults.load() == 1 && copy[n / 2] == 7 && app[n / 2] == 9;
  std::printf("   a write into the protected view: waited %.2f ms (the handler's copy out and "
              "unprotect %.2f ms); the copy holds the old bytes: %s\n",
              user_ms, handler_ms.load(), user_ok ? "yes" : "NO");
  ok = ok && user_ok;
  // A kernel-mode write: read(2) from a file into the protected view.
  const std::string src_path = g_dir + "/host_memory_bench.uffdsrc." + std::to_string(getpid());
  const int sfd = open(src_path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  std::vector<char> ones(1 << 20, 1);
  const bool wrote = sfd >= 0 && write(sfd, ones.data(), ones.size()) == static_cast<ssize_t>(ones.size());
  unlink(src_path.c_str());
  std::memset(app, 7, n);
  WriteProtect(uffd, app, n, true);
  t0 = Clock::now();
  const ssize_t got = wrote ? pread(sfd, app + (n / 4), ones.size(), 0) : -1;
  const int err = errno;
  const double kernel_ms = Ms(t0, Clock::now());
  const bool kernel_ok = got == static_cast<ssize_t>(ones.size()) && faults.load() == 2 &&
                         copy[n / 4] == 7 && app[n / 4] == 1;
  std::printf("   pread(2) into the protected view: returned %zd%s after %.2f ms, the handler "
              "ran: %s\n",
              got, got < 0 ? (std::string(" (") + std::strerror(err) + ")").c_str() : "", kernel_ms,
              kernel_ok ? "yes" : "NO");
  ok = ok && kernel_ok;
  if (sfd >= 0) close(sfd);
  stop.store(true);
  handler.join();
  std::printf("RESULT uffd_hold available=1 protect_ms=%.2f unprotect_ms=%.2f upload_ratio=%.3f "
              "user_write_ms=%.2f kernel_write_ok=%d\n",
              Median(prot), Median(unprot), ratio, user_ms, kernel_ok ? 1 : 0);
  if (gpu) (void)cudaHostUnregister(agent);
  munmap(agent, n);
  munmap(app, n);
  munmap(copy, n);
  close(uffd);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  size_t mib = 256, snap_mib = 554;
  bool only_snapshot = false, only_split = false, only_uffd = false, gpu = true;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--only_uffd") == 0) only_uffd = true;
    if (std::strcmp(argv[i], "--no_gpu") == 0) gpu = false;
    if (std::strcmp(argv[i], "--snap_mib") == 0 && i + 1 < argc) snap_mib = std::strtoull(argv[++i], nullptr, 10);
    if (std::strcmp(argv[i], "--only_snapshot") == 0) only_snapshot = true;
    if (std::strcmp(argv[i], "--only_split") == 0) only_split = true;
    if (std::strcmp(argv[i], "--mib") == 0 && i + 1 < argc) mib = std::strtoull(argv[++i], nullptr, 10);
    if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) g_dir = argv[++i];
  }
  if (only_uffd) {
    if (gpu) CHECK(cudaSetDevice(0));
    if (!UffdHold(mib << 20, gpu)) {
      std::printf("FAIL host_memory_bench: the userfaultfd hold\n");
      return 1;
    }
    std::printf("PASS host_memory_bench\n");
    return 0;
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(nullptr));
  std::printf("host_memory_bench: %zu MiB files in %s, %u CPUs\n", mib, g_dir.c_str(),
              std::thread::hardware_concurrency());
  if (FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/shmem_enabled", "r")) {
    char line[256] = {0};
    if (std::fgets(line, sizeof(line), f) != nullptr) std::printf("shmem THP: %s", line);
    std::fclose(f);
  }
  if (!only_snapshot && !only_split) {
    MakingFiles(mib << 20);
    Stalls(mib << 20);
    Link();
    WriteProtect(mib << 20);
  }
  if (!only_split) SnapshotCopies(snap_mib << 20);
  if (!only_snapshot && !only_split && !UffdHold(mib << 20, true)) {
    std::printf("FAIL host_memory_bench: the userfaultfd hold\n");
    return 1;
  }
  if (!only_snapshot && !SplitCapture()) {
    std::printf("FAIL host_memory_bench: a split capture's bytes differ from the source\n");
    return 1;
  }
  std::printf("PASS host_memory_bench\n");
  return 0;
}
