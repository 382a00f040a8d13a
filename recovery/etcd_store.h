// EtcdStore: the coordination state of a job spanning nodes, in etcd v3
// under the job's prefix (/revenant/<rdzv id>/), for the launcher of one
// node (revenant-run --nnodes=M --node-rank=K --rdzv-endpoint=HOST:PORT
// --rdzv-id=JOB). docs/multinode.md lists the keys.
//
//   auto client = EtcdClient::Create(endpoint);
//   EtcdStore store(std::move(*client), {.job_id = "job1", .node_rank = k,
//                                        .nnodes = m, .job_dir = local_dir});
//   store.Join(nproc, addr);                     // nodes/<k>, held by a lease; the round
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
// Rounds (a restarted node rejoining): the key `round` holds the job's
// rendezvous round r (absent: 0); the start agreement, MASTER_ADDR/PORT,
// the epochs and the agents' Gloo rendezvous live under round<r>/. A node
// joins round r by creating round<r>/joined/<k> on its lease; once all M are
// there, round<r>/started is written and the ranks run. A launcher that
// joins a job whose round r already started (it is a restarted node: the
// ranks of its earlier launcher died with it) claims round r+1 by
// compare-and-swap (refused past options.max_restarts); the other nodes'
// watchers see `round` move past theirs, their launchers stop their ranks and
// join the new round, and every rank starts again (torchrun's
// --max-restarts). A node whose round<r>/joined/<k> went, or now sits on
// another lease (a new incarnation), is lost.
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
#include <map>
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
  // Rounds this job may restart into (--max-restarts): a launcher that would
  // have to claim round max_restarts + 1 to rejoin is refused.
  int max_restarts = 0;
  // When nodes/<K> is held at Join, how long to wait for it to go (a dead
  // launcher's lease expires within its TTL) before refusing; 0: refuse at once.
  absl::Duration holder_wait = absl::ZeroDuration();
};

class EtcdStore : public CoordinationStore {
 public:
  EtcdStore(std::unique_ptr<EtcdClient> client, EtcdStoreOptions options);
  ~EtcdStore() override;

  // The job's prefix: /revenant/<job id>/.
  const std::string& prefix() const { return prefix_; }
  // The round this launcher joined (Join), and its keys' prefix
  // (<prefix>round<r>/: master, epoch, joined/, started, the agents' gloo/).
  int round() const { return round_; }
  const std::string& round_prefix() const { return round_prefix_; }
  EtcdClient* client() { return client_.get(); }

  // Takes node rank K: grants the lease, creates nodes/<K> (value: nproc,
  // addr, host, pid; waiting up to options.holder_wait for a holder's lease
  // to expire), picks the round (claiming the next one when the current one
  // started without this launcher), creates round<r>/joined/<K> and starts
  // renewing the lease. kAlreadyExists when a live launcher holds K;
  // kFailedPrecondition when an earlier run of the same job id left its end
  // markers (done/, failed/) behind, or when rejoining would need a restart
  // past options.max_restarts (the lease is kept then: Finish(false) records
  // this node's failure for the others).
  absl::Status Join(int nproc, const std::string& addr);
  // The value of `name` under the round's prefix: `proposal` when this call
  // created it, else the value another node put there first.
  absl::StatusOr<std::string> Agree(const std::string& name, const std::string& proposal);
  // Waits for `name` under the round's prefix to exist (another node's
  // Agree), bounded: kDeadlineExceeded after `timeout`.
  absl::StatusOr<std::string> AwaitValue(const std::string& name, absl::Duration timeout);
  // Waits until every node 0..M-1 joined the round, each with `nproc` ranks;
  // then marks the round started. Bounded: kDeadlineExceeded naming the
  // nodes that did not come; kCancelled as soon as `cancelled` (if given)
  // returns true.
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
    // The job's `round` moved past this launcher's (a node rejoined, or
    // another node restarts for a lost one): its ranks must start again in
    // that round. -1: not.
    int newer_round = -1;
    std::vector<std::pair<int, std::string>> failed_nodes;
    absl::Status status;
  };
  Health health();

  // This node is done: writes done/<K> (ok) or failed/<K> = reason, stops
  // the threads and revokes the lease; the last node done removes the
  // job's keys. Idempotent.
  absl::Status Finish(bool ok, const std::string& reason);
  // This launcher leaves to restart its ranks in a later round (its process
  // is replaced, the new one joins again): stops the threads and revokes the
  // lease, writing no end marker. Finish does nothing after it.
  void Leave();

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
  int round_ = 0;
  std::string round_prefix_;
  std::map<int, int64_t> members_;  // the round's nodes and their leases at its start
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
