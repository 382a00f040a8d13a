// A fake of the NCCL calls agent/backends/cuda/cuda_nccl.cc makes, for
// testing its fence and recovery without a GPU (linked instead of libnccl
// into cuda_nccl_fake_test only, with testdata/fake_cudart.h).
//
// Model: the ranks of a communicator live in one process (threads); a
// communicator is the members that called ncclCommInitRankConfig with the
// same unique id (its init is in progress until all nranks joined). An
// all-reduce (float sum, the only collective modelled; the others answer
// ncclInvalidUsage) is an operation on the member's stream that waits until
// every member posted the collective of the same sequence number, then writes
// the sum in rank order to every member's receive buffer. BreakGroup models
// a member's death: every member's async error becomes ncclRemoteError and
// their waiting operations end at once, leaving NaN in the receive buffer
// (as an aborted kernel leaves an in-place buffer half-reduced).
// ncclCommAbort ends the member's waiting operations too.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_NCCL_H_
#define REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_NCCL_H_

#include <nccl.h>

#include <string>

namespace fake_nccl {

// The communicator of `id` loses a member (every current member sees it).
void BreakGroup(const ncclUniqueId& id);
// How many all-reduces ran to completion on communicators of `id` (per member).
long CompletedAllReduces(const ncclUniqueId& id);
// Communicators created so far (all ids).
long CommsCreated();

}  // namespace fake_nccl

#endif  // REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_NCCL_H_
