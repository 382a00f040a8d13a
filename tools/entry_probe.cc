// librevenant_probe.so: what an application reaches of CUDA natively, with no
// agent involved. Preloaded into a native run (LD_PRELOAD), it forwards every
// call to the real library and writes, to stderr and to REVENANT_PROBE_OUT
// when set, one line per distinct
//   entry <name> <version>            cudaGetDriverEntryPoint(ByVersion)
//   procaddr <name> <version>         cuGetProcAddress(_v2)
// and at exit a summary of the modules nvcc's constructors registered
// (count, total and largest fat-binary size, functions, device variables).
// It tells which driver functions a framework uses before they are taken
// over. (The libraries it opens and the symbols it looks up by name are what
// the loader itself reports: LD_DEBUG=files,bindings.)
#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>

#include "common/knobs.h"

namespace {

std::mutex& Mu() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::set<std::string>& Seen() {
  static std::set<std::string>* s = new std::set<std::string>();
  return *s;
}
FILE* OutFile() {
  static FILE* f = [] {
    const std::optional<std::string> p =
        revenant::knobs::String(revenant::knobs::Id::kProbeOut);
    return p ? fopen(p->c_str(), "a") : nullptr;
  }();
  return f;
}

void Note(const std::string& line) {
  std::lock_guard<std::mutex> lock(Mu());
  if (!Seen().insert(line).second) return;
  fprintf(stderr, "[probe %d] %s\n", getpid(), line.c_str());
  if (FILE* f = OutFile()) {
    fprintf(f, "%s\n", line.c_str());
    fflush(f);
  }
}

void* Next(const char* name) { return dlsym(RTLD_NEXT, name); }

struct Modules {
  std::atomic<uint64_t> count{0}, bytes{0}, largest{0}, functions{0}, variables{0}, v2{0};
  ~Modules() {
    if (count == 0 && functions == 0) return;
    fprintf(stderr,
            "[probe %d] modules %llu (wrapper version 2: %llu), fat binaries %llu bytes "
            "(largest %llu), functions %llu, device variables %llu\n",
            getpid(), (unsigned long long)count.load(), (unsigned long long)v2.load(),
            (unsigned long long)bytes.load(), (unsigned long long)largest.load(),
            (unsigned long long)functions.load(), (unsigned long long)variables.load());
  }
};
Modules modules;

struct FatbinWrapper {
  int magic;
  int version;
  const void* data;
  void* filename_or_fatbins;
};
struct FatbinHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint64_t fat_size;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int cudaGetDriverEntryPoint(const char* symbol,
                                                                  void** fn,
                                                                  unsigned long long flags,
                                                                  int* status) {
  using F = int (*)(const char*, void**, unsigned long long, int*);
  static F real = reinterpret_cast<F>(Next("cudaGetDriverEntryPoint"));
  Note(std::string("entry ") + (symbol ? symbol : "?") + " -");
  return real != nullptr ? real(symbol, fn, flags, status) : 801;
}

__attribute__((visibility("default"))) int cudaGetDriverEntryPointByVersion(
    const char* symbol, void** fn, unsigned int version, unsigned long long flags, int* status) {
  using F = int (*)(const char*, void**, unsigned int, unsigned long long, int*);
  static F real = reinterpret_cast<F>(Next("cudaGetDriverEntryPointByVersion"));
  Note(std::string("entry ") + (symbol ? symbol : "?") + " " + std::to_string(version));
  return real != nullptr ? real(symbol, fn, version, flags, status) : 801;
}

__attribute__((visibility("default"))) int cuGetProcAddress_v2(const char* symbol, void** fn,
                                                              int version, uint64_t flags,
                                                              int* status) {
  using F = int (*)(const char*, void**, int, uint64_t, int*);
  static F real = reinterpret_cast<F>(Next("cuGetProcAddress_v2"));
  Note(std::string("procaddr ") + (symbol ? symbol : "?") + " " + std::to_string(version));
  return real != nullptr ? real(symbol, fn, version, flags, status) : 801;
}

__attribute__((visibility("default"))) void** __cudaRegisterFatBinary(void* fat) {
  using F = void** (*)(void*);
  static F real = reinterpret_cast<F>(Next("__cudaRegisterFatBinary"));
  const auto* w = static_cast<const FatbinWrapper*>(fat);
  ++modules.count;
  if (w != nullptr && w->magic == 0x466243b1 && w->data != nullptr) {
    if (w->version == 2) ++modules.v2;
    const auto* h = static_cast<const FatbinHeader*>(w->data);
    if (h->magic == 0xBA55ED50) {
      const uint64_t n = h->header_size + h->fat_size;
      modules.bytes += n;
      uint64_t cur = modules.largest.load();
      while (n > cur && !modules.largest.compare_exchange_weak(cur, n)) {
      }
    }
  }
  return real(fat);
}

__attribute__((visibility("default"))) void __cudaRegisterFunction(
    void** h, const char* host_fun, char* device_fun, const char* device_name, int limit,
    void* tid, void* bid, void* bdim, void* gdim, int* wsize) {
  using F = void (*)(void**, const char*, char*, const char*, int, void*, void*, void*, void*,
                     int*);
  static F real = reinterpret_cast<F>(Next("__cudaRegisterFunction"));
  ++modules.functions;
  real(h, host_fun, device_fun, device_name, limit, tid, bid, bdim, gdim, wsize);
}

__attribute__((visibility("default"))) void __cudaRegisterVar(void** h, char* host_var,
                                                             char* device_address,
                                                             const char* device_name, int ext,
                                                             size_t size, int constant,
                                                             int global) {
  using F = void (*)(void**, char*, char*, const char*, int, size_t, int, int);
  static F real = reinterpret_cast<F>(Next("__cudaRegisterVar"));
  ++modules.variables;
  real(h, host_var, device_address, device_name, ext, size, constant, global);
}

}  // extern "C"
