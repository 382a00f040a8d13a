// Fuzzes what the cuda backend decodes on the CPU, before it touches a GPU:
// the lines other ranks' agents write into the job directory when a
// communicator starts (cuda_nccl_start: "rank=R version=V uuid=U ...") and
// when it is rebuilt after a failure (cuda_nccl_recovery: "rank=R
// pending=M.I ..."), and the decisions taken from them (DecideStart,
// PlanRecovery). A rank that died mid-write leaves a torn line; a buggy or
// foreign writer, anything. Parsing must refuse with a status or give
// fields that format back to a line parsing to the same fields; the
// decisions must not crash on any set of parsed lines.
//
// Input: byte 0 picks the parser (even: start, odd: recovery) and, for
// start, the rank count (byte 0 / 2 % 9); the rest is lines split at '\n'.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "agent/backends/common/recovery_plan.h"
#include "agent/backends/cuda/cuda_nccl_recovery.h"
#include "agent/backends/cuda/cuda_nccl_start.h"

namespace {

using revenant::agent::PlanRecovery;
using revenant::agent::RecoveryPlan;
using revenant::agent::cuda::DecideStart;
using revenant::agent::cuda::FormatRecoveryReport;
using revenant::agent::cuda::FormatStartInfo;
using revenant::agent::cuda::NcclRecoveryReport;
using revenant::agent::cuda::ParseRecoveryReport;
using revenant::agent::cuda::ParseStartInfo;
using revenant::agent::cuda::Reports;
using revenant::agent::cuda::StartRankInfo;
using revenant::agent::cuda::StartVerdict;

[[noreturn]] void Broken(const char* what, absl::string_view line, const std::string& again) {
  std::fprintf(stderr, "cuda_agreement_fuzzer: %s\n  line:      '%.*s'\n  formatted: '%s'\n", what,
               static_cast<int>(line.size()), line.data(), again.c_str());
  std::abort();
}

bool SameStart(const StartRankInfo& a, const StartRankInfo& b) {
  return a.rank == b.rank && a.nccl_version == b.nccl_version && a.device_uuid == b.device_uuid &&
         a.pci_bus_id == b.pci_bus_id && a.host == b.host && a.nccl_host_id == b.nccl_host_id;
}
bool SameRecovery(const NcclRecoveryReport& a, const NcclRecoveryReport& b) {
  return a.rank == b.rank && a.report.pending == b.report.pending &&
         a.report.replacement == b.report.replacement && a.report.minibatch == b.report.minibatch &&
         a.report.restored == b.report.restored && a.unique_id_hex == b.unique_id_hex;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0];
  const absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  if (lines.size() > 64) lines.resize(64);
  if (mode % 2 == 0) {
    std::vector<StartRankInfo> all;
    for (absl::string_view line : lines) {
      auto info = ParseStartInfo(line);
      if (!info.ok()) continue;
      const std::string again = FormatStartInfo(*info);
      auto back = ParseStartInfo(again);
      if (!back.ok() || !SameStart(*info, *back)) Broken("start line does not round-trip", line, again);
      all.push_back(*info);
    }
    const int nranks = mode / 2 % 9;
    const StartVerdict v = DecideStart(all, nranks, revenant::agent::cuda::kMinNcclVersion);
    (void)v;
  } else {
    std::vector<NcclRecoveryReport> all;
    for (absl::string_view line : lines) {
      auto r = ParseRecoveryReport(line);
      if (!r.ok()) continue;
      const std::string again = FormatRecoveryReport(*r);
      auto back = ParseRecoveryReport(again);
      if (!back.ok() || !SameRecovery(*r, *back))
        Broken("recovery line does not round-trip", line, again);
      all.push_back(*r);
    }
    const RecoveryPlan plan = PlanRecovery(Reports(all));
    // A plan names members (indexes into `all`), or none.
    const int n = static_cast<int>(all.size());
    if (plan.provider < -1 || plan.provider >= n)
      Broken("provider outside the members", "", std::to_string(plan.provider));
    if (plan.state_source < -1 || plan.state_source >= n)
      Broken("state source outside the members", "", std::to_string(plan.state_source));
    for (int r : plan.replacements)
      if (r < 0 || r >= n) Broken("replacement outside the members", "", std::to_string(r));
  }
  return 0;
}
