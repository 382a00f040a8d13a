#include "agent/session.h"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <fstream>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "agent/journaling_inline.h"
#include "agent/profiler.h"
#include "agent/validator.h"
#include "api/hook_structs.h"
#include "api/reply_prefix.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "journal/api_name.h"
#include "journal/journal.h"
#include "recovery/replay_plan.h"

#include "common/events.h"
#include "common/kv.h"
#include "common/logging.h"
#include "common/timeline.h"
#include "transport/control_socket.h"

namespace revenant {
namespace agent {

Session::Session(Backend* backend, std::unique_ptr<transport::ShmServerChannel> channel,
                 int control_fd, std::string job_dir, SessionOptions options)
    : backend_(backend),
      channel_(std::move(channel)),
      control_fd_(control_fd),
      job_dir_(std::move(job_dir)),
      options_(std::move(options)) {
  created_ns_ = MonotonicNanos();
  log_chunk_factor_ =
      knobs::Int(knobs::Id::kJournalLogChunkBoundary, 0, 1000000).value_or(kLogChunkBoundaryFactor);
  ctx_.backend = backend_;
  ctx_.handles = &handles_;
  ctx_.session = this;
  if (channel_ != nullptr && channel_->reply_slots() > 0) {
    backend_->PinAgentBuffer(channel_->ReplyBuffer(0),
                             size_t{channel_->reply_slots()} * channel_->reply_data_size());
  }
  journaling_ = std::make_unique<InlineJournaling>(AsJournalingHost(), channel_.get(),
                                                   options_.journal.get());
  if (options_.snapshots) {
    SnapshotStore::Options so;
    so.keep_spare = options_.snapshot_keep_spare;
    so.spare_ahead = options_.snapshot_spare_ahead;
    so.staged = options_.snapshot_staged;
    so.register_behind = options_.snapshot_register_behind;
    if (std::optional<int64_t> mib = knobs::Int(knobs::Id::kSnapshotStagingMib, 1, 4096)) {
      so.staging_bytes = static_cast<size_t>(*mib) << 20;
    }
    if (std::optional<int64_t> ms = knobs::Int(knobs::Id::kNextFileDelayMs, 0, 60000);
        ms && *ms > 0) {
      const std::chrono::milliseconds delay(*ms);
      so.before_next_file = [delay] { std::this_thread::sleep_for(delay); };
    }
    // Half the CPUs, up to 8: a synchronous snapshot stops the executor, and
    // the checksums of its allocations share the threads (Crc32cMany).
    so.crc_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency() / 2, 1u, 8u));
    snapshots_ = std::make_unique<SnapshotStore>(job_dir_ + "/snapshots", options_.rank, so);
    // The device copies every allocation straight into the snapshot's
    // mapped, registered file; the copies are queued, then waited for.
    Backend* b = backend_;
    SnapshotCopier copier;
    copier.copy = [b](uint64_t addr, void* dst, size_t n) -> absl::Status {
      const cudaError_t e = b->Memcpy(dst, reinterpret_cast<const void*>(addr), n,
                                      cudaMemcpyDeviceToHost, nullptr, /*async=*/true);
      if (e != cudaSuccess) return absl::InternalError(absl::StrCat("device copy error ", e));
      return absl::OkStatus();
    };
    copier.wait = [b]() -> absl::Status {
      const cudaError_t e = b->cudaDeviceSynchronize();
      if (e != cudaSuccess) return absl::InternalError(absl::StrCat("device copy error ", e));
      return absl::OkStatus();
    };
    copier.register_host = [b](void* p, size_t n) -> absl::Status {
      const cudaError_t e = b->RegisterSharedHost(p, n, 0);
      if (e != cudaSuccess) return absl::InternalError(absl::StrCat("host register error ", e));
      return absl::OkStatus();
    };
    copier.unregister_host = [b](void* p) { b->UnregisterSharedHost(p); };
    snapshots_->SetCopier(std::move(copier));
  }
  if (options_.validate_every > 0) {
    ValidatorOptions vo;
    vo.every = options_.validate_every;
    vo.rank = options_.rank;
    vo.job_root = JobRootOf(job_dir_);
    validator_ = std::make_unique<Validator>(this, vo);
  }
}

Session::~Session() {
  ForgetDeviceState();
  if (channel_ != nullptr && channel_->reply_slots() > 0) {
    backend_->UnpinAgentBuffer(channel_->ReplyBuffer(0));
  }
  if (control_fd_ >= 0) close(control_fd_);
}

void Session::ForgetDeviceState() {
  // Everything the application built dies with its connection; shared host
  // ranges are unmapped after the backend stopped using them. The snapshot
  // files stay (a replacement may need them); their registrations go first.
  if (snapshots_ != nullptr) {
    ReapSnapshot(/*wait=*/true);
    snapshots_->ReleaseMappings();
  }
  if (snapshot_done_word_ != nullptr) {
    backend_->UnregisterSharedHost(snapshot_done_word_);
    munmap(snapshot_done_word_, 4096);
    snapshot_done_word_ = nullptr;
  }
  backend_->Reset();
  handles_.Clear();
  modules_.clear();
  kernels_.clear();
  std::map<uint64_t, uint64_t> shared;
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    shared.swap(shared_host_);
  }
  for (const auto& [addr, size] : shared) {
    backend_->UnregisterSharedHost(reinterpret_cast<void*>(addr));
    munmap(reinterpret_cast<void*>(addr), size);
  }
}

namespace {
// The requests whose launch the backend may hold back (LaunchHook without
// attributes; a cooperative one is launched at once by the backend).
bool IsPlainLaunch(uint32_t api_id) {
  switch (static_cast<api::ApiId>(api_id)) {
    case api::ApiId::cudaLaunchKernel:
    case api::ApiId::__cudaLaunchKernel:
    case api::ApiId::__cudaLaunchKernel_ptsz:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Session::Run() {
  transport::ShmServerChannel* ch = channel_.get();
  absl::StatusOr<std::unique_ptr<transport::PeerMonitor>> monitor =
      transport::PeerMonitor::Start(control_fd_, [this, ch] {
        disconnected_.store(true);
        ch->MarkPeerDead();
      });
  if (!monitor.ok()) {
    REVENANT_LOG(ERROR, "agent") << "cannot watch the application: " << monitor.status();
    return;
  }
  const uint32_t pid = ch->client_pid();
  REVENANT_LOG(DEBUG, "agent") << "serving application pid " << pid;
  PostDeferredReplies();
  journaling_ = MakeJournalingMode(options_.journal_thread, AsJournalingHost(), ch,
                                   options_.journal.get(), JournalThreadSettings());
  journaling_->Start();
  uint64_t executed = 0;
  uint32_t last_api = 0;
  while (true) {
    // Write-behind: what ran is journaled and released before waiting.
    absl::StatusOr<const transport::RecordHeader*> rec = journaling_->PeekBeforeWaiting();
    if (!rec.ok() || *rec == nullptr) rec = ch->Peek(absl::Now() + absl::Milliseconds(200));
    if (!rec.ok()) {
      if (absl::IsDeadlineExceeded(rec.status()) && !disconnected_.load()) continue;
      if (!absl::IsUnavailable(rec.status()) && !absl::IsDeadlineExceeded(rec.status())) {
        // A request the agent cannot even frame (a length past the ring, a
        // record smaller than its header): nothing after it can be trusted.
        // This application is dropped and told why on its control socket,
        // so that its shim fails its calls instead of waiting for a
        // replacement; the agent goes on to serve the next application.
        const std::string why = absl::StrCat("request ring of application pid ", pid,
                                             " is corrupt: ", rec.status().ToString());
        REVENANT_LOG(ERROR, "agent") << "dropping application pid " << pid << " after "
                                     << executed << " requests: " << why;
        (void)transport::SendFrame(control_fd_, FormatKv({{"op", "dropped"}, {"error", why}}));
      }
      break;
    }
    const transport::RecordHeader* r = *rec;
    const bool synchronous = r->reply_slot >= 0;
    last_api = r->api_id;
    // A plain asynchronous launch may wait in the backend for the next
    // request when one is already in the ring (Backend::LaunchKernelMayHold).
    ctx_.more_requests = !synchronous && IsPlainLaunch(r->api_id) &&
                         ch->requests().head_position() >
                             ch->requests().read_position() + r->stride();
    Execute(*r);
    ctx_.more_requests = false;
    const uint64_t seq = r->seq;
    ch->Advance();
    executed_seq_ = seq;
    journaling_->AfterRun(seq, synchronous);
    ++executed;
  }
  FlushLaunches();
  stopped_serving_.store(true);
  journaling_->Stop();
  journaling_ = std::make_unique<InlineJournaling>(AsJournalingHost(), ch, options_.journal.get());
  if (disconnected_.load() && !ch->shutdown_requested()) {
    // The shim marks its channel at a normal exit: this one was killed or
    // crashed (or left by _exit), possibly in the middle of a request.
    REVENANT_LOG(WARNING, "agent")
        << "application pid " << pid
        << " went away without a normal exit (killed or crashed) after " << executed
        << " requests"
        << (executed > 0 ? absl::StrCat(", the last ", api::Traits(last_api).name, " (seq ",
                                        executed_seq_, ")")
                         : std::string())
        << "; its session ends, the agent serves the next application";
  }
  ReportAtExit();
  REVENANT_LOG(DEBUG, "agent") << "application pid " << pid << " disconnected after "
                               << executed << " requests";
}

// What the session cost, logged when its application is gone: requests,
// host memory, waits, the journal, captured uploads and snapshots.
void Session::ReportAtExit() {
  if (!exec_stats_.empty()) REVENANT_LOG(INFO, "agent") << "requests at exit: " << ExecStatsReport();
  for (const std::string& line : timeline::Lines()) REVENANT_LOG(INFO, "agent") << line;
  timeline::Clear();
  if (const std::string b = backend_->StatsAtExit(); !b.empty()) REVENANT_LOG(INFO, "agent") << b;
  if (profiler::Running()) {
    REVENANT_LOG(INFO, "agent") << profiler::Report([](uint32_t id) {
      return id < api::kApiCount ? std::string(api::Traits(id).name) : absl::StrCat("api ", id);
    });
  }
  {
    // The agent's host memory (what a job pays per GPU beside the journal
    // and snapshot files, which the lines below count).
    std::ifstream status("/proc/self/status");
    std::string line, rss, hwm;
    while (std::getline(status, line)) {
      if (absl::StartsWith(line, "VmRSS:")) rss = std::string(absl::StripAsciiWhitespace(line.substr(6)));
      if (absl::StartsWith(line, "VmHWM:")) hwm = std::string(absl::StripAsciiWhitespace(line.substr(6)));
    }
    if (!rss.empty()) {
      REVENANT_LOG(INFO, "agent") << "host memory at exit: resident " << rss << ", peak " << hwm;
    }
  }
  if (const std::string w = transport::shm_internal::WaitStatsReport(); !w.empty()) {
    REVENANT_LOG(INFO, "agent") << "waits at exit: " << w;
  }
  if (options_.journal != nullptr) {
    const journal::JournalStats st = options_.journal->stats();
    REVENANT_LOG(INFO, "agent") << "journal at exit: setup " << st.setup_file_bytes
                                << " bytes (" << st.setup_live_entries << " live entries), minibatch "
                                << st.minibatch_file_bytes << " bytes, " << st.compactions
                                << " compactions, minibatch " << options_.journal->minibatch()
                                << ", payload files reused " << st.payload_files_reused
                                << ", payload pages made ahead " << (st.payload_bytes_ahead >> 20)
                                << " MiB, release markers " << st.release_markers
                                << " (payload pages freed behind snapshots "
                                << (st.payload_bytes_freed >> 20) << " MiB)";
    // What fills a large setup log (calls journaled as state between
    // compactions): its biggest writers.
    if (st.setup_file_bytes >= (16u << 20)) {
      std::string top;
      for (const journal::Journal::ApiBytes& a : options_.journal->SetupBytesByApi(6)) {
        absl::StrAppend(&top, top.empty() ? "" : "; ", journal::ApiName(a.api_id), " ",
                        a.records, " records ", a.bytes >> 10, " KiB");
      }
      REVENANT_LOG(INFO, "agent") << "setup log at exit, most bytes appended by: " << top;
    }
    if (options_.journal->timing()) {
      const RequestJournal& j = *options_.journal;
      REVENANT_LOG(INFO, "agent") << absl::StrFormat(
          "journal time at exit: %.3f ms in %d calls (%.3f us per call), %d minibatches",
          j.busy_ns() / 1e6, j.calls(), j.calls() ? j.busy_ns() / 1e3 / j.calls() : 0.0,
          j.minibatch()) << j.TimingBreakdown();
    }
  }
  if (capture_ != nullptr && options_.holds != nullptr) {
    const HoldTable& t = *options_.holds;
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "held uploads at exit: %d uploads held (%.1f MiB), copied out: %d by the application "
        "(writes into held sources), %d by the agent (device writes into them), %d at once (no "
        "slot); %d held now; %d hashed by the device, %d sources found changed at their copy "
        "out; %d copies into graphs (not held)",
        capture_->holds(), capture_->held_bytes() / 1048576.0, t.copied_by_app(),
        t.copied_by_agent(), capture_->holds_copied_at_once(), t.held(), capture_->holds_hashed(),
        t.changed(), capture_->holds_into_graphs());
  }
  if (capture_ != nullptr) {
    // The capture files are never shrunk: their bytes are the most the
    // captures held.
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "captured uploads at exit: %d uploads journaled by the device (%.1f MiB), %.1f MiB of "
        "capture files, %d capture files made, %d times one was filled again%s",
        capture_->captures(), capture_->captured_bytes() / 1048576.0,
        capture_->bytes() / 1048576.0, capture_->files_made(), capture_->reuses(),
        snapshots_ == nullptr || options_.world_size != 1
            ? std::string()
            : absl::StrFormat("; a snapshot once %.1f MiB were captured since the last, %d "
                              "waits for one in flight",
                              CaptureBound() / 1048576.0, capture_waits_));
  }
  if (snapshots_ != nullptr) ReapSnapshot(/*wait=*/true);
  if (snapshots_ != nullptr && snapshot_totals_.count > 0) {
    const SnapshotTotals& t = snapshot_totals_;
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "snapshots at exit: %d boundaries, %.3f MiB per boundary, %.2f ms mean, %.2f ms max "
        "per boundary, %d steps between snapshots (journaled inside their minibatch)%s; "
        "%d asynchronous (inside the journal's minibatch), %.2f ms mean to the finished file; "
        "%d made due by the journal's bytes (bound %.1f MiB: --snapshot_max_log_mib, or "
        "--snapshot_log_state_ratio times the state); %d journal "
        "boundaries keeping the minibatch log in its first chunk (%.1f MiB; the last "
        "journal boundary took %.2f ms)",
        t.count, t.bytes / 1048576.0 / t.count, t.ms / t.count, t.max_ms, steps_skipped_,
        t.failures ? absl::StrCat(", ", t.failures, " FAILED") : std::string(), t.inside,
        t.total_ms / t.count, bound_snapshots_, LogBound() / 1048576.0,
        log_chunk_boundaries_, options_.journal->minibatch_first_chunk() / 1048576.0,
        last_journal_boundary_ns_ / 1e6);
    const double live = static_cast<double>(t.last_bytes);
    // A next file made ahead that no snapshot will take (without the spare).
    const uint64_t next_late = snapshots_->next_files_late();
    const double next_lead_ms = snapshots_->next_file_lead_ms();
    const uint64_t next_ahead = snapshots_->next_files_ahead();
    snapshots_->DropNextFileAhead();
    snapshots_->TakeSpareAhead();
    if (!options_.snapshot_keep_spare) {
      // The files hold 2x the live bytes from each next file made ahead to
      // the end of its snapshot, and during every snapshot (the older one
      // stays whole until the new one is renamed).
      const double run_ms = (MonotonicNanos() - created_ns_) / 1e6;
      REVENANT_LOG(INFO, "agent") << absl::StrFormat(
          "snapshot files without the spare: 1x the live bytes between snapshots, 2x for %.1f "
          "%% of the run (%d next files made ahead of their snapshot, %.1f ms ahead on the "
          "mean, the last made in %.1f ms; %d snapshots found theirs still being made; %d "
          "waited for theirs over %d steps; the snapshots themselves %.1f ms)",
          run_ms > 0 ? 100.0 * (next_lead_ms + t.total_ms) / run_ms : 0.0, next_ahead,
          next_ahead > 0 ? next_lead_ms / next_ahead : 0.0, snapshots_->spare_ahead_ms(),
          next_late, next_file_waits_, next_file_wait_steps_, t.total_ms);
    }
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "snapshot memory at exit: live bytes %.3f MiB, snapshot files %.3f MiB (%.2fx live), "
        "registered %.3f MiB, %d files mapped for %d snapshots (%d written into the spare, %d "
        "made without their pages); %d "
        "spares made ahead on the store's thread (the last in %.1f ms), %d failed; %d "
        "synchronous and %d asynchronous snapshots copied through the staging buffers into "
        "files not registered%s",
        live / 1048576.0, snapshots_->file_bytes() / 1048576.0,
        live > 0 ? snapshots_->file_bytes() / live : 0.0,
        snapshots_->registered_bytes() / 1048576.0, snapshots_->files_mapped(), t.count, t.reused,
        snapshots_->files_made_lazily(), snapshots_->spares_made_ahead(), snapshots_->spare_ahead_ms(),
        snapshots_->spares_ahead_failed(), snapshots_->staged_writes(),
        snapshots_->staged_drains(), snapshots_->staging_failures() == 0
            ? std::string()
            : absl::StrCat(" (", snapshots_->staging_failures(),
                           " found no staging and registered their file: ",
                           snapshots_->staging_failure().ToString(), ")"));
    if (snapshots_->registered_behind() > 0) {
      REVENANT_LOG(INFO, "agent") << absl::StrFormat(
          "snapshot files registered behind a staged snapshot on the store's thread: %d (%.1f "
          "ms)",
          snapshots_->registered_behind(), snapshots_->register_behind_ms());
    }
    const SnapshotStore::FirstFileTake& take = snapshots_->first_file_take();
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "the first snapshot's file: %s (%.1f ms making and growing it off the critical path; "
        "the snapshot waited %.1f ms for it (%.3f of its %.3f MiB with their pages made ahead), "
        "cut it (behind the copies) or grew it from %.3f MiB in %.1f ms, "
        "registered it in %.1f ms%s)",
        snapshots_->first_file_used() ? "made ahead" : "made by the snapshot",
        snapshots_->first_file_ms(), take.wait_ms,
        std::min(take.resident_bytes, take.snapshot_bytes) / 1048576.0,
        take.snapshot_bytes / 1048576.0, take.made_bytes / 1048576.0, take.resize_ms,
        take.register_ms,
        snapshots_->staged_writes() > 0 ? "; copied through the staging buffers" : "");
  }
}

// One request: journal (log before apply, by this thread or the journal
// thread), run, reply. Each step's rules are in the function that does it.
namespace {
// The agent's own mappings that overlap [addr, addr + size), as
// /proc/self/maps shows them (for the log when the range cannot be mapped).
std::string MappingsInTheWay(uint64_t addr, uint64_t size) {
  std::ifstream maps("/proc/self/maps");
  std::string line, found;
  while (std::getline(maps, line)) {
    uint64_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2) continue;
    if (lo < addr + size && addr < hi) found += absl::StrCat(found.empty() ? "" : "; ", line);
  }
  return found.empty() ? "none found" : found;
}

bool ExecStatsOn() {
  static const bool on = knobs::Bool(knobs::Id::kCallStats).value_or(false);
  return on;
}

// The state an ncclCommGetAsyncError request found (its OUT value, from the
// reply it encoded into `out`); ncclSuccess when there is none.
int32_t PolledNcclError(const transport::RecordHeader& rec, absl::string_view out) {
  hooks::ncclCommGetAsyncErrorRequest req;
  wire::Decoder in(rec.body(), rec.body_size());
  if (!req.Decode(in)) return ncclSuccess;
  hooks::ncclCommGetAsyncErrorReply reply;
  wire::Decoder d(out.data(), out.size());
  ncclResult_t found = ncclSuccess;
  if (!reply.Decode(d, req) || reply.asyncError.CopyTo(&found, sizeof(found)) != sizeof(found)) {
    return ncclSuccess;
  }
  return found;
}
}  // namespace

std::string Session::ExecStatsReport() const {
  std::vector<size_t> ids;
  uint64_t requests = 0, ns = 0, run_ns = 0;
  for (size_t i = 0; i < exec_stats_.size(); ++i) {
    if (exec_stats_[i].requests == 0) continue;
    ids.push_back(i);
    requests += exec_stats_[i].requests;
    ns += exec_stats_[i].ns;
    run_ns += exec_stats_[i].run_ns;
  }
  std::sort(ids.begin(), ids.end(),
            [&](size_t a, size_t b) { return exec_stats_[a].ns > exec_stats_[b].ns; });
  std::string out = absl::StrFormat("%d requests, %.3f ms executing them (%.3f ms of it in the "
                                    "backend); by time:",
                                    requests, ns / 1e6, run_ns / 1e6);
  int shown = 0;
  for (size_t i : ids) {
    if (++shown > 30) break;
    const ExecCounter& c = exec_stats_[i];
    absl::StrAppend(&out, absl::StrFormat("\n  %-40s %9d requests %10.3f ms %8.2f us each "
                                          "(run %.2f us) max %.1f us",
                                          api::Traits(static_cast<uint32_t>(i)).name, c.requests,
                                          c.ns / 1e6, c.ns / 1e3 / c.requests,
                                          c.run_ns / 1e3 / c.requests, c.max_ns / 1e3));
  }
  return out;
}

void Session::Execute(const transport::RecordHeader& rec) {
  static const int profile_hz =
      static_cast<int>(knobs::Int(knobs::Id::kProfileHz, 0, 20000).value_or(0));
  if (profile_hz > 0) {
    thread_local const bool started = profiler::StartOnThisThread(profile_hz);
    (void)started;
    profiler::Enter(rec.api_id);
  }
  struct LeaveProfile {
    bool on;
    ~LeaveProfile() { if (on) profiler::Leave(); }
  } leave{profile_hz > 0};
  // NCCL's communicator calls (their bootstrap's sockets) are not sampled.
  static const std::vector<bool> nccl_comm_call = [] {
    std::vector<bool> v(api::kApiCount, false);
    for (uint32_t id = 0; id < api::kApiCount; ++id) {
      const absl::string_view name = api::Traits(id).name;
      v[id] = absl::StartsWith(name, "ncclComm") || name == "ncclGetUniqueId";
    }
    return v;
  }();
  const profiler::ScopedPause pause(profile_hz > 0 && rec.api_id < api::kApiCount &&
                                    nccl_comm_call[rec.api_id]);
  const bool stats = ExecStatsOn() && rec.api_id < api::kApiCount;
  if (!stats && !timeline::Enabled()) {
    ExecuteRequest(rec);
    return;
  }
  // Before the request: ExecuteRequest counts its backend time in it.
  if (stats && exec_stats_.empty()) exec_stats_.resize(api::kApiCount);
  const int64_t t0 = MonotonicNanos();
  ExecuteRequest(rec);
  const int64_t t1 = MonotonicNanos();
  if (stats) {
    ExecCounter& c = exec_stats_[rec.api_id];
    const uint64_t ns = static_cast<uint64_t>(t1 - t0);
    ++c.requests;
    c.ns += ns;
    c.max_ns = std::max(c.max_ns, ns);
  }
  // A request the executor spent over a millisecond on (a synchronous call
  // waiting for the device, or the agent's own work in its turn): what a
  // slow step of the application may have waited for. At most half the
  // timeline's room (a job synchronizing every step has one a step), so
  // that the rarer events of a long job still fit.
  if (t1 - t0 >= 1000000 && timeline::Enabled() && rec.api_id < api::kApiCount &&
      slow_requests_kept_ < timeline::kMaxEvents / 2) {
    ++slow_requests_kept_;
    timeline::Add("executor: request over 1 ms", t0, t1,
                  api::Traits(static_cast<uint32_t>(rec.api_id)).name);
  }
}

void Session::ExecuteRequest(const transport::RecordHeader& rec) {
  const api::ApiTraits& traits = api::Traits(static_cast<uint32_t>(rec.api_id));
  const bool has_reply =
      rec.reply_slot >= 0 && static_cast<uint32_t>(rec.reply_slot) < channel_->reply_slots();
  if (rec.reply_slot >= 0 && !has_reply) {
    REVENANT_LOG(WARNING, "agent") << "request " << rec.seq << " names reply slot "
                                   << rec.reply_slot << " which does not exist; ignored";
    journaling_->BeforeReply(rec);  // as every synchronous request (the loop relies on it)
  }
  // Held launches are issued before any other request runs (or is
  // journaled: a boundary's snapshot must see their work).
  if (!IsPlainLaunch(rec.api_id)) FlushLaunches();
  JournalingMode::Turn turn = journaling_->BeforeRun(rec);
  if (rec.api_id == hooks::kMarkStepApiId) {
    if (turn.here) MarkStepHere(rec);
    journaling_->Journaled(rec, &turn);
    if (has_reply) {
      // The shim sends the marker without a reply slot; a client that names
      // one is answered (success) rather than left waiting for ever.
      journaling_->BeforeReply(rec);
      ReplyPrefix prefix;
      std::memcpy(channel_->ReplyBuffer(rec.reply_slot), &prefix, sizeof(prefix));
      channel_->PostReply(rec.reply_slot, rec.seq, 0, kReplyPrefixSize);
    }
    return;
  }
  MaybePlaceOwnBoundary(rec, turn.here);
  NoteSubmission(rec);
  MaybeChaos(SessionOptions::Chaos::Point::kBeforeAppend);
  if (turn.here) JournalBeforeRun(rec);
  journaling_->Journaled(rec, &turn);
  if (validator_ != nullptr &&
      (traits.journal == api::JournalClass::kState ||
       SymbolWriteRegion(rec.api_id, absl::string_view(rec.body(), rec.body_size())) != 0)) {
    validator_->NoteStateRequest(traits.name);
  }
  if (SkipSuperseded(rec, traits)) return;
  MaybeChaos(SessionOptions::Chaos::Point::kAfterAppend);
  if (!exec_stats_.empty() && rec.api_id < exec_stats_.size()) {
    const int64_t t0 = MonotonicNanos();
    RunAndReply(rec, traits, has_reply);
    exec_stats_[rec.api_id].run_ns += static_cast<uint64_t>(MonotonicNanos() - t0);
  } else {
    RunAndReply(rec, traits, has_reply);
  }
  if (traits.journal == api::JournalClass::kState) PrepareFirstSnapshotFile();
}

void Session::PrepareFirstSnapshotFile() {
  if (snapshots_ == nullptr || !snapshots_->wants_first_file()) return;
  // The allocations so far (state requests make them): the file grows with
  // them on the store's thread (SnapshotStore::PrepareFirstFile).
  snapshots_->PrepareFirstFile(SnapshotStore::FileSizeFor(backend_->DeviceAllocations()));
}

// An explicit minibatch marker (revenantMarkStep), journaled here.
void Session::MarkStepHere(const transport::RecordHeader& rec, bool forced) {
  FlushLaunches();  // the boundary's snapshot copies what they write
  if (snapshots_ != nullptr && PlanSnapshot(rec.seq, forced) != SnapshotStep::kBoundary) {
    return;  // a step inside the journal's minibatch
  }
  if (validator_ != nullptr) {
    validator_->MinibatchEnding(options_.journal->minibatch(), options_.journal->dir());
  }
  const int64_t boundary_start_ns = MonotonicNanos();
  if (snapshots_ != nullptr) SnapshotBoundary(options_.journal->minibatch() + 1, rec.seq);
  // The marked step's request itself is not journaled: the requests after
  // it start the minibatch.
  if (absl::Status s = options_.journal->MarkStep(rec.seq + 1); !s.ok()) JournalFailed(s);
  NoteJournalBoundary(boundary_start_ns);
  if (snapshots_ != nullptr) SnapshotRecorded(options_.journal->minibatch());
  // Collective ordinals restart per minibatch, as at a detected boundary.
  backend_->MarkBoundary(options_.journal->minibatch());
  NoteMinibatchStarted(options_.journal->minibatch());
  if (validator_ != nullptr) validator_->MinibatchStarted(options_.journal->minibatch());
}

void Session::MaybePlaceOwnBoundary(const transport::RecordHeader& rec, bool journaled_here) {
  if (options_.journal_boundary_bytes == 0 || options_.journal == nullptr) return;
  if (!own_boundary_due_) {
    // The journal's size costs its lock: looked at every few requests.
    constexpr uint64_t kCheckEvery = 64;
    if (++own_boundary_checks_ % kCheckEvery != 0) return;
    const uint64_t minibatch = options_.journal->minibatch();
    // What a replay may still read: payloads released behind a snapshot
    // (journal::Journal::ReleasePayloadsBefore) do not count.
    const journal::JournalStats st = options_.journal->stats();
    const uint64_t bytes = st.setup_file_bytes + options_.journal->live_minibatch_bytes();
    if (minibatch != own_boundary_minibatch_ || bytes < own_boundary_base_bytes_) {
      // A boundary since the last look (or a compaction): count from here.
      own_boundary_minibatch_ = minibatch;
      own_boundary_base_bytes_ = bytes;
      return;
    }
    if (bytes - own_boundary_base_bytes_ < OwnBoundaryBytes()) return;
    if (!options_.snapshots || options_.world_size != 1) {
      if (!own_boundary_refused_) {
        own_boundary_refused_ = true;
        REVENANT_LOG(WARNING, "agent") << absl::StrFormat(
            "rank %d: the journal grew by %.2f MiB (to %.2f MiB) without a minibatch boundary; "
            "the agent cannot place one of its own: %s. It keeps growing: mark training steps "
            "with revenantMarkStep()",
            options_.rank, (bytes - own_boundary_base_bytes_) / 1048576.0, bytes / 1048576.0,
            !options_.snapshots
                ? "boundary snapshots are off (--snapshots), and without one the state before "
                  "the boundary could not be restored"
                : absl::StrCat("a job of ", options_.world_size == 0 ? std::string("unknown size")
                                                                     : absl::StrCat(options_.world_size, " ranks"),
                               " needs its boundaries at the same request on every rank"));
      }
      return;
    }
    own_boundary_due_ = true;
  }
  if (!journaled_here) return;  // the journal thread has requests in hand: a later one
  own_boundary_due_ = false;
  const journal::JournalStats before = options_.journal->stats();
  const uint64_t before_bytes = before.setup_file_bytes + options_.journal->live_minibatch_bytes();
  const uint64_t grown = before_bytes - std::min(before_bytes, own_boundary_base_bytes_);
  MarkStepHere(rec, /*forced=*/true);
  // A plan write-behind made for this request came before this boundary:
  // JournalBeforeRun plans again after it (as when nothing was planned).
  if (planned_seq_ == rec.seq) planned_seq_ = 0;
  ++own_boundaries_;
  const journal::JournalStats after = options_.journal->stats();
  own_boundary_minibatch_ = options_.journal->minibatch();
  own_boundary_base_bytes_ = after.setup_file_bytes + options_.journal->live_minibatch_bytes();
  if (own_boundaries_ <= 3 || own_boundaries_ % 100 == 0) {
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "rank %d: the journal grew by %.2f MiB without a minibatch boundary (none detected or "
        "marked): the agent placed the boundary of minibatch %d itself, with its snapshot, "
        "before request %d (%d such boundaries; REVENANT_JOURNAL_BOUNDARY_KIB=%d, used as %d KiB: "
        "raised with the log's bound by the state where it was); journal %.2f MiB -> %.2f MiB",
        options_.rank, grown / 1048576.0, own_boundary_minibatch_, rec.seq, own_boundaries_,
        options_.journal_boundary_bytes >> 10, OwnBoundaryBytes() >> 10,
        before_bytes / 1048576.0,
        own_boundary_base_bytes_ / 1048576.0);
  }
}

void Session::NoteSubmission(const transport::RecordHeader& rec) {
  ++requests_seen_;
  last_api_id_ = rec.api_id;
  static const bool diagnostics = [] {
    return knobs::Bool(knobs::Id::kDiagnostics).value_or(false);
  }();
  if (diagnostics) {
    REVENANT_LOG(INFO, "agent") << "submit seq " << rec.seq << " "
                                << api::Traits(static_cast<uint32_t>(rec.api_id)).name << " ("
                                << rec.body_size() << " bytes"
                                << (rec.reply_slot >= 0 ? ", sync" : ", async") << ")";
  }
}

// Log before apply; a request that starts a minibatch starts it in the
// backend, the snapshots and the validator too.
void Session::JournalBeforeRun(const transport::RecordHeader& rec) {
  const uint64_t minibatch = options_.journal->minibatch();
  const bool boundary = options_.journal->BoundaryBefore(rec);
  if (boundary) FlushLaunches();
  int64_t boundary_start_ns = 0;
  if (validator_ != nullptr && boundary) {
    validator_->MinibatchEnding(minibatch, options_.journal->dir());
  }
  if (snapshots_ != nullptr && boundary) {
    SnapshotStep step;
    if (planned_seq_ == rec.seq) {  // planned when write-behind asked
      step = planned_step_;
      planned_seq_ = 0;
    } else {
      step = PlanSnapshot(rec.seq, /*forced=*/false);
    }
    if (step == SnapshotStep::kBoundary) {
      boundary_start_ns = MonotonicNanos();
      SnapshotBoundary(minibatch + 1, rec.seq);
    } else {
      options_.journal->SkipBoundaryFor(rec.seq);
    }
  }
  if (absl::Status s = options_.journal->BeforeExecute(rec, CapturedPayload(rec),
                                                       UploadCaptureFor(rec));
      !s.ok()) {
    JournalFailed(s);
  }
  if (boundary_start_ns != 0) NoteJournalBoundary(boundary_start_ns);
  if (options_.journal->minibatch() == minibatch) return;
  if (snapshots_ != nullptr) SnapshotRecorded(options_.journal->minibatch());
  backend_->MarkBoundary(options_.journal->minibatch());
  NoteMinibatchStarted(options_.journal->minibatch());
  if (skip_until_minibatch_ != 0 && options_.journal->minibatch() >= skip_until_minibatch_) {
    REVENANT_LOG(INFO, "agent") << "caught up with the job at minibatch "
                                << options_.journal->minibatch();
    skip_until_minibatch_ = 0;
  }
  if (validator_ != nullptr && skip_until_minibatch_ == 0) {
    validator_->MinibatchStarted(options_.journal->minibatch());
  }
}

// The survivors were past this minibatch when this agent replaced a dead
// one: its device work is superseded by the state they handed over, so a
// replayable request is answered (success) without running. Not a host
// function: it does nothing on the device, and the application counts on it
// running once (the dead agent had not run it, or its callback would have
// come before the death and the hook's callback count skips it).
bool Session::SkipSuperseded(const transport::RecordHeader& rec, const api::ApiTraits& traits) {
  if (skip_until_minibatch_ == 0 || traits.journal != api::JournalClass::kReplay) return false;
  if (const auto id = static_cast<api::ApiId>(rec.api_id);
      id == api::ApiId::cudaLaunchHostFunc || id == api::ApiId::cudaStreamAddCallback) {
    return false;
  }
  if (rec.reply_slot >= 0 && static_cast<uint32_t>(rec.reply_slot) < channel_->reply_slots()) {
    journaling_->BeforeReply(rec);
    ReplyPrefix prefix;
    std::memcpy(channel_->ReplyBuffer(rec.reply_slot), &prefix, sizeof(prefix));
    channel_->PostReply(rec.reply_slot, rec.seq, 0, kReplyPrefixSize);
  }
  return true;
}

void Session::RunAndReply(const transport::RecordHeader& rec, const api::ApiTraits& traits,
                          bool has_reply) {
  const bool nccl = traits.library == api::Library::kNccl;
  thread_local std::vector<char> scratch(64 << 10);
  char* reply = has_reply ? channel_->ReplyBuffer(rec.reply_slot) : scratch.data();
  const uint32_t capacity = has_reply ? channel_->reply_data_size() : scratch.size();

  wire::Decoder in(rec.body(), rec.body_size());
  wire::Encoder out(reply + kReplyPrefixSize, capacity - kReplyPrefixSize);
  ctx_.seq = rec.seq;
  if (const int32_t before = backend_->BeforeRequest(static_cast<api::ApiId>(rec.api_id));
      before != 0) {
    KeepNcclError(before);
  }
  int32_t status = kNoDispatcher;
  if (traits.dispatched) {
    status = Dispatch(static_cast<api::ApiId>(rec.api_id), in, out, ctx_);
  }
  if (const int32_t during = backend_->TakeCollectiveError(); during != 0) {
    KeepNcclError(during);
  }
  if (status == kNoDispatcher) {
    REVENANT_LOG(WARNING, "agent") << "request " << rec.seq << ": api id " << rec.api_id << " ("
                                   << traits.name << ") has no agent side";
    status = nccl ? ncclInvalidArgument : cudaErrorInvalidValue;
  }
  if (out.overflow()) {
    REVENANT_LOG(ERROR, "agent") << traits.name << ": reply does not fit the reply slot";
    status = nccl ? ncclInternalError : cudaErrorInvalidValue;
  }
  MaybeChaos(SessionOptions::Chaos::Point::kAfterExecute);
  if (has_reply) {
    Reply(rec, nccl, status, reply, out.size());
    return;
  }
  MaybeChaos(SessionOptions::Chaos::Point::kAfterReply);
  // A poll the shim sent without waiting (it answered ncclSuccess): when it
  // finds the communicator failed, the channel's NCCL error count is bumped,
  // so that the application's next poll asks and NCCL tells it (the state
  // stays until the communicator is aborted). Not a deferred error: other
  // NCCL calls succeed as natively.
  if (status == 0 && rec.api_id == static_cast<uint16_t>(api::ApiId::ncclCommGetAsyncError)) {
    if (const int32_t found =
            PolledNcclError(rec, absl::string_view(reply + kReplyPrefixSize, out.size()));
        found != ncclSuccess && found != ncclInProgress) {
      REVENANT_LOG(DEBUG, "agent") << "ncclCommGetAsyncError (async, seq " << rec.seq
                                   << ") found " << found;
      channel_->NoteNcclError();
    }
    return;
  }
  if (status != 0) {
    REVENANT_LOG(DEBUG, "agent") << traits.name << " (async, seq " << rec.seq
                                 << ") failed with " << status;
    // An NCCL error is NCCL's, never a CUDA error: it waits for the next
    // synchronous NCCL call (docs/design.md, "NCCL calls").
    if (nccl) {
      KeepNcclError(status);
      return;
    }
    int32_t& deferred = deferred_error_;
    if (traits.library == api::Library::kCublas || traits.library == api::Library::kCublasLt ||
        traits.library == api::Library::kCudnn) {
      // The shim made the library's argument checks at the call; what fails
      // here failed in the agent's library (an allocation, the device),
      // which CUDA reports as a launch failure at the next synchronization
      // (as a faulting library kernel would): a library status is no CUDA
      // error code.
      REVENANT_LOG(WARNING, "agent") << traits.name << " (async, seq " << rec.seq << ") failed with "
                                     << (traits.library == api::Library::kCudnn ? "cuDNN" : "cuBLAS")
                                     << " status " << status;
      status = cudaErrorLaunchFailure;
    }
    if (deferred == 0) deferred = status;
  }
}

void Session::KeepNcclError(int32_t error) {
  if (error == 0 || nccl_deferred_error_ != 0) return;
  nccl_deferred_error_ = error;
  // Before the reply that may follow: the shim then asks for
  // ncclCommGetAsyncError rather than answer it (shim/hooks_nccl.cc).
  channel_->NoteNcclError();
}

// The reply of a synchronous request, with the deferred errors of the
// asynchronous ones before it; its outcome journaled before the reply, or
// after it where the outcome may follow (RequestJournal::OutcomeMayFollowReply).
void Session::Reply(const transport::RecordHeader& rec, bool nccl, int32_t status, char* reply,
                    size_t out_size) {
  ReplyPrefix prefix;
  prefix.deferred_error = deferred_error_;
  deferred_error_ = 0;
  if (nccl && CarriesNcclDeferredError(static_cast<api::ApiId>(rec.api_id))) {
    prefix.nccl_deferred_error = nccl_deferred_error_;
    nccl_deferred_error_ = 0;
  }
  std::memcpy(reply, &prefix, sizeof(prefix));
  journaling_->BeforeReply(rec);
  const absl::string_view outputs(reply + kReplyPrefixSize, out_size);
  const bool outcome_after =
      options_.journal != nullptr && RequestJournal::OutcomeMayFollowReply(rec.api_id);
  if (options_.journal != nullptr && !outcome_after) {
    journaling_->Outcome(rec, status, outputs, /*after_reply=*/false);
  }
  channel_->PostReply(rec.reply_slot, rec.seq, static_cast<uint32_t>(status),
                      kReplyPrefixSize + static_cast<uint32_t>(out_size));
  MaybeChaos(SessionOptions::Chaos::Point::kAfterReply);
  // The reply buffer stays as written: the application only reads it, and
  // the next reply into it comes from this thread, later.
  if (outcome_after) journaling_->Outcome(rec, status, outputs, /*after_reply=*/true);
}

bool Session::BoundaryWithoutWork(const transport::RecordHeader& rec) {
  // A validator and a replacement still catching up do their boundary work
  // with the journaling (JournalBeforeRun), whatever the snapshots plan.
  if (snapshots_ == nullptr || validator_ != nullptr || skip_until_minibatch_ != 0) return false;
  FlushLaunches();  // as JournalBeforeRun at a boundary
  const SnapshotStep step = PlanSnapshot(rec.seq, /*forced=*/false);
  if (step == SnapshotStep::kSkip) return true;
  planned_seq_ = rec.seq;
  planned_step_ = step;
  return false;
}

void Session::StartMinibatch(uint64_t minibatch) {
  backend_->MarkBoundary(minibatch);
  NoteMinibatchStarted(minibatch);
}

JournalThreadOptions Session::JournalThreadSettings() const {
  JournalThreadOptions o;
  o.journaled_through = journaled_through_;
  o.boundary_placed_before = boundary_placed_before_;
  // Chaos counts minibatches from the journal under journal-ahead, from the
  // executor under write-behind (MaybeChaos): there the thread journals
  // boundaries in chaos runs too, as in production.
  const SessionOptions::Chaos& c = options_.chaos;
  const bool behind = options_.journal_thread == SessionOptions::JournalThread::kBehind;
  o.thread_boundaries = snapshots_ == nullptr && validator_ == nullptr &&
                        (behind || (c.after_calls == 0 && c.minibatch == 0)) &&
                        skip_until_minibatch_ == 0;
  return o;
}

void Session::NoteMinibatchStarted(uint64_t minibatch) {
  // Before the minibatch's first request runs: every callback posted after
  // this belongs to a request of this minibatch or later (or to an earlier
  // request whose host function was still in flight: see docs/recovery.md).
  std::lock_guard<std::mutex> lock(callback_mu_);
  channel_->SetMinibatchCallbacks(minibatch, channel_->callbacks().last_seq());
}

bool Session::CarriesNcclDeferredError(api::ApiId id) {
  // Every synchronous NCCL row that names or creates a communicator; the
  // library-wide queries (version, unique id) do not.
  return id != api::ApiId::ncclGetVersion && id != api::ApiId::ncclGetUniqueId;
}

absl::string_view Session::CapturedPayload(const transport::RecordHeader& rec) const {
  const auto id = static_cast<api::ApiId>(rec.api_id);
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return {};
  wire::Decoder in(rec.body(), rec.body_size());
  hooks::cudaMemcpyRequest r;
  const hooks::CopyHead& h = r.head;
  if (!r.Decode(in) || (h.mode != hooks::kDirect && h.mode != hooks::kStagingSource)) {
    return {};
  }
  if (h.mode == hooks::kStagingSource) {
    // A large copy from pageable memory: the application's next staged copy
    // reuses the staging area, so its bytes are kept too.
    const uint64_t offset = r.staging_offset;
    if (offset > channel_->staging_size() || h.count > channel_->staging_size() - offset) {
      return {};
    }
    return absl::string_view(channel_->staging() + offset, h.count);
  }
  const void* p = reinterpret_cast<const void*>(h.src);
  if (!IsSharedHost(p, h.count)) return {};
  return absl::string_view(static_cast<const char*>(p), h.count);
}

UploadCaptureSink* Session::UploadCaptureFor(const transport::RecordHeader& rec) {
  // While catching up with the survivors a superseded upload is answered
  // without running (SkipSuperseded): its bytes go to the journal.
  hooks::CopyHead h;
  if (capture_failed_ || options_.capture_max_bytes == 0 || skip_until_minibatch_ != 0 ||
      !IsCaptureCandidate(rec.api_id, absl::string_view(rec.body(), rec.body_size()),
                          kCaptureMinBytes, &h)) {
    return nullptr;
  }
  // cudaMemcpyDefault: only an upload into the device range.
  const DeviceRange range = backend_->device_range();
  if (h.dst < range.base || h.dst - range.base >= range.size ||
      (h.src >= range.base && h.src - range.base < range.size)) {
    return nullptr;
  }
  if (capture_ == nullptr) {
    UploadCapturePool::Options o;
    o.max_bytes = options_.capture_max_bytes;
    absl::StatusOr<std::unique_ptr<UploadCapturePool>> pool =
        UploadCapturePool::Create(options_.journal->dir(), backend_, o, continued_journal_,
                                  options_.journal->minibatch(), rec.seq);
    if (!pool.ok()) {
      // Uploads are then journaled by the CPU, as before: slower, as safe.
      REVENANT_LOG(WARNING, "agent") << "captured uploads unavailable: " << pool.status();
      capture_failed_ = true;
      return nullptr;
    }
    capture_ = std::move(*pool);
    // Held uploads only where the backend hashes them (a copy out then
    // finds a source changed unseen); else they are captured.
    if (options_.holds != nullptr &&
        backend_->RegisterHashWords(options_.holds->base(), options_.holds->bytes())) {
      hold_places_ = std::make_unique<HoldPlaces>(options_.journal->dir());
      capture_->set_holds(options_.holds.get(), hold_places_.get());
    }
  }
  return capture_.get();
}

// The named crash points exist in the testing variant only (docs/design.md,
// "The testing variant"): in revenant-agent these are empty.
#if REVENANT_TESTING
void Session::MaybeChaos(SessionOptions::Chaos::Point point) {
  const SessionOptions::Chaos& c = options_.chaos;
  if (point != c.point) return;
  bool hit = false;
  // The minibatch the executor is in: under write-behind the journal may
  // not have reached it yet (these points come after the append, where
  // inline journaling has switched minibatches too).
  const uint64_t minibatch = journaling_->ExecutorMinibatch();
  if (c.after_calls != 0) hit = requests_seen_ == c.after_calls;
  if (c.minibatch != 0 && options_.journal != nullptr && minibatch == c.minibatch) {
    hit = ++chaos_minibatch_calls_ == std::max<uint64_t>(c.calls_into_minibatch, 1);
  }
  if (!hit) return;
  REVENANT_LOG(WARNING, "agent") << "chaos: killing this agent at request " << requests_seen_
                                 << " (" << api::Traits(last_api_id_).name << ", minibatch "
                                 << minibatch << ")";
  raise(SIGKILL);
}

void Session::MaybeSnapshotChaos(SessionOptions::Chaos::Point point, uint64_t minibatch) {
  const SessionOptions::Chaos& c = options_.chaos;
  if (point != c.point || c.minibatch != minibatch) return;
  if (c.corrupt_snapshot && point != SessionOptions::Chaos::Point::kSnapshotPartial &&
      point != SessionOptions::Chaos::Point::kSnapshotInflight &&
      point != SessionOptions::Chaos::Point::kSnapshotFinish) {
    const std::string path = snapshots_->PathOf(minibatch);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st {};
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0) {
      const off_t at = st.st_size - 1 - st.st_size / 3;
      char byte = 0;
      if (pread(fd, &byte, 1, at) == 1) {
        byte ^= 0x5a;
        if (pwrite(fd, &byte, 1, at) == 1) {
          REVENANT_LOG(WARNING, "agent") << "chaos: damaged byte " << at << " of " << path;
        }
      }
    }
    if (fd >= 0) close(fd);
  }
  if (point == SessionOptions::Chaos::Point::kSnapshotInflight ||
      point == SessionOptions::Chaos::Point::kSnapshotFinish) {
    REVENANT_LOG(WARNING, "agent") << "chaos: killing this agent with asynchronous snapshot "
                                   << minibatch << " "
                                   << (point == SessionOptions::Chaos::Point::kSnapshotInflight
                                           ? "in flight"
                                           : "finished but not renamed");
    raise(SIGKILL);
  }
  REVENANT_LOG(WARNING, "agent") << "chaos: killing this agent at the boundary of minibatch "
                                 << minibatch;
  raise(SIGKILL);
}
#else
void Session::MaybeChaos(SessionOptions::Chaos::Point) {}
void Session::MaybeSnapshotChaos(SessionOptions::Chaos::Point, uint64_t) {}
#endif

int64_t Session::TimedSnapshotInterval() const {
  return std::max(kSnapshotIntervalFactor * last_snapshot_ns_, options_.snapshot_min_interval_ns);
}

bool Session::TimedSnapshotDue(int64_t within_ns) const {
  return MonotonicNanos() - last_snapshot_end_ns_ >= TimedSnapshotInterval() - within_ns;
}

void Session::NoteJournalBoundary(int64_t start_ns) {
  last_journal_boundary_end_ns_ = MonotonicNanos();
  last_journal_boundary_ns_ = last_journal_boundary_end_ns_ - start_ns;
}

bool Session::LogChunkBoundaryDue(int64_t within_ns) const {
  const int64_t factor = log_chunk_factor_;
  if (factor == 0) return false;
  const uint64_t chunk = options_.journal->minibatch_first_chunk();
  if (chunk == 0 || options_.journal->minibatch_log_bytes() < chunk / 2) return false;
  return MonotonicNanos() - last_journal_boundary_end_ns_ >=
         factor * last_journal_boundary_ns_ - within_ns;
}

uint64_t Session::LogBound() const {
  // A snapshot copies the whole state; a replay reads the log. With a state
  // larger than the bound, the log's bytes made a snapshot due every time
  // they grew by a fraction of the state (a PyTorch job with 554 MiB of state
  // and ~1 MiB of input per step: one every ~170 steps, 1.05-1.20 of
  // native's mean step, docs/performance.md). Bounded by the state's bytes
  // too, the snapshots copy at most the bytes journaled between them (times
  // the ratio), and a replay reads at most about as much as the snapshot it
  // starts from holds. The journal's host memory grows with it: at most 4x
  // snapshot_max_log_bytes. One rank only: with peers, as before.
  const uint64_t base = options_.snapshot_max_log_bytes;
  if (options_.world_size != 1) return base;
  const double cap = 4.0 * static_cast<double>(base);
  const double by_state = std::min(
      cap, options_.snapshot_log_state_ratio * static_cast<double>(snapshot_totals_.last_bytes));
  return by_state >= 1.8e19 ? UINT64_MAX : std::max(base, static_cast<uint64_t>(by_state));
}

uint64_t Session::OwnBoundaryBytes() const {
  // An asynchronous snapshot is due from three quarters of the log's bound,
  // and it releases what a replay no longer reads; the agent's own boundary
  // (synchronous: the whole state on the critical path) is the backstop
  // behind it. Left at its own bytes (equal to the flag's by default) under
  // a raised bound, it came first for a one-rank PyTorch job with 684 MiB of
  // state (bound 684 MiB, asynchronous from 513): 5 synchronous snapshots of
  // ~150 ms in 1200 steps and no asynchronous one, 1.19-1.36 of native's
  // mean step (docs/performance.md). Raised by the bound's factor and an
  // eighth more: a job whose steps are detected meets the bound itself at a
  // step first (PlanSnapshot's journal boundary, its file made ahead); a job
  // without detected steps still has this one.
  const uint64_t own = options_.journal_boundary_bytes;
  const uint64_t base = options_.snapshot_max_log_bytes;
  const uint64_t bound = LogBound();
  if (own == 0 || base == 0 || bound <= base) return own;
  const double raised = 1.125 * static_cast<double>(own) * (static_cast<double>(bound) / base);
  return raised >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(raised);
}

uint64_t Session::LogBytesTowardBound() {
  const uint64_t minibatch = options_.journal->minibatch();
  const uint64_t setup = options_.journal->setup_file_bytes();
  if (minibatch != bound_minibatch_) {
    bound_minibatch_ = minibatch;
    bound_setup_base_ = setup;
    bound_floor_ = 0;
  }
  // A compaction shrank the setup log: count from there.
  bound_setup_base_ = std::min(bound_setup_base_, setup);
  return options_.journal->live_minibatch_bytes() + (setup - bound_setup_base_);
}

bool Session::SnapshotDue() {
  const SessionOptions::Chaos& c = options_.chaos;
  const bool every_step = options_.snapshot_every == 1 || validator_ != nullptr ||
                          c.minibatch != 0;
  bool due = every_step || snapshot_totals_.count + snapshot_totals_.failures == 0;
  if (!due && options_.snapshot_every > 1) {
    due = steps_since_snapshot_ + 1 >= options_.snapshot_every;
  } else if (!due) {
    due = TimedSnapshotDue() ||
          options_.journal->live_minibatch_bytes() >= LogBound();
  }
  // A one-rank job keeps its captured uploads until a snapshot after them
  // (CaptureBound; with peers, boundaries must not depend on one rank's
  // bytes).
  due = due || (options_.world_size == 1 &&
                CapturedBytes() - capture_mark_started_ >= CaptureBound());
  if (due) {
    steps_since_snapshot_ = 0;
  } else {
    ++steps_since_snapshot_;
    ++steps_skipped_;
  }
  return due;
}

Session::SnapshotStep Session::PlanSnapshot(uint64_t seq, bool forced) {
  ReapSnapshot(/*wait=*/false);
  if (forced) {
    steps_since_snapshot_ = 0;
    return SnapshotStep::kBoundary;
  }
  const SessionOptions::Chaos& c = options_.chaos;
  const bool inside_chaos = c.point == SessionOptions::Chaos::Point::kSnapshotInflight ||
                            c.point == SessionOptions::Chaos::Point::kSnapshotFinish;
  const bool every_step = options_.snapshot_every == 1 || validator_ != nullptr ||
                          (c.minibatch != 0 && !inside_chaos);
  const uint64_t minibatch = options_.journal->minibatch();
  // Inside the journal's minibatch (past its first boundary, whose snapshot
  // the journal's replay starts from), one rank: asynchronous.
  const bool inside = options_.snapshot_async && !inside_unsupported_ &&
                      options_.world_size == 1 && !every_step && minibatch != 0;
  if (!inside) {
    if (SnapshotDue()) return SnapshotStep::kBoundary;
    // Synchronous snapshots at timed boundaries (peers with --snapshots=on,
    // --snapshot_async=false): their files made ahead too.
    if (!every_step) {
      // (With an explicit cadence their bytes make none due.)
      MakeNextSnapshotFile(options_.journal->live_minibatch_bytes(),
                           options_.snapshot_every > 1 ? UINT64_MAX
                                                       : LogBound(),
                           /*log_chunk=*/false);
    }
    last_plan_ns_ = MonotonicNanos();
    return SnapshotStep::kSkip;
  }
  const bool timed = options_.snapshot_every > 1
                         ? steps_since_snapshot_ + 1 >= options_.snapshot_every
                         : TimedSnapshotDue();
  // Captured uploads since the last snapshot make one due too (checked at
  // every step: a counter of the executor's own).
  bool due = CapturePressure() || timed;
  bool due_by_bytes = false;
  // Under a snapshot chaos point the M-th asynchronous snapshot must come at
  // the same step in every run, however slowly the one before finished: a
  // due step waits for it instead of skipping.
  if (due && inside_chaos && inflight_ != nullptr) ReapSnapshot(/*wait=*/true);
  // The journal's live bytes (an atomic of the journal's, no lock), at every
  // step: a large input batch per step reaches the bound in a few steps.
  {
    // The journal keeps every step since its boundary, and the setup log
    // the handles created and destroyed since (compacted at boundaries):
    // every few snapshots made due by the time or by these bytes, and
    // whenever the minibatch log grew past the bound, a journal boundary
    // bounds them (synchronous: the journal drops what came before it, so
    // its snapshot must be complete first). The captured uploads need none:
    // a finished snapshot releases them.
    const uint64_t live = LogBytesTowardBound();
    const uint64_t bound = LogBound();
    // A finished snapshot releases the payloads journaled before it
    // (ReapSnapshot) and the setup log's calls only a replay from before it
    // needed: from three quarters of the bound, one is due before the bound
    // forces a journal boundary (below, the timed ones release), once the
    // bytes grew past what the last one left (bound_floor_). They count
    // toward the journal boundary like the timed ones: what no snapshot
    // releases (the records) grew between journal boundaries, and the
    // snapshots it made due came closer and closer together.
    const bool by_bytes =
        live >= bound / 4 * 3 && live >= bound_floor_;
    // --snapshot_every=auto: a snapshot or journal boundary due while its
    // next file is still being made waits for it, step by step (not at the
    // bound, nor under a chaos point; an explicit cadence keeps its steps):
    // made without its pages, a snapshot's staged copies held a PyTorch
    // job's streams for 208 ms where the file came 123 ms later
    // (docs/performance.md).
    const bool wants = due || by_bytes || LogChunkBoundaryDue();
    if (options_.snapshot_every <= 1 && wants && !inside_chaos && inflight_ == nullptr &&
        live < bound && WaitsForNextFile()) {
      ++steps_since_snapshot_;
      ++steps_skipped_;
      last_plan_ns_ = MonotonicNanos();
      return SnapshotStep::kSkip;
    }
    if (((timed || by_bytes) && inflight_ == nullptr &&
         inside_since_boundary_ + 1 >= kInsidePerBoundary) ||
        live >= bound) {
      steps_since_snapshot_ = 0;
      return SnapshotStep::kBoundary;
    }
    // An explicit cadence (--snapshot_every=N) and the snapshot chaos points
    // keep their boundaries where the steps put them, not the clock.
    if (options_.snapshot_every <= 1 && !inside_chaos && inflight_ == nullptr &&
        LogChunkBoundaryDue()) {
      steps_since_snapshot_ = 0;
      ++log_chunk_boundaries_;
      return SnapshotStep::kBoundary;
    }
    if (!due && by_bytes) {
      due = true;
      if (inflight_ == nullptr) ++bound_snapshots_;
    }
    due_by_bytes = by_bytes;
    if (!due && inflight_ == nullptr && !inside_chaos) {
      MakeNextSnapshotFile(live, std::max(bound / 4 * 3, bound_floor_),
                           /*log_chunk=*/true);
    }
    last_plan_ns_ = MonotonicNanos();
  }
  if (!due || inflight_ != nullptr) {
    // A step journaled inside the minibatch (one snapshot in flight at a
    // time: a due step waits for the next boundary after it finished).
    ++steps_since_snapshot_;
    ++steps_skipped_;
    return SnapshotStep::kSkip;
  }
  steps_since_snapshot_ = 0;
  if (!SnapshotInside(minibatch, seq)) return SnapshotStep::kBoundary;
  if (timed || due_by_bytes) ++inside_since_boundary_;
  return SnapshotStep::kInside;
}

bool Session::WaitsForNextFile() {
  if (snapshots_ == nullptr || !snapshots_->next_file_busy()) {
    next_file_wait_since_ns_ = 0;
    return false;
  }
  const int64_t now = MonotonicNanos();
  // A wait begins at the first due step after the last snapshot (one that
  // ended unmet stays ended until a snapshot was taken).
  const uint64_t taken = snapshot_totals_.count + snapshot_totals_.failures;
  if (next_file_wait_since_ns_ == 0 || next_file_wait_taken_ != taken) {
    next_file_wait_since_ns_ = now;
    next_file_wait_taken_ = taken;
    ++next_file_waits_;
  }
  // At most half the timed interval (the file's making is bounded; this
  // bounds the snapshot's lateness whatever it takes).
  if (now - next_file_wait_since_ns_ >= TimedSnapshotInterval() / 2) return false;
  ++next_file_wait_steps_;
  return true;
}

void Session::MakeNextSnapshotFile(uint64_t live_log_bytes, uint64_t due_at_bytes,
                                   bool log_chunk) {
  // The journal's bytes per ns since the last call (for the bytes' due).
  const int64_t called = MonotonicNanos();
  const double byte_rate =
      last_live_ns_ != 0 && called > last_live_ns_ && live_log_bytes > last_live_bytes_
          ? static_cast<double>(live_log_bytes - last_live_bytes_) / (called - last_live_ns_)
          : 0.0;
  last_live_bytes_ = live_log_bytes;
  last_live_ns_ = called;
  if (!snapshots_->next_file_wanted()) return;
  // Ahead by twice what making a file of the last snapshot's size should
  // take (the store's pace: the last file made, else a cautious default;
  // the first next file of a job has no file of its size made before it)
  // and 2 ms, or by two steps (the check comes once a step), at least 5 ms,
  // at most half the timed interval.
  const int64_t step = last_plan_ns_ != 0 ? called - last_plan_ns_ : 0;
  const int64_t interval = TimedSnapshotInterval();
  const int64_t want = std::max(
      static_cast<int64_t>(2e6 * snapshots_->EstimatedMakeMs(snapshot_totals_.last_bytes)) +
          2 * 1000 * 1000,
      2 * step);
  const int64_t lead = std::clamp<int64_t>(want, 5 * 1000 * 1000, interval / 2);
  // The journal's bytes make one due at `due_at_bytes` (whatever the
  // cadence): ahead by the lead at the rate they grew since the last step
  // (not growing: within an eighth of it).
  const uint64_t near = due_at_bytes - due_at_bytes / 8;
  bool soon = live_log_bytes >= due_at_bytes ||
              (byte_rate > 0 ? static_cast<double>(due_at_bytes - live_log_bytes) / byte_rate <= lead
                             : live_log_bytes >= near);
  if (options_.snapshot_every > 1) {
    // An explicit cadence: a quarter of it ahead (at least one step), or the
    // steps the lead spans at the last step's length, up to half of it.
    uint64_t ahead = std::max<uint64_t>(1, options_.snapshot_every / 4);
    if (step > 0) {
      ahead = std::max<uint64_t>(
          ahead, std::min<uint64_t>(static_cast<uint64_t>((want + step - 1) / step),
                                    options_.snapshot_every / 2));
    }
    soon = soon || steps_since_snapshot_ + 1 + ahead >= options_.snapshot_every;
  } else {
    // The timed one, and the journal boundary that keeps the minibatch log
    // in its first chunk (a synchronous snapshot: its file too).
    soon = soon || TimedSnapshotDue(lead) || (log_chunk && LogChunkBoundaryDue(lead));
  }
  if (soon) {
    snapshots_->MakeNextFileAhead(SnapshotStore::FileSizeFor(backend_->DeviceAllocations()));
  }
}

// The captured bytes a replay may need between two snapshots: twice the
// live bytes (a snapshot's device copies then cost at most half a byte per
// byte uploaded, and the captures held stay within a few times the
// snapshot's own files), at least one capture file, at most half the
// capture files' bound (so that uploads are not left to the CPU).
uint64_t Session::CaptureBound() const {
  const uint64_t bound =
      std::max(2 * snapshot_totals_.last_bytes, UploadCapturePool::Options().file_bytes);
  return std::max<uint64_t>(std::min(bound, options_.capture_max_bytes / 2), 1);
}

bool Session::CapturePressure() {
  if (capture_ == nullptr) return false;
  // A held source found changed (common/upload_hold.h): a replay that needs
  // that upload is refused, so the next snapshot after it comes at once (the
  // replay then starts past it).
  if (options_.holds != nullptr) {
    if (const uint64_t changed = options_.holds->changed(); changed > holds_changed_seen_) {
      holds_changed_seen_ = changed;
      return true;
    }
  }
  const uint64_t captured = CapturedBytes();
  const uint64_t bound = CaptureBound();
  if (inflight_ != nullptr && captured - capture_mark_released_ >= 2 * bound) {
    // Twice the bound held since the last finished snapshot began: the one
    // in flight releases most of it; waiting for it costs less than more
    // host memory (new files are mapped and registered on this thread too).
    ++capture_waits_;
    ReapSnapshot(/*wait=*/true);
  }
  return captured - capture_mark_started_ >= bound;
}

bool Session::SnapshotInside(uint64_t minibatch, uint64_t seq) {
  const int64_t start_ns = MonotonicNanos();
  // Counted from here even if it fails: the next try comes one bound later.
  capture_mark_started_ = CapturedBytes();
  if (snapshot_done_word_ == nullptr) {
    void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) {
      inside_unsupported_ = true;
      return false;
    }
    if (backend_->RegisterSharedHost(page, 4096, 0) != cudaSuccess) {
      munmap(page, 4096);
      inside_unsupported_ = true;
      return false;
    }
    snapshot_done_word_ = static_cast<uint64_t*>(page);
  }
  const AllocationTable table = backend_->DeviceAllocations();
  absl::StatusOr<std::unique_ptr<SnapshotStore::Pending>> pending =
      snapshots_->Begin(minibatch, seq, table);
  if (!pending.ok()) {
    // The journal keeps every step since the last snapshot: nothing lost.
    // The next try waits as long as after a snapshot.
    ++snapshot_totals_.failures;
    last_snapshot_end_ns_ = MonotonicNanos();
    REVENANT_LOG(ERROR, "agent") << "asynchronous snapshot at request " << seq
                                 << " not started (the last snapshot and the journal since it "
                                    "stay the recovery's base): "
                                 << pending.status();
    return true;
  }
  std::vector<Backend::SnapshotCopy> copies;
  // Staged (the file is not registered): the device copies into the
  // staging buffers in turns, each buffer filled again once the finisher
  // drained it into the file (the words of the page below the done word).
  const bool staged = (*pending)->staged();
  Backend::SnapshotTurns turns;
  if (staged) {
    for (const SnapshotStore::Pending::StagedCopy& sc : (*pending)->staged_copies()) {
      Backend::SnapshotCopy c;
      c.src = reinterpret_cast<const void*>(sc.addr);
      c.dst = sc.dst;
      c.count = sc.size;
      copies.push_back(c);
    }
    turns.ends = (*pending)->staged_turn_ends();
    turns.filled = SnapshotFilledWord();
    turns.drained = SnapshotDrainedWord();
    __atomic_store_n(SnapshotFilledWord(), 0, __ATOMIC_RELEASE);
    __atomic_store_n(SnapshotDrainedWord(), 0, __ATOMIC_RELEASE);
  } else {
    copies.reserve(table.size());
    for (size_t i = 0; i < table.size(); ++i) {
      Backend::SnapshotCopy c;
      c.src = reinterpret_cast<const void*>(table[i].first);
      c.dst = (*pending)->destination(i);
      c.count = table[i].second;
      copies.push_back(c);
    }
  }
  const uint64_t tag = inside_snapshots_ + 1;
  __atomic_store_n(snapshot_done_word_, 0, __ATOMIC_RELEASE);
  const cudaError_t e = backend_->QueueSnapshotCopies(
      copies, snapshot_done_word_, tag, staged && !turns.ends.empty() ? &turns : nullptr);
  if (e != cudaSuccess) {
    // Turns queued before the failure must not wait for a drain that never
    // comes.
    if (staged) ReleaseSnapshotTurns();
    // Some copies may be queued: they must be done before the file goes.
    if (e != cudaErrorNotSupported) (void)backend_->SynchronizeDevice();
    snapshots_->Abandon(std::move(*pending));
    if (e == cudaErrorNotSupported) {
      // A backend without asynchronous copies takes synchronous snapshots;
      // one that has them refuses while a stream is being captured into a
      // graph (synchronizing would break the capture too): a plain step.
      if (inside_snapshots_ == 0) inside_unsupported_ = true;
      return inside_snapshots_ != 0;
    }
    ++snapshot_totals_.failures;
    last_snapshot_end_ns_ = MonotonicNanos();
    REVENANT_LOG(ERROR, "agent") << "asynchronous snapshot at request " << seq
                                 << " failed to queue its copies (error " << e
                                 << "); the last snapshot and the journal since it stay the "
                                    "recovery's base";
    return true;
  }
  inside_snapshots_ = tag;
  auto in = std::make_unique<InflightSnapshot>();
  in->ordinal = tag;
  in->minibatch = minibatch;
  in->seq = seq;
  in->captured_at_start = capture_mark_started_;
  in->start_ns = start_ns;
  in->pending = std::move(*pending);
  in->critical_ms = (MonotonicNanos() - start_ns) / 1e6;
  if (options_.chaos.point == SessionOptions::Chaos::Point::kSnapshotInflight ||
      options_.chaos.point == SessionOptions::Chaos::Point::kSnapshotFinish) {
    REVENANT_LOG(INFO, "agent") << "asynchronous snapshot " << tag << " queued at request " << seq
                                << " (journal minibatch " << minibatch << ")";
  }
  if (timeline::Enabled()) {
    timeline::Add("asynchronous snapshot queued (executor)", start_ns, MonotonicNanos(),
                  absl::StrCat("request ", seq));
  }
  MaybeSnapshotChaos(SessionOptions::Chaos::Point::kSnapshotInflight, tag);
  InflightSnapshot* f = in.get();
  f->staged = staged;
  const uint64_t* word = snapshot_done_word_;
  // Behind the executor: the snapshot counts once the device stored the
  // tag (every copy completed) and the file is checksummed and renamed.
  f->finisher = std::thread([this, f, word, tag] {
    if (f->staged) {
      // Each turn drained into the file as soon as the device filled it:
      // the device waits for this before it fills the buffer again.
      const uint64_t* filled = SnapshotFilledWord();
      uint64_t* drained = SnapshotDrainedWord();
      absl::Status s = snapshots_->DrainStaged(
          f->pending.get(),
          [f, filled](size_t t) -> absl::Status {
            for (int spins = 0; __atomic_load_n(filled, __ATOMIC_ACQUIRE) < t + 1; ++spins) {
              if (f->stop.load(std::memory_order_acquire)) {
                return absl::AbortedError("the device did not complete the snapshot's copies");
              }
              if (spins < 64) {
                std::this_thread::yield();
              } else {
                std::this_thread::sleep_for(std::chrono::microseconds(50));
              }
            }
            return absl::OkStatus();
          },
          [drained](size_t t) { __atomic_store_n(drained, t + 1, __ATOMIC_RELEASE); });
      if (!s.ok()) {
        // The device finishes its turns (into the staging, the file is left
        // alone) instead of waiting for a drain that no longer comes.
        ReleaseSnapshotTurns();
        f->drain_status = s;
      }
    }
    for (int spins = 0; __atomic_load_n(word, __ATOMIC_ACQUIRE) != tag; ++spins) {
      if (f->stop.load(std::memory_order_acquire)) {
        snapshots_->Abandon(std::move(f->pending));
        f->status = absl::AbortedError("the device did not complete the snapshot's copies");
        f->end_ns = MonotonicNanos();
        f->finished.store(true, std::memory_order_release);
        return;
      }
      if (spins < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    f->copied_ns = MonotonicNanos();
    if (!f->drain_status.ok()) {
      snapshots_->Abandon(std::move(f->pending));
      f->status = f->drain_status;
      f->end_ns = MonotonicNanos();
      f->finished.store(true, std::memory_order_release);
      return;
    }
    absl::StatusOr<SnapshotWriteStats> st = snapshots_->Finish(std::move(f->pending), [this, tag] {
      MaybeSnapshotChaos(SessionOptions::Chaos::Point::kSnapshotFinish, tag);
    });
    if (st.ok()) {
      f->stats = *st;
    } else {
      f->status = st.status();
    }
    f->end_ns = MonotonicNanos();
    f->finished.store(true, std::memory_order_release);
  });
  inflight_ = std::move(in);
  return true;
}

void Session::ReapSnapshot(bool wait) {
  if (inflight_ == nullptr) return;
  InflightSnapshot& f = *inflight_;
  if (!f.finished.load(std::memory_order_acquire)) {
    if (!wait) return;
    // The device completes the copies, unless it failed: then they never
    // will, and the snapshot is abandoned. The whole device: the
    // application's synchronization may return before a snapshot spare's
    // drain (the done word's store comes after it).
    if (const int32_t e = backend_->SynchronizeDevice(); e != 0 && deferred_error_ == 0) {
      deferred_error_ = e;
    }
    if (__atomic_load_n(snapshot_done_word_, __ATOMIC_ACQUIRE) != f.ordinal) {
      f.stop.store(true, std::memory_order_release);
    }
  }
  f.finisher.join();
  if (!f.status.ok()) {
    ++snapshot_totals_.failures;
    last_snapshot_end_ns_ = f.end_ns;
    REVENANT_LOG(ERROR, "agent") << "asynchronous snapshot " << f.ordinal
                                 << " failed (the last snapshot and the journal since it stay "
                                    "the recovery's base): "
                                 << f.status;
    inflight_.reset();
    return;
  }
  last_snapshot_end_ns_ = f.end_ns;
  last_snapshot_ns_ = f.end_ns - f.start_ns;
  timeline::Span reaped("asynchronous snapshot reaped (executor: captures and payloads released)");
  // Renamed in place of the journal's snapshot: a replay starts at its
  // request, so the uploads captured before it are never replayed again.
  capture_mark_released_ = f.captured_at_start;
  if (capture_ != nullptr) capture_->Release(f.seq);
  SnapshotTotals& t = snapshot_totals_;
  // So are the payloads journaled before it (input batches from pageable
  // memory): released, their pages freed, so that the minibatch log's bound
  // counts only what a replay may still read.
  if (absl::StatusOr<uint64_t> freed = options_.journal->ReleasePayloadsBefore(f.seq);
      !freed.ok()) {
    REVENANT_LOG(ERROR, "agent") << "releasing the journal's payloads before request " << f.seq
                                 << ": " << freed.status();
  }
  // And the setup log's calls only a replay from the journal's boundary
  // needed (cuBLASLt descriptors destroyed since, superseded setters).
  options_.journal->ReplayStartsAt(f.seq);
  // The bound's next asynchronous snapshot waits for new bytes.
  bound_floor_ = LogBytesTowardBound() + LogBound() / 8;
  const double total_ms = last_snapshot_ns_ / 1e6;
  if (timeline::Enabled()) {
    const std::string what =
        absl::StrFormat("%d, request %d, %.1f MiB%s", f.ordinal, f.seq, f.stats.bytes / 1048576.0,
                        f.stats.staged ? ", staged" : "");
    timeline::Add("asynchronous snapshot: device copies (the application's streams wait)",
                  f.start_ns, f.copied_ns, what);
    timeline::Add("asynchronous snapshot: checksums and rename", f.copied_ns, f.end_ns, what);
  }
  ++t.count;
  ++t.inside;
  t.bytes += f.stats.bytes;
  t.last_bytes = f.stats.bytes;
  t.ms += f.critical_ms;
  t.max_ms = std::max(t.max_ms, f.critical_ms);
  t.total_ms += total_ms;
  t.reused += f.stats.reused ? 1 : 0;
  REVENANT_LOG(INFO, "agent") << absl::StrFormat(
      "asynchronous snapshot %d (journal minibatch %d, from request %d): %d allocations, %d "
      "bytes, critical path %.3f ms, device copies done after %.2f ms, total %.2f ms "
      "(checksums and rename %.2f ms), %s%s",
      f.ordinal, f.minibatch, f.seq, f.stats.allocations, f.stats.bytes, f.critical_ms,
      (f.copied_ns - f.start_ns) / 1e6, total_ms, f.stats.crc_ms,
      !f.stats.reused                 ? "into a new file"
      : options_.snapshot_keep_spare ? "into the spare file"
                                     : "into the next file made ahead",
      f.stats.staged ? " (not registered: copied through the staging buffers, drained and "
                       "checksummed by the finisher's threads)"
                     : "");
  inflight_.reset();
}

void Session::SnapshotBoundary(uint64_t minibatch, uint64_t seq) {
  // An asynchronous snapshot of the journal's minibatch finishes first: the
  // store has one user at a time.
  ReapSnapshot(/*wait=*/true);
  timeline::Span span("synchronous snapshot (journal boundary)");
  if (span.active()) span.set_detail(absl::StrCat("minibatch ", minibatch, ", request ", seq));
  const int64_t snapshot_start_ns = MonotonicNanos();
  capture_mark_started_ = CapturedBytes();
  boundary_snapshot_seq_ = 0;
  // The state at the boundary: every request before it was executed (one
  // executor thread), but device work may still be queued, collectives in
  // flight included (they complete, or are recovered, first).
  SynchronizeKeepingErrors();
  const double drained_ms = (MonotonicNanos() - snapshot_start_ns) / 1e6;
  const AllocationTable table = backend_->DeviceAllocations();
  absl::StatusOr<SnapshotWriteStats> st = snapshots_->Write(
      minibatch, seq, table,
      [this, minibatch] { MaybeSnapshotChaos(SessionOptions::Chaos::Point::kSnapshotPartial,
                                             minibatch); });
  if (!st.ok()) {
    // Training goes on; a recovery past this boundary will find no snapshot
    // of its minibatch and refuse, saying so.
    ++snapshot_totals_.failures;
    REVENANT_LOG(ERROR, "agent") << "snapshot of minibatch " << minibatch
                                 << " failed (this rank cannot be recovered past it): "
                                 << st.status();
    return;
  }
  last_snapshot_end_ns_ = MonotonicNanos();
  last_snapshot_ns_ = last_snapshot_end_ns_ - snapshot_start_ns;
  boundary_snapshot_seq_ = seq;
  boundary_snapshot_mark_ = capture_mark_started_;
  const double critical_ms = last_snapshot_ns_ / 1e6;
  SnapshotTotals& t = snapshot_totals_;
  ++t.count;
  t.bytes += st->bytes;
  t.last_bytes = st->bytes;
  t.ms += critical_ms;
  t.max_ms = std::max(t.max_ms, critical_ms);
  t.total_ms += critical_ms;
  t.reused += st->reused ? 1 : 0;
  // Every snapshot is logged when they are spaced out (an explicit cadence
  // of steps); every step's only now and then; with --snapshot_every=auto,
  // whose journal boundaries may come every few tens of ms (a small state,
  // LogChunkBoundaryDue), at most one a second besides the first two.
  const int64_t now_ns = MonotonicNanos();
  const bool spaced = options_.snapshot_every > 1 ||
                      (options_.snapshot_every == 0 &&
                       now_ns - last_snapshot_log_ns_ >= 1000ll * 1000 * 1000);
  if (spaced || t.count <= 2 || t.count % 100 == 0) {
    last_snapshot_log_ns_ = now_ns;
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "snapshot of minibatch %d: %d allocations, %d bytes, critical path %.2f ms (device "
        "drained in %.2f ms, copies %.2f ms, checksums %.2f ms), total %.2f ms, %s%s",
        minibatch, st->allocations, st->bytes, critical_ms, drained_ms, st->copy_ms,
        st->crc_ms, critical_ms,
        st->reused && options_.snapshot_keep_spare       ? "into the spare file"
        : st->reused                                    ? "into the next file made ahead"
        : t.count == 1 && snapshots_->first_file_used() ? "into the file made ahead"
                                                        : "into a new file",
        st->staged ? " (not registered: copied through the staging buffers, checksummed by the "
                     "copying threads)"
                   : "");
  }
  MaybeSnapshotChaos(SessionOptions::Chaos::Point::kAfterSnapshot, minibatch);
}

void Session::SnapshotRecorded(uint64_t minibatch) {
  inside_since_boundary_ = 0;
  // A one-rank job's replay now starts at this boundary's snapshot: the
  // uploads captured before it are never replayed again (with peers, a
  // replacement may replay the minibatch before the survivors': the rule of
  // two boundaries stays).
  if (boundary_snapshot_seq_ != 0 && options_.world_size == 1) {
    capture_mark_released_ = boundary_snapshot_mark_;
    if (capture_ != nullptr) capture_->Release(boundary_snapshot_seq_);
  }
  boundary_snapshot_seq_ = 0;
  MaybeSnapshotChaos(SessionOptions::Chaos::Point::kAfterBoundary, minibatch);
  // The journal is at `minibatch` now: older snapshots can never be needed.
  snapshots_->DropBefore(minibatch);
}

void Session::JournalFailed(const absl::Status& status) {
  // The journal must never lie: an agent that cannot journal stops rather
  // than execute calls a replacement could not replay. The request that
  // failed is not executed and nothing of it is in the journal (a record is
  // written whole or, torn, dropped by the reader). The application is told
  // why before the agent exits, so that its shim fails its calls at once
  // instead of waiting for a replacement that would meet the same journal
  // (revenant-run replaces only agents killed by a signal).
  const std::string why = absl::StrCat(
      "the agent of rank ", options_.rank, " cannot journal and stops taking requests: ",
      status.ToString(),
      absl::IsResourceExhausted(status)
          ? " (the journal's file system or limit is full: free space in the job directory, "
            "or mark training steps with revenantMarkStep() so that the journal stays small)"
          : "");
  REVENANT_LOG(ERROR, "agent") << "journaling failed, stopping: " << why;
  (void)transport::SendFrame(control_fd_, FormatKv({{"op", "dropped"}, {"error", why}}));
  std::_Exit(70);
}

int Session::MapSharedHost(uint64_t addr, uint64_t size, unsigned int flags,
                           const std::string& path) {
  // Only files the application created in its own job directory, so a
  // request cannot make the agent map arbitrary files.
  if (path.rfind(job_dir_ + "/host-", 0) != 0 || path.find("..") != std::string::npos ||
      size == 0) {
    REVENANT_LOG(WARNING, "agent") << "refusing shared host memory at " << path;
    return cudaErrorInvalidValue;
  }
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  void* want = reinterpret_cast<void*>(addr);
  void* got = MAP_FAILED;
  if (fd >= 0) {
    got = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    close(fd);
  } else if (replaying_.load() && errno == ENOENT) {
    // Replaying memory the application has freed since (its file is gone):
    // the work replayed against it writes dead data, so private scratch at
    // the same address serves; the replayed cudaFreeHost unmaps it.
    got = mmap(want, size, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  } else {
    return cudaErrorInvalidValue;
  }
  if (got != want) {
    if (got != MAP_FAILED) munmap(got, size);
    const int err = errno;
    REVENANT_LOG(ERROR, "agent") << "cannot map shared host memory at " << want << " (" << size
                                 << " bytes): " << std::strerror(err)
                                 << (err == EEXIST ? absl::StrCat("; the agent's own mappings there: ",
                                                                  MappingsInTheWay(addr, size))
                                                   : std::string());
    return cudaErrorMemoryAllocation;
  }
  int e = backend_->RegisterSharedHost(want, size, flags);
  if (e != cudaSuccess) {
    munmap(want, size);
    return e;
  }
  std::lock_guard<std::mutex> lock(shared_mu_);
  shared_host_[addr] = size;
  return cudaSuccess;
}

int Session::UnmapSharedHost(uint64_t addr) {
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    auto it = shared_host_.find(addr);
    if (it == shared_host_.end()) return cudaErrorInvalidValue;
    size = it->second;
    shared_host_.erase(it);
  }
  // cudaFreeHost synchronizes the device: no work may still touch the range.
  backend_->cudaDeviceSynchronize();
  backend_->UnregisterSharedHost(reinterpret_cast<void*>(addr));
  munmap(reinterpret_cast<void*>(addr), size);
  return cudaSuccess;
}

bool Session::IsSharedHost(const void* p, size_t n) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  std::lock_guard<std::mutex> lock(shared_mu_);
  auto it = shared_host_.upper_bound(a);
  if (it == shared_host_.begin()) return false;
  --it;
  return a - it->first < it->second && n <= it->second - (a - it->first);
}

const KernelInfo* Session::FindKernel(const void* backend_handle) const {
  auto it = kernels_.find(backend_handle);
  return it == kernels_.end() ? nullptr : &it->second;
}

int32_t Session::DispatchReplayedGraphLaunch(wire::Decoder& in, wire::Encoder& out) {
  // cudaGraphLaunch(exec, stream): the stream is the second value.
  uint64_t exec = 0, stream = 0;
  wire::Decoder peek = in;
  if (!peek.Get(&exec) || !peek.Get(&stream) ||
      !ctx_.handles->ToBackendRaw(api::HandleKind::kStream, &stream)) {
    return Dispatch(api::ApiId::cudaGraphLaunch, in, out, ctx_);
  }
  std::atomic<int>& pending =
      replay_setup_.load() ? replayed_setup_graph_launches_ : replayed_graph_launches_;
  pending.fetch_add(1);
  const int32_t status = Dispatch(api::ApiId::cudaGraphLaunch, in, out, ctx_);
  if (status != cudaSuccess ||
      backend_->EnqueueHostCallback(reinterpret_cast<cudaStream_t>(stream),
                                    [&pending] { pending.fetch_sub(1); }) != cudaSuccess) {
    pending.fetch_sub(1);
  }
  return status;
}

void Session::PostDeferredReplies() {
  // The application is back: its callback thread runs what the replay
  // posted, then each reply may follow the callbacks before it (bounded:
  // a callback that never completes cannot hold the application forever).
  for (const DeferredReply& d : deferred_replies_) {
    absl::Status s =
        channel_->WaitCallbacksDone(d.callbacks, absl::Now() + options_.callback_timeout);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, "agent") << "replayed host callbacks before request " << d.seq
                                   << " did not complete: " << s << "; answering it anyway";
    }
    channel_->PostReply(d.slot, d.seq, d.status, d.size);
  }
  deferred_replies_.clear();
  // Nor may a reply to the application's next request: a callback the replay
  // posted (a replayed host function or graph host node that ran while the
  // replay was still going, so nothing waited for it) must have run before,
  // e.g., the stream synchronize that follows it returns. Callbacks that run
  // from here on wait for themselves (RunClientCallback).
  uint64_t posted = 0;
  {
    std::lock_guard<std::mutex> lock(callback_mu_);
    posted = callbacks_sent_;
  }
  if (posted > channel_->callbacks_done()) {
    absl::Status s = channel_->WaitCallbacksDone(posted, absl::Now() + options_.callback_timeout);
    if (!s.ok()) {
      REVENANT_LOG(ERROR, "agent") << "host callbacks the replay posted did not complete: " << s
                                   << "; serving the application anyway";
    }
  }
}

void Session::RunClientCallback(const hooks::CallbackRecord& record, CallbackOrigin origin) {
  // A validation replay: the application ran this callback already.
  if (validating_.load()) return;
  if (origin == CallbackOrigin::kReplayedSetup) return;
  const bool replayed = origin == CallbackOrigin::kReplayed;
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(callback_mu_);
    if (replayed && callbacks_to_suppress_ > 0) {
      // The application already ran (or holds) this callback.
      --callbacks_to_suppress_;
      return;
    }
    absl::StatusOr<transport::RecordWriter> w = channel_->callbacks().BeginRecord(
        sizeof(record), absl::Now() + options_.callback_timeout);
    if (!w.ok()) {
      REVENANT_LOG(ERROR, "agent") << "cannot post a host callback: " << w.status();
      return;
    }
    std::memcpy(w->body(), &record, sizeof(record));
    w->header().api_id = 1;
    channel_->callbacks().Commit(std::move(*w));
    ticket = ++callbacks_sent_;
  }
  if (replayed && replaying_.load()) {
    // The application reconnects only after the replay: it runs this
    // callback then. Waiting here would deadlock the replay. (A replayed
    // callback that runs once the replay is over waits like a live one:
    // the stream's later work, a synchronize the application issues next,
    // must not overtake it.)
    return;
  }
  absl::Status s =
      channel_->WaitCallbacksDone(ticket, absl::Now() + options_.callback_timeout);
  if (!s.ok() && !disconnected_.load()) {
    REVENANT_LOG(ERROR, "agent") << "host callback " << ticket << " did not complete: " << s;
  }
}

}  // namespace agent
}  // namespace revenant

namespace revenant {
namespace agent {
namespace {

// The address of graph memory in the reply of an alloc node (u64 after the
// node's id: cudaGraphAddMemAllocNode, cudaGraphAddNode of an alloc node); 0
// for any other reply.
uint64_t AllocNodeAddress(api::ApiId id, const std::string& args, const std::string& outputs) {
  wire::Decoder d(outputs.data(), outputs.size());
  if (id == api::ApiId::cudaGraphAddMemAllocNode) {
    hooks::cudaGraphAddMemAllocNodeReply r;
    return r.Decode(d) ? r.dptr : 0;
  }
  if (id != api::ApiId::cudaGraphAddNode) return 0;
  hooks::cudaGraphAddNodeRequest req;
  wire::Decoder in(args.data(), args.size());
  hooks::cudaGraphAddNodeReply r;
  if (!req.Decode(in) || !r.Decode(d, req)) return 0;
  return r.dptr;
}

uint64_t FirstOutU64(const std::string& outputs) {
  wire::Decoder d(outputs.data(), outputs.size());
  const char* data = nullptr;
  uint64_t n = 0;
  uint64_t v = 0;
  if (d.GetBytes(&data, &n) && data != nullptr && n >= sizeof(v)) std::memcpy(&v, data, sizeof(v));
  return v;
}

// A copy whose source bytes the journal holds replays from them
// (ReplayCopyBody); any other entry as it was journaled.
std::string ReplayBody(const journal::JournalEntry& e) {
  if (std::string body; ReplayCopyBody(e.api_id(), e.args(), e.inline_payload(), &body)) {
    return body;
  }
  return e.args();
}

// A copy into shared host memory: skipped on replay (the application already
// received its data and may have reused the buffer).
bool IsCopyIntoSharedHost(const journal::JournalEntry& e, const Session& session) {
  const auto id = static_cast<api::ApiId>(e.api_id());
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return false;
  wire::Decoder in(e.args().data(), e.args().size());
  hooks::CopyHead h;
  if (!h.Decode(in)) return false;
  return h.mode == hooks::kDirect && session.IsSharedHost(reinterpret_cast<void*>(h.dst), h.count);
}

}  // namespace

absl::Status Session::Recover(const std::string& journal_dir, const std::string& job, int rank,
                              const RequestJournal::Options& journal_options) {
  const absl::Time start = absl::Now();
  const std::string job_root = JobRootOf(job_dir_);
  RecordEvent(job_root, "replacement_replay_started", rank, 0);
  absl::StatusOr<recovery::ReplayLog> log = recovery::ReadReplayLog(journal_dir);
  if (!log.ok()) return log.status();
  // The continued journal's current minibatch names the dead agent's capture
  // files: they stay until it is two boundaries old.
  continued_journal_ = true;
  const uint64_t minibatch = log->minibatch;
  // Past the first boundary, a rank with boundary snapshots takes its state
  // at the boundary from the snapshot of the journal's minibatch; one that
  // is missing or corrupt refuses the recovery (docs/recovery.md).
  absl::StatusOr<std::unique_ptr<Snapshot>> snapshot = OpenBoundarySnapshot(minibatch, rank);
  if (!snapshot.ok()) return snapshot.status();
  // Uploads the device captured: their bytes, where the capture completed;
  // none before the snapshot's request (not replayed, and their places may
  // hold later captures: UploadCapturePool::Release).
  if (absl::Status s = LoadCapturedUploads(
          journal_dir, &log->entries, absl::ZeroDuration(),
          *snapshot != nullptr ? (*snapshot)->boundary_seq() : 0, options_.holds.get());
      !s.ok()) {
    return s;
  }
  // Payloads released behind a finished snapshot (their entries precede it
  // and are skipped; ExecuteJournaled refuses one that is not).
  if (const auto released =
          std::count_if(log->entries.begin(), log->entries.end(),
                        [](const journal::JournalEntry& e) { return e.payload_released(); });
      released > 0) {
    REVENANT_LOG(INFO, "agent") << "journal entries with payloads released behind the snapshot: "
                                << released << " (before request "
                                << (*snapshot != nullptr ? (*snapshot)->boundary_seq() : 0)
                                << ", not replayed)";
  }
  backend_->SetReplayPhase(minibatch == 0 ? ReplayPhase::kMinibatchLog : ReplayPhase::kSetupLog);

  CountPostedCallbacks(minibatch);
  // Which requests are replayed, answered or skipped, and where the
  // boundary state is taken: recovery/replay_plan.h.
  recovery::ReplayPlan::Options plan_options;
  if (*snapshot != nullptr) plan_options.snapshot_boundary_seq = (*snapshot)->boundary_seq();
  transport::ShmServerChannel* ch = channel_.get();
  plan_options.last_answered = recovery::LastAnsweredRequest(
      log->entries, {ch->reply_slots(), [ch](uint32_t slot) { return ch->ReplySeq(slot); }});
  plan_options.copies_into_shared_host = [this](const journal::JournalEntry& e) {
    return IsCopyIntoSharedHost(e, *this);
  };
  recovery::ReplayPlan plan(*log, std::move(plan_options));
  size_t replayed = 0, divergences = 0;
  const absl::Status replay = ReplayJournal(plan, snapshot->get(), rank, &replayed, &divergences);
  backend_->SetReplayPhase(ReplayPhase::kNone);
  if (!replay.ok()) return replay;
  if (plan.survivors_ahead()) {
    skip_until_minibatch_ = minibatch + 1;
    REVENANT_LOG(WARNING, "agent")
        << "the survivors were past minibatch " << minibatch
        << ": this rank skips the rest of it (its model state comes from them; results of "
           "that minibatch it had not yet returned to the application are not reproduced)";
  }
  if (divergences > 0) {
    return absl::AbortedError(absl::StrCat(divergences, " of ", replayed,
                                           " replayed requests diverged from the journal"));
  }
  if (absl::Status s =
          ContinueJournal(journal_dir, job, rank, journal_options, minibatch, plan.last_request(),
                          log->boundary_seq, log->entries);
      !s.ok()) {
    return s;
  }
  // A one-rank job's later replays start at the snapshot this one restored
  // (or a newer one): the destroys deferred before it can take effect.
  if (*snapshot != nullptr && options_.world_size == 1) {
    options_.journal->ReplayStartsAt((*snapshot)->boundary_seq());
  }
  RecordEvent(job_root, "replacement_replay_done", rank, 0,
              absl::StrCat(replayed, " requests replayed, minibatch ", minibatch));
  REVENANT_LOG(INFO, "agent") << "recovered: replayed " << replayed << " requests (minibatch "
                              << minibatch << ") in "
                              << absl::ToInt64Milliseconds(absl::Now() - start) << " ms";
  return absl::OkStatus();
}

absl::Status Session::ReplayJournal(recovery::ReplayPlan& plan, const Snapshot* snapshot,
                                    int rank, size_t* replayed, size_t* divergences) {
  replay_setup_ = plan.in_setup();
  replaying_ = true;
  for (const recovery::ReplayRequest& r : plan.requests()) {
    if (plan.TakesBoundaryBefore(r)) {
      // The setup log is replayed: take the state at the boundary, then
      // replay the current minibatch (with the survivors, if any).
      bool behind = false;
      if (absl::Status j = RestoreBoundary(plan.minibatch(), snapshot, rank, &behind); !j.ok()) {
        replaying_ = false;
        return j;
      }
      plan.BoundaryTaken(behind);
      // RestoreBoundary synchronized the device: the setup replay's host
      // callbacks have run (and were dropped); from here the current
      // minibatch's.
      replay_setup_ = false;
    }
    const recovery::ReplayAction action = plan.ActionFor(r);
    if (action == recovery::ReplayAction::kAnswerSuperseded) AnswerSuperseded(*r.entry);
    if (action != recovery::ReplayAction::kReplay) continue;
    // Put back what the application holds: addresses and handle ids.
    if (r.outcome != nullptr && r.outcome->status() == 0) ExpectRecreated(*r.entry, *r.outcome);
    if (absl::Status s = ReplayEntry(*r.entry, r.outcome, divergences); !s.ok()) {
      replaying_ = false;
      replay_setup_ = false;
      return s;
    }
    ++*replayed;
  }
  // Replayed callbacks may still be on their way through the streams: the
  // suppression count drains as they arrive (their origin was taken when they
  // were enqueued).
  if (const int ms = static_cast<int>(
          knobs::Int(knobs::Id::kReplayEndDelayMs, 0, 60000).value_or(0));
      ms > 0) {
    absl::SleepFor(absl::Milliseconds(ms));
  }
  replaying_ = false;
  replay_setup_ = false;
  if (plan.TakesBoundaryAtEnd()) {
    // The minibatch log was empty: take the boundary state now.
    bool behind = false;
    if (absl::Status j = RestoreBoundary(plan.minibatch(), snapshot, rank, &behind); !j.ok()) {
      return j;
    }
    plan.BoundaryTaken(behind);
  }
  return absl::OkStatus();
}

absl::Status Session::ContinueJournal(const std::string& journal_dir, const std::string& job,
                                      int rank, const RequestJournal::Options& journal_options,
                                      uint64_t minibatch, uint64_t last_request,
                                      uint64_t boundary_seq,
                                      const std::vector<journal::JournalEntry>& entries) {
  absl::StatusOr<std::unique_ptr<RequestJournal>> j =
      RequestJournal::Continue(journal_dir, job, rank, journal_options, minibatch);
  if (!j.ok()) return j.status();
  (*j)->RebuildHandles(entries);
  options_.journal = std::move(*j);
  journaling_ = std::make_unique<InlineJournaling>(AsJournalingHost(), channel_.get(),
                                                   options_.journal.get());
  // The ring still holds requests the dead agent journaled but did not
  // release: they were just replayed, or (before the current minibatch's
  // boundary) belong to a minibatch its state is past. The dead agent may
  // have placed the boundary and died before it journaled the request
  // after it (write-behind: the journal thread behind the executor): the
  // journal then holds no entry of the minibatch, only its marker, and
  // that request is the minibatch's first, not another boundary (placing
  // it again made this rank's journal count one minibatch more than its
  // peers').
  uint64_t through = last_request;
  if (boundary_seq != 0) {
    through = std::max(through, boundary_seq - 1);
    options_.journal->BoundaryPlacedBefore(boundary_seq);
    boundary_placed_before_ = boundary_seq;
  }
  if (absl::Status s = channel_->SkipThrough(through); !s.ok()) return s;
  channel_->Release(through);
  journaled_through_ = through;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Snapshot>> Session::OpenBoundarySnapshot(uint64_t minibatch,
                                                                         int rank) {
  if (snapshots_ == nullptr || minibatch == 0) return std::unique_ptr<Snapshot>();
  absl::StatusOr<std::unique_ptr<Snapshot>> opened = snapshots_->Open(minibatch);
  if (!opened.ok()) {
    RecordEvent(JobRootOf(job_dir_), "replacement_snapshot_refused", rank, 0,
                std::string(opened.status().message()));
    return absl::Status(opened.status().code(),
                        absl::StrCat("the journal is at minibatch ", minibatch,
                                     " and its boundary snapshot cannot be used: ",
                                     opened.status().message()));
  }
  return std::move(*opened);
}

absl::Status Session::RestoreBoundary(uint64_t minibatch, const Snapshot* snapshot, int rank,
                                      bool* behind) {
  const std::string job_root = JobRootOf(job_dir_);
  // The setup replay's device work must be done before the state arrives,
  // or it would overwrite it.
  backend_->cudaDeviceSynchronize();
  backend_->MarkBoundary(minibatch);
  backend_->SetReplayPhase(ReplayPhase::kMinibatchLog);
  if (snapshot != nullptr) {
    const absl::Time t0 = absl::Now();
    Backend* b = backend_;
    DeviceWrite write = [b](uint64_t addr, const void* src, size_t n) -> absl::Status {
      const cudaError_t e = b->Memcpy(reinterpret_cast<void*>(addr), src, n,
                                      cudaMemcpyHostToDevice, nullptr, /*async=*/false);
      if (e != cudaSuccess) return absl::InternalError(absl::StrCat("device copy error ", e));
      return absl::OkStatus();
    };
    uint64_t skipped = 0;
    if (absl::Status s = snapshot->Load(write, backend_->DeviceAllocations(), &skipped);
        !s.ok()) {
      return s;
    }
    backend_->cudaDeviceSynchronize();
    const std::string detail = absl::StrCat(
        "minibatch ", minibatch, " from request ", snapshot->boundary_seq(), ", ",
        snapshot->allocations().size() - skipped, " allocations, ", snapshot->bytes(), " bytes, ",
        absl::ToInt64Milliseconds(absl::Now() - t0), " ms");
    RecordEvent(job_root, "replacement_snapshot_loaded", rank, 0, detail);
    REVENANT_LOG(INFO, "agent") << "boundary snapshot loaded: " << detail;
    if (skipped > 0) {
      REVENANT_LOG(WARNING, "agent") << skipped << " allocations of the snapshot no longer "
                                     << "exist after the replay (freed later): not loaded";
    }
    // Communicators with peers still rejoin them (their state then
    // supersedes the snapshot); without any, the snapshot is the state.
    backend_->NoteStateRestored(minibatch);
    absl::Status j = backend_->JoinRecovery(minibatch, behind);
    if (absl::IsUnimplemented(j)) return absl::OkStatus();
    if (!j.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the journal is at minibatch ", minibatch, ": rejoining the peers failed: ",
          j.ToString()));
    }
    // A survivor's state superseded the snapshot, if there was a survivor.
    RecordEvent(job_root, "replacement_rejoined", rank, 0,
                absl::StrCat("minibatch ", minibatch));
    return absl::OkStatus();
  }
  absl::Status j = backend_->JoinRecovery(minibatch, behind);
  if (!j.ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the journal is at minibatch ", minibatch,
        ": its state comes from a healthy data-parallel peer, and none answered (a rank "
        "without a replica needs boundary snapshots: --snapshots=on): ",
        j.ToString()));
  }
  RecordEvent(job_root, "replacement_state_received", rank, 0,
              absl::StrCat("minibatch ", minibatch));
  return absl::OkStatus();
}

void Session::CountPostedCallbacks(uint64_t minibatch) {
  // The replay regenerates the host callbacks of the requests it replays:
  // those of the journal's current minibatch (or of everything, before the
  // first boundary). The application already has the ones the dead agent
  // posted for them: the callbacks posted since the dead agent started this
  // minibatch (it recorded the count then, in the channel). If it had not
  // started it yet (killed between journaling the boundary and running
  // its request), none: the count for this minibatch starts now.
  std::lock_guard<std::mutex> lock(callback_mu_);
  callbacks_sent_ = channel_->callbacks().last_seq();
  uint64_t started = 0, at_start = 0;
  channel_->GetMinibatchCallbacks(&started, &at_start);
  if (started != minibatch || at_start > callbacks_sent_) {
    channel_->SetMinibatchCallbacks(minibatch, callbacks_sent_);
    at_start = callbacks_sent_;
  }
  callbacks_to_suppress_ = callbacks_sent_ - at_start;
  REVENANT_LOG(DEBUG, "agent") << "replay of minibatch " << minibatch << ": "
                               << callbacks_to_suppress_ << " host callbacks already posted";
}

void Session::AnswerSuperseded(const journal::JournalEntry& e) {
  const uint64_t seq = e.seq() / 2;
  const int slot = journal::ReplySlotOf(e);
  if (slot >= 0 && static_cast<uint32_t>(slot) < channel_->reply_slots() &&
      channel_->ReplySeq(slot) < seq) {
    ReplyPrefix prefix;
    std::memcpy(channel_->ReplyBuffer(slot), &prefix, sizeof(prefix));
    channel_->PostReply(slot, seq, 0, kReplyPrefixSize);
  }
}

void Session::ExpectRecreated(const journal::JournalEntry& e,
                              const journal::JournalEntry& outcome) {
  const auto id = static_cast<api::ApiId>(e.api_id());
  const api::ApiTraits& traits = api::Traits(e.api_id());
  const uint64_t key = FirstOutU64(outcome.outputs());
  if (id == api::ApiId::cudaMalloc || id == api::ApiId::cudaMallocAsync ||
      id == api::ApiId::ncclMemAlloc) {
    if (key != 0) backend_->ExpectNextAllocation(key);
  } else if (traits.creates != api::HandleKind::kNone && key != 0) {
    handles_.ExpectNext(traits.creates, key);
    // A graph alloc node also puts its memory back where it was.
    if (const uint64_t dptr = AllocNodeAddress(id, e.args(), outcome.outputs()); dptr != 0) {
      backend_->ExpectNextAllocation(dptr);
      REVENANT_LOG(DEBUG, "agent")
          << absl::StrCat("replay: graph memory expected at 0x", absl::Hex(dptr));
    }
  } else if (id == api::ApiId::__cudaRegisterFatBinaryEnd && key != 0) {
    handles_.ExpectNext(api::HandleKind::kFunction, key);
  }
}

absl::Status Session::ReplayEntry(const journal::JournalEntry& e,
                                  const journal::JournalEntry* outcome, size_t* divergences) {
  const absl::Status s = ExecuteJournaled(e, outcome);
  if (s.ok()) return absl::OkStatus();
  const uint64_t seq = e.seq() / 2;
  ++*divergences;
  REVENANT_LOG(ERROR, "agent") << "replay of request " << seq << " ("
                               << api::Traits(e.api_id()).name << ") diverged: " << s;
  // The application holds a device variable's address (from
  // cudaGetSymbolAddress) that this agent has elsewhere: later requests
  // may pass it to kernels, which would fault here. Stop now.
  if (static_cast<api::ApiId>(e.api_id()) == api::ApiId::__cudaRegisterVar) {
    return absl::FailedPreconditionError(absl::StrCat(
        "the application holds the address of a __device__ variable (cudaGetSymbolAddress, "
        "request ", seq, ") that this replacement agent has at another address: the job "
        "cannot be recovered past that call"));
  }
  return absl::OkStatus();
}

absl::Status Session::ExecuteReplayed(const transport::RecordHeader& rec,
                                      const journal::JournalEntry* expected) {
  const api::ApiTraits& traits = api::Traits(static_cast<uint32_t>(rec.api_id));
  const bool nccl = traits.library == api::Library::kNccl;
  const bool valid_slot =
      rec.reply_slot >= 0 && static_cast<uint32_t>(rec.reply_slot) < channel_->reply_slots();
  // Answer only a request the application still waits for: its slot holds
  // no reply to it or to a later request.
  const bool post =
      !validating_.load() && valid_slot && channel_->ReplySeq(rec.reply_slot) < rec.seq;
  thread_local std::vector<char> scratch(64 << 10);
  char* reply = post ? channel_->ReplyBuffer(rec.reply_slot) : scratch.data();
  const uint32_t capacity = post ? channel_->reply_data_size() : scratch.size();
  wire::Decoder in(rec.body(), rec.body_size());
  wire::Encoder out(reply + kReplyPrefixSize, capacity - kReplyPrefixSize);
  ctx_.seq = rec.seq;
  int32_t status = kNoDispatcher;
  if (static_cast<api::ApiId>(rec.api_id) == api::ApiId::cudaGraphLaunch) {
    status = DispatchReplayedGraphLaunch(in, out);
  } else if (traits.dispatched) {
    status = Dispatch(static_cast<api::ApiId>(rec.api_id), in, out, ctx_);
  }
  if (status == kNoDispatcher) status = nccl ? ncclInvalidArgument : cudaErrorInvalidValue;
  if (post) {
    ReplyPrefix prefix;
    std::memcpy(reply, &prefix, sizeof(prefix));
    const uint32_t size = kReplyPrefixSize + static_cast<uint32_t>(out.size());
    uint64_t callbacks = 0;
    {
      std::lock_guard<std::mutex> lock(callback_mu_);
      callbacks = callbacks_sent_;
    }
    if (callbacks > channel_->callbacks_done()) {
      deferred_replies_.push_back(
          {rec.reply_slot, rec.seq, static_cast<uint32_t>(status), size, callbacks});
    } else {
      channel_->PostReply(rec.reply_slot, rec.seq, static_cast<uint32_t>(status), size);
    }
  }
  if (expected == nullptr) return absl::OkStatus();
  if (expected->status() != status) {
    return absl::DataLossError(absl::StrCat("status ", status, ", the application was told ",
                                            expected->status()));
  }
  if (status == 0 && expected->outputs() != std::string(reply + kReplyPrefixSize, out.size())) {
    return absl::DataLossError("results differ from what the application was told");
  }
  return absl::OkStatus();
}

absl::Status Session::ReplaySilently(const journal::JournalEntry& e,
                                     const journal::JournalEntry* outcome) {
  if (!recovery::ReplaysSilently(e, [this](const journal::JournalEntry& c) {
        return IsCopyIntoSharedHost(c, *this);
      })) {
    return absl::OkStatus();
  }
  return ExecuteJournaled(e, outcome);
}

absl::Status Session::ExecuteJournaled(const journal::JournalEntry& e,
                                       const journal::JournalEntry* outcome) {
  if (e.payload_released()) {
    // Released behind a snapshot past it: a replay never starts before that
    // snapshot, so reaching it means the plan or the journal is wrong.
    return absl::DataLossError(absl::StrCat(
        "journal entry ", e.seq(), " (request ", e.seq() / 2,
        ") would be replayed, but its payload was released behind a later snapshot"));
  }
  const std::string body = ReplayBody(e);
  std::vector<char> record(sizeof(transport::RecordHeader) + body.size());
  auto* h = reinterpret_cast<transport::RecordHeader*>(record.data());
  h->size = static_cast<uint32_t>(record.size());
  h->api_id = static_cast<uint16_t>(e.api_id());
  h->flags = static_cast<uint16_t>(e.flags() & 0xffff);
  h->seq = e.seq() / 2;
  h->reply_slot = journal::ReplySlotOf(e);
  h->body_crc_or_reserved = 0;
  std::memcpy(record.data() + sizeof(*h), body.data(), body.size());
  return ExecuteReplayed(*h, outcome);
}

}  // namespace agent
}  // namespace revenant
