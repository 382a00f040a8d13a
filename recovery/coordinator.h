// Coordinator: the recovery decisions of one node's job — which dead agents
// are replaced, when a recovery epoch is declared, which spare takes a rank.
//
//   Coordinator c({.job_dir = dir, .recover = true, .max_recoveries = 8});
//   c.AddSpare(7);                                   // spare 7 waits
//   if (c.AgentDied(/*rank=*/2, status, Now())) ...  // a replacement is planned
//   for (const Coordinator::Replacement& r : c.DueReplacements(Now())) {
//     // r.spare: the spare that takes r.rank, or nullopt: start a new agent
//   }
//
// It owns no process: the launcher (revenant-run, or a supervisor of
// standalone agents) starts and reaps processes and tells the coordinator
// what happened; the coordinator declares the job's recovery epochs and
// records the recovery events through a CoordinationStore
// (recovery/coordination_store.h): by default an EmbeddedStore of the job
// directory (<job_dir>/epoch, read by agents and shims through
// ReadRecoveryEpoch, and <job_dir>/events.jsonl); for a job spanning nodes
// an EtcdStore (recovery/etcd_store.h), whose epochs are claimed in etcd
// so that the coordinators of several nodes never declare the same one.
//
// Thread safety: none; one thread (the launcher's loop) calls it.
#ifndef REVENANT_RECOVERY_COORDINATOR_H_
#define REVENANT_RECOVERY_COORDINATOR_H_

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "recovery/coordination_store.h"

namespace revenant {
namespace recovery {

class Coordinator {
 public:
  struct Options {
    std::string job_dir;      // the job's root directory (epoch, events)
    bool recover = true;      // replace agents that die
    int max_recoveries = 8;   // replacements over the job's life
    // Deaths within this window of the first share one epoch.
    absl::Duration batch_window = absl::Milliseconds(800);
    // A rank whose replacements die this many times in a row, each within
    // `quick_death` of its start, is given up (see AgentDied).
    int max_quick_deaths = 3;
    absl::Duration quick_death = absl::Seconds(30);
    // Where epochs and events go; not owned, must outlive the coordinator.
    // Null: an EmbeddedStore of job_dir, owned by the coordinator.
    CoordinationStore* store = nullptr;
  };

  struct Replacement {
    int rank;
    std::optional<int> spare;  // the spare that takes the rank, if one waits
  };

  explicit Coordinator(Options options);

  // The agent of `rank` exited with wait status `status`. Records the death
  // and returns whether a replacement is planned (it then comes from
  // DueReplacements once the batch window has passed).
  //
  // Only an agent killed by a signal is replaced: an agent that exits by
  // itself with a status did so deliberately (a refused request, a fatal
  // error of its backend, the job ending), and a replacement would only
  // repeat it. Deaths close together (two ranks at once, a node's GPUs) wait
  // for one another so that their replacements start in one epoch and
  // re-form the collectives once, not once per death.
  //
  // A rank whose replacements keep dying soon after they start (each within
  // options.quick_death, max_quick_deaths times in a row) is given up: a
  // request its journal replays kills every agent that runs it, and
  // replacing it again would only loop until the job's time runs out. Then
  // gave_up() is true and give_up_reason() says why; the launcher ends the
  // job.
  bool AgentDied(int rank, int status, absl::Time now);
  // A spare handed `rank` could not take it (it exited with
  // kAgentExitTakeoverFailed): the rank is replaced again once the window
  // passed (a waiting spare or a new process), under the same rules (the count of
  // replacements, the quick deaths). Returns whether it is planned.
  bool ReplacementFailed(int rank, absl::Time now);
  bool gave_up() const { return !give_up_reason_.empty(); }
  const std::string& give_up_reason() const { return give_up_reason_; }

  // The replacements whose batch window ended by `now`, in death order,
  // after declaring the next recovery epoch (through the store: survivors
  // watching <job_dir>/epoch abort their communicators and rebuild them for
  // the new epoch). When the store cannot declare one (etcd unreachable
  // past its retries), nothing is returned, gave_up() becomes true and
  // give_up_reason() says why. Each takes a waiting spare (a spare's backend is
  // already up: faster than a new process) while there are any. Empty when
  // nothing is due.
  std::vector<Replacement> DueReplacements(absl::Time now);

  // A replacement for `rank` was started (`how`: "spare, pid P" or "new
  // process, pid P"): recorded in the events.
  void ReplacementStarted(int rank, const std::string& how, absl::Time now);

  // Spares: `id` is the launcher's name for a waiting spare agent.
  void AddSpare(int id);
  // The spare left (exited, or did not take an assignment).
  void RemoveSpare(int id);
  int spares_waiting() const { return static_cast<int>(spares_.size()); }

  int epoch() const { return epoch_; }
  // An epoch another node's coordinator declared (an EtcdStore's mirror):
  // the events from now on carry it.
  void ObserveEpoch(int epoch) { epoch_ = std::max(epoch_, epoch); }
  int recoveries() const { return recoveries_; }
  bool replacements_pending() const { return !pending_.empty(); }
  int replacements_pending_count() const { return static_cast<int>(pending_.size()); }
  // When the pending replacements' window ends (InfiniteFuture: none pending).
  absl::Time replacements_due() const { return due_; }

  // The assignment a spare reads from its assignment pipe: serve `rank`
  // through `socket` with journal directory `rank_dir` on `device`.
  static std::string AssignmentMessage(int rank, const std::string& socket,
                                       const std::string& rank_dir, int device);

 private:
  bool DeclareEpoch();
  bool PlanReplacement(int rank, const std::string& how, absl::Time now);
  void Record(const std::string& event, int rank, const std::string& detail);

  Options options_;
  std::unique_ptr<CoordinationStore> own_store_;
  CoordinationStore* store_;
  int epoch_ = 0;
  int recoveries_ = 0;
  std::vector<int> pending_;  // ranks to replace, in death order
  absl::Time due_ = absl::InfiniteFuture();
  std::vector<int> spares_;   // waiting spares, oldest first
  std::map<int, absl::Time> replacement_started_;  // per rank, the latest
  std::map<int, int> quick_deaths_;                // per rank, in a row
  std::string give_up_reason_;
};

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_COORDINATOR_H_
