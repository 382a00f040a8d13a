// The name of an API table id, for revenant-journal's output.
//
//   std::cout << ApiName(entry.api_id());   // "cudaGetLastError"
//
// The journal stores only numeric ids; names come from the API table (api/).
#ifndef REVENANT_JOURNAL_API_NAME_H_
#define REVENANT_JOURNAL_API_NAME_H_

#include <cstdint>
#include <string>

namespace revenant {
namespace journal {

// Returns the API's name, or its id as decimal text if the table does not
// know it.
std::string ApiName(uint32_t id);

}  // namespace journal
}  // namespace revenant

#endif  // REVENANT_JOURNAL_API_NAME_H_
