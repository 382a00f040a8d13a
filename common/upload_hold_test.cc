#include "common/upload_hold.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/content_hash.h"
#include "common/write_guard.h"
#include "gtest/gtest.h"

namespace revenant {
namespace {

std::string TempPath(const char* name) {
  const char* t = std::getenv("TEST_TMPDIR");
  return std::string(t != nullptr ? t : "/tmp") + "/" + name + "." + std::to_string(getpid());
}

// A place: 8 bytes of completion word, then the bytes.
struct Place {
  explicit Place(size_t n) : buf(n + 8, 0) {}
  char* data() { return buf.data() + 8; }
  uint64_t word() const {
    uint64_t w;
    std::memcpy(&w, buf.data(), 8);
    return w;
  }
  std::vector<char> buf;
};

// The agent's copy out before a device write into shared host memory looks
// at the holds it made only: one another table object added (a stand-in for
// a hold this agent did not make) stays held, its own overlapping ones are
// copied out, the others stay held.
TEST(HoldTableTest, CopyOutMineCopiesTheAgentsOwnHoldsInTheRange) {
  auto t = HoldTable::Create(TempPath("holds_mine"));
  ASSERT_TRUE(t.ok()) << t.status();
  auto other = HoldTable::Open((*t)->path());
  ASSERT_TRUE(other.ok()) << other.status();
  std::vector<char> src(3 << 20, 'm');
  Place p1(1 << 20), p2(1 << 20), p3(1 << 20);
  const uint64_t a = reinterpret_cast<uint64_t>(src.data());
  ASSERT_GE((*t)->Add(31, a, 1 << 20, 1, 4096), 0);
  ASSERT_GE((*t)->Add(32, a + (2 << 20), 1 << 20, 2, 4096), 0);
  ASSERT_GE((*other)->Add(33, a + (1 << 20), 1 << 20, 3, 4096), 0);
  auto place = [&](uint32_t file, uint64_t, uint64_t) {
    return file == 1 ? p1.data() : file == 2 ? p2.data() : p3.data();
  };
  // The whole buffer: its own two, not the other's.
  EXPECT_EQ((*t)->CopyOutMine(a, a + src.size(), place), 2);
  EXPECT_EQ((*t)->StateOf(31, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ((*t)->StateOf(32, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ((*t)->StateOf(33, absl::ZeroDuration()), HoldTable::kHeld);
  EXPECT_EQ(p1.word(), 31u);
  EXPECT_EQ(p2.word(), 32u);
  EXPECT_EQ(p3.word(), 0u);
  // Done ones are not copied again; a range touching none copies nothing.
  EXPECT_EQ((*t)->CopyOutMine(a, a + src.size(), place), 0);
  ASSERT_GE((*t)->Add(34, a, 1 << 20, 1, 4096), 0);
  EXPECT_EQ((*t)->CopyOutMine(a + (1 << 20), a + (1 << 20) + 1, place), 0);
  EXPECT_EQ((*t)->StateOf(34, absl::ZeroDuration()), HoldTable::kHeld);
  EXPECT_EQ((*t)->CopyOutMine(a + 5, a + 6, place), 1);
  EXPECT_EQ(p1.word(), 34u);
  EXPECT_EQ((*t)->copied_by_agent(), 3u);
}

// With the device's hash in the slot, a copy out checks the bytes it copied:
// a source changed since the upload (a device write nobody saw) leaves the
// place incomplete and the slot kChanged; an unchanged one completes; a
// hold whose hash has not arrived (or is another request's) is copied
// unchecked. Sizes off the copy's 4 MiB pieces and 8-byte words.
TEST(HoldTableTest, CopyOutChecksTheDevicesHash) {
  auto t = HoldTable::Create(TempPath("holds_hash"));
  ASSERT_TRUE(t.ok()) << t.status();
  const uint64_t n = (9 << 20) + 5;
  std::vector<char> good(n), bad(n), unchecked(n);
  for (uint64_t i = 0; i < n; ++i) good[i] = bad[i] = unchecked[i] = static_cast<char>(i * 7);
  Place pg(n), pb(n), pu(n);
  auto place = [&](uint32_t file, uint64_t, uint64_t) {
    return file == 1 ? pg.data() : file == 2 ? pb.data() : pu.data();
  };
  const int sg = (*t)->Add(41, reinterpret_cast<uint64_t>(good.data()), n, 1, 4096);
  const int sb = (*t)->Add(42, reinterpret_cast<uint64_t>(bad.data()), n, 2, 4096);
  const int su = (*t)->Add(43, reinterpret_cast<uint64_t>(unchecked.data()), n, 3, 4096);
  ASSERT_GE(sg, 0);
  ASSERT_GE(sb, 0);
  ASSERT_GE(su, 0);
  // What the device received, as the backend stores it: hash, then tag.
  const uint64_t h = ContentHash(good.data(), n);
  for (int s : {sg, sb, su}) (*t)->HashWords(s)[0] = h;
  (*t)->HashWords(sg)[1] = 41;
  (*t)->HashWords(sb)[1] = 42;
  (*t)->HashWords(su)[1] = 7;  // another request's: not this hold's hash
  uint64_t got = 0;
  EXPECT_TRUE((*t)->HashOf(41, &got));
  EXPECT_EQ(got, h);
  EXPECT_FALSE((*t)->HashOf(43, &got));
  bad[n - 1] ^= 1;        // the last, partial word
  unchecked[n / 2] ^= 1;  // unchecked: copied as it is
  int lost = 0;
  for (auto* v : {&good, &bad, &unchecked}) {
    const uint64_t a = reinterpret_cast<uint64_t>(v->data());
    (*t)->CopyOut(a, a + 1, place, /*by_app=*/true, 8, &lost);
  }
  EXPECT_EQ((*t)->StateOf(41, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ(pg.word(), 41u);
  EXPECT_EQ((*t)->StateOf(42, absl::ZeroDuration()), HoldTable::kChanged);
  EXPECT_EQ(pb.word(), 0u);
  EXPECT_EQ((*t)->StateOf(43, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ(lost, 0);  // the places were there
  EXPECT_EQ((*t)->changed(), 1u);
  EXPECT_EQ((*t)->copied_by_app(), 2u);
  // A slot used again starts without a hash.
  ASSERT_TRUE((*t)->FreeBefore(100, absl::Seconds(1)));
  const int again = (*t)->Add(44, reinterpret_cast<uint64_t>(good.data()), n, 1, 4096);
  ASSERT_GE(again, 0);
  EXPECT_EQ((*t)->HashWords(again)[1], 0u);
}

TEST(HoldTableTest, CopyOutFillsThePlaceThenItsWordThenDone) {
  auto t = HoldTable::Create(TempPath("holds"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<char> src_a(1 << 20, 'a'), src_b(1 << 20, 'b');
  Place pa(src_a.size()), pb(src_b.size());
  const uint64_t a = reinterpret_cast<uint64_t>(src_a.data());
  const uint64_t b = reinterpret_cast<uint64_t>(src_b.data());
  ASSERT_GE((*t)->Add(11, a, src_a.size(), 3, 4096), 0);
  ASSERT_GE((*t)->Add(12, b, src_b.size(), 4, 8192), 0);
  EXPECT_EQ((*t)->held(), 2);
  std::vector<std::pair<uint32_t, uint64_t>> asked;
  auto place = [&](uint32_t file, uint64_t offset, uint64_t) -> char* {
    asked.emplace_back(file, offset);
    return file == 3 ? pa.data() : pb.data();
  };
  // Only the hold overlapping the range is copied.
  EXPECT_EQ((*t)->CopyOut(a + 100, a + 200, place, /*by_app=*/true), 1);
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0], std::make_pair(3u, uint64_t{4096}));
  EXPECT_EQ(pa.word(), 11u);
  EXPECT_EQ(std::memcmp(pa.data(), src_a.data(), src_a.size()), 0);
  EXPECT_EQ(pb.word(), 0u);
  EXPECT_EQ((*t)->StateOf(11, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ((*t)->StateOf(12, absl::ZeroDuration()), HoldTable::kHeld);
  // Copied once: a second copy out of the same range finds nothing held.
  EXPECT_EQ((*t)->CopyOut(a, a + src_a.size(), place, true), 0);
  EXPECT_EQ((*t)->copied_by_app(), 1u);
  EXPECT_EQ((*t)->CopyOut(0, UINT64_MAX, place, /*by_app=*/false), 1);
  EXPECT_EQ(pb.word(), 12u);
  EXPECT_EQ((*t)->copied_by_agent(), 1u);
  EXPECT_EQ((*t)->held(), 0);
  // The other process's view: the same file.
  auto other = HoldTable::Open((*t)->path());
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->StateOf(12, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ((*other)->added(), 2u);
}

TEST(HoldTableTest, UnreachablePlaceIsLostAndFreedSlotsAreReusedWithNewFields) {
  auto t = HoldTable::Create(TempPath("holds2"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<char> src(4096, 'x');
  const uint64_t a = reinterpret_cast<uint64_t>(src.data());
  ASSERT_GE((*t)->Add(5, a, src.size(), 1, 4096), 0);
  int lost = 0;
  EXPECT_EQ((*t)->CopyOut(a, a + 1, [](uint32_t, uint64_t, uint64_t) -> char* { return nullptr; },
                          true, 1, &lost),
            0);
  EXPECT_EQ(lost, 1);
  EXPECT_EQ((*t)->StateOf(5, absl::ZeroDuration()), HoldTable::kLost);
  EXPECT_TRUE((*t)->FreeFile(1, absl::ZeroDuration()));
  EXPECT_EQ((*t)->StateOf(5, absl::ZeroDuration()), HoldTable::kFree);
  // Every slot: the table fills, then says so.
  for (int i = 0; i < HoldTable::kSlots; ++i) ASSERT_GE((*t)->Add(100 + i, a, 16, 2, 4096), 0);
  EXPECT_EQ((*t)->Add(99999, a, 16, 2, 4096), -1);
  EXPECT_TRUE((*t)->FreeBefore(100 + 10, absl::ZeroDuration()));
  EXPECT_EQ((*t)->held(), HoldTable::kSlots - 10);
  Place p(16);
  ASSERT_GE((*t)->Add(7777, a, 16, 9, 4096), 0);
  std::vector<uint32_t> files;
  (*t)->CopyOut(a, a + 16, [&](uint32_t f, uint64_t, uint64_t) { files.push_back(f); return p.data(); },
                true, 1);
  EXPECT_EQ(files.size(), static_cast<size_t>(HoldTable::kSlots - 10 + 1));
  EXPECT_EQ(p.word() >= 110, true);
}

TEST(HoldTableTest, KernelParametersPointingIntoAHeldSourceCopyItOut) {
  auto t = HoldTable::Create(TempPath("holds4"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<char> src(1 << 16, 'k');
  Place p(src.size());
  const uint64_t a = reinterpret_cast<uint64_t>(src.data());
  ASSERT_GE((*t)->Add(21, a, src.size(), 1, 4096), 0);
  auto place = [&](uint32_t, uint64_t, uint64_t) { return p.data(); };
  // Parameters: an int, then a pointer elsewhere, then one inside the source.
  struct {
    int32_t n;
    int32_t pad;
    uint64_t other;
    uint64_t inside;
  } args{7, 0, a + src.size(), 0};
  EXPECT_EQ((*t)->CopyOutNamed(reinterpret_cast<const char*>(&args), sizeof(args), place), 0);
  EXPECT_EQ((*t)->StateOf(21, absl::ZeroDuration()), HoldTable::kHeld);
  args.inside = a + 100;
  EXPECT_EQ((*t)->CopyOutNamed(reinterpret_cast<const char*>(&args), sizeof(args), place), 1);
  EXPECT_EQ((*t)->StateOf(21, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ(p.word(), 21u);
  EXPECT_EQ(std::memcmp(p.data(), src.data(), src.size()), 0);
}

TEST(HoldTableTest, FreeWaitsForACopyInProgressWithinItsBound) {
  auto t = HoldTable::Create(TempPath("holds3"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<char> src(4096, 'y');
  Place p(src.size());
  const uint64_t a = reinterpret_cast<uint64_t>(src.data());
  ASSERT_GE((*t)->Add(8, a, src.size(), 2, 4096), 0);
  std::atomic<bool> inside{false};
  std::thread copier([&] {
    (*t)->CopyOut(a, a + 1, [&](uint32_t, uint64_t, uint64_t) {
      inside.store(true);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      return p.data();
    }, true, 1);
  });
  while (!inside.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_FALSE((*t)->FreeFile(2, absl::Milliseconds(10)));  // still copying
  EXPECT_EQ((*t)->StateOf(8, absl::ZeroDuration()), HoldTable::kCopying);
  EXPECT_EQ((*t)->StateOf(8, absl::Seconds(5)), HoldTable::kDone);  // waits for the copy
  EXPECT_TRUE((*t)->FreeFile(2, absl::Seconds(5)));
  copier.join();
  EXPECT_EQ(p.word(), 8u);
}

TEST(HoldTableTest, ACopyLeftByADeadCopierIsTakenOver) {
  auto t = HoldTable::Create(TempPath("holds5"));
  ASSERT_TRUE(t.ok()) << t.status();
  std::vector<char> src(4096, 'z');
  Place p(src.size());
  const uint64_t a = reinterpret_cast<uint64_t>(src.data());
  ASSERT_GE((*t)->Add(9, a, src.size(), 2, 4096), 0);
  // The agent claims the slot and stops (as if killed) before the copy.
  std::atomic<bool> inside{false}, go{false};
  std::thread agent([&] {
    (*t)->CopyOut(a, a + 1, [&](uint32_t, uint64_t, uint64_t) -> char* {
      inside.store(true);
      while (!go.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      return nullptr;
    }, false, 1);
  });
  while (!inside.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  auto place = [&](uint32_t, uint64_t, uint64_t) { return p.data(); };
  // An ordinary copy out leaves it alone; the shim's, with its agent dead,
  // finishes it.
  EXPECT_EQ((*t)->CopyOut(a, a + 1, place, true), 0);
  EXPECT_EQ((*t)->StateOf(9, absl::ZeroDuration()), HoldTable::kCopying);
  EXPECT_EQ((*t)->CopyOut(0, ~uint64_t{0}, place, true, 1, nullptr, /*take_over=*/true), 1);
  EXPECT_EQ((*t)->StateOf(9, absl::ZeroDuration()), HoldTable::kDone);
  EXPECT_EQ(p.word(), 9u);
  go.store(true);
  agent.join();
}

// A shared tmpfs mapping, as the shim's pinned memory (the job directory is
// on tmpfs; write protection of shared file memory is for shmem only).
char* MapShared(size_t n) {
  const std::string path = "/dev/shm/upload_hold_test." + std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(n)) != 0) return nullptr;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  unlink(path.c_str());
  return p == MAP_FAILED ? nullptr : static_cast<char*>(p);
}

TEST(WriteGuardTest, WritesWaitForTheHandlerUserAndKernelMode) {
  if (absl::Status s = WriteGuard::Available(); !s.ok()) {
    GTEST_SKIP() << "no userfaultfd write protection here: " << s;
  }
  constexpr size_t kN = 8 << 20;
  char* m = MapShared(kN);
  ASSERT_NE(m, nullptr);
  std::memset(m, 7, kN);
  std::vector<char> copy(kN, 0);
  std::atomic<int> calls{0};
  uint64_t seen_lo = 0, seen_hi = 0;
  auto g = WriteGuard::Create([&](uint64_t lo, uint64_t hi) {
    seen_lo = lo;
    seen_hi = hi;
    std::memcpy(copy.data(), reinterpret_cast<const char*>(lo), hi - lo);
    calls.fetch_add(1);
  });
  ASSERT_TRUE(g.ok()) << g.status();
  const uint64_t base = reinterpret_cast<uint64_t>(m);
  const absl::Status reg = (*g)->Register(base, kN);
  ASSERT_TRUE(reg.ok()) << reg;
  ASSERT_TRUE((*g)->Protect(base + (1 << 20), 2 << 20).ok());
  EXPECT_EQ((*g)->protects(), 1u);
  // Covered already: no second protection.
  ASSERT_TRUE((*g)->Protect(base + (1 << 20) + 4096, 4096).ok());
  EXPECT_EQ((*g)->protects(), 1u);
  // Outside the protected part: no fault.
  m[6 << 20] = 1;
  EXPECT_EQ(calls.load(), 0);
  // A user-mode write inside: the handler ran first and saw the old bytes.
  m[2 << 20] = 9;
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen_lo, base);
  EXPECT_EQ(seen_hi, base + kN);
  EXPECT_EQ(copy[2 << 20], 7);
  EXPECT_EQ(m[2 << 20], 9);
  EXPECT_EQ((*g)->faults(), 1u);
  // Lifted: later writes run free.
  m[(2 << 20) + 1] = 9;
  EXPECT_EQ((*g)->faults(), 1u);
  // A kernel-mode write (pread into the protected buffer) waits too, and
  // succeeds.
  ASSERT_TRUE((*g)->Protect(base, 1 << 20).ok());
  const std::string path = TempPath("guard_src");
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
  ASSERT_GE(fd, 0);
  std::vector<char> ones(1 << 16, 1);
  ASSERT_EQ(write(fd, ones.data(), ones.size()), static_cast<ssize_t>(ones.size()));
  EXPECT_EQ(pread(fd, m + 4096, ones.size(), 0), static_cast<ssize_t>(ones.size()));
  close(fd);
  unlink(path.c_str());
  EXPECT_EQ(calls.load(), 2);
  EXPECT_EQ(copy[4096], 7);
  EXPECT_EQ(m[4096], 1);
  (*g)->Unregister(base, kN);
  munmap(m, kN);
}

}  // namespace
}  // namespace revenant
