// NCCL bootstrap shared by the multi-rank test programs (train_mlp,
// collectives_all): rank, world size and local rank from the launcher's
// environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_PORT, as torchrun and
// revenant-run set them), and the unique id passed from rank 0 to the others
// through a file in /dev/shm/revenant-train-<MASTER_PORT>/<name>, written
// atomically (rename) and polled for with a bound.
//
//   Launch l = ReadLaunch();
//   ncclUniqueId id = ExchangeUniqueId(l, "nccl-id");
//   ncclCommInitRank(&comm, l.world, id, l.rank);
//   RemoveUniqueId(l, "nccl-id");   // rank 0, once init returned everywhere
//
// Plain CUDA + NCCL: nothing here depends on Revenant.
#ifndef REVENANT_TESTS_APPS_COLLECTIVES_BOOTSTRAP_H_
#define REVENANT_TESTS_APPS_COLLECTIVES_BOOTSTRAP_H_

#include <errno.h>
#include <fcntl.h>
#include <nccl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "tests/apps/app_check.h"

#define CHECK_NCCL(call)                                                              \
  do {                                                                                \
    ncclResult_t check_nccl_res_ = (call);                                            \
    if (check_nccl_res_ != ncclSuccess) {                                             \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %d (%s)\n", __FILE__, __LINE__,   \
                   #call, static_cast<int>(check_nccl_res_),                          \
                   ncclGetErrorString(check_nccl_res_));                              \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

struct Launch {
  int rank = 0;
  int world = 1;
  int local_rank = 0;
  std::string port = "0";
};

inline int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

inline Launch ReadLaunch() {
  Launch l;
  l.rank = EnvInt("RANK", 0);
  l.world = EnvInt("WORLD_SIZE", 1);
  l.local_rank = EnvInt("LOCAL_RANK", l.rank);
  if (const char* p = std::getenv("MASTER_PORT")) l.port = p;
  EXPECT_APP(l.world >= 1 && l.rank >= 0 && l.rank < l.world, "bad RANK %d / WORLD_SIZE %d",
             l.rank, l.world);
  return l;
}

inline std::string BootstrapDir(const Launch& l) {
  return "/dev/shm/revenant-train-" + l.port;
}

// Rank 0 creates the id and publishes it; the others wait for it (60 s).
inline ncclUniqueId ExchangeUniqueId(const Launch& l, const char* name) {
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  const std::string dir = BootstrapDir(l);
  const std::string path = dir + "/" + name;
  if (l.rank == 0) {
    CHECK_NCCL(ncclGetUniqueId(&id));
    EXPECT_APP(mkdir(dir.c_str(), 0700) == 0 || errno == EEXIST, "mkdir %s: %s", dir.c_str(),
               std::strerror(errno));
    const std::string tmp = path + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "wb");
    EXPECT_APP(f != nullptr, "cannot write %s", tmp.c_str());
    EXPECT_APP(std::fwrite(&id, sizeof(id), 1, f) == 1, "short write to %s", tmp.c_str());
    EXPECT_APP(std::fclose(f) == 0, "close %s", tmp.c_str());
    EXPECT_APP(std::rename(tmp.c_str(), path.c_str()) == 0, "rename to %s", path.c_str());
    return id;
  }
  bool got = WaitFor(
      [&] {
        FILE* f = std::fopen(path.c_str(), "rb");
        if (f == nullptr) return false;
        const bool ok = std::fread(&id, sizeof(id), 1, f) == 1;
        std::fclose(f);
        return ok;
      },
      60.0);
  EXPECT_APP(got, "rank %d: no NCCL id at %s after 60 s", l.rank, path.c_str());
  return id;
}

// Rank 0, after ncclCommInitRank returned (so every rank has read the id).
inline void RemoveUniqueId(const Launch& l, const char* name) {
  if (l.rank != 0) return;
  const std::string dir = BootstrapDir(l);
  std::remove((dir + "/" + name).c_str());
  rmdir(dir.c_str());  // fails harmlessly while other ids are still there
}

// A device for this rank: one rank per GPU natively.
inline void SelectDevice(const Launch& l) {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_APP(count > 0, "no CUDA device");
  CHECK_CUDA(cudaSetDevice(l.local_rank % count));
}

#endif  // REVENANT_TESTS_APPS_COLLECTIVES_BOOTSTRAP_H_
