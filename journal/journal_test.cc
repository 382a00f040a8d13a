// Tests of the journal: round trips, boundaries, compaction, size bounds,
// corruption detection and simulated agent deaths.
#include "journal/journal.h"

#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/crc32c.h"
#include "journal/file.h"
#include "journal/log_format.h"
#include "journal/log_reader.h"
#include "journal/log_writer.h"

namespace revenant {
namespace journal {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

std::string TestDir(const std::string& name) {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/journal_test/", name);
  std::string cmd = "rm -rf '" + dir + "'";
  EXPECT_EQ(0, system(cmd.c_str()));
  return dir;
}

JournalEntry Entry(uint64_t seq, uint32_t api = 7) {
  JournalEntry e;
  e.set_seq(seq);
  e.set_api_id(api);
  e.set_args(absl::StrCat("args-of-", seq));
  return e;
}

struct Read {
  absl::Status status;
  std::vector<JournalEntry> entries;
  std::vector<uint64_t> seqs() const {
    std::vector<uint64_t> s;
    for (const auto& e : entries) s.push_back(e.seq());
    return s;
  }
};

Read ReadLog(const std::string& dir, LogKind kind, bool load_payloads = true) {
  Read r;
  JournalReader::Options options;
  options.load_payloads = load_payloads;
  absl::StatusOr<std::unique_ptr<JournalReader>> reader = JournalReader::Open(dir, options);
  if (!reader.ok()) {
    r.status = reader.status();
    return r;
  }
  auto collect = [&](const JournalEntry& e) {
    r.entries.push_back(e);
    return absl::OkStatus();
  };
  r.status = kind == SETUP ? (*reader)->ReadSetup(collect) : (*reader)->ReadMinibatch(collect);
  return r;
}

std::string OnlyFile(const std::string& dir, const std::string& prefix,
                     const std::string& suffix) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  std::string found;
  for (const std::string& n : *names) {
    if (n.rfind(prefix, 0) == 0 && n.size() >= suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      EXPECT_TRUE(found.empty()) << "two files " << found << " and " << n;
      found = dir + "/" + n;
    }
  }
  EXPECT_FALSE(found.empty()) << "no " << prefix << "*" << suffix << " in " << dir;
  return found;
}

uint64_t WrittenExtent(const std::string& path, bool may_vanish = false);

// The spare minibatch log the journal prepares at Open (a zeroed file a new
// segment is renamed from; readers ignore it, the next Open deletes it).
constexpr char kSpareName[] = "minibatch-spare.tmp";
// Where the spare is made and sized before it is renamed to kSpareName.
constexpr char kPartialSpareName[] = "minibatch-spare-part.tmp";
// A superseded minibatch segment's payload file, kept for the next one's.
constexpr char kSparePayloadName[] = "minibatch-spare-payload.tmp";

// The directory's files less the prepared spare (which a background thread
// creates at some point after Open).
std::vector<std::string> JournalFiles(const std::string& dir) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  std::vector<std::string> out;
  for (const std::string& n : *names) {
    if (n != kSpareName && n != kPartialSpareName && n != kSparePayloadName) out.push_back(n);
  }
  return out;
}

// The journal's background thread makes the spare under kPartialSpareName,
// renames it to kSpareName and removes one not taken: a spare listed a
// moment ago may be gone (renamed or removed) when it is read.
bool IsSpare(const std::string& name) {
  return name == kSpareName || name == kPartialSpareName;
}

// The file's size; 0 for a file that vanished since it was listed, when it
// `may_vanish`.
uint64_t SizeOf(const std::string& path, bool may_vanish) {
  absl::StatusOr<uint64_t> size = FileSize(path);
  if (!size.ok()) {
    EXPECT_TRUE(may_vanish && absl::IsNotFound(size.status())) << path << ": " << size.status();
    return 0;
  }
  return *size;
}

// The bytes the journal holds: payload files whole, log files up to their
// last non-zero byte (a mapped log's preallocated tail and a zeroed spare
// log are not content; DirAllocated counts them).
uint64_t DirBytes(const std::string& dir) {
  uint64_t total = 0;
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  for (const std::string& n : *names) {
    const std::string path = dir + "/" + n;
    if (absl::EndsWith(n, ".log") || n == kSpareName || n == kPartialSpareName) {
      total += WrittenExtent(path, /*may_vanish=*/IsSpare(n));
    } else {
      total += SizeOf(path, /*may_vanish=*/false);
    }
  }
  return total;
}

uint64_t DirAllocated(const std::string& dir) {
  uint64_t total = 0;
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  for (const std::string& n : *names) total += SizeOf(dir + "/" + n, IsSpare(n));
  return total;
}

// How many files of the directory match prefix*suffix.
int CountFiles(const std::string& dir, const std::string& prefix, const std::string& suffix) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  int n = 0;
  for (const std::string& name : *names) {
    if (name.rfind(prefix, 0) == 0 && name.size() >= suffix.size() &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0) {
      ++n;
    }
  }
  return n;
}

// One past the last non-zero byte of the file: the length of the log written
// so far (a mapped log file is followed by a zero-filled tail while open).
uint64_t WrittenExtent(const std::string& path, bool may_vanish) {
  std::string data;
  if (absl::Status s = ReadFileToString(path, &data); !s.ok()) {
    EXPECT_TRUE(may_vanish && absl::IsNotFound(s)) << path << ": " << s;
    return 0;
  }
  size_t n = data.size();
  while (n > 0 && data[n - 1] == '\0') --n;
  return n;
}

std::string Contents(const std::string& path) {
  std::string s;
  EXPECT_TRUE(ReadFileToString(path, &s).ok());
  return s;
}

void SetContents(const std::string& path, const std::string& s) {
  ASSERT_TRUE(WriteStringToFile(path, s).ok());
}

// File offsets of the logical records of a log file, header record included.
std::vector<uint64_t> RecordOffsets(const std::string& path) {
  auto file = NewSequentialFile(path);
  EXPECT_TRUE(file.ok());
  log::Reader reader(file->get(), nullptr);
  std::vector<uint64_t> offsets;
  std::string record;
  while (reader.ReadRecord(&record)) offsets.push_back(reader.LastRecordOffset());
  return offsets;
}

std::unique_ptr<Journal> OpenJournal(const std::string& dir, JournalOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(dir, "job7", 3, options);
  EXPECT_TRUE(j.ok()) << j.status();
  return j.ok() ? std::move(*j) : nullptr;
}

TEST(JournalTest, EmptyJournal) {
  const std::string dir = TestDir("empty");
  auto j = OpenJournal(dir);
  ASSERT_NE(j, nullptr);
  auto reader = JournalReader::Open(dir);
  ASSERT_TRUE(reader.ok()) << reader.status();
  int n = 0;
  auto count = [&](const JournalEntry&) {
    ++n;
    return absl::OkStatus();
  };
  ASSERT_TRUE((*reader)->ReadSetup(count).ok());
  ASSERT_TRUE((*reader)->ReadMinibatch(count).ok());
  EXPECT_EQ(0, n);
  EXPECT_EQ(kFormatVersion, (*reader)->setup_header().format_version());
  EXPECT_EQ("job7", (*reader)->setup_header().job_id());
  EXPECT_EQ(3u, (*reader)->setup_header().rank());
  EXPECT_EQ(SETUP, (*reader)->setup_header().kind());
  EXPECT_EQ(MINIBATCH, (*reader)->minibatch_header().kind());
  EXPECT_GT((*reader)->setup_header().creation_time_unix_micros(), 0);
}

// The agent's exit report names what filled a large setup log.
TEST(JournalTest, SetupBytesByApiCountsEachApisRecordsAndBytes) {
  const std::string dir = TestDir("setup_by_api");
  auto j = OpenJournal(dir);
  ASSERT_NE(j, nullptr);
  uint64_t seq = 0;
  for (int i = 0; i < 5; ++i) {
    JournalEntry e = Entry(++seq, 9);
    e.set_inline_payload(std::string(1000, 'x'));
    ASSERT_TRUE(j->AppendSetup(e).ok());
  }
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(j->AppendSetup(Entry(++seq, 4)).ok());
  ASSERT_TRUE(j->AppendMinibatch(Entry(++seq, 11)).ok());  // not the setup log's
  const std::vector<Journal::ApiBytes> top = j->SetupBytesByApi(10);
  ASSERT_EQ(2u, top.size());
  EXPECT_EQ(9u, top[0].api_id);
  EXPECT_EQ(5u, top[0].records);
  EXPECT_GE(top[0].bytes, 5000u);
  EXPECT_EQ(4u, top[1].api_id);
  EXPECT_EQ(3u, top[1].records);
  EXPECT_GT(top[1].bytes, 0u);
  EXPECT_LT(top[1].bytes, 200u);
  EXPECT_EQ(1u, j->SetupBytesByApi(1).size());
}

TEST(JournalTest, NoJournalIsNotFound) {
  const std::string dir = TestDir("none");
  ASSERT_TRUE(CreateDirs(dir).ok());
  EXPECT_TRUE(absl::IsNotFound(JournalReader::Open(dir).status()));
}

TEST(JournalTest, RoundTripWithInlineAndOutOfLinePayloads) {
  const std::string dir = TestDir("roundtrip");
  auto j = OpenJournal(dir);
  const std::string small(100, 's');
  std::string big(300000, 'b');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  const std::string threshold(4096, 't');  // exactly the threshold: stays inline

  JournalEntry e1 = Entry(1);
  e1.add_creates(0x1000);
  e1.set_inline_payload(small);
  JournalEntry e2 = Entry(2);
  e2.set_inline_payload(big);
  e2.set_minibatch(5);
  e2.set_flags(9);
  JournalEntry e3 = Entry(3);
  e3.set_inline_payload(threshold);
  e3.add_touches(0x1000);
  ASSERT_TRUE(j->AppendSetup(e1).ok());
  ASSERT_TRUE(j->AppendMinibatch(e2).ok());
  ASSERT_TRUE(j->AppendSetup(e3).ok());
  JournalEntry e4 = Entry(4);
  e4.set_inline_payload(big);
  ASSERT_TRUE(j->AppendSetup(e4).ok());

  Read setup = ReadLog(dir, SETUP);
  ASSERT_TRUE(setup.status.ok()) << setup.status;
  ASSERT_THAT(setup.seqs(), ElementsAreArray({1, 3, 4}));
  EXPECT_EQ(small, setup.entries[0].inline_payload());
  EXPECT_EQ(threshold, setup.entries[1].inline_payload());
  EXPECT_EQ(big, setup.entries[2].inline_payload());
  EXPECT_EQ("args-of-4", setup.entries[2].args());
  EXPECT_THAT(setup.entries[1].touches(), ElementsAreArray({0x1000}));
  EXPECT_EQ(1u, setup.entries[1].prev_seq());

  Read mb = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(mb.status.ok()) << mb.status;
  ASSERT_EQ(1u, mb.entries.size());
  EXPECT_EQ(big, mb.entries[0].inline_payload());
  EXPECT_EQ(5u, mb.entries[0].minibatch());
  EXPECT_EQ(9u, mb.entries[0].flags());

  // Large payloads live out of line, small ones inline.
  Read raw = ReadLog(dir, SETUP, /*load_payloads=*/false);
  ASSERT_TRUE(raw.status.ok());
  EXPECT_TRUE(raw.entries[0].has_inline_payload());
  EXPECT_TRUE(raw.entries[1].has_inline_payload());
  ASSERT_TRUE(raw.entries[2].has_payload_ref());
  EXPECT_EQ(0u, raw.entries[2].payload_ref().offset());
  EXPECT_EQ(big.size(), raw.entries[2].payload_ref().length());
  EXPECT_EQ(crc32c::Value(big.data(), big.size()), raw.entries[2].payload_ref().crc32c());
  EXPECT_EQ(big.size(), *FileSize(OnlyFile(dir, "setup-", ".payload")));
  EXPECT_LT(WrittenExtent(OnlyFile(dir, "setup-", ".log")), 6000u);
}

// A journal is private to its owner whatever the process umask: every
// directory it makes is 0700 and every file 0600 (setup and minibatch logs,
// payload files, the spare log, compacted segments).
TEST(JournalTest, FilesAndDirectoriesArePrivateUnderAnyUmask) {
  const std::string base = TestDir("modes");
  const std::string dir = base + "/a/b";
  const mode_t old_umask = umask(0);
  {
    auto j = OpenJournal(dir);
    ASSERT_NE(j, nullptr);
    std::string big(300000, 'p');
    JournalEntry e1 = Entry(1);
    e1.set_inline_payload(big);
    ASSERT_TRUE(j->AppendSetup(e1).ok());
    JournalEntry e2 = Entry(2);
    e2.set_inline_payload(big);
    ASSERT_TRUE(j->AppendMinibatch(e2).ok());
    ASSERT_TRUE(j->MarkBoundary(1).ok());
    ASSERT_TRUE(WriteStringToFile(dir + "/extra", "x").ok());
  }
  umask(old_umask);
  int files = 0;
  for (const std::string& d : {base, base + "/a", dir}) {
    struct stat st {};
    ASSERT_EQ(0, stat(d.c_str(), &st)) << d;
    EXPECT_EQ(0700u, st.st_mode & 07777) << d;
  }
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  ASSERT_TRUE(names.ok()) << names.status();
  for (const std::string& name : *names) {
    struct stat st {};
    ASSERT_EQ(0, stat((dir + "/" + name).c_str(), &st)) << name;
    EXPECT_EQ(0600u, st.st_mode & 07777) << name;
    ++files;
  }
  EXPECT_GE(files, 4);  // both logs, a payload file, the extra file
}

// A journal at its size limit fails as on a full file system: the append
// that would pass the limit gets kResourceExhausted and writes nothing, every
// later append fails too (sticky), and the journal reads back exactly the
// entries appended before, with no torn or half-written record.
TEST(JournalTest, MaxBytesFailsLikeAFullDiskAndWritesNothingOfTheRecord) {
  const std::string dir = TestDir("max_bytes");
  JournalOptions options;
  options.max_bytes = 16 << 10;
  auto j = OpenJournal(dir, options);
  ASSERT_NE(j, nullptr);
  std::vector<uint64_t> written;
  absl::Status s;
  uint64_t seq = 1;
  for (; seq < 10000; ++seq) {
    JournalEntry e = Entry(seq);
    e.set_inline_payload(std::string(200 + seq % 300, static_cast<char>(seq)));
    e.add_creates(seq);  // live: nothing can be compacted away
    s = j->AppendSetup(e);
    if (!s.ok()) break;
    written.push_back(seq);
  }
  ASSERT_FALSE(s.ok()) << "never reached the limit";
  EXPECT_EQ(absl::StatusCode::kResourceExhausted, s.code()) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("is full"));
  EXPECT_GT(written.size(), 10u);
  EXPECT_LE(j->stats().setup_file_bytes + j->stats().minibatch_segment_bytes, options.max_bytes);
  // Sticky: a small entry that would fit fails as well, in either log.
  EXPECT_EQ(absl::StatusCode::kResourceExhausted, j->AppendSetup(Entry(seq + 1)).code());
  EXPECT_EQ(absl::StatusCode::kResourceExhausted, j->AppendMinibatch(Entry(seq + 2)).code());
  j.reset();
  Read setup = ReadLog(dir, SETUP);
  ASSERT_TRUE(setup.status.ok()) << setup.status;
  EXPECT_THAT(setup.seqs(), ElementsAreArray(written));
  Read mb = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(mb.status.ok()) << mb.status;
  EXPECT_TRUE(mb.entries.empty());
}

// Regression: reopening a journal (a replacement agent) with size bounds
// set crashed: the bound was computed while the carried-over setup entries
// were appended, before the minibatch log existed. The bounds apply to new
// appends only.
TEST(JournalTest, ReopenWithSizeBoundsCarriesEntriesOver) {
  const std::string dir = TestDir("reopen_bounds");
  {
    auto j = OpenJournal(dir);
    ASSERT_NE(j, nullptr);
    for (uint64_t seq = 1; seq <= 40; ++seq) {
      JournalEntry e = Entry(seq);
      e.set_inline_payload(std::string(300, 'r'));
      e.add_creates(seq);
      ASSERT_TRUE(j->AppendSetup(e).ok());
    }
    ASSERT_TRUE(j->AppendMinibatch(Entry(41)).ok());
  }
  JournalOptions options;
  options.warn_bytes = 1024;
  options.max_bytes = 64 << 10;
  auto j = OpenJournal(dir, options);
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(40u, j->stats().setup_live_entries);
  ASSERT_TRUE(j->AppendSetup(Entry(42)).ok());
  j.reset();
  Read setup = ReadLog(dir, SETUP);
  ASSERT_TRUE(setup.status.ok()) << setup.status;
  EXPECT_EQ(41u, setup.entries.size());
  EXPECT_EQ(42u, setup.entries.back().seq());
}

// warn_bytes warns, at each doubling, and limits nothing.
TEST(JournalTest, WarnBytesWarnsAtEachDoublingAndDoesNotLimit) {
  const std::string dir = TestDir("warn_bytes");
  JournalOptions options;
  options.warn_bytes = 4 << 10;
  auto j = OpenJournal(dir, options);
  ASSERT_NE(j, nullptr);
  testing::internal::CaptureStderr();
  for (uint64_t seq = 1; seq <= 180; ++seq) {
    JournalEntry e = Entry(seq);
    e.set_inline_payload(std::string(300, 'w'));
    e.add_creates(seq);
    ASSERT_TRUE(j->AppendSetup(e).ok()) << seq;
  }
  const std::string log = testing::internal::GetCapturedStderr();
  // ~60 KiB held: warnings at 4, 8, 16 and 32 KiB, each naming the cause.
  EXPECT_GT(j->stats().setup_file_bytes, 32u << 10);
  EXPECT_LT(j->stats().setup_file_bytes, 128u << 10);
  size_t warnings = 0;
  for (size_t at = log.find("no minibatch boundary yet"); at != std::string::npos;
       at = log.find("no minibatch boundary yet", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(4u, warnings) << log;
  EXPECT_THAT(log, HasSubstr("revenantMarkStep()"));
  EXPECT_THAT(log, HasSubstr("next warning at 65536 bytes"));
}

// The hand-written encoder gives exactly protobuf's bytes.
TEST(JournalTest, EncodeEntryMatchesProtobuf) {
  std::mt19937_64 rng(7);
  auto pick = [&](int bits) -> uint64_t {
    const uint64_t v = rng();
    const int shift = static_cast<int>(rng() % 64);
    return rng() % 4 == 0 ? 0 : (v >> shift) & (bits == 64 ? ~0ull : ((1ull << bits) - 1));
  };
  for (int i = 0; i < 2000; ++i) {
    JournalEntry e;
    e.set_seq(pick(64));
    e.set_api_id(static_cast<uint32_t>(pick(32)));
    if (rng() % 2) e.set_args(std::string(rng() % 300, static_cast<char>(i)));
    e.set_flags(static_cast<uint32_t>(pick(32)));
    switch (rng() % 5) {
      case 0: e.set_inline_payload(std::string(rng() % 200, 'p')); break;
      case 3: {
        DeviceCapture* c = e.mutable_capture();
        if (rng() % 4) c->set_file("capture-" + std::to_string(pick(20)));
        c->set_offset(pick(64));
        c->set_length(pick(64));
        break;
      }
      case 1: e.set_inline_payload(""); break;
      case 2: {
        PayloadRef* r = e.mutable_payload_ref();
        r->set_offset(pick(64));
        r->set_length(pick(64));
        r->set_crc32c(static_cast<uint32_t>(pick(32)));
        break;
      }
      default: break;
    }
    e.set_minibatch(pick(64));
    for (int k = rng() % 3; k > 0; --k) e.add_creates(pick(64));
    for (int k = rng() % 3; k > 0; --k) e.add_destroys(pick(64));
    for (int k = rng() % 3; k > 0; --k) e.add_touches(pick(64));
    for (int k = rng() % 3; k > 0; --k) e.add_overwrites(pick(64));
    e.set_prev_seq(pick(64));
    e.set_completes(pick(64));
    e.set_status(static_cast<int32_t>(rng() % 3 == 0 ? -static_cast<int64_t>(pick(31))
                                                     : static_cast<int64_t>(pick(31))));
    if (rng() % 2) e.set_outputs(std::string(rng() % 50, 'o'));
    std::string mine;
    journal_internal::EncodeEntry(e, &mine);
    ASSERT_EQ(e.SerializeAsString(), mine) << e.DebugString();
  }
}

// A payload given by reference is written from the caller's memory (out of
// line above the threshold, inline up to it) and reads back like an inline
// one, through compaction and re-opening too.
TEST(JournalTest, PayloadByReference) {
  const std::string dir = TestDir("by_reference");
  auto j = OpenJournal(dir);
  std::string big(300000, 'b');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 13 + 5);
  const std::string small(4096, 's');

  JournalEntry e1 = Entry(1);
  e1.add_creates(0x2000);
  ASSERT_TRUE(j->AppendSetup(e1, big).ok());
  ASSERT_TRUE(j->AppendSetup(Entry(2), small).ok());
  ASSERT_TRUE(j->AppendMinibatch(Entry(3), big).ok());
  // Both an inline payload and one by reference: refused, nothing written.
  JournalEntry both = Entry(4);
  both.set_inline_payload("x");
  absl::Status s = j->AppendSetup(both, big);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  JournalEntry upload = Entry(5);
  upload.add_overwrites(0x3000);
  ASSERT_TRUE(j->AppendSetup(upload, big).ok());
  // Frees what entry 1 created: compaction drops 1 and 6, keeps 2 and 5.
  JournalEntry free_it = Entry(6);
  free_it.add_destroys(0x2000);
  ASSERT_TRUE(j->AppendSetup(free_it).ok());

  Read raw = ReadLog(dir, SETUP, /*load_payloads=*/false);
  ASSERT_TRUE(raw.status.ok()) << raw.status;
  ASSERT_THAT(raw.seqs(), ElementsAreArray({1, 2, 5, 6}));
  ASSERT_TRUE(raw.entries[0].has_payload_ref());
  EXPECT_EQ(big.size(), raw.entries[0].payload_ref().length());
  EXPECT_EQ(crc32c::Value(big.data(), big.size()), raw.entries[0].payload_ref().crc32c());
  EXPECT_EQ(small, raw.entries[1].inline_payload());
  EXPECT_EQ(2 * big.size(), *FileSize(OnlyFile(dir, "setup-", ".payload")));

  Read mb = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(mb.status.ok()) << mb.status;
  ASSERT_EQ(1u, mb.entries.size());
  EXPECT_EQ(big, mb.entries[0].inline_payload());

  ASSERT_TRUE(j->Compact().ok());
  Read setup = ReadLog(dir, SETUP);
  ASSERT_TRUE(setup.status.ok()) << setup.status;
  ASSERT_THAT(setup.seqs(), ElementsAreArray({2, 5}));
  EXPECT_EQ(small, setup.entries[0].inline_payload());
  EXPECT_EQ(big, setup.entries[1].inline_payload());

  // Re-opening carries the out-of-line payloads over.
  j.reset();
  j = OpenJournal(dir);
  Read again = ReadLog(dir, SETUP);
  ASSERT_TRUE(again.status.ok()) << again.status;
  ASSERT_THAT(again.seqs(), ElementsAreArray({2, 5}));
  EXPECT_EQ(big, again.entries[1].inline_payload());
}

// Damage to a payload written by reference is detected like any other.
TEST(JournalTest, PayloadByReferenceCorruptionIsDetected) {
  const std::string dir = TestDir("by_reference_corrupt");
  auto j = OpenJournal(dir);
  const std::string big(300000, 'q');
  ASSERT_TRUE(j->AppendMinibatch(Entry(1), big).ok());
  j.reset();
  const std::string payload = OnlyFile(dir, "minibatch-", ".payload");
  std::string s = Contents(payload);
  ASSERT_EQ(big.size(), s.size());
  s[4321] ^= 1;
  SetContents(payload, s);
  Read r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("payload checksum mismatch"));
}

TEST(JournalTest, SeqMustIncreaseAcrossBothLogs) {
  const std::string dir = TestDir("seq");
  auto j = OpenJournal(dir);
  ASSERT_TRUE(j->AppendSetup(Entry(5)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendMinibatch(Entry(5))));
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendSetup(Entry(4))));
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendSetup(Entry(0))));
  ASSERT_TRUE(j->AppendMinibatch(Entry(6)).ok());
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendSetup(Entry(6))));
  JournalEntry with_ref = Entry(7);
  with_ref.mutable_payload_ref()->set_length(1);
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendSetup(with_ref)));
  ASSERT_TRUE(j->AppendSetup(Entry(8)).ok());
  EXPECT_THAT(ReadLog(dir, SETUP).seqs(), ElementsAreArray({5, 8}));
  EXPECT_THAT(ReadLog(dir, MINIBATCH).seqs(), ElementsAreArray({6}));
}

TEST(JournalTest, BoundaryClearsMinibatchLog) {
  const std::string dir = TestDir("boundary");
  auto j = OpenJournal(dir);
  uint64_t seq = 0;
  ASSERT_TRUE(j->AppendSetup(Entry(++seq)).ok());
  for (int i = 0; i < 10; ++i) {
    JournalEntry e = Entry(++seq);
    e.set_inline_payload(std::string(300000, 'p'));
    ASSERT_TRUE(j->AppendMinibatch(e).ok());
  }
  EXPECT_EQ(10u, ReadLog(dir, MINIBATCH).entries.size());
  const std::string old_log = OnlyFile(dir, "minibatch-", ".log");
  ASSERT_TRUE(j->MarkBoundary(1).ok());
  Read after = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(after.status.ok());
  EXPECT_TRUE(after.entries.empty());
  // The new segment has a higher number; the old log is kept under its stale
  // name as the log of the next new segment, zeroed by the journal's spare
  // thread (soon: polled here, bounded).
  EXPECT_EQ(2, CountFiles(dir, "minibatch-", ".log"));
  const std::string zeros(*FileSize(old_log), '\0');
  for (int i = 0; i < 500 && Contents(old_log) != zeros; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(zeros, Contents(old_log));
  const std::string live_log = JournalReader::Open(dir).value()->minibatch_log_path();
  EXPECT_NE(old_log, live_log);
  // A payload file is created with the segment's first out-of-line payload.
  EXPECT_EQ(0, CountFiles(dir, "minibatch-", ".payload"));

  ASSERT_TRUE(j->AppendMinibatch(Entry(++seq)).ok());
  ASSERT_TRUE(j->AppendSetup(Entry(++seq)).ok());
  auto reader = JournalReader::Open(dir);
  std::vector<uint64_t> seqs;
  ASSERT_TRUE((*reader)
                  ->ReadMinibatch([&](const JournalEntry& e) {
                    seqs.push_back(e.seq());
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_THAT(seqs, ElementsAreArray({12}));
  EXPECT_EQ(1u, (*reader)->minibatch_header().minibatch());
  EXPECT_EQ(12u, (*reader)->minibatch_header().first_seq());
  EXPECT_THAT(ReadLog(dir, SETUP).seqs(), ElementsAreArray({1, 13}));
  EXPECT_EQ(2u, j->stats().setup_live_entries);
}

// A scripted history and the entries that must survive compaction.
TEST(JournalTest, CompactionKeepsExactlyTheLiveEntries) {
  const std::string dir = TestDir("compact_script");
  JournalOptions options;
  options.compaction_enabled = false;
  auto j = OpenJournal(dir, options);
  auto add = [&](uint64_t seq, std::vector<uint64_t> creates, std::vector<uint64_t> destroys,
                 std::vector<uint64_t> touches, std::vector<uint64_t> overwrites,
                 size_t payload = 0) {
    JournalEntry e = Entry(seq);
    for (auto k : creates) e.add_creates(k);
    for (auto k : destroys) e.add_destroys(k);
    for (auto k : touches) e.add_touches(k);
    for (auto k : overwrites) e.add_overwrites(k);
    if (payload) e.set_inline_payload(std::string(payload, static_cast<char>('a' + seq % 26)));
    ASSERT_TRUE(j->AppendSetup(e).ok());
  };
  add(1, {}, {}, {}, {});              // no keys (e.g. a module load): kept
  add(2, {100}, {}, {}, {});           // malloc A
  add(3, {}, {}, {}, {100}, 9000);     // upload A (out of line)
  add(4, {200}, {}, {}, {});           // malloc B
  add(5, {}, {}, {100}, {});           // memset-ish touch of A
  add(6, {}, {}, {}, {100}, 9000);     // upload A again: drops 3
  add(7, {}, {}, {200}, {});           // touch B
  add(8, {}, {200}, {}, {});           // free B: drops 4, 7, 8
  add(9, {300}, {}, {100}, {});        // create handle C that touches A: kept
  add(10, {}, {999}, {}, {});          // destroy of an unknown key: kept
  add(11, {400}, {}, {}, {});          // malloc D
  add(12, {}, {}, {}, {400}, 5000);    // upload D
  add(13, {}, {400}, {}, {});          // free D: drops 11, 12, 13
  add(14, {}, {}, {}, {100, 500}, 20); // overwrite A and unknown E: drops 6
  const std::vector<uint64_t> live = {1, 2, 5, 9, 10, 14};
  EXPECT_EQ(live.size(), j->stats().setup_live_entries);
  EXPECT_EQ(14u, ReadLog(dir, SETUP).entries.size());  // nothing dropped yet

  ASSERT_TRUE(j->Compact().ok());
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray(live));
  EXPECT_EQ(std::string(20, 'a' + 14 % 26), r.entries.back().inline_payload());
  // The out-of-line payloads of 3, 6 and 12 are garbage now: gone.
  EXPECT_EQ(0, CountFiles(dir, "setup-", ".payload"));
  EXPECT_EQ(1u, j->stats().compactions);
  // (The last record ends in a non-zero byte, so the extent is its end.)
  EXPECT_EQ(j->stats().setup_file_bytes, WrittenExtent(OnlyFile(dir, "setup-", ".log")));

  // Appends continue in the compacted segment, with a sound chain.
  add(15, {}, {}, {}, {100}, 7000);  // drops 14? no: 14 still overwrites E
  add(16, {}, {100}, {}, {});        // free A: drops 2, 5, 15, and 9's touch... 9 holds C
  r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({1, 2, 5, 9, 10, 14, 15, 16}));
  ASSERT_TRUE(j->Compact().ok());
  r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({1, 9, 10, 14}));
}

// An outcome (an entry that `completes` another) of an entry no longer live
// -- a destroy, dropped with its keys -- is dropped at once; the outcome of a
// keyless entry that stays is kept, and one that creates a key holds its
// request.
TEST(JournalTest, OutcomesOfDroppedEntriesAreDropped) {
  const std::string dir = TestDir("outcomes");
  JournalOptions options;
  options.compaction_enabled = false;
  auto j = OpenJournal(dir, options);
  auto add = [&](uint64_t seq, uint64_t completes, std::vector<uint64_t> creates,
                 std::vector<uint64_t> destroys) {
    JournalEntry e = Entry(seq);
    if (completes != 0) e.set_completes(completes);
    for (auto k : creates) e.add_creates(k);
    for (auto k : destroys) e.add_destroys(k);
    ASSERT_TRUE(j->AppendSetup(e).ok());
  };
  add(2, 0, {}, {});      // create a handle: its key comes with the outcome
  add(3, 2, {100}, {});   // outcome: creates 100, holds 2
  add(4, 0, {}, {});      // a keyless call (kept)
  add(5, 4, {}, {});      // its outcome (kept)
  add(6, 0, {}, {100});   // destroy: drops 2, 3 and itself
  add(7, 6, {}, {});      // the destroy's outcome: dropped too
  EXPECT_EQ(2u, j->stats().setup_live_entries);
  ASSERT_TRUE(j->Compact().ok());
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({4, 5}));
}

// Liveness stated declaratively (independently of the journal's reference
// counting): which entries of `history` must survive compaction.
std::vector<uint64_t> ExpectedLive(const std::vector<JournalEntry>& h) {
  auto in = [](const google::protobuf::RepeatedField<uint64_t>& f, uint64_t k) {
    return std::find(f.begin(), f.end(), k) != f.end();
  };
  std::vector<uint64_t> live;
  for (size_t i = 0; i < h.size(); ++i) {
    const JournalEntry& e = h[i];
    if (e.creates().empty() && e.destroys().empty() && e.touches().empty() &&
        e.overwrites().empty()) {
      live.push_back(e.seq());
      continue;
    }
    bool alive = false;
    auto destroyed_later = [&](uint64_t k) {
      for (size_t j = i + 1; j < h.size(); ++j)
        if (in(h[j].destroys(), k)) return true;
      return false;
    };
    for (uint64_t k : e.creates())
      if (!in(e.destroys(), k) && !destroyed_later(k)) alive = true;
    for (uint64_t k : e.touches())
      if (!in(e.destroys(), k) && !destroyed_later(k)) alive = true;
    for (uint64_t k : e.overwrites()) {
      if (in(e.destroys(), k)) continue;
      bool superseded = false;
      for (size_t j = i + 1; j < h.size(); ++j)
        if (in(h[j].destroys(), k) || in(h[j].overwrites(), k)) superseded = true;
      if (!superseded) alive = true;
    }
    for (uint64_t k : e.destroys()) {
      // Unknown: nothing since the previous destroy of k referenced it.
      bool known = false;
      for (size_t j = i; j-- > 0;) {
        if (in(h[j].destroys(), k)) break;
        if (in(h[j].creates(), k) || in(h[j].touches(), k) || in(h[j].overwrites(), k)) {
          known = true;
          break;
        }
      }
      if (!known) alive = true;
    }
    if (alive) live.push_back(e.seq());
  }
  return live;
}

TEST(JournalTest, RandomizedCompactionMatchesDeclarativeLiveness) {
  const uint32_t kSeed = 20260101;
  std::printf("seed %u\n", kSeed);
  std::mt19937 rng(kSeed);
  const std::string dir = TestDir("compact_random");
  JournalOptions options;
  options.compaction_min_dead_bytes = 2000;  // compact often along the way
  auto j = OpenJournal(dir, options);
  std::vector<JournalEntry> history;
  for (uint64_t seq = 1; seq <= 3000; ++seq) {
    JournalEntry e = Entry(seq);
    const int kind = rng() % 6;
    const uint64_t key = rng() % 12;
    if (kind == 0) e.add_creates(key);
    if (kind == 1) e.add_destroys(key);
    if (kind == 2) e.add_touches(key);
    if (kind == 3) {
      e.add_overwrites(key);
      if (rng() % 3 == 0) e.set_inline_payload(std::string(5000 + rng() % 100, 'x'));
    }
    if (kind == 4) {
      e.add_touches(key);
      e.add_overwrites(rng() % 12);
      e.add_creates(100 + rng() % 4);
    }
    // kind 5: no keys.
    if (kind == 5 && rng() % 4 != 0) {
      e.add_destroys(100 + rng() % 4);
    }
    history.push_back(e);
    ASSERT_TRUE(j->AppendSetup(e).ok()) << "seed " << kSeed << " seq " << seq;
  }
  EXPECT_GT(j->stats().compactions, 0u);
  ASSERT_TRUE(j->Compact().ok());
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray(ExpectedLive(history))) << "seed " << kSeed;
  // Every surviving entry is intact.
  for (const JournalEntry& e : r.entries) {
    EXPECT_EQ(history[e.seq() - 1].inline_payload(), e.inline_payload()) << e.seq();
    EXPECT_EQ(history[e.seq() - 1].args(), e.args());
  }
}

// The journal must not grow with the number of iterations of a training loop
// that frees and reallocates, or re-uploads, the same buffer. Sizes oscillate
// between compactions, so compare the peak over iterations 1..100 with the
// peak over 9901..10000 and the final size.
//
// Compaction runs when dead bytes exceed live bytes, so the size cycles
// between about live and 2 * live. The thresholds here make that cycle short
// enough to complete within the first 100 iterations.
void CheckSizeBound(const std::string& name, bool overwrite_loop, size_t weight_bytes) {
  const std::string dir = TestDir(name);
  JournalOptions options;
  options.compaction_min_dead_bytes = 1024;
  // A smaller minibatch chunk than the default: several new segments.
  options.minibatch_first_chunk = 512 << 10;
  auto j = OpenJournal(dir, options);
  uint64_t seq = 0;
  // Live base state: a module load and a weight buffer.
  ASSERT_TRUE(j->AppendSetup(Entry(++seq, 1)).ok());
  JournalEntry w = Entry(++seq, 2);
  w.add_creates(0x7000);
  w.set_inline_payload(std::string(weight_bytes, 'w'));
  ASSERT_TRUE(j->AppendSetup(w).ok());
  uint64_t peak_early = 0, peak_late = 0, at100 = 0, at10000 = 0;
  for (int i = 1; i <= 10000; ++i) {
    if (overwrite_loop) {
      JournalEntry e = Entry(++seq, 3);
      e.add_overwrites(0x7000);
      e.set_inline_payload(std::string(8192, static_cast<char>(i)));
      ASSERT_TRUE(j->AppendSetup(e).ok());
    } else {
      JournalEntry m = Entry(++seq, 4);
      m.add_creates(0x9000);
      ASSERT_TRUE(j->AppendSetup(m).ok());
      JournalEntry f = Entry(++seq, 5);
      f.add_destroys(0x9000);
      ASSERT_TRUE(j->AppendSetup(f).ok());
    }
    ASSERT_TRUE(j->AppendMinibatch(Entry(++seq, 6)).ok());
    if (i % 10 == 0) {
      ASSERT_TRUE(j->MarkBoundary(i / 10).ok());
    }
    // The files' content, less the finished minibatches that boundary
    // markers leave in the live minibatch segment (at most a first chunk of
    // them, dropped when the segment is replaced: bounded by DirAllocated
    // below).
    const JournalStats st = j->stats();
    const uint64_t size = DirBytes(dir) - (st.minibatch_segment_bytes - st.minibatch_file_bytes);
    if (i <= 100) peak_early = std::max(peak_early, size);
    if (i > 9900) peak_late = std::max(peak_late, size);
    if (i == 100) at100 = size;
    if (i == 10000) at10000 = size;
  }
  std::printf("%s: size@100=%llu size@10000=%llu peak(1..100)=%llu peak(9901..10000)=%llu "
              "compactions=%llu\n",
              name.c_str(), (unsigned long long)at100, (unsigned long long)at10000,
              (unsigned long long)peak_early, (unsigned long long)peak_late,
              (unsigned long long)j->stats().compactions);
  EXPECT_LE(static_cast<double>(peak_late), 1.1 * peak_early);
  EXPECT_LE(static_cast<double>(at10000), 1.1 * peak_early);
  // Preallocation adds at most a chunk per log (the minibatch log's first
  // one, a growing setup log's at most 1 MiB) plus the spare minibatch log.
  EXPECT_LE(DirAllocated(dir), at10000 + 2 * options.minibatch_first_chunk + (1 << 20));
  EXPECT_GT(j->stats().compactions, 10u);
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_GE(r.entries.size(), 2u);
  EXPECT_EQ(std::string(weight_bytes, 'w'), r.entries[1].inline_payload());
  ASSERT_TRUE(j->Compact().ok());
  r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  if (!overwrite_loop) {
    EXPECT_THAT(r.seqs(), ElementsAreArray({1, 2}));
  } else {
    EXPECT_THAT(r.seqs(), ElementsAreArray(std::vector<uint64_t>{1, 2, seq - 1}));
    ASSERT_EQ(3u, r.entries.size());
    EXPECT_TRUE(r.entries[2].inline_payload() == std::string(8192, static_cast<char>(10000)));
  }
}

// Allocations learn their key (the address) only after they execute: an
// outcome entry completing the allocation carries it, and the free drops the
// allocation, its outcome and itself.
// A handle made and dropped (a descriptor): one record that creates `key`,
// one that destroys it; both dead after the second.
absl::Status AppendMadeAndDropped(Journal* j, uint64_t* seq, uint64_t key) {
  JournalEntry c = Entry(++*seq);
  c.add_creates(key);
  c.set_args(std::string(48, 'a'));
  if (absl::Status s = j->AppendSetup(c); !s.ok()) return s;
  JournalEntry x = Entry(++*seq);
  x.add_destroys(key);
  return j->AppendSetup(x);
}

// A setup log whose live state includes a large payload (a model's weights
// uploaded from pageable memory before the first step) and whose dead bytes
// come from small descriptor records and a dropped payload: compaction runs
// once those dead bytes pass the live records' (not the live payload's), it
// keeps the payload file (linked, nothing copied) and frees the dead
// payload's pages; the live payload reads back whole, also after a re-open.
TEST(JournalTest, CompactionKeepsThePayloadFileAndFreesDeadPayloadPages) {
  const std::string dir = TestDir("compaction_keeps_payloads");
  JournalOptions options;
  options.compaction_min_dead_bytes = 64 << 10;
  auto j = OpenJournal(dir, options);
  std::string weights(8 << 20, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 31 + (i >> 12));
  const std::string scratch(2 << 20, 's');
  uint64_t seq = 0;
  JournalEntry w = Entry(++seq);
  w.add_creates(0x1000);
  ASSERT_TRUE(j->AppendSetup(w, weights).ok());
  JournalEntry d = Entry(++seq);
  d.add_creates(0x2000);
  ASSERT_TRUE(j->AppendSetup(d, scratch).ok());
  const std::string payload_before = OnlyFile(dir, "setup-", ".payload");
  struct stat before {};
  ASSERT_EQ(0, ::stat(payload_before.c_str(), &before));
  JournalEntry gone = Entry(++seq);
  gone.add_destroys(0x2000);
  ASSERT_TRUE(j->AppendSetup(gone).ok());
  // 2 MiB dead against 8 MiB of live payload and a few records: compacted
  // (before, dead bytes had to pass the live payload's).
  ASSERT_EQ(1u, j->stats().compactions);
  // Descriptors made and dropped: their dead records alone (a few hundred
  // KiB) compact it again.
  for (int i = 0; i < 4000 && j->stats().compactions == 1; ++i) {
    ASSERT_TRUE(AppendMadeAndDropped(j.get(), &seq, 0x100000 + i).ok());
  }
  ASSERT_EQ(2u, j->stats().compactions) << "dead records did not compact the setup log";
  const std::string payload_after = OnlyFile(dir, "setup-", ".payload");
  EXPECT_NE(payload_before, payload_after) << "a new segment";
  struct stat after {};
  ASSERT_EQ(0, ::stat(payload_after.c_str(), &after));
  EXPECT_EQ(before.st_ino, after.st_ino) << "the payload file was copied, not kept";
  const uint64_t allocated = static_cast<uint64_t>(after.st_blocks) * 512;
  EXPECT_LT(allocated, weights.size() + (64 << 10)) << "the dead payload's pages were not freed";
  EXPECT_GE(allocated, weights.size());
  const JournalStats st = j->stats();
  EXPECT_LT(st.setup_file_bytes, weights.size() + (256 << 10));
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_GE(r.entries.size(), 1u);
  EXPECT_EQ(1u, r.entries[0].seq());
  EXPECT_TRUE(r.entries[0].inline_payload() == weights);
  // Appending goes on after the kept payloads; a re-open carries all over.
  JournalEntry more = Entry(++seq);
  more.add_creates(0x3000);
  ASSERT_TRUE(j->AppendSetup(more, scratch).ok());
  j.reset();
  j = OpenJournal(dir, options);
  r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_GE(r.entries.size(), 2u);
  EXPECT_TRUE(r.entries.front().inline_payload() == weights);
  EXPECT_TRUE(r.entries.back().inline_payload() == scratch);
}

// Where the file system refuses the hard link, a compaction copies the live
// payloads into a fresh file (the earlier way): the same entries read back.
TEST(JournalTest, CompactionWithoutTheLinkCopiesTheLivePayloads) {
  const std::string dir = TestDir("compaction_copies_payloads");
  JournalOptions options;
  options.compaction_links_payloads = false;
  auto j = OpenJournal(dir, options);
  std::string weights(1 << 20, '\0');
  for (size_t i = 0; i < weights.size(); ++i) weights[i] = static_cast<char>(i * 7 + 3);
  JournalEntry w = Entry(1);
  w.add_creates(0x1000);
  ASSERT_TRUE(j->AppendSetup(w, weights).ok());
  JournalEntry d = Entry(2);
  d.add_creates(0x2000);
  ASSERT_TRUE(j->AppendSetup(d, weights).ok());
  JournalEntry gone = Entry(3);
  gone.add_destroys(0x2000);
  ASSERT_TRUE(j->AppendSetup(gone).ok());
  ASSERT_TRUE(j->Compact().ok());
  struct stat after {};
  ASSERT_EQ(0, ::stat(OnlyFile(dir, "setup-", ".payload").c_str(), &after));
  // A fresh file holding the live payload only (kept, it would keep its
  // size with a hole where the dead one was).
  EXPECT_EQ(weights.size(), static_cast<size_t>(after.st_size));
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_THAT(r.seqs(), ElementsAreArray({1}));
  EXPECT_TRUE(r.entries[0].inline_payload() == weights);
}

// What triggers a compaction follows what it rewrites: keeping the payload
// file, ~200 KiB of dead records beside 1 MiB of live payload compact the
// setup log; copying the payloads, they wait until the dead bytes pass the
// live payload's too.
TEST(JournalTest, CompactionIsTriggeredByWhatItRewrites) {
  for (const bool links : {true, false}) {
    SCOPED_TRACE(links ? "payload file kept" : "payloads copied");
    const std::string dir = TestDir(links ? "trigger_kept" : "trigger_copied");
    JournalOptions options;
    options.compaction_links_payloads = links;
    options.compaction_min_dead_bytes = 64 << 10;
    auto j = OpenJournal(dir, options);
    uint64_t seq = 0;
    JournalEntry w = Entry(++seq);
    w.add_creates(0x1000);
    ASSERT_TRUE(j->AppendSetup(w, std::string(1 << 20, 'w')).ok());
    for (int i = 0; i < 2000; ++i) {
      ASSERT_TRUE(AppendMadeAndDropped(j.get(), &seq, 0x100000 + i).ok());
    }
    if (links) {
      EXPECT_GE(j->stats().compactions, 1u);
    } else {
      EXPECT_EQ(j->stats().compactions, 0u);
    }
    EXPECT_EQ(std::string(1 << 20, 'w'), ReadLog(dir, SETUP).entries.at(0).inline_payload());
  }
}

TEST(JournalTest, OutcomeKeysHoldTheCompletedEntry) {
  const std::string dir = TestDir("outcome_keys");
  JournalOptions options;
  options.compaction_enabled = false;
  auto j = OpenJournal(dir, options);
  auto append = [&](JournalEntry e) { ASSERT_TRUE(j->AppendSetup(std::move(e)).ok()); };
  append(Entry(1));  // a module load: no keys, permanent
  append(Entry(2));  // malloc A, address unknown yet
  JournalEntry outcome = Entry(3);
  outcome.set_api_id(kOutcomeApiId);
  outcome.set_completes(2);
  outcome.add_creates(0x200000000000ull);
  append(outcome);
  append(Entry(4));  // malloc B
  JournalEntry outcome_b = Entry(5);
  outcome_b.set_api_id(kOutcomeApiId);
  outcome_b.set_completes(4);
  outcome_b.add_creates(0x200000001000ull);
  append(outcome_b);
  JournalEntry free_a = Entry(6);
  free_a.add_destroys(0x200000000000ull);
  append(free_a);
  ASSERT_TRUE(j->Compact().ok());
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray(std::vector<uint64_t>{1, 4, 5}));
}

TEST(JournalTest, SizeBoundedUnderAllocFreeLoop) { CheckSizeBound("size_alloc", false, 100); }
TEST(JournalTest, SizeBoundedUnderOverwriteLoop) {
  CheckSizeBound("size_overwrite", true, 20000);
}

// --- Corruption: never replayed silently ---------------------------------

class CorruptionTest : public ::testing::Test {
 protected:
  // Three setup entries, the middle one with an out-of-line payload.
  void SetUp() override {
    dir_ = TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    auto j = OpenJournal(dir_);
    ASSERT_TRUE(j->AppendSetup(Entry(1)).ok());
    JournalEntry e = Entry(2);
    e.set_inline_payload(std::string(300000, 'P'));
    ASSERT_TRUE(j->AppendSetup(e).ok());
    ASSERT_TRUE(j->AppendSetup(Entry(3)).ok());
    JournalEntry m = Entry(4);
    m.set_inline_payload(std::string(300000, 'M'));
    ASSERT_TRUE(j->AppendMinibatch(m).ok());
    log_ = OnlyFile(dir_, "setup-", ".log");
    payload_ = OnlyFile(dir_, "setup-", ".payload");
    offsets_ = RecordOffsets(log_);
    ASSERT_EQ(4u, offsets_.size());  // header + 3 entries
  }

  void ExpectDataLoss(const Read& r, const std::string& file, const std::string& what) {
    EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
    EXPECT_THAT(std::string(r.status.message()), HasSubstr(file));
    EXPECT_THAT(std::string(r.status.message()), HasSubstr(what));
  }

  std::string dir_, log_, payload_;
  std::vector<uint64_t> offsets_;
};

TEST_F(CorruptionTest, IntactReadsBack) {
  Read r = ReadLog(dir_, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({1, 2, 3}));
}

TEST_F(CorruptionTest, BadChecksum) {
  std::string s = Contents(log_);
  s[offsets_[2] + log::kHeaderSize + 2]++;
  SetContents(log_, s);
  Read r = ReadLog(dir_, SETUP);
  ExpectDataLoss(r, log_, absl::StrCat("checksum mismatch at offset ", offsets_[2]));
  EXPECT_THAT(r.seqs(), ElementsAreArray({1}));  // the prefix before the damage
}

TEST_F(CorruptionTest, BadRecordType) {
  std::string s = Contents(log_);
  const uint64_t at = offsets_[3];
  const size_t len = static_cast<unsigned char>(s[at + 4]) |
                     (static_cast<unsigned char>(s[at + 5]) << 8);
  s[at + 6] = 9;
  uint32_t crc = crc32c::Mask(crc32c::Value(&s[at + 6], 1 + len));
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(crc >> (8 * i));
  SetContents(log_, s);
  ExpectDataLoss(ReadLog(dir_, SETUP), log_, "unknown record type 9");
}

TEST_F(CorruptionTest, MiddleWithoutFirst) {
  std::string s = Contents(log_);
  const uint64_t at = offsets_[1];
  const size_t len = static_cast<unsigned char>(s[at + 4]) |
                     (static_cast<unsigned char>(s[at + 5]) << 8);
  s[at + 6] = log::kMiddleType;
  uint32_t crc = crc32c::Mask(crc32c::Value(&s[at + 6], 1 + len));
  for (int i = 0; i < 4; ++i) s[at + i] = static_cast<char>(crc >> (8 * i));
  SetContents(log_, s);
  ExpectDataLoss(ReadLog(dir_, SETUP), log_, "missing start of fragmented record");
}

TEST_F(CorruptionTest, SequenceGap) {
  // Cut the whole record of seq 2 out of the (single-block) log.
  std::string s = Contents(log_);
  s.erase(offsets_[2], offsets_[3] - offsets_[2]);
  SetContents(log_, s);
  Read r = ReadLog(dir_, SETUP);
  ExpectDataLoss(r, log_, "sequence gap");
  EXPECT_THAT(std::string(r.status.message()),
              HasSubstr(absl::StrCat("at offset ", offsets_[2], ": entry seq 3 follows seq 2 "
                                     "but the previous entry read is seq 1")));
}

TEST_F(CorruptionTest, TruncatedPayload) {
  std::string s = Contents(payload_);
  s.resize(s.size() - 1);
  SetContents(payload_, s);
  Read r = ReadLog(dir_, SETUP);
  ExpectDataLoss(r, payload_, "truncated payload at offset 0: entry seq 2 needs 300000 bytes");
  EXPECT_THAT(r.seqs(), ElementsAreArray({1}));
}

TEST_F(CorruptionTest, PayloadChecksumMismatch) {
  std::string s = Contents(payload_);
  s[1234] ^= 0x40;
  SetContents(payload_, s);
  ExpectDataLoss(ReadLog(dir_, SETUP), payload_, "payload checksum mismatch at offset 0");
  // Without loading payloads the log itself is sound.
  EXPECT_TRUE(ReadLog(dir_, SETUP, /*load_payloads=*/false).status.ok());
}

TEST_F(CorruptionTest, MissingPayloadFile) {
  ASSERT_TRUE(RemoveFile(payload_).ok());
  ExpectDataLoss(ReadLog(dir_, SETUP), payload_, "payload file missing");
}

TEST_F(CorruptionTest, ReopenRefusesCorruptJournal) {
  std::string s = Contents(payload_);
  s[0] ^= 1;
  SetContents(payload_, s);
  absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(dir_, "job7", 3, {});
  EXPECT_TRUE(absl::IsDataLoss(j.status())) << j.status();
}

TEST_F(CorruptionTest, ReopenContinuesAndChecksSeq) {
  {
    absl::StatusOr<std::unique_ptr<Journal>> other = Journal::Open(dir_, "job8", 3, {});
    EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
  }
  auto j = OpenJournal(dir_);
  ASSERT_NE(j, nullptr);
  EXPECT_TRUE(absl::IsInvalidArgument(j->AppendSetup(Entry(4))));
  ASSERT_TRUE(j->AppendSetup(Entry(5)).ok());
  Read r = ReadLog(dir_, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({1, 2, 3, 5}));
  EXPECT_EQ(std::string(300000, 'P'), r.entries[1].inline_payload());
  Read m = ReadLog(dir_, MINIBATCH);
  ASSERT_TRUE(m.status.ok()) << m.status;
  EXPECT_THAT(m.seqs(), ElementsAreArray({4}));
  EXPECT_EQ(std::string(300000, 'M'), m.entries[0].inline_payload());
  // Exactly one live segment per log (plus payloads): the old ones are gone.
  EXPECT_EQ(4u, JournalFiles(dir_).size()) << absl::StrJoin(JournalFiles(dir_), " ");
}

// A crash during compaction or a boundary leaves superseded segments and
// unfinished *.tmp files behind: readers use the highest-numbered complete
// segment, and the next writer deletes the rest.
TEST(JournalTest, StaleAndUnfinishedSegmentsAreIgnoredThenRemoved) {
  const std::string dir = TestDir("stale");
  {
    JournalOptions options;
    options.sync = SyncPolicy::kEveryRecord;  // also exercises fdatasync
    auto j = OpenJournal(dir, options);
    JournalEntry a = Entry(1);
    a.add_creates(1);
    ASSERT_TRUE(j->AppendSetup(a).ok());
    JournalEntry b = Entry(2);
    b.add_destroys(1);
    ASSERT_TRUE(j->AppendSetup(b).ok());
    ASSERT_TRUE(j->AppendSetup(Entry(3)).ok());
    ASSERT_TRUE(j->Compact().ok());
    ASSERT_TRUE(j->AppendMinibatch(Entry(4)).ok());
  }
  const std::string live_log = OnlyFile(dir, "setup-", ".log");
  // A superseded lower-numbered segment with different content, and an
  // unfinished higher-numbered one.
  SetContents(dir + "/setup-000000.log", "garbage that is not a log");
  SetContents(dir + "/setup-000099.log.tmp", "half a compaction");
  SetContents(dir + "/setup-000099.payload.tmp", "x");
  SetContents(dir + "/minibatch-000000.log", "old minibatch");
  // A crash while the spare minibatch log was being made: half-made spares
  // under both of its names.
  SetContents(dir + "/" + kSpareName, "");
  SetContents(dir + "/" + kPartialSpareName, "half");
  Read r = ReadLog(dir, SETUP);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({3}));
  EXPECT_THAT(ReadLog(dir, MINIBATCH).seqs(), ElementsAreArray({4}));

  auto j = OpenJournal(dir);
  ASSERT_NE(j, nullptr);
  const std::vector<std::string> names = JournalFiles(dir);
  // The live setup and minibatch logs (payload files only come with
  // out-of-line payloads), besides the spare minibatch log.
  EXPECT_EQ(2u, names.size()) << absl::StrJoin(names, " ");
  for (const std::string& n : names) {
    EXPECT_EQ(std::string::npos, n.find(".tmp")) << n;
    EXPECT_EQ(std::string::npos, n.find("000000")) << n;
    EXPECT_EQ(std::string::npos, n.find("000099")) << n;  // numbers never reused
  }
  EXPECT_THAT(ReadLog(dir, SETUP).seqs(), ElementsAreArray({3}));
  ASSERT_TRUE(j->AppendSetup(Entry(5)).ok());
  EXPECT_THAT(ReadLog(dir, SETUP).seqs(), ElementsAreArray({3, 5}));
}

// An agent killed in the middle of appending its last record: for every cut
// of that record the journal reads back as the clean prefix before it.
TEST(KillMidWriteTest, EveryCutOfTheLastRecordIsACleanPrefix) {
  const std::string dir = TestDir("kill");
  {
    auto j = OpenJournal(dir);
    for (uint64_t seq = 1; seq <= 5; ++seq) ASSERT_TRUE(j->AppendSetup(Entry(seq)).ok());
    // A last record spanning a block boundary (big args stay in the log).
    JournalEntry big = Entry(6);
    big.set_args(std::string(log::kBlockSize + 1000, 'A'));
    ASSERT_TRUE(j->AppendSetup(big).ok());
  }
  const std::string log_path = OnlyFile(dir, "setup-", ".log");
  const std::string full = Contents(log_path);
  const std::vector<uint64_t> offsets = RecordOffsets(log_path);
  ASSERT_EQ(7u, offsets.size());
  const uint64_t last_start = offsets[6];
  ASSERT_GT(full.size(), log::kBlockSize);
  // Truncate in place, longest first, so each step costs one ftruncate.
  for (uint64_t cut = full.size(); cut-- > last_start;) {
    ASSERT_EQ(0, truncate(log_path.c_str(), static_cast<off_t>(cut)));
    Read r = ReadLog(dir, SETUP);
    ASSERT_TRUE(r.status.ok()) << "cut " << cut << ": " << r.status;
    ASSERT_THAT(r.seqs(), ElementsAreArray({1, 2, 3, 4, 5})) << "cut " << cut;
  }
  // And the full file still has all six.
  SetContents(log_path, full);
  EXPECT_EQ(6u, ReadLog(dir, SETUP).entries.size());
}

// Boundaries reuse the previous minibatch log when it stayed within its
// first chunk and start a fresh file when it grew: either way every segment
// reads back exactly, and at most one stale minibatch log (the spare) stays.
// Open prepares a spare minibatch log in the background; the first boundary
// that needs a new segment renames it into place (the same file: no new file,
// allocation or mapping on the appending thread), and the superseded log
// becomes the next spare.
TEST(JournalTest, PreparedSpareBecomesTheFirstNewSegment) {
  const std::string dir = TestDir("prepared_spare");
  auto j = OpenJournal(dir);
  ASSERT_NE(j, nullptr);
  const std::string spare = dir + "/" + kSpareName;
  struct stat st;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  while (::stat(spare.c_str(), &st) != 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
  ASSERT_EQ(0, ::stat(spare.c_str(), &st)) << "no spare after 20 s";
  const ino_t spare_inode = st.st_ino;
  EXPECT_EQ(JournalOptions().minibatch_first_chunk, static_cast<size_t>(st.st_size));
  ASSERT_TRUE(j->AppendSetup(Entry(1)).ok());
  // An out-of-line payload (over the inline threshold) ends the markers: the
  // next boundary starts a new segment.
  JournalEntry big = Entry(2);
  big.set_inline_payload(std::string(300000, 'B'));
  ASSERT_TRUE(j->AppendMinibatch(big).ok());
  const uint64_t before = j->minibatch_segments_started();
  ASSERT_TRUE(j->MarkBoundary(1).ok());
  EXPECT_EQ(before + 1, j->minibatch_segments_started());
  ASSERT_TRUE(j->AppendMinibatch(Entry(3)).ok());
  EXPECT_NE(0, ::stat(spare.c_str(), &st)) << "the spare is still there";
  // The live segment is the highest-numbered one (the superseded log stays,
  // under its old name, as the next spare).
  absl::StatusOr<journal_internal::DirListing> listing = journal_internal::ListJournalDir(dir);
  ASSERT_TRUE(listing.ok()) << listing.status();
  const std::string live =
      dir + "/" + journal_internal::SegmentLogName(MINIBATCH, listing->minibatch);
  ASSERT_EQ(0, ::stat(live.c_str(), &st));
  EXPECT_EQ(spare_inode, st.st_ino) << live << " is not the prepared spare";
  Read m = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(m.status.ok()) << m.status;
  EXPECT_THAT(m.seqs(), ElementsAreArray({3}));
}

TEST(JournalTest, BoundariesReuseOrReplaceTheMinibatchLog) {
  const std::string dir = TestDir("boundaries");
  auto j = OpenJournal(dir);
  uint64_t seq = 0;
  for (uint64_t b = 1; b <= 40; ++b) {
    ASSERT_TRUE(j->MarkBoundary(b).ok());
    // Every 8th minibatch is large (about 300 KiB of log: several chunks).
    const int n = b % 8 == 0 ? 3000 : static_cast<int>(b % 5) * 7;
    std::vector<uint64_t> want;
    for (int i = 0; i < n; ++i) {
      JournalEntry e = Entry(++seq);
      e.set_inline_payload(std::string(seq % 90, 'q'));
      ASSERT_TRUE(j->AppendMinibatch(e).ok());
      want.push_back(seq);
    }
    Read r = ReadLog(dir, MINIBATCH);
    ASSERT_TRUE(r.status.ok()) << "minibatch " << b << ": " << r.status;
    ASSERT_EQ(want, r.seqs()) << "minibatch " << b;
    auto reader = JournalReader::Open(dir);
    ASSERT_TRUE(reader.ok());
    ASSERT_TRUE((*reader)->ReadMinibatch([](const JournalEntry&) { return absl::OkStatus(); }).ok());
    ASSERT_EQ(b, (*reader)->minibatch_header().minibatch());
    for (const auto& e : r.entries) ASSERT_EQ(std::string(e.seq() % 90, 'q'), e.inline_payload());
    ASSERT_LE(CountFiles(dir, "minibatch-", ".log"), 2) << "minibatch " << b;
  }
  j.reset();
  // Closed: the stale spare is gone, the live log is trimmed to its records.
  EXPECT_EQ(1, CountFiles(dir, "minibatch-", ".log"));
  const std::string live = OnlyFile(dir, "minibatch-", ".log");
  EXPECT_EQ(*FileSize(live), WrittenExtent(live));
}

// A boundary's marker names the first request after it (boundary_seq),
// whether the boundary appended a marker to the live segment or started a
// new one; a reader reports it with the minibatch, also when no entry of
// the minibatch was journaled yet, and a journal reopened then (a
// replacement) carries it, so that a later replacement finds it too.
TEST(JournalTest, BoundaryMarkersNameTheRequestAfterThem) {
  const std::string dir = TestDir("boundary_seq");
  auto j = OpenJournal(dir);
  uint64_t seq = 0;
  auto boundary_seq_read = [&dir]() -> uint64_t {
    auto reader = JournalReader::Open(dir);
    EXPECT_TRUE(reader.ok());
    EXPECT_TRUE(
        (*reader)->ReadMinibatch([](const JournalEntry&) { return absl::OkStatus(); }).ok());
    return (*reader)->minibatch_header().boundary_seq();
  };
  int new_segments = 0;
  for (uint64_t b = 1; b <= 12; ++b) {
    const uint64_t started = j->minibatch_segments_started();
    ASSERT_TRUE(j->MarkBoundary(b, seq + 1).ok());
    new_segments += j->minibatch_segments_started() != started;
    EXPECT_EQ(seq + 1, boundary_seq_read()) << "minibatch " << b << ", nothing after it yet";
    // Every 4th minibatch has a payload out of line (a payload file: the
    // next boundary starts a new segment).
    const int n = 5;
    for (int i = 0; i < n; ++i) {
      JournalEntry e = Entry(++seq);
      const std::string payload(b % 4 == 0 && i == 0 ? 1 << 20 : 0, 'p');
      ASSERT_TRUE(j->AppendMinibatch(e, payload).ok());
    }
    EXPECT_EQ(seq - n + 1, boundary_seq_read()) << "minibatch " << b;
  }
  EXPECT_GT(new_segments, 0) << "no boundary started a new segment: the test misses that path";
  // A boundary without the request named: 0 (a journal written before the
  // field, or MarkBoundary's default).
  ASSERT_TRUE(j->MarkBoundary(13).ok());
  EXPECT_EQ(0u, boundary_seq_read());
  // The boundary placed, its request not journaled, then reopened twice.
  ASSERT_TRUE(j->MarkBoundary(14, seq + 1).ok());
  j.reset();
  for (int reopen = 0; reopen < 2; ++reopen) {
    j = OpenJournal(dir);
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(0u, j->stats().minibatch_entries);
    j.reset();
    EXPECT_EQ(seq + 1, boundary_seq_read()) << "after reopen " << reopen;
    auto reader = JournalReader::Open(dir);
    ASSERT_TRUE((*reader)->ReadMinibatch([](const JournalEntry&) { return absl::OkStatus(); }).ok());
    EXPECT_EQ(14u, (*reader)->minibatch_header().minibatch());
  }
  // Reopened with entries after the marker: they stay the minibatch's.
  j = OpenJournal(dir);
  ASSERT_TRUE(j->AppendMinibatch(Entry(++seq)).ok());
  j.reset();
  j = OpenJournal(dir);
  EXPECT_EQ(1u, j->stats().minibatch_entries);
  j.reset();
  EXPECT_EQ(seq, boundary_seq_read());
  EXPECT_THAT(ReadLog(dir, MINIBATCH).seqs(), ElementsAreArray({seq}));
}

// Boundary markers (docs/journal_format.md): a minibatch segment written by
// hand with markers reads as the entries after the last one; a marker that
// breaks the prev_seq chain, carries a seq, or sits in a setup log is data
// loss.
void WriteSegment(const std::string& path, LogKind kind, const std::vector<JournalEntry>& es) {
  ::unlink(path.c_str());
  auto file = NewAppendableFile(path);
  ASSERT_TRUE(file.ok());
  log::Writer w(file->get());
  SegmentHeader h;
  h.set_format_version(kFormatVersion);
  h.set_job_id("job7");
  h.set_rank(3);
  h.set_kind(kind);
  h.set_first_seq(1);
  h.set_segment_number(1);
  h.set_minibatch(4);
  ASSERT_TRUE(w.AddRecord(h.SerializeAsString()).ok());
  for (const JournalEntry& e : es) ASSERT_TRUE(w.AddRecord(e.SerializeAsString()).ok());
  ASSERT_TRUE((*file)->Close().ok());
}

JournalEntry Marker(uint64_t minibatch, uint64_t prev_seq) {
  JournalEntry m;
  m.set_api_id(kBoundaryApiId);
  m.set_minibatch(minibatch);
  m.set_prev_seq(prev_seq);
  return m;
}

JournalEntry Linked(uint64_t seq, uint64_t prev) {
  JournalEntry e = Entry(seq);
  e.set_prev_seq(prev);
  return e;
}

// A minibatch segment's payload file is kept when the segment is superseded
// and becomes the next segment's (its pages stay allocated): every segment
// writes over the same file from its start, the bytes past its own payloads
// are stale, and every entry still reads back exactly. Closing removes the
// spare.
TEST(JournalTest, PayloadFilesAreReusedAcrossMinibatchSegments) {
  const std::string dir = TestDir("payload_reuse");
  auto j = OpenJournal(dir);
  uint64_t seq = 0;
  for (uint64_t b = 1; b <= 12; ++b) {
    ASSERT_TRUE(j->MarkBoundary(b).ok());
    // Large and small minibatches alternate: a small one leaves a stale
    // tail of the large one before it in the file.
    const int n = b % 2 == 0 ? 5 : 1;
    std::vector<std::string> want;
    for (int i = 0; i < n; ++i) {
      std::string payload(300000 + 1000 * b + i, '\0');
      for (size_t k = 0; k < payload.size(); ++k) payload[k] = static_cast<char>(k * 7 + seq);
      ASSERT_TRUE(j->AppendMinibatch(Entry(++seq), payload).ok());
      want.push_back(std::move(payload));
    }
    Read r = ReadLog(dir, MINIBATCH);
    ASSERT_TRUE(r.status.ok()) << "minibatch " << b << ": " << r.status;
    ASSERT_EQ(want.size(), r.entries.size()) << "minibatch " << b;
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(r.entries[i].inline_payload() == want[i]) << "minibatch " << b << " entry " << i;
    }
    ASSERT_EQ(1, CountFiles(dir, "minibatch-", ".payload")) << "minibatch " << b;
    // Written over the previous segment's file: a small minibatch after a
    // large one leaves the file at the large one's size.
    uint64_t written = 0;
    for (const std::string& p : want) written += p.size();
    const uint64_t size = *FileSize(OnlyFile(dir, "minibatch-", ".payload"));
    if (b % 2 == 1 && b > 1) {
      EXPECT_GT(size, written) << "minibatch " << b << " wrote a new payload file";
    } else {
      EXPECT_GE(size, written) << "minibatch " << b;
    }
    EXPECT_EQ(b - 1, j->stats().payload_files_reused) << "minibatch " << b;
  }
  j.reset();
  struct stat st;
  EXPECT_NE(0, ::stat((dir + "/" + kSparePayloadName).c_str(), &st)) << "the spare outlived the journal";
}

// Bytes of tmpfs (or disk) pages a file holds, whatever its size says.
uint64_t AllocatedBytes(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// A payload file reused by the next minibatch segment holds its pages
// already: the helper is not asked for them again (a job with a boundary
// per step reuses it every step), only past them.
TEST(JournalTest, AReusedPayloadFileIsNotAllocatedAheadAgain) {
  const std::string dir = TestDir("payload_reuse_ahead");
  JournalOptions options;
  options.payload_ahead_bytes = uint64_t{4} << 20;
  auto j = OpenJournal(dir, options);
  ASSERT_NE(j, nullptr);
  uint64_t seq = 0;
  const std::string payload(1 << 20, 'p');
  for (uint64_t b = 1; b <= 10; ++b) {
    ASSERT_TRUE(j->MarkBoundary(b).ok());
    ASSERT_TRUE(j->AppendMinibatch(Entry(++seq), payload).ok());
    // The helper runs behind the append: let it finish before the next
    // segment reuses the file (bounded).
    const std::string path = OnlyFile(dir, "minibatch-", ".payload");
    absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (AllocatedBytes(path) < (uint64_t{4} << 20) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  EXPECT_GE(j->stats().payload_files_reused, 8u);
  // The first segment's 4 MiB (and a little past it): not 4 MiB a segment.
  EXPECT_LE(j->stats().payload_bytes_ahead, uint64_t{8} << 20)
      << "the reused file's pages were asked for again";
  Read r = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_EQ(1u, r.entries.size());
  EXPECT_TRUE(r.entries[0].inline_payload() == payload);
}

// A minibatch that grows by a 1 MiB payload per step (a one-rank job's steps
// between snapshots) gets its payload file's pages from the helper thread
// ahead of the writes (JournalOptions::payload_ahead_bytes): the file holds
// pages past its size, without changing the size or any entry read back;
// with the option 0, the writes allocate their own pages.
TEST(JournalTest, PayloadPagesAreAllocatedAheadOfTheWrites) {
  for (const uint64_t ahead : {uint64_t{0}, uint64_t{4} << 20}) {
    SCOPED_TRACE(ahead);
    const std::string dir = TestDir("payload_ahead");
    JournalOptions options;
    options.payload_ahead_bytes = ahead;
    auto j = OpenJournal(dir, options);
    ASSERT_NE(j, nullptr);
    ASSERT_TRUE(j->MarkBoundary(1).ok());
    std::vector<std::string> want;
    uint64_t written = 0;
    for (uint64_t seq = 1; seq <= 10; ++seq) {
      std::string payload(1 << 20, '\0');
      for (size_t k = 0; k < payload.size(); k += 4096) payload[k] = static_cast<char>(k / 4096 + seq);
      ASSERT_TRUE(j->AppendMinibatch(Entry(seq), payload).ok());
      written += payload.size();
      want.push_back(std::move(payload));
      const std::string path = OnlyFile(dir, "minibatch-", ".payload");
      ASSERT_EQ(written, *FileSize(path)) << "the size counts the written bytes only";
      if (ahead == 0) {
        EXPECT_EQ(0u, j->stats().payload_bytes_ahead);
        EXPECT_LE(AllocatedBytes(path), written + (64 << 10)) << "pages past the writes without the option";
        continue;
      }
      // The helper thread's pages cover more than half the option past the
      // writes (bounded wait: it runs behind the append).
      absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (AllocatedBytes(path) < written + ahead / 2 && absl::Now() < deadline) {
        absl::SleepFor(absl::Milliseconds(1));
      }
      EXPECT_GE(AllocatedBytes(path), written + ahead / 2) << "after payload " << seq;
      EXPECT_LE(AllocatedBytes(path), written + 2 * ahead) << "after payload " << seq;
    }
    if (ahead != 0) {
      EXPECT_GE(j->stats().payload_bytes_ahead, written);
    }
    Read r = ReadLog(dir, MINIBATCH);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(want.size(), r.entries.size());
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(r.entries[i].inline_payload() == want[i]) << i;
  }
}

TEST(JournalTest, BoundaryMarkers) {
  const std::string dir = TestDir("markers");
  ASSERT_TRUE(CreateDirs(dir).ok());
  WriteSegment(dir + "/setup-000001.log", SETUP, {Linked(1, 0)});
  const std::string mb = dir + "/minibatch-000002.log";
  // Entries 2, 3 (minibatch 4), marker 5, entry 4, marker 6, entries 6, 7.
  WriteSegment(mb, MINIBATCH,
               {Linked(2, 0), Linked(3, 2), Marker(5, 3), Linked(4, 3), Marker(6, 4),
                Linked(6, 4), Linked(7, 6)});
  Read r = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({6, 7}));
  auto reader = JournalReader::Open(dir);
  ASSERT_TRUE((*reader)->ReadMinibatch([](const JournalEntry&) { return absl::OkStatus(); }).ok());
  EXPECT_EQ(6u, (*reader)->minibatch_header().minibatch());
  // A marker last: an empty minibatch.
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), Marker(5, 2)});
  r = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_TRUE(r.entries.empty());
  // A journal reopened over markers carries the current minibatch only.
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), Marker(5, 2), Linked(3, 2)});
  {
    auto j = OpenJournal(dir);
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(1u, j->stats().minibatch_entries);
  }
  EXPECT_THAT(ReadLog(dir, MINIBATCH).seqs(), ElementsAreArray({3}));

  // A lost entry between a marker and its neighbours is a gap.
  TestDir("markers");
  ASSERT_TRUE(CreateDirs(dir).ok());
  WriteSegment(dir + "/setup-000001.log", SETUP, {Linked(1, 0)});
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), Linked(3, 2), Marker(5, 2), Linked(4, 3)});
  r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("sequence gap"));
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("boundary marker follows seq 2"));
  // The entries before the damage were delivered.
  EXPECT_THAT(r.seqs(), ElementsAreArray({2, 3}));
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), Marker(5, 5)});
  r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  JournalEntry with_seq = Marker(5, 2);
  with_seq.set_seq(3);
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), with_seq});
  r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("boundary marker with a seq"));
  WriteSegment(dir + "/setup-000001.log", SETUP, {Linked(1, 0), Marker(5, 1)});
  r = ReadLog(dir, SETUP);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("boundary marker in a setup log"));
}

// Released payloads (docs/journal_format.md): the payloads of the entries
// before a seq are given up after a release marker, their whole pages freed
// (the file keeps its size); a reader delivers those entries marked, without
// loading them, and the later ones with their bytes; a reopened journal
// carries them over still marked; a release marker out of place is data loss.
JournalEntry ReleaseMarker(uint64_t before, uint64_t prev_seq) {
  JournalEntry m;
  m.set_api_id(kReleaseApiId);
  m.set_released_before(before);
  m.set_prev_seq(prev_seq);
  return m;
}

TEST(JournalTest, ReleasedPayloadsAreFreedAndReadBackMarked) {
  const std::string dir = TestDir("release");
  std::vector<std::string> payloads;
  {
    // No pages allocated ahead (on the helper thread, at times of its own):
    // the payload file's allocated bytes are the payloads'.
    JournalOptions o;
    o.payload_ahead_bytes = 0;
    auto j = OpenJournal(dir, o);
    ASSERT_NE(j, nullptr);
    ASSERT_TRUE(j->MarkBoundary(1).ok());
    for (uint64_t seq = 2; seq <= 10; seq += 2) {
      std::string p((1 << 20) + 1000 * seq + 7, '\0');
      for (size_t k = 0; k < p.size(); ++k) p[k] = static_cast<char>(k * 13 + seq);
      ASSERT_TRUE(j->AppendMinibatch(Entry(seq), p).ok());
      payloads.push_back(std::move(p));
    }
    const std::string payload_file = OnlyFile(dir, "minibatch-", ".payload");
    const uint64_t size = *FileSize(payload_file);
    const uint64_t allocated = AllocatedBytes(payload_file);
    // Nothing before the first entry: nothing to release, no marker.
    absl::StatusOr<uint64_t> none = j->ReleasePayloadsBefore(2);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(0u, *none);
    EXPECT_EQ(0u, j->stats().release_markers);
    absl::StatusOr<uint64_t> freed = j->ReleasePayloadsBefore(7);  // entries 2, 4, 6
    ASSERT_TRUE(freed.ok()) << freed.status();
    const uint64_t released = payloads[0].size() + payloads[1].size() + payloads[2].size();
    EXPECT_EQ(released / 4096 * 4096, *freed);
    EXPECT_EQ(released, j->stats().minibatch_released_bytes);
    EXPECT_EQ(1u, j->stats().release_markers);
    // What a replay may still read, without the journal's lock.
    EXPECT_EQ(j->stats().minibatch_file_bytes - released, j->live_minibatch_bytes());
    EXPECT_EQ(size, *FileSize(payload_file));
    // Freed on the journal's helper thread.
    for (int i = 0; i < 500 && AllocatedBytes(payload_file) > allocated - *freed; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_LE(AllocatedBytes(payload_file), allocated - *freed);
    // Again, nothing new; then past entry 8: only the pages after the
    // first release's last (shared) page.
    absl::StatusOr<uint64_t> again = j->ReleasePayloadsBefore(7);
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(0u, *again);
    ASSERT_TRUE(j->AppendMinibatch(Entry(12), "small").ok());
    absl::StatusOr<uint64_t> more = j->ReleasePayloadsBefore(9);
    ASSERT_TRUE(more.ok());
    EXPECT_EQ((released + payloads[3].size()) / 4096 * 4096 - released / 4096 * 4096, *more);
    EXPECT_EQ(2u, j->stats().release_markers);
    for (int i = 0; i < 500 && j->stats().payload_bytes_freed < *freed + *more; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    EXPECT_EQ(*freed + *more, j->stats().payload_bytes_freed);
  }
  auto check = [&](const Read& r) {
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_THAT(r.seqs(), ElementsAreArray({2, 4, 6, 8, 10, 12}));
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_TRUE(r.entries[i].payload_released()) << i;
      EXPECT_TRUE(r.entries[i].inline_payload().empty()) << i;
    }
    EXPECT_FALSE(r.entries[4].payload_released());
    EXPECT_TRUE(r.entries[4].inline_payload() == payloads[4]);
    EXPECT_FALSE(r.entries[5].payload_released());
    EXPECT_EQ("small", r.entries[5].inline_payload());
  };
  check(ReadLog(dir, MINIBATCH));
  // A journal reopened over it (a replacement) carries the entries over,
  // the released ones still marked, without their payloads.
  {
    auto j = OpenJournal(dir);
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(6u, j->stats().minibatch_entries);
  }
  check(ReadLog(dir, MINIBATCH));
  // A boundary marker ends what a release marker covered.
  TestDir("release");
  ASSERT_TRUE(CreateDirs(dir).ok());
  WriteSegment(dir + "/setup-000001.log", SETUP, {Linked(1, 0)});
  const std::string mb = dir + "/minibatch-000002.log";
  WriteSegment(mb, MINIBATCH,
               {Linked(2, 0), ReleaseMarker(3, 2), Marker(5, 2), Linked(3, 2), Linked(4, 3)});
  Read r = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_THAT(r.seqs(), ElementsAreArray({3, 4}));
  // Out of place: a broken prev_seq chain, a seq, a setup log.
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), Linked(3, 2), ReleaseMarker(3, 2), Linked(4, 3)});
  r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("release marker follows seq 2"));
  JournalEntry with_seq = ReleaseMarker(3, 2);
  with_seq.set_seq(3);
  WriteSegment(mb, MINIBATCH, {Linked(2, 0), with_seq});
  r = ReadLog(dir, MINIBATCH);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("release marker with a seq"));
  WriteSegment(dir + "/setup-000001.log", SETUP, {Linked(1, 0), ReleaseMarker(2, 1)});
  r = ReadLog(dir, SETUP);
  EXPECT_TRUE(absl::IsDataLoss(r.status)) << r.status;
  EXPECT_THAT(std::string(r.status.message()), HasSubstr("release marker in a setup log"));
}

// A boundary hands the payload file on to the next segment, which writes
// over it from its start, only once the pages released in it are freed: with
// a release still being freed at the boundary (right before it, the helper
// slowed) the file is removed instead and the next segment's payloads read
// back intact; given the time to finish, the file is reused (seeded random
// sizes, seed 20261205).
TEST(JournalTest, ReleasedPagesAreFreedBeforeThePayloadFileIsWrittenOver) {
  for (const bool settled : {false, true}) {
    const std::string dir = TestDir(settled ? "release_reuse_settled" : "release_reuse");
    JournalOptions o;
    // A free still queued at the boundary would land on the next segment's
    // payloads while they are read below. Unsettled, the k-th free waits
    // until the boundary after its release returned (at most 10 s); settled,
    // it is 20 ms late.
    auto frees = std::make_shared<std::atomic<int>>(0);
    auto passed = std::make_shared<std::atomic<int>>(0);
    o.before_punch = [settled, frees, passed] {
      if (settled) return absl::SleepFor(absl::Milliseconds(20));
      const int k = ++*frees;
      for (int i = 0; i < 10000 && passed->load() < k; ++i) absl::SleepFor(absl::Milliseconds(1));
    };
    auto j = OpenJournal(dir, o);
    ASSERT_NE(j, nullptr);
    std::mt19937 rng(20261205);
    std::printf("seed 20261205, released pages %s at the boundary\n",
                settled ? "freed" : "being freed");
    uint64_t seq = 0;
    for (uint64_t b = 1; b <= 6; ++b) {
      ASSERT_TRUE(j->MarkBoundary(b).ok());
      passed->store(static_cast<int>(b) - 1);
      std::vector<std::string> want;
      for (int i = 0; i < 4; ++i) {
        std::string p(std::uniform_int_distribution<size_t>(300000, 3000000)(rng), '\0');
        for (size_t k = 0; k < p.size(); k += 64) p[k] = static_cast<char>(rng() | 1);
        ASSERT_TRUE(j->AppendMinibatch(Entry(++seq), p).ok());
        want.push_back(std::move(p));
      }
      absl::SleepFor(absl::Milliseconds(60));
      Read r = ReadLog(dir, MINIBATCH);
      ASSERT_TRUE(r.status.ok()) << "minibatch " << b << ": " << r.status;
      ASSERT_EQ(4u, r.entries.size());
      for (int i = 0; i < 4; ++i) {
        EXPECT_TRUE(r.entries[i].inline_payload() == want[i]) << "minibatch " << b << " entry " << i;
      }
      // All but the last released before the next boundary: right before it,
      // or with time to be freed (the helper's 20 ms pause and the free).
      ASSERT_TRUE(j->ReleasePayloadsBefore(seq).ok());
      if (settled) absl::SleepFor(absl::Milliseconds(500));
    }
    if (settled) {
      EXPECT_GE(j->stats().payload_files_reused, 4u);
    } else {
      EXPECT_EQ(0u, j->stats().payload_files_reused);
    }
    EXPECT_EQ(6u, j->stats().release_markers);
  }
}

// A boundary does not wait for the freeing of pages released before it (an
// asynchronous snapshot reaped just before a journal boundary releases its
// payloads): the helper's free here waits until the boundary returned
// (at most 10 s); a boundary that waited for it would return only after that
// bound, the free seeing no return.
TEST(JournalTest, BoundaryDoesNotWaitForReleasedPagesToBeFreed) {
  const std::string dir = TestDir("release_no_wait");
  auto returned = std::make_shared<absl::Notification>();
  auto saw_return = std::make_shared<std::atomic<int>>(-1);
  JournalOptions o;
  o.before_punch = [returned, saw_return] {
    saw_return->store(returned->WaitForNotificationWithTimeout(absl::Seconds(10)) ? 1 : 0);
  };
  auto j = OpenJournal(dir, o);
  ASSERT_NE(j, nullptr);
  ASSERT_TRUE(j->MarkBoundary(1).ok());
  const std::string p(size_t{4} << 20, 'p');
  ASSERT_TRUE(j->AppendMinibatch(Entry(1), p).ok());
  ASSERT_TRUE(j->AppendMinibatch(Entry(2), p).ok());
  absl::StatusOr<uint64_t> freed = j->ReleasePayloadsBefore(2);
  ASSERT_TRUE(freed.ok()) << freed.status();
  ASSERT_GT(*freed, 0u);
  ASSERT_TRUE(j->MarkBoundary(2, 3).ok());
  returned->Notify();
  ASSERT_TRUE(j->AppendMinibatch(Entry(3), p).ok());
  // The free ran (after the boundary returned) and the next segment's
  // payload reads back intact.
  for (int i = 0; i < 200 && saw_return->load() < 0; ++i) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(1, saw_return->load());
  Read r = ReadLog(dir, MINIBATCH);
  ASSERT_TRUE(r.status.ok()) << r.status;
  ASSERT_FALSE(r.entries.empty());
  EXPECT_TRUE(r.entries.back().inline_payload() == p);
}

// In a mapped log a training step's input batch (here 8 KiB, over the
// write(2) threshold of 4 KiB) stays inline: no payload file, so boundaries
// stay markers in one segment instead of a new segment per step. Written
// with write(2), the same payload goes to the payload file.
TEST(JournalTest, MappedLogsKeepStepPayloadsInline) {
  for (const bool mapped : {true, false}) {
    const std::string dir = TestDir(mapped ? "inline_mapped" : "inline_write");
    JournalOptions options;
    options.mapped_logs = mapped;
    auto j = OpenJournal(dir, options);
    ASSERT_NE(j, nullptr);
    const std::string batch(8192, 'x');
    uint64_t seq = 1;
    ASSERT_TRUE(j->AppendSetup(Entry(seq++)).ok());
    for (uint64_t step = 1; step <= 30; ++step) {
      ASSERT_TRUE(j->MarkBoundary(step).ok());
      std::string payload = batch;
      payload[0] = static_cast<char>(step);
      ASSERT_TRUE(j->AppendMinibatch(Entry(seq++), payload).ok());
      for (int k = 0; k < 5; ++k) ASSERT_TRUE(j->AppendMinibatch(Entry(seq++)).ok());
    }
    EXPECT_EQ(mapped ? 0 : 1, CountFiles(dir, "minibatch-", ".payload")) << "mapped " << mapped;
    EXPECT_EQ(1, CountFiles(dir, "minibatch-", ".log"));
    Read r = ReadLog(dir, MINIBATCH);
    ASSERT_TRUE(r.status.ok()) << r.status;
    ASSERT_EQ(6u, r.entries.size());
    EXPECT_EQ(8192u, r.entries[0].inline_payload().size());
    EXPECT_EQ(30, r.entries[0].inline_payload()[0]);
    if (mapped) {
      // 30 steps of ~8.5 KiB fit the first chunk: one segment holds them
      // all (markers), none started per step.
      EXPECT_GT(j->stats().minibatch_segment_bytes, 30u * 8192u);
    }
  }
}

// A process killed with SIGKILL while it journals a training loop (mapped
// logs, a boundary every step, some entries to the setup log) leaves a
// journal that reads back without any report as an exact prefix of what it
// appended, and that a replacement can reopen and continue.
constexpr int kKillStepRecords = 20;
uint64_t KillSeq(uint64_t step, int i) { return (step - 1) * kKillStepRecords + i + 1; }
bool KillIsSetup(int i) { return i % 7 == 0; }
std::string KillPayload(uint64_t seq) {
  // Now and then out of line (the segment then gets a payload file and the
  // next boundary starts a new segment; otherwise boundaries are markers).
  return std::string(seq % 97 == 0 ? 270000 + seq % 3000 : seq % 300,
                     static_cast<char>('a' + seq % 26));
}

TEST(JournalTest, SigkillWhileJournalingLeavesAnExactPrefix) {
  for (int round = 0; round < 4; ++round) {
    const std::string dir = TestDir(absl::StrCat("kill", round));
    int ready[2];
    ASSERT_EQ(0, pipe(ready));
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      close(ready[0]);
      absl::StatusOr<std::unique_ptr<Journal>> j = Journal::Open(dir, "job7", 3, {});
      if (!j.ok()) _exit(2);
      // Bounded: the parent kills the child long before the end.
      for (uint64_t step = 1; step <= 1000000; ++step) {
        if (!(*j)->MarkBoundary(step).ok()) _exit(3);
        for (int i = 0; i < kKillStepRecords; ++i) {
          const uint64_t seq = KillSeq(step, i);
          JournalEntry e = Entry(seq);
          e.set_minibatch(step);
          const std::string payload = KillPayload(seq);
          absl::Status st = KillIsSetup(i) ? (*j)->AppendSetup(e, payload)
                                           : (*j)->AppendMinibatch(e, payload);
          if (!st.ok()) _exit(4);
        }
        if (step == 50) {
          char c = 1;
          if (write(ready[1], &c, 1) != 1) _exit(5);
        }
      }
      _exit(0);
    }
    close(ready[1]);
    pollfd p = {ready[0], POLLIN, 0};
    ASSERT_EQ(1, poll(&p, 1, 20000)) << "child did not start journaling";
    char c;
    ASSERT_EQ(1, read(ready[0], &c, 1));
    close(ready[0]);
    usleep(1000 * (2 + round * 5));  // fixed delays: 2, 7, 12, 17 ms
    ASSERT_EQ(0, kill(child, SIGKILL));
    int status = 0;
    ASSERT_EQ(child, waitpid(child, &status, 0));
    ASSERT_TRUE(WIFSIGNALED(status)) << "the child finished before the kill: nothing tested";

    uint64_t step = 0;
    for (int pass = 0; pass < 2; ++pass) {
      // pass 0: the files as the killed process left them; pass 1: after a
      // replacement reopened (carried over) the journal.
      Read setup = ReadLog(dir, SETUP);
      Read mb = ReadLog(dir, MINIBATCH);
      ASSERT_TRUE(setup.status.ok()) << setup.status;
      ASSERT_TRUE(mb.status.ok()) << mb.status;
      auto reader = JournalReader::Open(dir);
      ASSERT_TRUE(reader.ok());
      ASSERT_TRUE((*reader)->ReadMinibatch([](const JournalEntry&) { return absl::OkStatus(); }).ok());
      // (A carried-over segment's header does not repeat the minibatch.)
      if (pass == 0) step = (*reader)->minibatch_header().minibatch();
      ASSERT_GE(step, 50u);
      uint64_t last = 0;
      for (const auto& e : setup.entries) last = std::max(last, e.seq());
      for (const auto& e : mb.entries) last = std::max(last, e.seq());
      // Every seq up to the last one journaled, of the setup log and of the
      // current step's minibatch log, is there with its payload: no hole.
      std::vector<uint64_t> want_setup, want_mb;
      for (uint64_t s = 1; s <= step; ++s) {
        for (int i = 0; i < kKillStepRecords; ++i) {
          const uint64_t seq = KillSeq(s, i);
          if (seq > last) continue;
          if (KillIsSetup(i)) {
            want_setup.push_back(seq);
          } else if (s == step) {
            want_mb.push_back(seq);
          }
        }
      }
      EXPECT_EQ(want_setup, setup.seqs()) << "round " << round << " pass " << pass;
      EXPECT_EQ(want_mb, mb.seqs()) << "round " << round << " pass " << pass;
      for (const auto& e : setup.entries) ASSERT_EQ(KillPayload(e.seq()), e.inline_payload());
      for (const auto& e : mb.entries) ASSERT_EQ(KillPayload(e.seq()), e.inline_payload());
      if (pass == 0) {
        std::printf("round %d: killed in step %llu after seq %llu\n", round,
                    static_cast<unsigned long long>(step), static_cast<unsigned long long>(last));
        auto j = OpenJournal(dir);  // carries the journal over, then closes
        ASSERT_NE(j, nullptr);
        EXPECT_EQ(last, j->stats().last_seq);
      }
    }
  }
}

}  // namespace
}  // namespace journal
}  // namespace revenant
