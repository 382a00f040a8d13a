// Validator: periodically checks that replaying a minibatch from its boundary
// reproduces the device state the real run produced (docs/recovery.md,
// "Validator").
//
// Recovery rebuilds a rank by replaying its journal. That only works if the
// device state after a minibatch is a function of the state at its boundary
// and of what the journal holds. A program can break this without any error:
// a kernel that reads managed or pinned memory the host writes directly, a
// value the application never passes through a journaled call. The validator
// finds such programs while they run, before a failure depends on it:
//
//   at the boundary of minibatch b (b a multiple of --validate_every):
//     copy every live device allocation (DeviceSnapshot::Take)
//   at the boundary of b + 1, before minibatch b + 1 executes:
//     read back every allocation (the real run's state, with CRC32Cs),
//     restore the copy of b, replay the journal's minibatch log of b
//     silently (no replies, no host callbacks, collectives answered from
//     the results of their first run), compare allocation by allocation,
//     report each one that differs (address, size, first differing offset)
//     as an ERROR log line and a `validation_mismatch` event in
//     <job>/events.jsonl, then put the real run's state back.
//
// The device is left exactly as the real run left it; the application sees
// a pause. Minibatches that made state-class requests (allocations, frees,
// handles created or destroyed: they are not in the minibatch log) are
// skipped, as are minibatches with collectives on a backend that keeps no
// collective results (the cuda backend's NCCL): both logged, with a
// `validation_skipped` event.
//
//   ValidatorOptions o;  o.every = 4;  o.rank = 0;  o.job_root = "/dev/shm/revenant-job";
//   Validator v(&session, o);
//   v.MinibatchStarted(m);             // right after minibatch m's boundary
//   v.MinibatchEnding(m, journal_dir); // right before the next boundary
#ifndef REVENANT_AGENT_VALIDATOR_H_
#define REVENANT_AGENT_VALIDATOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "journal/journal.h"
#include "recovery/replay_plan.h"

namespace revenant {
namespace agent {

class Session;

// A host copy of every live device allocation of a backend.
class DeviceSnapshot {
 public:
  struct Block {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint32_t crc = 0;  // CRC32C of bytes
    std::vector<char> bytes;
  };
  // One allocation whose device bytes differ from the snapshot's.
  struct Difference {
    uint64_t addr = 0;
    uint64_t size = 0;
    uint64_t first_offset = 0;  // first byte that differs
    uint32_t expected_crc = 0;  // the snapshot's
    uint32_t actual_crc = 0;    // the device's
  };

  // Copies every live allocation. The caller has synchronized the device.
  static absl::StatusOr<DeviceSnapshot> Take(Backend* backend);
  // Writes every block back to the device.
  absl::Status Restore(Backend* backend) const;
  // Reads every block's allocation from the device and compares it with the
  // snapshot; with `restore`, each allocation that differs gets the
  // snapshot's bytes back. The caller has synchronized the device.
  absl::StatusOr<std::vector<Difference>> Compare(Backend* backend, bool restore) const;

  // (start, size) of each block, by address (as Backend::DeviceAllocations).
  std::vector<std::pair<uint64_t, uint64_t>> allocations() const;
  uint64_t bytes() const;
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  std::vector<Block> blocks_;
};

// Index of the first byte where a and b differ (n if none).
uint64_t FirstDifference(const char* a, const char* b, uint64_t n);

struct ValidatorOptions {
  uint64_t every = 0;    // validate minibatches every, 2·every, ...; 0: off
  int rank = 0;          // for reports
  std::string job_root;  // where events.jsonl lives ("" : no events)
  // A validation holds two host copies of the device state: a minibatch
  // whose live device memory exceeds this is skipped (logged).
  uint64_t max_bytes = uint64_t{8} << 30;
};

// Totals over the session, for logs and tests.
struct ValidatorStats {
  uint64_t validated = 0;           // minibatches checked
  uint64_t failed = 0;              // of which did not reproduce
  uint64_t skipped = 0;             // due but not checkable (logged why)
  uint64_t mismatched_allocations = 0;
  uint64_t diverged_results = 0;    // replayed results unlike the application's
};

class Validator {
 public:
  // `session` must outlive the validator.
  Validator(Session* session, ValidatorOptions options);
  ~Validator();

  // Minibatch `minibatch` has just begun (its boundary is placed, none of
  // its requests executed): takes the snapshot if it is to be validated.
  void MinibatchStarted(uint64_t minibatch);
  // Minibatch `minibatch` is about to end (its requests executed, its log
  // in `journal_dir` not yet cleared): checks it if it was snapshotted.
  void MinibatchEnding(uint64_t minibatch, const std::string& journal_dir);
  // A state-class request (allocation, free, handle creation or
  // destruction, module...) executed: the minibatch it is in is not
  // replayable on its own (its log holds no such request) and is skipped.
  void NoteStateRequest(const char* api_name);

  const ValidatorStats& stats() const { return stats_; }

 private:
  void Skip(uint64_t minibatch, const std::string& why);
  void Event(const std::string& name, const std::string& detail);
  // The check; an error means it could not be carried out (reported).
  absl::Status Check(uint64_t minibatch, const std::string& journal_dir);
  // Check's steps: whether the minibatch can be replayed on its own (no
  // device error, no state-class request, the same allocations); its log
  // and what of it is replayed (recovery/replay_plan.h: ReadMinibatchLog,
  // PlanSilentReplay); a collective replay begun where it has collectives;
  // the silent replay (returns how many results differ); the report.
  absl::Status Replayable();
  absl::Status BeginCollectives();
  uint64_t ReplayLog(uint64_t minibatch, const recovery::SilentReplayPlan& plan);
  void Report(uint64_t minibatch, size_t requests, uint64_t diverged, cudaError_t replay_error,
              const absl::Status& end, const std::vector<DeviceSnapshot::Difference>& diffs,
              absl::Time t0);

  Session* const session_;
  const ValidatorOptions options_;
  ValidatorStats stats_;
  // The state at the boundary of `start_minibatch_`, while one is due.
  std::unique_ptr<DeviceSnapshot> start_;
  uint64_t start_minibatch_ = 0;
  std::string state_request_;  // the first state-class request in it, if any
  bool warned_collectives_ = false;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_VALIDATOR_H_
