#include "agent/validator.h"

#include "agent/upload_capture.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "agent/session.h"
#include "api/traits.h"
#include "common/events.h"
#include "common/logging.h"
#include "common/crc32c.h"
#include "journal/journal.h"
#include "recovery/replay_plan.h"

namespace revenant {
namespace agent {
namespace {

constexpr char kLog[] = "validator";

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

absl::Status ReadDevice(Backend* backend, uint64_t addr, uint64_t size, char* out) {
  const cudaError_t e = backend->Memcpy(out, reinterpret_cast<const void*>(addr), size,
                                        cudaMemcpyDeviceToHost, nullptr, /*async=*/false);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("reading ", size, " bytes at ", Hex(addr),
                                            " from the device failed: error ", e));
  }
  return absl::OkStatus();
}

absl::Status WriteDevice(Backend* backend, uint64_t addr, const std::vector<char>& bytes) {
  const cudaError_t e =
      backend->Memcpy(reinterpret_cast<void*>(addr), bytes.data(), bytes.size(),
                      cudaMemcpyHostToDevice, nullptr, /*async=*/false);
  if (e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("writing ", bytes.size(), " bytes at ", Hex(addr),
                                            " to the device failed: error ", e));
  }
  return absl::OkStatus();
}

}  // namespace

uint64_t FirstDifference(const char* a, const char* b, uint64_t n) {
  // Word-wise first, then the bytes of the first differing word.
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t x, y;
    std::memcpy(&x, a + i, 8);
    std::memcpy(&y, b + i, 8);
    if (x != y) break;
  }
  for (; i < n; ++i) {
    if (a[i] != b[i]) return i;
  }
  return n;
}

absl::StatusOr<DeviceSnapshot> DeviceSnapshot::Take(Backend* backend) {
  DeviceSnapshot snap;
  for (const auto& [addr, size] : backend->DeviceAllocations()) {
    Block b;
    b.addr = addr;
    b.size = size;
    b.bytes.resize(size);
    if (size > 0) {
      if (absl::Status s = ReadDevice(backend, addr, size, b.bytes.data()); !s.ok()) return s;
    }
    b.crc = crc32c::Value(b.bytes.data(), b.bytes.size());
    snap.blocks_.push_back(std::move(b));
  }
  return snap;
}

absl::Status DeviceSnapshot::Restore(Backend* backend) const {
  for (const Block& b : blocks_) {
    if (b.size == 0) continue;
    if (absl::Status s = WriteDevice(backend, b.addr, b.bytes); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeviceSnapshot::Difference>> DeviceSnapshot::Compare(
    Backend* backend, bool restore) const {
  std::vector<Difference> out;
  std::vector<char> now;
  for (const Block& b : blocks_) {
    if (b.size == 0) continue;
    now.resize(b.size);
    if (absl::Status s = ReadDevice(backend, b.addr, b.size, now.data()); !s.ok()) return s;
    const uint32_t crc = crc32c::Value(now.data(), now.size());
    // The checksums decide; the bytes give the offset (and catch the rare
    // collision).
    const uint64_t first = FirstDifference(b.bytes.data(), now.data(), b.size);
    if (crc == b.crc && first == b.size) continue;
    Difference d;
    d.addr = b.addr;
    d.size = b.size;
    d.first_offset = first;
    d.expected_crc = b.crc;
    d.actual_crc = crc;
    out.push_back(d);
    if (restore) {
      if (absl::Status s = WriteDevice(backend, b.addr, b.bytes); !s.ok()) return s;
    }
  }
  return out;
}

std::vector<std::pair<uint64_t, uint64_t>> DeviceSnapshot::allocations() const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const Block& b : blocks_) out.emplace_back(b.addr, b.size);
  return out;
}

uint64_t DeviceSnapshot::bytes() const {
  uint64_t n = 0;
  for (const Block& b : blocks_) n += b.size;
  return n;
}

Validator::Validator(Session* session, ValidatorOptions options)
    : session_(session), options_(std::move(options)) {
  REVENANT_LOG(INFO, kLog) << "rank " << options_.rank << ": validating every "
                           << options_.every << " minibatches";
}

Validator::~Validator() {
  if (stats_.validated + stats_.skipped > 0) {
    REVENANT_LOG(INFO, kLog) << "rank " << options_.rank << ": " << stats_.validated
                             << " minibatches validated, " << stats_.failed
                             << " did not reproduce, " << stats_.skipped << " skipped";
  }
}

void Validator::Event(const std::string& name, const std::string& detail) {
  if (!options_.job_root.empty()) RecordEvent(options_.job_root, name, options_.rank, 0, detail);
}

void Validator::Skip(uint64_t minibatch, const std::string& why) {
  ++stats_.skipped;
  REVENANT_LOG(WARNING, kLog) << "rank " << options_.rank << ": minibatch " << minibatch
                              << " not validated: " << why;
  Event("validation_skipped", absl::StrCat("minibatch ", minibatch, ": ", why));
}

void Validator::MinibatchStarted(uint64_t minibatch) {
  if (start_ != nullptr) {
    // The previous one's end was not seen (a boundary this validator was
    // not told about beforehand): its log is gone.
    Skip(start_minibatch_, "its end was not observed before its log was cleared");
    start_.reset();
  }
  if (options_.every == 0 || minibatch == 0 || minibatch % options_.every != 0) return;
  uint64_t live = 0;
  for (const auto& [addr, size] : session_->backend()->DeviceAllocations()) live += size;
  if (live > options_.max_bytes) {
    Skip(minibatch, absl::StrCat(live, " bytes of device memory are live, above the validator's ",
                                 options_.max_bytes, " (it holds two host copies)"));
    return;
  }
  if (session_->SynchronizeKeepingErrors() != 0) {
    Skip(minibatch, "the device reported an error at its boundary");
    return;
  }
  absl::StatusOr<DeviceSnapshot> snap = DeviceSnapshot::Take(session_->backend());
  if (!snap.ok()) {
    Skip(minibatch, absl::StrCat("cannot copy the device state: ", snap.status().ToString()));
    return;
  }
  start_ = std::make_unique<DeviceSnapshot>(std::move(*snap));
  start_minibatch_ = minibatch;
  state_request_.clear();
}

void Validator::NoteStateRequest(const char* api_name) {
  if (start_ != nullptr && state_request_.empty()) state_request_ = api_name;
}

void Validator::MinibatchEnding(uint64_t minibatch, const std::string& journal_dir) {
  if (start_ == nullptr || start_minibatch_ != minibatch) return;
  absl::Status s = Check(minibatch, journal_dir);
  start_.reset();
  if (absl::IsDataLoss(s)) {
    // The journal itself is unreadable: a replacement could not replay it.
    ++stats_.failed;
    REVENANT_LOG(ERROR, kLog) << "rank " << options_.rank << ": minibatch " << minibatch
                              << ": the journal cannot be read back: " << s;
    Event("validation_failed", absl::StrCat("minibatch ", minibatch, ": ", s.message()));
  } else if (!s.ok()) {
    Skip(minibatch, s.ToString());
  }
}

absl::Status Validator::Replayable() {
  if (session_->SynchronizeKeepingErrors() != 0) {
    return absl::FailedPreconditionError("the device reported an error at its end");
  }
  if (!state_request_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "it made state-class requests (", state_request_,
        " first), which its minibatch log does not hold"));
  }
  if (session_->backend()->DeviceAllocations() != start_->allocations()) {
    return absl::FailedPreconditionError(
        "device memory was allocated or freed during it (only minibatches whose allocations "
        "stay the same are replayed)");
  }
  return absl::OkStatus();
}

absl::Status Validator::BeginCollectives() {
  absl::Status b = session_->backend()->BeginValidationReplay();
  if (!b.ok()) {
    if (!warned_collectives_) {
      warned_collectives_ = true;
      REVENANT_LOG(WARNING, kLog) << "minibatches with collectives cannot be validated here: "
                                  << b;
    }
    return absl::UnimplementedError(absl::StrCat("it has collectives: ", b.message()));
  }
  return absl::OkStatus();
}

uint64_t Validator::ReplayLog(uint64_t minibatch, const recovery::SilentReplayPlan& plan) {
  uint64_t diverged = 0;
  for (const recovery::ReplayRequest& r : plan.requests) {
    const journal::JournalEntry& e = *r.entry;
    if (absl::Status s = session_->ReplaySilently(e, r.outcome); !s.ok()) {
      ++diverged;
      REVENANT_LOG(ERROR, kLog) << "rank " << options_.rank << ": minibatch " << minibatch
                                << ": replayed request " << r.seq << " ("
                                << api::Traits(e.api_id()).name
                                << ") differs from what the application was told: " << s;
      Event("validation_mismatch",
            absl::StrCat("minibatch ", minibatch, " request ", r.seq, " (",
                         api::Traits(e.api_id()).name, "): ", s.message()));
    }
  }
  return diverged;
}

absl::Status Validator::Check(uint64_t minibatch, const std::string& journal_dir) {
  const absl::Time t0 = absl::Now();
  Backend* backend = session_->backend();
  if (absl::Status s = Replayable(); !s.ok()) return s;
  // The minibatch log as a replacement would read it, and what of it is
  // replayed silently (recovery/replay_plan.h).
  // The minibatch's captured uploads, from this live agent's capture files:
  // a capture still on its way is waited for (bounded).
  absl::StatusOr<std::vector<journal::JournalEntry>> entries = recovery::ReadMinibatchLog(
      journal_dir, minibatch, [&](std::vector<journal::JournalEntry>* log) {
        return LoadCapturedUploads(journal_dir, log, absl::Seconds(30));
      });
  if (!entries.ok()) return entries.status();
  absl::StatusOr<recovery::SilentReplayPlan> plan = recovery::PlanSilentReplay(*entries);
  if (!plan.ok()) return plan.status();
  const bool collectives = plan->collectives;
  const size_t requests = plan->requests.size();
  if (collectives) {
    if (absl::Status s = BeginCollectives(); !s.ok()) return s;
  }

  // The real run's state, then the boundary's, then the replay.
  absl::StatusOr<DeviceSnapshot> real = DeviceSnapshot::Take(backend);
  absl::Status restored = real.ok() ? start_->Restore(backend) : real.status();
  if (!restored.ok()) {
    if (collectives) (void)backend->EndValidationReplay();
    if (real.ok()) (void)real->Restore(backend);
    return restored;
  }
  session_->set_validating(true);
  const uint64_t diverged = ReplayLog(minibatch, *plan);
  const cudaError_t replay_error = backend->cudaDeviceSynchronize();
  session_->set_validating(false);
  absl::Status end = collectives ? backend->EndValidationReplay() : absl::OkStatus();

  absl::StatusOr<std::vector<DeviceSnapshot::Difference>> diffs =
      real->Compare(backend, /*restore=*/true);
  if (!diffs.ok()) {
    // Whatever the comparison did, the real run's state goes back.
    (void)real->Restore(backend);
    return diffs.status();
  }
  Report(minibatch, requests, diverged, replay_error, end, *diffs, t0);
  return absl::OkStatus();
}

void Validator::Report(uint64_t minibatch, size_t requests, uint64_t diverged,
                       cudaError_t replay_error, const absl::Status& end,
                       const std::vector<DeviceSnapshot::Difference>& diffs, absl::Time t0) {
  bool failed = diverged > 0 || replay_error != cudaSuccess || !end.ok() || !diffs.empty();
  if (replay_error != cudaSuccess) {
    REVENANT_LOG(ERROR, kLog) << "rank " << options_.rank << ": minibatch " << minibatch
                              << ": its replay failed on the device with error "
                              << static_cast<int>(replay_error);
    Event("validation_mismatch", absl::StrCat("minibatch ", minibatch,
                                              ": replay failed with error ",
                                              static_cast<int>(replay_error)));
  }
  if (!end.ok()) {
    REVENANT_LOG(ERROR, kLog) << "rank " << options_.rank << ": minibatch " << minibatch
                              << ": " << end;
    Event("validation_mismatch", absl::StrCat("minibatch ", minibatch, ": ", end.message()));
  }
  for (const DeviceSnapshot::Difference& d : diffs) {
    REVENANT_LOG(ERROR, kLog)
        << "rank " << options_.rank << ": minibatch " << minibatch
        << " does not replay to the same state: allocation " << Hex(d.addr) << " (" << d.size
        << " bytes) differs from byte " << d.first_offset << " on (crc32c "
        << absl::StrFormat("%08x", d.expected_crc) << " run, "
        << absl::StrFormat("%08x", d.actual_crc)
        << " replay); the device state depends on something the journal does not capture";
    Event("validation_mismatch",
          absl::StrCat("minibatch ", minibatch, " allocation ", Hex(d.addr), " size ", d.size,
                       " first_offset ", d.first_offset));
  }
  ++stats_.validated;
  stats_.mismatched_allocations += diffs.size();
  stats_.diverged_results += diverged;
  const int64_t ms = absl::ToInt64Milliseconds(absl::Now() - t0);
  const std::string summary =
      absl::StrCat("minibatch ", minibatch, ": ", requests, " requests replayed, ",
                   start_->blocks().size(), " allocations (", start_->bytes(), " bytes) compared, ",
                   diffs.size(), " differ, ", diverged, " results differ, ", ms, " ms");
  if (failed) {
    ++stats_.failed;
    Event("validation_failed", summary);
  } else {
    REVENANT_LOG(INFO, kLog) << "rank " << options_.rank << ": validated " << summary;
    Event("validation_passed", summary);
  }
}

}  // namespace agent
}  // namespace revenant
