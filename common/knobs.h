// The knobs: every REVENANT_* environment variable that the shim, the agent
// and the launcher read, in one table (name, type, default, kind, doc).
//
//   if (knobs::Bool(knobs::Id::kDiagnostics).value_or(false)) ...
//   const absl::Duration t =
//       absl::Seconds(knobs::Double(knobs::Id::kCollectiveTimeoutS, 0, 1e6).value_or(60));
//   std::cout << knobs::Help(knobs::Kind::kProduct);
//
// Only this module reads REVENANT_* variables; the rest of the code asks it,
// once, and keeps the value in its options (a variable changed later in the
// process is not seen by code that already read it). Variables of the
// launchers around us (LOCAL_RANK, RANK, NCCL_*) are not knobs: they are read
// where they are used.
//
// Kinds:
//   - kProduct: what a user tunes; `revenant-agent --help`, `revenant-run
//     --help` and docs/knobs.md list them.
//   - kLauncher: set by revenant-run for the processes it starts (a user sets
//     them only when starting agents and applications by hand).
//   - kMeasurement: for benchmarks and profiling; they may make the product
//     slower or unable to recover, and say so in the log when set.
//   - kTest: for tests only.
// The measurement and test kinds are the testing knobs: the product agent
// (revenant-agent) ignores them (IgnoreTestingKnobs), the testing variant
// (revenant-agent-testing) reads them, and revenant-run starts the testing
// variant when one is set (docs/design.md, "The testing variant").
//
// A value that does not parse, or lies outside the range a caller gives, is
// ignored with one warning naming the variable and what it accepts; the
// caller's default then applies. An empty value is the same as unset.
//
// Adding a knob: one line in REVENANT_KNOB_TABLE below, then
// `bash scripts/update_knobs_doc.sh` (//common:knobs_doc_test checks that
// docs/knobs.md is current).
//
// Thread safety: every function may be called from any thread.
#ifndef REVENANT_COMMON_KNOBS_H_
#define REVENANT_COMMON_KNOBS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/types/span.h"

namespace revenant {
namespace knobs {

enum class Kind { kProduct, kLauncher, kMeasurement, kTest };
enum class Type { kBool, kInt, kDouble, kString };

// X(id, NAME, type, kind, default (as documented), doc)
#define REVENANT_KNOB_TABLE(X)                                                                   \
  /* Product. */                                                                                 \
  X(kLogLevel, "REVENANT_LOG_LEVEL", kString, kProduct, "info",                                  \
    "Least severe log line printed: error, warning, info or debug.")                             \
  X(kDiagnostics, "REVENANT_DIAGNOSTICS", kBool, kProduct, "0",                                  \
    "1: agents log every submission (API name, size, sync or async); the shim logs how it "     \
    "answered the application's first load of the driver (libcuda.so.1).")                      \
  X(kTimeline, "REVENANT_TIMELINE", kBool, kProduct, "0",                                        \
    "1: the agent prints at exit, with CLOCK_MONOTONIC start times, each piece of its own work "  \
    "that can hold the application up (snapshots, journal boundaries and compactions, files "    \
    "made, registered or unmapped, the journal helper's page allocations and frees, log chunks "  \
    "made over 0.5 ms, requests the executor spent over 1 ms on), to line up with slow steps.")   \
  X(kCollectiveTimeoutS, "REVENANT_COLLECTIVE_TIMEOUT_S", kDouble, kProduct, "60",               \
    "Seconds a collective (NCCL or Gloo) may wait for its peers before it fails and its "       \
    "communicator is aborted; also the bound of a host-backend stream wait on a value "         \
    "(cuStreamWaitValue32) and of the wait for a kept collective result's copy to the host.")   \
  X(kCollectivePipeline, "REVENANT_COLLECTIVE_PIPELINE", kInt, kProduct, "8",                   \
    "Real NCCL with several ranks and recovery: how many collectives of a communicator may be " \
    "in flight at once (the deferred fence: the agent waits for them before any other "       \
    "request, at the latest); 1: each collective is waited for at its call.")                   \
  X(kCollectiveOverlap, "REVENANT_COLLECTIVE_OVERLAP", kBool, kProduct, "1",                    \
    "With the deferred fence: kernels, copies and cuBLAS calls of streams not tied to a "       \
    "collective in flight run beside it (DDP's backward beside its bucket all-reduces); 0: "   \
    "they wait for the collectives in flight first.")                                           \
  X(kSnapshotDeviceSpareMib, "REVENANT_SNAPSHOT_DEVICE_SPARE_MIB", kInt, kProduct,              \
    "384 (at most 1 % of the device's memory)",                                                  \
    "cuda backend, asynchronous snapshots: device memory (MiB, at most the live bytes of the "  \
    "first such snapshot) into which the snapshot copies first, so that the application's "     \
    "streams wait for device-to-device copies instead of the copies to the host, which drain "   \
    "from it behind; given back when an allocation of the application would fail; 0: none.")    \
  X(kSnapshotStagingMib, "REVENANT_SNAPSHOT_STAGING_MIB", kInt, kProduct, "32",                 \
    "Staged snapshots (into files not registered): each of the two pinned host buffers (MiB, "  \
    "at most the snapshot's bytes) that the device's copies go through to the file; larger: "  \
    "the copies that do not fit the device spare wait less for the CPU's drain, for that much " \
    "more pinned host memory.")                                                                 \
  X(kHashPieces, "REVENANT_HASH_PIECES", kBool, kProduct, "1",                                  \
    "cuda backend, held uploads of 64 MiB and more: the device hashes the destination in "       \
    "pieces, each behind its part of the copy, beside the rest; 0: after the whole copy.")       \
  X(kResultStagingMib, "REVENANT_RESULT_STAGING_MIB", kInt, kProduct, "256",                    \
    "Real NCCL with several ranks and recovery: device memory (MiB) through which a "           \
    "collective's result is copied to the host memory kept for a replacement (a device copy on " \
    "the collective's stream, the copy to the host on a stream of the agent's, so the next "   \
    "collective need not wait for it); 0: the copy to the host runs on the collective's stream.") \
  X(kResultPinRegister, "REVENANT_RESULT_PIN_REGISTER", kBool, kProduct, "1",                   \
    "Real NCCL with several ranks and recovery: host memory for kept results of 1 MiB and more "  \
    "is anonymous memory whose pages several threads fault in before it is registered for the " \
    "device (the driver is held ~10 ms per 256 MiB); 0: cudaMallocHost, which faults and pins "  \
    "them while it holds the driver.")                                                          \
  X(kRecoveryTimeoutS, "REVENANT_RECOVERY_TIMEOUT_S", kDouble, kProduct, "0 (set by revenant-run)", \
    "Seconds an application waits for a replacement agent after its agent died; 0: no "         \
    "recovery, calls fail at once.")                                                             \
  X(kCallTimeoutS, "REVENANT_CALL_TIMEOUT_S", kDouble, kProduct, "300",                          \
    "Seconds an application waits for the reply to one call before it fails.")                 \
  X(kConnectTimeoutS, "REVENANT_CONNECT_TIMEOUT_S", kDouble, kProduct, "30",                     \
    "Seconds an application waits to connect to its agent at start.")                           \
  X(kNcclWarmup, "REVENANT_NCCL_WARMUP", kBool, kProduct, "1",                                   \
    "0: no warm-up all-reduce after a real NCCL communicator is created (its connection setup " \
    "is then charged to the first collective).")                                                 \
  X(kNcclOneRankCopy, "REVENANT_NCCL_ONE_RANK_COPY", kBool, kProduct, "1",                      \
    "0: a one-rank communicator's all-reduce, reduce, broadcast, all-gather and reduce-scatter " \
    "go to NCCL (else the agent issues the copy they amount to).")                               \
  X(kNcclOneRankKernel, "REVENANT_NCCL_ONE_RANK_KERNEL", kBool, kProduct, "1",                   \
    "cuda backend, 1: a one-rank collective's copy of up to 4 MiB between 16-byte aligned "       \
    "device allocations is the agent's copy kernel (a cheaper launch than a device-to-device "    \
    "cudaMemcpyAsync; loaded when the agent starts); 0: always cudaMemcpyAsync.")                \
  X(kDaemonRoot, "REVENANT_DAEMON_ROOT", kString, kProduct, "/dev/shm",                          \
    "Where standalone agents (revenant-agent --gpu=I) and the applications looking for them "   \
    "meet: <root>/revenant-daemon-<uid>/gpu<I>.")                                                \
  X(kJournalWarnKib, "REVENANT_JOURNAL_WARN_KIB", kInt, kProduct, "1048576 (1 GiB)",              \
    "The agent warns when a rank's journal grows past this many KiB, and again at each "        \
    "doubling (a job that never reaches a minibatch boundary keeps every call).")                \
  X(kJournalBoundaryKib, "REVENANT_JOURNAL_BOUNDARY_KIB", kInt, kProduct, "262144 (256 MiB)",    \
    "A one-rank job with boundary snapshots whose journal grew by this many KiB without a "     \
    "minibatch boundary (none detected or marked; payloads released behind its snapshots do "  \
    "not count): the agent places one itself, with its snapshot, so that the journal stays "    \
    "bounded; where the log's bound was raised by the state (--snapshot_log_state_ratio), "      \
    "raised by the same factor and an eighth more, so that the bound's asynchronous "           \
    "snapshots come first; 0: never.")                                                           \
  X(kJournalMaxKib, "REVENANT_JOURNAL_MAX_KIB", kInt, kProduct, "no limit",                      \
    "A rank's journal may not grow past this many KiB: there, as on a full disk, the agent "    \
    "stops taking requests and the application's calls fail with the reason.")                  \
  X(kCaptureMaxMib, "REVENANT_CAPTURE_MAX_MIB", kInt, kProduct, "4096",                         \
    "Large uploads of a training step are journaled by the device into capture files of the "   \
    "journal directory (tmpfs): at most this many MiB of them per rank; 0 journals every "      \
    "upload's bytes with the CPU (slower).")                                                     \
  X(kShimAnswers, "REVENANT_SHIM_ANSWERS", kBool, kProduct, "1",                                \
    "cuBLASLt and cuDNN backend descriptors of known types are created without waiting for "    \
    "the agent (the shim assigns their handles); a cuDNN descriptor's destroy, a variant "      \
    "pack's per-step attributes and cudnnSetStream go without waiting; a cuBLASLt heuristic "   \
    "asked again for "                                                                           \
    "descriptors of the same contents, and a value read again from a finalized cuDNN "          \
    "descriptor, are answered by the shim from the agent's earlier answer; a cuDNN variant "   \
    "pack's Finalize and Execute go without waiting once one of the same form succeeded; "     \
    "cublasGetMathMode is answered from the mode the shim knows; events of plain flags are "   \
    "created without waiting (handles the shim assigns) and ncclCommGetAsyncError of a "       \
    "healthy communicator is answered by the shim once the agent answered ncclSuccess and "    \
    "kept no NCCL error since (after 100 ms the call is also sent on without waiting); "        \
    "cudaThreadExchangeStreamCaptureMode "                                                      \
    "of a valid mode is answered from the thread's mode and sent without waiting; 0: each "   \
    "waits for the agent.")                                                                    \
  X(kHostKernels, "REVENANT_HOST_KERNELS", kString, kProduct, "",                                \
    "Host backend: colon-separated host kernel libraries (as --host_kernels).")                 \
  X(kHostKernelStackKb, "REVENANT_HOST_KERNEL_STACK_KB", kInt, kProduct, "64",                   \
    "Host backend: stack of each simulated GPU thread, in KiB (at least 16).")                  \
  X(kAgentBin, "REVENANT_AGENT_BIN", kString, kProduct, "next to revenant-run",                 \
    "The agent binary revenant-run starts for every job (as --agent); unset: revenant-agent, "  \
    "or its testing variant revenant-agent-testing for a job with --chaos or a measurement or " \
    "test knob set.")                                                                            \
  X(kShim, "REVENANT_SHIM", kString, kProduct, "next to revenant-run",                          \
    "The librevenant_shim.so revenant-run preloads (as --shim).")                               \
  /* Launcher. */                                                                                \
  X(kAgentSocket, "REVENANT_AGENT_SOCKET", kString, kLauncher, "",                               \
    "The agent's control socket an application connects to.")                                   \
  X(kJobDir, "REVENANT_JOB_DIR", kString, kLauncher, "",                                         \
    "The job's directory (journals, epochs, rendezvous).")                                       \
  X(kRank, "REVENANT_RANK", kInt, kLauncher, "",                                                 \
    "The rank an application process serves.")                                                   \
  X(kRdzvEndpoint, "REVENANT_RDZV_ENDPOINT", kString, kLauncher, "",                             \
    "A job spanning nodes: the etcd (HOST:PORT) where the agents' collectives rendezvous "      \
    "instead of the job directory (docs/multinode.md).")                                        \
  X(kRdzvPrefix, "REVENANT_RDZV_PREFIX", kString, kLauncher, "",                                 \
    "The etcd key prefix of the job's collective rendezvous (/revenant/<rdzv id>/round<r>/gloo/).")\
  X(kCollectiveAddr, "REVENANT_COLLECTIVE_ADDR", kString, kLauncher, "127.0.0.1",                \
    "The address an agent's Gloo collectives listen on for their peers (revenant-run: the "     \
    "node's --node_addr in a job spanning nodes).")                                              \
  /* Measurement. */                                                                             \
  X(kSpinUs, "REVENANT_SPIN_US", kInt, kMeasurement,                                             \
    "20000 with 8 or more CPUs per local rank (LOCAL_WORLD_SIZE), else 200 with 8 or more CPUs, " \
    "else 50",                                                                                   \
    "Microseconds a waiter spins before it sleeps (0-10000000).")                                \
  X(kWaitStats, "REVENANT_WAIT_STATS", kBool, kMeasurement, "0",                                 \
    "1: each process prints its waits (count, slept, time) at exit.")                            \
  X(kCallStats, "REVENANT_CALL_STATS", kBool, kMeasurement, "0",                                 \
    "1: the shim prints, at exit, each API's calls (count, synchronous or not, time the "        \
    "application spent in them); the agent, each API's requests and its time executing them.")  \
  X(kProfileHz, "REVENANT_PROFILE_HZ", kInt, kMeasurement, "0 (off)",                             \
    "N > 0: the agent samples its executor thread N times a second (wall clock) and prints, at "  \
    "exit, where the time went per API (agent/profiler.h).")                                     \
  X(kJournalTiming, "REVENANT_JOURNAL_TIMING", kBool, kMeasurement, "0",                         \
    "1: the agent prints the journal's time per API at exit.")                                   \
  X(kJournalThreadCpu, "REVENANT_JOURNAL_THREAD_CPU", kInt, kMeasurement, "unpinned",           \
    "Places the journal thread on this CPU.")                                                    \
  X(kJournalThreadDry, "REVENANT_JOURNAL_THREAD_DRY", kString, kMeasurement, "",                 \
    "1: the journal thread writes nothing; payload: its records without the captured input "    \
    "bytes. Recovery fails with either.")                                                        \
  X(kJournalBoundaryHandoff, "REVENANT_JOURNAL_BOUNDARY_HANDOFF", kBool, kMeasurement, "1",      \
    "0: the executor places every minibatch boundary itself (write-behind).")                   \
  X(kJournalIdleHandoff, "REVENANT_JOURNAL_IDLE_HANDOFF", kBool, kMeasurement, "1",              \
    "0: write-behind, an executor that runs out of requests journals what the thread has not "  \
    "yet itself (else it leaves that to the thread and runs the next request as it comes).")    \
  X(kJournalSkipHandback, "REVENANT_JOURNAL_SKIP_HANDBACK", kBool, kMeasurement, "1",            \
    "0: write-behind with snapshots, the executor journals every detected boundary itself "     \
    "(else the thread journals a step that takes no snapshot, as any other request).")          \
  X(kJournalLogChunkBoundary, "REVENANT_JOURNAL_LOG_CHUNK_BOUNDARY", kInt, kMeasurement, "100",  \
    "One rank with the default snapshots: a journal boundary keeps the minibatch log in its "    \
    "first chunk once the time since the last one is at least N times what that one took; 0: "  \
    "none (only the time and --snapshot_max_log_mib bound the log).")                            \
  X(kJournalMinibatchChunkKib, "REVENANT_JOURNAL_MINIBATCH_CHUNK_KIB", kInt, kMeasurement,       \
    "16384", "The minibatch log's first chunk, in KiB (whole 32 KiB blocks, at most 64 MiB).")    \
  X(kJournalPayloadAheadMib, "REVENANT_JOURNAL_PAYLOAD_AHEAD_MIB", kInt, kMeasurement, "16",     \
    "A minibatch payload file's pages are allocated this many MiB ahead of its writes, on a "   \
    "helper thread; 0: the writes allocate them.")                                               \
  X(kCrc32c, "REVENANT_CRC32C", kString, kMeasurement, "sse4.2 where available",                 \
    "isal-auto: the journal's checksums through ISA-L's dispatcher (to compare).")               \
  X(kProbeOut, "REVENANT_PROBE_OUT", kString, kMeasurement, "",                                  \
    "librevenant_probe.so (a diagnostic preload for native runs): also append the entry points " \
    "it saw to this file.")                                                                      \
  /* Test. */                                                                                    \
  X(kJournalThreadDelayUs, "REVENANT_JOURNAL_THREAD_DELAY_US", kInt, kTest, "0",                 \
    "Slows the journal thread down by this many microseconds per request, so that requests "    \
    "run ahead of their journal.")                                                               \
  X(kReplayEndDelayMs, "REVENANT_REPLAY_END_DELAY_MS", kInt, kTest, "0",                        \
    "A replacement waits this many ms after dispatching its replay before ending it, so that "  \
    "replayed host callbacks run while the replay is still going.")                              \
  X(kInlineImageKib, "REVENANT_INLINE_IMAGE_KIB", kInt, kTest, "1024",                           \
    "Module images larger than this many KiB reach the agent as a reference to the file the "   \
    "application mapped them from, smaller ones inside the request.")                            \
  X(kNextFileDelayMs, "REVENANT_NEXT_FILE_DELAY_MS", kInt, kTest, "0",                           \
    "The snapshot store's thread waits this many ms before making each next snapshot file "      \
    "ahead, so that snapshots come due while their file is still being made.")

enum class Id {
#define REVENANT_KNOB_ID(id, name, type, kind, def, doc) id,
  REVENANT_KNOB_TABLE(REVENANT_KNOB_ID)
#undef REVENANT_KNOB_ID
};

struct Knob {
  Id id;
  const char* name;
  Type type;
  Kind kind;
  const char* default_text;  // as documented: the code's default applies
  const char* doc;
};

// Every knob, in table order.
absl::Span<const Knob> All();
const Knob& Info(Id id);

// The raw value; nullopt when unset or empty.
std::optional<std::string> String(Id id);
// 1/true/yes/on or 0/false/no/off (any case); anything else: a warning, nullopt.
std::optional<bool> Bool(Id id);
// A decimal integer in [lo, hi]; otherwise a warning, nullopt.
std::optional<int64_t> Int(Id id, int64_t lo, int64_t hi);
// A number in [lo, hi]; otherwise a warning, nullopt.
std::optional<double> Double(Id id, double lo, double hi);

// Measurement and test knobs: what only the testing variant of the agent
// reads.
bool IsTestingKind(Kind kind);
// The testing knobs set (non-empty) in the environment, by name.
std::vector<std::string> TestingKnobsSet();
// For the product agent, before anything reads a knob: from here on every
// testing knob reads as unset in this process; each one set in the
// environment gets one warning saying that `testing_variant` reads it.
void IgnoreTestingKnobs(const std::string& testing_variant);

// The knobs of `kind`, one paragraph each ("NAME (default D): doc"), for
// --help.
std::string Help(Kind kind);
// docs/knobs.md.
std::string Markdown();

}  // namespace knobs
}  // namespace revenant

#endif  // REVENANT_COMMON_KNOBS_H_
