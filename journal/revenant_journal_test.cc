// Runs the revenant-journal binary on good and corrupted journals and checks
// its exit codes and output.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "api/api_ids.h"
#include "journal/api_name.h"
#include "journal/file.h"
#include "journal/journal.h"

namespace revenant {
namespace journal {
namespace {

using ::testing::HasSubstr;

struct ToolRun {
  int exit_code = -1;
  std::string output;
};

ToolRun RunTool(const std::string& args) {
  const char* srcdir = getenv("TEST_SRCDIR");
  const std::string tool =
      absl::StrCat(srcdir ? srcdir : ".", "/revenant/journal/revenant-journal");
  const std::string cmd = absl::StrCat(tool, " ", args, " 2>&1");
  ToolRun run;
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return run;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string MakeJournal(const std::string& name) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/", name);
  auto j = Journal::Open(dir, "job1", 0, {});
  EXPECT_TRUE(j.ok()) << j.status();
  JournalEntry a;
  a.set_seq(1);
  a.set_api_id(static_cast<uint32_t>(api::ApiId::cudaGetLastError));
  a.add_creates(0xabc0);
  EXPECT_TRUE((*j)->AppendSetup(a).ok());
  JournalEntry b;
  b.set_seq(2);
  b.set_api_id(static_cast<uint32_t>(api::ApiId::cudaMallocAsync));
  b.add_overwrites(0xabc0);
  b.set_inline_payload(std::string(300000, 'x'));
  EXPECT_TRUE((*j)->AppendSetup(b).ok());
  JournalEntry c;
  c.set_seq(3);
  c.set_api_id(static_cast<uint32_t>(api::ApiId::cudaStreamCreateWithFlags));
  c.set_flags(2);
  EXPECT_TRUE((*j)->AppendMinibatch(c).ok());
  return dir;
}

std::string Find(const std::string& dir, const std::string& suffix) {
  absl::StatusOr<std::vector<std::string>> names = ListDir(dir);
  EXPECT_TRUE(names.ok());
  for (const std::string& n : *names) {
    if (n.rfind("setup-", 0) == 0 && n.size() > suffix.size() &&
        n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      return dir + "/" + n;
    }
  }
  ADD_FAILURE() << "no setup *" << suffix;
  return "";
}

// Names come from the API table; ids it does not know stay numeric.
TEST(ApiNameTest, NamesFromTheApiTable) {
  EXPECT_EQ("cudaGetLastError", ApiName(static_cast<uint16_t>(api::ApiId::cudaGetLastError)));
  EXPECT_EQ("(outcome)", ApiName(0));
  EXPECT_EQ("65000", ApiName(65000));
}

TEST(RevenantJournalTest, VerifyGoodJournal) {
  const std::string dir = MakeJournal("good");
  ToolRun r = RunTool("verify " + dir);
  EXPECT_EQ(0, r.exit_code) << r.output;
  EXPECT_THAT(r.output, HasSubstr("OK: setup 2 entries, minibatch 1 entries"));
}

// verify names the current minibatch and the request its boundary precedes.
TEST(RevenantJournalTest, VerifyNamesWhereTheMinibatchStarts) {
  const std::string dir = MakeJournal("boundary");
  {
    auto j = Journal::Open(dir, "job1", 0, {});
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->MarkBoundary(4, 7).ok());
  }
  ToolRun r = RunTool("verify " + dir);
  EXPECT_EQ(0, r.exit_code) << r.output;
  EXPECT_THAT(r.output, HasSubstr("OK: setup 2 entries, minibatch 0 entries; minibatch 4 from "
                                  "request 7"));
}

// Payloads released behind a snapshot: verify passes and says how many,
// dump marks them.
TEST(RevenantJournalTest, ReleasedPayloadsAreShown) {
  const std::string dir = absl::StrCat(getenv("TEST_TMPDIR"), "/released");
  {
    auto j = Journal::Open(dir, "job1", 0, {});
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->MarkBoundary(1).ok());
    for (uint64_t seq = 2; seq <= 6; seq += 2) {
      JournalEntry e;
      e.set_seq(seq);
      e.set_api_id(static_cast<uint32_t>(api::ApiId::cudaMemcpyAsync));
      ASSERT_TRUE((*j)->AppendMinibatch(e, std::string(600000, 'a' + seq)).ok());
    }
    absl::StatusOr<uint64_t> freed = (*j)->ReleasePayloadsBefore(5);
    ASSERT_TRUE(freed.ok()) << freed.status();
  }
  ToolRun v = RunTool("verify " + dir);
  EXPECT_EQ(0, v.exit_code) << v.output;
  EXPECT_THAT(v.output, HasSubstr("minibatch 3 entries (2 with their payloads released behind a "
                                  "snapshot: not checked, never replayed)"));
  ToolRun d = RunTool("dump " + dir);
  EXPECT_EQ(0, d.exit_code) << d.output;
  EXPECT_THAT(d.output, HasSubstr("minibatch seq=2 api=cudaMemcpyAsync"));
  EXPECT_THAT(d.output, HasSubstr("payload=600000@0(released behind a snapshot)"));
  EXPECT_THAT(d.output, HasSubstr("payload=600000@1200000(crc32c="));
}

TEST(RevenantJournalTest, DumpAndStats) {
  const std::string dir = MakeJournal("dump");
  ToolRun d = RunTool("dump " + dir);
  EXPECT_EQ(0, d.exit_code) << d.output;
  EXPECT_THAT(d.output, HasSubstr("setup seq=1 api=cudaGetLastError flags=0 minibatch=0 args=0 "
                                  "payload=0(inline) creates=[0xabc0]"));
  EXPECT_THAT(d.output, HasSubstr("setup seq=2 api=cudaMallocAsync"));
  EXPECT_THAT(d.output, HasSubstr("payload=300000@0"));
  EXPECT_THAT(d.output, HasSubstr("overwrites=[0xabc0]"));
  EXPECT_THAT(d.output, HasSubstr("minibatch seq=3 api=cudaStreamCreateWithFlags flags=0x2"));
  ToolRun s = RunTool("stats " + dir);
  EXPECT_EQ(0, s.exit_code) << s.output;
  EXPECT_THAT(s.output, HasSubstr("setup: records=2"));
  EXPECT_THAT(s.output, HasSubstr("payload_bytes=300000 payload_file_bytes=300000"));
  EXPECT_THAT(s.output, HasSubstr("minibatch: records=1"));
  EXPECT_THAT(s.output, HasSubstr("setup api=cudaMallocAsync records=1"));
}

TEST(RevenantJournalTest, VerifyCorruptLog) {
  const std::string dir = MakeJournal("badlog");
  const std::string log = Find(dir, ".log");
  std::string s;
  ASSERT_TRUE(ReadFileToString(log, &s).ok());
  s[s.size() - 3] ^= 0x10;  // inside the last setup record
  ASSERT_TRUE(WriteStringToFile(log, s).ok());
  ToolRun r = RunTool("verify " + dir);
  EXPECT_EQ(1, r.exit_code) << r.output;
  EXPECT_THAT(r.output, HasSubstr("CORRUPT: "));
  EXPECT_THAT(r.output, HasSubstr("checksum mismatch"));
  EXPECT_EQ(1, RunTool("dump " + dir).exit_code);
}

TEST(RevenantJournalTest, VerifyCorruptPayload) {
  const std::string dir = MakeJournal("badpayload");
  const std::string payload = Find(dir, ".payload");
  std::string s;
  ASSERT_TRUE(ReadFileToString(payload, &s).ok());
  s[5000] = 'y';
  ASSERT_TRUE(WriteStringToFile(payload, s).ok());
  ToolRun r = RunTool("verify " + dir);
  EXPECT_EQ(1, r.exit_code) << r.output;
  EXPECT_THAT(r.output, HasSubstr("payload checksum mismatch"));
}

TEST(RevenantJournalTest, UsageAndIoErrors) {
  EXPECT_EQ(2, RunTool("").exit_code);
  EXPECT_EQ(2, RunTool("frobnicate /tmp").exit_code);
  EXPECT_EQ(2, RunTool(absl::StrCat("verify ", getenv("TEST_TMPDIR"), "/does-not-exist"))
                   .exit_code);
}

}  // namespace
}  // namespace journal
}  // namespace revenant
