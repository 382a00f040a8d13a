// Prints docs/knobs.md from the knobs table (scripts/update_knobs_doc.sh).
#include <cstdio>

#include "common/knobs.h"

int main() {
  const std::string md = revenant::knobs::Markdown();
  std::fwrite(md.data(), 1, md.size(), stdout);
  return 0;
}
