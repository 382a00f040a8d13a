#include "recovery/coordinator.h"

#include <sys/wait.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/events.h"
#include "common/kv.h"
#include "common/logging.h"

namespace revenant {
namespace recovery {

Coordinator::Coordinator(Options options) : options_(std::move(options)) {
  if (options_.store == nullptr) {
    own_store_ = std::make_unique<EmbeddedStore>(options_.job_dir);
    store_ = own_store_.get();
  } else {
    store_ = options_.store;
  }
}

void Coordinator::Record(const std::string& event, int rank, const std::string& detail) {
  store_->RecordEvent(event, rank, epoch_, detail);
}

bool Coordinator::AgentDied(int rank, int status, absl::Time now) {
  const std::string how = WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                              : absl::StrCat("status ", WEXITSTATUS(status));
  Record("agent_died", rank, how);
  if (!WIFSIGNALED(status)) return false;
  return PlanReplacement(rank, how, now);
}

bool Coordinator::ReplacementFailed(int rank, absl::Time now) {
  const std::string how = "the spare handed the rank could not take it";
  Record("replacement_failed", rank, how);
  return PlanReplacement(rank, how, now);
}

bool Coordinator::PlanReplacement(int rank, const std::string& how, absl::Time now) {
  if (!options_.recover || recoveries_ >= options_.max_recoveries || gave_up()) return false;
  auto started = replacement_started_.find(rank);
  if (started != replacement_started_.end() && now - started->second < options_.quick_death) {
    if (++quick_deaths_[rank] >= options_.max_quick_deaths) {
      give_up_reason_ = absl::StrCat(
          "the replacements of rank ", rank, " died ", quick_deaths_[rank],
          " times in a row, each within ", absl::FormatDuration(options_.quick_death),
          " of its start (last: ", how,
          "): a request the rank replays kills every agent that runs it; not replacing it again");
      Record("recovery_abandoned", rank, give_up_reason_);
      return false;
    }
  } else {
    quick_deaths_[rank] = 0;
  }
  ++recoveries_;
  if (pending_.empty()) due_ = now + options_.batch_window;
  pending_.push_back(rank);
  return true;
}

std::vector<Coordinator::Replacement> Coordinator::DueReplacements(absl::Time now) {
  std::vector<Replacement> out;
  if (pending_.empty() || now < due_) return out;
  if (!DeclareEpoch()) {
    pending_.clear();
    due_ = absl::InfiniteFuture();
    return out;
  }
  for (int rank : pending_) {
    Replacement r{rank, std::nullopt};
    if (!spares_.empty()) {
      r.spare = spares_.front();
      spares_.erase(spares_.begin());
    }
    out.push_back(r);
  }
  pending_.clear();
  due_ = absl::InfiniteFuture();
  return out;
}

void Coordinator::ReplacementStarted(int rank, const std::string& how, absl::Time now) {
  replacement_started_[rank] = now;
  Record("replacement_started", rank, how);
}

void Coordinator::AddSpare(int id) {
  if (std::find(spares_.begin(), spares_.end(), id) == spares_.end()) spares_.push_back(id);
}

void Coordinator::RemoveSpare(int id) {
  spares_.erase(std::remove(spares_.begin(), spares_.end(), id), spares_.end());
}

std::string Coordinator::AssignmentMessage(int rank, const std::string& socket,
                                           const std::string& rank_dir, int device) {
  return FormatKv({{"op", "assign"},
                   {"socket", socket},
                   {"job_dir", rank_dir},
                   {"rank", std::to_string(rank)},
                   {"device", std::to_string(device)}}) +
         "\nend\n";
}

bool Coordinator::DeclareEpoch() {
  absl::StatusOr<int> epoch = store_->ClaimNextEpoch();
  if (!epoch.ok()) {
    give_up_reason_ = absl::StrCat("cannot declare recovery epoch ", epoch_ + 1, ": ",
                                   epoch.status().message());
    REVENANT_LOG(ERROR, "coordinator") << give_up_reason_;
    Record("recovery_abandoned", -1, give_up_reason_);
    return false;
  }
  epoch_ = *epoch;
  return true;
}

}  // namespace recovery
}  // namespace revenant
