// MonotonicNanos: CLOCK_MONOTONIC in nanoseconds, for durations (waits, call
// and request statistics, snapshot timing). ~20 ns per reading.
#ifndef REVENANT_COMMON_CLOCK_H_
#define REVENANT_COMMON_CLOCK_H_

#include <time.h>

#include <cstdint>

namespace revenant {

inline int64_t MonotonicNanos() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

}  // namespace revenant

#endif  // REVENANT_COMMON_CLOCK_H_
