#include "common/events.h"

#include <fcntl.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>

namespace revenant {

std::string JobRootOf(const std::string& rank_dir) {
  const size_t slash = rank_dir.find_last_of('/');
  return slash == std::string::npos ? "." : rank_dir.substr(0, slash);
}

void RecordEvent(const std::string& job_root, const std::string& event, int rank, int epoch,
                 const std::string& detail) {
  if (job_root.empty()) return;
  timeval tv{};
  gettimeofday(&tv, nullptr);
  const long long us = static_cast<long long>(tv.tv_sec) * 1000000 + tv.tv_usec;
  char line[512];
  std::string clean;
  for (char c : detail) clean += (c == '"' || c == '\\' || c == '\n') ? '\'' : c;
  const int n = std::snprintf(line, sizeof(line),
                              "{\"t_us\":%lld,\"event\":\"%s\",\"rank\":%d,\"epoch\":%d,"
                              "\"detail\":\"%s\"}\n",
                              us, event.c_str(), rank, epoch, clean.c_str());
  if (n <= 0) return;
  const int fd = open((job_root + "/events.jsonl").c_str(),
                      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;
  ssize_t ignored = write(fd, line, static_cast<size_t>(n) < sizeof(line) ? n : sizeof(line) - 1);
  (void)ignored;
  close(fd);
}

int ReadRecoveryEpoch(const std::string& job_root) {
  if (job_root.empty()) return 0;
  std::ifstream f(job_root + "/epoch");
  int e = 0;
  if (f >> e) return e;
  return 0;
}

}  // namespace revenant
