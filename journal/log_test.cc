// Tests of the journal's physical framing: every reader error path, with
// byte surgery on an in-memory log (modeled on LevelDB's log_test).
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <isa-l/crc.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/crc32c.h"
#include "journal/log_format.h"
#include "journal/log_reader.h"
#include "journal/log_writer.h"

namespace revenant {
namespace journal {
namespace log {
namespace {

using ::testing::HasSubstr;

// Constructs a string of `n` bytes by repeating `partial_string`.
std::string BigString(const std::string& partial_string, size_t n) {
  std::string result;
  while (result.size() < n) result.append(partial_string);
  result.resize(n);
  return result;
}

std::string NumberString(int n) { return absl::StrCat(n, "."); }

// A pseudo-random length for record i (fixed formula: deterministic).
std::string RandomSkewedString(int i) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + 301;
  return BigString(NumberString(i), x % 17 == 0 ? (x >> 7) % 70000 : (x >> 9) % 300);
}

class StringDest : public WritableFile {
 public:
  absl::Status Append(absl::string_view data) override {
    if (fail_) return absl::InternalError("injected write failure");
    contents_.append(data.data(), data.size());
    return absl::OkStatus();
  }
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }

  std::string contents_;
  bool fail_ = false;
};

class StringSource : public SequentialFile {
 public:
  absl::Status Read(size_t n, std::string* scratch, absl::string_view* result) override {
    if (pos_ >= contents_.size()) {
      *result = absl::string_view();
      return absl::OkStatus();
    }
    n = std::min(n, contents_.size() - pos_);
    scratch->assign(contents_, pos_, n);
    pos_ += n;
    *result = *scratch;
    return absl::OkStatus();
  }

  std::string contents_;
  size_t pos_ = 0;
};

class ReportCollector : public Reader::Reporter {
 public:
  void Corruption(size_t bytes, const absl::Status& status) override {
    dropped_bytes_ += bytes;
    message_.append(std::string(status.message()));
  }
  size_t dropped_bytes_ = 0;
  std::string message_;
};

class LogTest : public ::testing::Test {
 public:
  LogTest() : writer_(new Writer(&dest_)) {}

  void ReopenForAppend() { writer_.reset(new Writer(&dest_, dest_.contents_.size())); }

  void Write(const std::string& msg) { ASSERT_TRUE(writer_->AddRecord(msg).ok()); }

  size_t WrittenBytes() const { return dest_.contents_.size(); }

  std::string Read() {
    if (!reading_) {
      reading_ = true;
      source_.contents_ = dest_.contents_;
      reader_.reset(new Reader(&source_, &report_));
    }
    std::string record;
    if (reader_->ReadRecord(&record)) return record;
    return "EOF";
  }

  void IncrementByte(int offset, int delta) { dest_.contents_[offset] += delta; }
  void SetByte(int offset, char new_byte) { dest_.contents_[offset] = new_byte; }
  void ShrinkSize(int bytes) { dest_.contents_.resize(dest_.contents_.size() - bytes); }

  // Recomputes the checksum of the physical record at `header_offset` whose
  // data is `len` bytes, so surgery on type or data is not caught by the CRC.
  void FixChecksum(int header_offset, int len) {
    uint32_t crc = crc32c::Value(&dest_.contents_[header_offset + 6], 1 + len);
    crc = crc32c::Mask(crc);
    for (int i = 0; i < 4; ++i) {
      dest_.contents_[header_offset + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
    }
  }

  size_t DroppedBytes() const { return report_.dropped_bytes_; }
  std::string ReportMessage() const { return report_.message_; }

  // Returns OK iff recorded error message contains `msg`.
  std::string MatchError(const std::string& msg) const {
    if (report_.message_.find(msg) == std::string::npos) return report_.message_;
    return "OK";
  }

 protected:
  StringDest dest_;
  StringSource source_;
  ReportCollector report_;
  bool reading_ = false;
  std::unique_ptr<Writer> writer_;
  std::unique_ptr<Reader> reader_;
};

TEST(Crc32cTest, StandardValues) {
  EXPECT_EQ(0xE3069283u, crc32c::Value("123456789", 9));
  char zeros[32] = {0};
  EXPECT_EQ(0x8a9136aau, crc32c::Value(zeros, sizeof(zeros)));
  EXPECT_EQ(crc32c::Value("hello world", 11),
            crc32c::Extend(crc32c::Value("hello ", 6), "world", 5));
  const uint32_t crc = crc32c::Value("foo", 3);
  EXPECT_NE(crc, crc32c::Mask(crc));
  EXPECT_NE(crc, crc32c::Mask(crc32c::Mask(crc)));
  EXPECT_EQ(crc, crc32c::Unmask(crc32c::Mask(crc)));
  EXPECT_EQ(crc, crc32c::Unmask(crc32c::Unmask(crc32c::Mask(crc32c::Mask(crc)))));
}

// Extend uses ISA-L's SSE4.2 variant where the CPU has it: it must agree
// with ISA-L's dispatcher at every length and alignment the journal uses
// (short records, block-sized fragments, odd tails).
TEST(Crc32cTest, AgreesWithIsalDispatcherAtEveryLength) {
  std::string data(40000, '\0');
  uint32_t x = 20261129;
  for (char& c : data) {
    x = x * 1103515245u + 12345u;
    c = static_cast<char>(x >> 24);
  }
  for (size_t offset : {0, 1, 7}) {
    for (size_t n = 0; n + offset <= data.size(); n += (n < 300 ? 1 : 997)) {
      auto* p = reinterpret_cast<unsigned char*>(&data[offset]);
      const uint32_t want = ~crc32_iscsi(p, static_cast<int>(n), ~0u);
      ASSERT_EQ(want, crc32c::Value(p, n)) << "length " << n << " offset " << offset;
      const size_t half = n / 3;
      ASSERT_EQ(want, crc32c::Extend(crc32c::Value(p, half), p + half, n - half))
          << "length " << n << " split at " << half;
    }
  }
}

TEST_F(LogTest, Empty) { ASSERT_EQ("EOF", Read()); }

TEST_F(LogTest, ReadWrite) {
  Write("foo");
  Write("bar");
  Write("");
  Write("xxxx");
  ASSERT_EQ("foo", Read());
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("", Read());
  ASSERT_EQ("xxxx", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ("EOF", Read());  // Make sure reads at eof work
  EXPECT_EQ(0u, DroppedBytes());
}

TEST_F(LogTest, HeaderLayout) {
  Write("foo");
  ASSERT_EQ(kHeaderSize + 3, WrittenBytes());
  EXPECT_EQ(3, dest_.contents_[4]);
  EXPECT_EQ(0, dest_.contents_[5]);
  EXPECT_EQ(kFullType, dest_.contents_[6]);
  std::string typed = std::string(1, static_cast<char>(kFullType)) + "foo";
  uint32_t stored = 0;
  for (int i = 0; i < 4; ++i) {
    stored |= static_cast<uint32_t>(static_cast<unsigned char>(dest_.contents_[i])) << (8 * i);
  }
  EXPECT_EQ(crc32c::Value(typed.data(), typed.size()), crc32c::Unmask(stored));
}

TEST_F(LogTest, ManyBlocks) {
  for (int i = 0; i < 100000; i++) Write(NumberString(i));
  for (int i = 0; i < 100000; i++) ASSERT_EQ(NumberString(i), Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, Fragmentation) {
  Write("small");
  Write(BigString("medium", 50000));
  Write(BigString("large", 100000));
  ASSERT_EQ("small", Read());
  ASSERT_EQ(BigString("medium", 50000), Read());
  ASSERT_EQ(BigString("large", 100000), Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, MarginalTrailer) {
  // Make a trailer that is exactly the same length as an empty record.
  const int n = kBlockSize - 2 * kHeaderSize;
  Write(BigString("foo", n));
  ASSERT_EQ(kBlockSize - kHeaderSize, WrittenBytes());
  Write("");
  Write("bar");
  ASSERT_EQ(BigString("foo", n), Read());
  ASSERT_EQ("", Read());
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, MarginalTrailer2) {
  const int n = kBlockSize - 2 * kHeaderSize;
  Write(BigString("foo", n));
  ASSERT_EQ(kBlockSize - kHeaderSize, WrittenBytes());
  Write("bar");
  ASSERT_EQ(BigString("foo", n), Read());
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(0u, DroppedBytes());
  ASSERT_EQ("", ReportMessage());
}

TEST_F(LogTest, ShortTrailer) {
  const int n = kBlockSize - 2 * kHeaderSize + 4;
  Write(BigString("foo", n));
  ASSERT_EQ(kBlockSize - kHeaderSize + 4, WrittenBytes());
  Write("");
  // The 3-byte tail was zero-filled and the next record starts a new block.
  ASSERT_EQ(kBlockSize + kHeaderSize, WrittenBytes());
  for (size_t i = kBlockSize - 3; i < kBlockSize; ++i) EXPECT_EQ(0, dest_.contents_[i]);
  Write("bar");
  ASSERT_EQ(BigString("foo", n), Read());
  ASSERT_EQ("", Read());
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(0u, DroppedBytes());
}

TEST_F(LogTest, AlignedEof) {
  const int n = kBlockSize - 2 * kHeaderSize + 4;
  Write(BigString("foo", n));
  ASSERT_EQ(kBlockSize - kHeaderSize + 4, WrittenBytes());
  ASSERT_EQ(BigString("foo", n), Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, OpenForAppend) {
  Write("hello");
  ReopenForAppend();
  Write("world");
  ASSERT_EQ("hello", Read());
  ASSERT_EQ("world", Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, RandomRead) {
  const int N = 500;
  for (int i = 0; i < N; i++) Write(RandomSkewedString(i));
  for (int i = 0; i < N; i++) ASSERT_EQ(RandomSkewedString(i), Read()) << "record " << i;
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, StickyWriteError) {
  Write("foo");
  dest_.fail_ = true;
  EXPECT_FALSE(writer_->AddRecord("bar").ok());
  dest_.fail_ = false;
  absl::Status s = writer_->AddRecord("baz");
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("injected write failure"));
  ASSERT_EQ("foo", Read());
  ASSERT_EQ("EOF", Read());
}

TEST_F(LogTest, BadRecordType) {
  Write("foo");
  // Type is stored in header[6]
  IncrementByte(6, 100);
  FixChecksum(0, 3);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("unknown record type 101 at offset 0"));
}

// A type byte of 0 followed by more records cannot be an uncommitted last
// record: it is damage.
TEST_F(LogTest, ZeroTypeIsCorruption) {
  Write("foo");
  Write("bar");
  SetByte(6, kZeroType);
  FixChecksum(0, 3);
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("unknown record type 0 at offset 0"));
}

// The same with the following data in a later block only (the rest of the
// first block is zero, as in a preallocated file).
TEST_F(LogTest, ZeroTypeFollowedByDataInALaterBlockIsCorruption) {
  Write("foo");
  dest_.contents_.resize(2 * kBlockSize, '\0');
  SetByte(kBlockSize + 100, 1);
  SetByte(6, kZeroType);
  FixChecksum(0, 3);
  ASSERT_EQ("EOF", Read());
  ASSERT_GE(DroppedBytes(), 3u);
  ASSERT_EQ("OK", MatchError("unknown record type 0 at offset 0"));
}

// An uncommitted record (type byte 0) followed by zeros to the end of the
// file is a clean end: what a mapped writer killed mid-append leaves. Limit
// (docs/journal_format.md): a last record whose type byte was damaged to 0
// reads the same way.
TEST_F(LogTest, ZeroTypeFollowedByZerosIsTheEnd) {
  Write("foo");
  Write("bar");
  const size_t bar = WrittenBytes() - kHeaderSize - 3;
  dest_.contents_.resize(3 * kBlockSize, '\0');  // preallocated tail
  SetByte(bar + 6, kZeroType);
  ASSERT_EQ("foo", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(0u, DroppedBytes());
  ASSERT_EQ("", ReportMessage());
}

TEST_F(LogTest, ZeroTailAfterRecordsIsTheEnd) {
  Write("foo");
  Write(BigString("frag", kBlockSize + 100));
  dest_.contents_.resize(4 * kBlockSize, '\0');
  ASSERT_EQ("foo", Read());
  ASSERT_EQ(BigString("frag", kBlockSize + 100), Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ("", ReportMessage());
}

TEST_F(LogTest, TruncatedTrailingRecordIsIgnored) {
  Write("foo");
  ShrinkSize(4);  // Drop all payload as well as a header byte
  ASSERT_EQ("EOF", Read());
  // Truncated last record is ignored, not treated as an error.
  ASSERT_EQ(0u, DroppedBytes());
  ASSERT_EQ("", ReportMessage());
}

TEST_F(LogTest, BadLength) {
  const int kPayloadSize = kBlockSize - kHeaderSize;
  Write(BigString("bar", kPayloadSize));
  Write("foo");
  // Least significant size byte is stored in header[4].
  IncrementByte(4, 1);
  ASSERT_EQ("foo", Read());
  ASSERT_EQ(kBlockSize, DroppedBytes());
  ASSERT_EQ("OK", MatchError("bad record length at offset 0"));
}

TEST_F(LogTest, BadLengthAtEndIsIgnored) {
  Write("foo");
  ShrinkSize(1);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(0u, DroppedBytes());
  ASSERT_EQ("", ReportMessage());
}

TEST_F(LogTest, ChecksumMismatch) {
  Write("foo");
  IncrementByte(0, 10);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(10u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("checksum mismatch at offset 0"));
}

TEST_F(LogTest, ChecksumMismatchDropsRestOfBlockOnly) {
  Write("foo");
  Write("bar");
  Write(BigString("x", kBlockSize));  // Spills into the second block.
  Write("next-block");
  IncrementByte(kHeaderSize + 3 + kHeaderSize, 1);  // data of "bar"
  ASSERT_EQ("foo", Read());
  // The rest of block 0 (bar and the FIRST fragment) is dropped; the LAST
  // fragment in block 1 has no start.
  ASSERT_EQ("next-block", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ("OK", MatchError("checksum mismatch at offset 10"));
  ASSERT_EQ("OK", MatchError("missing start of fragmented record"));
  // Rest of block 0 from "bar" (offset 10) plus the 27 data bytes of the
  // orphaned LAST fragment in block 1.
  ASSERT_EQ(kBlockSize - 10 + 27, DroppedBytes());
}

TEST_F(LogTest, UnexpectedMiddleType) {
  Write("foo");
  SetByte(6, kMiddleType);
  FixChecksum(0, 3);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("missing start of fragmented record (MIDDLE) at offset 0"));
}

TEST_F(LogTest, UnexpectedLastType) {
  Write("foo");
  SetByte(6, kLastType);
  FixChecksum(0, 3);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("missing start"));
}

TEST_F(LogTest, UnexpectedFullType) {
  Write("foo");
  Write("bar");
  SetByte(6, kFirstType);
  FixChecksum(0, 3);
  ASSERT_EQ("bar", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("partial record without end (FULL) at offset 10"));
}

TEST_F(LogTest, UnexpectedFirstType) {
  Write("foo");
  Write(BigString("bar", 100000));
  SetByte(6, kFirstType);
  FixChecksum(0, 3);
  ASSERT_EQ(BigString("bar", 100000), Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(3u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("partial record without end (FIRST)"));
}

TEST_F(LogTest, MissingLastIsIgnored) {
  Write(BigString("bar", kBlockSize));
  // Remove the LAST block, including header.
  ShrinkSize(14);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ("", ReportMessage());
  ASSERT_EQ(0u, DroppedBytes());
}

TEST_F(LogTest, PartialLastIsIgnored) {
  Write(BigString("bar", kBlockSize));
  // Cause a bad record length in the LAST block.
  ShrinkSize(1);
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ("", ReportMessage());
  ASSERT_EQ(0u, DroppedBytes());
}

TEST_F(LogTest, TruncatedRecordInTheMiddleIsReported) {
  // A record whose length runs past its (full) block: not a torn tail.
  Write(BigString("a", kBlockSize - 2 * kHeaderSize - 10));
  Write("0123456789");
  Write("after");
  IncrementByte(kBlockSize - kHeaderSize - 10 + 5, 1);  // length of "0123456789" += 256
  ASSERT_EQ(BigString("a", kBlockSize - 2 * kHeaderSize - 10), Read());
  ASSERT_EQ("after", Read());
  ASSERT_EQ("EOF", Read());
  ASSERT_EQ(kHeaderSize + 10u, DroppedBytes());
  ASSERT_EQ("OK", MatchError("bad record length"));
}

TEST_F(LogTest, ErrorJoinsRecords) {
  // Consider two fragmented records: first(R1) last(R1) first(R2) last(R2)
  // where the middle two fragments disappear. The reader must not glue
  // first(R1) to last(R2).
  Write(BigString("foo", kBlockSize));
  Write(BigString("bar", kBlockSize));
  Write("correct");
  // Wipe the middle block.
  for (size_t offset = kBlockSize; offset < 2 * kBlockSize; offset++) SetByte(offset, 'x');
  ASSERT_EQ("correct", Read());
  ASSERT_EQ("EOF", Read());
  const size_t dropped = DroppedBytes();
  ASSERT_LE(dropped, 2 * kBlockSize + 100);
  ASSERT_GE(dropped, 2 * kBlockSize);
}

// A writer killed at any byte of its last append leaves a log that reads back
// as exactly the records before it, with nothing reported.
TEST_F(LogTest, KillMidWriteAtEveryOffsetIsACleanPrefix) {
  const std::vector<std::string> records = {"small", BigString("frag", kBlockSize + 500), "x",
                                            BigString("tail", 3000)};
  std::vector<size_t> ends;
  for (const std::string& r : records) {
    Write(r);
    ends.push_back(WrittenBytes());
  }
  const std::string full = dest_.contents_;
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    StringSource source;
    source.contents_ = full.substr(0, cut);
    ReportCollector report;
    Reader reader(&source, &report);
    std::string record;
    size_t n = 0;
    while (reader.ReadRecord(&record)) {
      ASSERT_LT(n, records.size()) << "cut " << cut;
      ASSERT_EQ(records[n], record) << "cut " << cut;
      ++n;
    }
    size_t expected = 0;
    while (expected < ends.size() && ends[expected] <= cut) ++expected;
    ASSERT_EQ(expected, n) << "cut " << cut;
    ASSERT_EQ(0u, report.dropped_bytes_) << "cut " << cut << ": " << report.message_;
  }
}

// ---- The mapped writer (docs/journal_format.md, "Mapped log files") ----

std::string TempPath(const std::string& name) {
  return absl::StrCat(::testing::TempDir(), "/", name, ".", getpid());
}

std::string FileContents(const std::string& path) {
  std::string out;
  EXPECT_TRUE(ReadFileToString(path, &out).ok());
  return out;
}

// Reads every record of `contents`; returns them and the reports.
std::vector<std::string> ReadAll(const std::string& contents, ReportCollector* report) {
  StringSource source;
  source.contents_ = contents;
  Reader reader(&source, report);
  std::vector<std::string> records;
  std::string record;
  while (reader.ReadRecord(&record)) records.push_back(record);
  return records;
}

std::vector<std::string> SomeRecords() {
  std::vector<std::string> records;
  for (int i = 0; i < 300; ++i) records.push_back(RandomSkewedString(i));
  records.push_back("");  // an empty record is a zero-length FULL record
  records.push_back(BigString("frag", 3 * kBlockSize + 11));
  return records;
}

// Same bytes as the write(2) writer, followed by the zero-filled preallocated
// tail while the file is open; truncated to the log's length on close.
TEST(MappedLogTest, SameBytesAsTheAppendingWriterThenTrimmedOnClose) {
  const std::string path = TempPath("mapped_same");
  auto file = MappedLogFile::Create(path, kBlockSize, 4 * kBlockSize);
  ASSERT_TRUE(file.ok()) << file.status();
  Writer mapped(file->get());
  StringDest dest;
  Writer plain(&dest);
  const std::vector<std::string> records = SomeRecords();
  for (const std::string& r : records) {
    ASSERT_TRUE(mapped.AddRecord(r).ok());
    ASSERT_TRUE(plain.AddRecord(r).ok());
  }
  ASSERT_EQ(dest.contents_.size(), mapped.file_length());
  const std::string open_contents = FileContents(path);
  ASSERT_EQ((*file)->allocated(), open_contents.size());
  ASSERT_GT(open_contents.size(), dest.contents_.size());
  // Mapped chunks are whole blocks.
  ASSERT_EQ(0u, open_contents.size() % kBlockSize);
  ASSERT_EQ(dest.contents_, open_contents.substr(0, dest.contents_.size()));
  ASSERT_EQ(std::string(open_contents.size() - dest.contents_.size(), '\0'),
            open_contents.substr(dest.contents_.size()));

  ReportCollector report;
  EXPECT_EQ(records, ReadAll(open_contents, &report));
  EXPECT_EQ("", report.message_);

  ASSERT_TRUE((*file)->Close(mapped.file_length()).ok());
  EXPECT_EQ(dest.contents_, FileContents(path));
  // A closed file refuses further records.
  EXPECT_FALSE(mapped.AddRecord("late").ok());
  ::unlink(path.c_str());
}

// A large first chunk, then smaller later ones (a minibatch log: 16 MiB,
// then 1 MiB each, so that no growth on the writer's thread maps much).
TEST(MappedLogTest, LaterChunksMayBeSmallerThanTheFirst) {
  const std::string path = TempPath("mapped_small_later");
  auto file = MappedLogFile::Create(path, 4 * kBlockSize, kBlockSize);
  ASSERT_TRUE(file.ok()) << file.status();
  Writer mapped(file->get());
  StringDest dest;
  Writer plain(&dest);
  std::vector<size_t> allocated;
  for (int i = 0; i < 40; ++i) {
    const std::string r = BigString(absl::StrCat("r", i), kBlockSize / 5);
    ASSERT_TRUE(mapped.AddRecord(r).ok());
    ASSERT_TRUE(plain.AddRecord(r).ok());
    if (allocated.empty() || allocated.back() != (*file)->allocated()) {
      allocated.push_back((*file)->allocated());
    }
  }
  // 4 blocks first, then one block at a time.
  ASSERT_GE(allocated.size(), 3u);
  EXPECT_EQ(4 * kBlockSize, allocated[0]);
  for (size_t i = 1; i < allocated.size(); ++i) {
    EXPECT_EQ(allocated[i - 1] + kBlockSize, allocated[i]) << i;
  }
  const std::string open_contents = FileContents(path);
  ASSERT_EQ(dest.contents_, open_contents.substr(0, dest.contents_.size()));
  ASSERT_TRUE((*file)->Close(mapped.file_length()).ok());
  EXPECT_EQ(dest.contents_, FileContents(path));
  // Neither size may be zero.
  EXPECT_FALSE(MappedLogFile::Create(path, 0, kBlockSize).ok());
  EXPECT_FALSE(MappedLogFile::Create(path, kBlockSize, 0).ok());
  ::unlink(path.c_str());
}

// A log past the mapped window (64 MiB): the next window starts where the
// chunks reached, and every byte lands where the appending writer puts it.
TEST(MappedLogTest, ALogPastTheMappedWindowKeepsItsBytes) {
  const std::string path = TempPath("mapped_windows");
  auto file = MappedLogFile::Create(path, 16 * kBlockSize, 32 * kBlockSize);
  ASSERT_TRUE(file.ok()) << file.status();
  Writer mapped(file->get());
  StringDest dest;
  Writer plain(&dest);
  const size_t target = (size_t{64} << 20) + 3 * kBlockSize + 123;
  for (int i = 0; mapped.file_length() < target; ++i) {
    const std::string r = BigString(absl::StrCat("w", i), 3 * kBlockSize + i % 777);
    ASSERT_TRUE(mapped.AddRecord(r).ok()) << i;
    ASSERT_TRUE(plain.AddRecord(r).ok());
  }
  ASSERT_GT(mapped.file_length(), size_t{64} << 20);
  const std::string open_contents = FileContents(path);
  ASSERT_EQ((*file)->allocated(), open_contents.size());
  ASSERT_TRUE(dest.contents_ == open_contents.substr(0, dest.contents_.size()));
  ASSERT_TRUE((*file)->Close(mapped.file_length()).ok());
  EXPECT_TRUE(dest.contents_ == FileContents(path));
  ::unlink(path.c_str());
}

// A record given in two pieces (head, tail) is the same bytes as one
// AddRecord of their concatenation, for every split point, on both writers,
// across block boundaries.
TEST(MappedLogTest, TwoPiecesAreTheSameBytesAsTheirConcatenation) {
  const std::string path = TempPath("mapped_pieces");
  auto file = MappedLogFile::Create(path, kBlockSize, 8 * kBlockSize);
  ASSERT_TRUE(file.ok()) << file.status();
  Writer mapped(file->get());
  StringDest dest, dest2;
  Writer plain(&dest), plain2(&dest2);
  const std::string whole = BigString("piece", 2 * kBlockSize + 100);
  std::vector<std::string> records;
  for (size_t split : {size_t{0}, size_t{1}, size_t{100}, size_t{kBlockSize - 7},
                       size_t{kBlockSize}, whole.size() - 1, whole.size()}) {
    const absl::string_view head(whole.data(), split);
    const absl::string_view tail(whole.data() + split, whole.size() - split);
    ASSERT_TRUE(mapped.AddRecord(head, tail).ok());
    ASSERT_TRUE(plain.AddRecord(head, tail).ok());
    ASSERT_TRUE(plain2.AddRecord(whole).ok());
    records.push_back(whole);
  }
  ASSERT_TRUE(mapped.AddRecord("", "").ok());
  ASSERT_TRUE(plain.AddRecord("", "").ok());
  ASSERT_TRUE(plain2.AddRecord("").ok());
  records.push_back("");
  EXPECT_EQ(dest2.contents_, dest.contents_);
  ASSERT_EQ(dest2.contents_.size(), mapped.file_length());
  EXPECT_EQ(dest2.contents_, FileContents(path).substr(0, dest2.contents_.size()));
  ReportCollector report;
  EXPECT_EQ(records, ReadAll(dest.contents_, &report));
  EXPECT_EQ("", report.message_);
  ASSERT_TRUE((*file)->Close(mapped.file_length()).ok());
  ::unlink(path.c_str());
}

// A writer killed between any two stores of its last append leaves a log
// that reads back as exactly the records before it, with nothing reported:
// for every fragment of the last record, the states "nothing stored",
// "length stored", "length and k data bytes", "all but the type byte".
TEST(MappedLogTest, KillBetweenAnyTwoStoresIsACleanPrefix) {
  const std::string path = TempPath("mapped_stores");
  for (const std::string& last : {std::string("x"), std::string(),
                                  BigString("frag", 2 * kBlockSize + 500)}) {
    auto file = MappedLogFile::Create(path, kBlockSize, kBlockSize);
    ASSERT_TRUE(file.ok()) << file.status();
    Writer writer(file->get());
    const std::vector<std::string> before = {"small", BigString("big", kBlockSize - 20), "y"};
    for (const std::string& r : before) ASSERT_TRUE(writer.AddRecord(r).ok());
    const uint64_t start = writer.file_length();
    ASSERT_TRUE(writer.AddRecord(last).ok());
    const std::string full = FileContents(path);
    // The physical records of `last`, as the framing rules place them.
    std::vector<std::pair<size_t, size_t>> fragments;  // (header offset, data bytes)
    size_t pos = start, left = last.size();
    do {
      if (kBlockSize - pos % kBlockSize < kHeaderSize) pos += kBlockSize - pos % kBlockSize;
      const size_t n = std::min(left, kBlockSize - pos % kBlockSize - kHeaderSize);
      fragments.push_back({pos, n});
      pos += kHeaderSize + n;
      left -= n;
    } while (left > 0);
    ASSERT_EQ(writer.file_length(), pos);
    int states = 0;
    for (size_t f = 0; f < fragments.size(); ++f) {
      const auto [h, n] = fragments[f];
      // k = -2: nothing stored; -1: length only; 0..n: length and k bytes;
      // n + 1: length, data and checksum (no type byte).
      for (long k = -2; k <= static_cast<long>(n) + 1;
           k = (k < 2 || k >= static_cast<long>(n) - 1) ? k + 1 : static_cast<long>(n) - 1) {
        std::string state = full;
        std::fill(state.begin() + h, state.end(), '\0');
        if (k >= -1) std::memcpy(&state[h + 4], &full[h + 4], 2);
        if (k >= 0) std::memcpy(&state[h + kHeaderSize], &full[h + kHeaderSize],
                                std::min<size_t>(k, n));
        if (k == static_cast<long>(n) + 1) std::memcpy(&state[h], &full[h], 4);
        ReportCollector report;
        EXPECT_EQ(before, ReadAll(state, &report)) << "fragment " << f << " k " << k;
        EXPECT_EQ("", report.message_) << "fragment " << f << " k " << k;
        ++states;
      }
    }
    EXPECT_GE(states, 4);  // at least: nothing, length, length + data, all but the type
    // And committed, it is there.
    ReportCollector report;
    std::vector<std::string> all = before;
    all.push_back(last);
    EXPECT_EQ(all, ReadAll(full, &report));
    EXPECT_EQ("", report.message_);
    ASSERT_TRUE((*file)->Close(writer.file_length()).ok());
  }
  ::unlink(path.c_str());
}

std::string KillRecord(int i) { return BigString(NumberString(i), (i * 7919) % 700); }

// A child process appends records through the mapping as fast as it can and
// is killed with SIGKILL at an arbitrary point of an append: the file reads
// back as an exact prefix of what it appended, with nothing reported.
TEST(MappedLogTest, SigkillMidAppendLeavesACleanPrefix) {
  const std::string path = TempPath("mapped_kill");
  for (int round = 0; round < 5; ++round) {
    int ready[2];
    ASSERT_EQ(0, pipe(ready));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(ready[0]);
      auto file = MappedLogFile::Create(path, kBlockSize, 8 * kBlockSize);
      if (!file.ok()) _exit(2);
      Writer writer(file->get());
      // Bounded: the parent kills the child long before the end.
      for (int i = 0; i < 2000000; ++i) {
        if (!writer.AddRecord(KillRecord(i)).ok()) _exit(3);
        if (i == 1000) {
          char c = 1;
          if (write(ready[1], &c, 1) != 1) _exit(4);
        }
      }
      _exit(0);
    }
    close(ready[1]);
    pollfd p = {ready[0], POLLIN, 0};
    ASSERT_EQ(1, poll(&p, 1, 20000)) << "child did not start appending";
    char c;
    ASSERT_EQ(1, read(ready[0], &c, 1));
    close(ready[0]);
    usleep(1000 * (1 + round * 3));  // fixed delays: 1, 4, 7, 10, 13 ms
    ASSERT_EQ(0, kill(child, SIGKILL));
    int status = 0;
    ASSERT_EQ(child, waitpid(child, &status, 0));
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before the kill (status " << status
                                     << "): nothing was tested";
    ReportCollector report;
    const std::vector<std::string> records = ReadAll(FileContents(path), &report);
    EXPECT_EQ("", report.message_) << "round " << round;
    ASSERT_GT(records.size(), 1000u) << "round " << round;
    for (size_t i = 0; i < records.size(); ++i) {
      ASSERT_EQ(KillRecord(static_cast<int>(i)), records[i]) << "round " << round << " record " << i;
    }
    std::printf("round %d: killed after %zu complete records\n", round, records.size());
    ::unlink(path.c_str());
  }
}

}  // namespace
}  // namespace log
}  // namespace journal
}  // namespace revenant
