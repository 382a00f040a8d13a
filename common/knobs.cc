#include "common/knobs.h"

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace revenant {
namespace knobs {
namespace {

constexpr Knob kTable[] = {
#define REVENANT_KNOB_ROW(id, name, type, kind, def, doc) \
  {Id::id, name, Type::type, Kind::kind, def, doc},
    REVENANT_KNOB_TABLE(REVENANT_KNOB_ROW)
#undef REVENANT_KNOB_ROW
};
constexpr size_t kCount = sizeof(kTable) / sizeof(kTable[0]);

// One warning per knob and process, however often a bad value is read.
std::atomic<bool> warned[kCount];
// IgnoreTestingKnobs was called.
std::atomic<bool> ignore_testing{false};

void Warn(Id id, const std::string& value, const std::string& accepts) {
  if (warned[static_cast<size_t>(id)].exchange(true)) return;
  REVENANT_LOG(WARNING, "knobs") << Info(id).name << "=" << value << " ignored: " << accepts
                                 << " (default " << Info(id).default_text << ")";
}

const char* KindName(Kind kind) {
  switch (kind) {
    case Kind::kProduct: return "product";
    case Kind::kLauncher: return "launcher";
    case Kind::kMeasurement: return "measurement";
    case Kind::kTest: return "test";
  }
  return "?";
}

const char* TypeName(Type type) {
  switch (type) {
    case Type::kBool: return "bool";
    case Type::kInt: return "integer";
    case Type::kDouble: return "number";
    case Type::kString: return "text";
  }
  return "?";
}

}  // namespace

absl::Span<const Knob> All() { return absl::MakeConstSpan(kTable, kCount); }

const Knob& Info(Id id) { return kTable[static_cast<size_t>(id)]; }

bool IsTestingKind(Kind kind) { return kind == Kind::kMeasurement || kind == Kind::kTest; }

std::vector<std::string> TestingKnobsSet() {
  std::vector<std::string> set;
  for (const Knob& k : kTable) {
    const char* v = IsTestingKind(k.kind) ? std::getenv(k.name) : nullptr;
    if (v != nullptr && *v != '\0') set.emplace_back(k.name);
  }
  return set;
}

void IgnoreTestingKnobs(const std::string& testing_variant) {
  ignore_testing.store(true);
  for (const std::string& name : TestingKnobsSet()) {
    REVENANT_LOG(WARNING, "knobs") << name << " ignored: a testing knob, read only by "
                                   << testing_variant << " (docs/knobs.md)";
  }
}

std::optional<std::string> String(Id id) {
  if (ignore_testing.load(std::memory_order_relaxed) && IsTestingKind(Info(id).kind)) {
    return std::nullopt;
  }
  const char* v = std::getenv(Info(id).name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

std::optional<bool> Bool(Id id) {
  std::optional<std::string> v = String(id);
  if (!v) return std::nullopt;
  const std::string t = absl::AsciiStrToLower(*v);
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  Warn(id, *v, "not 1/true/yes/on or 0/false/no/off");
  return std::nullopt;
}

std::optional<int64_t> Int(Id id, int64_t lo, int64_t hi) {
  std::optional<std::string> v = String(id);
  if (!v) return std::nullopt;
  int64_t n = 0;
  if (!absl::SimpleAtoi(*v, &n) || n < lo || n > hi) {
    Warn(id, *v, absl::StrCat("not an integer in [", lo, ", ", hi, "]"));
    return std::nullopt;
  }
  return n;
}

std::optional<double> Double(Id id, double lo, double hi) {
  std::optional<std::string> v = String(id);
  if (!v) return std::nullopt;
  double d = 0;
  if (!absl::SimpleAtod(*v, &d) || !std::isfinite(d) || d < lo || d > hi) {
    Warn(id, *v, absl::StrCat("not a number in [", lo, ", ", hi, "]"));
    return std::nullopt;
  }
  return d;
}

std::string Help(Kind kind) {
  std::string out;
  for (const Knob& k : kTable) {
    if (k.kind != kind) continue;
    absl::StrAppend(&out, "  ", k.name, " (", TypeName(k.type), ", default ",
                    *k.default_text ? k.default_text : "unset", ")\n      ", k.doc, "\n");
  }
  return out;
}

std::string Markdown() {
  std::string out =
      "# Knobs: the REVENANT_* environment variables\n\n"
      "Generated from the table in common/knobs.h by `bash scripts/update_knobs_doc.sh`; "
      "//common:knobs_doc_test checks that this file is current. Only common/knobs.cc reads "
      "these variables (and the host kernel runtime, linked into host kernel libraries, reads "
      "REVENANT_HOST_KERNEL_STACK_KB itself). Command-line flags of revenant-run and revenant-agent are listed by "
      "their `--help`.\n\n"
      "Kinds: **product** — what a user tunes (also listed by `revenant-agent --help` and "
      "`revenant-run --help`); **launcher** — set by revenant-run for the processes it starts "
      "(set them yourself only when you start agents and applications by hand); "
      "**measurement** — for benchmarks and profiling (they may slow the product down or "
      "disable recovery, and say so in the log); **test** — for tests only. The product agent "
      "(`revenant-agent`) ignores the measurement and test knobs, with a warning; its testing "
      "variant `revenant-agent-testing` reads them, and `revenant-run` starts it for a job with "
      "one of them set (docs/design.md, \"The testing variant\"). The shim and the tools read "
      "every kind.\n\n"
      "A value that does not parse or is out of range is ignored with one warning naming the "
      "variable; an empty value is the same as unset.\n";
  for (Kind kind : {Kind::kProduct, Kind::kLauncher, Kind::kMeasurement, Kind::kTest}) {
    absl::StrAppend(&out, "\n## ", KindName(kind), "\n\n| variable | type | default | what |\n"
                          "|---|---|---|---|\n");
    for (const Knob& k : kTable) {
      if (k.kind != kind) continue;
      absl::StrAppend(&out, "| `", k.name, "` | ", TypeName(k.type), " | ",
                      *k.default_text ? k.default_text : "unset", " | ", k.doc, " |\n");
    }
  }
  return out;
}

}  // namespace knobs
}  // namespace revenant
