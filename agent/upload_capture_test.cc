#include "agent/upload_capture.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "agent/backends/host/host_backend.h"
#include "api/hook_protocol.h"
#include "api/traits.h"
#include "api/wire.h"
#include "gtest/gtest.h"
#include "journal/journal.h"

namespace revenant {
namespace agent {
namespace {

namespace fs = std::filesystem;

// A request record (header + body) for a copy.
std::vector<char> CopyRecord(uint64_t seq, api::ApiId id, uint64_t dst, uint64_t src,
                             uint64_t count, int32_t kind, uint8_t mode = hooks::kDirect) {
  wire::Sizer sz;
  sz.Put(dst); sz.Put(src); sz.Put(count); sz.Put(kind); sz.Put(uint64_t{0}); sz.Put(mode);
  std::vector<char> rec(sizeof(transport::RecordHeader) + sz.size());
  auto* h = reinterpret_cast<transport::RecordHeader*>(rec.data());
  h->size = static_cast<uint32_t>(rec.size());
  h->api_id = static_cast<uint16_t>(id);
  h->seq = seq;
  h->reply_slot = -1;
  wire::Encoder out(rec.data() + sizeof(*h), sz.size());
  out.Put(dst); out.Put(src); out.Put(count); out.Put(kind); out.Put(uint64_t{0}); out.Put(mode);
  return rec;
}

const transport::RecordHeader& Header(const std::vector<char>& rec) {
  return *reinterpret_cast<const transport::RecordHeader*>(rec.data());
}

class UploadCaptureTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp != nullptr ? tmp : "/tmp") + "/capture-" + std::to_string(getpid()) +
           "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    absl::StatusOr<std::unique_ptr<host::HostBackend>> b =
        host::HostBackend::Create(BackendOptions());
    ASSERT_TRUE(b.ok()) << b.status();
    backend_ = std::move(*b);
    // "Pinned" application memory: shared host memory registered with the
    // backend, as the agent maps it.
    src_ = static_cast<char*>(mmap(nullptr, kBytes, PROT_READ | PROT_WRITE,
                                   MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    ASSERT_NE(src_, MAP_FAILED);
    ASSERT_EQ(backend_->RegisterSharedHost(src_, kBytes, 0), cudaSuccess);
    for (size_t i = 0; i < kBytes; ++i) src_[i] = static_cast<char>(i * 7 + 3);
    ASSERT_EQ(backend_->cudaMalloc(&dev_, kBytes), cudaSuccess);
  }
  void TearDown() override {
    pool_.reset();
    backend_->UnregisterSharedHost(src_);
    munmap(src_, kBytes);
    backend_.reset();
    fs::remove_all(dir_);
  }

  std::unique_ptr<UploadCapturePool> Pool(uint64_t max_bytes = 1ull << 30, bool continued = false,
                                          uint64_t minibatch = 1, uint64_t first_seq = 0) {
    UploadCapturePool::Options o;
    o.max_bytes = max_bytes;
    o.file_bytes = 4 << 20;
    absl::StatusOr<std::unique_ptr<UploadCapturePool>> p =
        UploadCapturePool::Create(dir_, backend_.get(), o, continued, minibatch, first_seq);
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? std::move(*p) : nullptr;
  }

  std::vector<char> Upload(uint64_t seq, uint64_t count) {
    return CopyRecord(seq, api::ApiId::cudaMemcpyAsync, reinterpret_cast<uint64_t>(dev_),
                      reinterpret_cast<uint64_t>(src_), count, cudaMemcpyHostToDevice);
  }

  // Journals-and-runs an upload as the executor does: Reserve, then the
  // backend's captured copy (synchronous here).
  journal::JournalEntry RunUpload(UploadCapturePool* pool, uint64_t seq, uint64_t minibatch,
                                  uint64_t count, bool* reserved) {
    const std::vector<char> rec = Upload(seq, count);
    journal::JournalEntry e;
    e.set_seq(seq * 2);
    e.set_api_id(static_cast<uint32_t>(api::ApiId::cudaMemcpyAsync));
    e.set_args(Header(rec).body(), Header(rec).body_size());
    *reserved = pool->Reserve(Header(rec), minibatch, count, e.mutable_capture());
    if (!*reserved) {
      e.clear_capture();
      return e;
    }
    const UploadCapturePool::Capture* cap = pool->Pending(seq);
    EXPECT_NE(cap, nullptr);
    bool captured = false;
    EXPECT_EQ(backend_->MemcpyCaptured(dev_, src_, count, nullptr, /*async=*/false, cap->data,
                                       cap->done, seq, &captured),
              cudaSuccess);
    EXPECT_TRUE(captured);
    pool->Ran(seq, captured);
    return e;
  }

  size_t CaptureFiles() const {
    size_t n = 0;
    for (const auto& ent : fs::directory_iterator(dir_)) {
      n += ent.path().filename().string().rfind("capture-", 0) == 0;
    }
    return n;
  }

  static constexpr size_t kBytes = 3 << 20;
  std::string dir_;
  std::unique_ptr<host::HostBackend> backend_;
  std::unique_ptr<UploadCapturePool> pool_;
  char* src_ = nullptr;
  void* dev_ = nullptr;
};

TEST_F(UploadCaptureTest, CandidatesAreLargeInPlaceUploads) {
  const uint64_t d = 0x1000, s = 0x2000;
  auto is = [](const std::vector<char>& r, uint64_t min) {
    return IsCaptureCandidate(Header(r).api_id, absl::string_view(Header(r).body(),
                                                                  Header(r).body_size()),
                              min);
  };
  EXPECT_TRUE(is(CopyRecord(1, api::ApiId::cudaMemcpy, d, s, 1 << 20, cudaMemcpyHostToDevice),
                 1 << 20));
  EXPECT_TRUE(is(CopyRecord(1, api::ApiId::cudaMemcpyAsync, d, s, 1 << 20, cudaMemcpyDefault),
                 1 << 20));
  EXPECT_FALSE(is(CopyRecord(1, api::ApiId::cudaMemcpy, d, s, (1 << 20) - 1,
                             cudaMemcpyHostToDevice),
                  1 << 20));
  EXPECT_FALSE(is(CopyRecord(1, api::ApiId::cudaMemcpy, d, s, 1 << 20, cudaMemcpyDeviceToHost),
                  1 << 20));
  EXPECT_FALSE(is(CopyRecord(1, api::ApiId::cudaMemcpy, d, s, 1 << 20, cudaMemcpyHostToDevice,
                             hooks::kStagingSource),
                  1 << 20));
  EXPECT_FALSE(is(CopyRecord(1, api::ApiId::cudaMemset, d, s, 1 << 20, cudaMemcpyHostToDevice),
                  1 << 20));
}

TEST_F(UploadCaptureTest, CapturedBytesReplayAsThePayload) {
  pool_ = Pool();
  bool reserved = false;
  std::vector<journal::JournalEntry> entries = {RunUpload(pool_.get(), 7, 1, kBytes, &reserved)};
  ASSERT_TRUE(reserved);
  ASSERT_TRUE(entries[0].has_capture());
  EXPECT_EQ(entries[0].capture().length(), kBytes);
  EXPECT_EQ(pool_->captures(), 1u);
  // The device copy happened too.
  EXPECT_EQ(std::memcmp(dev_, src_, kBytes), 0);
  // The application reuses its buffer: the journal still has the bytes.
  const std::string original(src_, kBytes);
  std::memset(src_, 0x55, kBytes);
  ASSERT_TRUE(LoadCapturedUploads(dir_, &entries).ok());
  EXPECT_FALSE(entries[0].has_capture());
  EXPECT_EQ(entries[0].inline_payload(), original);
}

TEST_F(UploadCaptureTest, AnIncompleteCaptureReplaysFromTheSource) {
  pool_ = Pool();
  const std::vector<char> rec = Upload(9, kBytes);
  journal::JournalEntry e;
  e.set_seq(18);
  ASSERT_TRUE(pool_->Reserve(Header(rec), 1, kBytes, e.mutable_capture()));
  // The agent died before the device finished: no completion word.
  std::vector<journal::JournalEntry> entries = {e};
  ASSERT_TRUE(LoadCapturedUploads(dir_, &entries).ok());
  EXPECT_TRUE(entries[0].has_capture());
  EXPECT_TRUE(entries[0].inline_payload().empty());
}

// Held uploads (common/upload_hold.h): one copied out replays from its
// place; one whose copy became a graph node (its stream being captured)
// replays from the source, which the node reads whenever the graph runs,
// even if a copy out filled its place before it was marked; one whose
// source was found changed is refused.
TEST_F(UploadCaptureTest, HeldUploadsReplayFromThePlaceTheSourceOrNot) {
  auto table = HoldTable::Create(dir_ + "/holds");
  ASSERT_TRUE(table.ok()) << table.status();
  HoldPlaces places(dir_);
  pool_ = Pool();
  pool_->set_holds(table->get(), &places);
  ASSERT_TRUE(backend_->RegisterHashWords((*table)->base(), (*table)->bytes()));
  const uint64_t a = reinterpret_cast<uint64_t>(src_);
  auto reserve = [&](uint64_t seq) {
    const std::vector<char> rec = Upload(seq, kBytes);
    journal::JournalEntry e;
    e.set_seq(seq * 2);
    EXPECT_TRUE(pool_->Reserve(Header(rec), 1, kBytes, e.mutable_capture()));
    EXPECT_EQ(e.capture().file().rfind("hold-", 0), 0u) << e.capture().file();
    return e;
  };
  auto run_held = [&](uint64_t seq) {
    const UploadCapturePool::Capture* cap = pool_->Pending(seq);
    ASSERT_NE(cap, nullptr);
    ASSERT_TRUE(cap->held);
    ASSERT_NE(cap->hash_words, nullptr);
    bool hashed = false;
    ASSERT_EQ(backend_->MemcpyHeld(dev_, src_, kBytes, nullptr, false, cap->hash_words, seq,
                                   &hashed),
              cudaSuccess);
    EXPECT_TRUE(hashed);
    pool_->HeldRan(seq, hashed);
  };
  const std::string original(src_, kBytes);
  // 1: held, then copied out by the application's write: from the place.
  std::vector<journal::JournalEntry> entries = {reserve(1)};
  run_held(1);
  EXPECT_EQ((*table)->CopyOut(a, a + 1, places.Fn(), /*by_app=*/true), 1);
  // 2: into a graph before anything copied it out: from the source.
  entries.push_back(reserve(2));
  pool_->HeldIntoGraph(2);
  EXPECT_EQ((*table)->StateOf(2, absl::ZeroDuration()), HoldTable::kNode);
  EXPECT_EQ((*table)->CopyOut(a, a + 1, places.Fn(), true), 0);  // never copied out
  // 3: a copy out completed its place first, then it became a node: from
  // the source all the same.
  entries.push_back(reserve(3));
  EXPECT_EQ((*table)->CopyOut(a, a + 1, places.Fn(), true), 1);
  pool_->HeldIntoGraph(3);
  std::memset(src_, 0x55, kBytes);  // the application refills its buffer
  ASSERT_TRUE(LoadCapturedUploads(dir_, &entries, absl::ZeroDuration(), 0, table->get()).ok());
  EXPECT_EQ(entries[0].inline_payload(), original);
  EXPECT_TRUE(entries[1].has_capture());
  EXPECT_TRUE(entries[2].has_capture());
  // 4: held, then its source changed with no write seen, found at the copy
  // out: refused.
  std::memcpy(src_, original.data(), kBytes);
  std::vector<journal::JournalEntry> changed = {reserve(4)};
  run_held(4);
  src_[kBytes / 2] ^= 1;
  EXPECT_EQ((*table)->CopyOut(a, a + 1, places.Fn(), true), 0);
  EXPECT_EQ((*table)->changed(), 1u);
  const absl::Status st =
      LoadCapturedUploads(dir_, &changed, absl::ZeroDuration(), 0, table->get());
  EXPECT_TRUE(absl::IsDataLoss(st)) << st;
  EXPECT_NE(st.message().find("its source had changed"), std::string::npos) << st;
  // The pool holds no more uploads from then on: the next one is captured.
  const std::vector<char> rec = Upload(5, kBytes);
  journal::JournalEntry e;
  ASSERT_TRUE(pool_->Reserve(Header(rec), 1, kBytes, e.mutable_capture()));
  EXPECT_EQ(e.capture().file().rfind("capture-", 0), 0u) << e.capture().file();
}

TEST_F(UploadCaptureTest, AStaleCompletionWordIsNotTaken) {
  pool_ = Pool();
  bool reserved = false;
  journal::JournalEntry first = RunUpload(pool_.get(), 5, 1, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  // Two boundaries later the file is filled again from its start; before the
  // new capture completes, its word still holds the old seq.
  const std::vector<char> rec = Upload(40, kBytes);
  journal::JournalEntry second;
  second.set_seq(80);
  ASSERT_TRUE(pool_->Reserve(Header(rec), 3, kBytes, second.mutable_capture()));
  EXPECT_EQ(second.capture().file(), first.capture().file());
  EXPECT_EQ(second.capture().offset(), first.capture().offset());
  std::vector<journal::JournalEntry> entries = {second};
  ASSERT_TRUE(LoadCapturedUploads(dir_, &entries).ok());
  EXPECT_TRUE(entries[0].inline_payload().empty());
}

TEST_F(UploadCaptureTest, FilesAreReusedTwoBoundariesLater) {
  pool_ = Pool();
  bool reserved = false;
  RunUpload(pool_.get(), 1, 1, kBytes, &reserved);  // file 0, minibatch 1
  ASSERT_TRUE(reserved);
  RunUpload(pool_.get(), 2, 2, kBytes, &reserved);  // no room in file 0: file 1
  ASSERT_TRUE(reserved);
  EXPECT_EQ(CaptureFiles(), 2u);
  // Minibatch 3: a replacement may still replay minibatch 2, not 1.
  journal::JournalEntry e = RunUpload(pool_.get(), 3, 3, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-0");
  EXPECT_EQ(CaptureFiles(), 2u);
  e = RunUpload(pool_.get(), 4, 3, kBytes, &reserved);  // file 1 holds minibatch 2
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-2");
}

// A one-rank job's snapshots inside the journal's minibatch: the minibatch
// never ends, and each upload used to need a file of its own.
TEST_F(UploadCaptureTest, AFinishedSnapshotReleasesTheCapturesBeforeIt) {
  pool_ = Pool();
  bool reserved = false;
  std::vector<journal::JournalEntry> entries;
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    entries.push_back(RunUpload(pool_.get(), seq, 1, kBytes, &reserved));
    ASSERT_TRUE(reserved);
  }
  EXPECT_EQ(CaptureFiles(), 3u);
  // A snapshot of the state before request 3 finished: 1 and 2 are never
  // replayed again, 3 still is.
  pool_->Release(3);
  journal::JournalEntry e = RunUpload(pool_.get(), 4, 1, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-0");
  e = RunUpload(pool_.get(), 5, 1, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-1");
  e = RunUpload(pool_.get(), 6, 1, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-3");  // capture-2 holds request 3
  EXPECT_EQ(pool_->files_made(), 4);
  EXPECT_EQ(pool_->reuses(), 2u);
  EXPECT_EQ(pool_->captured_bytes(), 6 * kBytes);
  // A replay from that snapshot reads request 3's capture and leaves the
  // older entries alone (their places hold requests 4 and 5 now).
  ASSERT_TRUE(LoadCapturedUploads(dir_, &entries, absl::ZeroDuration(), /*from_seq=*/3).ok());
  EXPECT_TRUE(entries[0].has_capture());
  EXPECT_TRUE(entries[1].has_capture());
  EXPECT_FALSE(entries[2].has_capture());
  EXPECT_EQ(entries[2].inline_payload(), std::string(src_, kBytes));
}

TEST_F(UploadCaptureTest, ASnapshotReleasesADeadAgentsFiles) {
  pool_ = Pool();
  bool reserved = false;
  RunUpload(pool_.get(), 1, 4, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  pool_.reset();
  // The replacement's first upload is request 10: the dead agent's
  // captures are before it, request 9 perhaps.
  pool_ = Pool(1ull << 30, /*continued=*/true, /*minibatch=*/4, /*first_seq=*/10);
  pool_->Release(9);
  journal::JournalEntry e = RunUpload(pool_.get(), 10, 4, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-1");
  pool_->Release(11);
  e = RunUpload(pool_.get(), 11, 4, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_EQ(e.capture().file(), "capture-0");
}

TEST_F(UploadCaptureTest, TheBoundOnCaptureFilesFallsBackToTheJournal) {
  pool_ = Pool(/*max_bytes=*/4 << 20);
  bool reserved = false;
  RunUpload(pool_.get(), 1, 1, kBytes, &reserved);
  EXPECT_TRUE(reserved);
  RunUpload(pool_.get(), 2, 1, kBytes, &reserved);
  EXPECT_FALSE(reserved);
  // Smaller than the least captured size: journaled with its bytes.
  RunUpload(pool_.get(), 3, 1, (1 << 20) - 1, &reserved);
  EXPECT_FALSE(reserved);
}

TEST_F(UploadCaptureTest, AReplacementKeepsTheDeadAgentsFiles) {
  pool_ = Pool();
  bool reserved = false;
  std::vector<journal::JournalEntry> entries = {RunUpload(pool_.get(), 1, 4, kBytes, &reserved)};
  ASSERT_TRUE(reserved);
  pool_.reset();  // the agent dies; its files stay
  ASSERT_EQ(CaptureFiles(), 1u);
  pool_ = Pool(1ull << 30, /*continued=*/true, /*minibatch=*/4);
  // Not filled again while minibatch 4 may be replayed ...
  journal::JournalEntry e = RunUpload(pool_.get(), 10, 5, kBytes, &reserved);
  ASSERT_TRUE(reserved);
  EXPECT_NE(e.capture().file(), "capture-0");
  std::vector<journal::JournalEntry> again = entries;
  ASSERT_TRUE(LoadCapturedUploads(dir_, &again).ok());
  EXPECT_EQ(again[0].inline_payload(), std::string(src_, kBytes));
  // ... and a fresh journal removes them.
  pool_.reset();
  pool_ = Pool(1ull << 30, /*continued=*/false);
  EXPECT_EQ(CaptureFiles(), 0u);
}

// Through the journal: the entry keeps its reference (no payload bytes),
// a reader gets it back, and the replay's bytes come from the capture.
TEST_F(UploadCaptureTest, TheJournalRecordsTheReference) {
  RequestJournal::Options jo;
  jo.boundaries = RequestJournal::BoundaryMode::kManual;
  absl::StatusOr<std::unique_ptr<RequestJournal>> j =
      RequestJournal::Open(dir_ + "/journal", "job", 0, jo);
  ASSERT_TRUE(j.ok()) << j.status();
  pool_ = [&] {
    UploadCapturePool::Options o;
    absl::StatusOr<std::unique_ptr<UploadCapturePool>> p =
        UploadCapturePool::Create(dir_ + "/journal", backend_.get(), o, false, 0);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::move(*p);
  }();
  const absl::string_view payload(src_, kBytes);
  // Setup phase: the bytes go to the journal.
  const std::vector<char> first = Upload(3, kBytes);
  ASSERT_TRUE((*j)->BeforeExecute(Header(first), payload, pool_.get()).ok());
  EXPECT_EQ(pool_->Pending(3), nullptr);
  ASSERT_TRUE((*j)->MarkStep().ok());
  const std::vector<char> second = Upload(5, kBytes);
  ASSERT_TRUE((*j)->BeforeExecute(Header(second), payload, pool_.get()).ok());
  const UploadCapturePool::Capture* cap = pool_->Pending(5);
  ASSERT_NE(cap, nullptr);
  bool captured = false;
  ASSERT_EQ(backend_->MemcpyCaptured(dev_, src_, kBytes, nullptr, false, cap->data, cap->done, 5,
                                     &captured),
            cudaSuccess);
  pool_->Ran(5, captured);
  const std::string original(src_, kBytes);
  std::memset(src_, 0x11, kBytes);

  absl::StatusOr<std::unique_ptr<journal::JournalReader>> r =
      journal::JournalReader::Open(dir_ + "/journal");
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<journal::JournalEntry> setup, minibatch;
  ASSERT_TRUE((*r)->ReadSetup([&](const journal::JournalEntry& e) {
                     setup.push_back(e);
                     return absl::OkStatus();
                   }).ok());
  ASSERT_TRUE((*r)->ReadMinibatch([&](const journal::JournalEntry& e) {
                     minibatch.push_back(e);
                     return absl::OkStatus();
                   }).ok());
  ASSERT_FALSE(setup.empty());
  EXPECT_FALSE(setup.back().has_capture());
  EXPECT_EQ(setup.back().inline_payload(), original);
  ASSERT_EQ(minibatch.size(), 1u);
  ASSERT_TRUE(minibatch[0].has_capture());
  EXPECT_TRUE(minibatch[0].inline_payload().empty());
  EXPECT_EQ(minibatch[0].capture().length(), kBytes);
  ASSERT_TRUE(LoadCapturedUploads(dir_ + "/journal", &minibatch).ok());
  EXPECT_EQ(minibatch[0].inline_payload(), original);
}

TEST_F(UploadCaptureTest, AMissingOrShortCaptureFileIsDataLoss) {
  pool_ = Pool();
  bool reserved = false;
  std::vector<journal::JournalEntry> entries = {RunUpload(pool_.get(), 1, 1, kBytes, &reserved)};
  ASSERT_TRUE(reserved);
  std::vector<journal::JournalEntry> bad = entries;
  bad[0].mutable_capture()->set_length(1ull << 40);
  EXPECT_EQ(LoadCapturedUploads(dir_, &bad).code(), absl::StatusCode::kDataLoss);
  bad = entries;
  bad[0].mutable_capture()->set_file("../elsewhere");
  EXPECT_EQ(LoadCapturedUploads(dir_, &bad).code(), absl::StatusCode::kDataLoss);
  pool_.reset();
  fs::remove(dir_ + "/" + entries[0].capture().file());
  EXPECT_EQ(LoadCapturedUploads(dir_, &entries).code(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
