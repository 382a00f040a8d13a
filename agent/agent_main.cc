// revenant-agent: executes one rank's CUDA/NCCL calls on its device.
//
//   revenant-agent --socket=/dev/shm/revenant-JOB/rank0/agent.sock \
//                  --job_dir=/dev/shm/revenant-JOB/rank0 --rank=0 --backend=host \
//                  --host_kernels=/path/libapp_host_kernels.so
//
// Listens on a Unix socket (mode 0600) and serves one application process
// at a time: each connection's peer uid must be ours (SO_PEERCRED), its
// channel file must live in the job directory. While a process is served, a
// second one claiming the rank is refused at once (Doorkeeper); a process
// that sends a malformed request is dropped with the reason, and one that
// dies mid-request ends its session; either way the agent then serves the
// next process. revenant-run starts one agent per rank; jobs
// started by other launchers start agents themselves (README.md, "Jobs
// started by another launcher").
//
// Compiled twice (agent/BUILD): as revenant-agent, the product, and with
// REVENANT_TESTING as revenant-agent-testing, which adds the named crash
// points (--chaos_*) and reads the measurement and test knobs
// (docs/design.md, "The testing variant").
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "agent/backend.h"
#include "agent/backends/cuda/cuda_backend.h"
#include "agent/backends/host/host_collectives.h"
#include "agent/session.h"
#include "common/agent_layout.h"
#include "common/daemon_paths.h"
#include "common/events.h"
#include "common/upload_hold.h"
#include "common/knobs.h"
#include "common/kv.h"
#include "common/logging.h"
#include "transport/control_socket.h"
#include "transport/shm_channel.h"

ABSL_FLAG(std::string, socket, "", "Unix socket to listen on (required)");
ABSL_FLAG(std::string, job_dir, "", "this rank's job directory (required)");
ABSL_FLAG(int, rank, 0, "the rank this agent serves");
ABSL_FLAG(std::string, backend, "host", "host (CPU device) or cuda");
ABSL_FLAG(int, device, -1, "GPU ordinal for the cuda backend (-1: the rank)");
ABSL_FLAG(bool, gpu_shared, false,
          "cuda backend: other ranks of the job use this GPU too (revenant-run --gpus with more "
          "ranks than GPUs): real NCCL gets an NCCL_HOSTID per rank unless one is set");
ABSL_FLAG(std::string, collectives, "nccl",
          "engine of the NCCL rows on the cuda backend: nccl or gloo (staged via host memory)");
ABSL_FLAG(std::string, host_kernels, "",
          "colon-separated host kernel libraries (default: $REVENANT_HOST_KERNELS)");
ABSL_FLAG(bool, die_with_parent, false, "exit when the launching process exits");
ABSL_FLAG(std::string, job, "local", "job id (recorded in the journal)");
ABSL_FLAG(int, gpu, -1,
          "standalone mode for jobs started by other launchers: serve GPU I at "
          "/dev/shm/revenant-daemon-<uid>/gpuI/agent.sock (rank and device I), where the shim "
          "finds it by LOCAL_RANK");
ABSL_FLAG(double, recovery_timeout_s, 0,
          "when a peer of a collective dies, wait this long for the job's recovery "
          "(revenant-run declares epochs in <job>/epoch); 0: fail the collective");
ABSL_FLAG(bool, journal, true, "journal every journaled call (needed for recovery)");
ABSL_FLAG(uint64_t, validate_every, 0,
          "journal validator: every K-th minibatch is replayed from its boundary and its device "
          "state compared with the real run's (docs/recovery.md, \"Validator\"); 0: off");
ABSL_FLAG(bool, spare, false,
          "a spare agent (revenant-run --spares): start the backend (on the cuda backend the "
          "CUDA context) on a range of its own (--rank names a rank outside the job), then wait "
          "on stdin for an assignment (socket, job_dir, rank, device) and serve that rank");
ABSL_FLAG(double, spare_wait_s, 3600, "how long a spare waits for an assignment before it exits");
ABSL_FLAG(std::string, snapshots, "auto",
          "boundary snapshots of the device state, so that a rank without a replica can be "
          "recovered past its first minibatch boundary (docs/recovery.md): on, off, or auto "
          "(on when --world_size is 1)");
ABSL_FLAG(std::string, snapshot_every, "auto",
          "with boundary snapshots: which step boundaries take one — N: every N-th; auto: the "
          "first, then once the time since the last is 49 times what it took (at most 2 % of "
          "the job) or the minibatch log passed --snapshot_max_log_mib; the steps in between "
          "are replayed from the last snapshot after a failure");
ABSL_FLAG(uint64_t, snapshot_min_interval_ms, 1000,
          "with --snapshot_every=auto: a timed snapshot comes at least this many milliseconds "
          "after the last one ended (a snapshot of little state takes well under a millisecond, "
          "and the factor alone would take one every few milliseconds, each with fixed costs "
          "on the critical path); the replay after a failure spans up to this much of the job");
ABSL_FLAG(uint64_t, snapshot_max_log_mib, 256,
          "with --snapshot_every=auto: a journal boundary with a synchronous snapshot at the "
          "next step once the minibatch log holds this many MiB a replay may still read (its "
          "records and the payloads not released behind finished snapshots) and the setup log grew "
          "by in the journal's minibatch; from three quarters of it a one-rank job's next step "
          "takes an asynchronous snapshot, which releases them (once they grew by an eighth of it "
          "past what the last one left)");
ABSL_FLAG(double, snapshot_log_state_ratio, 1.0,
          "with --snapshot_every=auto, one rank: the bound of --snapshot_max_log_mib is at least "
          "this many times the last snapshot's bytes (a large state's snapshots then come no "
          "more often than its bytes are journaled again), at most 4 times "
          "--snapshot_max_log_mib; 0: --snapshot_max_log_mib alone");
ABSL_FLAG(std::string, journal_thread, "auto",
          "a second thread journals the plain asynchronous requests (docs/design.md, \"The "
          "journal thread\"): behind (write-behind: the executor runs them at once), ahead "
          "(the executor waits until they are journaled), off (the executor journals inline), "
          "or auto (behind with at least 4 CPUs and 3 per rank of --world_size, else off)");
ABSL_FLAG(bool, upload_hold, true,
          "hold large pinned uploads instead of capturing them: the application's shim keeps "
          "an upload's source write-protected (userfaultfd) and copies its bytes into the "
          "journal only when the application or the device is about to change them, so the "
          "upload runs alone on the link, and the device hashes what it received so that a "
          "source changed behind the agent's back is found (docs/recovery.md, \"Held "
          "uploads\"); needs a userfaultfd that takes kernel-mode faults in the application's "
          "process (else uploads are captured, and the agent says why); false: capture every "
          "upload by the device");
ABSL_FLAG(bool, snapshot_keep_spare, false,
          "with boundary snapshots: keep the snapshot given up at a boundary as the next one's "
          "mapped, registered file (no mapping or registration per snapshot; the files hold 2x "
          "the live bytes); false (the default): 1x between snapshots, a new file per snapshot "
          "(with --snapshot_spare_ahead made ahead once the snapshot comes near; else made "
          "without its pages, which the copying threads fault in)");
ABSL_FLAG(bool, snapshot_spare_ahead, true,
          "make snapshot files ahead on a thread of their own, their pages resident: the first "
          "one while the allocations grow; with --snapshot_keep_spare, after a snapshot that "
          "left no spare, one of its size (registering it holds the driver against the "
          "executor's CUDA calls, ~22 ms per 554 MiB on the H200); without, the next "
          "snapshot's file once that snapshot comes near (2x the live bytes from then until it "
          "finished; not registered: the snapshot copies through the staging buffers)");
ABSL_FLAG(bool, snapshot_staged, true,
          "with boundary snapshots: a snapshot into a file not registered yet (the first "
          "snapshot's, a new one) leaves it unregistered and copies through two 32 MiB "
          "registered staging buffers, threads copying them into the file and checksumming (an "
          "asynchronous snapshot's device turns wait for the threads' drain) "
          "(registering the file holds the CUDA driver, ~22-52 ms per 554 MiB on the H200); "
          "false: the file is registered and the device copies straight into it");
ABSL_FLAG(bool, snapshot_register_behind, true,
          "with --snapshot_spare_ahead and --snapshot_staged: the first snapshot's file, left "
          "unregistered by its staged copies, is registered on the store's thread right after "
          "the spare made ahead (the driver held once more, during the job's first steps), so "
          "that the asynchronous snapshots that take it copy straight into it (~10 ms per 554 "
          "MiB on the H200) instead of through the staging buffers (~20 ms); false: those "
          "stage");
ABSL_FLAG(bool, snapshot_async, true,
          "with boundary snapshots in a one-rank job: step boundaries inside the journal's "
          "minibatch take asynchronous snapshots (device copies on a stream of their own, "
          "finished behind the executor); false: every snapshot synchronous");
ABSL_FLAG(int, launch_graph_max, 64,
          "cuda backend: while the executor has further requests in hand, it holds back "
          "plain kernel launches of one stream and issues up to this many as one CUDA graph "
          "(a fraction of a launch's CPU cost per kernel; nothing is held while it waits for "
          "the application); below 2: every launch on its own");
ABSL_FLAG(int, world_size, 0, "ranks in the job (0: unknown); --snapshots=auto uses it");
ABSL_FLAG(std::string, minibatch, "auto",
          "minibatch boundaries: auto (detected from the call stream) or manual "
          "(revenantMarkStep() only)");

#if REVENANT_TESTING
// The testing variant only (docs/design.md, "The testing variant"): the plan
// of the named crash points, given by revenant-run --chaos.
ABSL_FLAG(uint64_t, chaos_after_calls, 0, "fault injection: SIGKILL at this request (1-based)");
ABSL_FLAG(uint64_t, chaos_minibatch, 0, "fault injection: SIGKILL in this minibatch...");
ABSL_FLAG(uint64_t, chaos_calls_into_minibatch, 1, "...at this request of it");
ABSL_FLAG(bool, chaos_corrupt_snapshot, false,
          "fault injection: with a snapshot --chaos_point, damage that boundary's snapshot first");
ABSL_FLAG(bool, chaos_in_recovery, false, "fault injection: SIGKILL when recovering as a survivor");
ABSL_FLAG(std::string, chaos_point, "after_append",
          "where the chaos kill happens: before_append, after_append, after_execute, after_reply; "
          "at the "
          "boundary of --chaos_minibatch with snapshots on: snapshot_partial, after_snapshot, "
          "after_boundary; at the --chaos_minibatch-th asynchronous snapshot: snapshot_inflight "
          "(copies queued), snapshot_finish (file checksummed, not renamed)");
#endif

namespace revenant {
namespace agent {
namespace {

// This binary, and the variant that has what the product leaves out.
constexpr char kTestingBinary[] = "revenant-agent-testing";
#if REVENANT_TESTING
constexpr char kBinary[] = "revenant-agent-testing";
#else
constexpr char kBinary[] = "revenant-agent";
#endif

std::atomic<bool> g_stop{false};
std::atomic<bool> g_recovery_failed{false};

void OnSignal(int) { g_stop.store(true); }

// A spare's assignment: key=value lines on stdin ending with a line "end".
// Waits in slices of 500 ms (for stop signals), at most `wait`.
absl::StatusOr<std::map<std::string, std::string>> WaitForAssignment(absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  std::string text;
  while (!g_stop.load()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(
          absl::StrCat("no assignment within ", absl::FormatDuration(wait)));
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(500, absl::ToInt64Milliseconds(left) + 1));
    if (poll(&p, 1, ms) <= 0) continue;
    char buf[4096];
    const ssize_t k = read(STDIN_FILENO, buf, sizeof(buf));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return absl::CancelledError("the launcher closed the assignment channel");
    text.append(buf, static_cast<size_t>(k));
    if (text.rfind("end\n", 0) == 0 || text.find("\nend\n") != std::string::npos) {
      return ParseKv(text);
    }
  }
  return absl::CancelledError("stopped");
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name,
                                                     const BackendOptions& options) {
  // The host backend with NCCL (host_collectives.h).
  if (name == "host") return host::MakeHostCollectiveBackend(options);
  if (name == "cuda") return MakeCudaBackend(options);
  return absl::InvalidArgumentError(absl::StrCat(
      "backend '", name, "' is not available in this build (choose: host, cuda)"));
}

// An accepted connection whose peer passed the uid check and sent a hello.
struct Admitted {
  int fd = -1;
  std::map<std::string, std::string> hello;
};

// The peer's uid (SO_PEERCRED, before anything of it is read), then its
// hello within `hello_wait`. On failure the connection is answered (a uid
// refusal), logged and closed, and nullopt returned.
std::optional<Admitted> Admit(int fd, absl::Duration hello_wait) {
  if (absl::Status s = transport::CheckPeerUid(fd); !s.ok()) {
    REVENANT_LOG(WARNING, "agent") << "refused a connection: " << s;
    (void)transport::SendFrame(fd, FormatKv({{"op", "refused"}, {"error", s.ToString()}}));
    close(fd);
    return std::nullopt;
  }
  absl::StatusOr<std::string> hello = transport::RecvFrame(fd, absl::Now() + hello_wait);
  if (!hello.ok()) {
    REVENANT_LOG(WARNING, "agent") << "no hello from the application: " << hello.status();
    close(fd);
    return std::nullopt;
  }
  return Admitted{fd, ParseKv(*hello)};
}

// While a session runs, answers whoever else connects to this rank's socket:
// one application process per rank, so a second process claiming the rank
// is refused at once with the pid that holds it, rather than left waiting in
// the listen queue. A connection that arrives once the served application is
// gone or dropped (the session is ending) is kept for the main loop to serve
// next.
// Polls the listening socket in slices of 200 ms; the destructor stops and
// joins it. `*session` must outlive it.
class Doorkeeper {
 public:
  Doorkeeper(int listen_fd, int rank, const Session* session, uint32_t served_pid)
      : listen_fd_(listen_fd), rank_(rank), session_(session), served_pid_(served_pid),
        thread_([this] { Run(); }) {}
  ~Doorkeeper() {
    Stop();
    if (next_.has_value()) close(next_->fd);
  }
  // Stops and joins the thread (once the session ended); idempotent.
  void Stop() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
  }
  // After Stop: the connection to serve next, if one came while the session
  // ended.
  std::optional<Admitted> TakeNext() {
    Stop();
    absl::MutexLock lock(&mu_);
    std::optional<Admitted> next = std::move(next_);
    next_.reset();
    return next;
  }

 private:
  void Run() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      absl::StatusOr<int> fd = transport::AcceptWithDeadline(listen_fd_, absl::Now());
      if (!fd.ok()) continue;
      std::optional<Admitted> a = Admit(*fd, absl::Seconds(2));
      if (!a.has_value()) continue;
      // An application that is exiting closes its socket a moment before
      // the session notices: give it 250 ms before calling this a second
      // claimant.
      for (int i = 0; i < 25 && session_->serving(); ++i) {
        absl::SleepFor(absl::Milliseconds(10));
      }
      bool keep = false;
      {
        absl::MutexLock lock(&mu_);
        keep = !session_->serving() && !next_.has_value();
        if (keep) next_ = std::move(*a);
      }
      if (keep) continue;
      const std::string why = absl::StrCat(
          "rank ", rank_, " is already served to application pid ", served_pid_,
          ": one application process per rank (this process, pid ", a->hello["pid"],
          ", was refused)");
      REVENANT_LOG(WARNING, "agent") << "refused the application: " << why;
      (void)transport::SendFrame(a->fd, FormatKv({{"op", "refused"}, {"error", why}}));
      close(a->fd);
    }
  }

  const int listen_fd_;
  const int rank_;
  const Session* const session_;
  const uint32_t served_pid_;
  std::atomic<bool> stop_{false};
  absl::Mutex mu_;
  std::optional<Admitted> next_;  // written by the thread under mu_; read after Stop
  std::thread thread_;
};

// Journal sizes in KiB up to 1 EiB: no overflow of the byte count.
constexpr int64_t kMaxKib = int64_t{1} << 40;

// The journal's options from the flags and knobs.
RequestJournal::Options JournalOptionsFromFlags() {
  RequestJournal::Options jopts;
  jopts.boundaries = absl::GetFlag(FLAGS_minibatch) == "manual"
                         ? RequestJournal::BoundaryMode::kManual
                         : RequestJournal::BoundaryMode::kAuto;
  if (const std::optional<int64_t> kib =
          knobs::Int(knobs::Id::kJournalMinibatchChunkKib, 1, int64_t{64} << 10)) {
    // The minibatch log's first chunk (journal/journal.h); Journal::Open
    // refuses a size that is not whole 32 KiB blocks.
    jopts.journal.minibatch_first_chunk = static_cast<size_t>(*kib) << 10;
  }
  if (const std::optional<int64_t> mib =
          knobs::Int(knobs::Id::kJournalPayloadAheadMib, 0, int64_t{1} << 10)) {
    jopts.journal.payload_ahead_bytes = static_cast<uint64_t>(*mib) << 20;
  }
  // Journal size bounds (journal/journal.h): a warning from 1 GiB on (and at
  // each doubling) by default; the agent stops, as on a full disk, at
  // REVENANT_JOURNAL_MAX_KIB (default: none).
  jopts.journal.warn_bytes = static_cast<uint64_t>(
                                 knobs::Int(knobs::Id::kJournalWarnKib, 0, kMaxKib).value_or(1 << 20))
                             << 10;
  if (const std::optional<int64_t> kib = knobs::Int(knobs::Id::kJournalMaxKib, 0, kMaxKib)) {
    jopts.journal.max_bytes = static_cast<uint64_t>(*kib) << 10;
  }
  return jopts;
}

// --snapshots, --snapshot_every, --snapshot_max_log_mib.
void SnapshotOptionsFromFlags(SessionOptions* options) {
  const std::string snap = absl::GetFlag(FLAGS_snapshots);
  options->snapshots = snap == "on" || (snap == "auto" && absl::GetFlag(FLAGS_world_size) == 1);
  if (options->snapshots && !absl::GetFlag(FLAGS_journal)) {
    REVENANT_LOG(WARNING, "agent") << "boundary snapshots need the journal: off";
    options->snapshots = false;
  }
  const std::string every = absl::GetFlag(FLAGS_snapshot_every);
  uint64_t n = 0;
  options->snapshot_every = every == "auto" ? 0 : absl::SimpleAtoi(every, &n) && n > 0 ? n : 1;
  options->snapshot_max_log_bytes = absl::GetFlag(FLAGS_snapshot_max_log_mib) << 20;
  options->snapshot_log_state_ratio = std::max(0.0, absl::GetFlag(FLAGS_snapshot_log_state_ratio));
  options->snapshot_min_interval_ns =
      static_cast<int64_t>(std::min<uint64_t>(absl::GetFlag(FLAGS_snapshot_min_interval_ms),
                                              uint64_t{1} << 32)) *
      1000 * 1000;
  options->snapshot_keep_spare = absl::GetFlag(FLAGS_snapshot_keep_spare);
  options->snapshot_spare_ahead = absl::GetFlag(FLAGS_snapshot_spare_ahead);
  options->snapshot_staged = absl::GetFlag(FLAGS_snapshot_staged);
  options->snapshot_register_behind = absl::GetFlag(FLAGS_snapshot_register_behind);
  options->snapshot_async = absl::GetFlag(FLAGS_snapshot_async);
}

#if REVENANT_TESTING
// The fault injection plan (--chaos_*).
SessionOptions::Chaos ChaosFromFlags() {
  SessionOptions::Chaos chaos;
  chaos.after_calls = absl::GetFlag(FLAGS_chaos_after_calls);
  chaos.minibatch = absl::GetFlag(FLAGS_chaos_minibatch);
  chaos.calls_into_minibatch = absl::GetFlag(FLAGS_chaos_calls_into_minibatch);
  chaos.corrupt_snapshot = absl::GetFlag(FLAGS_chaos_corrupt_snapshot);
  const std::string point = absl::GetFlag(FLAGS_chaos_point);
  chaos.point = point == "before_append"      ? SessionOptions::Chaos::Point::kBeforeAppend
                : point == "after_execute"    ? SessionOptions::Chaos::Point::kAfterExecute
                : point == "after_reply"      ? SessionOptions::Chaos::Point::kAfterReply
                : point == "snapshot_partial" ? SessionOptions::Chaos::Point::kSnapshotPartial
                : point == "after_snapshot"   ? SessionOptions::Chaos::Point::kAfterSnapshot
                : point == "after_boundary"   ? SessionOptions::Chaos::Point::kAfterBoundary
                : point == "snapshot_inflight" ? SessionOptions::Chaos::Point::kSnapshotInflight
                : point == "snapshot_finish"  ? SessionOptions::Chaos::Point::kSnapshotFinish
                                              : SessionOptions::Chaos::Point::kAfterAppend;
  return chaos;
}

// The crash point where a survivor starts recovering a communicator.
std::function<void()> RecoveryCrashPointFromFlags() {
  if (!absl::GetFlag(FLAGS_chaos_in_recovery)) return nullptr;
  return [] {
    REVENANT_LOG(WARNING, "agent") << "chaos: killing this agent during recovery";
    raise(SIGKILL);
  };
}
#else
// The product has no crash points: a testing flag is refused, naming the
// variant that has it, rather than reported as unknown.
bool RefuseTestingFlags(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (a == "--") break;
    if (!absl::ConsumePrefix(&a, "-")) continue;
    absl::ConsumePrefix(&a, "-");
    a = a.substr(0, a.find('='));
    if (absl::StartsWith(a, "chaos_") || absl::StartsWith(a, "nochaos_")) {
      std::fprintf(stderr,
                   "%s: --%s is a fault-injection flag of the testing variant, %s (bazel build "
                   "//agent:%s; revenant-run --chaos starts it)\n",
                   kBinary, std::string(a).c_str(), kTestingBinary, kTestingBinary);
      return false;
    }
  }
  return true;
}
#endif

// --journal_thread, where `chaos` allows a journal thread.
SessionOptions::JournalThread JournalThreadFromFlags(const SessionOptions::Chaos& chaos) {
  const std::string mode = absl::GetFlag(FLAGS_journal_thread);
  using JT = SessionOptions::JournalThread;
  // auto: write-behind where the thread has a core of its own: each rank
  // keeps three threads busy (the application's, the executor, the
  // journal thread), so with at least 4 CPUs and 3 per rank of the job
  // (--world_size; one node); else the executor journals inline (the
  // thread would take the application's or the executor's core).
  const unsigned cpus = std::thread::hardware_concurrency();
  const unsigned ranks = static_cast<unsigned>(std::max(1, absl::GetFlag(FLAGS_world_size)));
  JT thread = mode == "behind"                   ? JT::kBehind
              : mode == "ahead"                  ? JT::kAhead
              : mode == "off"                    ? JT::kOff
              : cpus >= 4 && cpus >= 3 * ranks ? JT::kBehind
                                                 : JT::kOff;
  const bool exact_append_kill =
      (chaos.after_calls != 0 || chaos.minibatch != 0) &&
      (chaos.point == SessionOptions::Chaos::Point::kBeforeAppend ||
       chaos.point == SessionOptions::Chaos::Point::kAfterAppend);
  if (thread != JT::kOff && exact_append_kill) {
    // The kill must find the request journaled or not exactly as named.
    REVENANT_LOG(INFO, "agent") << "chaos at an append: journal thread off";
    thread = JT::kOff;
  }
  return thread;
}

// The session's options from the flags and knobs; opens a fresh journal
// unless the session `recover`s a dead agent's (then Session::Recover
// continues it). An error names why the application is refused.
absl::StatusOr<SessionOptions> SessionOptionsFromFlags(const std::string& job_dir, int rank,
                                                       bool recover,
                                                       const RequestJournal::Options& jopts) {
  SessionOptions options;
  if (absl::GetFlag(FLAGS_journal) && !recover) {
    absl::StatusOr<std::unique_ptr<RequestJournal>> j =
        RequestJournal::Open(job_dir + "/journal", absl::GetFlag(FLAGS_job), rank, jopts);
    if (!j.ok()) {
      return absl::FailedPreconditionError("cannot open the journal: " + j.status().ToString());
    }
    options.journal = std::move(*j);
  }
  options.validate_every = absl::GetFlag(FLAGS_validate_every);
  options.rank = rank;
  options.world_size = absl::GetFlag(FLAGS_world_size);
  options.journal_boundary_bytes =
      static_cast<uint64_t>(
          knobs::Int(knobs::Id::kJournalBoundaryKib, 0, kMaxKib).value_or(256 << 10))
      << 10;
  options.capture_max_bytes =
      static_cast<uint64_t>(knobs::Int(knobs::Id::kCaptureMaxMib, 0, 1 << 30).value_or(4096))
      << 20;
  if (options.validate_every > 0 && !absl::GetFlag(FLAGS_journal)) {
    REVENANT_LOG(WARNING, "agent") << "--validate_every needs the journal: validator off";
    options.validate_every = 0;
  }
  SnapshotOptionsFromFlags(&options);
#if REVENANT_TESTING
  options.chaos = ChaosFromFlags();
#endif
  options.journal_thread = JournalThreadFromFlags(options.chaos);
  return options;
}

// One admitted connection: the rest of the handshake, then serve until the
// application leaves. Returns the connection to serve next, if one arrived
// while this session ended.
std::optional<Admitted> Serve(Backend* backend, Admitted conn, const std::string& job_dir,
                              int rank, int listen_fd) {
  const int fd = conn.fd;
  std::map<std::string, std::string>& m = conn.hello;
  const std::string channel_path = m["channel"];
  auto refuse = [&](const std::string& why) -> std::optional<Admitted> {
    REVENANT_LOG(WARNING, "agent") << "refused the application: " << why;
    (void)transport::SendFrame(fd, FormatKv({{"op", "refused"}, {"error", why}}));
    close(fd);
    return std::nullopt;
  };
  if (m["op"] != "hello" || m["version"] != "1") return refuse("unknown handshake version");
  if (channel_path.rfind(job_dir + "/chan-", 0) != 0 ||
      channel_path.find("..") != std::string::npos) {
    return refuse("channel " + channel_path + " is not in this job's directory");
  }
  absl::StatusOr<std::unique_ptr<transport::ShmServerChannel>> ch =
      transport::ShmServerChannel::Attach(channel_path);
  if (!ch.ok()) return refuse(ch.status().ToString());
  const bool recover = m["recover"] == "1";
  const RequestJournal::Options jopts = JournalOptionsFromFlags();
  absl::StatusOr<SessionOptions> options = SessionOptionsFromFlags(job_dir, rank, recover, jopts);
  if (!options.ok()) return refuse(std::string(options.status().message()));
  if (absl::GetFlag(FLAGS_upload_hold) && absl::GetFlag(FLAGS_journal)) {
    if (m["hold"] != "1") {
      REVENANT_LOG(INFO, "agent")
          << "held uploads: the application's process cannot write-protect its uploads' "
             "sources (" << (m["hold_why"].empty() ? "an older shim" : m["hold_why"])
          << "): uploads are captured by the device instead";
    } else {
      // A replacement continues the dead agent's table (its holds were
      // copied out by the shim before it connected here).
      const std::string path = job_dir + "/journal/holds";
      absl::StatusOr<std::unique_ptr<HoldTable>> t =
          recover ? HoldTable::Open(path) : HoldTable::Create(path);
      if (recover && !t.ok() && absl::IsNotFound(t.status())) t = HoldTable::Create(path);
      if (!t.ok()) return refuse("held uploads: " + t.status().ToString());
      options->holds = std::move(*t);
    }
  }
  const std::string holds_path = options->holds != nullptr ? options->holds->path() : "";
  Session session(backend, std::move(*ch), fd, job_dir, std::move(*options));
  if (recover) {
    // A replacement for an agent that died: rebuild its state before the
    // application continues. On failure the application is told why and its
    // calls fail, rather than run on a state that differs from what it was told.
    absl::Status s = session.Recover(job_dir + "/journal", absl::GetFlag(FLAGS_job), rank, jopts);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, "agent") << "cannot recover rank " << rank << ": " << s;
      (void)transport::SendFrame(
          fd, FormatKv({{"op", "refused"}, {"error", "recovery failed: " + s.ToString()}}));
      g_recovery_failed.store(true);
      g_stop.store(true);
      return std::nullopt;
    }
  }
  const DeviceRange range = backend->device_range();
  absl::Status sent = transport::SendFrame(
      fd, FormatKv({{"op", "welcome"},
                    {"pid", std::to_string(getpid())},
                    {"backend", backend->name()},
                    {"rank", std::to_string(rank)},
                    {"device_base", std::to_string(range.base)},
                    {"device_size", std::to_string(range.size)},
                    {"holds", holds_path}}));
  if (!sent.ok()) return std::nullopt;
  std::optional<Admitted> next;
  {
    Doorkeeper doorkeeper(listen_fd, rank, &session, session.channel()->client_pid());
    session.Run();
    next = doorkeeper.TakeNext();
  }
  return next;
}

// The application's host memory that the device touches (registered
// pages, cudaHostAlloc's files) is mapped in the agent at the application's
// own addresses, and a replacement maps every such range at once. Left to
// the default layout, both processes place their mappings top-down from
// bases that address-space randomization draws from the same terabyte (and
// without randomization, a job started under a debugger or `setarch -R`,
// from the same address), so an application's buffer could land where the
// agent already holds something and its registration fail. The agent
// therefore runs with the bottom-up layout (ADDR_COMPAT_LAYOUT: its mappings
// grow upwards from a third of the address space, far below where the
// application's grow down) and with randomization on (a job run without it
// would otherwise load the agent's executable where the application's
// executable and heap are): revenant-run starts it so, anything else makes
// it re-execute itself once (common/agent_layout.h; the exec costs ~20 ms
// of start-up on the CPU machine). It also keeps its heap with its mappings:
// a page reserved at the program break makes malloc grow by mapping instead
// of by brk next to the executable. Returns only when the layout is in
// place or cannot be; `*why_not` then says why.
void PlaceMappingsAwayFromTheApplication(char** argv, std::string* why_not) {
  const int current = personality(0xffffffff);
  if (current == -1) {
    *why_not = absl::StrCat("personality: ", std::strerror(errno));
    return;
  }
  const unsigned long wanted = AgentPersonality(static_cast<unsigned long>(current));
  if (static_cast<unsigned long>(current) != wanted) {
    if (personality(wanted) == -1) {
      *why_not = absl::StrCat("personality(ADDR_COMPAT_LAYOUT): ", std::strerror(errno));
      return;
    }
    // By its own path, so that the process keeps its name (an exec of
    // /proc/self/exe would name it "exe").
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    const char* path = "/proc/self/exe";
    if (n > 0) {
      self[n] = '\0';
      path = self;
    }
    execv(path, argv);
    *why_not = absl::StrCat("re-executing ", path, ": ", std::strerror(errno));
    personality(static_cast<unsigned long>(current));
    return;
  }
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t brk_end = (reinterpret_cast<uintptr_t>(sbrk(0)) + page - 1) / page * page;
  void* guard = mmap(reinterpret_cast<void*>(brk_end), page, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
  if (guard != reinterpret_cast<void*>(brk_end)) {
    if (guard != MAP_FAILED) munmap(guard, page);
    *why_not = "the heap stays next to the executable (no page could be reserved at its end)";
  }
}

// The flags' values Serve reads (logged when wrong).
bool FlagsValid() {
  const std::string minibatch = absl::GetFlag(FLAGS_minibatch);
  if (minibatch != "auto" && minibatch != "manual") {
    REVENANT_LOG(ERROR, "agent") << "--minibatch must be auto or manual, not " << minibatch;
    return false;
  }
  const std::string snapshots = absl::GetFlag(FLAGS_snapshots);
  {
    const std::string every = absl::GetFlag(FLAGS_snapshot_every);
    uint64_t n = 0;
    if (every != "auto" && (!absl::SimpleAtoi(every, &n) || n == 0)) {
      REVENANT_LOG(ERROR, "agent") << "--snapshot_every must be auto or a positive number, not "
                                   << every;
      return false;
    }
  }
  if (snapshots != "auto" && snapshots != "on" && snapshots != "off") {
    REVENANT_LOG(ERROR, "agent") << "--snapshots must be auto, on or off, not " << snapshots;
    return false;
  }
  const std::string journal_thread = absl::GetFlag(FLAGS_journal_thread);
  if (journal_thread != "auto" && journal_thread != "behind" && journal_thread != "ahead" &&
      journal_thread != "off") {
    REVENANT_LOG(ERROR, "agent") << "--journal_thread must be auto, behind, ahead or off, not "
                                 << journal_thread;
    return false;
  }
  return true;
}

// A spare: waits for its assignment, then starts the backend of the rank it
// takes (`*backend`, `*options`, `*socket_path`, `*job_dir` become the
// rank's). Returns the agent's exit status when it ends here, else nullopt.
std::optional<int> TakeAssignment(std::unique_ptr<Backend>* backend, BackendOptions* options,
                                  std::string* socket_path, std::string* job_dir) {
  // The backend just made is a warm-up on a range no rank uses: what is
  // slow to start (the CUDA context, the driver, host kernel libraries)
  // stays with this process, so the rank's own backend starts quickly.
  std::unique_ptr<Backend> warm = std::move(*backend);
  REVENANT_LOG(DEBUG, "agent") << "spare ready (" << warm->name() << " backend)";
  absl::StatusOr<std::map<std::string, std::string>> a =
      WaitForAssignment(absl::Seconds(absl::GetFlag(FLAGS_spare_wait_s)));
  if (!a.ok()) {
    REVENANT_LOG(INFO, "agent") << "spare leaves without an assignment: " << a.status();
    return 0;
  }
  std::map<std::string, std::string>& m = *a;
  int rank = -1, device = -1;
  if (m["op"] != "assign" || m["socket"].empty() || m["job_dir"].empty() ||
      !absl::SimpleAtoi(m["rank"], &rank) || !absl::SimpleAtoi(m["device"], &device) ||
      rank < 0) {
    REVENANT_LOG(ERROR, "agent") << "spare: malformed assignment";
    return 2;
  }
  const absl::Time t0 = absl::Now();
  *socket_path = m["socket"];
  *job_dir = m["job_dir"];
  options->rank = rank;
  options->device = device >= 0 ? device : rank;
  options->job_dir = *job_dir;
  absl::StatusOr<std::unique_ptr<Backend>> made =
      MakeBackend(absl::GetFlag(FLAGS_backend), *options);
  if (!made.ok()) {
    REVENANT_LOG(ERROR, "agent") << "spare: cannot start the backend of rank " << rank << ": "
                                 << made.status();
    return kAgentExitTakeoverFailed;
  }
  *backend = std::move(*made);
  warm.reset();
  const std::string detail =
      absl::StrCat("pid ", getpid(), ", backend of rank ", rank, " ready in ",
                   absl::ToInt64Milliseconds(absl::Now() - t0), " ms");
  RecordEvent(JobRootOf(*job_dir), "spare_assigned", rank, 0, detail);
  REVENANT_LOG(INFO, "agent") << "spare takes rank " << rank << ": " << detail;
  return std::nullopt;
}

// For revenant-chaos and operators: which process serves this rank.
void WritePidFile(const std::string& job_dir) {
  const int fd = open((job_dir + "/agent.pid").c_str(),
                      O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0) {
    const std::string text = absl::StrCat(getpid(), "\n");
    if (write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      REVENANT_LOG(WARNING, "agent") << "cannot write " << job_dir << "/agent.pid";
    }
    close(fd);
  }
}

// Serves one application after the other until a stop signal (or a
// failed recovery).
void ServeUntilStopped(Backend* backend, int listen_fd, const std::string& job_dir, int rank) {
  std::optional<Admitted> next;
  while (!g_stop.load()) {
    if (!next.has_value()) {
      absl::StatusOr<int> fd =
          transport::AcceptWithDeadline(listen_fd, absl::Now() + absl::Milliseconds(500));
      if (!fd.ok()) continue;
      next = Admit(*fd, absl::Seconds(10));
      if (!next.has_value()) continue;
    }
    Admitted conn = std::move(*next);
    next = Serve(backend, std::move(conn), job_dir, rank, listen_fd);
  }
  if (next.has_value()) close(next->fd);
}

int Main(int argc, char** argv) {
  std::string layout_why_not;
  PlaceMappingsAwayFromTheApplication(argv, &layout_why_not);
  // Debian's abseil is built with absl::Mutex's lock-order (deadlock) graph
  // on: every Lock and Unlock updates it, which showed in the executor's
  // profile on every request. The tests keep it (they run the agent's code
  // in-process); the agent binary does not.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
#if REVENANT_TESTING
  absl::SetProgramUsageMessage(absl::StrCat(
      "the testing variant of revenant-agent: the same agent with its named crash points "
      "(--chaos_*, set by revenant-run --chaos) and the measurement and test knobs.\n\n"
      "Environment (docs/knobs.md lists every variable):\n",
      knobs::Help(knobs::Kind::kProduct), "Measurement:\n", knobs::Help(knobs::Kind::kMeasurement),
      "Test:\n", knobs::Help(knobs::Kind::kTest)));
#else
  absl::SetProgramUsageMessage(absl::StrCat(
      "executes one GPU's forwarded CUDA, CUDA-library and NCCL calls "
      "(started by revenant-run, or standalone with --gpu=I).\n\n"
      "Environment (docs/knobs.md lists every variable):\n",
      knobs::Help(knobs::Kind::kProduct)));
  if (!RefuseTestingFlags(argc, argv)) return 2;
  knobs::IgnoreTestingKnobs(kTestingBinary);
#endif
  absl::ParseCommandLine(argc, argv);
  // Everything the agent creates is private to this user. Revenant's own
  // files name their mode (0600, directories 0700); this also covers files
  // that libraries create with the umask's mode, such as the Gloo FileStore
  // of a communicator's rendezvous.
  umask(077);
  if (!FlagsValid()) return 2;
  if (!layout_why_not.empty()) {
    REVENANT_LOG(WARNING, "agent")
        << "the agent keeps the default address layout (" << layout_why_not
        << "): the application's host memory may meet the agent's own mappings, and registering "
           "it then fails with cudaErrorMemoryAllocation";
  }
  if (absl::GetFlag(FLAGS_die_with_parent)) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() == 1) return 0;  // the launcher is already gone
  }
  std::string socket_path = absl::GetFlag(FLAGS_socket);
  std::string job_dir = absl::GetFlag(FLAGS_job_dir);
  const int gpu = absl::GetFlag(FLAGS_gpu);
  if (gpu >= 0) {
    if (job_dir.empty()) job_dir = DaemonDir(gpu);
    if (socket_path.empty()) socket_path = job_dir + "/agent.sock";
    const std::string parent = JobRootOf(job_dir);
    mkdir(parent.c_str(), 0700);
    mkdir(job_dir.c_str(), 0700);
    struct stat st {};
    if (stat(parent.c_str(), &st) != 0 || st.st_uid != getuid() || (st.st_mode & 077) != 0) {
      REVENANT_LOG(ERROR, "agent") << parent << " must be a directory of ours with mode 0700";
      return 2;
    }
  }
  const bool spare = absl::GetFlag(FLAGS_spare);
  if (!spare && (socket_path.empty() || job_dir.empty())) {
    REVENANT_LOG(ERROR, "agent") << "--socket and --job_dir (or --gpu) are required";
    return 2;
  }
  struct sigaction sa {};
  sa.sa_handler = OnSignal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  BackendOptions options;
  options.rank = gpu >= 0 ? gpu : absl::GetFlag(FLAGS_rank);
  options.device = absl::GetFlag(FLAGS_device) >= 0 ? absl::GetFlag(FLAGS_device) : options.rank;
  options.job_dir = job_dir;
  options.collectives = absl::GetFlag(FLAGS_collectives);
  if (options.collectives != "nccl" && options.collectives != "gloo") {
    std::fprintf(stderr, "revenant-agent: --collectives must be nccl or gloo, not '%s'\n",
                 options.collectives.c_str());
    return 2;
  }
  options.gpu_shared = absl::GetFlag(FLAGS_gpu_shared);
  options.recovery_timeout_s = absl::GetFlag(FLAGS_recovery_timeout_s);
  options.journal = absl::GetFlag(FLAGS_journal);
  options.launch_graph_max = absl::GetFlag(FLAGS_launch_graph_max);
#if REVENANT_TESTING
  options.crash_in_recovery = RecoveryCrashPointFromFlags();
#endif
  std::string libs = absl::GetFlag(FLAGS_host_kernels);
  if (libs.empty()) libs = knobs::String(knobs::Id::kHostKernels).value_or("");
  for (absl::string_view p : absl::StrSplit(libs, ':', absl::SkipEmpty())) {
    options.host_kernel_libraries.emplace_back(p);
  }
  absl::StatusOr<std::unique_ptr<Backend>> backend =
      MakeBackend(absl::GetFlag(FLAGS_backend), options);
  if (!backend.ok()) {
    REVENANT_LOG(ERROR, "agent") << "cannot start the backend: " << backend.status();
    return 1;
  }
  if (spare) {
    const std::optional<int> exit =
        TakeAssignment(&*backend, &options, &socket_path, &job_dir);
    if (exit.has_value()) return *exit;
  }
  absl::StatusOr<int> listen_fd = transport::ListenUnix(socket_path);
  if (!listen_fd.ok()) {
    REVENANT_LOG(ERROR, "agent") << "cannot listen on " << socket_path << ": "
                                 << listen_fd.status();
    return spare ? kAgentExitTakeoverFailed : 1;
  }
  WritePidFile(job_dir);
  REVENANT_LOG(DEBUG, "agent") << "rank " << options.rank << " ready on " << socket_path << " ("
                               << (*backend)->name() << " backend)";
  ServeUntilStopped(backend->get(), *listen_fd, job_dir, options.rank);
  close(*listen_fd);
  unlink(socket_path.c_str());
  return g_recovery_failed.load() ? 3 : 0;
}

}  // namespace
}  // namespace agent
}  // namespace revenant

int main(int argc, char** argv) { return revenant::agent::Main(argc, argv); }
