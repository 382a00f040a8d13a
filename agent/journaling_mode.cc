#include "agent/journaling_mode.h"

#include "agent/journaling_ahead.h"
#include "agent/journaling_behind.h"
#include "agent/journaling_inline.h"

namespace revenant {
namespace agent {

std::unique_ptr<JournalingMode> MakeJournalingMode(JournalThreadKind kind, JournalingHost* host,
                                                   transport::ShmServerChannel* channel,
                                                   RequestJournal* journal,
                                                   const JournalThreadOptions& options) {
  if (journal == nullptr || kind == JournalThreadKind::kOff) {
    return std::make_unique<InlineJournaling>(host, channel, journal);
  }
  if (kind == JournalThreadKind::kAhead) {
    return std::make_unique<AheadJournaling>(host, channel, journal, options);
  }
  return std::make_unique<BehindJournaling>(host, channel, journal, options);
}

}  // namespace agent
}  // namespace revenant
