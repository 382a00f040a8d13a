// Writes the seed corpora of the journal fuzzers from the real writers, so
// the fuzzers start from valid files and mutate their framing and content.
//   .fuzz/bin/make_seeds tests/fuzz/corpus   (built by scripts/fuzz.sh)
//   make_seeds <out_dir>   ->  <out_dir>/journal_reader/*, <out_dir>/log_reader/*
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "journal/file.h"
#include "journal/journal.h"
#include "journal/log_writer.h"

namespace {

using namespace revenant::journal;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

int Die(const std::string& what, const absl::Status& s) {
  std::fprintf(stderr, "make_seeds: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string out = argv[1];
  mkdir((out + "/journal_reader").c_str(), 0755);
  mkdir((out + "/log_reader").c_str(), 0755);

  // A journal: setup entries (one with an out-of-line payload), then
  // minibatch entries (segment 1 of each log, as the fuzzer names them).
  char tmpl[] = "/tmp/revenant-seeds-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  {
    JournalOptions options;
    auto j = Journal::Open(dir, "seed", 0, options);
    if (!j.ok()) return Die("open", j.status());
    uint64_t seq = 0;
    for (int i = 0; i < 3; ++i) {
      JournalEntry e;
      e.set_seq(++seq);
      e.set_api_id(7 + i);
      e.set_args(std::string(8 + i, 'a' + i));
      e.add_creates(0x200000001000ull + i);
      const std::string payload(i == 2 ? 8192 : 16, 'p');
      if (absl::Status s = (*j)->AppendSetup(e, payload); !s.ok()) return Die("setup", s);
    }
    for (int i = 0; i < 3; ++i) {
      JournalEntry e;
      e.set_seq(++seq);
      e.set_api_id(20 + i);
      e.set_minibatch(1);
      e.set_args(std::string(12, 'm'));
      e.add_touches(0x200000001000ull);
      const std::string payload(i == 1 ? 6000 : 0, 'q');
      if (absl::Status s = (*j)->AppendMinibatch(e, payload); !s.ok()) return Die("minibatch", s);
    }
  }
  // The live segments, whatever their numbers, in the fuzzer's order.
  std::string parts[4];
  FILE* ls = popen(("ls " + dir).c_str(), "r");
  char name[256];
  while (ls != nullptr && std::fscanf(ls, "%255s", name) == 1) {
    const std::string n = name;
    const int idx = n.rfind("setup-", 0) == 0 ? 0 : n.rfind("minibatch-", 0) == 0 ? 2 : -1;
    if (idx < 0) continue;
    const bool payload = n.find(".payload") != std::string::npos;
    parts[idx + (payload ? 1 : 0)] = Slurp(dir + "/" + n);
  }
  if (ls != nullptr) pclose(ls);
  const std::string sep = "#REVSEG#";
  Spit(out + "/journal_reader/full", parts[0] + sep + parts[1] + sep + parts[2] + sep + parts[3]);
  Spit(out + "/journal_reader/setup_only", parts[0] + sep + parts[1]);
  Spit(out + "/log_reader/setup_log", parts[0]);
  Spit(out + "/log_reader/minibatch_log", parts[2]);

  // A log spanning blocks: a record of several fragments.
  const std::string path = dir + "/multi.log";
  {
    auto f = NewAppendableFile(path);
    if (!f.ok()) return Die("log", f.status());
    log::Writer w(f->get());
    (void)w.AddRecord("short");
    (void)w.AddRecord(std::string(40000, 'x'));
    (void)w.AddRecord("");
    (void)w.AddRecord("tail");
  }
  Spit(out + "/log_reader/multi_block", Slurp(path));
  std::system(("rm -rf " + dir).c_str());
  return 0;
}
