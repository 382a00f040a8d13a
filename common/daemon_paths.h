// Where a standalone agent (revenant-agent --gpu I, for jobs started by
// mpirun, srun or torchrun rather than revenant-run) listens, so the shim of
// an application can find it by its local rank without any configuration:
//
//   /dev/shm/revenant-daemon-<uid>/gpu<I>/agent.sock
//
// The directory is per user and 0700; REVENANT_DAEMON_ROOT overrides
// /dev/shm.
#ifndef REVENANT_COMMON_DAEMON_PATHS_H_
#define REVENANT_COMMON_DAEMON_PATHS_H_

#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>

#include "common/knobs.h"

namespace revenant {

inline std::string DaemonDir(int gpu) {
  return knobs::String(knobs::Id::kDaemonRoot).value_or("/dev/shm") + "/revenant-daemon-" +
         std::to_string(getuid()) + "/gpu" + std::to_string(gpu);
}

// The local rank of this process as the common launchers set it (torchrun,
// Open MPI, Slurm), 0 when none is set.
inline int LocalRankFromEnvironment() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
                           "MPI_LOCALRANKID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v) return std::atoi(v);
  }
  return 0;
}

}  // namespace revenant

#endif  // REVENANT_COMMON_DAEMON_PATHS_H_
