#include "agent/backends/common/recovery_plan.h"

namespace revenant {
namespace agent {

RecoveryPlan PlanRecovery(const std::vector<RecoveryReport>& all) {
  RecoveryPlan p;
  const size_t n = all.size();
  if (n == 0) {
    p.error = "no member reported";
    return p;
  }
  int first_replacement = -1;
  UnitOrdinal min_pending = all[0].pending;
  for (size_t r = 0; r < n; ++r) {
    if (all[r].pending < min_pending) min_pending = all[r].pending;
    if (all[r].replacement) {
      if (first_replacement < 0) first_replacement = static_cast<int>(r);
      p.replacements.push_back(static_cast<int>(r));
      continue;
    }
    if (p.provider < 0 || all[p.provider].pending < all[r].pending) {
      p.provider = static_cast<int>(r);
    }
  }
  if (p.provider < 0) {
    // Every member is a replacement: each restored its own state from a
    // boundary snapshot of the same minibatch, or nobody holds the state.
    bool all_restored = true;
    for (size_t r = 0; r < n; ++r) {
      all_restored &= all[r].restored && all[r].minibatch == all[0].minibatch &&
                      all[r].pending == all[0].pending;
    }
    if (!all_restored) {
      p.error =
          "no survivor holds the job's state (every member is a replacement, and not all of "
          "them restored a boundary snapshot of the same minibatch)";
      return p;
    }
    p.all_restored = true;
    return p;
  }
  p.units_from = min_pending;
  p.units_to = all[p.provider].pending;
  // State: from a survivor still in the replacement's minibatch (its
  // parameters are at that minibatch's boundary), else the first survivor,
  // which is past it.
  if (first_replacement >= 0 && all[first_replacement].minibatch > 0) {
    const uint64_t m_r = all[first_replacement].minibatch;
    for (size_t r = 0; r < n; ++r) {
      if (!all[r].replacement && all[r].pending.first == m_r) {
        p.state_source = static_cast<int>(r);
        break;
      }
    }
    if (p.state_source < 0) {
      for (size_t r = 0; r < n; ++r) {
        if (!all[r].replacement) {
          p.state_source = static_cast<int>(r);
          break;
        }
      }
      p.source_ahead = all[p.state_source].pending.first > m_r;
    }
  }
  return p;
}

}  // namespace agent
}  // namespace revenant
