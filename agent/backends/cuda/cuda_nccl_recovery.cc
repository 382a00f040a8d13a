#include "agent/backends/cuda/cuda_nccl_recovery.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "agent/backends/cuda/cuda_nccl_start.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace revenant {
namespace agent {
namespace cuda {
namespace {

constexpr absl::Duration kPoll = absl::Milliseconds(2);

absl::Status WriteAtomically(const std::string& path, absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.close();
    if (!f) {
      std::remove(tmp.c_str());
      return absl::UnavailableError(absl::StrCat("cannot write ", tmp));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename ", tmp, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

bool ReadWhole(const std::string& path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  std::ostringstream ss;
  ss << f.rdbuf();
  *out = ss.str();
  return true;
}

absl::Status MakeDir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot make ", dir, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

bool GetU64(absl::string_view* in, uint64_t* v) {
  if (in->size() < 8) return false;
  std::memcpy(v, in->data(), 8);
  in->remove_prefix(8);
  return true;
}

bool GetBytes(absl::string_view* in, uint64_t n, std::string* out) {
  if (in->size() < n) return false;
  out->assign(in->data(), n);
  in->remove_prefix(n);
  return true;
}

constexpr uint64_t kStateMagic = 0x5256535441544531ull;  // "RVSTATE1"
constexpr uint64_t kUnitsMagic = 0x5256554e49545331ull;  // "RVUNITS1"

}  // namespace

std::string FormatRecoveryReport(const NcclRecoveryReport& r) {
  return absl::StrCat("rank=", r.rank, " pending=", r.report.pending.first, ".",
                      r.report.pending.second, " replacement=", r.report.replacement ? 1 : 0,
                      " minibatch=", r.report.minibatch, " restored=", r.report.restored ? 1 : 0,
                      " id=", r.unique_id_hex.empty() ? "-" : r.unique_id_hex);
}

absl::StatusOr<NcclRecoveryReport> ParseRecoveryReport(absl::string_view line) {
  NcclRecoveryReport r;
  std::set<std::string> seen;
  for (absl::string_view field : absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    const size_t eq = field.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("no '=' in '", field, "'"));
    }
    const std::string key(field.substr(0, eq));
    const absl::string_view value = absl::StripTrailingAsciiWhitespace(field.substr(eq + 1));
    seen.insert(key);
    bool ok = true;
    int flag = 0;
    if (key == "rank") {
      ok = absl::SimpleAtoi(value, &r.rank);
    } else if (key == "pending") {
      std::vector<absl::string_view> mi = absl::StrSplit(value, '.');
      ok = mi.size() == 2 && absl::SimpleAtoi(mi[0], &r.report.pending.first) &&
           absl::SimpleAtoi(mi[1], &r.report.pending.second);
    } else if (key == "replacement") {
      ok = absl::SimpleAtoi(value, &flag) && (flag == 0 || flag == 1);
      r.report.replacement = flag == 1;
    } else if (key == "minibatch") {
      ok = absl::SimpleAtoi(value, &r.report.minibatch);
    } else if (key == "restored") {
      ok = absl::SimpleAtoi(value, &flag) && (flag == 0 || flag == 1);
      r.report.restored = flag == 1;
    } else if (key == "id") {
      r.unique_id_hex = value == "-" ? "" : std::string(value);
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("bad ", key, "= in '", line, "'"));
  }
  for (const char* k : {"rank", "pending", "replacement", "minibatch", "restored", "id"}) {
    if (seen.count(k) == 0) return absl::InvalidArgumentError(absl::StrCat("no ", k, "="));
  }
  return r;
}

std::vector<RecoveryReport> Reports(const std::vector<NcclRecoveryReport>& all) {
  std::vector<RecoveryReport> out;
  for (const NcclRecoveryReport& r : all) out.push_back(r.report);
  return out;
}

std::string RecoveryDirFor(const std::string& job_root, const std::string& key, int epoch) {
  return absl::StrCat(job_root, "/nccl-recovery-", key, "-e", epoch);
}

void RemoveRecoveryDirs(const std::string& job_root, const std::string& key, int epoch) {
  DIR* d = opendir(job_root.c_str());
  if (d == nullptr) return;
  const std::string prefix = absl::StrCat("nccl-recovery-", key, "-e");
  std::vector<std::string> dirs;
  while (struct dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    int ep = 0;
    if (absl::StartsWith(name, prefix) &&
        absl::SimpleAtoi(absl::string_view(name).substr(prefix.size()), &ep) && ep <= epoch) {
      dirs.push_back(absl::StrCat(job_root, "/", name));
    }
  }
  closedir(d);
  for (const std::string& dir : dirs) {
    DIR* sub = opendir(dir.c_str());
    if (sub != nullptr) {
      while (struct dirent* e = readdir(sub)) {
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
          std::remove(absl::StrCat(dir, "/", e->d_name).c_str());
        }
      }
      closedir(sub);
    }
    rmdir(dir.c_str());
  }
}

absl::StatusOr<std::vector<NcclRecoveryReport>> ExchangeRecoveryReports(
    const std::string& dir, const NcclRecoveryReport& self, int nranks, absl::Time deadline,
    const Preempt& preempt) {
  if (nranks < 1 || self.rank < 0 || self.rank >= nranks) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", self.rank, " of ", nranks, " is out of range"));
  }
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  if (absl::Status s = WriteAtomically(absl::StrCat(dir, "/report", self.rank),
                                       FormatRecoveryReport(self) + "\n");
      !s.ok()) {
    return s;
  }
  return CollectRankLines<NcclRecoveryReport>(dir, "report", nranks, deadline,
                                              ParseRecoveryReport, "did not report in", preempt);
}

absl::Status WriteRecoveryBlob(const std::string& dir, const std::string& name,
                               absl::string_view bytes) {
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  return WriteAtomically(absl::StrCat(dir, "/", name), bytes);
}

absl::StatusOr<std::string> WaitRecoveryBlob(const std::string& dir, const std::string& name,
                                             absl::Time deadline, const Preempt& preempt) {
  const std::string path = absl::StrCat(dir, "/", name);
  for (;;) {
    std::string bytes;
    if (ReadWhole(path, &bytes)) return bytes;
    if (preempt && preempt()) return absl::AbortedError("a newer recovery epoch was declared");
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(path, " did not appear"));
    }
    absl::SleepFor(kPoll);
  }
}

std::string EncodeState(const std::vector<StatePiece>& pieces) {
  std::string out;
  PutU64(&out, kStateMagic);
  PutU64(&out, pieces.size());
  for (const StatePiece& p : pieces) {
    PutU64(&out, p.offset);
    PutU64(&out, p.bytes.size());
    out.append(p.bytes);
  }
  return out;
}

absl::StatusOr<std::vector<StatePiece>> DecodeState(absl::string_view in) {
  uint64_t magic = 0, n = 0;
  if (!GetU64(&in, &magic) || magic != kStateMagic || !GetU64(&in, &n)) {
    return absl::DataLossError("not a state transfer");
  }
  std::vector<StatePiece> out;
  for (uint64_t i = 0; i < n; ++i) {
    StatePiece p;
    uint64_t len = 0;
    if (!GetU64(&in, &p.offset) || !GetU64(&in, &len) || !GetBytes(&in, len, &p.bytes)) {
      return absl::DataLossError(absl::StrCat("state transfer truncated at piece ", i, " of ", n));
    }
    out.push_back(std::move(p));
  }
  if (!in.empty()) return absl::DataLossError("state transfer has trailing bytes");
  return out;
}

std::string EncodeUnits(const UnitResults& units) {
  std::string out;
  PutU64(&out, kUnitsMagic);
  PutU64(&out, units.size());
  for (const auto& [ord, bufs] : units) {
    PutU64(&out, ord.first);
    PutU64(&out, ord.second);
    PutU64(&out, bufs.size());
    for (const std::string& b : bufs) {
      PutU64(&out, b.size());
      out.append(b);
    }
  }
  return out;
}

absl::StatusOr<UnitResults> DecodeUnits(absl::string_view in) {
  uint64_t magic = 0, n = 0;
  if (!GetU64(&in, &magic) || magic != kUnitsMagic || !GetU64(&in, &n)) {
    return absl::DataLossError("not a set of collective results");
  }
  UnitResults out;
  for (uint64_t i = 0; i < n; ++i) {
    UnitOrdinal ord;
    uint64_t nbufs = 0;
    if (!GetU64(&in, &ord.first) || !GetU64(&in, &ord.second) || !GetU64(&in, &nbufs) ||
        nbufs > in.size()) {
      return absl::DataLossError(absl::StrCat("collective results truncated at unit ", i));
    }
    std::vector<std::string> bufs(nbufs);
    for (std::string& b : bufs) {
      uint64_t len = 0;
      if (!GetU64(&in, &len) || !GetBytes(&in, len, &b)) {
        return absl::DataLossError(absl::StrCat("collective results truncated at unit ", i));
      }
    }
    out[ord] = std::move(bufs);
  }
  if (!in.empty()) return absl::DataLossError("collective results have trailing bytes");
  return out;
}

}  // namespace cuda
}  // namespace agent
}  // namespace revenant
