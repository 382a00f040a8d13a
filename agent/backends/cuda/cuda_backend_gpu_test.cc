// GPU test of the cuda backend (needs a GPU; tagged gpu + manual).
//
//   cuda_backend_gpu_test --fatbin=gpu_test_kernels.fatbin
//
// Without --child it is the driver: it runs the same allocation sequence in
// two agents-to-be, one after the other (fresh processes, like a replacement
// agent after a crash), and checks that both print the same device addresses;
// then runs ranks 0 and 1 concurrently, and checks that a second backend of a
// rank whose range is taken fails with a clear error. Each child also checks
// copies, memsets, pointer validation, streams, events, host callbacks, a
// kernel from a fat binary, function attributes, occupancy, graph memory
// (alloc/free nodes), launches held back as graphs, boundary snapshots
// copied through the staging and straight into a registered file, held
// uploads hashed by the device (whole, and in pieces beside the copy), and Reset;
// then, in children of their own, asynchronous snapshots through a device
// spare and a one-rank communicator's all-reduces issued as copies (by the
// agent's copy kernel where they may be).
// Prints "PASS cuda_backend_gpu_test" as its last line on success.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/backend.h"
#include "agent/snapshot.h"
#include "agent/backends/cuda/cuda_backend.h"
#include "common/content_hash.h"

namespace revenant {
namespace agent {
namespace {

int g_failures = 0;

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      std::printf("FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      ++g_failures;                                                   \
    }                                                                 \
  } while (0)
#define EXPECT_ERR(expr, want)                                                      \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    if (e_ != (want)) {                                                             \
      std::printf("FAIL %s:%d: %s returned %d, want %d\n", __FILE__, __LINE__, #expr, \
                  static_cast<int>(e_), static_cast<int>(want));                    \
      ++g_failures;                                                                 \
    }                                                                               \
  } while (0)

std::string Flag(int argc, char** argv, const std::string& name, const std::string& def = "") {
  const std::string prefix = "--" + name + "=";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], prefix.c_str(), prefix.size()) == 0) return argv[i] + prefix.size();
    if (name == argv[i] + 2 && std::strncmp(argv[i], "--", 2) == 0) return "1";
  }
  return def;
}

void Addr(const char* name, const void* p) {
  std::printf("ADDR %s %p\n", name, p);
}

// Graph memory: alloc/free nodes take memory from the fixed range when they
// are added (the addresses are printed, so the two agents compare them); the
// memory lives with the graphs and executables holding it. `fill` is
// fill_u32, `out` a device buffer of at least 4096 bytes.
void GraphMemory(Backend* b, const KernelInfo& fill, void* out, const DeviceRange& range) {
  constexpr uint32_t kCount = 1024;
  cudaStream_t s = nullptr;
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  cudaGraph_t g = nullptr;
  EXPECT_ERR(b->cudaGraphCreate(&g, 0), cudaSuccess);
  cudaGraphNode_t alloc = nullptr, kernel = nullptr, copy = nullptr, free_node = nullptr;
  void* gm = nullptr;
  EXPECT_ERR(b->AddMemAllocNode(&alloc, g, {}, kCount * 4, &gm), cudaSuccess);
  const uint64_t ga = reinterpret_cast<uint64_t>(gm);
  EXPECT(ga >= range.base && ga - range.base < range.size);
  Addr("graph_alloc", gm);
  std::vector<char> args(fill.args_size, 0);
  const uint32_t count = kCount, value = 100;
  const unsigned char add = 1;
  std::memcpy(args.data() + fill.params[0].offset, &gm, 8);
  std::memcpy(args.data() + fill.params[1].offset, &count, 4);
  std::memcpy(args.data() + fill.params[2].offset, &value, 4);
  std::memcpy(args.data() + fill.params[3].offset, &add, 1);
  EXPECT_ERR(b->AddKernelNode(&kernel, g, {alloc}, fill, dim3(kCount / 128), dim3(128), 0,
                              args.data()),
             cudaSuccess);
  // The graph's memory is a valid source for a copy node, as a device buffer is.
  EXPECT_ERR(b->AddMemcpyNode1D(&copy, g, {kernel}, out, gm, kCount * 4,
                                cudaMemcpyDeviceToDevice),
             cudaSuccess);
  EXPECT_ERR(b->AddMemFreeNode(&free_node, g, {copy}, gm), cudaSuccess);
  cudaGraphNode_t bad = nullptr;
  EXPECT_ERR(b->AddMemFreeNode(&bad, g, {}, out), cudaErrorInvalidValue);  // not graph memory
  void* none = nullptr;
  EXPECT_ERR(b->AddMemAllocNode(&bad, reinterpret_cast<cudaGraph_t>(0x10), {}, 64, &none),
             cudaErrorInvalidValue);
  std::vector<cudaGraphNode_t> nodes;
  EXPECT_ERR(b->GraphGetNodes(g, &nodes), cudaSuccess);
  EXPECT(nodes.size() == 4);
  cudaGraph_t clone = nullptr;
  EXPECT_ERR(b->cudaGraphClone(&clone, g), cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  EXPECT_ERR(b->cudaGraphInstantiate(&exec, g, 0), cudaSuccess);
  EXPECT_ERR(b->cudaMemsetAsync(out, 0, kCount * 4, s), cudaSuccess);
  EXPECT_ERR(b->cudaGraphLaunch(exec, s), cudaSuccess);
  EXPECT_ERR(b->cudaGraphLaunch(exec, s), cudaSuccess);  // the same address every launch
  EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
  std::vector<uint32_t> got(kCount, 0);
  EXPECT_ERR(b->Memcpy(got.data(), out, kCount * 4, cudaMemcpyDeviceToHost, s, false),
             cudaSuccess);
  EXPECT(got[0] == 100 && got[kCount - 1] == 100 + kCount - 1);

  // Held by the clone after the graph and its executable are gone.
  EXPECT_ERR(b->cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_ERR(b->cudaGraphDestroy(g), cudaSuccess);
  EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_ERR(b->Memcpy(got.data(), gm, 4, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  EXPECT_ERR(b->cudaGraphDestroy(clone), cudaSuccess);
  // Released at the next device-wide synchronization, then reused.
  EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_ERR(b->Memcpy(got.data(), gm, 4, cudaMemcpyDeviceToHost, nullptr, false),
             cudaErrorInvalidValue);

  // Graph memory the application frees itself is not freed again with its graph.
  cudaGraph_t g2 = nullptr;
  void* gm2 = nullptr;
  void* reused = nullptr;
  EXPECT_ERR(b->cudaGraphCreate(&g2, 0), cudaSuccess);
  EXPECT_ERR(b->AddMemAllocNode(&alloc, g2, {}, kCount * 4, &gm2), cudaSuccess);
  Addr("graph_alloc_2", gm2);
  EXPECT_ERR(b->cudaFree(gm2), cudaSuccess);
  EXPECT_ERR(b->cudaMalloc(&reused, kCount * 4), cudaSuccess);
  Addr("after_graph_free", reused);
  EXPECT_ERR(b->cudaGraphDestroy(g2), cudaSuccess);
  EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_ERR(b->Memcpy(got.data(), reused, 4, cudaMemcpyDeviceToHost, nullptr, false),
             cudaSuccess);
  EXPECT_ERR(b->cudaFree(reused), cudaSuccess);
  EXPECT_ERR(b->cudaStreamDestroy(s), cudaSuccess);
}

// The session's snapshot copier over `b` (agent/session.cc), counting
// registrations in *registrations.
SnapshotCopier BackendCopier(Backend* b, int* registrations) {
  SnapshotCopier copier;
  copier.copy = [b](uint64_t addr, void* dst, size_t n) -> absl::Status {
    const cudaError_t e = b->Memcpy(dst, reinterpret_cast<const void*>(addr), n,
                                    cudaMemcpyDeviceToHost, nullptr, /*async=*/true);
    return e == cudaSuccess ? absl::OkStatus() : absl::InternalError("device copy error");
  };
  copier.wait = [b]() -> absl::Status {
    return b->cudaDeviceSynchronize() == cudaSuccess ? absl::OkStatus()
                                                     : absl::InternalError("synchronize error");
  };
  copier.register_host = [b, registrations](void* p, size_t n) -> absl::Status {
    ++*registrations;
    return b->RegisterSharedHost(p, n, 0) == cudaSuccess ? absl::OkStatus()
                                                         : absl::InternalError("register error");
  };
  copier.unregister_host = [b](void* p) { b->UnregisterSharedHost(p); };
  return copier;
}

// Boundary snapshots through this backend, as the session copies them: a
// staged synchronous snapshot (the file not registered, the device copying
// into registered staging buffers, threads draining them) and one copied
// straight into a registered file load back the device's bytes (seeded
// random contents, seed 20261204), and the staged one registered nothing
// but its staging.
void StagedSnapshot(Backend* b) {
  char tmpl[] = "/dev/shm/cuda_backend_gpu_test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    EXPECT(false);
    return;
  }
  const std::string dir = tmpl;
  std::mt19937 rng(20261204);
  std::vector<std::pair<void*, std::string>> allocs;
  for (size_t size : {size_t{1} << 20, size_t{3} << 20 | 77, size_t{4096}, size_t{5} << 20}) {
    void* p = nullptr;
    EXPECT_ERR(b->cudaMalloc(&p, size), cudaSuccess);
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_ERR(b->Memcpy(p, bytes.data(), size, cudaMemcpyHostToDevice, nullptr, false),
               cudaSuccess);
    allocs.emplace_back(p, bytes);
  }
  AllocationTable table;
  for (const auto& [p, bytes] : allocs) table.emplace_back(reinterpret_cast<uint64_t>(p), bytes.size());
  std::sort(table.begin(), table.end());
  int registrations = 0;
  const SnapshotCopier copier = BackendCopier(b, &registrations);
  for (const bool staged : {true, false}) {
    SnapshotStore::Options o;
    o.staged = staged;
    o.staging_bytes = 2 << 20;  // several turns
    o.staging_chunk_bytes = 256 << 10;
    o.crc_threads = 4;
    o.spare_ahead = false;
    registrations = 0;
    const std::string sub_dir = dir + (staged ? "/staged" : "/direct");
    {
      SnapshotStore store(sub_dir, 0, o);
      store.SetCopier(copier);
      absl::StatusOr<SnapshotWriteStats> st = store.Write(1, 1, table);
      EXPECT(st.ok());
      if (!st.ok()) {
        std::printf("snapshot write: %s\n", st.status().ToString().c_str());
        continue;
      }
      EXPECT(st->staged == staged);
      EXPECT(registrations == 1);  // the staging, or the file
      absl::StatusOr<std::unique_ptr<Snapshot>> snap = store.Open(1);
      EXPECT(snap.ok());
      if (!snap.ok()) continue;
      std::map<uint64_t, std::string> loaded;
      for (const auto& [addr, size] : table) loaded[addr] = std::string(size, '\0');
      uint64_t skipped = 0;
      const absl::Status s = (*snap)->Load(
          [&loaded](uint64_t addr, const void* src, size_t n) -> absl::Status {
            for (auto& [a, bytes] : loaded) {
              if (addr >= a && addr + n <= a + bytes.size()) {
                std::memcpy(bytes.data() + (addr - a), src, n);
                return absl::OkStatus();
              }
            }
            return absl::InvalidArgumentError("not an allocation");
          },
          table, &skipped);
      EXPECT(s.ok() && skipped == 0);
      for (const auto& [p, bytes] : allocs) {
        EXPECT(loaded[reinterpret_cast<uint64_t>(p)] == bytes);
      }
    }
    std::printf("snapshot of %zu allocations %s: loaded back equal\n", table.size(),
                staged ? "through the staging" : "into a registered file");
  }
  for (const auto& [p, bytes] : allocs) EXPECT_ERR(b->cudaFree(p), cudaSuccess);
  std::string cmd = "rm -rf " + dir;
  (void)std::system(cmd.c_str());
}

// An asynchronous staged snapshot through this backend, as the session
// takes one: the store leaves its file unregistered, the device copies the
// turns into the staging buffers on the backend's snapshot stream (each
// turn gated by cuStreamWaitValue64 on the drained word), this thread
// drains them; work queued after the copies (a memset of every allocation)
// runs only after them. The snapshot loads back the bytes before the memset
// (seed 20261206), the memset lands, only the staging was registered.
// `all_in_spare`: the device spare holds the whole snapshot, so the
// application's work runs before any turn is drained; otherwise (a spare
// of 8 MiB: the last copies only) it waits for the turns out of its memory.
void StagedAsyncSnapshot(Backend* b, bool all_in_spare) {
  char tmpl[] = "/dev/shm/cuda_backend_gpu_test.XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    EXPECT(false);
    return;
  }
  const std::string dir = tmpl;
  std::mt19937 rng(20261206);
  std::vector<std::pair<void*, std::string>> allocs;
  for (size_t size : {size_t{6} << 20 | 333, size_t{4096}, size_t{9} << 20}) {
    void* p = nullptr;
    EXPECT_ERR(b->cudaMalloc(&p, size), cudaSuccess);
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_ERR(b->Memcpy(p, bytes.data(), size, cudaMemcpyHostToDevice, nullptr, false),
               cudaSuccess);
    allocs.emplace_back(p, bytes);
  }
  AllocationTable table;
  for (const auto& [p, bytes] : allocs) table.emplace_back(reinterpret_cast<uint64_t>(p), bytes.size());
  std::sort(table.begin(), table.end());
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(page != MAP_FAILED);
  if (page == MAP_FAILED) return;
  EXPECT_ERR(b->RegisterSharedHost(page, 4096, 0), cudaSuccess);
  uint64_t* done = static_cast<uint64_t*>(page);
  uint64_t* filled = done + 8;
  uint64_t* drained = done + 16;
  int registrations = 0;
  const SnapshotCopier copier = BackendCopier(b, &registrations);
  SnapshotStore::Options o;
  o.staged = true;
  o.staging_bytes = 2 << 20;  // several turns
  o.staging_chunk_bytes = 256 << 10;
  o.crc_threads = 4;
  o.spare_ahead = false;
  {
    SnapshotStore store(dir, 0, o);
    store.SetCopier(copier);
    absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> pending = store.Begin(1, 1, table);
    EXPECT(pending.ok() && (*pending)->staged());
    if (pending.ok() && (*pending)->staged()) {
      std::vector<Backend::SnapshotCopy> copies;
      for (const auto& c : (*pending)->staged_copies()) {
        copies.push_back({reinterpret_cast<const void*>(c.addr), c.dst, c.size});
      }
      Backend::SnapshotTurns turns;
      turns.ends = (*pending)->staged_turn_ends();
      turns.filled = filled;
      turns.drained = drained;
      EXPECT(turns.ends.size() > 4);
      *done = *filled = *drained = 0;
      EXPECT_ERR(b->QueueSnapshotCopies(copies, done, 11, &turns), cudaSuccess);
      // The application's next work: after the copies, whatever stream.
      for (const auto& [p, bytes] : allocs) {
        EXPECT_ERR(b->cudaMemsetAsync(p, 0x5a, bytes.size(), nullptr), cudaSuccess);
      }
      // Nothing drained yet: the device has filled the first two turns at
      // most, and the third waits for the first's drain.
      cudaError_t q = b->cudaStreamQuery(nullptr);
      if (all_in_spare) {
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (q == cudaErrorNotReady && std::chrono::steady_clock::now() < deadline) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          q = b->cudaStreamQuery(nullptr);
        }
        EXPECT_ERR(q, cudaSuccess);
        EXPECT(__atomic_load_n(drained, __ATOMIC_ACQUIRE) == 0);
        std::printf("the application's work after the snapshot ran before any turn was drained "
                    "(the snapshot in the device spare): %s\n", q == cudaSuccess ? "yes" : "no");
      } else {
        EXPECT_ERR(q, cudaErrorNotReady);
        std::printf("the application's work after the snapshot waits for the turns out of its "
                    "memory (the spare holds the last copies only): %s\n",
                    q == cudaErrorNotReady ? "yes" : "no");
      }
      const absl::Status drained_all = store.DrainStaged(
          pending->get(),
          [filled](size_t t) -> absl::Status {
            const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
            while (__atomic_load_n(filled, __ATOMIC_ACQUIRE) < t + 1) {
              if (std::chrono::steady_clock::now() > deadline) {
                return absl::DeadlineExceededError("turn never filled");
              }
              std::this_thread::yield();
            }
            return absl::OkStatus();
          },
          [drained](size_t t) { __atomic_store_n(drained, t + 1, __ATOMIC_RELEASE); });
      EXPECT(drained_all.ok());
      if (!drained_all.ok()) {
        std::printf("drain: %s\n", drained_all.ToString().c_str());
        __atomic_store_n(drained, ~uint64_t{0}, __ATOMIC_RELEASE);
      }
      EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
      EXPECT(__atomic_load_n(done, __ATOMIC_ACQUIRE) == 11);
      absl::StatusOr<SnapshotWriteStats> st = store.Finish(std::move(*pending));
      EXPECT(st.ok() && st->staged);
      EXPECT(registrations == 1);  // the staging only
      absl::StatusOr<std::unique_ptr<Snapshot>> snap = store.Open(1);
      EXPECT(snap.ok());
      if (snap.ok()) {
        std::map<uint64_t, std::string> loaded;
        for (const auto& [addr, size] : table) loaded[addr] = std::string(size, '\0');
        uint64_t skipped = 0;
        const absl::Status s = (*snap)->Load(
            [&loaded](uint64_t addr, const void* src, size_t n) -> absl::Status {
              for (auto& [a, bytes] : loaded) {
                if (addr >= a && addr + n <= a + bytes.size()) {
                  std::memcpy(bytes.data() + (addr - a), src, n);
                  return absl::OkStatus();
                }
              }
              return absl::InvalidArgumentError("not an allocation");
            },
            table, &skipped);
        EXPECT(s.ok() && skipped == 0);
        for (const auto& [p, bytes] : allocs) {
          EXPECT(loaded[reinterpret_cast<uint64_t>(p)] == bytes);
          std::string now(bytes.size(), '\0');
          EXPECT_ERR(b->Memcpy(now.data(), p, now.size(), cudaMemcpyDeviceToHost, nullptr, false),
                     cudaSuccess);
          EXPECT(now == std::string(bytes.size(), '\x5a'));
        }
        std::printf("asynchronous staged snapshot of %zu allocations in %zu turns: loaded back "
                    "equal, later work after it\n",
                    table.size(), turns.ends.size());
      }
    }
  }
  EXPECT_ERR(b->UnregisterSharedHost(page), cudaSuccess);
  munmap(page, 4096);
  for (const auto& [p, bytes] : allocs) EXPECT_ERR(b->cudaFree(p), cudaSuccess);
  std::string cmd = "rm -rf " + dir;
  (void)std::system(cmd.c_str());
}

// One agent's life: a fixed call sequence.
// Launches held back and issued as graphs (LaunchKernelMayHold): a seeded
// sequence of order-sensitive launches of two kernels, with varying grids,
// batch ends and streams, must leave what the same launches one by one
// leave (computed here on the host); a refused launch inside a batch fails
// alone (the others run, its error comes back); a direct launch issues the
// held ones first. Module 42 holds the kernels.
// Held uploads hashed by the device (MemcpyHeld; docs/recovery.md, "Held
// uploads"): whole below 64 MiB, in pieces beside the copy from there with
// REVENANT_HASH_PIECES=1 (set by the caller). The hash words must hold the
// CPU's ContentHash of the source and the tag, the destination the bytes,
// and work queued behind the upload on its stream must see them.
void HeldUploadHashes(Backend* b) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  void* table = mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  EXPECT(table != MAP_FAILED);
  if (table == MAP_FAILED) return;
  EXPECT(b->RegisterHashWords(table, page));
  cudaStream_t s = nullptr;
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const size_t sizes[] = {(size_t{8} << 20) + 5, (size_t{96} << 20) + 13, size_t{64} << 20};
  int slot = 1;
  for (const size_t n : sizes) {
    void* src = nullptr;
    void* dst = nullptr;
    EXPECT_ERR(::cudaHostAlloc(&src, n, cudaHostAllocDefault), cudaSuccess);
    EXPECT_ERR(b->cudaMalloc(&dst, n), cudaSuccess);
    if (src == nullptr || dst == nullptr) return;
    std::mt19937_64 rng(20261206 + n);
    for (size_t i = 0; i + 8 <= n; i += 8) {
      const uint64_t v = rng();
      std::memcpy(static_cast<char*>(src) + i, &v, 8);
    }
    for (size_t i = n / 8 * 8; i < n; ++i) static_cast<char*>(src)[i] = static_cast<char>(i);
    auto* words = reinterpret_cast<uint64_t*>(static_cast<char*>(table) + 64 * slot++);
    words[0] = words[1] = 0;
    const uint64_t tag = 1000 + slot;
    bool hashed = false;
    EXPECT_ERR(b->MemcpyHeld(dst, src, n, s, /*async=*/true, words, tag, &hashed), cudaSuccess);
    EXPECT(hashed);
    // Queued behind the upload on its stream: a download of its last bytes.
    std::vector<char> tail(4096);
    EXPECT_ERR(b->Memcpy(tail.data(), static_cast<char*>(dst) + n - tail.size(), tail.size(),
                         cudaMemcpyDeviceToHost, s, /*async=*/false),
               cudaSuccess);
    EXPECT(std::memcmp(tail.data(), static_cast<char*>(src) + n - tail.size(), tail.size()) == 0);
    EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
    const uint64_t want = ContentHash(src, n);
    EXPECT(words[1] == tag);
    EXPECT(words[0] == want);
    std::printf("HELD_HASH %zu bytes: device %016llx, CPU %016llx, tag %llu\n", n,
                static_cast<unsigned long long>(words[0]), static_cast<unsigned long long>(want),
                static_cast<unsigned long long>(words[1]));
    EXPECT_ERR(b->cudaFree(dst), cudaSuccess);
    ::cudaFreeHost(src);
  }
  EXPECT_ERR(b->cudaStreamDestroy(s), cudaSuccess);
}

void HeldLaunches(Backend* b) {
  absl::StatusOr<KernelInfo> affine = b->GetKernel(42, "affine_u32");
  absl::StatusOr<KernelInfo> xadd = b->GetKernel(42, "xor_add_u32");
  EXPECT(affine.ok() && xadd.ok());
  if (!affine.ok() || !xadd.ok()) return;
  constexpr uint32_t kCount = 1024;
  cudaStream_t s1 = nullptr, s2 = nullptr;
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), cudaSuccess);
  void* x = nullptr;
  EXPECT_ERR(b->cudaMalloc(&x, kCount * 4), cudaSuccess);
  std::vector<uint32_t> want(kCount);
  for (uint32_t i = 0; i < kCount; ++i) want[i] = i;
  EXPECT_ERR(b->Memcpy(x, want.data(), kCount * 4, cudaMemcpyHostToDevice, s1, false),
             cudaSuccess);
  auto args = [&](const KernelInfo& k, uint32_t a, uint32_t c) {
    std::vector<char> v(k.args_size, 0);
    std::memcpy(v.data() + k.params[0].offset, &x, 8);
    std::memcpy(v.data() + k.params[1].offset, &kCount, 4);
    std::memcpy(v.data() + k.params[2].offset, &a, 4);
    std::memcpy(v.data() + k.params[3].offset, &c, 4);
    return v;
  };
  // What a launch does, on the host: the first `grid` blocks of 128.
  auto apply = [&](bool is_affine, uint32_t grid, uint32_t a, uint32_t c) {
    for (uint32_t i = 0; i < std::min(kCount, grid * 128); ++i) {
      want[i] = is_affine ? want[i] * a + c : (want[i] ^ a) + c;
    }
  };
  const uint32_t seed = 20261204;
  std::printf("held launches: seed %u\n", seed);
  uint32_t rng = seed;
  auto next = [&rng] {
    rng = rng * 1664525u + 1013904223u;
    return rng >> 8;
  };
  cudaStream_t on = s1;
  for (int i = 0; i < 600; ++i) {
    const bool is_affine = next() % 3 != 0;
    const uint32_t grid = next() % 4 == 0 ? 4 : 8;
    const uint32_t a = next() % 7 + 1, c = next() % 1000;
    const bool more = next() % 9 != 0;  // batches of ~9 and the 64 cap
    if (next() % 97 == 0) {
      // A stream change: the work on the other stream waits for this one's
      // (an event, as an application orders two streams), which flushes.
      cudaEvent_t ev = nullptr;
      EXPECT_ERR(static_cast<cudaError_t>(b->FlushLaunches()), cudaSuccess);
      EXPECT_ERR(b->cudaEventCreate(&ev), cudaSuccess);
      EXPECT_ERR(b->cudaEventRecord(ev, on), cudaSuccess);
      on = on == s1 ? s2 : s1;
      EXPECT_ERR(b->cudaStreamWaitEvent(on, ev, 0), cudaSuccess);
      EXPECT_ERR(b->cudaEventDestroy(ev), cudaSuccess);
    }
    const KernelInfo& k = is_affine ? *affine : *xadd;
    std::vector<char> v = args(k, a, c);
    EXPECT_ERR(b->LaunchKernelMayHold(k, dim3(grid), dim3(128), 0, on, v.data(), more),
               cudaSuccess);
    std::fill(v.begin(), v.end(), 0);  // the backend copied the arguments
    apply(is_affine, grid, a, c);
  }
  EXPECT_ERR(static_cast<cudaError_t>(b->FlushLaunches()), cudaSuccess);
  EXPECT_ERR(b->cudaStreamSynchronize(on), cudaSuccess);
  std::vector<uint32_t> got(kCount);
  EXPECT_ERR(b->Memcpy(got.data(), x, kCount * 4, cudaMemcpyDeviceToHost, on, false),
             cudaSuccess);
  EXPECT(got == want);
  const std::string stats = b->StatsAtExit();
  std::printf("held launches: %s\n", stats.c_str());
  EXPECT(stats.find("issued as") != std::string::npos &&
         stats.find(" 0 graphs") == std::string::npos);

  // A refused launch (2048 threads) between two good ones: those run.
  std::vector<char> v1 = args(*affine, 3, 1), v2 = args(*affine, 5, 0), v3 = args(*xadd, 6, 2);
  EXPECT_ERR(b->LaunchKernelMayHold(*affine, dim3(8), dim3(128), 0, on, v1.data(), true),
             cudaSuccess);
  EXPECT_ERR(b->LaunchKernelMayHold(*affine, dim3(1), dim3(2048), 0, on, v2.data(), true),
             cudaSuccess);
  EXPECT_ERR(b->LaunchKernelMayHold(*xadd, dim3(8), dim3(128), 0, on, v3.data(), true),
             cudaSuccess);
  EXPECT_ERR(static_cast<cudaError_t>(b->FlushLaunches()), cudaErrorInvalidValue);
  apply(true, 8, 3, 1);
  apply(false, 8, 6, 2);
  // Held launches, then a direct one: issued in their order.
  EXPECT_ERR(b->LaunchKernelMayHold(*affine, dim3(8), dim3(128), 0, on, v1.data(), true),
             cudaSuccess);
  EXPECT_ERR(b->LaunchKernelMayHold(*xadd, dim3(4), dim3(128), 0, on, v3.data(), true),
             cudaSuccess);
  EXPECT_ERR(b->LaunchKernel(*affine, dim3(8), dim3(128), 0, on, v2.data(), false), cudaSuccess);
  apply(true, 8, 3, 1);
  apply(false, 4, 6, 2);
  apply(true, 8, 5, 0);
  EXPECT_ERR(static_cast<cudaError_t>(b->FlushLaunches()), cudaSuccess);
  EXPECT_ERR(b->cudaStreamSynchronize(on), cudaSuccess);
  EXPECT_ERR(b->Memcpy(got.data(), x, kCount * 4, cudaMemcpyDeviceToHost, on, false),
             cudaSuccess);
  EXPECT(got == want);
  EXPECT_ERR(b->cudaFree(x), cudaSuccess);
  EXPECT_ERR(b->cudaStreamDestroy(s1), cudaSuccess);
  EXPECT_ERR(b->cudaStreamDestroy(s2), cudaSuccess);
}

// A one-rank communicator's all-reduces through the backend: copies the
// agent issues itself, by its copy kernel where both buffers are device
// allocations, 16-byte aligned and at most CudaNccl::kDeviceCopyMaxBytes
// (three cases here), else with cudaMemcpyAsync (four). Each result must be
// the input's bytes and nothing around them touched; the driver checks the
// count of kernel copies the backend logs when it goes.
int OneRankCopyChild() {
  char dir[] = "/tmp/revenant_gpu_test_nccl_XXXXXX";
  if (mkdtemp(dir) == nullptr) return 1;
  BackendOptions options;
  options.rank = 5;
  options.job_dir = dir;
  absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(options);
  if (!made.ok()) {
    std::printf("CREATE_FAILED %s\n", made.status().ToString().c_str());
    return 3;
  }
  {
    Backend* b = made->get();
    ncclUniqueId id;
    ncclComm_t comm = nullptr;
    EXPECT(b->ncclGetUniqueId(&id) == ncclSuccess);
    EXPECT(b->ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
    cudaStream_t s = nullptr;
    EXPECT_ERR(b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    const size_t area = (size_t{4} << 20) + 4096;
    void* src = nullptr;
    void* dst = nullptr;
    EXPECT_ERR(b->cudaMalloc(&src, area), cudaSuccess);
    EXPECT_ERR(b->cudaMalloc(&dst, area), cudaSuccess);
    if (comm == nullptr || src == nullptr || dst == nullptr) return 1;
    std::vector<unsigned char> pattern(area), back(area);
    std::mt19937 rng(20261207);
    for (unsigned char& c : pattern) c = static_cast<unsigned char>(rng());
    EXPECT_ERR(b->Memcpy(src, pattern.data(), area, cudaMemcpyHostToDevice, nullptr, false),
               cudaSuccess);
    // A pageable upload may return before its bytes reach the device, and
    // the non-blocking stream `s` does not wait for the legacy stream: each
    // upload is drained before the collective that reads or overwrites it.
    EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
    struct Case {
      size_t bytes, src_off, dst_off;
      ncclDataType_t type;
      const char* what;
    };
    const Case cases[] = {
        {size_t{1} << 20, 0, 0, ncclFloat, "1 MiB (kernel)"},
        {size_t{4} << 20, 16, 32, ncclFloat, "4 MiB, offsets 16/32 (kernel)"},
        {size_t{64} << 10, 48, 1024, ncclHalf, "64 KiB half (kernel)"},
        {(size_t{4} << 20) + 16, 0, 0, ncclChar, "4 MiB + 16 (over the bound: copy)"},
        {(size_t{1} << 20) + 4, 0, 0, ncclFloat, "1 MiB + 4 (size: copy)"},
        {size_t{1} << 20, 4, 0, ncclFloat, "1 MiB from offset 4 (alignment: copy)"},
        {12345, 7, 3, ncclChar, "12345 bytes, offsets 7/3 (copy)"},
    };
    const std::vector<unsigned char> fill(area, 0xEE);
    for (const Case& c : cases) {
      EXPECT_ERR(b->Memcpy(dst, fill.data(), area, cudaMemcpyHostToDevice, nullptr, false),
                 cudaSuccess);
      EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
      const size_t elem = c.type == ncclFloat ? 4 : c.type == ncclHalf ? 2 : 1;
      EXPECT(b->ncclAllReduce(static_cast<char*>(src) + c.src_off,
                              static_cast<char*>(dst) + c.dst_off, c.bytes / elem, c.type,
                              ncclSum, comm, s) == ncclSuccess);
      EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
      EXPECT_ERR(b->Memcpy(back.data(), dst, area, cudaMemcpyDeviceToHost, nullptr, false),
                 cudaSuccess);
      const bool copied =
          std::memcmp(back.data() + c.dst_off, pattern.data() + c.src_off, c.bytes) == 0;
      bool untouched = true;
      for (size_t i = 0; i < area; ++i) {
        if ((i < c.dst_off || i >= c.dst_off + c.bytes) && back[i] != 0xEE) untouched = false;
      }
      EXPECT(copied);
      EXPECT(untouched);
      std::printf("ONE_RANK_COPY %s: %s, %s\n", c.what, copied ? "equal" : "DIFFERENT",
                  untouched ? "nothing else touched" : "BYTES AROUND IT CHANGED");
    }
    EXPECT(b->ncclCommDestroy(comm) == ncclSuccess);
    EXPECT_ERR(b->cudaFree(src), cudaSuccess);
    EXPECT_ERR(b->cudaFree(dst), cudaSuccess);
    EXPECT_ERR(b->cudaStreamDestroy(s), cudaSuccess);
  }
  made->reset();  // logs the copies
  std::fflush(stdout);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return g_failures == 0 ? 0 : 1;
}

// Asynchronous snapshots through the device spare (run by the driver in a
// child of its own with REVENANT_SNAPSHOT_DEVICE_SPARE_MIB=64): of three
// allocations (6 MiB + 333 B, 4 KiB, 90 MiB; seed 20261207) the first two
// go through the spare and the third straight to the host. Work queued after
// the copies (memsets on the legacy and a created stream) must not reach the
// snapshot; two snapshots in a row (the second's copies into the spare queue
// behind the first's drain) each hold the bytes of their moment, the first
// waited for as the application does (its device synchronization need not
// wait for the drain), the second as the agent does (SynchronizeDevice: the
// done word is stored when it returns); then an allocation that only fits
// once the spare is given back succeeds.
int SpareChild() {
  BackendOptions options;
  options.rank = 3;
  absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(options);
  if (!made.ok()) {
    std::printf("CREATE_FAILED %s\n", made.status().ToString().c_str());
    return 3;
  }
  Backend* b = made->get();
  std::mt19937 rng(20261207);
  std::vector<std::pair<void*, size_t>> allocs;
  size_t total = 0;
  for (size_t size : {size_t{6} << 20 | 333, size_t{4096}, size_t{90} << 20}) {
    void* p = nullptr;
    EXPECT_ERR(b->cudaMalloc(&p, size), cudaSuccess);
    allocs.emplace_back(p, size);
    total += size;
  }
  cudaStream_t s = nullptr;
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const size_t host_bytes = (total + 4096 + 4095) & ~size_t{4095};
  void* host = mmap(nullptr, host_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXPECT(host != MAP_FAILED);
  if (host == MAP_FAILED) return 1;
  EXPECT_ERR(b->RegisterSharedHost(host, host_bytes, 0), cudaSuccess);
  uint64_t* done = static_cast<uint64_t*>(host);
  char* dst = static_cast<char*>(host) + 4096;
  for (uint64_t tag : {uint64_t{21}, uint64_t{22}}) {
    std::string bytes(total, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    std::vector<Backend::SnapshotCopy> copies;
    size_t off = 0;
    for (const auto& [p, size] : allocs) {
      EXPECT_ERR(b->Memcpy(p, bytes.data() + off, size, cudaMemcpyHostToDevice, nullptr, false),
                 cudaSuccess);
      copies.push_back({p, dst + off, size});
      off += size;
    }
    std::memset(dst, 0, total);
    *done = 0;
    EXPECT_ERR(b->QueueSnapshotCopies(copies, done, tag, nullptr), cudaSuccess);
    // The application's next work, on both kinds of stream.
    for (size_t i = 0; i < allocs.size(); ++i) {
      EXPECT_ERR(b->cudaMemsetAsync(allocs[i].first, 0x5a, allocs[i].second,
                                    i % 2 == 0 ? nullptr : s),
                 cudaSuccess);
    }
    if (tag == 21) {
      // The application's device synchronization waits for its own work,
      // not for the spare's drain: the tag follows within a bounded wait.
      EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
      const bool before = __atomic_load_n(done, __ATOMIC_ACQUIRE) != tag;
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (__atomic_load_n(done, __ATOMIC_ACQUIRE) != tag &&
             std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      std::printf("device synchronize returned %s the drain ended\n",
                  before ? "before" : "after");
    } else {
      // The agent's own wait (before it reads the done word) covers the
      // drain: the tag is there when it returns.
      EXPECT_ERR(b->SynchronizeDevice(), cudaSuccess);
    }
    EXPECT(__atomic_load_n(done, __ATOMIC_ACQUIRE) == tag);
    EXPECT(std::memcmp(dst, bytes.data(), total) == 0);
    std::string after(allocs[0].second, '\0');
    EXPECT_ERR(b->Memcpy(after.data(), allocs[0].first, after.size(), cudaMemcpyDeviceToHost,
                         nullptr, false),
               cudaSuccess);
    EXPECT(after == std::string(after.size(), '\x5a'));
    std::printf("snapshot %llu through the device spare: loaded back equal, later work after it\n",
                static_cast<unsigned long long>(tag));
  }
  // Memory runs out: the spare (64 MiB) gives way to the application. The
  // device is filled but for ~48 MiB outside the backend (its range, 64
  // GiB, is smaller than the device), then the backend is asked for 32 MiB
  // more than is free.
  size_t free_bytes = 0, total_bytes = 0;
  EXPECT(::cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  void* hog = nullptr;
  const size_t hog_bytes = free_bytes > (48u << 20) ? free_bytes - (48u << 20) : 0;
  EXPECT(hog_bytes > 0 && ::cudaMalloc(&hog, hog_bytes) == cudaSuccess);
  EXPECT(::cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  void* most = nullptr;
  const size_t want = free_bytes + (32u << 20);
  EXPECT_ERR(b->cudaMalloc(&most, want), cudaSuccess);
  std::printf("an allocation of %zu MiB with %zu MiB free: %s\n", want >> 20, free_bytes >> 20,
              most != nullptr ? "made (the spare given back)" : "refused");
  if (most != nullptr) EXPECT_ERR(b->cudaFree(most), cudaSuccess);
  if (hog != nullptr) EXPECT(::cudaFree(hog) == cudaSuccess);
  // Later snapshots copy straight to the host.
  *done = 0;
  std::vector<Backend::SnapshotCopy> copies{{allocs[1].first, dst, allocs[1].second}};
  EXPECT_ERR(b->QueueSnapshotCopies(copies, done, 23, nullptr), cudaSuccess);
  EXPECT_ERR(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT(__atomic_load_n(done, __ATOMIC_ACQUIRE) == 23);
  EXPECT(dst[0] == 0x5a && dst[4095] == 0x5a);
  for (const auto& [p, size] : allocs) EXPECT_ERR(b->cudaFree(p), cudaSuccess);
  EXPECT_ERR(b->UnregisterSharedHost(host), cudaSuccess);
  munmap(host, host_bytes);
  std::printf(g_failures == 0 ? "CHILD_OK\n" : "CHILD_FAILED %d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

// REVENANT_SNAPSHOT_DEVICE_SPARE_MIB=8: a staged asynchronous snapshot of
// ~15 MiB, its last 8 MiB through the device spare.
int StagedSpareChild() {
  BackendOptions options;
  options.rank = 4;
  absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(options);
  if (!made.ok()) {
    std::printf("CREATE_FAILED %s\n", made.status().ToString().c_str());
    return 3;
  }
  StagedAsyncSnapshot(made->get(), /*all_in_spare=*/false);
  std::printf(g_failures == 0 ? "CHILD_OK\n" : "CHILD_FAILED %d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

int Child(int rank, const std::string& fatbin, int hold_ms, bool block_range) {
  if (block_range) {
    // Something of this process already sits in the range: the backend must
    // refuse rather than hand out other addresses.
    void* want = reinterpret_cast<void*>(cuda::kDefaultDeviceBase +
                                         uint64_t(rank) * cuda::kRankStride + (1ull << 30));
    void* got = mmap(want, 1 << 21, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                     -1, 0);
    if (got != want) std::printf("could not block the range\n");
  }
  BackendOptions options;
  options.rank = rank;
  // Held uploads of 64 MiB and more hashed in pieces (HeldUploadHashes).
  setenv("REVENANT_HASH_PIECES", "1", 1);
  absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(options);
  if (!made.ok()) {
    std::printf("CREATE_FAILED %s\n", made.status().ToString().c_str());
    return 3;
  }
  Backend* b = made->get();
  const DeviceRange range = b->device_range();
  EXPECT(range.base == cuda::kDefaultDeviceBase + uint64_t(rank) * cuda::kRankStride);
  std::printf("RANGE 0x%llx %llu\n", (unsigned long long)range.base,
              (unsigned long long)range.size);

  // The allocation sequence whose addresses must repeat.
  void *a = nullptr, *big = nullptr, *c = nullptr, *d = nullptr, *e = nullptr, *f = nullptr;
  EXPECT_ERR(b->cudaMalloc(&a, 1000), cudaSuccess);
  EXPECT_ERR(b->cudaMalloc(&big, 3 << 20), cudaSuccess);
  EXPECT_ERR(b->cudaMalloc(&c, 10), cudaSuccess);
  EXPECT(reinterpret_cast<uint64_t>(a) == range.base);
  Addr("a", a);
  Addr("big", big);
  Addr("c", c);
  EXPECT_ERR(b->cudaFree(a), cudaSuccess);
  EXPECT_ERR(b->cudaMalloc(&d, 500), cudaSuccess);
  Addr("d", d);
  cudaStream_t s = nullptr;
  EXPECT_ERR(b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_ERR(b->cudaMallocAsync(&e, 1 << 20, s), cudaSuccess);
  Addr("e", e);
  EXPECT_ERR(b->cudaFreeAsync(e, s), cudaSuccess);
  EXPECT_ERR(b->cudaFreeAsync(e, s), cudaErrorInvalidValue);  // already freed in stream order
  EXPECT_ERR(b->cudaFree(e), cudaErrorInvalidValue);
  EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_ERR(b->cudaMalloc(&f, 64 << 20), cudaSuccess);
  Addr("f", f);

  // Copies through the mapped chunks, both ways, on the legacy and a created stream.
  const size_t n = (3 << 20) / 4;
  std::vector<uint32_t> in(n), out(n, 0);
  for (size_t i = 0; i < n; ++i) in[i] = uint32_t(i * 2654435761u);
  EXPECT_ERR(b->Memcpy(big, in.data(), n * 4, cudaMemcpyHostToDevice, nullptr, false),
             cudaSuccess);
  EXPECT_ERR(b->Memcpy(f, big, n * 4, cudaMemcpyDeviceToDevice, s, true), cudaSuccess);
  EXPECT_ERR(b->Memcpy(out.data(), f, n * 4, cudaMemcpyDeviceToHost, s, false), cudaSuccess);
  EXPECT(std::memcmp(in.data(), out.data(), n * 4) == 0);
  EXPECT_ERR(b->cudaMemset(c, 0x5a, 10), cudaSuccess);
  unsigned char cb[10] = {};
  EXPECT_ERR(b->Memcpy(cb, c, 10, cudaMemcpyDefault, nullptr, false), cudaSuccess);
  EXPECT(cb[0] == 0x5a && cb[9] == 0x5a);

  // Validation: nothing here may fault the agent.
  char* bogus = reinterpret_cast<char*>(range.base + (60ull << 30));
  EXPECT_ERR(b->Memcpy(bogus, in.data(), 4, cudaMemcpyHostToDevice, nullptr, false),
             cudaErrorInvalidValue);
  EXPECT_ERR(b->Memcpy(out.data(), static_cast<char*>(c) + 8, 16, cudaMemcpyDeviceToHost,
                       nullptr, false),
             cudaErrorInvalidValue);  // runs past the allocation
  EXPECT_ERR(b->cudaMemset(static_cast<char*>(c) + 4, 0, 8), cudaErrorInvalidValue);  // past end
  EXPECT_ERR(b->cudaMemset(bogus, 0, 4), cudaErrorInvalidValue);
  EXPECT_ERR(b->cudaFree(bogus), cudaErrorInvalidValue);
  EXPECT_ERR(b->cudaFree(static_cast<char*>(big) + 16), cudaErrorInvalidValue);  // interior
  EXPECT_ERR(b->Memcpy(big, in.data(), 4, static_cast<cudaMemcpyKind>(7), nullptr, false),
             cudaErrorInvalidMemcpyDirection);
  void* huge = nullptr;
  EXPECT_ERR(b->cudaMalloc(&huge, size_t{1} << 52), cudaErrorMemoryAllocation);

  // Events, queries, host callbacks in stream order.
  cudaEvent_t ev = nullptr;
  EXPECT_ERR(b->cudaEventCreate(&ev), cudaSuccess);
  EXPECT_ERR(b->cudaEventRecord(ev, s), cudaSuccess);
  EXPECT_ERR(b->cudaEventSynchronize(ev), cudaSuccess);
  EXPECT_ERR(b->cudaEventQuery(ev), cudaSuccess);
  std::atomic<int> ran{0};
  EXPECT_ERR(b->EnqueueHostCallback(s, [&ran] { ran.fetch_add(1); }), cudaSuccess);
  EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
  EXPECT(ran.load() == 1);

  // A kernel from a fat binary, launched with a packed argument buffer.
  std::ifstream file(fatbin, std::ios::binary);
  std::stringstream image;
  image << file.rdbuf();
  absl::Status loaded = b->LoadModule(42, image.str());
  EXPECT(loaded.ok());
  if (!loaded.ok()) std::printf("  %s\n", loaded.ToString().c_str());
  absl::StatusOr<KernelInfo> k = b->GetKernel(42, "fill_u32");
  EXPECT(k.ok());
  if (k.ok()) {
    EXPECT(k->params.size() == 4);
    if (k->params.size() == 4) {
      EXPECT(k->params[0].offset == 0 && k->params[0].size == 8);
      EXPECT(k->params[1].offset == 8 && k->params[2].offset == 12 && k->params[3].offset == 16);
    }
    std::vector<char> args(k->args_size, 0);
    const uint32_t count = 1000, value = 7;
    const unsigned char add = 1;
    std::memcpy(args.data() + k->params[0].offset, &f, 8);
    std::memcpy(args.data() + k->params[1].offset, &count, 4);
    std::memcpy(args.data() + k->params[2].offset, &value, 4);
    std::memcpy(args.data() + k->params[3].offset, &add, 1);
    EXPECT_ERR(b->LaunchKernel(*k, dim3(8), dim3(128), 0, s, args.data(), false), cudaSuccess);
    EXPECT_ERR(b->LaunchKernel(*k, dim3(1), dim3(2048), 0, s, args.data(), false),
               cudaErrorInvalidValue);
    EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_ERR(b->LaunchKernel(*k, dim3(8), dim3(128), 0, s, args.data(), true), cudaSuccess);
    EXPECT_ERR(b->cudaStreamSynchronize(s), cudaSuccess);
    std::vector<uint32_t> got(count);
    EXPECT_ERR(b->Memcpy(got.data(), f, count * 4, cudaMemcpyDeviceToHost, s, false),
               cudaSuccess);
    EXPECT(got[0] == 7 && got[999] == 1006);
    cudaFuncAttributes fa{};
    EXPECT_ERR(b->cudaFuncGetAttributes(&fa, k->handle), cudaSuccess);
    EXPECT(fa.maxThreadsPerBlock >= 128 && fa.binaryVersion >= 90);
    int blocks = 0;
    EXPECT_ERR(b->cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, k->handle,
                                                                         128, 0, 0),
               cudaSuccess);
    EXPECT(blocks > 0);
    EXPECT_ERR(b->cudaFuncSetAttribute(k->handle, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       64 << 10),
               cudaSuccess);
    EXPECT_ERR(b->cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(0x1234)),
               cudaErrorInvalidDeviceFunction);
    GraphMemory(b, *k, f, range);
    HeldLaunches(b);
    StagedSnapshot(b);
    StagedAsyncSnapshot(b, /*all_in_spare=*/true);
    HeldUploadHashes(b);
  }

  if (hold_ms > 0) {
    std::printf("HOLDING\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  }
  // Reset: everything goes, the addresses start over.
  EXPECT_ERR(b->Reset(), cudaSuccess);
  void* again = nullptr;
  EXPECT_ERR(b->cudaMalloc(&again, 1 << 20), cudaSuccess);
  EXPECT(reinterpret_cast<uint64_t>(again) == range.base);
  EXPECT_ERR(b->Memcpy(again, in.data(), 4, cudaMemcpyHostToDevice, nullptr, false),
             cudaSuccess);
  EXPECT_ERR(b->cudaStreamDestroy(s), cudaErrorInvalidResourceHandle);  // Reset destroyed it
  std::printf(g_failures == 0 ? "CHILD_OK\n" : "CHILD_FAILED %d\n", g_failures);
  return g_failures == 0 ? 0 : 1;
}

std::string Hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%llx", static_cast<unsigned long long>(v));
  return buf;
}

double Now() {
  return std::chrono::duration<double, std::micro>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Backend-only figures (no shim, no transport), to split the costs that
// bench/shim_bench measures end to end. Informational: nothing is asserted.
int Measure(const std::string& fatbin) {
  BackendOptions options;
  absl::StatusOr<std::unique_ptr<Backend>> made = MakeCudaBackend(options);
  if (!made.ok()) {
    std::printf("CREATE_FAILED %s\n", made.status().ToString().c_str());
    return 3;
  }
  Backend* b = made->get();
  cudaStream_t s = nullptr;
  b->cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  std::ifstream file(fatbin, std::ios::binary);
  std::stringstream image;
  image << file.rdbuf();
  if (!b->LoadModule(1, image.str()).ok()) return 1;
  absl::StatusOr<KernelInfo> k = b->GetKernel(1, "fill_u32");
  if (!k.ok()) return 1;
  void* d = nullptr;
  b->cudaMalloc(&d, 1 << 20);
  std::vector<char> args(k->args_size, 0);
  const uint32_t zero = 0;
  std::memcpy(args.data(), &d, 8);
  std::memcpy(args.data() + 8, &zero, 4);
  for (int i = 0; i < 1000; ++i) b->LaunchKernel(*k, dim3(1), dim3(32), 0, s, args.data(), false);
  b->cudaStreamSynchronize(s);
  const int n = 50000;
  double t0 = Now();
  for (int i = 0; i < n; ++i) b->LaunchKernel(*k, dim3(1), dim3(32), 0, s, args.data(), false);
  double t1 = Now();
  b->cudaStreamSynchronize(s);
  double t2 = Now();
  std::printf("MEASURE backend_launch_call %.3f us\n", (t1 - t0) / n);
  std::printf("MEASURE backend_launch_throughput %.0f launches/s\n", n / ((t2 - t0) * 1e-6));
  uint32_t h = 0;
  std::vector<double> lat;
  for (int i = 0; i < 2000; ++i) {
    double a = Now();
    b->Memcpy(&h, d, 4, cudaMemcpyDeviceToHost, nullptr, false);
    lat.push_back(Now() - a);
  }
  std::sort(lat.begin(), lat.end());
  std::printf("MEASURE backend_d2h_4b %.3f us\n", lat[lat.size() / 2]);
  // 4-byte reads into pageable memory (as the agent reads into a reply slot)
  // and into registered host memory (what registering the reply area would
  // give), on the legacy stream and on a created one.
  auto d2h_4b = [&](const char* what, void* dst, cudaStream_t stream) {
    std::vector<double> t;
    for (int i = 0; i < 2000; ++i) {
      double a = Now();
      b->Memcpy(dst, d, 4, cudaMemcpyDeviceToHost, stream, false);
      t.push_back(Now() - a);
    }
    std::sort(t.begin(), t.end());
    std::printf("MEASURE backend_d2h_4b_%s %.3f us\n", what, t[t.size() / 2]);
  };
  d2h_4b("pageable_stream", &h, s);
  {
    const std::string small_path = "/dev/shm/revenant-measure-4b-" + std::to_string(getpid());
    int sfd = open(small_path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (sfd >= 0 && ftruncate(sfd, 2 << 20) == 0) {
      void* area = mmap(nullptr, 2 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, sfd, 0);
      if (area != MAP_FAILED && b->RegisterSharedHost(area, 2 << 20, 0) == cudaSuccess) {
        d2h_4b("registered", area, nullptr);
        d2h_4b("registered_stream", area, s);
        b->UnregisterSharedHost(area);
      }
      if (area != MAP_FAILED) munmap(area, 2 << 20);
    }
    if (sfd >= 0) close(sfd);
    unlink(small_path.c_str());
  }
  // 256 MiB copies from host memory shared the way the agent shares it (a
  // /dev/shm file mapped MAP_SHARED, registered), and from cudaMallocHost.
  const size_t bytes = 256ull << 20;
  void* dev = nullptr;
  b->cudaMalloc(&dev, bytes);
  auto bw = [&](const char* what, void* host) {
    std::memset(host, 1, bytes);
    b->Memcpy(dev, host, bytes, cudaMemcpyHostToDevice, nullptr, false);
    double best_h2d = 0, best_d2h = 0;
    for (int i = 0; i < 3; ++i) {
      double a = Now();
      cudaError_t e1 = b->Memcpy(dev, host, bytes, cudaMemcpyHostToDevice, nullptr, false);
      double m = Now();
      cudaError_t e2 = b->Memcpy(host, dev, bytes, cudaMemcpyDeviceToHost, nullptr, false);
      double z = Now();
      if (e1 != cudaSuccess || e2 != cudaSuccess) std::printf("copy failed %d %d\n", e1, e2);
      best_h2d = std::max(best_h2d, bytes / (m - a) / 1e3);
      best_d2h = std::max(best_d2h, bytes / (z - m) / 1e3);
    }
    double a = Now();
    cudaError_t e3 = b->Memcpy(dev, host, bytes, cudaMemcpyHostToDevice, s, false);
    double z = Now();
    std::printf("MEASURE %s h2d %.2f GB/s d2h %.2f GB/s (h2d on a created stream %.2f GB/s, %d)\n",
                what, best_h2d, best_d2h, bytes / (z - a) / 1e3, e3);
  };
  void* pinned = nullptr;
  if (::cudaMallocHost(&pinned, bytes) == cudaSuccess) {
    bw("cudaMallocHost", pinned);
    ::cudaFreeHost(pinned);
  }
  const std::string path = "/dev/shm/revenant-measure-" + std::to_string(getpid());
  int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd >= 0 && ftruncate(fd, bytes) == 0) {
    void* shared = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    std::memset(shared, 1, bytes);
    double a = Now();
    cudaError_t e = b->RegisterSharedHost(shared, bytes, 0);
    std::printf("MEASURE register_256mib_shm %.1f us (%d)\n", Now() - a, e);
    if (e == cudaSuccess) {
      bw("shm_file_registered", shared);
      b->UnregisterSharedHost(shared);
    }
    // As the agent sees it: the file is registered while still holes, the
    // pages are written afterwards (raw cudaHostRegister, no pre-faulting).
    const std::string path2 = path + "b";
    int fd2 = open(path2.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd2 >= 0 && ftruncate(fd2, bytes) == 0) {
      void* fresh = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd2, 0);
      if (::cudaHostRegister(fresh, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable) ==
          cudaSuccess) {
        bw("shm_file_registered_as_holes", fresh);
        ::cudaHostUnregister(fresh);
      }
      munmap(fresh, bytes);
    }
    if (fd2 >= 0) close(fd2);
    unlink(path2.c_str());
    void* anon = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    std::memset(anon, 1, bytes);
    if (b->RegisterSharedHost(anon, bytes, 0) == cudaSuccess) {
      bw("anonymous_registered", anon);
      b->UnregisterSharedHost(anon);
    }
    munmap(anon, bytes);
    munmap(shared, bytes);
  }
  if (fd >= 0) close(fd);
  unlink(path.c_str());
  return 0;
}

struct Run {
  std::string out;
  int status = -1;
};

Run RunChild(const std::string& cmd) {
  Run r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) r.out += buf;
  const int st = pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string AddrLines(const std::string& out) {
  std::string res;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("ADDR ", 0) == 0) res += line + "\n";
  }
  return res;
}

int Driver(const std::string& self, const std::string& fatbin) {
  const std::string base = "timeout 120 " + self + " --child --fatbin=" + fatbin;
  Run first = RunChild(base + " --rank=0");
  Run second = RunChild(base + " --rank=0");
  std::printf("--- first agent (rank 0)\n%s--- second agent (rank 0), started after the first "
              "exited\n%s",
              first.out.c_str(), second.out.c_str());
  EXPECT(first.status == 0);
  EXPECT(second.status == 0);
  EXPECT(!AddrLines(first.out).empty());
  EXPECT(AddrLines(first.out) == AddrLines(second.out));
  if (AddrLines(first.out) == AddrLines(second.out) && first.status == 0) {
    std::printf("same device addresses in both agents: yes\n");
  }

  // Ranks 0 and 1 at once: disjoint fixed ranges in concurrent processes;
  // meanwhile a second rank-0 backend must fail clearly.
  std::string out0_path = "/tmp/revenant_gpu_test_r0_" + std::to_string(getpid());
  std::thread t0([&] {
    Run r = RunChild(base + " --rank=0 --hold_ms=4000");
    std::ofstream(out0_path) << r.status << "\n" << r.out;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  Run r1 = RunChild(base + " --rank=1");
  Run dup = RunChild(base + " --rank=2 --block_range");
  t0.join();
  std::ifstream f0(out0_path);
  std::stringstream s0;
  s0 << f0.rdbuf();
  std::remove(out0_path.c_str());
  std::printf("--- rank 0 (held while the others ran)\n%s--- rank 1, concurrently\n%s"
              "--- rank 2 with a mapping of its own inside its range\n%s",
              s0.str().c_str(), r1.out.c_str(), dup.out.c_str());
  EXPECT(s0.str().rfind("0\n", 0) == 0);
  EXPECT(r1.status == 0);
  EXPECT(r1.out.find("ADDR a 0x" + Hex(cuda::kDefaultDeviceBase + cuda::kRankStride)) !=
         std::string::npos);
  EXPECT(dup.status == 3);
  EXPECT(dup.out.find("CREATE_FAILED") != std::string::npos);
  Run spare = RunChild("REVENANT_SNAPSHOT_DEVICE_SPARE_MIB=64 timeout 120 " + self +
                       " --spare_child --fatbin=" + fatbin + " 2>&1");
  std::printf("--- asynchronous snapshots through a device spare (rank 3)\n%s", spare.out.c_str());
  EXPECT(spare.status == 0);
  EXPECT(spare.out.find("a device spare of 64 MiB") != std::string::npos);
  EXPECT(spare.out.find("given back") != std::string::npos);
  Run staged = RunChild("REVENANT_SNAPSHOT_DEVICE_SPARE_MIB=8 timeout 120 " + self +
                        " --staged_spare_child --fatbin=" + fatbin + " 2>&1");
  std::printf("--- a staged asynchronous snapshot, its last 8 MiB through the device spare "
              "(rank 4)\n%s",
              staged.out.c_str());
  EXPECT(staged.status == 0);
  EXPECT(staged.out.find("a device spare of 8 MiB") != std::string::npos);
  EXPECT(staged.out.find("loaded back equal") != std::string::npos);
  // By default (the knob unset, whatever the runner's environment says) the
  // kernel takes the copies it may; with the knob at 0 every copy is a
  // cudaMemcpyAsync, the bytes checked the same way.
  struct KnobCase {
    const char* env;
    const char* expected;
  };
  for (const KnobCase& k :
       {KnobCase{"env -u REVENANT_NCCL_ONE_RANK_KERNEL ",
                 "one-rank collectives issued as copies: 7, 3 of them by the agent's kernel"},
        KnobCase{"REVENANT_NCCL_ONE_RANK_KERNEL=0 ",
                 "one-rank collectives issued as copies: 7, 0 of them by the agent's kernel"}}) {
    Run one_rank = RunChild(std::string(k.env) + "timeout 120 " + self +
                            " --one_rank_copy_child --fatbin=" + fatbin + " 2>&1");
    std::printf("--- a one-rank communicator's all-reduces as copies (rank 5), %s\n%s", k.env,
                one_rank.out.c_str());
    EXPECT(one_rank.status == 0);
    EXPECT(one_rank.out.find(k.expected) != std::string::npos);
  }
  if (g_failures == 0) std::printf("PASS cuda_backend_gpu_test\n");
  return g_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace agent
}  // namespace revenant

int main(int argc, char** argv) {
  using revenant::agent::Flag;
  const std::string fatbin = Flag(argc, argv, "fatbin");
  if (fatbin.empty()) {
    std::fprintf(stderr, "usage: %s --fatbin=gpu_test_kernels.fatbin\n", argv[0]);
    return 2;
  }
  if (!Flag(argc, argv, "measure").empty()) return revenant::agent::Measure(fatbin);
  if (!Flag(argc, argv, "spare_child").empty()) return revenant::agent::SpareChild();
  if (!Flag(argc, argv, "one_rank_copy_child").empty()) {
    return revenant::agent::OneRankCopyChild();
  }
  if (!Flag(argc, argv, "staged_spare_child").empty()) return revenant::agent::StagedSpareChild();
  if (!Flag(argc, argv, "child").empty()) {
    return revenant::agent::Child(std::atoi(Flag(argc, argv, "rank", "0").c_str()), fatbin,
                                  std::atoi(Flag(argc, argv, "hold_ms", "0").c_str()),
                                  !Flag(argc, argv, "block_range").empty());
  }
  return revenant::agent::Driver(argv[0], fatbin);
}
