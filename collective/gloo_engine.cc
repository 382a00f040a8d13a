#include "collective/gloo_engine.h"

#include <errno.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <memory>
#include <utility>

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>

#include "absl/strings/match.h"
#include "collective/etcd_gloo_store.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace revenant {
namespace collective {
namespace {

constexpr char kLog[] = "collective";
constexpr uint32_t kDescMagic = 0x52564344;  // "RVCD"

// Slot phases (low 4 bits of a Gloo slot).
enum Phase : uint64_t {
  kCollDesc = 1,
  kCollData = 2,
  kP2pDesc = 3,  // sender -> receiver
  kP2pAck = 4,   // receiver -> sender
  kP2pData = 5,
  kBarrier = 6,
};
uint64_t Slot(uint64_t seq, Phase phase) { return (seq << 4) | phase; }

// What members compare before moving data. Only fields every participant
// must agree on; nothing rank-specific.
struct Desc {
  uint32_t magic = kDescMagic;
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t op = 0;
  uint64_t count = 0;
  int32_t root = 0;
  int32_t valid = 1;
  bool operator==(const Desc& o) const {
    return magic == o.magic && kind == o.kind && dtype == o.dtype && op == o.op &&
           count == o.count && root == o.root && valid == o.valid;
  }
};
static_assert(sizeof(Desc) == 32, "descriptor layout");

constexpr int32_t kP2pKind = 100;

using Kind = Operation::Kind;

bool IsP2p(Kind k) { return k == Kind::kSend || k == Kind::kRecv; }
bool IsReduction(Kind k) {
  return k == Kind::kAllReduce || k == Kind::kReduce || k == Kind::kReduceScatter;
}
bool IsRooted(Kind k) {
  return k == Kind::kBroadcast || k == Kind::kReduce || k == Kind::kGather ||
         k == Kind::kScatter;
}

const char* KindName(Kind k) {
  switch (k) {
    case Kind::kAllReduce: return "all-reduce";
    case Kind::kBroadcast: return "broadcast";
    case Kind::kReduce: return "reduce";
    case Kind::kAllGather: return "all-gather";
    case Kind::kReduceScatter: return "reduce-scatter";
    case Kind::kAllToAll: return "all-to-all";
    case Kind::kGather: return "gather";
    case Kind::kScatter: return "scatter";
    case Kind::kSend: return "send";
    case Kind::kRecv: return "recv";
  }
  return "unknown";
}

// Local checks of one operation; the reason in `why` when it fails.
bool LocallyValid(const Operation& o, int rank, int size, std::string* why) {
  const int k = static_cast<int>(o.kind);
  if (k < static_cast<int>(Kind::kAllReduce) || k > static_cast<int>(Kind::kRecv)) {
    *why = absl::StrCat("unknown operation kind ", k);
    return false;
  }
  if (DataTypeSize(o.dtype) == 0) {
    *why = absl::StrCat("unsupported data type ", static_cast<int>(o.dtype));
    return false;
  }
  if (IsReduction(o.kind) &&
      (static_cast<int>(o.op) < 0 || static_cast<int>(o.op) > static_cast<int>(RedOp::kAvg))) {
    *why = absl::StrCat("unsupported reduction op ", static_cast<int>(o.op));
    return false;
  }
  if ((IsRooted(o.kind) || IsP2p(o.kind)) && (o.root < 0 || o.root >= size)) {
    *why = absl::StrCat(IsP2p(o.kind) ? "peer " : "root ", o.root, " out of range [0, ", size,
                        ")");
    return false;
  }
  if (o.count == 0) return true;
  const bool root = o.root == rank;
  bool need_send = true, need_recv = true;
  switch (o.kind) {
    case Kind::kBroadcast: need_send = root; break;
    case Kind::kReduce: need_recv = root; break;
    case Kind::kGather: need_recv = root; break;
    case Kind::kScatter: need_send = root; break;
    case Kind::kSend: need_recv = false; break;
    case Kind::kRecv: need_send = false; break;
    default: break;
  }
  if ((need_send && o.send == nullptr) || (need_recv && o.recv == nullptr)) {
    *why = "null buffer";
    return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::unique_ptr<GlooEngine>> GlooEngine::Create(const GlooEngineOptions& options) {
  if (options.size <= 0 || options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", options.rank, " out of range for size ", options.size));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the collective timeout must be positive");
  }
  VirtualRanks ranks = VirtualRanks::Identity(options.size);
  if (!options.app_to_engine.empty()) {
    if (static_cast<int>(options.app_to_engine.size()) != options.size) {
      return absl::InvalidArgumentError("app_to_engine must have size() entries");
    }
    absl::StatusOr<VirtualRanks> v = VirtualRanks::FromPermutation(options.app_to_engine);
    if (!v.ok()) return v.status();
    ranks = *std::move(v);
  }
  std::unique_ptr<GlooEngine> e(
      new GlooEngine(options.rank, options.size, std::move(ranks), options.timeout));
  if (options.size == 1) return e;  // no peers: no transport

  if (options.rendezvous_dir.empty()) {
    return absl::InvalidArgumentError("a rendezvous directory is required");
  }
  const bool in_etcd = !options.store_endpoint.empty();
  std::unique_ptr<recovery::EtcdClient> etcd;
  std::string etcd_prefix;
  if (in_etcd) {
    recovery::EtcdClientOptions co;
    co.unreachable_timeout = std::min(options.timeout, absl::Seconds(20));
    co.request_timeout = std::min(co.unreachable_timeout, absl::Seconds(5));
    absl::StatusOr<std::unique_ptr<recovery::EtcdClient>> c =
        recovery::EtcdClient::Create(options.store_endpoint, co);
    if (!c.ok()) return c.status();
    etcd = *std::move(c);
    const size_t slash = options.rendezvous_dir.find_last_of('/');
    etcd_prefix = absl::StrCat(options.store_prefix,
                               slash == std::string::npos ? options.rendezvous_dir
                                                          : options.rendezvous_dir.substr(slash + 1),
                               "/");
  } else if (mkdir(options.rendezvous_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return absl::UnavailableError(absl::StrCat("cannot create ", options.rendezvous_dir, ": ",
                                               strerror(errno)));
  }
  const std::string where = in_etcd ? absl::StrCat(etcd_prefix, " in etcd at ", etcd->endpoint())
                                    : options.rendezvous_dir;
  const absl::Time start = absl::Now();
  const auto timeout_ms =
      std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(options.timeout)));
  try {
    std::unique_ptr<gloo::rendezvous::Store> base;
    if (in_etcd) {
      base = std::make_unique<EtcdGlooStore>(etcd.get(), etcd_prefix, options.timeout);
    } else {
      base = std::make_unique<gloo::rendezvous::FileStore>(options.rendezvous_dir);
    }
    gloo::rendezvous::PrefixStore store(options.prefix, *base);
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    e->device_ = gloo::transport::tcp::CreateDevice(attr);
    e->context_ = std::make_shared<gloo::rendezvous::Context>(e->engine_rank_, options.size);
    e->context_->setTimeout(timeout_ms);
    e->context_->connectFullMesh(store, e->device_);
  } catch (const std::exception& ex) {
    const bool late = absl::Now() - start >= options.timeout;
    const std::string what = ex.what();
    const std::string msg =
        absl::StrCat("rendezvous of rank ", options.rank, "/", options.size, " in ", where,
                     " failed: ", what);
    if (late || absl::StrContains(what, "imeout") || absl::StrContains(what, "imed out")) {
      return absl::DeadlineExceededError(msg);
    }
    return absl::UnavailableError(msg);
  }
  // Barrier: after it nobody needs the store any more.
  {
    std::lock_guard<std::mutex> lock(e->mu_);
    char out = 1;
    std::vector<char> in(options.size, 0);
    std::vector<Transfer> xs;
    for (int peer = 0; peer < options.size; ++peer) {
      if (peer == e->engine_rank_) continue;
      xs.push_back({true, peer, &out, 1, Slot(0, kBarrier)});
      xs.push_back({false, peer, &in[peer], 1, Slot(0, kBarrier)});
    }
    absl::Status s = e->Exchange(xs, start + options.timeout);
    if (!s.ok()) return s;
  }
  if (in_etcd && options.rank == 0) {
    // Everybody passed the barrier: the rendezvous keys are read no more.
    absl::StatusOr<int64_t> removed = etcd->DeletePrefix(etcd_prefix);
    if (!removed.ok()) REVENANT_LOG(WARNING, kLog) << "rendezvous keys stay: " << removed.status();
  }
  REVENANT_LOG(DEBUG, kLog) << "rank " << options.rank << "/" << options.size << " connected in "
                            << absl::FormatDuration(absl::Now() - start);
  return e;
}

GlooEngine::GlooEngine(int rank, int size, VirtualRanks ranks, absl::Duration timeout)
    : rank_(rank),
      size_(size),
      ranks_(std::move(ranks)),
      engine_rank_(ranks_.ToEngine(rank)),
      timeout_(timeout),
      send_seq_(size, 0),
      recv_seq_(size, 0) {}

GlooEngine::~GlooEngine() {
  // The context closes its pairs; peers still waiting on us see an I/O error.
  context_.reset();
  device_.reset();
}

void GlooEngine::Abort() {
  aborted_.store(true);
  std::lock_guard<std::mutex> lock(inflight_mu_);
  for (gloo::transport::UnboundBuffer* b : inflight_) {
    b->abortWaitRecv();
    b->abortWaitSend();
  }
}

absl::Status GlooEngine::Exchange(const std::vector<Transfer>& xs, absl::Time deadline) {
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  std::vector<std::pair<const Transfer*, std::unique_ptr<gloo::transport::UnboundBuffer>>> bufs;
  absl::Status status;
  try {
    for (const Transfer& x : xs) {
      if (x.bytes == 0) continue;  // Gloo refuses empty messages
      std::unique_ptr<gloo::transport::UnboundBuffer> b =
          context_->createUnboundBuffer(x.ptr, x.bytes);
      if (x.is_send) {
        b->send(x.peer, x.slot);
      } else {
        b->recv(x.peer, x.slot);
      }
      bufs.emplace_back(&x, std::move(b));
    }
    {
      std::lock_guard<std::mutex> lock(inflight_mu_);
      for (auto& [x, b] : bufs) inflight_.push_back(b.get());
    }
    for (auto& [x, b] : bufs) {
      if (aborted_.load()) {
        status = absl::AbortedError("the communicator was aborted");
        break;
      }
      const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left_ms <= 0) {
        status = absl::DeadlineExceededError(absl::StrCat(
            "timed out after ", absl::FormatDuration(timeout_), " waiting for rank ",
            ranks_.ToApp(x->peer)));
        break;
      }
      const std::chrono::milliseconds ms(left_ms);
      const bool done = x->is_send ? b->waitSend(nullptr, ms) : b->waitRecv(nullptr, ms);
      if (!done) {
        status = absl::AbortedError("the communicator was aborted");
        break;
      }
    }
  } catch (const gloo::IoException& ex) {
    const std::string what = ex.what();
    if (absl::StrContains(what, "Timed out") || absl::Now() >= deadline) {
      status = absl::DeadlineExceededError(
          absl::StrCat("collective timed out after ", absl::FormatDuration(timeout_), ": ", what));
    } else {
      status = absl::UnavailableError(absl::StrCat("a peer failed: ", what));
    }
  } catch (const std::exception& ex) {
    status = absl::UnavailableError(absl::StrCat("transport error: ", ex.what()));
  }
  {
    std::lock_guard<std::mutex> lock(inflight_mu_);
    inflight_.clear();
  }
  if (!status.ok()) {
    REVENANT_LOG(WARNING, kLog) << "rank " << rank_ << ": " << status;
    broken_ = status;
  }
  return status;
}

absl::Status GlooEngine::Run(absl::Span<const Operation> ops) {
  std::lock_guard<std::mutex> lock(mu_);
  if (aborted_.load()) return absl::AbortedError("the communicator was aborted");
  if (!broken_.ok()) {
    return absl::AbortedError(absl::StrCat("the communicator failed earlier: ", broken_.message()));
  }
  return RunLocked(ops);
}

absl::Status GlooEngine::RunLocked(absl::Span<const Operation> ops) {
  const absl::Time deadline = absl::Now() + timeout_;
  const int n = size_;
  const int me = engine_rank_;

  // Per operation: its descriptor, sequence number, and the peers' answers.
  struct Plan {
    const Operation* op;
    std::string why;     // local problem, if any
    Desc mine;
    std::vector<Desc> theirs;  // by engine rank (collectives) or [0] (p2p)
    uint64_t seq = 0;
    int peer = -1;       // engine rank, p2p
    bool ok = true;
    std::vector<char> tmp;  // staging
    const char* src = nullptr;
  };
  std::vector<Plan> plans(ops.size());
  absl::Status first;
  std::vector<Transfer> xs;

  // Self send/recv pairs: matched in issue order, copied locally.
  std::vector<size_t> self_sends, self_recvs;

  for (size_t i = 0; i < ops.size(); ++i) {
    Plan& p = plans[i];
    const Operation& o = ops[i];
    p.op = &o;
    p.ok = LocallyValid(o, rank_, n, &p.why);
    if (IsP2p(o.kind)) {
      if (!p.ok) {
        if (first.ok()) {
          first = absl::InvalidArgumentError(absl::StrCat(KindName(o.kind), ": ", p.why));
        }
        continue;  // no peer to tell
      }
      p.peer = ranks_.ToEngine(o.root);
      p.mine.kind = kP2pKind;
      p.mine.dtype = static_cast<int32_t>(o.dtype);
      p.mine.count = o.count;
      if (p.peer == me) {
        (o.kind == Kind::kSend ? self_sends : self_recvs).push_back(i);
        continue;
      }
      p.theirs.resize(1);
      if (o.kind == Kind::kSend) {
        p.seq = send_seq_[p.peer]++;
        xs.push_back({true, p.peer, &p.mine, sizeof(Desc), Slot(p.seq, kP2pDesc)});
        xs.push_back({false, p.peer, &p.theirs[0], sizeof(Desc), Slot(p.seq, kP2pAck)});
      } else {
        p.seq = recv_seq_[p.peer]++;
        xs.push_back({false, p.peer, &p.theirs[0], sizeof(Desc), Slot(p.seq, kP2pDesc)});
        xs.push_back({true, p.peer, &p.mine, sizeof(Desc), Slot(p.seq, kP2pAck)});
      }
    } else {
      p.seq = ++collective_seq_;
      p.mine.kind = static_cast<int32_t>(o.kind);
      p.mine.dtype = static_cast<int32_t>(o.dtype);
      p.mine.op = IsReduction(o.kind) ? static_cast<int32_t>(o.op) : 0;
      p.mine.count = o.count;
      p.mine.root = IsRooted(o.kind) ? o.root : 0;
      p.mine.valid = p.ok ? 1 : 0;
      p.theirs.resize(n);
      p.theirs[me] = p.mine;
      for (int peer = 0; peer < n; ++peer) {
        if (peer == me) continue;
        xs.push_back({true, peer, &p.mine, sizeof(Desc), Slot(p.seq, kCollDesc)});
        xs.push_back({false, peer, &p.theirs[peer], sizeof(Desc), Slot(p.seq, kCollDesc)});
      }
    }
  }

  // Phase 1: descriptors.
  if (!xs.empty()) {
    absl::Status s = Exchange(xs, deadline);
    if (!s.ok()) return s;
  }
  for (Plan& p : plans) {
    if (p.op == nullptr || p.theirs.empty()) continue;
    if (!p.ok) {
      p.why = absl::StrCat(KindName(p.op->kind), ": ", p.why);
    } else {
      for (size_t r = 0; r < p.theirs.size(); ++r) {
        if (!(p.theirs[r] == p.mine)) {
          const Desc& d = p.theirs[r];
          const int other = IsP2p(p.op->kind) ? p.op->root : ranks_.ToApp(static_cast<int>(r));
          p.why = d.valid == 0 ? absl::StrCat(KindName(p.op->kind), ": rank ", other,
                                              " passed invalid arguments")
                               : absl::StrCat(KindName(p.op->kind), ": rank ", other,
                                              " disagrees (count ", d.count, " vs ",
                                              p.mine.count, ", type ", d.dtype, " vs ",
                                              p.mine.dtype, ", op ", d.op, " vs ", p.mine.op,
                                              ", root ", d.root, " vs ", p.mine.root, ")");
          p.ok = false;
          break;
        }
      }
    }
    if (!p.ok && first.ok()) first = absl::InvalidArgumentError(p.why);
  }
  // Self pairs.
  if (self_sends.size() != self_recvs.size()) {
    for (size_t i : self_sends) plans[i].ok = false;
    for (size_t i : self_recvs) plans[i].ok = false;
    if (first.ok()) first = absl::InvalidArgumentError("unmatched send/recv to self");
    self_sends.clear();
    self_recvs.clear();
  }

  // Phase 2: data.
  xs.clear();
  for (Plan& p : plans) {
    if (p.op == nullptr || !p.ok || p.theirs.empty()) continue;
    const Operation& o = *p.op;
    const size_t bytes = o.count * DataTypeSize(o.dtype);
    const uint64_t slot = IsP2p(o.kind) ? Slot(p.seq, kP2pData) : Slot(p.seq, kCollData);
    const char* send = static_cast<const char*>(o.send);
    char* recv = static_cast<char*>(o.recv);
    const bool root = o.root == rank_;
    const int root_e = IsRooted(o.kind) ? ranks_.ToEngine(o.root) : -1;
    auto snd = [&](int peer, const void* ptr) {
      xs.push_back({true, peer, const_cast<void*>(ptr), bytes, slot});
    };
    auto rcv = [&](int peer, void* ptr) { xs.push_back({false, peer, ptr, bytes, slot}); };
    switch (o.kind) {
      case Kind::kAllReduce:
        p.tmp.resize(bytes * n);
        if (bytes) std::memcpy(p.tmp.data() + bytes * rank_, send, bytes);
        for (int e = 0; e < n; ++e) {
          if (e == me) continue;
          snd(e, send);
          rcv(e, p.tmp.data() + bytes * ranks_.ToApp(e));
        }
        break;
      case Kind::kReduce:
        if (root) {
          p.tmp.resize(bytes * n);
          if (bytes) std::memcpy(p.tmp.data() + bytes * rank_, send, bytes);
          for (int e = 0; e < n; ++e) {
            if (e != me) rcv(e, p.tmp.data() + bytes * ranks_.ToApp(e));
          }
        } else {
          snd(root_e, send);
        }
        break;
      case Kind::kBroadcast:
        if (root) {
          for (int e = 0; e < n; ++e) {
            if (e != me) snd(e, send);
          }
        } else {
          rcv(root_e, recv);
        }
        break;
      case Kind::kAllGather:
        for (int e = 0; e < n; ++e) {
          if (e == me) continue;
          snd(e, send);
          rcv(e, recv + bytes * ranks_.ToApp(e));
        }
        break;
      case Kind::kReduceScatter:
        p.tmp.resize(bytes * n);
        if (bytes) std::memcpy(p.tmp.data() + bytes * rank_, send + bytes * rank_, bytes);
        for (int e = 0; e < n; ++e) {
          if (e == me) continue;
          snd(e, send + bytes * ranks_.ToApp(e));
          rcv(e, p.tmp.data() + bytes * ranks_.ToApp(e));
        }
        break;
      case Kind::kAllToAll: {
        p.src = send;
        const size_t total = bytes * n;
        if (total && send < recv + total && recv < send + total) {  // overlapping: stage
          p.tmp.assign(send, send + total);
          p.src = p.tmp.data();
        }
        for (int e = 0; e < n; ++e) {
          if (e == me) continue;
          snd(e, p.src + bytes * ranks_.ToApp(e));
          rcv(e, recv + bytes * ranks_.ToApp(e));
        }
        break;
      }
      case Kind::kGather:
        if (root) {
          for (int e = 0; e < n; ++e) {
            if (e != me) rcv(e, recv + bytes * ranks_.ToApp(e));
          }
        } else {
          snd(root_e, send);
        }
        break;
      case Kind::kScatter:
        if (root) {
          for (int e = 0; e < n; ++e) {
            if (e != me) snd(e, send + bytes * ranks_.ToApp(e));
          }
        } else {
          rcv(root_e, recv);
        }
        break;
      case Kind::kSend:
        snd(p.peer, send);
        break;
      case Kind::kRecv:
        rcv(p.peer, recv);
        break;
    }
  }
  if (!xs.empty()) {
    absl::Status s = Exchange(xs, deadline);
    if (!s.ok()) return s;
  }

  // Local completion: own blocks, folds, self copies.
  for (Plan& p : plans) {
    if (p.op == nullptr || !p.ok || p.theirs.empty()) continue;
    const Operation& o = *p.op;
    const size_t bytes = o.count * DataTypeSize(o.dtype);
    if (bytes == 0) continue;
    const char* send = static_cast<const char*>(o.send);
    char* recv = static_cast<char*>(o.recv);
    const bool root = o.root == rank_;
    absl::Status s;
    switch (o.kind) {
      case Kind::kAllReduce:
      case Kind::kReduceScatter:
        s = FoldInOrder(p.tmp.data(), n, o.count, o.dtype, o.op, recv);
        break;
      case Kind::kReduce:
        if (root) s = FoldInOrder(p.tmp.data(), n, o.count, o.dtype, o.op, recv);
        break;
      case Kind::kBroadcast:
        if (root && send != recv) std::memmove(recv, send, bytes);
        break;
      case Kind::kAllGather:
        if (send != recv + bytes * rank_) std::memmove(recv + bytes * rank_, send, bytes);
        break;
      case Kind::kAllToAll:
        if (p.src + bytes * rank_ != recv + bytes * rank_) {
          std::memmove(recv + bytes * rank_, p.src + bytes * rank_, bytes);
        }
        break;
      case Kind::kGather:
        if (root && send != recv + bytes * rank_) std::memmove(recv + bytes * rank_, send, bytes);
        break;
      case Kind::kScatter:
        if (root && send + bytes * rank_ != recv) std::memmove(recv, send + bytes * rank_, bytes);
        break;
      default:
        break;
    }
    if (!s.ok() && first.ok()) first = s;
  }
  for (size_t k = 0; k < self_sends.size(); ++k) {
    const Operation& s = ops[self_sends[k]];
    const Operation& r = ops[self_recvs[k]];
    if (s.count != r.count || s.dtype != r.dtype) {
      if (first.ok()) first = absl::InvalidArgumentError("send/recv to self disagree");
      continue;
    }
    const size_t bytes = s.count * DataTypeSize(s.dtype);
    if (bytes) std::memmove(r.recv, s.send, bytes);
  }
  return first;
}

}  // namespace collective
}  // namespace revenant
