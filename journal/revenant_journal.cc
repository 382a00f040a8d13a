// revenant-journal: inspects the journal of one agent rank.
//
//   revenant-journal dump DIR     one line per entry
//   revenant-journal stats DIR    records and bytes per log and per API id
//   revenant-journal verify DIR   checks CRCs, sequence links and payloads
//
// Exit codes: 0 ok, 1 corruption found (kDataLoss), 2 usage or IO error.
#include <cstdio>
#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "journal/api_name.h"
#include "journal/file.h"
#include "journal/journal.h"

namespace revenant {
namespace journal {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitCorrupt = 1;
constexpr int kExitUsage = 2;

int Usage() {
  std::fprintf(stderr,
               "usage: revenant-journal dump|stats|verify DIR\n"
               "  dump    one line per entry: seq, api id, flags, sizes, resource keys\n"
               "  stats   records and bytes per log, per api id, payload bytes\n"
               "  verify  check checksums, sequence links and payload checksums\n"
               "exit: 0 ok, 1 corruption found, 2 usage or IO error\n");
  return kExitUsage;
}

int Fail(const absl::Status& s) {
  if (absl::IsDataLoss(s)) {
    std::printf("CORRUPT: %s\n", std::string(s.message()).c_str());
    return kExitCorrupt;
  }
  std::fprintf(stderr, "revenant-journal: %s\n", s.ToString().c_str());
  return kExitUsage;
}

std::string Keys(const google::protobuf::RepeatedField<uint64_t>& keys) {
  return absl::StrJoin(keys.begin(), keys.end(), ",", [](std::string* out, uint64_t k) {
    absl::StrAppend(out, absl::StrFormat("%#x", k));
  });
}

std::string PayloadText(const JournalEntry& e) {
  if (e.payload_released()) {
    return e.has_payload_ref()
               ? absl::StrFormat("payload=%d@%d(released behind a snapshot)",
                                 e.payload_ref().length(), e.payload_ref().offset())
               : std::string("payload=released(behind a snapshot)");
  }
  if (e.has_payload_ref()) {
    return absl::StrFormat("payload=%d@%d(crc32c=%08x)", e.payload_ref().length(),
                           e.payload_ref().offset(), e.payload_ref().crc32c());
  }
  if (e.has_capture()) {
    return absl::StrFormat("payload=%d@%s:%d(captured by the device)", e.capture().length(),
                           e.capture().file(), e.capture().offset());
  }
  return absl::StrCat("payload=", e.inline_payload().size(), "(inline)");
}

int Dump(JournalReader* reader) {
  auto print = [](const char* log) {
    return [log](const JournalEntry& e) {
      std::printf(
          "%s seq=%llu api=%s flags=%#x minibatch=%llu args=%zu %s creates=[%s] "
          "destroys=[%s] touches=[%s] overwrites=[%s]\n",
          log, static_cast<unsigned long long>(e.seq()), ApiName(e.api_id()).c_str(), e.flags(),
          static_cast<unsigned long long>(e.minibatch()), e.args().size(),
          PayloadText(e).c_str(), Keys(e.creates()).c_str(), Keys(e.destroys()).c_str(),
          Keys(e.touches()).c_str(), Keys(e.overwrites()).c_str());
      return absl::OkStatus();
    };
  };
  if (absl::Status s = reader->ReadSetup(print("setup")); !s.ok()) return Fail(s);
  if (absl::Status s = reader->ReadMinibatch(print("minibatch")); !s.ok()) return Fail(s);
  return kExitOk;
}

struct Counts {
  uint64_t records = 0;
  uint64_t entry_bytes = 0;    // serialized entries (log framing excluded)
  uint64_t payload_bytes = 0;  // out-of-line payload bytes referenced
};

uint64_t SizeOrZero(const std::string& path) {
  if (path.empty()) return 0;
  absl::StatusOr<uint64_t> size = FileSize(path);
  return size.ok() ? *size : 0;
}

int Stats(JournalReader* reader) {
  std::map<std::string, std::map<uint32_t, Counts>> per_api;
  std::map<std::string, Counts> per_log;
  auto count = [&](const std::string& log) {
    return [&, log](const JournalEntry& e) {
      const uint64_t payload = e.has_payload_ref() ? e.payload_ref().length()
                               : e.has_capture()   ? e.capture().length()
                                                   : 0;
      for (Counts* c : {&per_log[log], &per_api[log][e.api_id()]}) {
        ++c->records;
        c->entry_bytes += e.ByteSizeLong();
        c->payload_bytes += payload;
      }
      return absl::OkStatus();
    };
  };
  absl::Status s = reader->ReadSetup(count("setup"));
  if (s.ok()) s = reader->ReadMinibatch(count("minibatch"));
  struct LogFiles {
    const char* name;
    std::string log, payload;
  };
  const LogFiles files[] = {
      {"setup", reader->setup_log_path(), reader->setup_payload_path()},
      {"minibatch", reader->minibatch_log_path(), reader->minibatch_payload_path()}};
  for (const LogFiles& f : files) {
    const Counts& c = per_log[f.name];
    std::printf("%s: records=%llu entry_bytes=%llu log_file_bytes=%llu payload_bytes=%llu "
                "payload_file_bytes=%llu\n",
                f.name, (unsigned long long)c.records, (unsigned long long)c.entry_bytes,
                (unsigned long long)SizeOrZero(f.log), (unsigned long long)c.payload_bytes,
                (unsigned long long)SizeOrZero(f.payload));
    for (const auto& [api, ac] : per_api[f.name]) {
      std::printf("  %s api=%s records=%llu entry_bytes=%llu payload_bytes=%llu\n", f.name,
                  ApiName(api).c_str(), (unsigned long long)ac.records,
                  (unsigned long long)ac.entry_bytes, (unsigned long long)ac.payload_bytes);
    }
  }
  if (!s.ok()) return Fail(s);
  return kExitOk;
}

int Verify(JournalReader* reader) {
  uint64_t setup = 0, minibatch = 0, released = 0;
  absl::Status s = reader->ReadSetup([&](const JournalEntry&) {
    ++setup;
    return absl::OkStatus();
  });
  if (s.ok()) {
    s = reader->ReadMinibatch([&](const JournalEntry& e) {
      ++minibatch;
      released += e.payload_released() ? 1 : 0;
      return absl::OkStatus();
    });
  }
  if (!s.ok()) return Fail(s);
  std::printf("OK: setup %llu entries, minibatch %llu entries", (unsigned long long)setup,
              (unsigned long long)minibatch);
  if (released > 0) {
    std::printf(" (%llu with their payloads released behind a snapshot: not checked, never "
                "replayed)",
                (unsigned long long)released);
  }
  // Where the current minibatch starts (its boundary marker's request; a
  // replacement skips what its predecessor's ring holds before it).
  const SegmentHeader& mh = reader->minibatch_header();
  if (mh.minibatch() != 0) {
    std::printf("; minibatch %llu", (unsigned long long)mh.minibatch());
    if (mh.boundary_seq() != 0) {
      std::printf(" from request %llu", (unsigned long long)mh.boundary_seq());
    }
  }
  std::printf("\n");
  return kExitOk;
}

int Main(int argc, char** argv) {
  if (argc != 3) return Usage();
  const std::string command = argv[1];
  if (command != "dump" && command != "stats" && command != "verify") return Usage();
  JournalReader::Options options;
  // dump and stats show payload references as stored; verify checks them.
  options.load_payloads = command == "verify";
  absl::StatusOr<std::unique_ptr<JournalReader>> reader = JournalReader::Open(argv[2], options);
  if (!reader.ok()) {
    std::fprintf(stderr, "revenant-journal: %s\n", reader.status().ToString().c_str());
    return kExitUsage;
  }
  if (command == "dump") return Dump(reader->get());
  if (command == "stats") return Stats(reader->get());
  return Verify(reader->get());
}

}  // namespace
}  // namespace journal
}  // namespace revenant

int main(int argc, char** argv) { return revenant::journal::Main(argc, argv); }
