// Fuzzes JournalReader over a directory whose segment files are fuzz bytes:
// every problem must come back as a status (kDataLoss for corruption), never
// as a crash, a hang or a read outside the files.
//
// Input: up to four parts separated by "#REVSEG#": the setup log, the setup
// payload file, the minibatch log and the minibatch payload file (segment 1).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "journal/journal.h"

namespace {

constexpr absl::string_view kSeparator = "#REVSEG#";
const char* const kNames[] = {"setup-000001.log", "setup-000001.payload",
                              "minibatch-000001.log", "minibatch-000001.payload"};

const std::string& Dir();

void RemoveDir() {
  for (const char* name : kNames) unlink((Dir() + "/" + name).c_str());
  rmdir(Dir().c_str());
}

// One directory per process, removed at exit.
const std::string& Dir() {
  static const std::string dir = [] {
    char tmpl[] = "/tmp/revenant-journal-fuzz-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) std::abort();
    return std::string(tmpl);
  }();
  static const bool registered = std::atexit(RemoveDir) == 0;
  (void)registered;
  return dir;
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) std::abort();
  std::fclose(f);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& dir = Dir();
  for (const char* name : kNames) unlink((dir + "/" + name).c_str());
  absl::string_view rest(reinterpret_cast<const char*>(data), size);
  for (int i = 0; i < 4 && (i == 0 || !rest.empty()); ++i) {
    const size_t cut = rest.find(kSeparator);
    const absl::string_view part = rest.substr(0, cut);
    WriteFile(dir + "/" + kNames[i], part);
    rest = cut == absl::string_view::npos ? absl::string_view() : rest.substr(cut + kSeparator.size());
  }
  for (bool load : {true, false}) {
    revenant::journal::JournalReader::Options options;
    options.load_payloads = load;
    auto reader = revenant::journal::JournalReader::Open(dir, options);
    if (!reader.ok()) continue;
    uint64_t entries = 0;
    auto count = [&](const revenant::journal::JournalEntry& e) {
      ++entries;
      (void)e.ByteSizeLong();
      return absl::OkStatus();
    };
    (void)(*reader)->ReadSetup(count);
    (void)(*reader)->ReadMinibatch(count);
    // An entry costs at least a few bytes of input: more means a loop.
    if (entries > size) std::abort();
  }
  return 0;
}
