#include "common/logging.h"

#include "common/knobs.h"

#include <unistd.h>

#include <optional>

namespace revenant {

LogLevel ParseLogLevel(const std::string& text) {
  if (text == "error") return LogLevel::kERROR;
  if (text == "warning") return LogLevel::kWARNING;
  if (text == "debug") return LogLevel::kDEBUG;
  return LogLevel::kINFO;
}

LogLevel CurrentLogLevel() {
  static const LogLevel level = [] {
    const std::optional<std::string> env = knobs::String(knobs::Id::kLogLevel);
    return env ? ParseLogLevel(*env) : LogLevel::kINFO;
  }();
  return level;
}

namespace logging_internal {

LogLine::LogLine(LogLevel level, const char* component) {
  static const char kLetters[] = {'E', 'W', 'I', 'D'};
  stream_ << "[revenant " << component << ' ' << getpid() << ' '
          << kLetters[static_cast<int>(level)] << "] ";
}

LogLine::~LogLine() {
  stream_ << '\n';
  const std::string line = stream_.str();
  // One write: atomic for lines shorter than PIPE_BUF on pipes.
  ssize_t ignored = write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace logging_internal
}  // namespace revenant
