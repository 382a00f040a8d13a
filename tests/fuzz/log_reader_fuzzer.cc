// Fuzzes jlog::Reader over an arbitrary byte string: every record it returns
// and every corruption it reports must stay inside the input, and the read
// must end.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "journal/file.h"
#include "journal/log_reader.h"

namespace {

using revenant::journal::SequentialFile;
namespace jlog = revenant::journal::log;

// A SequentialFile over memory (a short read means the end, as for a file).
class StringFile : public SequentialFile {
 public:
  explicit StringFile(absl::string_view data) : data_(data) {}
  absl::Status Read(size_t n, std::string* scratch, absl::string_view* result) override {
    if (n > data_.size()) n = data_.size();
    scratch->assign(data_.data(), n);
    data_.remove_prefix(n);
    *result = absl::string_view(*scratch);
    return absl::OkStatus();
  }

 private:
  absl::string_view data_;
};

class CountingReporter : public jlog::Reader::Reporter {
 public:
  void Corruption(size_t bytes, const absl::Status& status) override {
    dropped += bytes;
    (void)status.ToString();
  }
  uint64_t dropped = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  StringFile file(bytes);
  CountingReporter reporter;
  jlog::Reader reader(&file, &reporter);
  std::string record;
  uint64_t total = 0;
  // Each record consumes at least a header's worth of input, so the loop is
  // bounded by the input size; a reader that returned more is looping.
  for (size_t i = 0; reader.ReadRecord(&record); ++i) {
    total += record.size();
    if (i > bytes.size() || total > bytes.size()) std::abort();
  }
  return 0;
}
