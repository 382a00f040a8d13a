// CollectiveEngine: one communicator's collectives on host memory.
//
//   GlooEngineOptions o;
//   o.rendezvous_dir = job_root + "/collectives-<token>";  // a private directory
//   o.rank = rank;  o.size = world;
//   absl::StatusOr<std::unique_ptr<CollectiveEngine>> e = GlooEngine::Create(o);
//   absl::Status s = (*e)->AllReduce(send, recv, n, DataType::kFloat32, RedOp::kSum);
//
// Determinism is the contract that matters most: Revenant must reproduce a
// training run bit for bit after a recovery, when the engine may have been
// rebuilt with other engine ranks, another topology or another transport.
// So every reduction is "gather every rank's contribution, then fold locally
// in application-rank order 0..n-1": acc = c[0]; acc = op(acc, c[1]); ...
// Every rank folds the same operands in the same order, hence computes
// bitwise the same result, independent of who talks to whom first.
//
// Ranks: the API speaks application ranks (the `rank` the program passed to
// ncclCommInitRank; roots, peers, and the order of gathered results). The
// transport speaks engine ranks. VirtualRanks maps one to the other; it is
// the identity until recovery renumbers a rebuilt engine.
//
// Errors (absl::Status), chosen by what the caller should do:
//   kInvalidArgument   bad arguments, or ranks disagree on an operation
//                      (count, dtype, op, root): nothing was transferred and
//                      the engine stays usable;
//   kUnavailable       a peer died or its connection broke;
//   kDeadlineExceeded  the operation did not complete within the timeout;
//   kAborted           Abort() was called.
// After kUnavailable, kDeadlineExceeded or kAborted the engine is broken:
// every later call fails with kAborted; rebuild it (a new engine per epoch).
//
// Thread safety: calls are serialized internally; Abort() may be called from
// any thread at any time and makes a blocked call return promptly.
#ifndef REVENANT_COLLECTIVE_COLLECTIVE_ENGINE_H_
#define REVENANT_COLLECTIVE_COLLECTIVE_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"

namespace revenant {
namespace collective {

// Mirrors ncclDataType_t (same numeric values, so a cast translates).
// Half and bfloat16 reduce in float with every step rounded back to 16 bits
// (round to nearest even); NCCL's fp8 types are not supported
// (kInvalidArgument).
enum class DataType : int {
  kInt8 = 0,
  kUint8 = 1,
  kInt32 = 2,
  kUint32 = 3,
  kInt64 = 4,
  kUint64 = 5,
  kFloat16 = 6,
  kFloat32 = 7,
  kFloat64 = 8,
  kBfloat16 = 9,
};

// Mirrors ncclRedOp_t's built-in operations (same numeric values).
enum class RedOp : int { kSum = 0, kProd = 1, kMax = 2, kMin = 3, kAvg = 4 };

// Bytes per element; 0 for an unsupported type.
size_t DataTypeSize(DataType t);

// Application rank <-> engine rank. Identity for now; recovery installs a
// permutation when a rebuilt engine numbers its members differently.
class VirtualRanks {
 public:
  static VirtualRanks Identity(int n);
  // `app_to_engine` must be a permutation of 0..n-1.
  static absl::StatusOr<VirtualRanks> FromPermutation(std::vector<int> app_to_engine);

  int size() const { return static_cast<int>(app_to_engine_.size()); }
  int ToEngine(int app_rank) const { return app_to_engine_[app_rank]; }
  int ToApp(int engine_rank) const { return engine_to_app_[engine_rank]; }

 private:
  std::vector<int> app_to_engine_;
  std::vector<int> engine_to_app_;
};

// One operation, for Run() (a group: issued together, completed together).
// Buffers follow NCCL's conventions (counts are per rank, in elements):
//   kAllReduce     send[count] -> recv[count]
//   kBroadcast     root's send[count] -> recv[count] everywhere
//   kReduce        send[count] -> root's recv[count]
//   kAllGather     send[count] -> recv[size * count], rank r's at r * count
//   kReduceScatter send[size * count] -> recv[count], rank r gets block r
//   kAllToAll      send[size * count] -> recv[size * count], block j to rank j
//   kGather        send[count] -> root's recv[size * count]
//   kScatter       root's send[size * count] -> recv[count]
//   kSend          send[count] -> peer;  kRecv: peer -> recv[count]
// In-place use (send == recv, or NCCL's in-place offsets) is allowed.
struct Operation {
  enum class Kind : int {
    kAllReduce = 1,
    kBroadcast,
    kReduce,
    kAllGather,
    kReduceScatter,
    kAllToAll,
    kGather,
    kScatter,
    kSend,
    kRecv,
  };
  Kind kind = Kind::kAllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  RedOp op = RedOp::kSum;
  int root = 0;  // root (rooted collectives) or peer (send/recv), application rank
};

class CollectiveEngine {
 public:
  virtual ~CollectiveEngine() = default;

  // This member's application rank and the communicator's size.
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Runs `ops` as one group: all their transfers are posted before any is
  // waited for, so send/recv pairs in any order never deadlock. Ranks must
  // issue their collectives in the same order (as with NCCL). Returns the
  // first error; an operation that ranks disagree on fails on every rank
  // with kInvalidArgument while the others complete.
  virtual absl::Status Run(absl::Span<const Operation> ops) = 0;

  // Makes the current and every later call fail with kAborted.
  virtual void Abort() = 0;

  // Convenience wrappers around Run() of one operation.
  absl::Status AllReduce(const void* send, void* recv, size_t count, DataType t, RedOp op);
  absl::Status Broadcast(const void* send, void* recv, size_t count, DataType t, int root);
  absl::Status Reduce(const void* send, void* recv, size_t count, DataType t, RedOp op, int root);
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType t);
  absl::Status ReduceScatter(const void* send, void* recv, size_t count, DataType t, RedOp op);
  absl::Status AllToAll(const void* send, void* recv, size_t count, DataType t);
  absl::Status Gather(const void* send, void* recv, size_t count, DataType t, int root);
  absl::Status Scatter(const void* send, void* recv, size_t count, DataType t, int root);
  absl::Status Send(const void* send, size_t count, DataType t, int peer);
  absl::Status Recv(void* recv, size_t count, DataType t, int peer);
};

// Folds n contributions (each `count` elements, contiguous in `contribs`,
// application rank order) into `out` in order 0..n-1; avg divides the sum
// by n at the end (integers: truncating division). `out` may alias nothing
// in `contribs`.
absl::Status FoldInOrder(const void* contribs, int n, size_t count, DataType t, RedOp op,
                         void* out);

// The timeout of every collective call: REVENANT_COLLECTIVE_TIMEOUT_S
// (seconds, > 0), default 60 s.
absl::Duration DefaultCollectiveTimeout();

}  // namespace collective
}  // namespace revenant

#endif  // REVENANT_COLLECTIVE_COLLECTIVE_ENGINE_H_
