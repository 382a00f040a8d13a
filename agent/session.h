// Session: one connected application process and the agent's work for it.
//
// The agent accepts an application on its control socket, checks its uid,
// attaches to the shared-memory channel the application created, and runs a
// Session: one executor thread reads requests in ring order, dispatches them
// to the backend (generated dispatchers and hand-written hooks), posts
// replies for synchronous calls, and releases each request once executed.
// The session ends when the application disconnects (its control socket
// closes); the device state it built is then dropped.
//
//   Session session(backend, std::move(channel), control_fd, job_dir);
//   session.Run();   // returns when the application is gone
#ifndef REVENANT_AGENT_SESSION_H_
#define REVENANT_AGENT_SESSION_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>
#include <thread>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "agent/backend.h"
#include "agent/dispatch.h"
#include "agent/handles.h"
#include "agent/journaling.h"
#include "agent/journaling_mode.h"
#include "agent/snapshot.h"
#include "agent/upload_capture.h"
#include "api/hook_protocol.h"
#include "api/traits.h"
#include "recovery/replay_plan.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace agent {

struct SessionOptions {
  // Bound on how long one host callback may run in the application.
  absl::Duration callback_timeout = absl::Seconds(300);
  // Journal every journaled request (docs/design.md, "Journal"); null: off.
  std::unique_ptr<RequestJournal> journal;

  // Fault injection (revenant-run --chaos): the agent kills itself with
  // SIGKILL at a chosen request, to test recovery from exactly that point.
  // Only the testing variant (revenant-agent-testing) sets a plan and has
  // the crash points; in revenant-agent the plan stays empty and
  // MaybeChaos does nothing (docs/design.md, "The testing variant").
  struct Chaos {
    // kSnapshotPartial, kAfterSnapshot, kAfterBoundary: at the boundary that
    // starts `minibatch` (boundary snapshots on): the snapshot's temporary
    // file is written but not renamed / the snapshot is renamed but the
    // journal has not recorded the boundary / the journal recorded it but
    // the older snapshot is not deleted yet.
    // kAfterReply: a synchronous request's reply is posted, its outcome
    // not journaled yet where it may follow the reply
    // (RequestJournal::OutcomeMayFollowReply); for others, after execute.
    // kSnapshotInflight, kSnapshotFinish: at the `minibatch`-th
    // asynchronous snapshot (one taken inside the journal's minibatch):
    // its device copies are queued and the executor goes on / the copies
    // completed and the file is checksummed but not renamed (on the
    // finishing thread).
    enum class Point {
      kBeforeAppend,
      kAfterAppend,
      kAfterExecute,
      kAfterReply,
      kSnapshotPartial,
      kAfterSnapshot,
      kAfterBoundary,
      kSnapshotInflight,
      kSnapshotFinish
    };
    // Kill at the `after_calls`-th request (counting from 1); 0: never.
    uint64_t after_calls = 0;
    // Or: at the `calls_into_minibatch`-th request of minibatch `minibatch`.
    uint64_t minibatch = 0;
    uint64_t calls_into_minibatch = 0;
    Point point = Point::kAfterAppend;
    // With a snapshot point: first damage one byte of that boundary's
    // snapshot (a replacement must refuse it).
    bool corrupt_snapshot = false;
  } chaos;

  // Boundary snapshots (agent/snapshot.h): at every minibatch boundary the
  // device state is written to <job_dir>/snapshots, so that a replacement
  // can restore a rank that has no replica past its first boundary.
  bool snapshots = false;
  // Which detected step boundaries become journal boundaries with a
  // snapshot: every `snapshot_every`-th; 0 (auto): the first, then one once
  // the time since the last snapshot is Session::kSnapshotIntervalFactor (49)
  // times what that snapshot took (at most 2 % of the job in snapshots) or
  // the minibatch log's bytes a replay
  // may still read (RequestJournal::live_minibatch_bytes: a one-rank job's
  // finished snapshots release the payloads before them) passed
  // `snapshot_max_log_bytes`. The steps in between stay in one journal
  // minibatch: a replacement restores the last snapshot and replays them all.
  // Chaos plans that count minibatches and the validator see every step.
  uint64_t snapshot_every = 1;
  // With snapshot_every 0 (auto): a timed snapshot comes at least this long
  // after the last one ended, however short that took (a one-rank job with
  // little state took one every ~11 ms with the factor alone, each with its
  // fixed costs on the executor: 1.17 of native's step where the snapshots'
  // own time said 2 %).
  int64_t snapshot_min_interval_ns = 1000ll * 1000 * 1000;
  uint64_t snapshot_max_log_bytes = 256ull << 20;
  // The bound on the log is at least this many times the last snapshot's
  // bytes (Session::LogBound), at most 4x snapshot_max_log_bytes; 0:
  // snapshot_max_log_bytes alone.
  double snapshot_log_state_ratio = 1.0;
  // Keep the snapshot given up at a boundary as the next one's (mapped,
  // registered) file: no mapping or registration per snapshot, 2x the live
  // bytes in snapshot files; false (the default): 1x between snapshots, a
  // fresh file per snapshot.
  bool snapshot_keep_spare = false;
  // Files made on the store's thread: with the spare, the first snapshot's
  // spare; without, the next snapshot's file once it comes near
  // (Session::MakeNextSnapshotFile; 2x from then until that snapshot
  // finished); with either, the first snapshot's file.
  bool snapshot_spare_ahead = true;
  // A synchronous snapshot into a file not registered yet (the first one's)
  // copies through staging buffers instead of registering it
  // (SnapshotStore::Options::staged).
  bool snapshot_staged = true;
  // The first snapshot's file, left unregistered, is registered on the
  // store's thread after it (SnapshotStore::Options::register_behind).
  bool snapshot_register_behind = true;
  // Step boundaries inside the journal's minibatch take asynchronous
  // snapshots (one rank; not while every step is a journal boundary): the
  // device copies the allocations on a stream of its own, the later work
  // waits for them on the device, a thread finishes the file behind; the
  // finished snapshot replaces the one of the journal's minibatch, whose
  // replay then starts at its boundary, and the journal's payloads before
  // it are released. From three quarters of snapshot_max_log_bytes the next
  // step takes one. Journal boundaries (the first, every 8th timed snapshot,
  // one whenever the log's live bytes passed snapshot_max_log_bytes) stay
  // synchronous. false: every snapshot is synchronous.
  bool snapshot_async = true;

  // Journal validator (agent/validator.h): every `validate_every`-th
  // minibatch is replayed from its boundary and compared; 0: off. Needs the
  // journal. `rank` names this agent in its reports.
  uint64_t validate_every = 0;
  int rank = 0;
  // Ranks in the job; 0: unknown.
  int world_size = 0;

  // A job that never reaches a minibatch boundary (none detected, none
  // marked with revenantMarkStep) keeps every call in its journal. Each time
  // the journal has grown by this many bytes since the last boundary, the
  // agent places one itself, as revenantMarkStep would, with its boundary
  // snapshot: the calls after it go to the minibatch log, cleared at each
  // such boundary, so the journal stays within about twice this. Only for a
  // one-rank job with boundary snapshots on: the snapshot, not another
  // rank, then holds the state a replacement restores; with several ranks a
  // boundary must fall at the same request on every rank (collective
  // ordinals restart at it), which one rank's journal size cannot promise,
  // so the agent says so once instead. 0: never.
  uint64_t journal_boundary_bytes = 0;
  // Captured uploads (agent/upload_capture.h): the capture files of the
  // journal directory stay under this many bytes; 0: every upload's bytes
  // are journaled by the CPU. REVENANT_CAPTURE_MAX_MIB.
  uint64_t capture_max_bytes = 4ull << 30;
  // Held uploads (revenant-run --upload_hold, the application's shim able to
  // write-protect its sources): the journal's table, else null
  // (common/upload_hold.h).
  std::unique_ptr<HoldTable> holds;

  // The journal thread (docs/design.md, "The journal thread"): a second
  // thread journals the plain asynchronous requests of the ring, so that
  // journaling leaves the executor's path.
  //   kAhead:  the thread journals requests before the executor runs them
  //            (the executor waits for it, or journals a request itself);
  //   kBehind: the executor runs plain asynchronous requests at once and
  //            the thread journals them behind it (write-behind). The ring
  //            keeps every request until it is journaled, every request
  //            whose effect reaches the application (a reply, a host
  //            callback) is journaled before it runs, and before then
  //            everything earlier: what the application was told is always
  //            in the journal, and the rest is still in its ring.
  // Off for chaos kills before or after an append (exact crash points).
  // agent/journaling_mode.h has the three modes.
  using JournalThread = JournalThreadKind;
  JournalThread journal_thread = JournalThread::kOff;
};

class Validator;

class Session : private JournalingHost {
 public:
  // `backend` must outlive the session. Takes ownership of `control_fd`.
  Session(Backend* backend, std::unique_ptr<transport::ShmServerChannel> channel,
          int control_fd, std::string job_dir, SessionOptions options);
  ~Session();

  // Executes requests until the application disconnects.
  void Run();

  // A replacement agent's start: rebuilds the dead agent's device state by
  // replaying its journal in `journal_dir` (same allocations at the same
  // addresses, same virtual handles, same modules), answers the replayed
  // requests the application still waits for, then continues the journal
  // and skips the requests it already holds. kDataLoss for a corrupt journal
  // (never replayed), other errors when the replay diverges.
  absl::Status Recover(const std::string& journal_dir, const std::string& job, int rank,
                       const RequestJournal::Options& journal_options);

  // Whether Run still serves the application: false once its control socket
  // closed (it exited or died) or Run stopped reading its requests (a
  // malformed ring). Any thread.
  bool serving() const { return !disconnected_.load() && !stopped_serving_.load(); }

  Backend* backend() { return backend_; }
  HandleTable* handles() { return &handles_; }
  transport::ShmServerChannel* channel() { return channel_.get(); }

  // Host memory shared with the application: maps `path` (a file inside the
  // job directory) at `addr` in this process and registers it.
  int MapSharedHost(uint64_t addr, uint64_t size, unsigned int flags, const std::string& path);
  int UnmapSharedHost(uint64_t addr);
  // Whether [p, p + n) lies inside one shared range.
  bool IsSharedHost(const void* p, size_t n) const;

  // The device capture the executor reserved for upload `seq` while
  // journaling it (agent/upload_capture.h), else null; CaptureRan after the
  // copy's hook ran it (`captured`: the backend captured its bytes).
  const UploadCapturePool::Capture* PendingCapture(uint64_t seq) const {
    return capture_ != nullptr ? capture_->Pending(seq) : nullptr;
  }
  void CaptureRan(uint64_t seq, bool captured) {
    if (capture_ != nullptr) capture_->Ran(seq, captured);
  }
  // Held uploads (common/upload_hold.h; held while journaled): HeldRan after
  // a held upload's copy ran; CopyOutHolds before the device writes shared
  // host memory [p, p + n) (held sources there are copied into their places).
  bool holding() const { return options_.holds != nullptr; }
  void HeldRan(uint64_t seq, bool hashed) {
    if (capture_ != nullptr) capture_->HeldRan(seq, hashed);
  }
  void HeldIntoGraph(uint64_t seq) {
    if (capture_ != nullptr) capture_->HeldIntoGraph(seq);
  }
  void CopyOutHoldsNamedIn(const char* args, size_t n) {
    if (capture_ != nullptr && options_.holds != nullptr) capture_->CopyOutHoldsNamedIn(args, n);
  }
  void CopyOutHolds(const void* p, size_t n) {
    if (capture_ != nullptr && options_.holds != nullptr) {
      const uint64_t a = reinterpret_cast<uint64_t>(p);
      capture_->CopyOutHolds(a, a + n);
    }
  }

  // Modules and kernels known to this session.
  bool module_loaded(uint64_t key) const { return modules_.count(key) != 0; }
  void set_module_loaded(uint64_t key) { modules_.insert(key); }
  const KernelInfo* FindKernel(const void* backend_handle) const;
  void AddKernel(const KernelInfo& info) { kernels_[info.handle] = info; }

  // Where a host callback comes from (docs/recovery.md, "Host callbacks").
  enum class CallbackOrigin {
    kLive,           // a request of the application, run now
    kReplayedSetup,  // a replayed setup-log request, before the boundary
                     // state is restored: from an earlier minibatch, which
                     // the application ran already: never posted again
    kReplayed,       // a replayed request of the journal's current minibatch
                     // (or of everything before the first boundary): the
                     // first ones, as many as the dead agent posted, are not
  };
  // Asks the application to run a host callback and waits (bounded) until
  // it ran. Called from the backend's stream threads, in stream order.
  void RunClientCallback(const hooks::CallbackRecord& record, CallbackOrigin origin);
  bool replaying() const { return replaying_.load(); }
  // The origin of a callback enqueued (or, for a graph's host node, run) now.
  // The origin of a graph host node running now: a graph's nodes were made
  // once, and a node learns which launch runs it only from the replayed
  // launches still on their streams (counted from their enqueue, in stream
  // order, until a host operation after each) -- not from whether a replay
  // is in progress when the node happens to run.
  CallbackOrigin host_node_origin() const {
    return replayed_setup_graph_launches_.load() > 0 ? CallbackOrigin::kReplayedSetup
           : replayed_graph_launches_.load() > 0      ? CallbackOrigin::kReplayed
                                                      : CallbackOrigin::kLive;
  }
  CallbackOrigin callback_origin() const {
    return !replaying_.load() ? CallbackOrigin::kLive
           : replay_setup_.load() ? CallbackOrigin::kReplayedSetup
                                  : CallbackOrigin::kReplayed;
  }

  // Validation replay (agent/validator.h): replays one request of the
  // minibatch log with nothing delivered to the application (no reply, no
  // host callback while validating; copies into shared host memory or the
  // staging area skipped) and compares a synchronous request's result with
  // `outcome` (may be null).
  absl::Status ReplaySilently(const journal::JournalEntry& entry,
                              const journal::JournalEntry* outcome);
  void set_validating(bool on) { validating_.store(on); }
  // Waits for all device work. An error it returns belongs to the
  // application's work: it is kept for its next reply, as an asynchronous
  // request's error is, and returned.
  int32_t SynchronizeKeepingErrors() {
    FlushLaunches();
    if (const int32_t n = backend_->BeforeRequest(api::ApiId::cudaDeviceSynchronize); n != 0) {
      KeepNcclError(n);
    }
    const int32_t e = backend_->cudaDeviceSynchronize();
    if (e != 0 && deferred_error_ == 0) deferred_error_ = e;
    return e;
  }

  // The reply of the request being executed, for hooks that write bulk data
  // (nullptr for asynchronous requests).
  void ForgetDeviceState();

 private:
  // REVENANT_CALL_STATS=1: per API, requests executed and the executor's time
  // in them (journaling included; run: the backend's part), printed at exit.
  struct ExecCounter {
    uint64_t requests = 0, ns = 0, run_ns = 0, max_ns = 0;
  };
  std::vector<ExecCounter> exec_stats_;
  // Timeline events of requests over 1 ms kept so far (Execute; the executor thread).
  size_t slow_requests_kept_ = 0;
  std::string ExecStatsReport() const;
  // The exit lines of Run (requests, host memory, journal, snapshots).
  void ReportAtExit();
  // One request: decode, journal (JournalingMode::BeforeRun, then
  // JournalBeforeRun or MarkStepHere where the executor journals it), run,
  // reply.
  void Execute(const transport::RecordHeader& rec);
  void ExecuteRequest(const transport::RecordHeader& rec);
  // Issues the launches the backend holds back (Backend::FlushLaunches); an
  // error of theirs is kept for the application's next reply.
  void FlushLaunches() {
    if (const int32_t e = backend_->FlushLaunches(); e != 0 && deferred_error_ == 0) {
      deferred_error_ = e;
    }
  }
  // `forced`: a boundary the agent places itself (a journal size bound):
  // always a snapshot, whatever --snapshot_every says.
  void MarkStepHere(const transport::RecordHeader& rec, bool forced = false);
  // SessionOptions::journal_boundary_bytes: checks the journal's growth
  // every few requests and, once it is due, places the boundary before
  // `rec` if the executor journals `rec` itself (`journaled_here`: every
  // earlier request is journaled and ran), else before a later one.
  void MaybePlaceOwnBoundary(const transport::RecordHeader& rec, bool journaled_here);
  void NoteSubmission(const transport::RecordHeader& rec);
  void JournalBeforeRun(const transport::RecordHeader& rec);
  bool SkipSuperseded(const transport::RecordHeader& rec, const api::ApiTraits& traits);
  void RunAndReply(const transport::RecordHeader& rec, const api::ApiTraits& traits,
                   bool has_reply);
  void Reply(const transport::RecordHeader& rec, bool nccl, int32_t status, char* reply,
             size_t out_size);
  // Executes a replayed request: no journaling; the reply is posted only if
  // the application still waits for it; `expected` (may be null) is the
  // outcome the dead agent recorded, compared with the replay's.
  absl::Status ExecuteReplayed(const transport::RecordHeader& rec,
                               const journal::JournalEntry* expected);
  // Session::Recover's steps; what is replayed, answered or skipped is
  // decided by the replay plan (recovery/replay_plan.h). The boundary
  // snapshot of the journal's minibatch, where one is needed (null: none
  // needed); an error refuses the recovery.
  absl::StatusOr<std::unique_ptr<Snapshot>> OpenBoundarySnapshot(uint64_t minibatch, int rank);
  // Brings the replayed state to the journal's minibatch boundary: from the
  // snapshot (may be null), and/or from the survivors of a data-parallel
  // job (`*behind`: they were past that minibatch).
  absl::Status RestoreBoundary(uint64_t minibatch, const Snapshot* snapshot, int rank,
                               bool* behind);
  // Carries out `plan` request by request, taking the boundary state
  // (from `snapshot`, may be null, and/or the survivors) where it says;
  // counts the requests replayed and those that diverged.
  absl::Status ReplayJournal(recovery::ReplayPlan& plan, const Snapshot* snapshot, int rank,
                             size_t* replayed, size_t* divergences);
  // After the replay: the dead agent's journal continues (inline journaling
  // until Run starts its mode; its handle bookkeeping rebuilt from
  // `entries`, the journal read back) and the ring skips the requests it
  // held through `last_request`, and those before `boundary_seq` (the first
  // request after the current minibatch's boundary, 0: not known), which
  // is not a boundary again.
  absl::Status ContinueJournal(const std::string& journal_dir, const std::string& job, int rank,
                               const RequestJournal::Options& journal_options,
                               uint64_t minibatch, uint64_t last_request, uint64_t boundary_seq,
                               const std::vector<journal::JournalEntry>& entries);
  // How many of the host callbacks the replay regenerates the application
  // already has (callbacks_to_suppress_).
  void CountPostedCallbacks(uint64_t minibatch);
  // A replayed request superseded by the survivors' state: answered
  // (without results) if the application still waits for it.
  void AnswerSuperseded(const journal::JournalEntry& e);
  // Before replaying `e`: the address or handle id its outcome names is the
  // one the replay must create again (what the application holds).
  void ExpectRecreated(const journal::JournalEntry& e, const journal::JournalEntry& outcome);
  // Replays `e`; a divergence is counted and logged, and returned as an
  // error only where the recovery cannot go on past it.
  absl::Status ReplayEntry(const journal::JournalEntry& e, const journal::JournalEntry* outcome,
                           size_t* divergences);
  // ExecuteReplayed of a journal entry: its request record rebuilt (body from
  // ReplayBody: inline payloads restored).
  absl::Status ExecuteJournaled(const journal::JournalEntry& entry,
                                const journal::JournalEntry* expected);
  // JournalingHost: tells the application why (op=dropped on its control
  // socket) and exits the agent (status 70). Any thread.
  [[noreturn]] void JournalFailed(const absl::Status& status) override;
  // JournalingHost: the backend starts `minibatch`, the channel notes the
  // callbacks posted so far (NoteMinibatchStarted).
  void StartMinibatch(uint64_t minibatch) override;
  bool BoundaryWithoutWork(const transport::RecordHeader& rec) override;

  // How requests get journaled (SessionOptions::journal_thread): inline
  // outside Run; Run starts the mode the options name.
  std::unique_ptr<JournalingMode> journaling_;
  JournalingHost* AsJournalingHost() { return this; }
  // The journal thread's settings for the mode Run starts.
  JournalThreadOptions JournalThreadSettings() const;
  // Records in the channel how many host callbacks were posted when
  // `minibatch` started (ShmServerChannel::SetMinibatchCallbacks).
  void NoteMinibatchStarted(uint64_t minibatch);
  uint64_t executed_seq_ = 0;  // the last request the executor ran
  uint64_t journaled_through_ = 0;  // a replacement: the last request its replay had
  // A replacement: the request its predecessor placed the current
  // minibatch's boundary before (0: none known).
  uint64_t boundary_placed_before_ = 0;

  Backend* const backend_;
  std::unique_ptr<transport::ShmServerChannel> channel_;
  int control_fd_;
  const std::string job_dir_;
  SessionOptions options_;
  // JournalingHost: bytes a request reads from shared host memory or the
  // staging area, for the journal (both may be reused by the application
  // once it ran).
  absl::string_view CapturedPayload(const transport::RecordHeader& rec) const override;
  HandleTable handles_;
  DispatchContext ctx_;
  std::atomic<bool> disconnected_{false};
  std::atomic<bool> stopped_serving_{false};

  // First error of an asynchronous request since the last reply.
  int32_t deferred_error_ = 0;
  // First error of an asynchronous NCCL request since the last reply to a
  // synchronous NCCL request that carries it (CarriesNcclDeferredError).
  int32_t nccl_deferred_error_ = 0;
  // Keeps an NCCL error for the next synchronous NCCL call (the first one
  // wins) and counts it in the channel (ShmServerChannel::NoteNcclError).
  void KeepNcclError(int32_t error);
  static bool CarriesNcclDeferredError(api::ApiId id);

  mutable std::mutex shared_mu_;
  std::map<uint64_t, uint64_t> shared_host_;  // addr -> size

  std::set<uint64_t> modules_;
  std::map<const void*, KernelInfo> kernels_;

  std::mutex callback_mu_;
  uint64_t callbacks_sent_ = 0;
  // Host callbacks a replay regenerates that the dead agent already posted.
  uint64_t callbacks_to_suppress_ = 0;
  // Replies of replayed synchronous requests that follow host callbacks the
  // replay posted: the application runs those only once it is back, and a
  // reply must not overtake them (a stream synchronize returns after the
  // host functions before it ran). Posted by PostDeferredReplies.
  struct DeferredReply {
    int slot;
    uint64_t seq;
    uint32_t status;
    uint32_t size;
    uint64_t callbacks;  // callbacks posted before it
  };
  std::vector<DeferredReply> deferred_replies_;
  void PostDeferredReplies();
  std::atomic<bool> replaying_{false};
  std::atomic<bool> replay_setup_{false};  // replaying the setup log (see CallbackOrigin)
  // Replayed cudaGraphLaunch calls whose graphs may still run (host_node_origin).
  std::atomic<int> replayed_graph_launches_{0};
  std::atomic<int> replayed_setup_graph_launches_{0};
  // Dispatches a replayed cudaGraphLaunch, counted until its stream is past it.
  int32_t DispatchReplayedGraphLaunch(wire::Decoder& in, wire::Encoder& out);
  std::atomic<bool> validating_{false};
  std::unique_ptr<Validator> validator_;
  // After a replacement found the survivors past its minibatch: device work
  // of the application is skipped until this minibatch starts (0: none).
  uint64_t skip_until_minibatch_ = 0;
  uint64_t requests_seen_ = 0;
  uint16_t last_api_id_ = 0;  // of the request seen last (named by chaos kills)
  // MaybePlaceOwnBoundary's state: the minibatch and journal bytes when it
  // last saw a boundary, whether a boundary is due, how many it placed.
  uint64_t own_boundary_minibatch_ = 0;
  uint64_t own_boundary_base_bytes_ = 0;
  uint64_t own_boundary_checks_ = 0;
  bool own_boundary_due_ = false;
  bool own_boundary_refused_ = false;
  uint64_t own_boundaries_ = 0;
  uint64_t chaos_minibatch_calls_ = 0;
  // Kills the agent if the chaos plan says this is the point.
  void MaybeChaos(SessionOptions::Chaos::Point point);

  // Boundary snapshots: SnapshotBoundary before the journal records the
  // boundary that starts `minibatch` (`seq`: the request the boundary comes
  // before), SnapshotRecorded after it did.
  void SnapshotBoundary(uint64_t minibatch, uint64_t seq);
  void SnapshotRecorded(uint64_t minibatch);
  // What a step boundary does with boundary snapshots on: a journal
  // boundary with a synchronous snapshot, a step inside the journal's
  // minibatch with an asynchronous snapshot (SnapshotInside), or a plain
  // step. `forced`: the agent places the boundary itself.
  enum class SnapshotStep { kBoundary, kInside, kSkip };
  SnapshotStep PlanSnapshot(uint64_t seq, bool forced);
  // The plan BoundaryWithoutWork made for request planned_seq_ (0: none),
  // taken by JournalBeforeRun when the executor journals that request.
  uint64_t planned_seq_ = 0;
  SnapshotStep planned_step_ = SnapshotStep::kSkip;
  // Starts an asynchronous snapshot of the state before `seq`, which will
  // replace the snapshot of the journal's `minibatch`. False: not possible
  // here (the caller takes a synchronous one).
  bool SnapshotInside(uint64_t minibatch, uint64_t seq);
  // Accounts for the asynchronous snapshot once finished; `wait`: waits for
  // it (abandoning it if the device never completes its copies).
  void ReapSnapshot(bool wait);
  struct InflightSnapshot {
    uint64_t ordinal = 0, minibatch = 0, seq = 0;
    uint64_t captured_at_start = 0;  // UploadCapturePool::captured_bytes() then
    int64_t start_ns = 0;
    double critical_ms = 0;
    std::unique_ptr<SnapshotStore::Pending> pending;
    bool staged = false;         // through the staging buffers (Pending::staged)
    absl::Status drain_status;   // the finisher's, draining them
    std::thread finisher;
    std::atomic<bool> finished{false};
    std::atomic<bool> stop{false};
    // Set by the finisher before `finished`.
    absl::Status status;
    SnapshotWriteStats stats;
    int64_t copied_ns = 0, end_ns = 0;
  };
  std::unique_ptr<InflightSnapshot> inflight_;
  // 8 bytes of registered memory the device stores a snapshot's tag into
  // once its copies completed (a page of its own).
  uint64_t* snapshot_done_word_ = nullptr;
  // A staged asynchronous snapshot's turn words on the same page, each on
  // a cache line of its own: the turns the device filled, and those the
  // finisher drained (Backend::SnapshotTurns).
  uint64_t* SnapshotFilledWord() const { return snapshot_done_word_ + 8; }
  uint64_t* SnapshotDrainedWord() const { return snapshot_done_word_ + 16; }
  // Lets the device run through every turn left (the snapshot is given up:
  // its copies land in the staging buffers only).
  void ReleaseSnapshotTurns() {
    __atomic_store_n(SnapshotDrainedWord(), ~uint64_t{0}, __ATOMIC_RELEASE);
  }
  uint64_t inside_snapshots_ = 0;
  // Before the first snapshot, its file is made ahead and grows with the
  // allocations (after each state request).
  void PrepareFirstSnapshotFile();
  // Captured uploads between snapshots (one rank): a snapshot is due once
  // the bytes captured since the last one began pass CaptureBound(); with
  // one in flight and twice as many held since the last finished one began,
  // the executor waits for it (CapturePressure). The marks are
  // UploadCapturePool::captured_bytes() when the last snapshot began and
  // when the last finished one began; a finished snapshot releases the
  // captures before its request, whose files are then filled again.
  // Held uploads count half: they cost the link nothing unless copied out,
  // and their places stay sparse until then.
  uint64_t CapturedBytes() const {
    return capture_ != nullptr ? capture_->captured_bytes() + capture_->held_bytes() / 2 : 0;
  }
  uint64_t CaptureBound() const;
  // The log's bytes that force a journal boundary (three quarters of it an
  // asynchronous snapshot): snapshot_max_log_bytes, or
  // snapshot_log_state_ratio times the last snapshot's bytes if more.
  uint64_t LogBound() const;
  // The journal's growth at which the agent places a boundary of its own
  // (MaybePlaceOwnBoundary): journal_boundary_bytes; where LogBound raised
  // snapshot_max_log_bytes, raised by the same factor and an eighth more.
  uint64_t OwnBoundaryBytes() const;
  bool CapturePressure();
  uint64_t capture_mark_started_ = 0;
  uint64_t holds_changed_seen_ = 0;  // held sources found changed, as CapturePressure last saw
  uint64_t capture_mark_released_ = 0;
  // The synchronous snapshot's request and mark, released once the journal
  // recorded its boundary (0: none).
  uint64_t boundary_snapshot_seq_ = 0;
  uint64_t boundary_snapshot_mark_ = 0;
  uint64_t capture_waits_ = 0;  // CapturePressure waited for a snapshot
  // Asynchronous snapshots since the journal's boundary; every
  // kInsidePerBoundary-th snapshot is a journal boundary.
  uint64_t inside_since_boundary_ = 0;
  static constexpr uint64_t kInsidePerBoundary = 8;
  // What counts against snapshot_max_log_bytes inside a one-rank job's
  // journal minibatch: the minibatch log's live bytes and what the setup
  // log grew by since its lowest point in this journal minibatch (the
  // cuBLASLt descriptors a step creates and destroys stay in it until a
  // snapshot moves the replay's start and a compaction drops them: ~1000
  // calls a step for a PyTorch transformer).
  uint64_t LogBytesTowardBound();
  uint64_t bound_minibatch_ = ~uint64_t{0};
  uint64_t bound_setup_base_ = 0;
  // From three quarters of the bound, an asynchronous snapshot is due only
  // once those bytes passed this: what the last finished one left plus an
  // eighth of the bound. What a snapshot cannot release (the minibatch
  // log's records, inline payloads) made every step due before, one
  // snapshot after another until the bound forced a journal boundary.
  uint64_t bound_floor_ = 0;
  uint64_t bound_snapshots_ = 0;  // made due by the bound (the exit line)
  // One rank, inside the minibatch: whether a due snapshot waits (this step
  // skipped) for its next file still being made, at most half the timed
  // interval from the first step that waited (next_file_wait_since_ns_).
  // The waits and the steps they skipped go to the exit line.
  bool WaitsForNextFile();
  int64_t next_file_wait_since_ns_ = 0;
  uint64_t next_file_wait_taken_ = 0;  // snapshots taken when it began
  uint64_t next_file_waits_ = 0;
  uint64_t next_file_wait_steps_ = 0;
  bool inside_unsupported_ = false;
  void MaybeSnapshotChaos(SessionOptions::Chaos::Point point, uint64_t minibatch);
  std::unique_ptr<SnapshotStore> snapshots_;
  // Large uploads the device journals (null until the first one; see
  // UploadCaptureFor).
  UploadCaptureSink* UploadCaptureFor(const transport::RecordHeader& rec);
  std::unique_ptr<UploadCapturePool> capture_;
  std::unique_ptr<HoldPlaces> hold_places_;
  bool capture_failed_ = false;
  // This session continues a dead agent's journal (its capture files stay).
  bool continued_journal_ = false;
  // Whether the step boundary before the request being journaled takes a
  // snapshot (SessionOptions::snapshot_every); false: it stays a step inside
  // the journal's minibatch.
  bool SnapshotDue();
  uint64_t steps_since_snapshot_ = 0;
  uint64_t steps_skipped_ = 0;
  int64_t last_snapshot_end_ns_ = 0;
  int64_t last_snapshot_ns_ = 0;
  // --snapshot_every=auto: the next snapshot once the time since the last
  // is this many times what it took (at most 1/(1+49) = 2 % of the job's
  // time in snapshots; the replay after a failure spans up to ~49 snapshot
  // durations of steps). An asynchronous snapshot costs the application
  // more than its own duration suggests (a PyTorch one-rank job on an H100
  // VM lost ~0.2 of its mean step with 19: docs/performance.md).
  static constexpr int64_t kSnapshotIntervalFactor = 49;
  // One rank, --snapshot_every=auto: a journal boundary is due once the
  // minibatch log fills half its first chunk (Journal::minibatch_first_chunk)
  // and the time since the last journal boundary is this many times what
  // that one took on the executor (its synchronous snapshot and the
  // segment's rotation: at most 1 % of the job's time). A log kept inside
  // its first chunk is reused, hot; one that grows past it cost a 50 us
  // training step ~10 % (docs/performance.md, "The minibatch log kept in
  // its first chunk"). A job whose snapshots are large keeps the other
  // bounds (time, --snapshot_max_log_mib).
  static constexpr int64_t kLogChunkBoundaryFactor = 100;
  bool LogChunkBoundaryDue(int64_t within_ns = 0) const;
  // Journal boundaries placed by the executor (a synchronous snapshot and a
  // new minibatch): when the last one ended and what it took.
  int64_t last_journal_boundary_end_ns_ = 0;
  int64_t last_journal_boundary_ns_ = 0;
  uint64_t log_chunk_boundaries_ = 0;
  int64_t last_snapshot_log_ns_ = 0;
  void NoteJournalBoundary(int64_t start_ns);
  // --snapshot_every=auto: whether the time since the last snapshot ended
  // makes the next one due (kSnapshotIntervalFactor, snapshot_min_interval_ns).
  // `within_ns`: true that long before it is due (the next snapshot's file
  // made ahead; LogChunkBoundaryDue alike).
  bool TimedSnapshotDue(int64_t within_ns = 0) const;
  int64_t TimedSnapshotInterval() const;
  // Without the spare (SessionOptions::snapshot_keep_spare false): once the
  // next snapshot comes near (by the clock, the cadence, the journal's
  // bytes `live_log_bytes` nearing `due_at_bytes`, where they make one due,
  // or with `log_chunk` the journal boundary that keeps the minibatch log in
  // its first chunk), its file is made ahead on the store's thread
  // (SnapshotStore::MakeNextFileAhead).
  void MakeNextSnapshotFile(uint64_t live_log_bytes, uint64_t due_at_bytes, bool log_chunk);
  uint64_t last_live_bytes_ = 0;  // live_log_bytes at the last call, and when
  int64_t last_live_ns_ = 0;
  int64_t created_ns_ = 0;  // MonotonicNanos() when the session was made
  int64_t last_plan_ns_ = 0;  // the last step's PlanSnapshot inside the minibatch
  // REVENANT_JOURNAL_LOG_CHUNK_BOUNDARY, else kLogChunkBoundaryFactor (0: off).
  int64_t log_chunk_factor_ = 0;
  struct SnapshotTotals {
    uint64_t count = 0, bytes = 0, failures = 0, last_bytes = 0, reused = 0, inside = 0;
    double ms = 0, max_ms = 0;  // on the executor's critical path
    double total_ms = 0;        // to the finished file
  } snapshot_totals_;
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_SESSION_H_
