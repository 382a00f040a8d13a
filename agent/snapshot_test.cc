#include "agent/snapshot.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <functional>
#include <memory>
#include <random>
#include <string>

#include "absl/synchronization/notification.h"
#include "common/crc32c.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

// A fake device: allocations are host buffers keyed by address.
struct FakeDevice {
  std::map<uint64_t, std::string> mem;
  uint64_t LiveBytes() const {
    uint64_t n = 0;
    for (const auto& [a, b] : mem) n += b.size();
    return n;
  }
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

// A new allocation of `size` seeded random bytes at `addr` of `d`.
void AddRandom(FakeDevice& d, uint64_t addr, size_t size, uint32_t seed) {
  std::string b(size, '\0');
  std::mt19937 rng(seed);
  for (char& c : b) c = static_cast<char>(rng());
  d.mem[addr] = b;
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/snapshot_test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/snapshots";
  }
  void TearDown() override {
    std::filesystem::remove_all(root_);
    for (const std::string& r : shm_roots_) std::filesystem::remove_all(r);
  }
  // A folder on tmpfs (as the agent's /dev/shm), where pages can be made
  // resident ahead and counted; removed at TearDown. Empty if none.
  std::string ShmRoot() {
    char tmpl[] = "/dev/shm/snapshot_test.XXXXXX";
    if (mkdtemp(tmpl) == nullptr) return "";
    shm_roots_.emplace_back(tmpl);
    return shm_roots_.back();
  }
  std::vector<std::string> shm_roots_;
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
  // The store's directory emptied, for a test's next case.
  void EmptyDir() {
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
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

TEST(Crc32cTest, CombineAndParallelMatchTheSerialValue) {
  std::mt19937 rng(20261202);
  std::string data(40u << 20, '\0');
  for (char& c : data) c = static_cast<char>(rng());
  for (size_t split : {size_t{0}, size_t{1}, size_t{7}, size_t{4096}, size_t{1} << 20,
                       data.size() - 3, data.size()}) {
    const uint32_t a = crc32c::Value(data.data(), split);
    const uint32_t b = crc32c::Value(data.data() + split, data.size() - split);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - split), crc32c::Value(data.data(), data.size()))
        << "split at " << split;
  }
  for (int threads : {1, 2, 3, 4, 8}) {
    EXPECT_EQ(Crc32cMany({{data.data(), data.size()}}, threads)[0],
              crc32c::Value(data.data(), data.size()))
        << threads << " threads";
  }
  EXPECT_EQ(Crc32cMany({{data.data(), 0}}, 4)[0], 0u);
  // Many ranges (a snapshot's allocations) sharing the threads: empty ones,
  // ones below, at and past a piece (4 MiB), one spanning several.
  std::vector<std::pair<const char*, uint64_t>> ranges;
  uint64_t off = 0;
  for (uint64_t size : {uint64_t{0}, uint64_t{1}, uint64_t{4095}, uint64_t{4} << 20,
                        (uint64_t{4} << 20) + 1, uint64_t{3} << 20, uint64_t{0},
                        (uint64_t{13} << 20) + 7, uint64_t{64}}) {
    ranges.emplace_back(data.data() + off, size);
    off += size;
  }
  ASSERT_LE(off, data.size());
  for (int threads : {1, 2, 3, 8}) {
    const std::vector<uint32_t> crcs = Crc32cMany(ranges, threads);
    ASSERT_EQ(crcs.size(), ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(crcs[i], crc32c::Value(ranges[i].first, ranges[i].second))
          << "range " << i << ", " << threads << " threads";
    }
  }
  EXPECT_TRUE(Crc32cMany({}, 4).empty());
}

// A copier over a FakeDevice that counts registrations, as the session's
// over a backend does.
struct CountingCopier {
  FakeDevice* device = nullptr;
  std::map<void*, size_t> registered;
  int registrations = 0, unregistrations = 0, waits = 0, queued = 0;
  SnapshotCopier Make() {
    SnapshotCopier c;
    c.copy = [this](uint64_t addr, void* dst, size_t n) {
      ++queued;
      bool reg = false;
      for (const auto& [p, len] : registered) {
        reg |= dst >= p && static_cast<char*>(dst) + n <= static_cast<char*>(p) + len;
      }
      if (!reg) return absl::FailedPreconditionError("copy into unregistered memory");
      return device->Reader()(addr, dst, n);
    };
    c.wait = [this] {
      ++waits;
      return absl::OkStatus();
    };
    c.register_host = [this](void* p, size_t n) {
      ++registrations;
      registered[p] = n;
      return absl::OkStatus();
    };
    c.unregister_host = [this](void* p) {
      ++unregistrations;
      registered.erase(p);
    };
    return c;
  }
};

// A store without the spare whose snapshots stage through 64 KiB buffers.
SnapshotStore::Options WithoutSpareStaged(int crc_threads = 1) {
  SnapshotStore::Options o;
  o.keep_spare = false;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.crc_threads = crc_threads;
  return o;
}

// Copying through `cc`, snapshots 1 and 2 of `cc`'s device written, then 1
// dropped: its file becomes the spare.
void WriteTwoKeepingTheFirstAsSpare(SnapshotStore& store, CountingCopier& cc) {
  store.SetCopier(cc.Make());
  const FakeDevice& d = *cc.device;
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  ASSERT_TRUE(store.Write(2, 2, d.Table()).ok());
  store.DropBefore(2);
}

// The fill callback of DrainStaged for a staged `pending`: "the device"
// copies each turn up to the one asked for through `cc` (which refuses
// copies into memory not registered), in order, once.
std::function<absl::Status(size_t)> FillTurns(CountingCopier& cc,
                                              const SnapshotStore::Pending& pending) {
  auto filled = std::make_shared<size_t>(0);  // the turns copied so far
  return [&cc, &pending, filled](size_t t) -> absl::Status {
    const auto& copies = pending.staged_copies();
    const auto& ends = pending.staged_turn_ends();
    for (size_t& f = *filled; f <= t; ++f) {
      for (size_t c = f == 0 ? 0 : ends[f - 1]; c < ends[f]; ++c) {
        if (absl::Status s = cc.Make().copy(copies[c].addr, copies[c].dst, copies[c].size);
            !s.ok()) {
          return s;
        }
      }
    }
    return absl::OkStatus();
  };
}

void ExpectLoadsTo(SnapshotStore& store, uint64_t minibatch, const FakeDevice& want) {
  absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(minibatch);
  ASSERT_TRUE(s.ok()) << s.status();
  FakeDevice restored = want;
  for (auto& [a, b] : restored.mem) std::fill(b.begin(), b.end(), '\0');
  uint64_t skipped = 0;
  ASSERT_TRUE((*s)->Load(restored.Writer(), restored.Table(), &skipped).ok());
  EXPECT_EQ(restored.mem, want.mem) << "minibatch " << minibatch;
}

TEST_F(SnapshotTest, SteadyStateReusesTheSpareAndRegistersNothingNew) {
  FakeDevice d = MakeDevice(11);
  CountingCopier cc{&d};
  const uint64_t live = d.LiveBytes();
  {
    SnapshotStore store(dir_, 0);
    store.SetCopier(cc.Make());
    std::mt19937 rng(11);
    for (uint64_t m = 1; m <= 6; ++m) {
      for (auto& [a, b] : d.mem) b[rng() % b.size()] = static_cast<char>(rng());
      absl::StatusOr<SnapshotWriteStats> st = store.Write(m, 10 * m, d.Table());
      ASSERT_TRUE(st.ok()) << st.status();
      // The first snapshot's spare is made ahead (Options::spare_ahead).
      EXPECT_EQ(st->reused, m >= 2) << "minibatch " << m;
      ExpectLoadsTo(store, m, d);
      store.DropBefore(m);
      EXPECT_EQ(store.List(), std::vector<uint64_t>{m});
    }
    // Two files, each mapped and registered once; the spare is one of them.
    EXPECT_EQ(store.files_mapped(), 2u);
    EXPECT_EQ(store.spares_made_ahead(), 1u);
    EXPECT_EQ(cc.registrations, 2);
    EXPECT_EQ(cc.unregistrations, 0);
    EXPECT_EQ(cc.waits, 6);
    EXPECT_TRUE(std::filesystem::exists(dir_ + "/.spare-snap"));
    EXPECT_GE(store.file_bytes(), 2 * live);
    EXPECT_LT(store.file_bytes(), 2 * live + 4096);
    EXPECT_EQ(store.registered_bytes(), store.file_bytes());
  }
  // The store's end unregisters both files; the snapshot stays on disk.
  EXPECT_EQ(cc.unregistrations, 2);
  SnapshotStore reader(dir_, 0);
  ExpectLoadsTo(reader, 6, d);
}

TEST_F(SnapshotTest, TheFirstSnapshotsSpareIsMadeAheadOnAThreadOfItsOwn) {
  for (const bool ahead : {true, false}) {
    SCOPED_TRACE(ahead ? "spare made ahead" : "no spare made ahead");
    EmptyDir();
    FakeDevice d = MakeDevice(16);
    CountingCopier cc{&d};
    SnapshotStore::Options o;
    o.spare_ahead = ahead;
    SnapshotStore store(dir_, 0, o);
    store.SetCopier(cc.Make());
    ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
    // The journal's boundary: the first DropBefore scans the directory and
    // must leave the file being made alone.
    store.DropBefore(1);
    absl::StatusOr<SnapshotWriteStats> st = store.Write(2, 2, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_EQ(st->reused, ahead);
    EXPECT_EQ(store.spares_made_ahead(), ahead ? 1u : 0u);
    EXPECT_EQ(store.spares_ahead_failed(), 0u);
    // Registered like any snapshot file (the copies into it needed that).
    EXPECT_EQ(cc.registrations, 2);
    ExpectLoadsTo(store, 2, d);
    store.DropBefore(2);
    // Steady state either way: the first snapshot is the spare, no third file.
    ASSERT_TRUE(store.Write(3, 3, d.Table()).ok());
    EXPECT_EQ(store.files_mapped(), 2u);
    EXPECT_FALSE(std::filesystem::exists(store.AheadPath()));
  }
}

TEST_F(SnapshotTest, TheFirstSnapshotTakesTheFileMadeAheadCutOrGrownToItsSize) {
  // "cut": the file made ahead (2 MiB at least) is larger than the
  // snapshot; "grown": allocations grew past it after it was made.
  for (const bool grown : {false, true}) {
    SCOPED_TRACE(grown ? "grown" : "cut");
    EmptyDir();
    FakeDevice d = MakeDevice(21);
    if (grown) {
      AddRandom(d, 0x300000000000ull, (size_t{5} << 20) + 7, 22);
    }
    CountingCopier cc{&d};
    SnapshotStore store(dir_, 0);
    store.SetCopier(cc.Make());
    store.PrepareFirstFile(grown ? size_t{1} << 20 : SnapshotStore::FileSizeFor(d.Table()));
    // Nothing is registered ahead: the snapshot registers its exact size.
    EXPECT_EQ(cc.registrations, 0);
    absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(store.first_file_used());
    // The snapshot's own registration, and the spare's if the store's thread
    // made one ahead meanwhile (it registers it there: waited for, so that
    // the count does not depend on which thread ran first).
    store.TakeSpareAhead();
    EXPECT_EQ(cc.registrations, 1 + static_cast<int>(store.spares_made_ahead()));
    EXPECT_FALSE(std::filesystem::exists(store.FirstAheadPath()));
    EXPECT_EQ(std::filesystem::file_size(store.PathOf(1)), SnapshotStore::FileSizeFor(d.Table()));
    ExpectLoadsTo(store, 1, d);
    // Later snapshots as before; no more files made ahead of a first one.
    store.PrepareFirstFile(size_t{64} << 20);
    store.DropBefore(1);
    for (auto& [a, b] : d.mem) b[0] = static_cast<char>(b[0] + 1);
    ASSERT_TRUE(store.Write(2, 2, d.Table()).ok());
    ExpectLoadsTo(store, 2, d);
    EXPECT_FALSE(std::filesystem::exists(store.FirstAheadPath()));
  }
}

// The file made ahead of the first snapshot is half as large again as the
// allocations so far (room to grow) but has pages only for them: the
// thread does not populate the room (the first snapshot waited for it),
// and a snapshot that uses part of it (staged: its copying threads fault
// the pages in; registered: registering does) loads back equal. On tmpfs,
// where a file's blocks are its resident pages.
TEST_F(SnapshotTest, TheFirstFileMadeAheadHasPagesOnlyForTheAllocationsSoFar) {
  for (const bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "registered");
    const std::string root = ShmRoot();
    ASSERT_FALSE(root.empty());
    FakeDevice d = MakeDevice(27);
    AddRandom(d, 0x300000000000ull, size_t{8} << 20, 28);
    const size_t now = SnapshotStore::FileSizeFor(d.Table());
    CountingCopier cc{&d};
    SnapshotStore::Options o;
    o.staged = staged;
    o.staging_bytes = 1 << 20;
    SnapshotStore store(root + "/snapshots", 0, o);
    store.SetCopier(cc.Make());
    store.PrepareFirstFile(now);
    store.JoinFirstFile();
    struct stat st {};
    ASSERT_EQ(stat(store.FirstAheadPath().c_str(), &st), 0);
    EXPECT_GE(static_cast<size_t>(st.st_size), now + now / 2);
    const size_t resident = static_cast<size_t>(st.st_blocks) * 512;
    EXPECT_GE(resident, now);
    EXPECT_LT(resident, now + (size_t{256} << 10)) << "the room to grow was populated";
    // Allocations grew into the room before the snapshot.
    AddRandom(d, 0x400000000000ull, size_t{2} << 20, 29);
    absl::StatusOr<SnapshotWriteStats> w = store.Write(1, 1, d.Table());
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(store.first_file_used());
    EXPECT_EQ(w->staged, staged);
    ExpectLoadsTo(store, 1, d);
    store.ReleaseMappings();
    std::filesystem::remove_all(root);
  }
}

// The first snapshot does not wait for the first file's pages still to be
// made: it stops the making before the next piece and takes the file (the
// copying threads fault the rest in); the snapshot is whole.
TEST_F(SnapshotTest, TheFirstSnapshotStopsThePagesStillToBeMadeInsteadOfWaitingForThem) {
  for (const bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged" : "registered");
    FakeDevice d = MakeDevice(31);
    AddRandom(d, 0x300000000000ull, size_t{16} << 20, 32);
    const size_t now = SnapshotStore::FileSizeFor(d.Table());
    CountingCopier cc{&d};
    SnapshotStore::Options o = WithoutSpareStaged();
    o.staged = staged;
    o.first_populate_chunk = 1 << 20;  // 17 pieces
    absl::Notification second_piece;
    std::atomic<int> pieces{0};
    // Each piece after the first takes 100 ms: all of them 1.6 s.
    o.before_first_chunk = [&](size_t k) {
      pieces.fetch_add(1);
      if (k == 1) second_piece.Notify();
      if (k >= 1) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    };
    const std::string root = ShmRoot();
    ASSERT_FALSE(root.empty());
    SnapshotStore store(root + "/snapshots", 0, o);
    store.SetCopier(cc.Make());
    store.PrepareFirstFile(now);
    ASSERT_TRUE(second_piece.WaitForNotificationWithTimeout(absl::Seconds(30)))
        << "the first file's second piece never began";
    absl::StatusOr<SnapshotWriteStats> w = store.Write(1, 1, d.Table());
    ASSERT_TRUE(w.ok()) << w.status();
    EXPECT_TRUE(store.first_file_used());
    const SnapshotStore::FirstFileTake& take = store.first_file_take();
    EXPECT_LT(take.resident_bytes, take.snapshot_bytes) << "the snapshot waited for every page";
    EXPECT_GE(take.resident_bytes, size_t{1} << 20);
    EXPECT_LT(pieces.load(), 10);
    ExpectLoadsTo(store, 1, d);
    store.ReleaseMappings();
    std::filesystem::remove_all(root);
  }
}

// Allocations that grow within the first file's room get their pages made
// ahead too (once they grew by a MiB), not only those of the first call.
TEST_F(SnapshotTest, TheFirstFileGetsPagesForWhatTheAllocationsGrewIntoWithinItsRoom) {
  const std::string root = ShmRoot();
  ASSERT_FALSE(root.empty());
  FakeDevice d = MakeDevice(33);
  AddRandom(d, 0x300000000000ull, size_t{4} << 20, 34);
  CountingCopier cc{&d};
  SnapshotStore store(root + "/snapshots", 0, WithoutSpareStaged());
  store.SetCopier(cc.Make());
  const size_t before = SnapshotStore::FileSizeFor(d.Table());
  store.PrepareFirstFile(before);
  store.JoinFirstFile();
  struct stat st {};
  ASSERT_EQ(stat(store.FirstAheadPath().c_str(), &st), 0);
  const size_t room = static_cast<size_t>(st.st_size);
  AddRandom(d, 0x400000000000ull, size_t{3} << 19, 35);  // 1.5 MiB more, within the room
  const size_t after = SnapshotStore::FileSizeFor(d.Table());
  ASSERT_LE(after, room);
  store.PrepareFirstFile(after);
  store.JoinFirstFile();
  ASSERT_EQ(stat(store.FirstAheadPath().c_str(), &st), 0);
  EXPECT_EQ(static_cast<size_t>(st.st_size), room);  // not remapped
  EXPECT_GE(static_cast<size_t>(st.st_blocks) * 512, after) << "the growth got no pages";
  absl::StatusOr<SnapshotWriteStats> w = store.Write(1, 1, d.Table());
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_TRUE(store.first_file_used());
  EXPECT_GE(store.first_file_take().resident_bytes, after);
  ExpectLoadsTo(store, 1, d);
  store.ReleaseMappings();
  std::filesystem::remove_all(root);
}

TEST_F(SnapshotTest, NoFileIsMadeAheadWithoutTheSpare) {
  FakeDevice d = MakeDevice(23);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.spare_ahead = false;
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  store.PrepareFirstFile(SnapshotStore::FileSizeFor(d.Table()));
  EXPECT_FALSE(std::filesystem::exists(store.FirstAheadPath()));
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  EXPECT_FALSE(store.first_file_used());
  ExpectLoadsTo(store, 1, d);
}

// Without the spare, the first snapshot still takes a file made ahead (its
// pages resident off the critical path); no spare follows it.
TEST_F(SnapshotTest, WithoutTheSpareTheFirstSnapshotStillTakesAFileMadeAhead) {
  FakeDevice d = MakeDevice(24);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged());
  store.SetCopier(cc.Make());
  ASSERT_TRUE(store.wants_first_file());
  store.PrepareFirstFile(SnapshotStore::FileSizeFor(d.Table()));
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(store.first_file_used());
  EXPECT_EQ(store.files_made_lazily(), 0u);
  ExpectLoadsTo(store, 1, d);
  st = store.Write(2, 2, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  store.DropBefore(2);
  store.TakeSpareAhead();
  EXPECT_EQ(store.spares_made_ahead(), 0u);
  EXPECT_EQ(store.files_made_lazily(), 1u);
  const uint64_t live = d.LiveBytes();
  EXPECT_LT(store.file_bytes(), live + 4096);
  ExpectLoadsTo(store, 2, d);
}

TEST_F(SnapshotTest, WithoutTheSpareTheFilesHoldOneSnapshot) {
  FakeDevice d = MakeDevice(12);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.keep_spare = false;
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  for (uint64_t m = 1; m <= 4; ++m) {
    absl::StatusOr<SnapshotWriteStats> st = store.Write(m, m, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_FALSE(st->reused);
    store.DropBefore(m);
    const uint64_t live = d.LiveBytes();
    EXPECT_LT(store.file_bytes(), live + 4096);
  }
  EXPECT_EQ(store.files_mapped(), 4u);
  EXPECT_EQ(cc.registrations, 4);
  EXPECT_EQ(cc.unregistrations, 3);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.spare-snap"));
}

// Without the spare and with staged snapshots, every synchronous snapshot
// makes a new file and registers nothing but the staging (once).
TEST_F(SnapshotTest, WithoutTheSpareStagedSnapshotsRegisterOnlyTheStaging) {
  FakeDevice d = MakeDevice(17);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged());
  store.SetCopier(cc.Make());
  const uint64_t live = d.LiveBytes();
  for (uint64_t m = 1; m <= 4; ++m) {
    for (auto& [a, b] : d.mem) b[0] = static_cast<char>(b[0] + 1);
    absl::StatusOr<SnapshotWriteStats> st = store.Write(m, m, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(st->staged);
    ExpectLoadsTo(store, m, d);
    store.DropBefore(m);
    EXPECT_LT(store.file_bytes(), live + 4096);
  }
  EXPECT_EQ(store.files_mapped(), 4u);
  EXPECT_EQ(store.files_made_lazily(), 4u);  // their pages faulted in by the copying threads
  EXPECT_EQ(cc.registrations, 1);
  EXPECT_EQ(store.registered_bytes(), 0u);
}

// Without the spare, asynchronous staged snapshots too write new files made
// without their pages (nothing allocated on the boundary's path): they load
// back equal, and between snapshots the files hold one snapshot.
TEST_F(SnapshotTest, WithoutTheSpareAsynchronousSnapshotsFillFilesMadeWithoutPages) {
  FakeDevice d = MakeDevice(18);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged(3));
  store.SetCopier(cc.Make());
  const uint64_t live = d.LiveBytes();
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  for (uint64_t k = 1; k <= 3; ++k) {
    for (auto& [a, b] : d.mem) b[b.size() - 1] = static_cast<char>(b[b.size() - 1] + 1);
    absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> p =
        store.Begin(1, 10 * k, d.Table());
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE((*p)->staged());
    EXPECT_FALSE((*p)->reused());
    ASSERT_TRUE(store.DrainStaged(p->get(), FillTurns(cc, **p), [](size_t) {}).ok());
    absl::StatusOr<SnapshotWriteStats> st = store.Finish(std::move(*p));
    ASSERT_TRUE(st.ok()) << st.status();
    ExpectLoadsTo(store, 1, d);
    EXPECT_LT(store.file_bytes(), live + 4096);
  }
  EXPECT_EQ(store.files_made_lazily(), 4u);
  EXPECT_EQ(store.registered_bytes(), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.spare-snap"));
}

// Without the spare, the next snapshot's file is made ahead on the store's
// thread (its pages resident, not registered): the files hold 2x the live
// bytes from then until that snapshot finished, 1x after; the snapshot
// takes the file (nothing made on its path) and loads back equal. A file
// made ahead that no snapshot takes is deleted at the end.
TEST_F(SnapshotTest, WithoutTheSpareTheNextFileIsMadeAheadAndTakenByTheNextSnapshot) {
  FakeDevice d = MakeDevice(25);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged(2));
  store.SetCopier(cc.Make());
  const uint64_t live = d.LiveBytes();
  EXPECT_FALSE(store.next_file_wanted());  // not before the first snapshot
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  const uint64_t lazily = store.files_made_lazily();
  for (uint64_t k = 1; k <= 3; ++k) {
    ASSERT_TRUE(store.next_file_wanted());
    store.MakeNextFileAhead(SnapshotStore::FileSizeFor(d.Table()));
    EXPECT_FALSE(store.next_file_wanted());
    store.TakeSpareAhead();  // (the session's snapshot would find it made)
    EXPECT_GE(store.file_bytes(), 2 * live);
    for (auto& [a, b] : d.mem) b[0] = static_cast<char>(b[0] + 3);
    absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> p = store.Begin(1, 10 * k, d.Table());
    ASSERT_TRUE(p.ok()) << p.status();
    ASSERT_TRUE((*p)->staged());
    EXPECT_TRUE((*p)->reused());
    ASSERT_TRUE(store.DrainStaged(p->get(), FillTurns(cc, **p), [](size_t) {}).ok());
    ASSERT_TRUE(store.Finish(std::move(*p)).ok());
    ExpectLoadsTo(store, 1, d);
    EXPECT_LT(store.file_bytes(), live + 4096);
  }
  EXPECT_EQ(store.next_files_ahead(), 3u);
  EXPECT_EQ(store.next_files_late(), 0u);
  EXPECT_EQ(store.files_made_lazily(), lazily);
  EXPECT_EQ(store.registered_bytes(), 0u);
  store.MakeNextFileAhead(SnapshotStore::FileSizeFor(d.Table()));
  store.DropNextFileAhead();
  EXPECT_LT(store.file_bytes(), live + 4096);
  EXPECT_FALSE(std::filesystem::exists(store.AheadPath()));
  EXPECT_FALSE(std::filesystem::exists(store.SparePath()));
  ExpectLoadsTo(store, 1, d);
}

// The lead of the next file (Session::MakeNextSnapshotFile) comes from the
// store's pace: the cautious default before any file of kPaceMinBytes was
// made (a job's first next file has none of its size before it), then the
// pace of the last file made with its pages resident; small files leave it.
TEST_F(SnapshotTest, TheMakingEstimateFollowsThePaceOfTheLastLargeFileMade) {
  FakeDevice d = MakeDevice(27);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged(2));
  store.SetCopier(cc.Make());
  constexpr size_t kLarge = size_t{48} << 20;
  EXPECT_DOUBLE_EQ(store.EstimatedMakeMs(kLarge),
                   kLarge * SnapshotStore::kDefaultMakeNsPerByte / 1e6);
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  // A small file made ahead: its fixed costs say nothing of the pace.
  store.MakeNextFileAhead(SnapshotStore::FileSizeFor(d.Table()));
  store.TakeSpareAhead();
  EXPECT_DOUBLE_EQ(store.EstimatedMakeMs(kLarge),
                   kLarge * SnapshotStore::kDefaultMakeNsPerByte / 1e6);
  store.DropNextFileAhead();
  // A large one: the estimate for its size is what it took (the store's
  // own clock around the same making), and twice the size twice as long.
  store.MakeNextFileAhead(kLarge);
  store.TakeSpareAhead();
  const double took = store.spare_ahead_ms();
  ASSERT_GT(took, 0);
  EXPECT_NEAR(store.EstimatedMakeMs(kLarge), took, 0.05 * took + 0.2);
  EXPECT_DOUBLE_EQ(store.EstimatedMakeMs(2 * kLarge), 2 * store.EstimatedMakeMs(kLarge));
  store.DropNextFileAhead();
}

// A snapshot never waits for a next file still being made: it makes its own
// (without pages) and counts it late; the late file serves the snapshot
// after it.
TEST_F(SnapshotTest, ASnapshotDoesNotWaitForTheNextFileStillBeingMade) {
  FakeDevice d = MakeDevice(26);
  CountingCopier cc{&d};
  absl::Notification release;
  SnapshotStore::Options o = WithoutSpareStaged(2);
  o.before_next_file = [&release] { release.WaitForNotification(); };
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  store.MakeNextFileAhead(SnapshotStore::FileSizeFor(d.Table()));
  const uint64_t lazily = store.files_made_lazily();
  absl::StatusOr<SnapshotWriteStats> st = store.Write(2, 2, d.Table());  // held: not waited for
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->reused);
  EXPECT_EQ(store.next_files_late(), 1u);
  EXPECT_EQ(store.files_made_lazily(), lazily + 1);
  store.DropBefore(2);
  release.Notify();
  for (int i = 0; i < 5000 && store.next_file_busy(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_FALSE(store.next_file_busy());
  for (auto& [a, b] : d.mem) b[0] = static_cast<char>(b[0] + 5);
  st = store.Write(3, 3, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->reused);
  EXPECT_EQ(store.next_files_ahead(), 1u);
  store.DropBefore(3);
  EXPECT_LT(store.file_bytes(), d.LiveBytes() + 4096);
  ExpectLoadsTo(store, 3, d);
}

// A file made without its pages that cannot have them (here: cut short
// behind the store's back, as a full tmpfs refuses pages) fails the
// snapshot with an error, not a SIGBUS in a copying thread; the older
// snapshot stays.
TEST_F(SnapshotTest, AFileMadeWithoutPagesThatCannotHaveThemFailsTheSnapshot) {
  FakeDevice d = MakeDevice(19);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0, WithoutSpareStaged(2));
  store.SetCopier(cc.Make());
  ASSERT_TRUE(store.Write(1, 1, d.Table()).ok());
  absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> p = store.Begin(1, 7, d.Table());
  ASSERT_TRUE(p.ok()) << p.status();
  ASSERT_TRUE((*p)->staged());
  ASSERT_EQ(truncate((dir_ + "/.tmp-snap-1").c_str(), 4096), 0);
  const absl::Status s = store.DrainStaged(p->get(), FillTurns(cc, **p), [](size_t) {});
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_NE(s.message().find("cannot allocate the snapshot"), std::string::npos) << s;
  store.Abandon(std::move(*p));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-1"));
  ExpectLoadsTo(store, 1, d);  // the older snapshot
}

TEST_F(SnapshotTest, ASpareOfAnotherSizeIsDroppedAndTheSnapshotIsExact) {
  FakeDevice d = MakeDevice(13);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0);
  ASSERT_NO_FATAL_FAILURE(WriteTwoKeepingTheFirstAsSpare(store, cc));
  d.mem[0x300000000000ull] = std::string(5000, 'x');  // a new allocation
  absl::StatusOr<SnapshotWriteStats> st = store.Write(3, 3, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->reused);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.spare-snap"));
  EXPECT_EQ(cc.unregistrations, 1);
  ExpectLoadsTo(store, 3, d);
}

TEST_F(SnapshotTest, CorruptOrUnfinishedSpareIsNeverLoaded) {
  FakeDevice d = MakeDevice(14);
  CountingCopier cc{&d};
  SnapshotStore store(dir_, 0);
  ASSERT_NO_FATAL_FAILURE(WriteTwoKeepingTheFirstAsSpare(store, cc));
  // A crash while writing into the spare: the temporary file holds the old
  // snapshot's header (minibatch 1) and partly new bytes; not a snapshot.
  struct Died {};
  try {
    (void)store.Write(3, 3, d.Table(), [] { throw Died(); });
  } catch (const Died&) {
  }
  EXPECT_TRUE(absl::IsNotFound(store.Open(3).status()));
  // Renamed into place by hand, the old header is refused (named 3, holds 1)
  // or, with the bytes damaged, the checksums are.
  const std::string tmp = dir_ + "/.tmp-snap-3";
  ASSERT_TRUE(std::filesystem::exists(tmp));
  ASSERT_EQ(std::rename(tmp.c_str(), store.PathOf(4).c_str()), 0);
  EXPECT_TRUE(absl::IsDataLoss(store.Open(4).status())) << store.Open(4).status();
  EXPECT_TRUE(store.Open(2).ok());
}

TEST_F(SnapshotTest, ADeadAgentsSpareAndTemporaryFilesGoAtTheFirstWrite) {
  FakeDevice d = MakeDevice(15);
  {
    SnapshotStore dead(dir_, 0);
    ASSERT_TRUE(dead.Write(1, 1, d.Table(), d.Reader()).ok());
    ASSERT_TRUE(dead.Write(2, 2, d.Table(), d.Reader()).ok());
    dead.DropBefore(2);  // 1 becomes its spare
    struct Died {};
    try {
      (void)dead.Write(3, 3, d.Table(), d.Reader(), [] { throw Died(); });
    } catch (const Died&) {
    }
  }
  EXPECT_TRUE(std::filesystem::exists(dir_ + "/.tmp-snap-3"));
  // A killed agent's spare stays behind too (its store never ended).
  { std::ofstream(dir_ + "/.spare-snap") << "a dead agent's spare"; }
  SnapshotStore store(dir_, 0);  // the replacement, continuing minibatch 2
  ExpectLoadsTo(store, 2, d);
  ASSERT_TRUE(store.Write(2, 5, d.Table(), d.Reader()).ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-3"));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.spare-snap"));
  absl::StatusOr<std::unique_ptr<Snapshot>> s = store.Open(2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->boundary_seq(), 5u);
}

// Options::staged: a synchronous snapshot into a file not registered yet
// leaves it so; the device copies land only in the registered staging
// buffers (the counting copier refuses copies into unregistered memory, as
// a device's asynchronous copy path would not take them), the threads copy
// them into the file and checksum them, and the snapshot loads back.
TEST_F(SnapshotTest, StagedSnapshotsRegisterOnlyTheStagingAndLoadBack) {
  FakeDevice d = MakeDevice(31);
  // An allocation over several turns of the small staging below.
  AddRandom(d, 0x300000000000ull, 300007, 32);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.staging_chunk_bytes = 8 << 10;  // 8 chunks a turn for 3 threads
  o.crc_threads = 3;
  o.spare_ahead = false;  // no registration on a thread: the counts are exact
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->staged);
  EXPECT_EQ(store.staged_writes(), 1u);
  EXPECT_EQ(cc.registrations, 1);  // the staging, not the file
  EXPECT_EQ(store.registered_bytes(), 0u);
  EXPECT_GT(cc.queued, 5);  // the big allocation took several turns
  ExpectLoadsTo(store, 1, d);
  // A second snapshot before the journal's boundary: a new file, staged too.
  for (auto& [a, b] : d.mem) b[b.size() / 2] = static_cast<char>(b[b.size() / 2] + 1);
  st = store.Write(2, 2, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->staged);
  EXPECT_EQ(cc.registrations, 1);
  ExpectLoadsTo(store, 2, d);
  store.DropBefore(2);  // snapshot 1's file, never registered, is the spare
  // An asynchronous snapshot takes the spare and leaves it unregistered:
  // the device copies into the staging buffers in turns, DrainStaged
  // empties each into the file.
  for (auto& [a, b] : d.mem) b[0] = static_cast<char>(b[0] + 3);
  absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> pending =
      store.Begin(2, 9, d.Table());
  ASSERT_TRUE(pending.ok()) << pending.status();
  EXPECT_TRUE((*pending)->reused());
  ASSERT_TRUE((*pending)->staged());
  EXPECT_EQ(cc.registrations, 1);
  const auto& copies = (*pending)->staged_copies();
  const auto& ends = (*pending)->staged_turn_ends();
  ASSERT_GT(ends.size(), 4u);
  ASSERT_EQ(ends.back(), copies.size());
  size_t drained = 0;
  ASSERT_TRUE(store
                  .DrainStaged(pending->get(), FillTurns(cc, **pending),
                               [&](size_t t) {
                                 EXPECT_EQ(t, drained);
                                 drained = t + 1;
                               })
                  .ok());
  EXPECT_EQ(drained, ends.size());
  st = store.Finish(std::move(*pending));
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->staged);
  EXPECT_EQ(store.staged_drains(), 1u);
  EXPECT_EQ(cc.registrations, 1);
  EXPECT_EQ(store.registered_bytes(), 0u);
  ExpectLoadsTo(store, 2, d);
  // The replaced file (snapshot 2's, not registered) is the spare now; a
  // synchronous snapshot into it stages again and registers nothing.
  st = store.Write(3, 10, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->reused);
  EXPECT_TRUE(st->staged);
  EXPECT_EQ(cc.registrations, 1);
  ExpectLoadsTo(store, 3, d);
}

// A staged asynchronous snapshot against a device that runs on a thread of
// its own and honours the drained turns as the real one does (turn t only
// once turn t - 2 was drained), the draining threads slowed at random
// (seed 20261206): the snapshot loads back equal; a drain whose wait fails
// stops, and the abandoned snapshot leaves no file.
TEST_F(SnapshotTest, StagedAsynchronousSnapshotsDrainEveryTurnBeforeItsBufferIsFilledAgain) {
  constexpr uint32_t kSeed = 20261206;
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  FakeDevice d;
  for (int i = 0; i < 5; ++i) {
    std::string b((96 << 10) + 4093 * i, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    d.mem[0x200000000000ull + (uint64_t{1} << 20) * i] = b;
  }
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.staging_chunk_bytes = 8 << 10;
  o.crc_threads = 3;
  o.spare_ahead = false;
  std::mutex rng_mu;
  o.before_staged_chunk = [&] {
    int us;
    {
      std::lock_guard<std::mutex> l(rng_mu);
      us = static_cast<int>(rng() % 300);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
  };
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  FakeDevice first;
  for (int round = 0; round < 2; ++round) {
    absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> pending =
        store.Begin(1, 5 + round, d.Table());
    ASSERT_TRUE(pending.ok()) << pending.status();
    ASSERT_TRUE((*pending)->staged());
    const auto copies = (*pending)->staged_copies();
    const auto ends = (*pending)->staged_turn_ends();
    ASSERT_GT(ends.size(), 6u);
    std::atomic<uint64_t> filled{0}, drained{0};
    const bool fail = round == 1;
    // The device: each turn after the drain of the one two before it (a
    // drain reported before its threads finished would let it overwrite
    // bytes not yet in the file: the snapshot would not load back equal).
    std::thread device([&] {
      for (size_t t = 0; t < ends.size(); ++t) {
        while (t >= 2 && drained.load() < t - 1) std::this_thread::yield();
        for (size_t c = t == 0 ? 0 : ends[t - 1]; c < ends[t]; ++c) {
          ASSERT_TRUE(d.Reader()(copies[c].addr, copies[c].dst, copies[c].size).ok());
        }
        filled.store(t + 1);
      }
    });
    absl::Status s = store.DrainStaged(
        pending->get(),
        [&](size_t t) -> absl::Status {
          if (fail && t == 3) return absl::AbortedError("the device failed");
          while (filled.load() < t + 1) std::this_thread::yield();
          return absl::OkStatus();
        },
        [&](size_t t) { drained.store(t + 1); });
    if (fail) {
      EXPECT_TRUE(absl::IsAborted(s)) << s;
      drained.store(~uint64_t{0});  // released, as the session does
      device.join();
      store.Abandon(std::move(*pending));
      EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-1"));
      ExpectLoadsTo(store, 1, first);  // the first round's snapshot is untouched
      continue;
    }
    ASSERT_TRUE(s.ok()) << s;
    device.join();
    absl::StatusOr<SnapshotWriteStats> st = store.Finish(std::move(*pending));
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(st->staged);
    ExpectLoadsTo(store, 1, d);
    first = d;
    for (auto& [a, b] : d.mem) b[b.size() - 1] = static_cast<char>(b[b.size() - 1] ^ 0x5a);
  }
  EXPECT_EQ(store.registered_bytes(), 0u);
  EXPECT_EQ(cc.registrations, 1);  // the staging only
}

// With the file made ahead of the first snapshot, the staging buffers are
// made with it (resident, not registered): the staged first snapshot
// registers only them, and takes the file without registering it.
TEST_F(SnapshotTest, TheStagedFirstSnapshotTakesTheFileAndStagingMadeAhead) {
  FakeDevice d = MakeDevice(34);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.crc_threads = 2;
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  store.PrepareFirstFile(SnapshotStore::FileSizeFor(d.Table()));
  EXPECT_EQ(cc.registrations, 0);
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(store.first_file_used());
  EXPECT_TRUE(st->staged);
  EXPECT_EQ(store.first_file_take().register_ms, 0.0);
  EXPECT_EQ(std::filesystem::file_size(store.PathOf(1)), SnapshotStore::FileSizeFor(d.Table()));
  ExpectLoadsTo(store, 1, d);
  // The spare made ahead registers on the store's thread, and the first
  // snapshot's file after it (Options::register_behind).
  store.TakeSpareAhead();
  EXPECT_EQ(cc.registrations, 3);  // the staging, that spare and the file
  EXPECT_EQ(store.registered_behind(), 1u);
  EXPECT_EQ(store.registered_bytes(), store.file_bytes());
}

// A one-rank job's asynchronous snapshots alternate between the spare made
// ahead and the first snapshot's file. With register_behind the store's
// thread registered that file after the staged first snapshot, so every
// asynchronous snapshot copies straight into its file (a copy into memory
// not registered fails here); without it, the one that takes the first
// file stages through the buffers.
TEST_F(SnapshotTest, TheStagedFirstSnapshotsFileIsRegisteredBehindForTheAsynchronousOnes) {
  for (const bool behind : {true, false}) {
    SCOPED_TRACE(behind ? "registered behind" : "not registered behind");
    EmptyDir();
    FakeDevice d = MakeDevice(36);
    CountingCopier cc{&d};
    SnapshotStore::Options o;
    o.staged = true;
    o.staging_bytes = 64 << 10;
    o.crc_threads = 2;
    o.register_behind = behind;
    SnapshotStore store(dir_, 0, o);
    store.SetCopier(cc.Make());
    absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    ASSERT_TRUE(st->staged);
    store.DropBefore(1);
    std::mt19937 rng(36);
    for (int k = 1; k <= 4; ++k) {
      for (auto& [a, b] : d.mem) b[rng() % b.size()] = static_cast<char>(rng());
      absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> p =
          store.Begin(1, 10 * k, d.Table());
      ASSERT_TRUE(p.ok()) << p.status();
      EXPECT_TRUE((*p)->reused()) << k;
      // k = 2 and 4 take the first snapshot's file (replaced by k = 1, 3).
      EXPECT_EQ((*p)->staged(), !behind && k % 2 == 0) << k;
      if ((*p)->staged()) {
        ASSERT_TRUE(store.DrainStaged(p->get(), FillTurns(cc, **p), [](size_t) {}).ok());
      } else {
        const AllocationTable& table = (*p)->table();
        for (size_t i = 0; i < table.size(); ++i) {
          absl::Status s = cc.Make().copy(table[i].first, (*p)->destination(i), table[i].second);
          ASSERT_TRUE(s.ok()) << "snapshot " << k << ": " << s;
        }
      }
      st = store.Finish(std::move(*p));
      ASSERT_TRUE(st.ok()) << st.status();
      ExpectLoadsTo(store, 1, d);
    }
    EXPECT_EQ(store.staged_drains(), behind ? 0u : 2u);
    EXPECT_EQ(store.registered_behind(), behind ? 1u : 0u);
  }
}

// Staging that cannot be registered (host memory short, the driver
// refusing): the snapshot registers its file and copies straight into it,
// as without staging; nothing is lost.
TEST_F(SnapshotTest, WithoutStagingTheSnapshotRegistersItsFileInstead) {
  FakeDevice d = MakeDevice(35);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.spare_ahead = false;
  SnapshotStore store(dir_, 0, o);
  SnapshotCopier c = cc.Make();
  auto inner = c.register_host;
  c.register_host = [inner](void* p, size_t n) -> absl::Status {
    if (n == size_t{128} << 10) return absl::ResourceExhaustedError("out of pinnable memory");
    return inner(p, n);
  };
  store.SetCopier(c);
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_FALSE(st->staged);
  EXPECT_EQ(store.staging_failures(), 1u);
  EXPECT_NE(store.staging_failure().message().find("out of pinnable memory"), std::string::npos);
  EXPECT_EQ(cc.registrations, 1);  // the file
  EXPECT_EQ(store.registered_bytes(), store.file_bytes());
  ExpectLoadsTo(store, 1, d);
}

// Slow copying threads: the device fills a staging buffer again only after
// every thread finished draining it (the snapshot loads back equal).
TEST_F(SnapshotTest, StagedCopiesWaitForTheSlowestThreadBeforeRefillingABuffer) {
  FakeDevice d;
  std::mt19937 rng(36);
  for (int i = 0; i < 3; ++i) {
    std::string b((256 << 10) + 17 * i, '\0');
    for (char& c : b) c = static_cast<char>(rng());
    d.mem[0x200000000000ull + (uint64_t{1} << 20) * i] = b;
  }
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 64 << 10;
  o.staging_chunk_bytes = 16 << 10;
  o.crc_threads = 4;
  o.spare_ahead = false;
  std::atomic<int> calls{0};
  o.before_staged_chunk = [&calls] {
    // Every third chunk waits 2 ms, whichever thread takes it.
    if (calls.fetch_add(1) % 3 == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  };
  SnapshotStore store(dir_, 0, o);
  store.SetCopier(cc.Make());
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->staged);
  EXPECT_GT(calls.load(), 40);
  ExpectLoadsTo(store, 1, d);
}

// A synchronous snapshot straight into a registered file waits for its
// copies turn by turn (the threads checksum a turn while the next is
// copied): one wait per turn, the copies only into the registered file,
// the checksums right; with Options::turns off, one wait for all.
TEST_F(SnapshotTest, StraightCopiesAreWaitedForAndChecksummedTurnByTurn) {
  for (const bool turns : {true, false}) {
    SCOPED_TRACE(turns ? "in turns" : "all at once");
    EmptyDir();
    FakeDevice d = MakeDevice(37);
    AddRandom(d, 0x300000000000ull, 300007, 38);
    CountingCopier cc{&d};
    SnapshotStore::Options o;
    o.turns = turns;
    o.staging_bytes = 64 << 10;
    o.staging_chunk_bytes = 8 << 10;
    o.crc_threads = 3;
    o.spare_ahead = false;
    SnapshotStore store(dir_, 0, o);
    store.SetCopier(cc.Make());
    absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_FALSE(st->staged);
    EXPECT_EQ(cc.registrations, 1);  // the file
    const uint64_t live = d.LiveBytes();
    const int want_turns = static_cast<int>((live + (64 << 10) - 1) / (64 << 10));
    if (turns) {
      EXPECT_EQ(cc.waits, want_turns);
    } else {
      EXPECT_EQ(cc.waits, 1);
    }
    ExpectLoadsTo(store, 1, d);
  }
}

// Staged copies of random allocation tables (sizes from 0 bytes to several
// turns, staging buffers of odd sizes, 1 to 4 threads) load back equal.
TEST_F(SnapshotTest, StagedCopiesOfRandomTablesLoadBackEqual) {
  const uint32_t seed = 20261204;
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  for (int round = 0; round < 12; ++round) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed << " round " << round);
    EmptyDir();
    FakeDevice d;
    uint64_t addr = 0x200000000000ull;
    const int count = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < count; ++i) {
      const size_t size = rng() % 4 == 0 ? rng() % (3 << 20) : rng() % 5000;
      std::string b(size, '\0');
      for (char& c : b) c = static_cast<char>(rng());
      d.mem[addr] = b;
      addr += (size + 0xffff) & ~uint64_t{0xffff};
      addr += 0x10000;
    }
    CountingCopier cc{&d};
    SnapshotStore::Options o;
    o.staged = true;
    o.staging_bytes = 4096 + rng() % (2 << 20);
    o.staging_chunk_bytes = 4096 + rng() % (256 << 10);
    o.crc_threads = 1 + static_cast<int>(rng() % 4);
    SnapshotStore store(dir_, 0, o);
    store.SetCopier(cc.Make());
    absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
    ASSERT_TRUE(st.ok()) << st.status();
    EXPECT_TRUE(st->staged);
    ExpectLoadsTo(store, 1, d);
  }
}

// A device copy that fails during a staged snapshot: an error naming the
// allocation, no snapshot and no temporary file left, the store usable.
TEST_F(SnapshotTest, AFailedStagedCopyLeavesNoFile) {
  FakeDevice d = MakeDevice(33);
  CountingCopier cc{&d};
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 8192;
  o.crc_threads = 2;
  SnapshotStore store(dir_, 0, o);
  SnapshotCopier failing = cc.Make();
  int copies = 0;
  SnapshotCopier good = cc.Make();
  failing.copy = [&copies, good](uint64_t addr, void* dst, size_t n) -> absl::Status {
    if (++copies == 7) return absl::InternalError("device copy error 700");
    return good.copy(addr, dst, n);
  };
  store.SetCopier(failing);
  absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, d.Table());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("device copy error 700"), std::string::npos)
      << st.status();
  EXPECT_NE(st.status().message().find("allocation 0x"), std::string::npos) << st.status();
  EXPECT_TRUE(absl::IsNotFound(store.Open(1).status()));
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/.tmp-snap-1"));
  store.SetCopier(good);
  ASSERT_TRUE(store.Write(1, 2, d.Table()).ok());
  ExpectLoadsTo(store, 1, d);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
