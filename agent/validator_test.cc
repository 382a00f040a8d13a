#include "agent/validator.h"

#include <nccl.h>

#include <cstring>
#include <memory>
#include <vector>

#include "agent/backends/host/host_collectives.h"
#include "agent/journaling.h"
#include "api/hook_protocol.h"
#include "api/traits.h"
#include "api/wire.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

std::unique_ptr<host::HostCollectiveBackend> NewBackend() {
  BackendOptions o;
  o.rank = 5;
  absl::StatusOr<std::unique_ptr<host::HostCollectiveBackend>> b =
      host::HostCollectiveBackend::Create(o);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(*b) : nullptr;
}

void* DeviceAlloc(Backend* b, const std::vector<char>& v) {
  void* p = nullptr;
  EXPECT_EQ(b->cudaMalloc(&p, v.size()), cudaSuccess);
  EXPECT_EQ(b->Memcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice, nullptr, false),
            cudaSuccess);
  return p;
}

std::vector<char> Read(Backend* b, const void* p, size_t n) {
  std::vector<char> v(n);
  EXPECT_EQ(b->Memcpy(v.data(), p, n, cudaMemcpyDeviceToHost, nullptr, false), cudaSuccess);
  return v;
}

void Write(Backend* b, void* p, const std::vector<char>& v) {
  EXPECT_EQ(b->Memcpy(p, v.data(), v.size(), cudaMemcpyHostToDevice, nullptr, false),
            cudaSuccess);
}

// The body of a cudaMemcpyAsync request as the shim encodes it.
std::string CopyBody(uint64_t dst, uint64_t count, int32_t kind) {
  const uint64_t src = 0x600000000000, stream = 0;
  const uint8_t mode = hooks::kDirect;
  wire::Sizer sz;
  sz.Put(dst); sz.Put(src); sz.Put(count); sz.Put(kind); sz.Put(stream); sz.Put(mode);
  std::string body(sz.size(), '\0');
  wire::Encoder e(body.data(), body.size());
  e.Put(dst); e.Put(src); e.Put(count); e.Put(kind); e.Put(stream); e.Put(mode);
  return body;
}

// The validator learns of a boundary before the journal places it: WouldMark
// must predict OnRequest exactly, and change nothing.
TEST(MinibatchDetector, WouldMarkPredictsOnRequestWithoutChangingIt) {
  const auto api = static_cast<uint16_t>(api::ApiId::cudaMemcpyAsync);
  const std::vector<std::string> stream = {
      CopyBody(0x1000, 64, cudaMemcpyHostToDevice),    // weights: once
      CopyBody(0x2000, 32, cudaMemcpyHostToDevice),    // input of step 0
      CopyBody(0x3000, 8, cudaMemcpyDeviceToHost),     // not an upload
      CopyBody(0x2000, 32, cudaMemcpyHostToDevice),    // step 1: the anchor
      CopyBody(0x4000, 32, cudaMemcpyHostToDevice),    // another upload
      CopyBody(0x2000, 32, cudaMemcpyHostToDevice),    // step 2
      CopyBody(0x2000, 16, cudaMemcpyHostToDevice),    // same buffer, other size
  };
  const std::vector<bool> boundaries = {false, false, false, true, false, true, false};
  MinibatchDetector d;
  for (size_t i = 0; i < stream.size(); ++i) {
    const bool predicted = d.WouldMark(api, stream[i]);
    EXPECT_EQ(d.WouldMark(api, stream[i]), predicted) << i;  // asking twice changes nothing
    EXPECT_EQ(d.OnRequest(api, stream[i]), predicted) << i;
    EXPECT_EQ(predicted, boundaries[i]) << i;
  }
  EXPECT_FALSE(d.WouldMark(static_cast<uint16_t>(api::ApiId::cudaMemset), stream[1]));
}

TEST(FirstDifference, FindsTheFirstDifferingByte) {
  std::vector<char> a(100, 'x'), b(100, 'x');
  EXPECT_EQ(FirstDifference(a.data(), b.data(), a.size()), 100u);
  b[37] = 'y';
  b[90] = 'y';
  EXPECT_EQ(FirstDifference(a.data(), b.data(), a.size()), 37u);
  b[0] = 'z';
  EXPECT_EQ(FirstDifference(a.data(), b.data(), a.size()), 0u);
  std::vector<char> c(5, 'q'), d(5, 'q');
  d[4] = 'r';  // shorter than a word
  EXPECT_EQ(FirstDifference(c.data(), d.data(), c.size()), 4u);
}

TEST(DeviceSnapshot, CopiesComparesAndRestoresEveryAllocation) {
  std::unique_ptr<host::HostCollectiveBackend> b = NewBackend();
  ASSERT_NE(b, nullptr);
  const std::vector<char> one(4096, 1), two(1000, 2);
  void* p = DeviceAlloc(b.get(), one);
  void* q = DeviceAlloc(b.get(), two);
  absl::StatusOr<DeviceSnapshot> snap = DeviceSnapshot::Take(b.get());
  ASSERT_TRUE(snap.ok()) << snap.status();
  ASSERT_EQ(snap->blocks().size(), 2u);
  EXPECT_EQ(snap->bytes(), 5096u);
  EXPECT_EQ(snap->allocations(), b->DeviceAllocations());

  // Unchanged: no difference.
  absl::StatusOr<std::vector<DeviceSnapshot::Difference>> d = snap->Compare(b.get(), false);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->empty());

  // One byte of q changes: q is reported with its first differing offset.
  std::vector<char> changed = two;
  changed[123] = 9;
  changed[500] = 9;
  Write(b.get(), q, changed);
  d = snap->Compare(b.get(), /*restore=*/false);
  ASSERT_TRUE(d.ok()) << d.status();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].addr, reinterpret_cast<uint64_t>(q));
  EXPECT_EQ((*d)[0].size, 1000u);
  EXPECT_EQ((*d)[0].first_offset, 123u);
  EXPECT_NE((*d)[0].expected_crc, (*d)[0].actual_crc);
  EXPECT_EQ(Read(b.get(), q, 1000), changed);  // not restored

  // With restore, the snapshot's bytes come back; then nothing differs.
  d = snap->Compare(b.get(), /*restore=*/true);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->size(), 1u);
  EXPECT_EQ(Read(b.get(), q, 1000), two);
  d = snap->Compare(b.get(), false);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->empty());

  // Restore writes every block back.
  Write(b.get(), p, std::vector<char>(4096, 7));
  Write(b.get(), q, std::vector<char>(1000, 7));
  ASSERT_TRUE(snap->Restore(b.get()).ok());
  EXPECT_EQ(Read(b.get(), p, 4096), one);
  EXPECT_EQ(Read(b.get(), q, 1000), two);
  EXPECT_EQ(b->cudaFree(p), cudaSuccess);
  EXPECT_EQ(b->cudaFree(q), cudaSuccess);
}

// A validation replay answers collectives from their first run's results,
// never runs them again, and reports units it has no result for.
TEST(HostCollectivesValidation, UnitsAnsweredFromTheirFirstRun) {
  std::unique_ptr<host::HostCollectiveBackend> b = NewBackend();
  ASSERT_NE(b, nullptr);
  ncclUniqueId id;
  ASSERT_EQ(b->ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(b->ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  b->MarkBoundary(3);
  std::vector<char> ones(64 * sizeof(float));
  {
    std::vector<float> f(64, 1.5f);
    std::memcpy(ones.data(), f.data(), ones.size());
  }
  void* send = DeviceAlloc(b.get(), ones);
  void* recv = DeviceAlloc(b.get(), std::vector<char>(ones.size(), 0));
  ASSERT_EQ(b->ncclAllReduce(send, recv, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(b->cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(Read(b.get(), recv, ones.size()), ones);

  // Replay with different input: the first run's result comes back.
  Write(b.get(), send, std::vector<char>(ones.size(), 0));
  Write(b.get(), recv, std::vector<char>(ones.size(), 0x55));
  ASSERT_TRUE(b->BeginValidationReplay().ok());
  ASSERT_EQ(b->ncclAllReduce(send, recv, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_TRUE(b->EndValidationReplay().ok());
  EXPECT_EQ(Read(b.get(), recv, ones.size()), ones);

  // A second unit in the replay has no first run: reported, not run.
  ASSERT_TRUE(b->BeginValidationReplay().ok());
  ASSERT_EQ(b->ncclAllReduce(send, recv, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(b->ncclAllReduce(send, recv, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(b->cudaDeviceSynchronize(), cudaSuccess);
  absl::Status end = b->EndValidationReplay();
  EXPECT_TRUE(absl::IsDataLoss(end)) << end;

  // The real run goes on where it was: its next unit runs for real.
  Write(b.get(), send, ones);
  Write(b.get(), recv, std::vector<char>(ones.size(), 0));
  ASSERT_EQ(b->ncclAllReduce(send, recv, 64, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  ASSERT_EQ(b->cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(Read(b.get(), recv, ones.size()), ones);
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(b->ncclCommGetAsyncError(comm, &async), ncclSuccess);
  EXPECT_EQ(async, ncclSuccess);
  EXPECT_EQ(b->ncclCommDestroy(comm), ncclSuccess);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
