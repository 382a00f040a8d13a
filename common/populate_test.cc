#include "common/populate.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace revenant {
namespace {

// A shmem file (what tmpfs files are) of `size` bytes, mapped shared.
struct ShmemMap {
  int fd = -1;
  char* map = nullptr;
  size_t map_size = 0;
  ShmemMap(size_t file_size, size_t map_bytes) : map_size(map_bytes) {
    fd = memfd_create("populate_test", MFD_CLOEXEC);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(file_size)), 0);
    void* p = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    map = static_cast<char*>(p);
  }
  ~ShmemMap() {
    if (map != nullptr) munmap(map, map_size);
    close(fd);
  }
  size_t AllocatedBytes() const {
    struct stat st {};
    EXPECT_EQ(fstat(fd, &st), 0);
    return static_cast<size_t>(st.st_blocks) * 512;
  }
  size_t ResidentPages() const {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    std::vector<unsigned char> v((map_size + page - 1) / page);
    EXPECT_EQ(mincore(map, map_size, v.data()), 0);
    size_t n = 0;
    for (unsigned char c : v) n += c & 1;
    return n;
  }
};

TEST(PopulateWritable, MakesEveryPageOfAFreshFileResident) {
  const size_t size = 48u << 20;
  ShmemMap m(size, size);
  ASSERT_EQ(m.AllocatedBytes(), 0u);
  absl::Status s = PopulateWritable(m.map, size, 4);
  if (absl::IsUnimplemented(s)) GTEST_SKIP() << s;  // a kernel before 5.14
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(m.AllocatedBytes(), size);
  EXPECT_EQ(m.ResidentPages(), size / static_cast<size_t>(sysconf(_SC_PAGESIZE)));
}

TEST(PopulateWritable, KeepsWhatThePagesHold) {
  const size_t size = 8u << 20;
  ShmemMap m(size, size);
  for (size_t i = 0; i < size; i += 4096) m.map[i + 7] = static_cast<char>(i / 4096 + 1);
  absl::Status s = PopulateWritable(m.map, size, 3);
  if (absl::IsUnimplemented(s)) GTEST_SKIP() << s;
  ASSERT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < size; i += 4096) {
    ASSERT_EQ(m.map[i + 7], static_cast<char>(i / 4096 + 1)) << i;
  }
}

TEST(PopulateWritable, ReportsPagesItCannotHaveInsteadOfRaisingSigbus) {
  // Two pages of file under a mapping of eight: a store past the file's end
  // would raise SIGBUS, like a store into a full tmpfs.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  ShmemMap m(2 * page, 8 * page);
  absl::Status s = PopulateWritable(m.map, 8 * page, 2);
  if (absl::IsUnimplemented(s)) GTEST_SKIP() << s;
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
}

TEST(PopulateWritable, RefusesAnUnalignedAddress) {
  ShmemMap m(1 << 20, 1 << 20);
  EXPECT_TRUE(absl::IsInvalidArgument(PopulateWritable(m.map + 1, 4096)));
  EXPECT_TRUE(PopulateWritable(m.map, 0).ok());
}

// The mapping goes, the file keeps every byte it was given through it.
TEST(UnmapInPieces, UnmapsAndTheFileKeepsItsBytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (size_t size : {page, kUnmapPieceBytes, 2 * kUnmapPieceBytes + 5 * page}) {
    SCOPED_TRACE(size);
    ShmemMap m(size, size);
    for (size_t i = 0; i < size; i += page) m.map[i + 3] = static_cast<char>(i / page * 7 + 1);
    UnmapInPieces(m.map, size);
    std::vector<unsigned char> v(size / page);
    errno = 0;
    EXPECT_EQ(mincore(m.map, size, v.data()), -1);  // nothing mapped there any more
    EXPECT_EQ(errno, ENOMEM);
    m.map = nullptr;  // unmapped
    EXPECT_EQ(m.AllocatedBytes(), size);
    for (size_t i = 0; i < size; i += page) {
      char c = 0;
      ASSERT_EQ(pread(m.fd, &c, 1, static_cast<off_t>(i + 3)), 1);
      ASSERT_EQ(c, static_cast<char>(i / page * 7 + 1)) << i;
    }
  }
  UnmapInPieces(nullptr, 4096);  // nothing
}

TEST(PopulateThreads, OnePer32MiBAtMostEight) {
  EXPECT_EQ(PopulateThreads(4096), 1);
  EXPECT_LE(PopulateThreads(1ull << 30), 8);
  EXPECT_GE(PopulateThreads(1ull << 30), 1);
}

}  // namespace
}  // namespace revenant
