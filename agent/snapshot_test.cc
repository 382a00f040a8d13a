#include "agent/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <string>

#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

// A fake device: allocations are host buffers keyed by address.
struct FakeDevice {
  std::map<uint64_t, std::string> mem;
  AllocationTable Table() const {
    AllocationTable t;
    for (const auto& [a, b] : mem) t.emplace_back(a, b.size());
    return t;
  }
  DeviceRead Reader() {
    return [this](uint64_t addr, void* dst, size_t n) -> absl::Status {
      for (auto& [a, b] : mem) {
        if (addr >= a && addr + n <= a + b.size()) {
          std::memcpy(dst, b.data() + (addr - a), n);
          return absl::OkStatus();
        }
      }
      return absl::InvalidArgumentError("not device memory");
    };
  }
  DeviceWrite Writer() {
    return [this](uint64_t addr, const void* src, size_t n) -> absl::Status {
      for (auto& [a, b] : mem) {
        if (addr >= a && addr + n <= a + b.size()) {
          std::memcpy(b.data() + (addr - a), src, n);
          return absl::OkStatus();
        }
      }
      return absl::InvalidArgumentError("not device memory");
    };
  }
};

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/snapshot_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/snapshots";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  FakeDevice MakeDevice(uint32_t seed) {
    std::mt19937 rng(seed);
    FakeDevice d;
    uint64_t addr = 0x200000000000ull;
    for (size_t size : {size_t{1}, size_t{4096}, size_t{100003}, size_t{0x10000}}) {
      std::string b(size, '\0');
      for (char& c : b) c = static_cast<char>(rng());
      d.mem[addr] = b;
      addr += (size + 0xfff) & ~uint64_t{0xfff};
    }
    return d;
  }
  void FlipByte(const std::string& path, off_t offset) {
    int fd = open(path.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    char c = 0;
    ASSERT_EQ(pread(fd, &c, 1, offset), 1);
    c ^= 0x40;
    ASSERT_EQ(pwrite(fd, &c, 1, offset), 1);
    close(fd);
  }
  std::string root_, dir_;
};

TEST_F(SnapshotTest, WriteOpenLoadRoundTrip) {
  std::printf("seed 20261129\n");
  FakeDevice d = MakeDevice(20261129);
  SnapshotStore store(dir_, 3);
  absl::StatusOr<SnapshotWriteStats> st = store.Write(7, 1234, d.Table(), d.Reader());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->allocations, 4u);
  EXPECT_EQ(st->bytes, 1u + 4096u + 100003u + 0x10000u);
  FakeDevice restored = d;
  for (auto& [a, b] : restored.mem) std::fill(b.begin(), b.end(), '\0');
  absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(7);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->minibatch(), 7u);
  EXPECT_EQ((*s)->boundary_seq(), 1234u);
  EXPECT_EQ((*s)->allocations(), d.Table());
  uint64_t skipped = 99;
  ASSERT_TRUE((*s)->Load(restored.Writer(), restored.Table(), &skipped).ok());
  EXPECT_EQ(skipped, 0u);
  EXPECT_EQ(restored.mem, d.mem);
}

TEST_F(SnapshotTest, MissingSnapshotIsNotFoundAndNamesWhatExists) {
  FakeDevice d = MakeDevice(1);
  SnapshotStore store(dir_, 0);
  ASSERT_TRUE(store.Write(4, 10, d.Table(), d.Reader()).ok());
  ASSERT_TRUE(store.Write(5, 20, d.Table(), d.Reader()).ok());
  absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(6);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
  EXPECT_NE(s.status().message().find("4, 5"), std::string::npos) << s.status();
  store.DropBefore(5);
  EXPECT_EQ(store.List(), std::vector<uint64_t>{5});
}

TEST_F(SnapshotTest, EveryCorruptionIsRefused) {
  FakeDevice d = MakeDevice(2);
  SnapshotStore store(dir_, 0);
  ASSERT_TRUE(store.Write(3, 10, d.Table(), d.Reader()).ok());
  const std::string path = store.PathOf(3);
  const off_t size = static_cast<off_t>(std::filesystem::file_size(path));
  // Header, table, header CRC, first and last data byte.
  for (off_t offset : {off_t{0}, off_t{20}, off_t{45}, off_t{40 + 4 * 24 + 1}, size - 1,
                       size / 2}) {
    ASSERT_TRUE(store.Write(3, 10, d.Table(), d.Reader()).ok());
    FlipByte(path, offset);
    absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(3);
    ASSERT_FALSE(s.ok()) << "flipped byte " << offset << " went unnoticed";
    EXPECT_TRUE(absl::IsDataLoss(s.status())) << s.status();
  }
  // Truncated and extended files.
  ASSERT_TRUE(store.Write(3, 10, d.Table(), d.Reader()).ok());
  ASSERT_EQ(truncate(path.c_str(), size - 7), 0);
  EXPECT_TRUE(absl::IsDataLoss(store.Open(3).status()));
  ASSERT_EQ(truncate(path.c_str(), size + 7), 0);
  EXPECT_TRUE(absl::IsDataLoss(store.Open(3).status()));
  ASSERT_EQ(truncate(path.c_str(), 10), 0);
  EXPECT_TRUE(absl::IsDataLoss(store.Open(3).status()));
}

TEST_F(SnapshotTest, DropBeforeKeepsOnlyTheNeededSnapshots) {
  FakeDevice d = MakeDevice(7);
  SnapshotStore dead(dir_, 0);  // a dead agent's snapshots
  ASSERT_TRUE(dead.Write(3, 10, d.Table(), d.Reader()).ok());
  ASSERT_TRUE(dead.Write(4, 20, d.Table(), d.Reader()).ok());
  SnapshotStore store(dir_, 0);  // its replacement
  ASSERT_TRUE(store.Write(5, 30, d.Table(), d.Reader()).ok());
  store.DropBefore(5);  // the first call scans: the dead agent's go too
  EXPECT_EQ(store.List(), std::vector<uint64_t>{5});
  ASSERT_TRUE(store.Write(6, 40, d.Table(), d.Reader()).ok());
  EXPECT_EQ(store.List(), (std::vector<uint64_t>{5, 6}));
  store.DropBefore(6);
  EXPECT_EQ(store.List(), std::vector<uint64_t>{6});
  EXPECT_TRUE(store.Open(6).ok());
}

TEST_F(SnapshotTest, OtherRankOrRenamedFileIsRefused) {
  FakeDevice d = MakeDevice(3);
  SnapshotStore store(dir_, 0);
  ASSERT_TRUE(store.Write(3, 10, d.Table(), d.Reader()).ok());
  SnapshotStore other(dir_, 1);
  EXPECT_TRUE(absl::IsDataLoss(other.Open(3).status()));
  ASSERT_EQ(std::rename(store.PathOf(3).c_str(), store.PathOf(4).c_str()), 0);
  EXPECT_TRUE(absl::IsDataLoss(store.Open(4).status()));
}

TEST_F(SnapshotTest, CrashBeforeRenameLeavesThePreviousSnapshot) {
  FakeDevice d = MakeDevice(4);
  SnapshotStore store(dir_, 0);
  ASSERT_TRUE(store.Write(3, 10, d.Table(), d.Reader()).ok());
  // A crash hook that "dies" by throwing away the rest of Write.
  struct Died {};
  try {
    (void)store.Write(4, 20, d.Table(), d.Reader(), [] { throw Died(); });
    FAIL() << "the hook did not run";
  } catch (const Died&) {
  }
  EXPECT_EQ(store.List(), std::vector<uint64_t>{3});
  EXPECT_TRUE(absl::IsNotFound(store.Open(4).status()));
  EXPECT_TRUE(store.Open(3).ok());
  store.DropBefore(4);  // also removes the leftover temporary file
  EXPECT_TRUE(store.List().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-4"));
}

TEST_F(SnapshotTest, LoadSkipsAllocationsThatNoLongerExist) {
  FakeDevice d = MakeDevice(5);
  SnapshotStore store(dir_, 0);
  ASSERT_TRUE(store.Write(2, 10, d.Table(), d.Reader()).ok());
  FakeDevice now = d;
  now.mem.erase(now.mem.begin());
  absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(2);
  ASSERT_TRUE(s.ok());
  uint64_t skipped = 0;
  ASSERT_TRUE((*s)->Load(now.Writer(), now.Table(), &skipped).ok());
  EXPECT_EQ(skipped, 1u);
}

TEST_F(SnapshotTest, ReadErrorLeavesNoFile) {
  FakeDevice d = MakeDevice(6);
  SnapshotStore store(dir_, 0);
  AllocationTable t = d.Table();
  t.emplace_back(0x10, 8);  // not device memory
  absl::StatusOr<SnapshotWriteStats> st = store.Write(2, 10, t, d.Reader());
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(store.List().empty());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-2"));
}

}  // namespace
}  // namespace agent
}  // namespace revenant
