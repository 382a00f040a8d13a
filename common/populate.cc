#include "common/populate.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace revenant {

int PopulateThreads(size_t size) {
  const size_t per = size_t{32} << 20;
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  const size_t want = std::max<size_t>(1, size / per);
  return static_cast<int>(std::min<size_t>({want, 8, hw}));
}

absl::Status PopulateWritable(void* addr, size_t size, int threads) {
  if (size == 0) return absl::OkStatus();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (reinterpret_cast<uintptr_t>(addr) % page != 0) {
    return absl::InvalidArgumentError("PopulateWritable: the address is not page-aligned");
  }
  if (threads <= 0) threads = PopulateThreads(size);
  const size_t pages = (size + page - 1) / page;
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), pages));
  // Slices of whole pages; the first error wins.
  std::atomic<int> first_errno{0};
  auto run = [&](size_t from_page, size_t to_page) {
    if (from_page >= to_page) return;
    char* p = static_cast<char*>(addr) + from_page * page;
    if (madvise(p, (to_page - from_page) * page, MADV_POPULATE_WRITE) != 0) {
      int expected = 0;
      first_errno.compare_exchange_strong(expected, errno);
    }
  };
  const size_t per = (pages + threads - 1) / threads;
  std::vector<std::thread> helpers;
  helpers.reserve(threads > 0 ? threads - 1 : 0);
  for (int t = 1; t < threads; ++t) {
    helpers.emplace_back(run, t * per, std::min(pages, (t + 1) * per));
  }
  run(0, std::min(pages, per));
  for (std::thread& h : helpers) h.join();
  const int err = first_errno.load();
  if (err == 0) return absl::OkStatus();
  if (err == EINVAL) {
    return absl::UnimplementedError(
        "the kernel has no MADV_POPULATE_WRITE (Linux 5.14 or later needed)");
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("cannot make ", size, " bytes of the mapping resident: ", std::strerror(err)));
}

void UnmapInPieces(void* addr, size_t size) {
  if (addr == nullptr || size == 0) return;
  char* p = static_cast<char*>(addr);
  for (size_t at = kUnmapPieceBytes; at < size; at += kUnmapPieceBytes) {
    madvise(p + at - kUnmapPieceBytes, kUnmapPieceBytes, MADV_DONTNEED);
  }
  munmap(addr, size);
}

}  // namespace revenant
