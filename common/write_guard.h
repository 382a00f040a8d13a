// WriteGuard: write protection of shared memory ranges with userfaultfd,
// for the held uploads (common/upload_hold.h). Unlike mprotect, a write the
// kernel makes on the process's behalf (read(2) or recv(2) into a protected
// buffer) waits for the handler like a user-mode store, instead of failing
// with EFAULT, so protecting a buffer changes nothing the application can
// observe except the time a first write after an upload takes.
//
// That needs a userfaultfd that takes kernel-mode faults: open to a process
// with CAP_SYS_PTRACE, to one that may open /dev/userfaultfd, or everywhere
// with vm.unprivileged_userfaultfd = 1; and write protection of shared
// memory (Linux 5.19 or later). Create says which is missing.
//
// Registered ranges are whole mappings; Protect write-protects part of one.
// A write into a protected page stops the writing thread; the handler thread
// calls `on_write(lo, hi)` with the registered range around it, then lifts
// the protection of every protected part of that range, which lets the
// writer go on.
//
//   auto g = WriteGuard::Create([&](uint64_t lo, uint64_t hi) { ...copy out... });
//   g->Register(addr, size);      // after mmap
//   g->Protect(src, count);       // after the upload was sent
//   g->Unregister(addr, size);    // before munmap
#ifndef REVENANT_COMMON_WRITE_GUARD_H_
#define REVENANT_COMMON_WRITE_GUARD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace revenant {

class WriteGuard {
 public:
  using OnWrite = std::function<void(uint64_t lo, uint64_t hi)>;
  static absl::StatusOr<std::unique_ptr<WriteGuard>> Create(OnWrite on_write);
  ~WriteGuard();
  WriteGuard(const WriteGuard&) = delete;
  WriteGuard& operator=(const WriteGuard&) = delete;

  // Whether this process can have one (a probe: opens and closes a
  // userfaultfd); the error says why not.
  static absl::Status Available();

  absl::Status Register(uint64_t addr, uint64_t size);
  void Unregister(uint64_t addr, uint64_t size);
  // Write-protects [addr, addr + size) rounded out to pages (inside its
  // registered range); nothing to do for a part that is already protected.
  absl::Status Protect(uint64_t addr, uint64_t size);
  // Lifts every protection in the registered range around `addr`, after
  // `on_write` (as a write there would).
  void Release(uint64_t addr);

  uint64_t protects() const { return protects_.load(); }
  uint64_t faults() const { return faults_.load(); }

 private:
  WriteGuard(int fd, OnWrite on_write);
  void Handle();
  // With mu_ held: on_write, then every protected part of the range
  // containing `addr` unprotected; false if no registered range holds it.
  bool ReleaseLocked(uint64_t addr);
  bool SetProtection(uint64_t lo, uint64_t hi, bool on);

  const int fd_;
  const OnWrite on_write_;
  std::mutex mu_;
  std::map<uint64_t, uint64_t> registered_;  // start -> end
  std::map<uint64_t, uint64_t> protected_;   // start -> end, disjoint
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> protects_{0};
  std::atomic<uint64_t> faults_{0};
  std::thread handler_;
};

}  // namespace revenant

#endif  // REVENANT_COMMON_WRITE_GUARD_H_
