// RequestJournal's keys for cuDNN backend descriptors: a variant pack (made
// and dropped at every convolution) leaves the setup log once its destroy's
// minibatch is over, whether the shim assigned its handle or the agent did;
// every other backend descriptor (plans, engine configs: others refer to
// them) stays whole.
#include "agent/journaling.h"

#include <cudnn.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "api/hook_structs.h"
#include "api/traits.h"
#include "journal/journal.h"
#include "recovery/replay_plan.h"
#include "api/wire.h"
#include "gtest/gtest.h"
#include "transport/shm_channel.h"

namespace revenant {
namespace agent {
namespace {

namespace fs = std::filesystem;

// A request record: header, then the body `fill` encodes (run twice: sizer,
// then encoder).
std::vector<char> Record(uint64_t seq, api::ApiId id, bool sync,
                         const std::function<void(wire::Sizer&)>& size,
                         const std::function<void(wire::Encoder&)>& fill) {
  wire::Sizer sz;
  size(sz);
  std::vector<char> rec(sizeof(transport::RecordHeader) + sz.size());
  auto* h = reinterpret_cast<transport::RecordHeader*>(rec.data());
  h->size = static_cast<uint32_t>(rec.size());
  h->api_id = static_cast<uint16_t>(id);
  h->seq = seq;
  h->reply_slot = sync ? 0 : -1;
  wire::Encoder out(rec.data() + sizeof(*h), sz.size());
  fill(out);
  return rec;
}

const transport::RecordHeader& Header(const std::vector<char>& rec) {
  return *reinterpret_cast<const transport::RecordHeader*>(rec.data());
}

class DnnJournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/dnnjournal-" +
           std::to_string(getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    RequestJournal::Options o;
    o.boundaries = RequestJournal::BoundaryMode::kManual;
    absl::StatusOr<std::unique_ptr<RequestJournal>> j =
        RequestJournal::Open(dir_ + "/journal", "job", 0, o);
    ASSERT_TRUE(j.ok()) << j.status();
    journal_ = std::move(*j);
  }
  void TearDown() override {
    journal_.reset();
    fs::remove_all(dir_);
  }

  // Journals a request (and, for a synchronous one, its outcome with
  // `out_handle` as its first OUT value when given).
  void Journal(const std::vector<char>& rec, uint64_t out_handle = 0) {
    ASSERT_TRUE(journal_->BeforeExecute(Header(rec), {}, nullptr).ok());
    if (Header(rec).reply_slot < 0) return;
    std::vector<char> outputs(64);
    wire::Encoder enc(outputs.data(), outputs.size());
    if (out_handle != 0) enc.PutBytes(&out_handle, sizeof(out_handle));
    ASSERT_TRUE(journal_->AfterExecute(Header(rec), 0, absl::string_view(outputs.data(), enc.size()))
                    .ok());
  }
  // cudnnBackendCreateDescriptor of `type`: with `assigned` (sent without
  // waiting) or, when 0, synchronously with the agent's id `agent_id`.
  void Create(int32_t type, uint64_t assigned, uint64_t agent_id = 0) {
    auto body = [&](auto& w) {
      w.Put(assigned);
      w.Put(type);
      if constexpr (std::is_same_v<std::decay_t<decltype(w)>, wire::Sizer>) {
        w.PutFlag();
      } else {
        w.PutFlag(true);
      }
    };
    Journal(Record(++seq_, api::ApiId::cudnnBackendCreateDescriptor, assigned == 0, body, body),
            agent_id);
  }
  void OnDescriptor(api::ApiId id, uint64_t d, bool sync) {
    auto body = [&](auto& w) {
      w.Put(d);
      if (id == api::ApiId::cudnnBackendSetAttribute) {
        w.Put(int32_t{CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS});
        w.Put(int32_t{CUDNN_TYPE_INT64});
        w.Put(int64_t{1});
        const int64_t uid = 7;
        w.PutBytes(&uid, sizeof(uid));
      }
    };
    Journal(Record(++seq_, id, sync, body, body));
  }
  void Execute(uint64_t plan, uint64_t pack) {
    auto body = [&](auto& w) {
      w.Put(uint64_t{0x7e0f000000000001ull});
      w.Put(plan);
      w.Put(pack);
    };
    Journal(Record(++seq_, api::ApiId::cudnnBackendExecute, true, body, body));
  }
  // One convolution as PyTorch makes it: a variant pack built, finalized,
  // executed and destroyed.
  void Convolution(uint64_t plan, uint64_t pack, bool assigned) {
    if (assigned) {
      Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, pack);
    } else {
      Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, 0, pack);
    }
    for (int i = 0; i < 3; ++i) OnDescriptor(api::ApiId::cudnnBackendSetAttribute, pack, !assigned);
    OnDescriptor(api::ApiId::cudnnBackendFinalize, pack, true);
    Execute(plan, pack);
    OnDescriptor(api::ApiId::cudnnBackendDestroyDescriptor, pack, !assigned);
  }
  uint64_t LiveSetupEntries() const { return journal_->stats().setup_live_entries; }
  // The journal in `dir` as a replacement continues it at minibatch 1: read
  // back as it reads it (recovery::ReadReplayLog: both logs in request
  // order), its handles rebuilt from those entries when `rebuild`.
  std::unique_ptr<RequestJournal> ContinueAsReplacement(const std::string& dir, bool rebuild) {
    absl::StatusOr<recovery::ReplayLog> log = recovery::ReadReplayLog(dir);
    EXPECT_TRUE(log.ok()) << log.status();
    if (!log.ok()) return nullptr;
    RequestJournal::Options o;
    o.boundaries = RequestJournal::BoundaryMode::kManual;
    absl::StatusOr<std::unique_ptr<RequestJournal>> j =
        RequestJournal::Continue(dir, "job", 0, o, 1);
    EXPECT_TRUE(j.ok()) << j.status();
    if (!j.ok()) return nullptr;
    if (rebuild) (*j)->RebuildHandles(log->entries);
    return std::move(*j);
  }

  // The agent dies now; from a copy of its journal each, a replacement
  // continues it without and with RebuildHandles, runs `steps` in
  // minibatches after the dead agent's (each opened with MarkStep) and
  // stops. The live setup entries at the end: {not rebuilt, rebuilt}.
  std::array<uint64_t, 2> LiveAfterContinuing(int steps, const std::function<void(int)>& step) {
    std::array<uint64_t, 2> live{0, 0};
    journal_.reset();
    const uint64_t seq_at_death = seq_;
    for (const bool rebuild : {false, true}) {
      SCOPED_TRACE(rebuild ? "rebuilt" : "not rebuilt");
      const std::string jdir = dir_ + (rebuild ? "/j-rebuilt" : "/j-plain");
      fs::copy(dir_ + "/journal", jdir, fs::copy_options::recursive);
      journal_ = ContinueAsReplacement(jdir, rebuild);
      EXPECT_NE(journal_, nullptr);
      if (journal_ == nullptr) return live;
      seq_ = seq_at_death;
      for (int i = 0; i < steps; ++i) {
        EXPECT_TRUE(journal_->MarkStep().ok());
        step(i);
      }
      live[rebuild ? 1 : 0] = LiveSetupEntries();
      journal_.reset();
    }
    return live;
  }

  std::string dir_;
  std::unique_ptr<RequestJournal> journal_;
  uint64_t seq_ = 0;
  uint64_t serial_ = 0;
};

TEST_F(DnnJournalTest, VariantPacksLeaveTheSetupLogOtherDescriptorsStay) {
  // Setup (minibatch 0): a plan, kept whole for the job's life.
  const uint64_t plan = api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_);
  Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
  OnDescriptor(api::ApiId::cudnnBackendSetAttribute, plan, true);
  OnDescriptor(api::ApiId::cudnnBackendFinalize, plan, true);
  const uint64_t setup = LiveSetupEntries();
  std::vector<uint64_t> live;
  for (int step = 0; step < 24; ++step) {
    ASSERT_TRUE(journal_->MarkStep().ok());
    // Two convolutions a step: one pack whose handle the shim assigned, one
    // the agent assigned (REVENANT_SHIM_ANSWERS=0).
    Convolution(plan, api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_), true);
    Convolution(plan, 0x7e10000000000000ull + 1000 + step, false);
    live.push_back(LiveSetupEntries());
  }
  // A step's packs stay while its minibatch is current (a replay of it
  // executes them), then go: the setup log does not grow with the steps.
  EXPECT_GT(live[3], setup) << "the current minibatch's packs are live";
  EXPECT_EQ(live[23], live[7]) << "setup entries grow with the steps: " << live[7] << " after 8, "
                               << live[23] << " after 24";
  // A plan destroyed stays (others may refer to what it was built from).
  OnDescriptor(api::ApiId::cudnnBackendDestroyDescriptor, plan, true);
  EXPECT_GE(LiveSetupEntries(), live[23]);
}

// A one-rank job with asynchronous snapshots stays in one journal minibatch
// for many steps; each finished snapshot moves where a replay starts
// (ReplayStartsAt). What only a replay from the minibatch's boundary needed
// goes then: the packs destroyed before the snapshot, and a setter's calls
// before it but the last (cublasSetStream_v2, which PyTorch calls before
// every GEMM). Without it the setup log grew with every step until the next
// journal boundary.
TEST_F(DnnJournalTest, AReplayStartInsideTheMinibatchDropsWhatOnlyTheBoundaryNeeded) {
  const uint64_t plan = api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_);
  Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
  OnDescriptor(api::ApiId::cudnnBackendFinalize, plan, true);
  const uint64_t blas = 0x7e20000000000001ull;
  auto set_stream = [&](uint64_t stream) {
    auto body = [&](auto& w) {
      w.Put(blas);
      w.Put(stream);
    };
    Journal(Record(++seq_, api::ApiId::cublasSetStream_v2, false, body, body));
  };
  set_stream(0);
  ASSERT_TRUE(journal_->MarkStep().ok());  // the one journal boundary
  const uint64_t setup = LiveSetupEntries();
  auto step = [&](int i) {
    set_stream(0x5000 + i % 3);
    Convolution(plan, api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_), true);
    set_stream(0x5000 + (i + 1) % 3);
    Convolution(plan, 0x7e10000000000000ull + 1000 + i, false);
  };
  // No snapshot finished: every step's calls stay (a replay starts at the
  // boundary and runs every step since).
  std::vector<uint64_t> live;
  for (int i = 0; i < 16; ++i) {
    step(i);
    live.push_back(LiveSetupEntries());
  }
  ASSERT_GT(live[15], live[7]) << "the premise: without a replay start the setup log grows";
  const uint64_t grown = live[15];
  // A snapshot finishing every fourth step, at the request after the step.
  live.clear();
  for (int i = 16; i < 64; ++i) {
    step(i);
    if (i % 4 == 3) journal_->ReplayStartsAt(seq_ + 1);
    live.push_back(LiveSetupEntries());
  }
  EXPECT_GT(live.front(), setup) << "the steps after the replay start are live";
  EXPECT_LT(live.back(), grown) << "the steps before the snapshot stayed";
  // Bounded: a period of four steps later, the same count.
  EXPECT_EQ(live[47], live[31]) << "setup entries grow with the steps: " << live[31]
                                << " after 32, " << live[47] << " after 48";
  EXPECT_EQ(live[47], live[15]);
  // A replay start never goes back.
  journal_->ReplayStartsAt(3);
  EXPECT_GT(journal_->replay_start(), seq_);
}

// A replacement continuing the journal finds the deferred destroys the dead
// agent journaled inside the current minibatch still pending: rebuilt, they
// take effect at the next boundary (or replay start), as they would have;
// without the rebuild those packs and the destroys stayed in the setup log.
TEST_F(DnnJournalTest, AContinuedJournalAppliesTheDestroysTheDeadAgentDeferred) {
  const uint64_t plan = api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_);
  Create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, plan);
  OnDescriptor(api::ApiId::cudnnBackendFinalize, plan, true);
  ASSERT_TRUE(journal_->MarkStep().ok());
  const uint64_t before_steps = LiveSetupEntries();
  for (int i = 0; i < 6; ++i) {
    Convolution(plan, api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_), true);
    Convolution(plan, 0x7e10000000000000ull + 2000 + i, false);
  }
  ASSERT_GT(LiveSetupEntries(), before_steps) << "the premise: the packs are live in minibatch 1";
  // Two more steps in later minibatches: their own packs come and go.
  const std::array<uint64_t, 2> live_after = LiveAfterContinuing(2, [&](int) {
    Convolution(plan, api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_), true);
  });
  // Rebuilt: what is live is the plan and the last step's pack, as in a
  // journal that never lost its agent; not rebuilt: also the dead agent's
  // twelve packs.
  EXPECT_LT(live_after[1], live_after[0]);
  EXPECT_LE(live_after[1], before_steps + 8) << "the dead agent's packs stayed";
}


// A replacement continuing the journal knows the attribute calls the dead
// agent kept (cublasSetStream_v2, which PyTorch calls before every GEMM):
// the next minibatch's call drops them but the last, as without a recovery;
// not rebuilt, every one of them stayed in the setup log for the job's life.
TEST_F(DnnJournalTest, AContinuedJournalDropsTheAttributeCallsTheDeadAgentKept) {
  const uint64_t blas = 0x7e20000000000001ull;
  auto set_stream = [&](uint64_t stream) {
    auto body = [&](auto& w) {
      w.Put(blas);
      w.Put(stream);
    };
    Journal(Record(++seq_, api::ApiId::cublasSetStream_v2, false, body, body));
  };
  set_stream(0);  // setup: stays while the handle does
  ASSERT_TRUE(journal_->MarkStep().ok());
  const uint64_t before_steps = LiveSetupEntries();
  // One minibatch's calls: all live (a replay of it runs every one).
  for (int i = 0; i < 12; ++i) set_stream(0x5000 + i % 3);
  ASSERT_EQ(LiveSetupEntries(), before_steps + 12) << "the premise: the minibatch's calls live";
  // Two more minibatches, two calls each.
  const std::array<uint64_t, 2> live_after = LiveAfterContinuing(2, [&](int step) {
    set_stream(0x6000 + step);
    set_stream(0x7000 + step);
  });
  // Rebuilt: the setup call, the last call before the current minibatch and
  // the current minibatch's two; not rebuilt: also the dead agent's twelve.
  EXPECT_EQ(live_after[1], before_steps + 3);
  EXPECT_EQ(live_after[0], before_steps + 3 + 12);
}


// A copy whose source bytes travel inside the request is journaled with the
// bytes as its payload and its args without them; the replay's body is the
// request again, byte for byte. A small copy keeps its bytes in the args.
TEST_F(DnnJournalTest, InlineCopyBytesAreThePayloadAndTheReplayRestoresThem) {
  ASSERT_TRUE(journal_->MarkStep().ok());
  std::vector<std::string> bodies;
  const std::vector<size_t> sizes = {size_t{1} << 20, size_t{100}, size_t{64} << 10};
  for (const size_t n : sizes) {
    std::string bytes(n, '\0');
    for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<char>(i * 131 + n);
    hooks::cudaMemcpyRequest r;
    r.head.dst = 0x7f0000001000ull;
    r.head.count = n;
    r.head.kind = 1;  // cudaMemcpyHostToDevice
    r.head.stream = 0;
    r.head.mode = hooks::kInlineSource;
    r.data = wire::Bytes::Of(bytes.data(), n);
    auto size = [&](wire::Sizer& w) { r.SizeInto(w); };
    auto fill = [&](wire::Encoder& w) { r.Encode(w); };
    std::vector<char> rec = Record(++seq_, api::ApiId::cudaMemcpyAsync, false, size, fill);
    bodies.emplace_back(rec.data() + sizeof(transport::RecordHeader),
                        rec.size() - sizeof(transport::RecordHeader));
    Journal(rec);
  }
  journal_.reset();
  absl::StatusOr<std::unique_ptr<journal::JournalReader>> reader =
      journal::JournalReader::Open(dir_ + "/journal");
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<journal::JournalEntry> copies;
  auto keep = [&](const journal::JournalEntry& e) {
    if (e.api_id() == static_cast<uint32_t>(api::ApiId::cudaMemcpyAsync)) copies.push_back(e);
    return absl::OkStatus();
  };
  ASSERT_TRUE((*reader)->ReadSetup(keep).ok());
  ASSERT_TRUE((*reader)->ReadMinibatch(keep).ok());
  ASSERT_EQ(copies.size(), 3u);
  for (size_t i = 0; i < copies.size(); ++i) {
    const journal::JournalEntry& e = copies[i];
    const bool moved = sizes[i] >= kInlineCopyPayloadMin;
    std::string body;
    if (moved) {
      EXPECT_LT(e.args().size(), 128u) << "copy " << i << ": its bytes are still in the args";
      EXPECT_EQ(e.inline_payload().size(), sizes[i]) << "copy " << i;
      ASSERT_TRUE(ReplayCopyBody(e.api_id(), e.args(), e.inline_payload(), &body)) << i;
      EXPECT_TRUE(body == bodies[i]) << "copy " << i << ": the replay's request differs";
    } else {
      EXPECT_EQ(e.args(), bodies[i]) << "a small copy keeps its bytes in the args";
      EXPECT_FALSE(ReplayCopyBody(e.api_id(), e.args(), e.inline_payload(), &body));
    }
  }
  // Anything else is not an inline copy's entry.
  std::string body;
  EXPECT_FALSE(ReplayCopyBody(static_cast<uint16_t>(api::ApiId::cudaMemcpyAsync), bodies[1],
                              "x", &body));
  EXPECT_FALSE(ReplayCopyBody(static_cast<uint16_t>(api::ApiId::cudaLaunchKernel), "", "", &body));
}


// A replacement continuing the journal rebuilds which live handles' destroys
// are deferred and which are variant packs (RebuildHandles): a cuBLASLt
// descriptor and a variant pack made before the recovery and destroyed
// after it are journaled as without a recovery (deferred: the destroy
// touches the handle, its keys go at the end of the minibatch).
TEST_F(DnnJournalTest, AContinuedJournalDefersDestroysOfHandlesMadeBefore) {
  ASSERT_TRUE(journal_->MarkStep().ok());
  const uint64_t desc = api::ShimAssignedId(api::HandleKind::kLtMatmulDesc, ++serial_);
  auto create_desc = [&](auto& w) {
    w.Put(desc);
    if constexpr (std::is_same_v<std::decay_t<decltype(w)>, wire::Sizer>) {
      w.PutFlag();
    } else {
      w.PutFlag(true);
    }
    w.Put(int32_t{68});  // CUBLAS_COMPUTE_32F
    w.Put(int32_t{0});   // CUDA_R_32F
  };
  Journal(Record(++seq_, api::ApiId::cublasLtMatmulDescCreate, false, create_desc, create_desc));
  const uint64_t pack = api::ShimAssignedId(api::HandleKind::kDnnDescriptor, ++serial_);
  Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, pack);
  journal_.reset();

  for (const bool rebuild : {false, true}) {
    SCOPED_TRACE(rebuild ? "rebuilt" : "not rebuilt");
    std::unique_ptr<RequestJournal> j = ContinueAsReplacement(dir_ + "/journal", rebuild);
    ASSERT_NE(j, nullptr);
    const uint64_t first_seq = seq_ + 1;
    j->MarkStep().IgnoreError();
    auto destroy = [&](uint64_t h) {
      auto body = [&](auto& w) { w.Put(h); };
      const api::ApiId id = h == desc ? api::ApiId::cublasLtMatmulDescDestroy
                                      : api::ApiId::cudnnBackendDestroyDescriptor;
      std::vector<char> rec = Record(++seq_, id, false, body, body);
      ASSERT_TRUE(j->BeforeExecute(Header(rec), {}, nullptr).ok());
    };
    destroy(desc);
    destroy(pack);
    j.reset();
    // The two destroys, as journaled.
    absl::StatusOr<std::unique_ptr<journal::JournalReader>> reader =
        journal::JournalReader::Open(dir_ + "/journal");
    ASSERT_TRUE(reader.ok()) << reader.status();
    std::vector<journal::JournalEntry> destroys;
    auto mine = [&](const journal::JournalEntry& e) {
      if (e.api_id() != journal::kOutcomeApiId && e.api_id() != journal::kBoundaryApiId &&
          e.seq() / 2 >= first_seq) {
        destroys.push_back(e);
      }
      return absl::OkStatus();
    };
    ASSERT_TRUE((*reader)->ReadSetup(mine).ok());
    ASSERT_TRUE((*reader)->ReadMinibatch(mine).ok());
    ASSERT_EQ(destroys.size(), 2u);
    for (const journal::JournalEntry& e : destroys) {
      const uint64_t h = e.seq() / 2 == first_seq ? desc : pack;
      const bool touches = std::find(e.touches().begin(), e.touches().end(), h) != e.touches().end();
      if (rebuild) {
        EXPECT_TRUE(touches) << "the destroy of " << std::hex << h << " was not deferred";
      } else {
        EXPECT_FALSE(touches) << "without the rebuild the destroy of " << std::hex << h
                              << " is deferred too: the test shows nothing";
      }
    }
    if (HasFatalFailure()) return;
    // The next round starts from the journal as it was before these destroys.
    if (!rebuild) {
      // Not possible to take them back: redo the setup in a fresh journal.
      fs::remove_all(dir_ + "/journal");
      RequestJournal::Options fresh;
      fresh.boundaries = RequestJournal::BoundaryMode::kManual;
      absl::StatusOr<std::unique_ptr<RequestJournal>> again =
          RequestJournal::Open(dir_ + "/journal", "job", 0, fresh);
      ASSERT_TRUE(again.ok()) << again.status();
      journal_ = std::move(*again);
      ASSERT_TRUE(journal_->MarkStep().ok());
      Journal(Record(++seq_, api::ApiId::cublasLtMatmulDescCreate, false, create_desc,
                     create_desc));
      Create(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, pack);
      journal_.reset();
    }
  }
}

}  // namespace
}  // namespace agent
}  // namespace revenant
