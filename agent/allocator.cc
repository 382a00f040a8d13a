#include "agent/allocator.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace revenant {
namespace agent {

FixedRangeAllocator::FixedRangeAllocator(uint64_t base, uint64_t size, uint64_t alignment)
    : base_(base), size_(size), alignment_(alignment == 0 ? 1 : alignment) {
  // A range that is not a multiple of the alignment loses its tail: every
  // block boundary stays aligned.
  size_ -= size_ % alignment_;
  Clear();
}

void FixedRangeAllocator::Clear() {
  free_.clear();
  live_.clear();
  bytes_in_use_ = 0;
  if (size_ > 0) free_[base_] = size_;
}

absl::StatusOr<uint64_t> FixedRangeAllocator::Allocate(uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("allocation of 0 bytes");
  if (size > size_) {
    return absl::ResourceExhaustedError(
        absl::StrCat("allocation of ", size, " bytes exceeds the device range of ", size_));
  }
  if (expected_ != 0) {
    const uint64_t want = expected_;
    expected_ = 0;
    return AllocateAt(want, size);
  }
  const uint64_t reserved = (size + alignment_ - 1) & ~(alignment_ - 1);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < reserved) continue;
    const uint64_t addr = it->first;
    const uint64_t rest = it->second - reserved;
    free_.erase(it);
    if (rest > 0) free_[addr + reserved] = rest;
    live_[addr] = Live{size, reserved};
    bytes_in_use_ += reserved;
    return addr;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "no free block of ", reserved, " bytes (", bytes_in_use_, " of ", size_,
      " bytes in use in ", free_.size(), " free blocks)"));
}

absl::StatusOr<uint64_t> FixedRangeAllocator::AllocateAt(uint64_t addr, uint64_t size) {
  if (size == 0) return absl::InvalidArgumentError("allocation of 0 bytes");
  const uint64_t reserved = (size + alignment_ - 1) & ~(alignment_ - 1);
  auto it = free_.upper_bound(addr);
  if (it == free_.begin() || (addr - base_) % alignment_ != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("0x", absl::Hex(addr), " is not a free, aligned address of the range"));
  }
  --it;
  const uint64_t block = it->first;
  const uint64_t block_size = it->second;
  if (addr < block || addr - block > block_size || reserved > block_size - (addr - block)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "[0x", absl::Hex(addr), ", +", reserved, ") is not free"));
  }
  free_.erase(it);
  if (addr > block) free_[block] = addr - block;
  const uint64_t tail = block + block_size - (addr + reserved);
  if (tail > 0) free_[addr + reserved] = tail;
  live_[addr] = Live{size, reserved};
  bytes_in_use_ += reserved;
  return addr;
}

absl::Status FixedRangeAllocator::Free(uint64_t addr) {
  auto live = live_.find(addr);
  if (live == live_.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("0x", absl::Hex(addr), " is not the start of a live allocation"));
  }
  uint64_t start = addr;
  uint64_t len = live->second.reserved;
  bytes_in_use_ -= len;
  live_.erase(live);

  // Coalesce with the free neighbours on either side.
  auto next = free_.lower_bound(start);
  if (next != free_.end() && next->first == start + len) {
    len += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      len += prev->second;
      free_.erase(prev);
    }
  }
  free_[start] = len;
  return absl::OkStatus();
}

bool FixedRangeAllocator::Contains(uint64_t addr, uint64_t len) const {
  auto it = live_.upper_bound(addr);
  if (it == live_.begin()) return false;
  --it;
  const uint64_t start = it->first;
  const uint64_t end = start + it->second.requested;
  if (addr >= end) return false;
  // addr < end here, so end - addr cannot underflow and no sum can overflow.
  return len <= end - addr;
}

uint64_t FixedRangeAllocator::SizeOf(uint64_t addr) const {
  auto it = live_.find(addr);
  return it == live_.end() ? 0 : it->second.requested;
}

std::pair<uint64_t, uint64_t> FixedRangeAllocator::FreeBlockContaining(uint64_t addr) const {
  auto it = free_.upper_bound(addr);
  if (it == free_.begin()) return {0, 0};
  --it;
  if (addr - it->first >= it->second) return {0, 0};
  return {it->first, it->second};
}

}  // namespace agent
}  // namespace revenant
