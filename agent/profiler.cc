#include "agent/profiler.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/logging.h"

namespace revenant::agent::profiler {
namespace internal {
std::atomic<uint32_t> current_api{kIdle};
std::atomic<bool> running{false};
}  // namespace internal

namespace {

struct Sample {
  uint64_t pc;
  uint32_t api;
  // 1 + the timer's overruns: periods that passed while the signal was
  // pending (the thread was not running) count where it stopped.
  uint32_t weight;
};

// 1 M samples: ~100 s at 10 kHz, ~17 min at 1 kHz; later samples are counted
// as dropped.
constexpr size_t kMaxSamples = 1 << 20;
Sample* samples = nullptr;
std::atomic<size_t> next_sample{0};
std::atomic<uint64_t> dropped{0};
timer_t timer;
int sampled_hz = 0;

void OnSignal(int, siginfo_t*, void* uctx) {
  const int saved_errno = errno;
  const auto* uc = static_cast<const ucontext_t*>(uctx);
#if defined(__x86_64__)
  const uint64_t pc = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
#elif defined(__aarch64__)
  const uint64_t pc = static_cast<uint64_t>(uc->uc_mcontext.pc);
#else
  const uint64_t pc = 0;
#endif
  const size_t i = next_sample.fetch_add(1, std::memory_order_relaxed);
  if (i < kMaxSamples) {
    const int overrun = timer_getoverrun(timer);
    samples[i] = {pc, internal::current_api.load(std::memory_order_relaxed),
                  1u + static_cast<uint32_t>(overrun > 0 ? overrun : 0)};
  } else {
    dropped.fetch_add(1, std::memory_order_relaxed);
  }
  errno = saved_errno;
}

// The executable's own functions (its .symtab: the agent does not export
// them, so dladdr does not know them), sorted by address, relative to its
// load base.
struct ExeSymbol {
  uint64_t begin, end;
  std::string name;
};
std::vector<ExeSymbol> LoadExeSymbols() {
  std::vector<ExeSymbol> out;
  const int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return out;
  struct stat st {};
  void* map = MAP_FAILED;
  if (fstat(fd, &st) == 0 && st.st_size > static_cast<off_t>(sizeof(ElfW(Ehdr)))) {
    map = mmap(nullptr, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  }
  close(fd);
  if (map == MAP_FAILED) return out;
  const char* base = static_cast<const char*>(map);
  const size_t size = static_cast<size_t>(st.st_size);
  const auto* eh = reinterpret_cast<const ElfW(Ehdr)*>(base);
  const bool ok = std::memcmp(eh->e_ident, ELFMAG, SELFMAG) == 0 && eh->e_shoff != 0 &&
                  eh->e_shoff + uint64_t{eh->e_shnum} * sizeof(ElfW(Shdr)) <= size;
  const auto* sh = ok ? reinterpret_cast<const ElfW(Shdr)*>(base + eh->e_shoff) : nullptr;
  for (int i = 0; ok && i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum) continue;
    const ElfW(Shdr)& strs = sh[sh[i].sh_link];
    if (sh[i].sh_offset + sh[i].sh_size > size || strs.sh_offset + strs.sh_size > size) break;
    const auto* syms = reinterpret_cast<const ElfW(Sym)*>(base + sh[i].sh_offset);
    for (size_t k = 0; k < sh[i].sh_size / sizeof(ElfW(Sym)); ++k) {
      if (ELF64_ST_TYPE(syms[k].st_info) != STT_FUNC || syms[k].st_value == 0 ||
          syms[k].st_name >= strs.sh_size) {
        continue;
      }
      const char* name = base + strs.sh_offset + syms[k].st_name;
      out.push_back({syms[k].st_value, syms[k].st_value + std::max<uint64_t>(syms[k].st_size, 1),
                     std::string(name, strnlen(name, strs.sh_size - syms[k].st_name))});
    }
    break;
  }
  munmap(map, size);
  std::sort(out.begin(), out.end(),
            [](const ExeSymbol& a, const ExeSymbol& b) { return a.begin < b.begin; });
  return out;
}

std::string Demangled(const char* sym) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(sym, nullptr, nullptr, &status), std::free);
  std::string name = status == 0 && demangled ? demangled.get() : sym;
  if (name.size() > 90) name = name.substr(0, 87) + "...";
  return name;
}

// The function (or library + 4 KiB page) an address lies in.
std::string Locate(uint64_t pc) {
  static const std::vector<ExeSymbol> exe = LoadExeSymbols();
  // The main program's load bias and address range (the first object
  // dl_iterate_phdr reports).
  struct Range {
    uint64_t bias = 0, lo = ~uint64_t{0}, hi = 0;
  };
  static const Range main_range = [] {
    Range r;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* data) {
          auto* r = static_cast<Range*>(data);
          r->bias = info->dlpi_addr;
          for (int i = 0; i < info->dlpi_phnum; ++i) {
            if (info->dlpi_phdr[i].p_type != PT_LOAD) continue;
            r->lo = std::min<uint64_t>(r->lo, info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
            r->hi = std::max<uint64_t>(r->hi, info->dlpi_addr + info->dlpi_phdr[i].p_vaddr +
                                                  info->dlpi_phdr[i].p_memsz);
          }
          return 1;  // the main program only
        },
        &r);
    return r;
  }();
  if (pc >= main_range.lo && pc < main_range.hi && !exe.empty()) {
    const uint64_t rel = pc - main_range.bias;
    auto it = std::upper_bound(exe.begin(), exe.end(), rel,
                               [](uint64_t v, const ExeSymbol& s) { return v < s.begin; });
    if (it != exe.begin() && rel < std::prev(it)->end) {
      return absl::StrCat(Demangled(std::prev(it)->name.c_str()), " [main program]");
    }
  }
  Dl_info info;
  if (pc == 0 || dladdr(reinterpret_cast<void*>(pc), &info) == 0 || info.dli_fname == nullptr) {
    return absl::StrFormat("?0x%x", pc);
  }
  const char* lib = std::strrchr(info.dli_fname, '/');
  lib = lib != nullptr ? lib + 1 : info.dli_fname;
  if (info.dli_sname != nullptr) return absl::StrCat(Demangled(info.dli_sname), " [", lib, "]");
  const uint64_t off = pc - reinterpret_cast<uint64_t>(info.dli_fbase);
  return absl::StrFormat("%s+0x%x (no symbol)", lib, off & ~uint64_t{0xfff});
}

using Counts = std::vector<std::pair<std::string, uint64_t>>;

Counts Top(const std::map<std::string, uint64_t>& m, size_t n) {
  Counts v(m.begin(), m.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (v.size() > n) v.resize(n);
  return v;
}

}  // namespace

ScopedPause::ScopedPause(bool on) : on_(on && internal::running.load()) {
  if (!on_) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPROF);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

ScopedPause::~ScopedPause() {
  if (!on_) return;
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGPROF);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

bool StartOnThisThread(int hz) {
  bool expected = false;
  if (!internal::running.compare_exchange_strong(expected, true)) return true;
  hz = std::clamp(hz, 1, 20000);
  samples = new Sample[kMaxSamples];
  struct sigaction sa {};
  sa.sa_sigaction = OnSignal;
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  struct sigevent sev {};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = SIGPROF;
  sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
  if (sigaction(SIGPROF, &sa, nullptr) != 0 || timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) {
    REVENANT_LOG(WARNING, "agent") << "REVENANT_PROFILE_HZ: no profiling timer: "
                                   << std::strerror(errno);
    internal::running.store(false);
    return false;
  }
  struct itimerspec its {};
  its.it_interval.tv_nsec = 1000000000L / hz;
  its.it_value = its.it_interval;
  if (timer_settime(timer, 0, &its, nullptr) != 0) {
    REVENANT_LOG(WARNING, "agent") << "REVENANT_PROFILE_HZ: " << std::strerror(errno);
    timer_delete(timer);
    internal::running.store(false);
    return false;
  }
  sampled_hz = hz;
  REVENANT_LOG(INFO, "agent") << "profiling the executor thread at " << hz
                              << " samples/s (wall clock; measurement only)";
  return true;
}

bool Running() { return internal::running.load(std::memory_order_relaxed); }

std::string Report(const std::function<std::string(uint32_t)>& api_name) {
  if (!Running()) return "";
  timer_delete(timer);
  const size_t n = std::min(next_sample.load(), kMaxSamples);
  std::map<uint32_t, uint64_t> by_api;
  std::map<std::string, uint64_t> by_loc, idle_loc;
  std::map<uint32_t, std::map<std::string, uint64_t>> api_loc;
  std::map<uint64_t, std::string> located;  // pc -> location, resolved once
  uint64_t idle = 0, total = 0;
  for (size_t i = 0; i < n; ++i) {
    auto it = located.find(samples[i].pc);
    if (it == located.end()) it = located.emplace(samples[i].pc, Locate(samples[i].pc)).first;
    const uint64_t w = samples[i].weight;
    total += w;
    if (samples[i].api == kIdle) {
      idle += w;
      idle_loc[it->second] += w;
      continue;
    }
    by_api[samples[i].api] += w;
    by_loc[it->second] += w;
    api_loc[samples[i].api][it->second] += w;
  }
  const uint64_t busy = total - idle;
  const double ms_per = 1000.0 / sampled_hz;
  std::string out = absl::StrFormat(
      "executor profile: %d samples at %d/s (%.0f ms), %d in requests (%.1f %%), %d between "
      "requests, %d dropped",
      total, sampled_hz, total * ms_per, busy, total ? 100.0 * busy / total : 0.0, idle,
      dropped.load());
  auto pct = [&](uint64_t c) { return busy ? 100.0 * c / busy : 0.0; };
  absl::StrAppend(&out, "\n  by API (share of the samples in requests, ~ms):");
  std::map<std::string, uint64_t> named;
  for (const auto& [api, c] : by_api) named[api_name(api)] += c;
  for (const auto& [name, c] : Top(named, 20)) {
    absl::StrAppend(&out, absl::StrFormat("\n    %5.1f %%  %8.1f  %s", pct(c), c * ms_per, name));
  }
  absl::StrAppend(&out, "\n  where, over all requests:");
  for (const auto& [loc, c] : Top(by_loc, 30)) {
    absl::StrAppend(&out, absl::StrFormat("\n    %5.1f %%  %s", pct(c), loc));
  }
  std::vector<std::pair<uint32_t, uint64_t>> apis(by_api.begin(), by_api.end());
  std::sort(apis.begin(), apis.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (size_t k = 0; k < apis.size() && k < 12; ++k) {
    absl::StrAppend(&out, absl::StrFormat("\n  where, in %s (%.1f %%):", api_name(apis[k].first),
                                          pct(apis[k].second)));
    for (const auto& [loc, c] : Top(api_loc[apis[k].first], 8)) {
      absl::StrAppend(&out, absl::StrFormat("\n    %5.1f %%  %s", 100.0 * c / apis[k].second, loc));
    }
  }
  absl::StrAppend(&out, "\n  between requests:");
  for (const auto& [loc, c] : Top(idle_loc, 6)) {
    absl::StrAppend(&out, absl::StrFormat("\n    %5.1f %%  %s", idle ? 100.0 * c / idle : 0.0, loc));
  }
  return out;
}

}  // namespace revenant::agent::profiler
