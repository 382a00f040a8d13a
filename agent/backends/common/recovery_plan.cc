#include "agent/backends/common/recovery_plan.h"

#include <algorithm>

namespace revenant {
namespace agent {

RecoveryPlan PlanRecovery(const std::vector<RecoveryReport>& all) {
  RecoveryPlan p;
  const size_t n = all.size();
  if (n == 0) {
    p.error = "no member reported";
    return p;
  }
  UnitOrdinal min_pending = all[0].pending;
  for (size_t r = 0; r < n; ++r) {
    if (all[r].pending < min_pending) min_pending = all[r].pending;
    if (all[r].replacement) {
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
  // State: the replacements past their first minibatch take one survivor's
  // live allocations, which are at the boundary of that survivor's
  // minibatch. Prefer a survivor in the latest of the replacements'
  // minibatches; else the first survivor, which is past it. A replacement
  // whose minibatch the source has left (its optimizer step ran) skips the
  // rest of that minibatch; with two replacements (one killed during the
  // other's recovery) they may be a minibatch apart, so this is decided per
  // replacement, not by the first one's minibatch.
  uint64_t latest = 0;
  for (int r : p.replacements) latest = std::max(latest, all[r].minibatch);
  if (latest > 0) {
    for (size_t r = 0; r < n; ++r) {
      if (!all[r].replacement && all[r].pending.first == latest) {
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
    }
    for (int r : p.replacements) {
      if (all[r].minibatch > 0 && all[p.state_source].pending.first > all[r].minibatch) {
        p.skip_rest.push_back(r);
      }
    }
    p.source_ahead = !p.skip_rest.empty();
  }
  return p;
}

}  // namespace agent
}  // namespace revenant
