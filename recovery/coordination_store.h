// CoordinationStore: where a job's coordination state lives — the recovery
// epochs the coordinator declares and the recovery events it records.
//
//   EmbeddedStore store(job_dir);               // one node: the job directory
//   absl::StatusOr<int> e = store.ClaimNextEpoch();
//
// Two implementations:
//   - EmbeddedStore (here): the state of a job on one node, in the
//     coordinator's process and the job directory (<job_dir>/epoch,
//     <job_dir>/events.jsonl). Nothing else is needed; the default.
//   - EtcdStore (recovery/etcd_store.h): the state of a job spanning nodes,
//     in etcd under the job's prefix, with compare-and-swap claims where
//     launchers of several nodes may race, mirrored into each node's job
//     directory for that node's agents and shims.
// Agents and shims read the epoch from <job_dir>/epoch either way
// (ReadRecoveryEpoch, common/events.h): a store writes it there.
//
// Thread safety: the launcher's loop calls a store from one thread, except
// where an implementation says otherwise.
#ifndef REVENANT_RECOVERY_COORDINATION_STORE_H_
#define REVENANT_RECOVERY_COORDINATION_STORE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace revenant {
namespace recovery {

class CoordinationStore {
 public:
  virtual ~CoordinationStore() = default;

  // Declares the job's next recovery epoch: one more than the latest epoch
  // any coordinator of the job declared, claimed so that two coordinators
  // never declare the same number. Written to the local job directory
  // before it returns. Returns the new epoch.
  virtual absl::StatusOr<int> ClaimNextEpoch() = 0;
  // The latest epoch declared by any coordinator of the job (0: none).
  virtual int LatestEpoch() = 0;
  // Records a recovery event (common/events.h) in the local job directory
  // and wherever the store keeps the job's events.
  virtual void RecordEvent(const std::string& event, int rank, int epoch,
                           const std::string& detail) = 0;
};

// Replaces <job_dir>/epoch with `epoch` atomically (a temporary file
// renamed): a reader sees the old number or the new one, never a part.
absl::Status WriteEpochFile(const std::string& job_dir, int epoch);

class EmbeddedStore : public CoordinationStore {
 public:
  explicit EmbeddedStore(std::string job_dir) : job_dir_(std::move(job_dir)) {}
  absl::StatusOr<int> ClaimNextEpoch() override;
  int LatestEpoch() override { return epoch_; }
  void RecordEvent(const std::string& event, int rank, int epoch,
                   const std::string& detail) override;

 private:
  const std::string job_dir_;
  int epoch_ = 0;
};

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_COORDINATION_STORE_H_
