#include "recovery/replay_plan.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/traits.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "journal/journal.h"

namespace revenant {
namespace recovery {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using journal::JournalEntry;

constexpr uint32_t kLaunch = static_cast<uint32_t>(api::ApiId::cudaLaunchKernel);
constexpr uint32_t kSync = static_cast<uint32_t>(api::ApiId::cudaDeviceSynchronize);

// A request entry as the agent's RequestJournal writes it: request `seq` as
// 2·seq, its reply slot (-1: none) in the upper half of the flags.
JournalEntry Request(uint64_t seq, uint32_t api_id = kLaunch, int reply_slot = -1) {
  JournalEntry e;
  e.set_seq(2 * seq);
  e.set_api_id(api_id);
  e.set_flags(static_cast<uint32_t>(reply_slot + 1) << 16);
  e.set_args(absl::StrCat("args-of-", seq));
  return e;
}

// The outcome entry of request `seq`.
JournalEntry Outcome(uint64_t seq, int32_t status = 0) {
  JournalEntry e;
  e.set_seq(2 * seq + 1);
  e.set_api_id(journal::kOutcomeApiId);
  e.set_completes(2 * seq);
  e.set_status(status);
  return e;
}

// A cudaMemcpy request with the given copy mode.
JournalEntry Copy(uint64_t seq, uint8_t mode, uint64_t dst = 0x1000) {
  JournalEntry e = Request(seq, static_cast<uint32_t>(api::ApiId::cudaMemcpy));
  hooks::CopyHead h;
  h.dst = dst;
  h.src = 0x2000;
  h.count = 64;
  h.mode = mode;
  wire::Sizer sz;
  sz.Put(h.dst); sz.Put(h.src); sz.Put(h.count); sz.Put(h.kind); sz.Put(h.stream);
  sz.Put(h.mode);
  std::string body(sz.size(), '\0');
  wire::Encoder out(body.data(), body.size());
  out.Put(h.dst); out.Put(h.src); out.Put(h.count); out.Put(h.kind); out.Put(h.stream);
  out.Put(h.mode);
  e.set_args(body);
  return e;
}

// A merged log of `setup` and `minibatch_log`.
ReplayLog Log(std::vector<JournalEntry> setup, const std::vector<JournalEntry>& minibatch_log,
              uint64_t minibatch) {
  const size_t setup_entries = setup.size();
  setup.insert(setup.end(), minibatch_log.begin(), minibatch_log.end());
  return MergeLogs(std::move(setup), setup_entries, minibatch);
}

std::vector<uint64_t> Seqs(const std::vector<ReplayRequest>& requests) {
  std::vector<uint64_t> out;
  for (const ReplayRequest& r : requests) out.push_back(r.seq);
  return out;
}

std::string TestDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(tmp ? tmp : "/tmp", "/replay_plan_test/", name);
  EXPECT_EQ(0, std::system(("rm -rf '" + dir + "'").c_str()));
  return dir;
}

// Whatever the plan decides for each request, in order; the boundary taken
// where it says, with `survivors_ahead`.
struct Walk {
  std::vector<uint64_t> replayed, superseded, skipped;
  std::vector<bool> in_setup;  // per replayed request
  uint64_t boundary_before = 0;  // the request the boundary came before (0: none)
  bool boundary_at_end = false;
};

Walk WalkPlan(ReplayPlan& plan, bool survivors_ahead = false) {
  Walk w;
  for (const ReplayRequest& r : plan.requests()) {
    if (plan.TakesBoundaryBefore(r)) {
      EXPECT_EQ(w.boundary_before, 0u) << "a second boundary before request " << r.seq;
      w.boundary_before = r.seq;
      plan.BoundaryTaken(survivors_ahead);
    }
    switch (plan.ActionFor(r)) {
      case ReplayAction::kReplay:
        w.replayed.push_back(r.seq);
        w.in_setup.push_back(plan.in_setup());
        break;
      case ReplayAction::kAnswerSuperseded:
        w.superseded.push_back(r.seq);
        break;
      case ReplayAction::kSkip:
        w.skipped.push_back(r.seq);
        break;
    }
  }
  w.boundary_at_end = plan.TakesBoundaryAtEnd();
  return w;
}

TEST(MergeLogsTest, BothLogsInRequestOrderEachMarkedWithItsLog) {
  // A setup-log allocation made during the current minibatch lies between
  // minibatch-log requests.
  ReplayLog log =
      MergeLogs({Request(1), Request(2), Request(5), Request(3), Request(4), Request(6)},
                /*setup_entries=*/3, /*minibatch=*/7);
  std::vector<uint64_t> seqs;
  for (const JournalEntry& e : log.entries) seqs.push_back(e.seq() / 2);
  EXPECT_THAT(seqs, ElementsAre(1, 2, 3, 4, 5, 6));
  EXPECT_THAT(log.from_minibatch, ElementsAre(false, false, true, true, false, true));
  EXPECT_EQ(log.minibatch, 7u);
}

TEST(ReadReplayLogTest, ReadsBothLogsOfAJournal) {
  const std::string dir = TestDir("both_logs");
  {
    absl::StatusOr<std::unique_ptr<journal::Journal>> j =
        journal::Journal::Open(dir, "job", 0, journal::JournalOptions());
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->AppendSetup(Request(1)).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Request(2)).ok());
    ASSERT_TRUE((*j)->MarkBoundary(3).ok());  // request 2 is history now
    ASSERT_TRUE((*j)->AppendMinibatch(Request(4)).ok());
    ASSERT_TRUE((*j)->AppendSetup(Request(5)).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Request(6, kSync, 0)).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Outcome(6)).ok());
  }
  absl::StatusOr<ReplayLog> log = ReadReplayLog(dir);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(log->minibatch, 3u);
  EXPECT_EQ(Seqs(RequestsOf(log->entries)), (std::vector<uint64_t>{1, 4, 5, 6}));
  EXPECT_THAT(log->from_minibatch, ElementsAre(false, true, false, true, true));
}

TEST(ReadReplayLogTest, LoadCompletesBothLogsAndItsErrorRefusesTheRead) {
  const std::string dir = TestDir("load");
  {
    absl::StatusOr<std::unique_ptr<journal::Journal>> j =
        journal::Journal::Open(dir, "job", 0, journal::JournalOptions());
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->AppendSetup(Request(1)).ok());
    ASSERT_TRUE((*j)->MarkBoundary(1).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Request(2)).ok());
  }
  absl::StatusOr<ReplayLog> log = ReadReplayLog(dir, [](std::vector<JournalEntry>* entries) {
    for (JournalEntry& e : *entries) e.set_inline_payload(absl::StrCat("loaded-", e.seq() / 2));
    return absl::OkStatus();
  });
  ASSERT_TRUE(log.ok()) << log.status();
  ASSERT_EQ(log->entries.size(), 2u);
  EXPECT_EQ(log->entries[0].inline_payload(), "loaded-1");
  EXPECT_EQ(log->entries[1].inline_payload(), "loaded-2");
  auto refuse = [](std::vector<JournalEntry>*) { return absl::DataLossError("capture lost"); };
  EXPECT_TRUE(absl::IsDataLoss(ReadReplayLog(dir, refuse).status()));
  EXPECT_TRUE(absl::IsDataLoss(ReadMinibatchLog(dir, 1, refuse).status()));
}

TEST(ReadReplayLogTest, NoJournalIsNotFound) {
  EXPECT_TRUE(absl::IsNotFound(ReadReplayLog(TestDir("none")).status()));
}

TEST(RequestsOfTest, PairsEachRequestWithTheOutcomeThatFollowsIt) {
  const std::vector<JournalEntry> entries = {Request(1), Request(2, kSync, 0), Outcome(2),
                                             Request(3, kSync, 1), Outcome(9)};
  const std::vector<ReplayRequest> r = RequestsOf(entries);
  ASSERT_EQ(Seqs(r), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(r[0].outcome, nullptr);
  EXPECT_EQ(r[1].outcome, &entries[2]);
  // An outcome of another request is not this one's.
  EXPECT_EQ(r[2].outcome, nullptr);
}

TEST(LastAnsweredRequestTest, AnOutcomeOrAReplyInItsSlotTellsTheApplication) {
  const std::vector<JournalEntry> entries = {
      Request(1, kSync, 0), Outcome(1),  // answered: outcome
      Request(2, kSync, 1),              // answered: slot 1 holds reply 2
      Request(3),                        // asynchronous: never answered
      Request(4, kSync, 0),              // slot 0 holds reply 1 only
      Request(5, kSync, 7)};             // a slot past the channel's
  std::map<uint32_t, uint64_t> replies = {{0, 1}, {1, 2}};
  ReplySlots slots{2, [&](uint32_t s) { return replies[s]; }};
  EXPECT_EQ(LastAnsweredRequest(entries, slots), 2u);
  // A later reply in a slot says every earlier request on it was answered.
  replies[0] = 9;
  EXPECT_EQ(LastAnsweredRequest(entries, slots), 4u);
  EXPECT_EQ(LastAnsweredRequest({Request(1)}, slots), 0u);
}

TEST(ReplayPlanTest, FirstMinibatchReplaysEverythingWithoutBoundary) {
  ReplayLog log = Log({Request(1), Request(2), Request(3)}, {}, /*minibatch=*/0);
  ReplayPlan plan(log, {});
  EXPECT_FALSE(plan.in_setup());
  const Walk w = WalkPlan(plan);
  EXPECT_THAT(w.replayed, ElementsAre(1, 2, 3));
  EXPECT_THAT(w.in_setup, ElementsAre(false, false, false));
  EXPECT_EQ(w.boundary_before, 0u);
  EXPECT_FALSE(w.boundary_at_end);
  EXPECT_EQ(plan.last_request(), 3u);
}

TEST(ReplayPlanTest, BoundaryBeforeTheFirstMinibatchLogRequest) {
  ReplayLog log = Log({Request(1), Request(2), Request(5)}, {Request(3), Request(4)}, 2);
  ReplayPlan plan(log, {});
  EXPECT_TRUE(plan.in_setup());
  const Walk w = WalkPlan(plan);
  EXPECT_EQ(w.boundary_before, 3u);
  EXPECT_THAT(w.replayed, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_THAT(w.in_setup, ElementsAre(true, true, false, false, false));
  EXPECT_FALSE(w.boundary_at_end);
}

TEST(ReplayPlanTest, EmptyMinibatchLogTakesTheBoundaryAtTheEnd) {
  ReplayLog log = Log({Request(1), Request(2)}, {}, 4);
  ReplayPlan plan(log, {});
  const Walk w = WalkPlan(plan);
  EXPECT_EQ(w.boundary_before, 0u);
  EXPECT_TRUE(w.boundary_at_end);
  EXPECT_THAT(w.replayed, ElementsAre(1, 2));
}

TEST(ReplayPlanTest, SnapshotBoundaryFallsAtItsRequestEvenInTheSetupLog) {
  // The snapshot was taken before request 3; request 3 (an allocation of
  // this minibatch, in the setup log) replays on top of it.
  ReplayLog log = Log({Request(1), Request(3)}, {Request(4)}, 2);
  ReplayPlan::Options o;
  o.snapshot_boundary_seq = 3;
  ReplayPlan plan(log, o);
  const Walk w = WalkPlan(plan);
  EXPECT_EQ(w.boundary_before, 3u);
  EXPECT_THAT(w.in_setup, ElementsAre(true, false, false));
}

TEST(ReplayPlanTest, MinibatchStepsTheSnapshotHoldsAreSkipped) {
  // The journal's minibatch began before request 2; its snapshot was taken
  // later, at the step boundary before request 5 (a snapshot that completed
  // after its boundary): requests 2-4 are in it, 5 and 6 replay on top.
  ReplayLog log = Log({Request(1), Request(3)}, {Request(2), Request(4, kSync, 0), Outcome(4),
                                                 Request(5), Request(6)},
                      3);
  ReplayPlan::Options o;
  o.snapshot_boundary_seq = 5;
  ReplayPlan plan(log, o);
  const Walk w = WalkPlan(plan);
  EXPECT_EQ(w.boundary_before, 5u);
  EXPECT_THAT(w.skipped, ElementsAre(2, 4));
  // Request 3 (setup log: state the snapshot's allocations need) replays
  // before the snapshot is loaded.
  EXPECT_THAT(w.replayed, ElementsAre(1, 3, 5, 6));
}

TEST(ReplayPlanTest, SurvivorsAheadSupersedeTheMinibatchLogOnly) {
  ReplayLog log =
      Log({Request(1), Request(4)}, {Request(2), Request(3, kSync, 0), Outcome(3)}, 5);
  ReplayPlan plan(log, {});
  const Walk w = WalkPlan(plan, /*survivors_ahead=*/true);
  EXPECT_TRUE(plan.survivors_ahead());
  EXPECT_THAT(w.superseded, ElementsAre(2, 3));
  // A setup-log request after the boundary still builds state the next
  // minibatch uses.
  EXPECT_THAT(w.replayed, ElementsAre(1, 4));
  EXPECT_EQ(plan.last_request(), 4u);
}

TEST(ReplayPlanTest, SharedHostCopiesBeforeTheLastAnsweredRequestAreSkipped) {
  // Copies 1 and 4 write shared host memory, 2 does not; request 3's reply
  // reached the application.
  ReplayLog log = Log(
      {Copy(1, hooks::kDirect, 0xa), Copy(2, hooks::kDirect, 0xb), Request(3, kSync, 0),
       Outcome(3), Copy(4, hooks::kDirect, 0xa)},
      {}, 0);
  std::vector<uint64_t> asked;
  ReplayPlan::Options o;
  o.last_answered = 3;
  o.copies_into_shared_host = [&](const JournalEntry& e) {
    asked.push_back(e.seq() / 2);
    wire::Decoder in(e.args().data(), e.args().size());
    hooks::CopyHead h;
    return h.Decode(in) && h.dst == 0xa;
  };
  ReplayPlan plan(log, o);
  const Walk w = WalkPlan(plan);
  EXPECT_THAT(w.skipped, ElementsAre(1));
  // Copy 4 may never have run: replayed, its bytes still owed.
  EXPECT_THAT(w.replayed, ElementsAre(2, 3, 4));
  // Only requests before the last answered one are asked about.
  EXPECT_THAT(asked, ElementsAre(1, 2));
}

TEST(ReadMinibatchLogTest, TheLogOfAnotherMinibatchIsRefused) {
  const std::string dir = TestDir("minibatch_log");
  {
    absl::StatusOr<std::unique_ptr<journal::Journal>> j =
        journal::Journal::Open(dir, "job", 0, journal::JournalOptions());
    ASSERT_TRUE(j.ok()) << j.status();
    ASSERT_TRUE((*j)->AppendSetup(Request(1)).ok());
    ASSERT_TRUE((*j)->MarkBoundary(2).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Request(2)).ok());
    ASSERT_TRUE((*j)->AppendMinibatch(Request(3)).ok());
  }
  absl::StatusOr<std::vector<JournalEntry>> log = ReadMinibatchLog(dir, 2);
  ASSERT_TRUE(log.ok()) << log.status();
  EXPECT_EQ(Seqs(RequestsOf(*log)), (std::vector<uint64_t>{2, 3}));
  absl::Status other = ReadMinibatchLog(dir, 1).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(other)) << other;
  EXPECT_THAT(std::string(other.message()), HasSubstr("of minibatch 2"));
}

TEST(PlanSilentReplayTest, CountsRequestsAndNotesCollectives) {
  absl::StatusOr<SilentReplayPlan> plan =
      PlanSilentReplay({Request(1), Request(2, kSync, 0), Outcome(2)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(Seqs(plan->requests), (std::vector<uint64_t>{1, 2}));
  EXPECT_FALSE(plan->collectives);

  const uint32_t start = static_cast<uint32_t>(api::ApiId::ncclGroupStart);
  const uint32_t end = static_cast<uint32_t>(api::ApiId::ncclGroupEnd);
  const uint32_t all_reduce = static_cast<uint32_t>(api::ApiId::ncclAllReduce);
  plan = PlanSilentReplay({Request(1, start), Request(2, all_reduce), Request(3, end)});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->collectives);
}

TEST(PlanSilentReplayTest, AGroupAcrossTheBoundaryIsRefused) {
  const uint32_t start = static_cast<uint32_t>(api::ApiId::ncclGroupStart);
  const uint32_t end = static_cast<uint32_t>(api::ApiId::ncclGroupEnd);
  for (const std::vector<JournalEntry>& log :
       {std::vector<JournalEntry>{Request(1, end), Request(2, start)},
        std::vector<JournalEntry>{Request(1, start)}}) {
    absl::Status s = PlanSilentReplay(log).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("group spans"));
  }
}

TEST(ReplaysSilentlyTest, CopiesIntoWhatTheApplicationOwnsNowAreLeftOut) {
  auto none = [](const JournalEntry&) { return false; };
  auto all = [](const JournalEntry&) { return true; };
  EXPECT_TRUE(ReplaysSilently(Request(1), none));
  EXPECT_TRUE(ReplaysSilently(Request(1), nullptr));
  EXPECT_TRUE(ReplaysSilently(Copy(1, hooks::kDirect), none));
  EXPECT_TRUE(ReplaysSilently(Copy(1, hooks::kStagingSource), none));
  EXPECT_FALSE(ReplaysSilently(Copy(1, hooks::kStagingDest), none));
  EXPECT_FALSE(ReplaysSilently(Copy(1, hooks::kDirect), all));
}

}  // namespace
}  // namespace recovery
}  // namespace revenant
