// The checks the shim makes at the call for asynchronous NCCL rows
// (shim/nccl_checks.h): NCCL's own codes, nothing forwarded.
#include "shim/nccl_checks.h"

#include <nccl.h>

#include <cstdint>
#include <thread>

#include "gtest/gtest.h"

namespace revenant {
namespace shim {
namespace {

ncclComm_t Fake(uintptr_t v) { return reinterpret_cast<ncclComm_t>(v); }

int32_t AllReduce(ncclComm_t comm, size_t count, int dtype, int op, const void* send,
                  const void* recv) {
  return NcclCheckCall(comm, count, dtype, true, op, false, 0, send, true, recv, true);
}

TEST(NcclChecks, CommunicatorsMustBeKnown) {
  float b[4];
  EXPECT_EQ(AllReduce(nullptr, 4, ncclFloat, ncclSum, b, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(Fake(0x1000), 4, ncclFloat, ncclSum, b, b), ncclInvalidArgument);
  NcclCommCreated(Fake(0x1000), 2);
  EXPECT_EQ(AllReduce(Fake(0x1000), 4, ncclFloat, ncclSum, b, b), ncclSuccess);
  NcclCommGone(Fake(0x1000));
  EXPECT_EQ(AllReduce(Fake(0x1000), 4, ncclFloat, ncclSum, b, b), ncclInvalidArgument);
  NcclCommCreated(nullptr, 1);  // a split without color: nothing registered
  EXPECT_EQ(AllReduce(nullptr, 4, ncclFloat, ncclSum, b, b), ncclInvalidArgument);
}

TEST(NcclChecks, TypesOpsRootsAndBuffers) {
  float b[4];
  const ncclComm_t c = Fake(0x2000);
  NcclCommCreated(c, 4);
  EXPECT_EQ(AllReduce(c, 4, ncclNumTypes, ncclSum, b, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 4, -1, ncclSum, b, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 4, ncclFloat, ncclNumOps, b, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 4, ncclFloat, -1, b, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 4, ncclBfloat16, ncclAvg, b, b), ncclSuccess);
  // Null buffers only matter with elements to move.
  EXPECT_EQ(AllReduce(c, 4, ncclFloat, ncclSum, nullptr, b), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 4, ncclFloat, ncclSum, b, nullptr), ncclInvalidArgument);
  EXPECT_EQ(AllReduce(c, 0, ncclFloat, ncclSum, nullptr, nullptr), ncclSuccess);
  // Broadcast: root in [0, 4); the send buffer (root only) is not checked.
  auto bcast = [&](int root, const void* recv) {
    return NcclCheckCall(c, 4, ncclFloat, false, 0, true, root, recv, true, nullptr, false);
  };
  EXPECT_EQ(bcast(3, b), ncclSuccess);
  EXPECT_EQ(bcast(4, b), ncclInvalidArgument);
  EXPECT_EQ(bcast(-1, b), ncclInvalidArgument);
  EXPECT_EQ(bcast(0, nullptr), ncclInvalidArgument);
  // A communicator of unknown size (split/shrink): only negative roots.
  const ncclComm_t split = Fake(0x3000);
  NcclCommCreated(split, -1);
  EXPECT_EQ(NcclCheckCall(split, 4, ncclFloat, false, 0, true, 1000, b, true, nullptr, false),
            ncclSuccess);
  EXPECT_EQ(NcclCheckCall(split, 4, ncclFloat, false, 0, true, -2, b, true, nullptr, false),
            ncclInvalidArgument);
  NcclCommGone(c);
  NcclCommGone(split);
}

TEST(NcclChecks, GroupEndNeedsAGroupOnTheSameThread) {
  EXPECT_EQ(NcclCheckGroupEnd(), ncclInvalidUsage);
  NcclGroupStarted();
  NcclGroupStarted();
  EXPECT_EQ(NcclCheckGroupEnd(), ncclSuccess);
  NcclGroupEnded();
  int32_t other = ncclSuccess;
  std::thread([&] { other = NcclCheckGroupEnd(); }).join();
  EXPECT_EQ(other, ncclInvalidUsage);  // NCCL's group depth is per thread
  EXPECT_EQ(NcclCheckGroupEnd(), ncclSuccess);
  NcclGroupEnded();
  EXPECT_EQ(NcclCheckGroupEnd(), ncclInvalidUsage);
  NcclGroupEnded();  // never below zero
  EXPECT_EQ(NcclCheckGroupEnd(), ncclInvalidUsage);
}

}  // namespace
}  // namespace shim
}  // namespace revenant
