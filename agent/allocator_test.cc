#include "agent/allocator.h"

#include <cstdint>
#include <iostream>
#include <map>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

constexpr uint64_t kBase = 0x200000000000ull;

TEST(FixedRangeAllocatorTest, FirstFitAlignedAddresses) {
  FixedRangeAllocator a(kBase, 1 << 20);
  EXPECT_EQ(*a.Allocate(1000), kBase);
  EXPECT_EQ(*a.Allocate(10), kBase + 1024);
  EXPECT_EQ(*a.Allocate(256), kBase + 1024 + 256);
  EXPECT_EQ(a.bytes_in_use(), 1024u + 256 + 256);
  EXPECT_EQ(a.allocation_count(), 3u);
  EXPECT_EQ(a.SizeOf(kBase), 1000u);
  EXPECT_EQ(a.SizeOf(kBase + 8), 0u);
}

TEST(FixedRangeAllocatorTest, SameSequenceSameAddressesAcrossInstances) {
  FixedRangeAllocator a(kBase, 1 << 24), b(kBase, 1 << 24);
  std::vector<uint64_t> pa, pb;
  for (int round = 0; round < 3; ++round) {
    for (uint64_t size : {100u, 5000u, 1u, 70000u, 256u}) {
      pa.push_back(*a.Allocate(size * (round + 1)));
      pb.push_back(*b.Allocate(size * (round + 1)));
    }
    ASSERT_TRUE(a.Free(pa[pa.size() - 2]).ok());
    ASSERT_TRUE(b.Free(pb[pb.size() - 2]).ok());
    ASSERT_TRUE(a.Free(pa[round]).ok());
    ASSERT_TRUE(b.Free(pb[round]).ok());
  }
  EXPECT_EQ(pa, pb);
}

TEST(FixedRangeAllocatorTest, CoalescesNeighbours) {
  FixedRangeAllocator a(kBase, 4096);
  uint64_t p0 = *a.Allocate(1024), p1 = *a.Allocate(1024), p2 = *a.Allocate(1024);
  EXPECT_EQ(a.free_block_count(), 1u);  // the last 1024
  ASSERT_TRUE(a.Free(p0).ok());
  ASSERT_TRUE(a.Free(p2).ok());  // merges with the tail
  EXPECT_EQ(a.free_block_count(), 2u);
  ASSERT_TRUE(a.Free(p1).ok());  // merges both sides
  EXPECT_EQ(a.free_block_count(), 1u);
  EXPECT_EQ(a.FreeBlockContaining(kBase + 2000), std::make_pair(kBase, uint64_t{4096}));
  // The whole range is one block again.
  EXPECT_EQ(*a.Allocate(4096), kBase);
  EXPECT_EQ(a.FreeBlockContaining(kBase), std::make_pair(uint64_t{0}, uint64_t{0}));
}

TEST(FixedRangeAllocatorTest, Exhaustion) {
  FixedRangeAllocator a(kBase, 4096);
  EXPECT_EQ(a.Allocate(8192).status().code(), absl::StatusCode::kResourceExhausted);
  uint64_t p = *a.Allocate(3000);
  EXPECT_EQ(a.Allocate(2000).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(*a.Allocate(1024), p + 3072);
  EXPECT_EQ(a.Allocate(1).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(a.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Allocate(~uint64_t{0}).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(FixedRangeAllocatorTest, BadFrees) {
  FixedRangeAllocator a(kBase, 1 << 20);
  uint64_t p = *a.Allocate(512);
  EXPECT_EQ(a.Free(p + 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a.Free(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(a.Free(p).ok());
  EXPECT_EQ(a.Free(p).code(), absl::StatusCode::kInvalidArgument);  // double free
  EXPECT_EQ(a.bytes_in_use(), 0u);
}

TEST(FixedRangeAllocatorTest, ContainsEdges) {
  FixedRangeAllocator a(kBase, 1 << 20);
  uint64_t p = *a.Allocate(1000);  // reserved 1024
  uint64_t q = *a.Allocate(100);
  EXPECT_TRUE(a.Contains(p, 1000));
  EXPECT_TRUE(a.Contains(p, 0));
  EXPECT_TRUE(a.Contains(p + 999, 1));
  EXPECT_FALSE(a.Contains(p, 1001));          // past the requested bytes
  EXPECT_FALSE(a.Contains(p + 1000, 0));      // one past the end
  EXPECT_FALSE(a.Contains(p + 1000, 24));     // padding is not the allocation
  EXPECT_FALSE(a.Contains(p + 500, 1024));    // spans two allocations
  EXPECT_FALSE(a.Contains(kBase - 1, 2));
  EXPECT_FALSE(a.Contains(0, 0));
  EXPECT_FALSE(a.Contains(p + 1, ~uint64_t{0}));  // no overflow
  EXPECT_TRUE(a.Contains(q + 50, 50));
  ASSERT_TRUE(a.Free(q).ok());
  EXPECT_FALSE(a.Contains(q, 1));
}

// A random sequence checked against a byte-granular model of the range.
TEST(FixedRangeAllocatorTest, RandomSequenceMatchesModel) {
  const uint32_t seed = std::random_device{}();
  std::cout << "seed " << seed << std::endl;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  constexpr uint64_t kSize = 1 << 16, kAlign = 64;
  FixedRangeAllocator a(kBase, kSize, kAlign), twin(kBase, kSize, kAlign);
  std::vector<bool> used(kSize / kAlign, false);  // per alignment unit
  std::map<uint64_t, uint64_t> live;               // addr -> requested
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      uint64_t size = 1 + rng() % 3000;
      uint64_t units = (size + kAlign - 1) / kAlign;
      // Model first fit: the lowest run of `units` free units.
      int64_t expect = -1;
      for (uint64_t i = 0, run = 0; i < used.size(); ++i) {
        run = used[i] ? 0 : run + 1;
        if (run == units) {
          expect = static_cast<int64_t>(i + 1 - units);
          break;
        }
      }
      absl::StatusOr<uint64_t> p = a.Allocate(size);
      absl::StatusOr<uint64_t> t = twin.Allocate(size);
      if (expect < 0) {
        ASSERT_EQ(p.status().code(), absl::StatusCode::kResourceExhausted) << step;
        ASSERT_FALSE(t.ok());
        continue;
      }
      ASSERT_TRUE(p.ok()) << step << " " << p.status();
      ASSERT_EQ(*p, kBase + expect * kAlign) << step;
      ASSERT_EQ(*t, *p);
      for (uint64_t u = 0; u < units; ++u) used[expect + u] = true;
      live[*p] = size;
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(a.Free(it->first).ok());
      ASSERT_TRUE(twin.Free(it->first).ok());
      uint64_t first = (it->first - kBase) / kAlign;
      for (uint64_t u = 0; u < (it->second + kAlign - 1) / kAlign; ++u) used[first + u] = false;
      live.erase(it);
    }
    uint64_t in_use = 0;
    for (bool u : used) in_use += u ? kAlign : 0;
    ASSERT_EQ(a.bytes_in_use(), in_use);
    ASSERT_EQ(a.allocation_count(), live.size());
    if (!live.empty()) {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ASSERT_TRUE(a.Contains(it->first, it->second));
      ASSERT_FALSE(a.Contains(it->first, it->second + 1));
    }
  }
}

TEST(FixedRangeAllocatorTest, ExpectNextReplaysACompactedSequence) {
  // Original run: A, B, free A, C (first fit puts C where A was).
  FixedRangeAllocator a(0x200000000000ull, 1 << 20);
  const uint64_t pa = *a.Allocate(4096);
  const uint64_t pb = *a.Allocate(4096);
  ASSERT_TRUE(a.Free(pa).ok());
  const uint64_t pc = *a.Allocate(1000);
  EXPECT_EQ(pc, pa);
  // A replay of the compacted journal (B, C) with the recorded addresses.
  FixedRangeAllocator r(0x200000000000ull, 1 << 20);
  r.ExpectNext(pb);
  EXPECT_EQ(*r.Allocate(4096), pb);
  r.ExpectNext(pc);
  EXPECT_EQ(*r.Allocate(1000), pc);
  EXPECT_TRUE(r.Contains(pb, 4096));
  EXPECT_TRUE(r.Contains(pc, 1000));
  // Later allocations still work, and an occupied address is refused.
  EXPECT_TRUE(r.Allocate(100).ok());
  EXPECT_EQ(r.AllocateAt(pb, 16).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r.AllocateAt(pb + 1, 16).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
