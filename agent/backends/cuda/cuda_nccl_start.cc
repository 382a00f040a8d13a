#include "agent/backends/cuda/cuda_nccl_start.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

bool Clean(const std::string& v) {
  if (v.empty()) return false;
  for (char c : v) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '=') return false;
  }
  return true;
}

std::string VersionText(int v) {
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  return absl::StrCat(v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

}  // namespace

std::string FormatStartInfo(const StartRankInfo& info) {
  auto value = [](const std::string& v) { return Clean(v) ? v : std::string("-"); };
  return absl::StrCat("rank=", info.rank, " version=", info.nccl_version,
                      " uuid=", value(info.device_uuid), " pci=", value(info.pci_bus_id),
                      " host=", value(info.host), " hostid=", value(info.nccl_host_id));
}

absl::StatusOr<StartRankInfo> ParseStartInfo(absl::string_view line) {
  StartRankInfo info;
  std::set<std::string> seen;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("no '=' in '", field, "'"));
    }
    const std::string key(field.substr(0, eq));
    const std::string value(field.substr(eq + 1));
    // Only what FormatStartInfo writes: a value it could not have written
    // (an '=', a tab, a newline in it) is a torn or foreign line.
    if (value != "-" && !Clean(value) && key != "rank" && key != "version") {
      return absl::InvalidArgumentError(
          absl::StrCat("bad ", key, "= (empty, or with '=', a tab or a newline) in '", line, "'"));
    }
    seen.insert(key);
    if (key == "rank") {
      if (!absl::SimpleAtoi(value, &info.rank)) return absl::InvalidArgumentError("bad rank");
    } else if (key == "version") {
      if (!absl::SimpleAtoi(value, &info.nccl_version))
        return absl::InvalidArgumentError("bad version");
    } else if (key == "uuid") {
      info.device_uuid = value == "-" ? "" : value;
    } else if (key == "pci") {
      info.pci_bus_id = value == "-" ? "" : value;
    } else if (key == "host") {
      info.host = value == "-" ? "" : value;
    } else if (key == "hostid") {
      info.nccl_host_id = value == "-" ? "" : value;
    }
  }
  for (const char* k : {"rank", "version", "uuid", "pci", "host", "hostid"}) {
    if (seen.count(k) == 0) return absl::InvalidArgumentError(absl::StrCat("no ", k, "="));
  }
  return info;
}

StartVerdict DecideStart(const std::vector<StartRankInfo>& all, int nranks, int min_version) {
  StartVerdict v;
  std::map<int, const StartRankInfo*> by_rank;
  for (const StartRankInfo& i : all) by_rank[i.rank] = &i;
  std::vector<std::string> problems;
  std::set<int> offending;
  std::vector<int> missing;
  for (int r = 0; r < nranks; ++r) {
    if (by_rank.count(r) == 0) missing.push_back(r);
  }
  if (!missing.empty()) {
    problems.push_back(absl::StrCat("rank(s) ", absl::StrJoin(missing, ", "),
                                    " gave no start information"));
    offending.insert(missing.begin(), missing.end());
  }
  std::vector<int> old;
  for (const auto& [r, i] : by_rank) {
    if (i->nccl_version < min_version) {
      old.push_back(r);
      problems.push_back(absl::StrCat("rank ", r, " runs NCCL ", VersionText(i->nccl_version),
                                      ", older than ", VersionText(min_version)));
    }
  }
  offending.insert(old.begin(), old.end());
  // Same GPU: the same UUID anywhere, or the same PCI bus id on one host.
  std::map<std::string, std::vector<int>> by_gpu;
  for (const auto& [r, i] : by_rank) {
    std::string key;
    if (!i->device_uuid.empty()) {
      key = "uuid " + i->device_uuid;
    } else if (!i->pci_bus_id.empty()) {
      key = "PCI " + i->pci_bus_id + " on " + i->host;
    } else {
      continue;
    }
    by_gpu[key].push_back(r);
  }
  std::map<std::string, std::vector<int>> by_pci;
  for (const auto& [r, i] : by_rank) {
    if (!i->pci_bus_id.empty() && !i->device_uuid.empty())
      by_pci[i->host + "/" + i->pci_bus_id].push_back(r);
  }
  // A group of ranks on one GPU is fine when NCCL sees them as separate
  // hosts: every one of them has a host id, and no two the same.
  auto distinct_host_ids = [&](const std::vector<int>& ranks) {
    std::set<std::string> ids;
    for (int r : ranks) {
      const std::string& id = by_rank.at(r)->nccl_host_id;
      if (id.empty() || !ids.insert(id).second) return false;
    }
    return true;
  };
  auto refuse_shared = [&](const std::vector<int>& ranks, const std::string& where) {
    std::set<std::string> ids;
    bool missing = false;
    for (int r : ranks) {
      const std::string& id = by_rank.at(r)->nccl_host_id;
      if (id.empty()) missing = true;
      ids.insert(id);
    }
    problems.push_back(absl::StrCat(
        "ranks ", absl::StrJoin(ranks, ", "), " use the same GPU (", where, ") ",
        missing ? "and not every one of them has an NCCL_HOSTID"
                : "with the same NCCL_HOSTID",
        " (ranks may share a GPU only with an NCCL_HOSTID each: revenant-run --gpus sets "
        "them)"));
    offending.insert(ranks.begin(), ranks.end());
  };
  std::set<std::vector<int>> reported;
  std::set<std::vector<int>> shared;
  for (const auto& [key, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    reported.insert(ranks);
    if (distinct_host_ids(ranks)) {
      shared.insert(ranks);
      continue;
    }
    refuse_shared(ranks, key);
  }
  for (const auto& [key, ranks] : by_pci) {
    if (ranks.size() < 2 || reported.count(ranks) != 0) continue;
    if (distinct_host_ids(ranks)) {
      shared.insert(ranks);
      continue;
    }
    refuse_shared(ranks, "PCI " + key);
  }
  v.ok = problems.empty();
  v.offending.assign(offending.begin(), offending.end());
  if (v.ok) v.shared.assign(shared.begin(), shared.end());
  if (!v.ok) {
    v.message = absl::StrCat("the NCCL engine cannot start on these ", nranks,
                             " ranks: ", absl::StrJoin(problems, "; "),
                             " (offending ranks: ", absl::StrJoin(v.offending, ", "), ")");
  }
  return v;
}

absl::StatusOr<std::vector<StartRankInfo>> ExchangeStartInfo(const std::string& dir,
                                                             const StartRankInfo& self,
                                                             int nranks, absl::Time deadline) {
  if (nranks < 1 || self.rank < 0 || self.rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", self.rank, " of ", nranks, " is out of range"));
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
  }
  const std::string mine = absl::StrCat(dir, "/rank", self.rank);
  const std::string tmp = absl::StrCat(mine, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::trunc);
    f << FormatStartInfo(self) << "\n";
    f.close();
    if (!f || std::rename(tmp.c_str(), mine.c_str()) != 0) {
      std::remove(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", mine));
    }
  }
  return CollectRankLines<StartRankInfo>(dir, "rank", nranks, deadline, ParseStartInfo,
                                         "did not join the NCCL start agreement in");
}

std::string IdHash(absl::string_view bytes) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string StartDirFor(const std::string& job_root, absl::string_view unique_id_bytes) {
  return absl::StrCat(job_root, "/nccl-start-", IdHash(unique_id_bytes));
}

std::string SharedGpuHostId(const std::string& host, int rank) {
  std::string h;
  for (char c : host) h.push_back(Clean(std::string(1, c)) ? c : '_');
  if (h.empty()) h = "host";
  return absl::StrCat(h, "-revenant-rank", rank);
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
