// The agreement layer of recovery over real NCCL (cuda_nccl.h, "Recovery";
// docs/recovery.md, "Over real NCCL"): files in the job directory, no NCCL
// and no GPU, so that a dead or dying member can never make it block.
//
// Per communicator and recovery epoch E, the members meet in
// <job_root>/nccl-recovery-<communicator key>-e<E>/ (the key is the hash of
// the unique id the application created the communicator with, which a
// replacement's journal replays too):
//
//   NcclRecoveryReport me = {rank, {pending, replacement, minibatch, restored}, id_hex};
//   auto all = ExchangeRecoveryReports(dir, me, nranks, deadline, newer_epoch);
//   RecoveryPlan plan = PlanRecovery(Reports(*all));        // recovery_plan.h
//   ... the plan's provider writes "units", its state source writes "state"
//   ... (WriteRecoveryBlob); who needs them waits (WaitRecoveryBlob)
//   ... every member creates the new communicator from rank 0's id_hex
//
// Every wait polls (2 ms) with a deadline and a preemption test (a newer
// epoch was declared: a member died during this one); a file appears whole
// or not at all (written to a temporary name, then renamed).
//
// Thread safety: the functions touch only their own files.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_RECOVERY_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "agent/backends/common/recovery_plan.h"

namespace revenant {
namespace agent {
namespace cuda {

struct NcclRecoveryReport {
  int rank = -1;
  RecoveryReport report;
  // Rank 0: the new communicator's unique id (hex); empty on the others.
  std::string unique_id_hex;
};

// One line: "rank=R pending=M.I replacement=0|1 minibatch=B restored=0|1 id=HEX|-".
std::string FormatRecoveryReport(const NcclRecoveryReport& r);
absl::StatusOr<NcclRecoveryReport> ParseRecoveryReport(absl::string_view line);

std::vector<RecoveryReport> Reports(const std::vector<NcclRecoveryReport>& all);

// <job_root>/nccl-recovery-<key>-e<epoch>.
std::string RecoveryDirFor(const std::string& job_root, const std::string& key, int epoch);
// Removes the directories of `key` for epochs <= `epoch`.
void RemoveRecoveryDirs(const std::string& job_root, const std::string& key, int epoch);

// true: stop waiting (kAborted).
using Preempt = std::function<bool()>;

// Writes dir/report<rank> (making dir) and waits until reports 0..nranks-1
// are there. kDeadlineExceeded names the ranks that did not report;
// kAborted when `preempt` answered true; kInvalidArgument for a file that
// does not parse or names another rank.
absl::StatusOr<std::vector<NcclRecoveryReport>> ExchangeRecoveryReports(
    const std::string& dir, const NcclRecoveryReport& self, int nranks, absl::Time deadline,
    const Preempt& preempt);

absl::Status WriteRecoveryBlob(const std::string& dir, const std::string& name,
                               absl::string_view bytes);
absl::StatusOr<std::string> WaitRecoveryBlob(const std::string& dir, const std::string& name,
                                             absl::Time deadline, const Preempt& preempt);

// The device state a survivor hands to replacements: its live allocations
// as offsets into its device range (every rank has the same layout in a
// range of its own) with their bytes.
struct StatePiece {
  uint64_t offset = 0;
  std::string bytes;
};
std::string EncodeState(const std::vector<StatePiece>& pieces);
absl::StatusOr<std::vector<StatePiece>> DecodeState(absl::string_view blob);

// Results (receive buffers) of completed collective units.
using UnitResults = std::map<UnitOrdinal, std::vector<std::string>>;
std::string EncodeUnits(const UnitResults& units);
absl::StatusOr<UnitResults> DecodeUnits(absl::string_view blob);

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_RECOVERY_H_
