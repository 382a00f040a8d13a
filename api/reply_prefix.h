// The fixed prefix of every reply, before the encoded OUT values (written by
// the agent, read by the shim).
//
// It carries the first error an asynchronous call of this process hit in the
// agent since the previous reply, so that deferred errors reach the
// application at its next synchronous call (cudaGetLastError then reports
// them), as CUDA's asynchronous errors do.
#ifndef REVENANT_API_REPLY_PREFIX_H_
#define REVENANT_API_REPLY_PREFIX_H_

#include <cstdint>

namespace revenant {

struct ReplyPrefix {
  int32_t deferred_error = 0;
  // The first error an asynchronous NCCL call of this process hit in the
  // agent, carried only by replies to synchronous NCCL calls that name or
  // create a communicator (docs/design.md, "NCCL calls"); never a CUDA error.
  int32_t nccl_deferred_error = 0;
};
inline constexpr uint32_t kReplyPrefixSize = sizeof(ReplyPrefix);
static_assert(kReplyPrefixSize == 8, "keeps OUT values 8-byte aligned");

}  // namespace revenant

#endif  // REVENANT_API_REPLY_PREFIX_H_
