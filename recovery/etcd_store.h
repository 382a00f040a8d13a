// EtcdStore: the coordination state of a job spanning nodes, in etcd v3
// under the job's prefix (/revenant/<rdzv id>/), for the launcher of one
// node (revenant-run --nnodes=M --node-rank=K --rdzv-endpoint=HOST:PORT
// --rdzv-id=JOB). docs/multinode.md lists the keys.
//
//   auto client = EtcdClient::Create(endpoint);
//   EtcdStore store(std::move(*client), {.job_id = "job1", .node_rank = k,
//                                        .nnodes = m, .job_dir = local_dir});
//   store.Join(nproc, addr);                     // nodes/<k>, held by a lease
//   absl::StatusOr<std::string> master = store.Agree("master", proposal);
//   store.WaitForNodes(absl::Seconds(60));       // start agreement
//   store.StartWatcher();                        // epochs mirrored, members watched
//   ... Coordinator({.store = &store, ...}) ...
//   store.Finish(ok, reason);                    // done/<k> or failed/<k>
//
// Membership: each node's launcher holds nodes/<k> (created only if absent:
// two launchers claiming the same node rank cannot both win) on a lease it
// keeps alive from a thread of its own (every TTL/3). A launcher that dies
// stops renewing; etcd removes its key when the lease's TTL runs out; the
// others see a node that is neither present nor done: it is lost.
//
// Epochs: the key `epoch` holds "<n> node <k>" (who declared n). A claim is
// a compare-and-swap from the value read to n+1: of two nodes claiming at
// once one wins, the other reads the new value and claims the next. A
// watcher thread reads the key every 100 ms and mirrors it into the local
// job directory's epoch file, which the node's agents watch.
//
// Unreachable etcd: every request retries within the client's bound
// (EtcdClientOptions::unreachable_timeout); past it the store reports the
// failure through Health(), which the launcher turns into the job's end
// with that message.
//
// Thread safety: the launcher's thread calls everything; the keep-alive
// and watcher threads share state with it under a mutex.
#ifndef REVENANT_RECOVERY_ETCD_STORE_H_
#define REVENANT_RECOVERY_ETCD_STORE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "recovery/coordination_store.h"
#include "recovery/etcd_client.h"

namespace revenant {
namespace recovery {

struct EtcdStoreOptions {
  std::string job_id;    // --rdzv-id
  int node_rank = 0;     // --node-rank
  int nnodes = 1;        // --nnodes
  std::string job_dir;   // this node's job directory (epoch mirror, events)
  int64_t lease_ttl_s = 10;
  absl::Duration watch_interval = absl::Milliseconds(100);
};

class EtcdStore : public CoordinationStore {
 public:
  EtcdStore(std::unique_ptr<EtcdClient> client, EtcdStoreOptions options);
  ~EtcdStore() override;

  // The job's prefix: /revenant/<job id>/.
  const std::string& prefix() const { return prefix_; }
  EtcdClient* client() { return client_.get(); }

  // Takes node rank K: grants the lease, creates nodes/<K> (value: nproc,
  // addr, host, pid) and starts renewing the lease. kAlreadyExists when a
  // live launcher holds K; kFailedPrecondition when an earlier run of the
  // same job id left its end markers (done/, failed/) behind.
  absl::Status Join(int nproc, const std::string& addr);
  // The value of `name` under the prefix: `proposal` when this call created
  // it, else the value another node put there first.
  absl::StatusOr<std::string> Agree(const std::string& name, const std::string& proposal);
  // Waits for `name` under the prefix to exist (another node's Agree), bounded:
  // kDeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> AwaitValue(const std::string& name, absl::Duration timeout);
  // Waits until every node 0..M-1 joined, each with `nproc` ranks; bounded:
  // kDeadlineExceeded naming the nodes that did not come; kCancelled as
  // soon as `cancelled` (if given) returns true.
  absl::Status WaitForNodes(int nproc, absl::Duration timeout,
                            const std::function<bool()>& cancelled = nullptr);
  // Starts the watcher thread (epoch mirror, membership).
  void StartWatcher();

  // CoordinationStore.
  absl::StatusOr<int> ClaimNextEpoch() override;
  int LatestEpoch() override;
  void RecordEvent(const std::string& event, int rank, int epoch,
                   const std::string& detail) override;

  // What the watcher found: nodes lost (their lease expired before they
  // finished), nodes that ended with a failure (failed/<k>: the reason), and
  // whether etcd or the lease failed past the retries (non-OK: the reason).
  struct Health {
    std::vector<int> lost_nodes;
    std::vector<std::pair<int, std::string>> failed_nodes;
    absl::Status status;
  };
  Health health();

  // This node is done: writes done/<K> (ok) or failed/<K> = reason, stops
  // the threads and revokes the lease; the last node done removes the
  // job's keys. Idempotent.
  absl::Status Finish(bool ok, const std::string& reason);

 private:
  void KeepAliveLoop();
  void WatchLoop();
  void Stop();
  // Sleeps up to `d`; false when the threads are stopping.
  bool Pause(absl::Duration d);
  static int ParseEpoch(const std::string& value);
  void MirrorEpoch(int epoch);

  std::unique_ptr<EtcdClient> client_;
  const EtcdStoreOptions options_;
  const std::string prefix_;
  int64_t lease_ = 0;
  std::thread keepalive_;
  std::thread watcher_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;        // guarded by mu_
  int epoch_ = 0;                // guarded by mu_: the latest seen or claimed
  Health health_;                // guarded by mu_
  bool finished_ = false;
  uint64_t event_seq_ = 0;
};

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_ETCD_STORE_H_
