#include "agent/journaling_inline.h"

namespace revenant {
namespace agent {

void InlineJournaling::Outcome(const transport::RecordHeader& rec, int32_t status,
                               absl::string_view outputs, bool after_reply) {
  if (absl::Status s = journal_->AfterExecute(rec, status, outputs); !s.ok()) {
    host_->JournalFailed(s);
  }
}

}  // namespace agent
}  // namespace revenant
