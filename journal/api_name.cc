#include "journal/api_name.h"

#include "api/hook_protocol.h"
#include "api/traits.h"
#include "journal/journal.h"

namespace revenant {
namespace journal {

std::string ApiName(uint32_t id) {
  if (id == kOutcomeApiId) return "(outcome)";
  if (id == hooks::kMarkStepApiId) return "revenantMarkStep";
  const api::ApiTraits& t = api::Traits(id);
  if (t.dispatched || t.library != api::Library::kUnspecified) return t.name;
  return std::to_string(id);
}

}  // namespace journal
}  // namespace revenant
