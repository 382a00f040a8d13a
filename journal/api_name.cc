#include "journal/api_name.h"

namespace revenant {
namespace journal {

std::string ApiName(uint32_t id) { return std::to_string(id); }

}  // namespace journal
}  // namespace revenant
