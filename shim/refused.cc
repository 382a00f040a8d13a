#include "shim/refused.h"

#include "common/logging.h"

namespace revenant {
namespace shim {

void NoteRefused(std::atomic<bool>* once, const char* name, const char* library) {
  if (once->exchange(true, std::memory_order_relaxed)) return;
  REVENANT_LOG(ERROR, "shim") << name << " (" << library
                              << ") is not supported under Revenant: refused with the "
                                 "library's not-supported status (docs/api_coverage.md)";
}

}  // namespace shim
}  // namespace revenant
