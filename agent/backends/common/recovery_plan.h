// The decision at the heart of a recovery epoch (docs/recovery.md, "Epoch
// E"): from every member's report — the collective unit it is about to run,
// whether it is a replacement, a replacement's journal minibatch and whether
// it restored a boundary snapshot — who provides the results of completed
// units, who sends the device state to the replacements, and whether that
// state is past the replacements' minibatch. A pure function: every member
// decides from the same reports, so every member reaches the same plan.
//
//   std::vector<RecoveryReport> all = ...;  // one per rank, in rank order
//   RecoveryPlan p = PlanRecovery(all);
//   if (!p.error.empty()) ... fail the epoch (no later epoch can help)
//
// Both collective engines use it: the Gloo engine's recovery
// (gloo_collectives.cc, on the host and cuda backends) and real NCCL's
// (agent/backends/cuda/cuda_nccl.cc).
//
// Thread safety: pure.
#ifndef REVENANT_AGENT_BACKENDS_COMMON_RECOVERY_PLAN_H_
#define REVENANT_AGENT_BACKENDS_COMMON_RECOVERY_PLAN_H_

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace revenant {
namespace agent {

// A collective unit's place in the job: (minibatch, index within it).
using UnitOrdinal = std::pair<uint64_t, uint64_t>;

struct RecoveryReport {
  UnitOrdinal pending{0, 0};  // the unit this member is about to run
  bool replacement = false;
  uint64_t minibatch = 0;  // a replacement's journal minibatch
  bool restored = false;   // a replacement that restored its boundary snapshot
};

struct RecoveryPlan {
  // Non-empty: the epoch cannot succeed (no member holds the job's state).
  std::string error;
  // Every member is a replacement and each restored the same minibatch's
  // snapshot: they replay it together; nothing is sent.
  bool all_restored = false;
  // The survivor furthest ahead: it hands the results of the units in
  // [units_from, units_to) (some members completed them, others did not).
  int provider = -1;
  UnitOrdinal units_from{0, 0};
  UnitOrdinal units_to{0, 0};
  // The survivor whose live allocations go to the replacements; -1: none
  // (no replacement, or replacements still in their first minibatch, whose
  // replay rebuilds everything).
  int state_source = -1;
  // The state source has left the minibatch of the replacements in
  // skip_rest (its optimizer step ran there): each of them skips the rest of
  // its minibatch. source_ahead: skip_rest is not empty.
  bool source_ahead = false;
  std::vector<int> skip_rest;
  std::vector<int> replacements;

  // Whether `member` (a replacement) skips the rest of its minibatch.
  bool Skips(int member) const {
    return std::find(skip_rest.begin(), skip_rest.end(), member) != skip_rest.end();
  }
};

RecoveryPlan PlanRecovery(const std::vector<RecoveryReport>& all);

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_COMMON_RECOVERY_PLAN_H_
