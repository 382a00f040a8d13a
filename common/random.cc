#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace revenant {

absl::Status RandomBytes(void* out, size_t n) {
  char* p = static_cast<char*>(out);
  size_t got = 0;
  while (got < n) {
    const ssize_t r = getrandom(p + got, n - got, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      return absl::InternalError(absl::StrCat("getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(r);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RandomHex(size_t n) {
  std::string bytes(n, '\0');
  if (absl::Status s = RandomBytes(bytes.data(), n); !s.ok()) return s;
  return absl::BytesToHexString(bytes);
}

}  // namespace revenant
