#include "agent/journaling.h"

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/traits.h"
#include "api/wire.h"
#include "common/knobs.h"
#include "common/logging.h"
#include "journal/file.h"

namespace revenant {
namespace agent {
namespace {

uint64_t Mix(uint64_t a, uint64_t b) {
  uint64_t h = a * 0x9e3779b97f4a7c15ull ^ (b + 0x632be59bd9b4e019ull + (a << 6) + (a >> 2));
  return h ^ (h >> 29);
}

uint64_t FirstU64(absl::string_view body) {
  uint64_t v = 0;
  if (body.size() >= sizeof(v)) std::memcpy(&v, body.data(), sizeof(v));
  return v;
}

// The first byte field of a reply's OUT values, as a u64 (an address or a
// virtual handle), or 0.
uint64_t FirstOutU64(absl::string_view outputs) {
  wire::Decoder d(outputs.data(), outputs.size());
  const char* data = nullptr;
  uint64_t n = 0;
  uint64_t v = 0;
  if (d.GetBytes(&data, &n) && data != nullptr && n >= sizeof(v)) std::memcpy(&v, data, sizeof(v));
  return v;
}

}  // namespace

uint64_t SymbolWriteRegion(uint16_t api_id, absl::string_view body) {
  const auto id = static_cast<api::ApiId>(api_id);
  if (id != api::ApiId::cudaMemcpyToSymbol && id != api::ApiId::cudaMemcpyToSymbolAsync) return 0;
  wire::Decoder in(body.data(), body.size());
  hooks::cudaMemcpyToSymbolRequest r;
  if (!r.Decode(in) || r.device_name.data == nullptr || r.head.mode != hooks::kInlineSource)
    return 0;
  uint64_t key = Mix(r.module_key, r.offset);
  for (uint64_t i = 0; i < r.device_name.size; ++i)
    key = Mix(key, static_cast<unsigned char>(r.device_name.data[i]));
  return Mix(key, r.head.count) | 1;
}

namespace {

// One attribute (a sets_attribute row) of one handle: per row, and per
// attribute id where one row sets many (attribute_in_second: cuBLASLt's
// descriptor setters).
uint64_t AttributeKey(uint64_t handle, uint16_t api_id, const api::ApiTraits& traits,
                      absl::string_view body) {
  if (!traits.attribute_in_second) return Mix(handle, 0xa77ull << 16 | api_id);
  uint32_t attribute = 0;
  if (body.size() >= sizeof(uint64_t) + sizeof(attribute)) {
    std::memcpy(&attribute, body.data() + sizeof(uint64_t), sizeof(attribute));
  }
  return Mix(Mix(handle, static_cast<uint64_t>(attribute) + 1), 0xa77ull << 16 | api_id);
}

// Handles whose destruction the setup log applies only once the minibatch
// of the destroy is over, and never for minibatch 0: cuBLASLt's descriptors,
// which PyTorch makes and drops at every matmul. A replay of the current
// minibatch (or of minibatch 0, always replayed) reruns matmuls that name
// descriptors destroyed since; with the destroy applied at once, a
// compaction would have dropped their creation and setters.
bool DefersDestroy(api::HandleKind kind) {
  return kind == api::HandleKind::kLtHandle || kind == api::HandleKind::kLtMatmulDesc ||
         kind == api::HandleKind::kLtMatrixLayout || kind == api::HandleKind::kLtMatmulPreference ||
         kind == api::HandleKind::kDnnDescriptor;  // variant packs only (TrackCreated)
}

// The descriptor type of a cudnnBackendCreateDescriptor request (after the
// id the shim assigned, 0 if none), or -1.
int64_t CreatedDnnType(absl::string_view body) {
  wire::Decoder in(body.data(), body.size());
  uint64_t assigned = 0;
  std::underlying_type_t<cudnnBackendDescriptorType_t> type{};
  if (!in.Get(&assigned) || !in.Get(&type)) return -1;
  return static_cast<int64_t>(type);
}

// The calls that name a backend descriptor first and build or read it.
bool BuildsDnnDescriptor(api::ApiId id) {
  return id == api::ApiId::cudnnBackendSetAttribute || id == api::ApiId::cudnnBackendGetAttribute ||
         id == api::ApiId::cudnnBackendFinalize;
}

bool IsAllocation(api::ApiId id) {
  return id == api::ApiId::cudaMalloc || id == api::ApiId::cudaMallocAsync ||
         id == api::ApiId::ncclMemAlloc;
}
bool IsFree(api::ApiId id) {
  return id == api::ApiId::cudaFree || id == api::ApiId::cudaFreeAsync ||
         id == api::ApiId::ncclMemFree || id == api::ApiId::cudaFreeHost ||
         id == api::ApiId::cudaHostUnregister;
}
bool IsSharedHostAlloc(api::ApiId id) {
  return id == api::ApiId::cudaHostAlloc || id == api::ApiId::cudaMallocHost ||
         id == api::ApiId::cudaHostRegister;
}

// cuDNN handles and backend descriptors are never compacted away: their
// creation, every call that builds them and their destruction stay in the
// setup log (no journal keys), except variant packs (RequestJournal::
// dnn_packs_), which no descriptor refers to and PyTorch makes at every
// convolution. A descriptor refers to others (an execution
// plan to its engine config, an operation to its tensors, a plan to its
// handle), and cuDNN lets the application destroy the referred ones while
// the referring one lives on; dropping a destroyed descriptor's calls would
// leave a replay unable to rebuild those that still use it. Their number is
// bounded by what the application builds (PyTorch caches its plans). The
// legacy descriptors (tensor, filter, convolution, activation) likewise: their
// setters carry no keys either, so their creation must stay with them.
bool KeepsEveryCall(api::HandleKind kind) {
  switch (kind) {
    case api::HandleKind::kDnnHandle:
    case api::HandleKind::kDnnDescriptor:
    case api::HandleKind::kDnnTensor:
    case api::HandleKind::kDnnFilter:
    case api::HandleKind::kDnnConvolution:
    case api::HandleKind::kDnnActivation:
      return true;
    default:
      return api::IsDnnLegacyKindAfterActivation(kind);
  }
}

}  // namespace

bool InlineCopyArgs(uint16_t api_id, absl::string_view body, std::string* args,
                    absl::string_view* bytes) {
  const auto id = static_cast<api::ApiId>(api_id);
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return false;
  if (body.size() < kInlineCopyPayloadMin) return false;
  wire::Decoder in(body.data(), body.size());
  hooks::cudaMemcpyRequest r;
  if (!r.Decode(in) || in.remaining() != 0 || r.head.mode != hooks::kInlineSource ||
      r.data.data == nullptr || r.data.size != r.head.count ||
      r.data.size < kInlineCopyPayloadMin) {
    return false;
  }
  *bytes = absl::string_view(r.data.data, r.data.size);
  r.data = wire::Bytes();
  args->resize(r.Size());
  wire::Encoder out(args->data(), args->size());
  r.Encode(out);
  return !out.overflow();
}

bool ReplayCopyBody(uint16_t api_id, absl::string_view args, absl::string_view bytes,
                    std::string* body) {
  const auto id = static_cast<api::ApiId>(api_id);
  if ((id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) || bytes.empty()) {
    return false;
  }
  wire::Decoder in(args.data(), args.size());
  hooks::cudaMemcpyRequest r;
  if (!r.head.Decode(in) || r.head.count != bytes.size()) return false;
  if (r.head.mode == hooks::kInlineSource) {
    // InlineCopyArgs's: the bytes field is null.
    wire::Decoder whole(args.data(), args.size());
    if (!r.Decode(whole) || whole.remaining() != 0 || r.data.data != nullptr) return false;
  } else if (r.head.mode != hooks::kDirect && r.head.mode != hooks::kStagingSource) {
    return false;
  }
  r.head.mode = hooks::kInlineSource;
  r.data = wire::Bytes::Of(bytes.data(), bytes.size());
  std::string b(r.Size(), '\0');
  wire::Encoder out(b.data(), b.size());
  r.Encode(out);
  if (out.overflow()) return false;
  *body = std::move(b);
  return true;
}

bool MinibatchDetector::OnRequest(uint16_t api_id, absl::string_view body) {
  const auto id = static_cast<api::ApiId>(api_id);
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return false;
  wire::Decoder in(body.data(), body.size());
  hooks::CopyHead h;
  if (!h.Decode(in)) return false;
  const bool h2d = h.kind == cudaMemcpyHostToDevice ||
                   (h.kind == cudaMemcpyDefault &&
                    (h.mode == hooks::kInlineSource || h.mode == hooks::kStagingSource));
  if (!h2d) return false;
  const uint64_t signature = Mix(h.dst, h.count);
  if (anchored_) return signature == anchor_;
  if (!seen_.insert(signature).second) {
    anchored_ = true;
    anchor_ = signature;
    seen_.clear();
    return true;
  }
  return false;
}

bool MinibatchDetector::WouldMark(uint16_t api_id, absl::string_view body) const {
  MinibatchDetector probe;
  probe.anchored_ = anchored_;
  probe.anchor_ = anchor_;
  if (!anchored_) {
    // Only this request's signature matters: a repeat of an earlier one.
    const auto id = static_cast<api::ApiId>(api_id);
    if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return false;
    wire::Decoder in(body.data(), body.size());
    hooks::CopyHead h;
    if (!h.Decode(in)) return false;
    if (seen_.contains(Mix(h.dst, h.count))) probe.seen_.insert(Mix(h.dst, h.count));
  }
  return probe.OnRequest(api_id, body);
}

absl::StatusOr<std::unique_ptr<RequestJournal>> RequestJournal::Open(const std::string& dir,
                                                                     const std::string& job,
                                                                     int rank,
                                                                     const Options& options) {
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  absl::StatusOr<std::unique_ptr<journal::Journal>> j =
      journal::Journal::Open(dir, job, static_cast<uint32_t>(rank), options.journal);
  if (!j.ok()) return j.status();
  return std::unique_ptr<RequestJournal>(new RequestJournal(std::move(*j), options));
}

absl::StatusOr<std::unique_ptr<RequestJournal>> RequestJournal::Continue(
    const std::string& dir, const std::string& job, int rank, const Options& options,
    uint64_t minibatch) {
  absl::StatusOr<std::unique_ptr<journal::Journal>> j =
      journal::Journal::Open(dir, job, static_cast<uint32_t>(rank), options.journal);
  if (!j.ok()) return j.status();
  auto rj = std::unique_ptr<RequestJournal>(new RequestJournal(std::move(*j), options));
  rj->minibatch_.store(minibatch);
  std::ifstream anchor(dir + "/anchor");
  uint64_t a = 0;
  if (anchor >> a) rj->detector_.SetAnchor(a);
  return rj;
}

void RequestJournal::RebuildHandles(const std::vector<journal::JournalEntry>& entries) {
  absl::flat_hash_map<uint64_t, const journal::JournalEntry*> requests;
  for (const journal::JournalEntry& e : entries) {
    if (e.api_id() == journal::kBoundaryApiId) continue;
    if (e.api_id() == journal::kOutcomeApiId) {
      // A creation the agent assigned the handle of (AfterExecute).
      auto it = requests.find(e.completes());
      if (it == requests.end() || e.status() != 0) continue;
      const journal::JournalEntry& req = *it->second;
      TrackCreated(static_cast<api::ApiId>(req.api_id()), api::Traits(req.api_id()), req.args(),
                   FirstOutU64(e.outputs()), nullptr);
      continue;
    }
    requests[e.seq()] = &e;
    const api::ApiTraits& traits = api::Traits(e.api_id());
    const uint64_t handle = FirstU64(e.args());
    if (traits.destroys != api::HandleKind::kNone) {
      dnn_packs_.erase(handle);
      deferrable_.erase(handle);
    }
    // A creation whose handle the shim assigned (BeforeExecute).
    if (traits.shim_assigns) {
      TrackCreated(static_cast<api::ApiId>(e.api_id()), traits, e.args(), handle, nullptr);
    }
  }
  // The deferred destroys whose keys no entry destroyed yet (pending when
  // the agent died) are pending again, in journaling order, with the keys
  // BeforeExecute gave them: the handle and its setters' calls still live.
  // (A key destroyed twice would hold the second entry forever.)
  absl::flat_hash_set<uint64_t> destroyed;
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> setter_keys;
  for (const journal::JournalEntry& e : entries) {
    for (uint64_t key : e.destroys()) destroyed.insert(key);
  }
  RebuildAttributeCalls(entries, destroyed);
  for (const journal::JournalEntry& e : entries) {
    if (e.api_id() == journal::kBoundaryApiId || e.api_id() == journal::kOutcomeApiId) continue;
    if (!api::Traits(e.api_id()).sets_attribute) continue;
    std::vector<uint64_t>& keys = setter_keys[FirstU64(e.args())];
    for (uint64_t key : e.creates()) {
      if (!destroyed.contains(key)) keys.push_back(key);
    }
  }
  for (const journal::JournalEntry& e : entries) {
    if (e.api_id() == journal::kBoundaryApiId || e.api_id() == journal::kOutcomeApiId) continue;
    const api::ApiTraits& traits = api::Traits(e.api_id());
    if (traits.destroys == api::HandleKind::kNone || !DefersDestroy(traits.destroys) ||
        e.minibatch() == 0) {
      continue;
    }
    const uint64_t handle = FirstU64(e.args());
    if (std::find(e.touches().begin(), e.touches().end(), handle) == e.touches().end() ||
        destroyed.contains(handle)) {
      continue;  // not deferred, or already in effect
    }
    PendingDestroy p{e.minibatch(), e.seq() / 2, {handle}};
    if (auto it = setter_keys.find(handle); it != setter_keys.end()) {
      p.keys.insert(p.keys.end(), it->second.begin(), it->second.end());
    }
    pending_destroys_.push_back(std::move(p));
  }
}

void RequestJournal::RebuildAttributeCalls(const std::vector<journal::JournalEntry>& entries,
                                           const absl::flat_hash_set<uint64_t>& destroyed) {
  // Each attribute call still live (its key not destroyed) is known again,
  // so that later calls drop it as they would have (JournalAttributeCall)
  // and the handle's destruction takes it along. Minibatch 0's stay with the
  // handle; the later ones all count as calls of the newest minibatch among
  // them, in request order: a call of a later minibatch leaves only the last
  // (a dead agent's anchor among them goes with it), and a replay start
  // inside that minibatch drops those before it but the last.
  for (const journal::JournalEntry& e : entries) {
    if (e.api_id() == journal::kBoundaryApiId || e.api_id() == journal::kOutcomeApiId) continue;
    const api::ApiTraits& traits = api::Traits(e.api_id());
    uint64_t handle = 0;
    if (traits.sets_attribute) {
      handle = FirstU64(e.args());
    } else {
      handle = SymbolWriteRegion(static_cast<uint16_t>(e.api_id()), e.args());
    }
    if (handle == 0) continue;
    const uint64_t attribute =
        AttributeKey(handle, static_cast<uint16_t>(e.api_id()), traits, e.args());
    for (uint64_t key : e.creates()) {
      if (key != Mix(attribute, e.seq() / 2) || destroyed.contains(key)) continue;
      auto [slot, inserted] = attribute_calls_.try_emplace(attribute);
      if (inserted) handle_attributes_[handle].push_back(attribute);
      AttributeCalls& a = slot->second;
      if (e.minibatch() == 0) {
        a.setup.push_back(key);
      } else {
        a.minibatch = std::max<uint64_t>(a.minibatch, e.minibatch());
        a.current.push_back(key);
        a.current_seqs.push_back(e.seq() / 2);
      }
    }
  }
}

RequestJournal::RequestJournal(std::unique_ptr<journal::Journal> journal, Options options)
    : journal_(std::move(journal)), options_(options), timing_([] {
        return knobs::Bool(knobs::Id::kJournalTiming).value_or(false);
      }()) {}

// Adds the lifetime of the object to busy_ns_ when timing is on.
class RequestJournal::Timed {
 public:
  // `key`: what the time is counted under in the breakdown (an API id,
  // kOutcomeKey, kMarkStepKey).
  Timed(RequestJournal* j, uint32_t key) : j_(j->timing_ ? j : nullptr), key_(key) {
    if (j_ != nullptr) t0_ = std::chrono::steady_clock::now();
  }
  ~Timed() {
    if (j_ == nullptr) return;
    const uint64_t ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                            std::chrono::steady_clock::now() - t0_)
                            .count();
    j_->busy_ns_ += ns;
    ++j_->calls_;
    Breakdown& b = j_->breakdown_[key_];
    b.ns += ns;
    ++b.calls;
    if (j_->boundary_in_call_) b.boundary_ns += ns, ++b.boundaries;
    j_->boundary_in_call_ = false;
  }

 private:
  RequestJournal* const j_;
  const uint32_t key_;
  std::chrono::steady_clock::time_point t0_;
};

std::string RequestJournal::TimingBreakdown() const {
  std::vector<std::pair<uint32_t, Breakdown>> rows(breakdown_.begin(), breakdown_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::string out;
  for (const auto& [key, b] : rows) {
    const char* name = key == kOutcomeKey    ? "(outcome entries)"
                       : key == kMarkStepKey ? "(boundaries placed or marked)"
                       : key == kNewSegmentKey ? "(of these: new segments)"
                                               : api::Traits(key).name;
    absl::StrAppendFormat(&out, "\n  %-28s %9d calls %10.3f ms %7.3f us per call", name, b.calls,
                          b.ns / 1e6, b.ns / 1e3 / b.calls);
    if (b.boundaries > 0) {
      absl::StrAppendFormat(&out, " (%d starting a minibatch: %.3f us each)", b.boundaries,
                            b.boundary_ns / 1e3 / b.boundaries);
    }
  }
  return out;
}

absl::Status RequestJournal::Boundary(uint64_t boundary_seq) {
  boundary_in_call_ = true;
  const uint64_t next = minibatch_.load() + 1;
  // With timing: how much of the boundaries' time the new segments take.
  const uint64_t segments = timing_ ? journal_->minibatch_segments_started() : 0;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = timing_ ? Clock::now() : Clock::time_point();
  absl::Status s = journal_->MarkBoundary(next, boundary_seq);
  if (timing_ && journal_->minibatch_segments_started() != segments) {
    Breakdown& b = breakdown_[kNewSegmentKey];
    b.ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    ++b.calls;
  }
  minibatch_.store(next, std::memory_order_release);
  return s;
}

absl::Status RequestJournal::DetectBoundary(const transport::RecordHeader& rec) {
  const bool was_anchored = detector_.anchored();
  if (!detector_.OnRequest(rec.api_id, absl::string_view(rec.body(), rec.body_size()))) {
    return absl::OkStatus();
  }
  if (!was_anchored) {
    // A replacement agent continues with the same anchor.
    // Mode 0600 as every journal file.
    if (absl::Status s = journal::WriteStringToFile(journal_->dir() + "/anchor",
                                                    absl::StrCat(detector_.anchor(), "\n"));
        !s.ok()) {
      REVENANT_LOG(WARNING, "agent") << "cannot record the boundary anchor: " << s;
    }
  }
  if (rec.seq == skip_boundary_for_) return absl::OkStatus();
  return Boundary(rec.seq);
}

absl::Status RequestJournal::PlaceBoundaryBefore(const transport::RecordHeader& rec) {
  Timed timed(this, kMarkStepKey);
  boundary_placed_for_ = rec.seq;
  return DetectBoundary(rec);
}

absl::Status RequestJournal::MarkStep(uint64_t boundary_seq) {
  Timed timed(this, kMarkStepKey);
  return Boundary(boundary_seq);
}

absl::Status RequestJournal::BeforeExecute(const transport::RecordHeader& rec,
                                           absl::string_view payload,
                                           UploadCaptureSink* capture) {
  Timed timed(this, rec.api_id);
  last_journaled_ = false;
  const auto id = static_cast<api::ApiId>(rec.api_id);
  const api::ApiTraits& traits = api::Traits(static_cast<uint32_t>(rec.api_id));
  const absl::string_view body(rec.body(), rec.body_size());
  if (options_.boundaries == BoundaryMode::kAuto && rec.seq != boundary_placed_for_) {
    if (absl::Status s = DetectBoundary(rec); !s.ok()) return s;
  }
  if (traits.journal == api::JournalClass::kSkip) return absl::OkStatus();

  // One entry object, cleared and refilled per record: its strings keep
  // their capacity, so building the record allocates nothing.
  journal::JournalEntry& e = entry_;
  e.Clear();
  e.set_seq(rec.seq * 2);
  e.set_api_id(rec.api_id);
  // A copy's inline source bytes become the payload (InlineCopyArgs).
  if (payload.empty() && InlineCopyArgs(rec.api_id, body, &inline_copy_args_, &payload)) {
    e.set_args(inline_copy_args_);
  } else {
    e.set_args(body.data(), body.size());
  }
  // The reply slot rides in the upper half of flags: a replacement posts the
  // reply of a replayed request the application still waits for.
  e.set_flags(journal::RequestFlags(rec.flags, rec.reply_slot));
  e.set_minibatch(minibatch_.load(std::memory_order_relaxed));
  const uint64_t handle = FirstU64(body);
  // A destroy of a handle whose calls all stay (KeepsEveryCall) drops no keys;
  // a variant pack's does.
  const bool pack_destroy =
      id == api::ApiId::cudnnBackendDestroyDescriptor && dnn_packs_.erase(handle) > 0;
  const bool keyed_destroy =
      (traits.destroys != api::HandleKind::kNone && !KeepsEveryCall(traits.destroys)) ||
      pack_destroy;
  // A destroy this journal defers (DefersDestroy): its keys go once its
  // minibatch is over.
  const bool deferred =
      keyed_destroy && DefersDestroy(traits.destroys) && deferrable_.erase(handle) > 0;
  std::vector<uint64_t> gone;
  if (IsFree(id) || keyed_destroy) gone.push_back(handle);
  attribute_call_key_ = 0;
  deferred_handle_ = 0;
  if (traits.sets_attribute) JournalAttributeCall(rec, traits, handle, body, &e);
  // A host write to a __device__ variable: the last one per written region
  // stays (keyed like an attribute of the region).
  const uint64_t symbol_region = SymbolWriteRegion(rec.api_id, body);
  if (symbol_region != 0) JournalAttributeCall(rec, traits, symbol_region, body, &e);
  if (traits.destroys != api::HandleKind::kNone && !keyed_destroy) {
    // Its attribute calls stay in the journal with it; only this journal's
    // record of them goes.
    auto keys = handle_attributes_.find(handle);
    if (keys != handle_attributes_.end()) {
      for (uint64_t attribute : keys->second) attribute_calls_.erase(attribute);
      handle_attributes_.erase(keys);
    }
  }
  if (keyed_destroy) {
    // The handle's attribute calls go with it; only those this journal keyed
    // (a destroy of a key no entry named is kept, as it may matter on replay).
    auto keys = handle_attributes_.find(handle);
    if (keys != handle_attributes_.end()) {
      for (uint64_t attribute : keys->second) {
        auto it = attribute_calls_.find(attribute);
        if (it == attribute_calls_.end()) continue;
        if (it->second.anchor != 0) gone.push_back(it->second.anchor);
        for (uint64_t key : it->second.current) gone.push_back(key);
        for (uint64_t key : it->second.setup) gone.push_back(key);
        attribute_calls_.erase(it);
      }
      handle_attributes_.erase(keys);
    }
  }
  if (!deferred) {
    for (uint64_t key : gone) e.add_destroys(key);
  } else {
    // The call itself lives while the handle does (it is replayed, in order,
    // until its keys go); the destroys of earlier minibatches (not minibatch
    // 0's, which is always replayed) take effect on it.
    // So do those of this minibatch before a replay's start (a one-rank
    // job's finished asynchronous snapshot, ReplayStartsAt): a replay from
    // there runs no matmul that names them.
    const uint64_t minibatch = minibatch_.load(std::memory_order_relaxed);
    const uint64_t replay_start = replay_start_.load(std::memory_order_acquire);
    e.add_touches(handle);
    deferred_handle_ = handle;
    while (!pending_destroys_.empty()) {
      const PendingDestroy& p = pending_destroys_.front();
      const bool earlier = p.minibatch < minibatch;
      if (!earlier && (p.minibatch == 0 || p.seq >= replay_start)) break;
      if (p.minibatch != 0) {
        for (uint64_t key : p.keys) e.add_destroys(key);
      }
      pending_destroys_.pop_front();
    }
    pending_destroys_.push_back(PendingDestroy{minibatch, rec.seq, std::move(gone)});
  }
  if (IsSharedHostAlloc(id)) e.add_creates(FirstU64(body));
  // A creation whose handle the shim assigned (sent without waiting: no
  // outcome names the handle): the id is the request's first field, and the
  // request itself holds the key.
  if (traits.shim_assigns) TrackCreated(id, traits, body, handle, &e);
  // A variant pack's attributes and finalization live while it does.
  if (BuildsDnnDescriptor(id) && dnn_packs_.contains(handle)) e.add_touches(handle);

  const bool setup = traits.journal == api::JournalClass::kState || symbol_region != 0 ||
                     minibatch_.load(std::memory_order_relaxed) == 0;
  last_in_setup_ = setup;
  last_journaled_ = true;
  // A large upload of a training step: the device captures its bytes behind
  // the copy (agent/upload_capture.h); the entry names where.
  if (!setup && capture != nullptr && !payload.empty() &&
      capture->Reserve(rec, minibatch_.load(std::memory_order_relaxed), payload.size(),
                       e.mutable_capture())) {
    payload = {};
  } else if (e.has_capture()) {
    e.clear_capture();
  }
  // The payload (a pinned source, possibly hundreds of MiB) goes to the
  // journal by reference: written to the payload file straight from the
  // shared memory, never copied into the entry.
  return setup ? journal_->AppendSetup(&e, payload) : journal_->AppendMinibatch(&e, payload);
}

void RequestJournal::JournalAttributeCall(const transport::RecordHeader& rec,
                                          const api::ApiTraits& traits, uint64_t handle,
                                          absl::string_view body, journal::JournalEntry* e) {
  // A replay runs the setup log from its start and the minibatch log of the
  // current minibatch, merged in request order. Calls of minibatch 0 sit
  // among setup-log work that is always replayed: they stay as long as the
  // handle does (a key its destruction drops). Later,
  // a replay needs the last call before the current minibatch (what the
  // handle held at its boundary) and every call inside it (the minibatch's
  // replayed work ran between them); the earlier ones are dropped once a
  // later minibatch sets the attribute again.
  const uint64_t minibatch = minibatch_.load(std::memory_order_relaxed);
  const uint64_t attribute = AttributeKey(handle, rec.api_id, traits, body);
  auto [slot, inserted] = attribute_calls_.try_emplace(attribute);
  if (inserted) handle_attributes_[handle].push_back(attribute);
  AttributeCalls& a = slot->second;
  if (minibatch == 0) {
    // Kept until the handle goes (then nothing replays them: its creation
    // goes too).
    const uint64_t key = Mix(attribute, rec.seq);
    e->add_creates(key);
    a.setup.push_back(key);
    attribute_call_key_ = key;
    return;
  }
  // The calls a replay runs no more: all of an earlier minibatch's, and
  // within this one those before a replay's start (ReplayStartsAt); the
  // last of them becomes the anchor.
  size_t before = 0;
  if (minibatch > a.minibatch) {
    before = a.current.size();
  } else {
    const uint64_t replay_start = replay_start_.load(std::memory_order_acquire);
    while (before < a.current_seqs.size() && a.current_seqs[before] < replay_start) ++before;
  }
  if (before > 0) {
    if (a.anchor != 0) e->add_destroys(a.anchor);
    for (size_t i = 0; i + 1 < before; ++i) e->add_destroys(a.current[i]);
    a.anchor = a.current[before - 1];
    a.current.erase(a.current.begin(), a.current.begin() + before);
    a.current_seqs.erase(a.current_seqs.begin(), a.current_seqs.begin() + before);
  }
  a.minibatch = minibatch;
  const uint64_t key = Mix(attribute, rec.seq);
  e->add_creates(key);
  a.current.push_back(key);
  a.current_seqs.push_back(rec.seq);
  attribute_call_key_ = key;
}

void RequestJournal::TrackCreated(api::ApiId id, const api::ApiTraits& traits,
                                  absl::string_view args, uint64_t key, journal::JournalEntry* e) {
  if (key == 0) return;
  if (id == api::ApiId::cudnnBackendCreateDescriptor &&
      CreatedDnnType(args) == CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR) {
    if (e != nullptr) e->add_creates(key);
    dnn_packs_.insert(key);
    deferrable_.insert(key);
    return;
  }
  if (!IsAllocation(id) &&
      (traits.creates == api::HandleKind::kNone || KeepsEveryCall(traits.creates))) {
    return;
  }
  if (e != nullptr) e->add_creates(key);
  if (DefersDestroy(traits.creates)) deferrable_.insert(key);
}

bool RequestJournal::OutcomeMayFollowReply(uint16_t api_id) {
  const auto id = static_cast<api::ApiId>(api_id);
  return id == api::ApiId::cudaStreamSynchronize || id == api::ApiId::cudaDeviceSynchronize ||
         id == api::ApiId::cudaEventSynchronize || id == api::ApiId::cudaMemcpy;
}

absl::Status RequestJournal::AfterExecute(const transport::RecordHeader& rec, int32_t status,
                                          absl::string_view outputs) {
  Timed timed(this, kOutcomeKey);
  if (!last_journaled_) return absl::OkStatus();
  last_journaled_ = false;
  const auto id = static_cast<api::ApiId>(rec.api_id);
  const api::ApiTraits& traits = api::Traits(static_cast<uint32_t>(rec.api_id));
  journal::JournalEntry& e = entry_;
  e.Clear();
  e.set_seq(rec.seq * 2 + 1);
  e.set_api_id(journal::kOutcomeApiId);
  e.set_completes(rec.seq * 2);
  e.set_status(status);
  e.set_outputs(outputs.data(), outputs.size());
  e.set_minibatch(minibatch_.load(std::memory_order_relaxed));
  // A creation the agent assigned the handle of (or an allocation).
  if (status == 0) {
    TrackCreated(id, traits, absl::string_view(rec.body(), rec.body_size()), FirstOutU64(outputs),
                 &e);
  }
  // A deferred destroy's outcome lives as long as the call.
  if (deferred_handle_ != 0) e.add_touches(deferred_handle_);
  // So does the outcome of a variant pack's attribute call or finalization.
  if (BuildsDnnDescriptor(id)) {
    const uint64_t handle = FirstU64(absl::string_view(rec.body(), rec.body_size()));
    if (dnn_packs_.contains(handle)) e.add_touches(handle);
  }
  // A synchronous attribute setter's outcome goes with its call (when a later
  // call or the handle's destruction drops it).
  if (traits.sets_attribute && attribute_call_key_ != 0) e.add_creates(attribute_call_key_);
  return last_in_setup_ ? journal_->AppendSetup(&e) : journal_->AppendMinibatch(&e);
}

}  // namespace agent
}  // namespace revenant
