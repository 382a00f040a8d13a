#include "recovery/etcd_store.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/events.h"
#include "common/logging.h"

namespace revenant {
namespace recovery {
namespace {

constexpr char kLog[] = "etcd-store";

// The number after `dir` in a key "<prefix><dir><n>", -1 if none.
int NodeOf(const std::string& key, const std::string& dir_prefix) {
  if (key.compare(0, dir_prefix.size(), dir_prefix) != 0) return -1;
  int k = -1;
  return absl::SimpleAtoi(key.substr(dir_prefix.size()), &k) ? k : -1;
}

std::string FieldOf(const std::string& value, const std::string& name) {
  for (absl::string_view part : absl::StrSplit(value, ' ', absl::SkipEmpty())) {
    std::vector<std::string> kv = absl::StrSplit(part, absl::MaxSplits('=', 1));
    if (kv.size() == 2 && kv[0] == name) return kv[1];
  }
  return "";
}

std::string Hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

}  // namespace

EtcdStore::EtcdStore(std::unique_ptr<EtcdClient> client, EtcdStoreOptions options)
    : client_(std::move(client)),
      options_(std::move(options)),
      prefix_(absl::StrCat("/revenant/", options_.job_id, "/")),
      round_prefix_(prefix_ + "round0/") {}

EtcdStore::~EtcdStore() { Stop(); }

void EtcdStore::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (keepalive_.joinable()) keepalive_.join();
  if (watcher_.joinable()) watcher_.join();
}

bool EtcdStore::Pause(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, absl::ToChronoMilliseconds(d), [this] { return stopping_; });
  return !stopping_;
}

int EtcdStore::ParseEpoch(const std::string& value) {
  return std::atoi(value.c_str());  // "<n> node <k>"; absent or bad: 0
}

void EtcdStore::MirrorEpoch(int epoch) {
  // Under mu_: the watcher and a claim may mirror at once; the file only
  // ever moves forward.
  std::lock_guard<std::mutex> lock(mu_);
  if (epoch <= epoch_) return;
  epoch_ = epoch;
  if (absl::Status s = WriteEpochFile(options_.job_dir, epoch); !s.ok()) {
    REVENANT_LOG(ERROR, kLog) << s;
  }
}

absl::Status EtcdStore::Join(int nproc, const std::string& addr) {
  for (const char* dir : {"done/", "failed/"}) {
    absl::StatusOr<std::vector<EtcdKv>> left = client_->GetPrefix(prefix_ + dir);
    if (!left.ok()) return left.status();
    if (!left->empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "etcd at ", client_->endpoint(), " holds the end of an earlier run of job '",
          options_.job_id, "' (", (*left)[0].key.substr(prefix_.size()), ": ", (*left)[0].value,
          "): use a new --rdzv-id, or remove the old keys (etcdctl del --prefix ", prefix_, ")"));
    }
  }
  absl::StatusOr<int64_t> lease = client_->GrantLease(options_.lease_ttl_s);
  if (!lease.ok()) return lease.status();
  lease_ = *lease;
  const std::string value = absl::StrFormat("nproc=%d addr=%s host=%s pid=%d", nproc, addr,
                                            Hostname(), static_cast<int>(getpid()));
  auto give_up = [this](absl::Status s) {
    (void)client_->RevokeLease(lease_);
    lease_ = 0;
    return s;
  };
  // nodes/<K>: created only if absent, so two launchers for one node rank
  // never both win. A holder may be a launcher that died (its lease has not
  // expired yet, e.g. a launcher restarted at once): wait for it, bounded.
  const absl::Time holder_deadline = absl::Now() + options_.holder_wait;
  bool said = false;
  absl::Time renewed = absl::Now();
  while (true) {
    std::string holder;
    absl::StatusOr<bool> won = client_->CreateIfAbsent(
        absl::StrCat(prefix_, "nodes/", options_.node_rank), value, lease_, &holder);
    if (!won.ok()) return give_up(won.status());
    if (*won) break;
    if (absl::Now() >= holder_deadline) {
      return give_up(absl::AlreadyExistsError(absl::StrCat(
          "node rank ", options_.node_rank, " of job '", options_.job_id,
          "' is held by a live launcher (", holder, ")",
          options_.holder_wait > absl::ZeroDuration()
              ? absl::StrCat(": its lease was still renewed after ",
                             absl::FormatDuration(options_.holder_wait))
              : "")));
    }
    if (!said) {
      REVENANT_LOG(WARNING, kLog) << "node rank " << options_.node_rank << " of job '"
                                  << options_.job_id << "' is held (" << holder
                                  << "); waiting up to " << options_.holder_wait
                                  << " for its lease to expire (a launcher that died)";
      said = true;
    }
    absl::SleepFor(absl::Milliseconds(200));
    // This launcher's own lease must outlive the wait (its renewing thread
    // starts once it joined).
    if (absl::Now() - renewed >= absl::Seconds(std::max<int64_t>(1, options_.lease_ttl_s)) / 3) {
      absl::StatusOr<int64_t> ttl = client_->KeepAlive(lease_);
      if (!ttl.ok()) return give_up(ttl.status());
      renewed = absl::Now();
    }
  }
  // The round: the current one, unless it started without this launcher
  // (this is a restarted node: its earlier launcher's ranks died with it),
  // then the next, claimed by compare-and-swap (of several nodes claiming,
  // one moves `round` and the others read it and join the same round).
  const std::string round_key = prefix_ + "round";
  bool joined = false;
  for (int attempt = 0; attempt < 100 && !joined; ++attempt) {
    absl::StatusOr<std::optional<EtcdKv>> cur = client_->Get(round_key);
    if (!cur.ok()) return give_up(cur.status());
    std::optional<std::string> expected;
    int r = 0;
    if (cur->has_value()) {
      expected = (*cur)->value;
      r = std::atoi(expected->c_str());
    }
    const std::string dir = absl::StrCat(prefix_, "round", r, "/");
    absl::StatusOr<std::optional<EtcdKv>> started = client_->Get(dir + "started");
    if (!started.ok()) return give_up(started.status());
    if (!started->has_value()) {
      // round<r>/joined/<K> on this node's lease: gone with the launcher.
      std::string other;
      absl::StatusOr<bool> won = client_->CreateIfAbsent(
          absl::StrCat(dir, "joined/", options_.node_rank), value, lease_, &other);
      if (!won.ok()) return give_up(won.status());
      if (!*won) continue;  // cannot be (nodes/<K> is this launcher's): read again
      round_ = r;
      round_prefix_ = dir;
      joined = true;
      break;
    }
    if (r + 1 > options_.max_restarts) {
      // The lease stays: Finish(false, ...) tells the other nodes why.
      return absl::FailedPreconditionError(absl::StrCat(
          "node ", options_.node_rank, " cannot rejoin job '", options_.job_id, "': its round ", r,
          " started without this launcher (the ranks of node ", options_.node_rank,
          "'s earlier launcher died with it, and a rank's application state cannot be rebuilt "
          "elsewhere); rejoining restarts every node's ranks, and --max-restarts=",
          options_.max_restarts, " allows ", options_.max_restarts == 0 ? "none" : "no more",
          " (the job has restarted ", r, " time(s))"));
    }
    std::string found;
    absl::StatusOr<bool> swapped =
        client_->CompareAndSwap(round_key, expected, std::to_string(r + 1), &found);
    if (!swapped.ok()) return give_up(swapped.status());
    if (*swapped) {
      REVENANT_LOG(INFO, kLog) << "node " << options_.node_rank << " of job '" << options_.job_id
                               << "': round " << r << " started without this launcher; claimed "
                               << "round " << r + 1 << " (restart " << r + 1 << " of "
                               << options_.max_restarts << ")";
    }
    // Swapped or not, read `round` again and join what it now says.
  }
  if (!joined) return give_up(absl::AbortedError("could not join a round in 100 attempts"));
  keepalive_ = std::thread([this] { KeepAliveLoop(); });
  return absl::OkStatus();
}

void EtcdStore::KeepAliveLoop() {
  const absl::Duration every = absl::Seconds(std::max<int64_t>(1, options_.lease_ttl_s)) / 3;
  while (Pause(every)) {
    absl::StatusOr<int64_t> ttl = client_->KeepAlive(lease_);
    if (ttl.ok()) continue;
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    health_.status = absl::Status(
        ttl.status().code(),
        absl::StrCat("node ", options_.node_rank, " lost its membership of job '",
                     options_.job_id, "' (its lease in etcd could not be renewed within ",
                     options_.lease_ttl_s, " s): ", ttl.status().message()));
    return;
  }
}

absl::StatusOr<std::string> EtcdStore::Agree(const std::string& name, const std::string& proposal) {
  std::string existing;
  absl::StatusOr<bool> won =
      client_->CreateIfAbsent(round_prefix_ + name, proposal, 0, &existing);
  if (!won.ok()) return won.status();
  return *won ? proposal : existing;
}

absl::StatusOr<std::string> EtcdStore::AwaitValue(const std::string& name,
                                                  absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::optional<EtcdKv>> kv = client_->Get(round_prefix_ + name);
    if (!kv.ok()) return kv.status();
    if (kv->has_value()) return (*kv)->value;
    if (absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat("job '", options_.job_id, "': no ", name,
                                                  " of round ", round_,
                                                  " in etcd at ", client_->endpoint(),
                                                  " within ", absl::FormatDuration(timeout)));
}

absl::Status EtcdStore::WaitForNodes(int nproc, absl::Duration timeout,
                                     const std::function<bool()>& cancelled) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string dir = round_prefix_ + "joined/";
  std::set<int> present;
  while (true) {
    absl::StatusOr<std::vector<EtcdKv>> nodes = client_->GetPrefix(dir);
    if (!nodes.ok()) return nodes.status();
    present.clear();
    members_.clear();
    for (const EtcdKv& kv : *nodes) {
      const int k = NodeOf(kv.key, dir);
      if (k < 0 || k >= options_.nnodes) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job '", options_.job_id, "': a launcher joined as node ", kv.key.substr(dir.size()),
            ", outside 0..", options_.nnodes - 1, " (do the nodes agree on --nnodes?)"));
      }
      const std::string theirs = FieldOf(kv.value, "nproc");
      if (theirs != std::to_string(nproc)) {
        return absl::FailedPreconditionError(
            absl::StrCat("job '", options_.job_id, "': node ", k, " runs ", theirs,
                         " rank(s), this node ", nproc, " (--nproc-per-node must agree)"));
      }
      present.insert(k);
      members_[k] = kv.lease;
    }
    if (static_cast<int>(present.size()) == options_.nnodes) {
      // The round started: a launcher that joins the job from now on (a
      // restarted node) claims the next round.
      std::string ignored;
      absl::StatusOr<bool> marked =
          client_->CreateIfAbsent(round_prefix_ + "started", "ok", 0, &ignored);
      return marked.ok() ? absl::OkStatus() : marked.status();
    }
    if (absl::Now() >= deadline) break;
    if (cancelled && cancelled()) {
      return absl::CancelledError(absl::StrCat("stopped by a signal while waiting for the other ",
                                               "nodes (", present.size(), " of ", options_.nnodes,
                                               " present)"));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!health_.status.ok()) return health_.status;
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  std::vector<int> missing;
  for (int k = 0; k < options_.nnodes; ++k) {
    if (!present.count(k)) missing.push_back(k);
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "job '", options_.job_id, "': node(s) ", absl::StrJoin(missing, ", "),
      round_ == 0 ? " did not join within "
                  : absl::StrCat(" did not rejoin for restart ", round_, " within "),
      absl::FormatDuration(timeout), " (", present.size(), " of ", options_.nnodes,
      " present in etcd at ", client_->endpoint(), ")"));
}

void EtcdStore::StartWatcher() {
  if (!watcher_.joinable()) watcher_ = std::thread([this] { WatchLoop(); });
}

void EtcdStore::WatchLoop() {
  int round = 0;
  const std::string nodes_dir = round_prefix_ + "joined/";
  const std::string done_dir = prefix_ + "done/";
  const std::string failed_dir = prefix_ + "failed/";
  while (Pause(options_.watch_interval)) {
    absl::Status failure;
    absl::StatusOr<std::optional<EtcdKv>> epoch = client_->Get(round_prefix_ + "epoch");
    if (epoch.ok()) {
      if (epoch->has_value()) MirrorEpoch(ParseEpoch((*epoch)->value));
    } else {
      failure = epoch.status();
    }
    // Membership every 5th round (500 ms by default).
    if (failure.ok() && ++round % 5 == 0) {
      absl::StatusOr<std::vector<EtcdKv>> nodes = client_->GetPrefix(nodes_dir);
      absl::StatusOr<std::vector<EtcdKv>> done =
          nodes.ok() ? client_->GetPrefix(done_dir) : nodes.status();
      absl::StatusOr<std::vector<EtcdKv>> failed =
          done.ok() ? client_->GetPrefix(failed_dir) : done.status();
      absl::StatusOr<std::optional<EtcdKv>> round =
          failed.ok() ? client_->Get(prefix_ + "round") : failed.status();
      if (!round.ok()) {
        failure = round.status();
      } else {
        std::set<int> alive, ended;
        for (const EtcdKv& kv : *nodes) {
          // Alive: joined this round on the lease seen at its start (another
          // lease is a new incarnation of the node, whose ranks are new).
          const int k = NodeOf(kv.key, nodes_dir);
          auto m = members_.find(k);
          if (m == members_.end() || m->second == kv.lease) alive.insert(k);
        }
        for (const EtcdKv& kv : *done) ended.insert(NodeOf(kv.key, done_dir));
        Health h;
        for (const EtcdKv& kv : *failed) {
          const int k = NodeOf(kv.key, failed_dir);
          ended.insert(k);
          if (k != options_.node_rank) h.failed_nodes.push_back({k, kv.value});
        }
        for (int k = 0; k < options_.nnodes; ++k) {
          if (!alive.count(k) && !ended.count(k)) h.lost_nodes.push_back(k);
        }
        const int now_round = round->has_value() ? std::atoi((*round)->value.c_str()) : 0;
        std::lock_guard<std::mutex> lock(mu_);
        health_.lost_nodes = h.lost_nodes;
        health_.failed_nodes = h.failed_nodes;
        health_.newer_round = now_round > round_ ? now_round : -1;
      }
    }
    if (!failure.ok()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      if (health_.status.ok()) {
        health_.status = absl::Status(
            failure.code(), absl::StrCat("node ", options_.node_rank, " lost the job's etcd: ",
                                         failure.message()));
      }
      return;
    }
  }
}

EtcdStore::Health EtcdStore::health() {
  std::lock_guard<std::mutex> lock(mu_);
  return health_;
}

absl::StatusOr<int> EtcdStore::ClaimNextEpoch() {
  const std::string key = round_prefix_ + "epoch";
  for (int attempt = 0; attempt < 1000; ++attempt) {
    absl::StatusOr<std::optional<EtcdKv>> cur = client_->Get(key);
    if (!cur.ok()) return cur.status();
    std::optional<std::string> expected;
    int n = 0;
    if (cur->has_value()) {
      expected = (*cur)->value;
      n = ParseEpoch(*expected);
    }
    const std::string desired = absl::StrCat(n + 1, " node ", options_.node_rank);
    std::string found;
    absl::StatusOr<bool> swapped = client_->CompareAndSwap(key, expected, desired, &found);
    if (!swapped.ok()) return swapped.status();
    // `found == desired`: a retried attempt whose first answer was lost had
    // written it (no other node writes this node's values).
    if (*swapped || found == desired) {
      MirrorEpoch(n + 1);
      return n + 1;
    }
    MirrorEpoch(ParseEpoch(found));  // another node's epoch: claim the next one
  }
  return absl::AbortedError("could not claim a recovery epoch in 1000 attempts");
}

int EtcdStore::LatestEpoch() {
  std::lock_guard<std::mutex> lock(mu_);
  return epoch_;
}

void EtcdStore::RecordEvent(const std::string& event, int rank, int epoch,
                            const std::string& detail) {
  revenant::RecordEvent(options_.job_dir, event, rank, epoch, detail);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!health_.status.ok() || stopping_) return;  // diagnostics: never wait on a lost etcd
  }
  const std::string line = absl::StrFormat(
      "{\"t_us\":%d,\"node\":%d,\"event\":\"%s\",\"rank\":%d,\"epoch\":%d,\"detail\":\"%s\"}",
      absl::ToUnixMicros(absl::Now()), options_.node_rank, event, rank, epoch,
      absl::StrReplaceAll(detail, {{"\\", "\\\\"}, {"\"", "\\\""}}));
  const std::string key = absl::StrFormat("%sevents/node%d/r%d-%08d", prefix_,
                                          options_.node_rank, round_, event_seq_++);
  if (absl::Status s = client_->Put(key, line); !s.ok()) {
    REVENANT_LOG(WARNING, kLog) << "recovery event not stored in etcd: " << s;
  }
}

void EtcdStore::Leave() {
  if (finished_) return;
  finished_ = true;
  Stop();
  if (lease_ != 0) (void)client_->RevokeLease(lease_);
  lease_ = 0;
}

absl::Status EtcdStore::Finish(bool ok, const std::string& reason) {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  Stop();
  if (lease_ == 0) return absl::OkStatus();  // never joined
  {
    // etcd was already given up on (past the retries): say so at once
    // rather than retrying the markers for as long again.
    std::lock_guard<std::mutex> lock(mu_);
    if (!health_.status.ok() && health_.status.code() != absl::StatusCode::kNotFound) {
      return health_.status;
    }
  }
  const std::string mine = absl::StrCat(ok ? "done/" : "failed/", options_.node_rank);
  absl::Status s = client_->Put(prefix_ + mine, ok ? "ok" : reason);
  // The marker is written before the lease goes, so no other node takes
  // this one's leaving for a loss.
  absl::Status revoked = client_->RevokeLease(lease_);
  lease_ = 0;
  if (!s.ok()) return s;
  if (ok) {
    absl::StatusOr<std::vector<EtcdKv>> done = client_->GetPrefix(prefix_ + "done/");
    if (done.ok() && static_cast<int>(done->size()) == options_.nnodes) {
      // The last node done: nobody reads the job's keys any more.
      absl::StatusOr<int64_t> removed = client_->DeletePrefix(prefix_);
      if (!removed.ok()) return removed.status();
    }
  }
  return revoked;
}

}  // namespace recovery
}  // namespace revenant
