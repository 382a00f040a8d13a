// The NCCL engine's start agreement: before a job's first communicator is
// created, every rank checks that it can run the engine and that no two
// ranks drive the same GPU unless NCCL was told to treat them as separate
// hosts, and all ranks reach one verdict.
//
//   StartRankInfo self = {rank, version, uuid, pci_bus_id, host, nccl_host_id};
//   absl::StatusOr<std::vector<StartRankInfo>> all =
//       ExchangeStartInfo(dir, self, nranks, absl::Now() + bound);
//   StartVerdict v = DecideStart(*all, nranks, kMinNcclVersion);
//   if (!v.ok) ... ncclInvalidUsage, log v.message (names the ranks)
//
// The exchange goes through a directory every rank of the communicator can
// reach (the job directory's parent, /dev/shm/revenant-<job>/, under a name
// derived from the communicator's unique id): each rank writes its line to
// rank<r> (atomically: a temporary file, then rename) and polls, with a
// bound, until all nranks lines are there. Every rank then decides from the
// same nranks lines with the same pure function, so the verdict is the same
// everywhere. A rank that never writes is named in the timeout's message.
//
// Rules (DecideStart):
//   - every rank's NCCL (the library loaded at run time) is at least
//     kMinNcclVersion (2.22.0: ncclCommInitRankConfig with non-blocking
//     communicators, ncclCommGetAsyncError polling, runtime connection);
//   - ranks that use the same GPU (same device UUID, or same PCI bus id on
//     one host) each have their own NCCL_HOSTID: NCCL then sees them as
//     separate hosts and connects them over its socket transport (measured
//     on the H200 with NCCL 2.28: 2 and 4 ranks on one GPU). Without
//     distinct host ids NCCL refuses them ("Duplicate GPU") or worse, so a
//     shared GPU without them (an accidental duplicate: a wrong device
//     ordinal, one NCCL_HOSTID exported to every rank) is refused.
//
// Thread safety: the functions are pure or touch only their own files.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_START_H_
#define REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_START_H_

#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/time/time.h"

namespace revenant {
namespace agent {
namespace cuda {

inline constexpr int kMinNcclVersion = 22200;  // NCCL 2.22.0

struct StartRankInfo {
  int rank = -1;
  int nccl_version = 0;
  std::string device_uuid;  // hex, as nvidia-smi's GPU-... without the prefix
  std::string pci_bus_id;   // cudaDeviceGetPCIBusId
  std::string host;
  // NCCL_HOSTID as NCCL will read it at init; empty when unset.
  std::string nccl_host_id;
};

// One line: "rank=R version=V uuid=U pci=P host=H hostid=I" (no spaces in
// values; "-" for an empty one).
std::string FormatStartInfo(const StartRankInfo& info);
absl::StatusOr<StartRankInfo> ParseStartInfo(absl::string_view line);

struct StartVerdict {
  bool ok = false;
  // Empty when ok; otherwise one sentence naming the offending ranks.
  std::string message;
  std::vector<int> offending;  // sorted, unique
  // When ok: the groups of ranks that share a GPU (each with distinct host
  // ids), sorted; empty when every rank has a GPU of its own.
  std::vector<std::vector<int>> shared;
};

// `all` holds one entry per rank 0..nranks-1 (any order).
StartVerdict DecideStart(const std::vector<StartRankInfo>& all, int nranks, int min_version);

// Writes `self` to dir/rank<r> (making dir, 0700) and waits until dir holds
// rank0..rank<n-1> (polls every 2 ms) or `deadline` passes. kDeadlineExceeded
// names the ranks that did not write; kInvalidArgument for a bad rank or a
// line that does not parse (naming the file).
absl::StatusOr<std::vector<StartRankInfo>> ExchangeStartInfo(const std::string& dir,
                                                             const StartRankInfo& self,
                                                             int nranks, absl::Time deadline);

// The collecting half of this agreement and of the recovery's
// (cuda_nccl_recovery.h): polls every 2 ms for dir/<prefix><r>, r < nranks,
// each holding one line that `parse` turns into a T whose `rank` is r, until
// all are read (returned by rank), `preempt` (may be empty) says to stop
// (kAborted), or `deadline` passes (kDeadlineExceeded: "rank(s) A, B of N
// <what> <dir>"). A line that does not parse or names another rank:
// kInvalidArgument naming the file.
template <typename T>
absl::StatusOr<std::vector<T>> CollectRankLines(
    const std::string& dir, const std::string& prefix, int nranks, absl::Time deadline,
    const std::function<absl::StatusOr<T>(absl::string_view)>& parse, absl::string_view what,
    const std::function<bool()>& preempt = {}) {
  std::vector<T> all(nranks);
  std::vector<bool> have(nranks, false);
  int count = 0;
  for (;;) {
    for (int r = 0; r < nranks; ++r) {
      if (have[r]) continue;
      const std::string path = absl::StrCat(dir, "/", prefix, r);
      std::ifstream f(path);
      std::string line;
      if (!f || !std::getline(f, line)) continue;
      absl::StatusOr<T> value = parse(line);
      if (!value.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " does not parse: ", value.status().message()));
      }
      if (value->rank != r) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, " names rank ", value->rank, ", not ", r));
      }
      all[r] = *value;
      have[r] = true;
      ++count;
    }
    if (count == nranks) return all;
    if (preempt && preempt()) return absl::AbortedError("a newer recovery epoch was declared");
    if (absl::Now() >= deadline) {
      std::vector<int> missing;
      for (int r = 0; r < nranks; ++r) {
        if (!have[r]) missing.push_back(r);
      }
      return absl::DeadlineExceededError(absl::StrCat(
          "rank(s) ", absl::StrJoin(missing, ", "), " of ", nranks, " ", what, " ", dir));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

// The exchange directory of a communicator: job_root/nccl-start-<hash of id>.
std::string StartDirFor(const std::string& job_root, absl::string_view unique_id_bytes);

// The 16 hex digits of the FNV-1a hash of `bytes` (a communicator's name in
// file names: StartDirFor, the recovery directories of cuda_nccl_recovery.h).
std::string IdHash(absl::string_view bytes);

// The NCCL_HOSTID an agent of `rank` gives NCCL when ranks share its GPU
// and the user set none: "<host>-revenant-rank<rank>" (distinct per rank,
// the same for a replacement of the rank).
std::string SharedGpuHostId(const std::string& host, int rank);

}  // namespace cuda
}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_BACKENDS_CUDA_CUDA_NCCL_START_H_
