// FixedRangeAllocator: deterministic sub-allocation of one fixed virtual range.
//
// Device memory lives at fixed addresses (agent/backend.h, DeviceRange) so
// that a replacement agent which replays the journal hands out exactly the
// addresses the application already holds. The allocator is therefore a pure
// function of its call sequence: the same Allocate/Free sequence on two
// instances with the same base, size and alignment gives the same addresses.
// It only does bookkeeping; it never touches the memory it manages.
//
//   FixedRangeAllocator a(0x200000000000, 64ull << 30);
//   absl::StatusOr<uint64_t> p = a.Allocate(1000);   // 0x200000000000
//   absl::StatusOr<uint64_t> q = a.Allocate(10);     // 0x200000000400 (1000 -> 1024)
//   a.Contains(*p + 8, 16);                          // true
//   a.Free(*p);                                      // OK; a second Free is kInvalidArgument
//
// Policy: first fit over the free blocks in address order, sizes rounded up
// to `alignment`, freed blocks coalesced with free neighbours. Each call costs
// O(number of free blocks) at worst, O(log live allocations) for lookups.
//
// Thread safety: none; the owner serializes calls (the host backend holds a
// mutex around it).
#ifndef REVENANT_AGENT_ALLOCATOR_H_
#define REVENANT_AGENT_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace revenant {
namespace agent {

class FixedRangeAllocator {
 public:
  // Manages [base, base + size). `alignment` must be a power of two; base is
  // expected to be aligned to it (addresses are base + multiples of it).
  FixedRangeAllocator(uint64_t base, uint64_t size, uint64_t alignment = 256);

  FixedRangeAllocator(const FixedRangeAllocator&) = delete;
  FixedRangeAllocator& operator=(const FixedRangeAllocator&) = delete;

  // Returns the start of a new block of at least `size` bytes.
  // kInvalidArgument for size 0 (cudaMalloc(0)'s null pointer is the
  // backend's business), kResourceExhausted when no free block is big enough.
  absl::StatusOr<uint64_t> Allocate(uint64_t size);

  // Makes the next Allocate return exactly `addr` (or fail): a replacement
  // agent replaying a compacted journal -- where freed allocations dropped
  // out, so first-fit alone would place later ones elsewhere -- puts every
  // allocation back at the address the application holds.
  void ExpectNext(uint64_t addr) { expected_ = addr; }

  // Allocates [addr, addr + size) exactly; kFailedPrecondition when that
  // range is not free.
  absl::StatusOr<uint64_t> AllocateAt(uint64_t addr, uint64_t size);

  // Frees the block starting at `addr`. kInvalidArgument when `addr` is not
  // the start of a live allocation (interior pointer, double free, foreign).
  absl::Status Free(uint64_t addr);

  // Whether [addr, addr + len) lies inside one live allocation's requested
  // bytes. len 0 asks whether `addr` points into a live allocation.
  bool Contains(uint64_t addr, uint64_t len) const;

  // The requested size of the live allocation starting at `addr`, 0 if none.
  uint64_t SizeOf(uint64_t addr) const;

  // The free block (start, size) that contains `addr`, or (0, 0). After a
  // Free, this is the coalesced block the memory went back to: every page
  // wholly inside it may be returned to the OS.
  std::pair<uint64_t, uint64_t> FreeBlockContaining(uint64_t addr) const;

  // Every live allocation as (start, requested size), by address.
  std::vector<std::pair<uint64_t, uint64_t>> Allocations() const {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    for (const auto& [addr, live] : live_) out.emplace_back(addr, live.requested);
    return out;
  }

  // Drops every allocation (cudaDeviceReset).
  void Clear();

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  // Bytes reserved by live allocations (rounded sizes).
  uint64_t bytes_in_use() const { return bytes_in_use_; }
  size_t allocation_count() const { return live_.size(); }
  size_t free_block_count() const { return free_.size(); }

 private:
  uint64_t expected_ = 0;
  struct Live {
    uint64_t requested = 0;
    uint64_t reserved = 0;  // rounded up to alignment_
  };

  uint64_t base_;
  uint64_t size_;
  uint64_t alignment_;
  uint64_t bytes_in_use_ = 0;
  std::map<uint64_t, uint64_t> free_;  // start -> size, disjoint, never adjacent
  std::map<uint64_t, Live> live_;      // start -> sizes
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_ALLOCATOR_H_
