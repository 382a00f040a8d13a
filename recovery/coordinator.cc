#include "recovery/coordinator.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/events.h"
#include "common/kv.h"
#include "common/logging.h"

namespace revenant {
namespace recovery {

bool Coordinator::AgentDied(int rank, int status, absl::Time now) {
  const std::string how = WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                              : absl::StrCat("status ", WEXITSTATUS(status));
  RecordEvent(options_.job_dir, "agent_died", rank, epoch_, how);
  if (!options_.recover || !WIFSIGNALED(status) || recoveries_ >= options_.max_recoveries ||
      gave_up()) {
    return false;
  }
  auto started = replacement_started_.find(rank);
  if (started != replacement_started_.end() && now - started->second < options_.quick_death) {
    if (++quick_deaths_[rank] >= options_.max_quick_deaths) {
      give_up_reason_ = absl::StrCat(
          "the replacements of rank ", rank, " died ", quick_deaths_[rank],
          " times in a row, each within ", absl::FormatDuration(options_.quick_death),
          " of its start (last: ", how,
          "): a request the rank replays kills every agent that runs it; not replacing it again");
      RecordEvent(options_.job_dir, "recovery_abandoned", rank, epoch_, give_up_reason_);
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
  DeclareEpoch();
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
  RecordEvent(options_.job_dir, "replacement_started", rank, epoch_, how);
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

void Coordinator::DeclareEpoch() {
  ++epoch_;
  // Written under a temporary name and renamed: a reader sees the old epoch
  // or the new one, never a half-written number.
  const std::string tmp = options_.job_dir + "/epoch.tmp";
  // 0600 like every file of the job.
  bool ok = false;
  if (const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); fd >= 0) {
    const std::string text = absl::StrCat(epoch_, "\n");
    ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = close(fd) == 0 && ok;
  }
  if (!ok || std::rename(tmp.c_str(), (options_.job_dir + "/epoch").c_str()) != 0) {
    REVENANT_LOG(ERROR, "coordinator") << "cannot declare recovery epoch " << epoch_ << " in "
                                       << options_.job_dir;
  }
}

}  // namespace recovery
}  // namespace revenant
