#include "journal/api_name.h"

#include "api/traits.h"
#include "journal/journal.h"

namespace revenant {
namespace journal {

std::string ApiName(uint32_t id) {
  if (id == kOutcomeApiId) return "(outcome)";
  if (id == 0xFFFE) return "revenantMarkStep";
  const api::ApiTraits& t = api::Traits(id);
  if (t.dispatched || t.library != api::Library::kUnspecified) return t.name;
  return std::to_string(id);
}

}  // namespace journal
}  // namespace revenant
