// The control socket's handshake messages: "key=value" lines.
//
// Handshakes are a handful of fields exchanged once per connection; a text
// form keeps them readable in logs and keeps protobuf out of the shim (which
// is preloaded into applications that may link their own protobuf).
//
//   std::string msg = FormatKv({{"op", "hello"}, {"pid", "42"}});
//   absl::flat_hash_map<std::string, std::string> m = ParseKv(msg);
#ifndef REVENANT_COMMON_KV_H_
#define REVENANT_COMMON_KV_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace revenant {

std::string FormatKv(const std::vector<std::pair<std::string, std::string>>& fields);
// Lines without '=' are ignored; later duplicates win.
std::map<std::string, std::string> ParseKv(const std::string& text);

}  // namespace revenant

#endif  // REVENANT_COMMON_KV_H_
