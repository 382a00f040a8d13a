// GlooEngine: a CollectiveEngine over Gloo's TCP transport (127.0.0.1, or
// the node's address in a job spanning nodes).
//
//   GlooEngineOptions o;
//   o.rendezvous_dir = dir;   // shared by every member, exists or is creatable
//   o.prefix = "comm0";       // one context per prefix (a rebuilt engine: a new one)
//   o.rank = r;  o.size = n;
//   absl::StatusOr<std::unique_ptr<GlooEngine>> e = GlooEngine::Create(o);
//
// Rendezvous: a Gloo FileStore in `rendezvous_dir` under a PrefixStore of
// `prefix`; or, when `store_endpoint` is set (members on several nodes), an
// EtcdGlooStore (etcd_gloo_store.h) under
// <store_prefix><last component of rendezvous_dir>/, removed by rank 0 once
// everybody connected. Every member connects to every other (full mesh). Create returns
// only after all members connected and passed a barrier, so once it returns
// on any member nobody reads the store again (it may be removed).
//
// Every operation is two exchanges over point-to-point unbound buffers:
//  1. descriptors: each member sends the operation's descriptor (kind, type,
//     count, op, root) to every member it will exchange data with and
//     receives theirs; a collective exchanges them with everybody, so every
//     member sees all descriptors and decides alike. A disagreement fails the
//     operation with kInvalidArgument on every member before any data moves
//     (Gloo itself would abort the process on a size mismatch).
//  2. data: contributions go directly to the members that need them (no ring,
//     no tree); reductions are folded locally in application-rank order
//     (collective_engine.h), so results are bitwise identical everywhere.
// All sends and receives of a Run() are posted before any is waited for.
// Message matching uses Gloo slots: (per-collective sequence | phase) for
// collectives and (per-peer, per-direction sequence | phase) for send/recv.
//
// Failures: Gloo's IoException is the failure signal. Timeouts (every wait is
// bounded by `timeout`) give kDeadlineExceeded, other I/O errors kUnavailable.
#ifndef REVENANT_COLLECTIVE_GLOO_ENGINE_H_
#define REVENANT_COLLECTIVE_GLOO_ENGINE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collective/collective_engine.h"

namespace gloo {
namespace rendezvous {
class Context;
}  // namespace rendezvous
namespace transport {
class Device;
class UnboundBuffer;
}  // namespace transport
}  // namespace gloo

namespace revenant {
namespace collective {

struct GlooEngineOptions {
  std::string rendezvous_dir;  // created (0700) if missing
  std::string prefix = "revenant";
  int rank = 0;  // application rank
  int size = 1;
  // Bounds the rendezvous and every operation.
  absl::Duration timeout = DefaultCollectiveTimeout();
  // Identity when empty; otherwise size() entries.
  std::vector<int> app_to_engine;
  // The address this member listens on for its peers.
  std::string hostname = "127.0.0.1";
  // etcd (HOST:PORT) holding the rendezvous instead of rendezvous_dir, and
  // the key prefix there (the job's, ending in '/').
  std::string store_endpoint;
  std::string store_prefix;
};

class GlooEngine : public CollectiveEngine {
 public:
  // Connects to every member. kDeadlineExceeded when some member does not
  // join within the timeout, kInvalidArgument for bad options.
  static absl::StatusOr<std::unique_ptr<GlooEngine>> Create(const GlooEngineOptions& options);
  ~GlooEngine() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  absl::Status Run(absl::Span<const Operation> ops) override;
  void Abort() override;

 private:
  struct Transfer {
    bool is_send;
    int peer;  // engine rank
    void* ptr;
    size_t bytes;
    uint64_t slot;
  };

  GlooEngine(int rank, int size, VirtualRanks ranks, absl::Duration timeout);

  // Posts every transfer, then waits for all of them, until `deadline`.
  absl::Status Exchange(const std::vector<Transfer>& xs, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RunLocked(absl::Span<const Operation> ops) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const int rank_;  // application rank
  const int size_;
  const VirtualRanks ranks_;
  const int engine_rank_;
  const absl::Duration timeout_;

  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;

  std::mutex mu_;
  uint64_t collective_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<uint64_t> send_seq_ ABSL_GUARDED_BY(mu_);  // per engine peer
  std::vector<uint64_t> recv_seq_ ABSL_GUARDED_BY(mu_);
  absl::Status broken_ ABSL_GUARDED_BY(mu_);  // sticky transport failure

  // Abort() support: the buffers being waited for right now.
  std::atomic<bool> aborted_{false};
  std::mutex inflight_mu_;
  std::vector<gloo::transport::UnboundBuffer*> inflight_ ABSL_GUARDED_BY(inflight_mu_);
};

}  // namespace collective
}  // namespace revenant

#endif  // REVENANT_COLLECTIVE_GLOO_ENGINE_H_
