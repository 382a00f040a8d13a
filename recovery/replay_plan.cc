#include "recovery/replay_plan.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/traits.h"

namespace revenant {
namespace recovery {
namespace {

bool IsCopy(const journal::JournalEntry& e) {
  const auto id = static_cast<api::ApiId>(e.api_id());
  return id == api::ApiId::cudaMemcpy || id == api::ApiId::cudaMemcpyAsync;
}

}  // namespace

absl::StatusOr<ReplayLog> ReadReplayLog(const std::string& journal_dir,
                                        const LoadReferenced& load) {
  absl::StatusOr<std::unique_ptr<journal::JournalReader>> reader =
      journal::JournalReader::Open(journal_dir);
  if (!reader.ok()) return reader.status();
  std::vector<journal::JournalEntry> entries;
  auto collect = [&](const journal::JournalEntry& e) {
    entries.push_back(e);
    return absl::OkStatus();
  };
  if (absl::Status s = (*reader)->ReadSetup(collect); !s.ok()) return s;
  const size_t setup_entries = entries.size();
  if (absl::Status s = (*reader)->ReadMinibatch(collect); !s.ok() && !absl::IsNotFound(s)) {
    return s;
  }
  const uint64_t minibatch = (*reader)->minibatch_header().minibatch();
  const uint64_t boundary_seq = (*reader)->minibatch_header().boundary_seq();
  if (load != nullptr) {
    if (absl::Status s = load(&entries); !s.ok()) return s;
  }
  ReplayLog log = MergeLogs(std::move(entries), setup_entries, minibatch);
  log.boundary_seq = boundary_seq;
  return log;
}

ReplayLog MergeLogs(std::vector<journal::JournalEntry> entries, size_t setup_entries,
                    uint64_t minibatch) {
  // Merge both logs back into request order; remember where each came from.
  std::vector<std::pair<journal::JournalEntry, bool>> merged;  // (entry, from minibatch log)
  merged.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    merged.emplace_back(std::move(entries[i]), i >= setup_entries);
  }
  std::stable_sort(merged.begin(), merged.end(), [](const auto& a, const auto& b) {
    return a.first.seq() < b.first.seq();
  });
  ReplayLog log;
  log.minibatch = minibatch;
  for (auto& [e, mb] : merged) {
    log.entries.push_back(std::move(e));
    log.from_minibatch.push_back(mb);
  }
  return log;
}

std::vector<ReplayRequest> RequestsOf(const std::vector<journal::JournalEntry>& entries,
                                      const std::vector<bool>* from_minibatch) {
  std::vector<ReplayRequest> out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const journal::JournalEntry& e = entries[i];
    if (e.api_id() == journal::kOutcomeApiId) continue;
    ReplayRequest r;
    r.entry = &e;
    r.outcome = journal::OutcomeOf(entries, i);
    r.seq = e.seq() / 2;
    r.from_minibatch = from_minibatch != nullptr && (*from_minibatch)[i];
    out.push_back(r);
  }
  return out;
}

uint64_t LastAnsweredRequest(const std::vector<journal::JournalEntry>& entries,
                             const ReplySlots& slots) {
  uint64_t last_answered = 0;
  for (const ReplayRequest& r : RequestsOf(entries)) {
    const int slot = journal::ReplySlotOf(*r.entry);
    if (slot < 0) continue;
    if (r.outcome != nullptr ||
        (static_cast<uint32_t>(slot) < slots.count && slots.last_reply(slot) >= r.seq)) {
      last_answered = std::max(last_answered, r.seq);
    }
  }
  return last_answered;
}

ReplayPlan::ReplayPlan(const ReplayLog& log, Options options)
    : minibatch_(log.minibatch),
      options_(std::move(options)),
      requests_(RequestsOf(log.entries, &log.from_minibatch)),
      // Before the first boundary there is no boundary state: the whole
      // journal is the current minibatch (a first-minibatch replacement
      // joins its peers lazily, at its first collective).
      boundary_taken_(log.minibatch == 0) {
  for (const ReplayRequest& r : requests_) last_request_ = std::max(last_request_, r.seq);
}

bool ReplayPlan::TakesBoundaryBefore(const ReplayRequest& r) const {
  if (boundary_taken_) return false;
  // The boundary comes before the first entry of the minibatch log (or,
  // with a snapshot, before the first request the snapshot does not
  // include: setup-log entries after it, such as an allocation made in this
  // minibatch, replay on top of the snapshot).
  return options_.snapshot_boundary_seq.has_value() ? r.seq >= *options_.snapshot_boundary_seq
                                                    : r.from_minibatch;
}

void ReplayPlan::BoundaryTaken(bool survivors_ahead) {
  boundary_taken_ = true;
  survivors_ahead_ = survivors_ahead;
}

ReplayAction ReplayPlan::ActionFor(const ReplayRequest& r) const {
  if (r.from_minibatch && options_.snapshot_boundary_seq.has_value() &&
      r.seq < *options_.snapshot_boundary_seq) {
    // A step of the minibatch log that the snapshot already holds: the
    // snapshot was taken at a step boundary inside the journal's minibatch
    // (an asynchronous snapshot completes after its boundary, so the
    // journal keeps the steps since the previous one). It ran, and was
    // answered, before the snapshot's boundary.
    return ReplayAction::kSkip;
  }
  if (r.from_minibatch && survivors_ahead_) {
    // Superseded by the survivors' state. A synchronous request the
    // application still waits for is answered (without results: see
    // docs/recovery.md, "When the survivors are a minibatch ahead").
    return ReplayAction::kAnswerSuperseded;
  }
  // A copy into host memory shared with the application is skipped on
  // replay when the application may have been told it completed (and may
  // have reused the buffer since): only a reply can tell it, so copies
  // before the last synchronous request whose reply reached it are skipped;
  // later ones are replayed, since the dead agent may never have run them
  // (killed between journaling such a copy and running it, the application
  // would otherwise never get its bytes). A host callback after the copy
  // could tell it too; those are not counted here.
  if (r.seq < options_.last_answered && options_.copies_into_shared_host != nullptr &&
      options_.copies_into_shared_host(*r.entry)) {
    return ReplayAction::kSkip;
  }
  return ReplayAction::kReplay;
}

absl::StatusOr<std::vector<journal::JournalEntry>> ReadMinibatchLog(
    const std::string& journal_dir, uint64_t minibatch, const LoadReferenced& load) {
  absl::StatusOr<std::unique_ptr<journal::JournalReader>> reader =
      journal::JournalReader::Open(journal_dir);
  if (!reader.ok()) return reader.status();
  std::vector<journal::JournalEntry> entries;
  absl::Status rs = (*reader)->ReadMinibatch([&](const journal::JournalEntry& e) {
    entries.push_back(e);
    return absl::OkStatus();
  });
  if (!rs.ok() && !absl::IsNotFound(rs)) return rs;
  if ((*reader)->minibatch_header().minibatch() != minibatch) {
    return absl::FailedPreconditionError(
        absl::StrCat("the journal's minibatch log is of minibatch ",
                     (*reader)->minibatch_header().minibatch()));
  }
  if (load != nullptr) {
    if (absl::Status s = load(&entries); !s.ok()) return s;
  }
  return entries;
}

absl::StatusOr<SilentReplayPlan> PlanSilentReplay(
    const std::vector<journal::JournalEntry>& minibatch_log) {
  SilentReplayPlan plan;
  plan.requests = RequestsOf(minibatch_log);
  int64_t group_depth = 0;
  bool groups_nest = true;
  for (const ReplayRequest& r : plan.requests) {
    plan.collectives |= api::Traits(r.entry->api_id()).library == api::Library::kNccl;
    const auto id = static_cast<api::ApiId>(r.entry->api_id());
    if (id == api::ApiId::ncclGroupStart) ++group_depth;
    if (id == api::ApiId::ncclGroupEnd && --group_depth < 0) groups_nest = false;
  }
  if (!groups_nest || group_depth != 0) {
    // Replaying half a group would mix its operations with the real run's.
    return absl::FailedPreconditionError("an NCCL group spans its boundary");
  }
  return plan;
}

bool ReplaysSilently(const journal::JournalEntry& e,
                     const CopyIntoSharedHost& copies_into_shared_host) {
  // A copy into shared host memory: the application received its data and
  // may have reused the buffer since.
  if (copies_into_shared_host != nullptr && copies_into_shared_host(e)) return false;
  if (IsCopy(e)) {
    // A copy into the staging area: the application's next staged copy may
    // already be there; the bytes only go to its pageable memory anyway.
    wire::Decoder in(e.args().data(), e.args().size());
    hooks::CopyHead h;
    if (h.Decode(in) && h.mode == hooks::kStagingDest) return false;
  }
  return true;
}

}  // namespace recovery
}  // namespace revenant
