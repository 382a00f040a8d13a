#include "recovery/coordination_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/events.h"

namespace revenant {
namespace recovery {

absl::Status WriteEpochFile(const std::string& job_dir, int epoch) {
  const std::string tmp = job_dir + "/epoch.tmp";
  bool ok = false;
  // 0600 like every file of the job.
  if (const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600); fd >= 0) {
    const std::string text = absl::StrCat(epoch, "\n");
    ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ok = close(fd) == 0 && ok;
  }
  if (!ok || std::rename(tmp.c_str(), (job_dir + "/epoch").c_str()) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot write recovery epoch ", epoch, " to ",
                                               job_dir, "/epoch: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> EmbeddedStore::ClaimNextEpoch() {
  ++epoch_;
  if (absl::Status s = WriteEpochFile(job_dir_, epoch_); !s.ok()) return s;
  return epoch_;
}

void EmbeddedStore::RecordEvent(const std::string& event, int rank, int epoch,
                                const std::string& detail) {
  revenant::RecordEvent(job_dir_, event, rank, epoch, detail);
}

}  // namespace recovery
}  // namespace revenant
