#include "common/write_guard.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace revenant {
namespace {

constexpr uint64_t kPage = 4096;

// A userfaultfd that takes kernel-mode faults too (no UFFD_USER_MODE_ONLY),
// with shared-memory write protection; -1 and `why` otherwise.
int OpenUffd(std::string* why) {
  int fd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  const int sys_err = fd < 0 ? errno : 0;
  if (fd < 0) {
    const int dev = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (dev >= 0) {
      fd = ioctl(dev, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
      close(dev);
    }
  }
  if (fd < 0) {
    *why = absl::StrCat("no userfaultfd for kernel-mode faults (userfaultfd(2): ",
                        std::strerror(sys_err),
                        "; /dev/userfaultfd not usable): it needs CAP_SYS_PTRACE, access to "
                        "/dev/userfaultfd or vm.unprivileged_userfaultfd=1");
    return -1;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_WP_HUGETLBFS_SHMEM;
  if (ioctl(fd, UFFDIO_API, &api) != 0) {
    *why = absl::StrCat("userfaultfd without write protection of shared memory (Linux 5.19+): ",
                        std::strerror(errno));
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

absl::Status WriteGuard::Available() {
  std::string why;
  const int fd = OpenUffd(&why);
  if (fd < 0) return absl::UnavailableError(why);
  close(fd);
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<WriteGuard>> WriteGuard::Create(OnWrite on_write) {
  std::string why;
  const int fd = OpenUffd(&why);
  if (fd < 0) return absl::UnavailableError(why);
  return std::unique_ptr<WriteGuard>(new WriteGuard(fd, std::move(on_write)));
}

WriteGuard::WriteGuard(int fd, OnWrite on_write) : fd_(fd), on_write_(std::move(on_write)) {
  handler_ = std::thread([this] { Handle(); });
}

WriteGuard::~WriteGuard() {
  stop_.store(true);
  if (handler_.joinable()) handler_.join();
  close(fd_);
}

absl::Status WriteGuard::Register(uint64_t addr, uint64_t size) {
  uffdio_register reg{};
  reg.range.start = addr;
  reg.range.len = (size + kPage - 1) / kPage * kPage;
  reg.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(fd_, UFFDIO_REGISTER, &reg) != 0) {
    return absl::InternalError(absl::StrCat("UFFDIO_REGISTER: ", std::strerror(errno)));
  }
  std::lock_guard<std::mutex> lock(mu_);
  registered_[addr] = addr + reg.range.len;
  return absl::OkStatus();
}

void WriteGuard::Unregister(uint64_t addr, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t end = addr + (size + kPage - 1) / kPage * kPage;
  for (auto it = protected_.lower_bound(addr); it != protected_.end() && it->first < end;) {
    it = protected_.erase(it);
  }
  registered_.erase(addr);
  uffdio_range r{addr, end - addr};
  (void)ioctl(fd_, UFFDIO_UNREGISTER, &r);
}

bool WriteGuard::SetProtection(uint64_t lo, uint64_t hi, bool on) {
  uffdio_writeprotect wp{};
  wp.range.start = lo;
  wp.range.len = hi - lo;
  wp.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;
  return ioctl(fd_, UFFDIO_WRITEPROTECT, &wp) == 0;
}

absl::Status WriteGuard::Protect(uint64_t addr, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto reg = registered_.upper_bound(addr);
  if (reg == registered_.begin()) return absl::NotFoundError("not a registered range");
  --reg;
  if (addr + size > reg->second) return absl::NotFoundError("not a registered range");
  uint64_t lo = addr / kPage * kPage;
  uint64_t hi = std::min(reg->second, (addr + size + kPage - 1) / kPage * kPage);
  // Already covered by one protected part: nothing to do (a repeated upload
  // from an untouched buffer costs no page-table walk).
  auto it = protected_.upper_bound(lo);
  if (it != protected_.begin()) {
    auto prev = std::prev(it);
    if (prev->second >= hi) return absl::OkStatus();
  }
  if (!SetProtection(lo, hi, true)) {
    return absl::InternalError(absl::StrCat("UFFDIO_WRITEPROTECT: ", std::strerror(errno)));
  }
  protects_.fetch_add(1);
  // Merge with the parts it overlaps (only overlapping ones: those are in
  // the same registered range, where a neighbour's touching part may not be).
  it = protected_.upper_bound(lo);
  if (it != protected_.begin() && std::prev(it)->second > lo) --it;
  while (it != protected_.end() && it->first < hi) {
    lo = std::min(lo, it->first);
    hi = std::max(hi, it->second);
    it = protected_.erase(it);
  }
  protected_[lo] = hi;
  return absl::OkStatus();
}

bool WriteGuard::ReleaseLocked(uint64_t addr) {
  auto reg = registered_.upper_bound(addr);
  if (reg == registered_.begin()) return false;
  --reg;
  if (addr >= reg->second) return false;
  const uint64_t lo = reg->first, hi = reg->second;
  on_write_(lo, hi);
  for (auto it = protected_.lower_bound(lo); it != protected_.end() && it->first < hi;) {
    SetProtection(it->first, it->second, false);  // wakes the writers waiting there
    it = protected_.erase(it);
  }
  return true;
}

void WriteGuard::Release(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(addr);
}

void WriteGuard::Handle() {
  while (!stop_.load()) {
    pollfd pfd{fd_, POLLIN, 0};
    if (poll(&pfd, 1, 100) <= 0) continue;
    uffd_msg msg;
    if (read(fd_, &msg, sizeof(msg)) != static_cast<ssize_t>(sizeof(msg))) continue;
    if (msg.event != UFFD_EVENT_PAGEFAULT) continue;
    const uint64_t addr = msg.arg.pagefault.address;
    faults_.fetch_add(1);
    std::lock_guard<std::mutex> lock(mu_);
    ReleaseLocked(addr);
    // Whatever happened before (a part released meanwhile), the writer must
    // not stay asleep: clearing the protection of its page wakes it.
    const uint64_t page = addr / kPage * kPage;
    SetProtection(page, page + kPage, false);
  }
}

}  // namespace revenant
