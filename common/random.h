// Unguessable names: random bytes from the kernel (getrandom(2)), for the
// names of a job's directory and of a communicator's rendezvous, which must
// not be derivable from a pid or the time.
//
//   absl::StatusOr<std::string> id = RandomHex(8);   // 16 hex digits
#ifndef REVENANT_COMMON_RANDOM_H_
#define REVENANT_COMMON_RANDOM_H_

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace revenant {

// Fills out[0, n) from getrandom(2) (blocking only until the kernel's pool is
// initialized, which it is long before any job starts). kInternal if the
// kernel refuses (errno named).
absl::Status RandomBytes(void* out, size_t n);

// 2 * n lowercase hex digits of n random bytes.
absl::StatusOr<std::string> RandomHex(size_t n);

}  // namespace revenant

#endif  // REVENANT_COMMON_RANDOM_H_
