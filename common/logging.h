// Minimal leveled logging to stderr for every Revenant process.
//
// The shim is preloaded into arbitrary applications (some of which bundle
// their own glog/absl logging), so Revenant's logging must not export
// symbols or own global state beyond one level variable. Every line carries
// a component tag and the pid so that interleaved output of a job stays
// readable:
//
//   REVENANT_LOG(WARNING, "shim") << "cudaFoo is not supported yet";
//   -> [revenant shim 1234 W] cudaFoo is not supported yet
//
// The level comes from REVENANT_LOG_LEVEL (error|warning|info|debug),
// default info.
#ifndef REVENANT_COMMON_LOGGING_H_
#define REVENANT_COMMON_LOGGING_H_

#include <sstream>
#include <string>

namespace revenant {

enum class LogLevel { kERROR = 0, kWARNING = 1, kINFO = 2, kDEBUG = 3 };

// The active level (read once from REVENANT_LOG_LEVEL).
LogLevel CurrentLogLevel();
// Parses "error", "warning", "info", "debug"; unknown text gives kINFO.
LogLevel ParseLogLevel(const std::string& text);

namespace logging_internal {

// Buffers one line and writes it with a single write(2) on destruction, so
// lines from concurrent threads and processes do not interleave.
class LogLine {
 public:
  LogLine(LogLevel level, const char* component);
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  std::ostringstream stream_;
};

}  // namespace logging_internal
}  // namespace revenant

#define REVENANT_LOG_ENABLED(level) \
  (::revenant::LogLevel::k##level <= ::revenant::CurrentLogLevel())

#define REVENANT_LOG(level, component)          \
  if (!REVENANT_LOG_ENABLED(level)) {           \
  } else                                        \
    ::revenant::logging_internal::LogLine(      \
        ::revenant::LogLevel::k##level, component).stream()

#endif  // REVENANT_COMMON_LOGGING_H_
