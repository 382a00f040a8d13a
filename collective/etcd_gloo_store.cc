#include "collective/etcd_gloo_store.h"

#include <gloo/common/error.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace revenant {
namespace collective {

void EtcdGlooStore::set(const std::string& key, const std::vector<char>& data) {
  absl::Status s = client_->Put(prefix_ + key, std::string(data.begin(), data.end()));
  if (!s.ok()) throw ::gloo::IoException(absl::StrCat("rendezvous store: ", s.message()));
}

std::vector<char> EtcdGlooStore::get(const std::string& key) {
  wait({key}, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
  absl::StatusOr<std::optional<recovery::EtcdKv>> kv = client_->Get(prefix_ + key);
  if (!kv.ok()) throw ::gloo::IoException(absl::StrCat("rendezvous store: ", kv.status().message()));
  if (!kv->has_value()) {
    throw ::gloo::IoException(absl::StrCat("rendezvous store: ", prefix_, key, " vanished"));
  }
  const std::string& v = (*kv)->value;
  return std::vector<char>(v.begin(), v.end());
}

void EtcdGlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, std::chrono::milliseconds(absl::ToInt64Milliseconds(timeout_)));
}

void EtcdGlooStore::wait(const std::vector<std::string>& keys,
                         const std::chrono::milliseconds& timeout) {
  const absl::Time deadline = absl::Now() + absl::FromChrono(timeout);
  absl::Duration pause = absl::Milliseconds(10);
  std::vector<std::string> missing = keys;
  while (true) {
    std::vector<std::string> still;
    for (const std::string& key : missing) {
      absl::StatusOr<std::optional<recovery::EtcdKv>> kv = client_->Get(prefix_ + key);
      if (!kv.ok()) {
        throw ::gloo::IoException(absl::StrCat("rendezvous store: ", kv.status().message()));
      }
      if (!kv->has_value()) still.push_back(key);
    }
    missing.swap(still);
    if (missing.empty()) return;
    const absl::Time now = absl::Now();
    if (now >= deadline) break;
    absl::SleepFor(std::min(pause, deadline - now));
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
  throw ::gloo::IoException(absl::StrCat("Wait timeout for key(s) ", absl::StrJoin(missing, ", "),
                                         " under ", prefix_, " in etcd at ", client_->endpoint(),
                                         " after ", timeout.count(), " ms"));
}

}  // namespace collective
}  // namespace revenant
