#include "agent/session.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/logging.h"
#include "shim/wire_prefix.h"
#include "transport/control_socket.h"

namespace revenant {
namespace agent {

Session::Session(Backend* backend, std::unique_ptr<transport::ShmServerChannel> channel,
                 int control_fd, std::string job_dir, SessionOptions options)
    : backend_(backend),
      channel_(std::move(channel)),
      control_fd_(control_fd),
      job_dir_(std::move(job_dir)),
      options_(std::move(options)) {
  ctx_.backend = backend_;
  ctx_.handles = &handles_;
  ctx_.session = this;
}

Session::~Session() {
  ForgetDeviceState();
  if (control_fd_ >= 0) close(control_fd_);
}

void Session::ForgetDeviceState() {
  // Everything the application built dies with its connection; shared host
  // ranges are unmapped after the backend stopped using them.
  backend_->Reset();
  handles_.Clear();
  modules_.clear();
  kernels_.clear();
  std::map<uint64_t, uint64_t> shared;
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    shared.swap(shared_host_);
  }
  for (const auto& [addr, size] : shared) {
    backend_->UnregisterSharedHost(reinterpret_cast<void*>(addr));
    munmap(reinterpret_cast<void*>(addr), size);
  }
}

void Session::Run() {
  transport::ShmServerChannel* ch = channel_.get();
  absl::StatusOr<std::unique_ptr<transport::PeerMonitor>> monitor =
      transport::PeerMonitor::Start(control_fd_, [this, ch] {
        disconnected_.store(true);
        ch->MarkPeerDead();
      });
  if (!monitor.ok()) {
    REVENANT_LOG(ERROR, "agent") << "cannot watch the application: " << monitor.status();
    return;
  }
  const uint32_t pid = ch->client_pid();
  REVENANT_LOG(DEBUG, "agent") << "serving application pid " << pid;
  uint64_t executed = 0;
  while (true) {
    absl::StatusOr<const transport::RecordHeader*> rec =
        ch->Peek(absl::Now() + absl::Milliseconds(200));
    if (!rec.ok()) {
      if (absl::IsDeadlineExceeded(rec.status()) && !disconnected_.load()) continue;
      if (!absl::IsUnavailable(rec.status()) && !absl::IsDeadlineExceeded(rec.status())) {
        REVENANT_LOG(ERROR, "agent") << "request ring of pid " << pid
                                     << " is corrupt: " << rec.status();
      }
      break;
    }
    const transport::RecordHeader* r = *rec;
    Execute(*r);
    const uint64_t seq = r->seq;
    ch->Advance();
    ch->Release(seq);
    ++executed;
  }
  REVENANT_LOG(DEBUG, "agent") << "application pid " << pid << " disconnected after "
                               << executed << " requests";
}

void Session::Execute(const transport::RecordHeader& rec) {
  const api::ApiTraits& traits = api::Traits(static_cast<uint32_t>(rec.api_id));
  const bool nccl = traits.library == api::Library::kNccl;
  const bool has_reply =
      rec.reply_slot >= 0 && static_cast<uint32_t>(rec.reply_slot) < channel_->reply_slots();
  if (rec.reply_slot >= 0 && !has_reply) {
    REVENANT_LOG(WARNING, "agent") << "request " << rec.seq << " names reply slot "
                                   << rec.reply_slot << " which does not exist; ignored";
  }
  if (rec.api_id == hooks::kMarkStepApiId) {
    if (options_.journal != nullptr) {
      if (absl::Status s = options_.journal->MarkStep(); !s.ok()) JournalFailed(s);
    }
    return;
  }
  if (options_.journal != nullptr) {
    // Log before apply.
    if (absl::Status s = options_.journal->BeforeExecute(rec, CapturedPayload(rec)); !s.ok()) {
      JournalFailed(s);
    }
  }
  thread_local std::vector<char> scratch(64 << 10);
  char* reply = has_reply ? channel_->ReplyBuffer(rec.reply_slot) : scratch.data();
  const uint32_t capacity = has_reply ? channel_->reply_data_size() : scratch.size();

  wire::Decoder in(rec.body(), rec.body_size());
  wire::Encoder out(reply + kReplyPrefixSize, capacity - kReplyPrefixSize);
  ctx_.seq = rec.seq;
  int32_t status = kNoDispatcher;
  if (traits.dispatched) {
    status = Dispatch(static_cast<api::ApiId>(rec.api_id), in, out, ctx_);
  }
  if (status == kNoDispatcher) {
    REVENANT_LOG(WARNING, "agent") << "request " << rec.seq << ": api id " << rec.api_id << " ("
                                   << traits.name << ") has no agent side";
    status = nccl ? ncclInvalidArgument : cudaErrorInvalidValue;
  }
  if (out.overflow()) {
    REVENANT_LOG(ERROR, "agent") << traits.name << ": reply does not fit the reply slot";
    status = nccl ? ncclInternalError : cudaErrorInvalidValue;
  }
  if (has_reply) {
    ReplyPrefix prefix;
    prefix.deferred_error = deferred_error_;
    deferred_error_ = 0;
    std::memcpy(reply, &prefix, sizeof(prefix));
    if (options_.journal != nullptr) {
      absl::Status s = options_.journal->AfterExecute(
          rec, status, absl::string_view(reply + kReplyPrefixSize, out.size()));
      if (!s.ok()) JournalFailed(s);
    }
    channel_->PostReply(rec.reply_slot, rec.seq, static_cast<uint32_t>(status),
                        kReplyPrefixSize + static_cast<uint32_t>(out.size()));
  } else if (status != 0) {
    REVENANT_LOG(DEBUG, "agent") << traits.name << " (async, seq " << rec.seq
                                 << ") failed with " << status;
    if (deferred_error_ == 0) deferred_error_ = status;
  }
}

absl::string_view Session::CapturedPayload(const transport::RecordHeader& rec) const {
  const auto id = static_cast<api::ApiId>(rec.api_id);
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return {};
  wire::Decoder in(rec.body(), rec.body_size());
  uint64_t dst = 0, src = 0, count = 0, stream = 0;
  int32_t kind = 0;
  uint8_t mode = 0;
  if (!in.Get(&dst) || !in.Get(&src) || !in.Get(&count) || !in.Get(&kind) || !in.Get(&stream) ||
      !in.Get(&mode) || mode != hooks::kDirect) {
    return {};
  }
  const void* p = reinterpret_cast<const void*>(src);
  if (!IsSharedHost(p, count)) return {};
  return absl::string_view(static_cast<const char*>(p), count);
}

void Session::JournalFailed(const absl::Status& status) {
  // The journal must never lie: an agent that cannot journal stops rather
  // than execute calls a replacement could not replay. The application sees
  // the agent's death like any other.
  REVENANT_LOG(ERROR, "agent") << "journaling failed, stopping: " << status;
  std::_Exit(70);
}

int Session::MapSharedHost(uint64_t addr, uint64_t size, unsigned int flags,
                           const std::string& path) {
  // Only files the application created in its own job directory, so a
  // request cannot make the agent map arbitrary files.
  if (path.rfind(job_dir_ + "/host-", 0) != 0 || path.find("..") != std::string::npos ||
      size == 0) {
    REVENANT_LOG(WARNING, "agent") << "refusing shared host memory at " << path;
    return cudaErrorInvalidValue;
  }
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return cudaErrorInvalidValue;
  void* want = reinterpret_cast<void*>(addr);
  void* got = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
  close(fd);
  if (got != want) {
    if (got != MAP_FAILED) munmap(got, size);
    REVENANT_LOG(ERROR, "agent") << "cannot map shared host memory at " << want << ": "
                                 << std::strerror(errno);
    return cudaErrorMemoryAllocation;
  }
  int e = backend_->RegisterSharedHost(want, size, flags);
  if (e != cudaSuccess) {
    munmap(want, size);
    return e;
  }
  std::lock_guard<std::mutex> lock(shared_mu_);
  shared_host_[addr] = size;
  return cudaSuccess;
}

int Session::UnmapSharedHost(uint64_t addr) {
  uint64_t size = 0;
  {
    std::lock_guard<std::mutex> lock(shared_mu_);
    auto it = shared_host_.find(addr);
    if (it == shared_host_.end()) return cudaErrorInvalidValue;
    size = it->second;
    shared_host_.erase(it);
  }
  // cudaFreeHost synchronizes the device: no work may still touch the range.
  backend_->cudaDeviceSynchronize();
  backend_->UnregisterSharedHost(reinterpret_cast<void*>(addr));
  munmap(reinterpret_cast<void*>(addr), size);
  return cudaSuccess;
}

bool Session::IsSharedHost(const void* p, size_t n) const {
  const uint64_t a = reinterpret_cast<uint64_t>(p);
  std::lock_guard<std::mutex> lock(shared_mu_);
  auto it = shared_host_.upper_bound(a);
  if (it == shared_host_.begin()) return false;
  --it;
  return a - it->first < it->second && n <= it->second - (a - it->first);
}

const KernelInfo* Session::FindKernel(const void* backend_handle) const {
  auto it = kernels_.find(backend_handle);
  return it == kernels_.end() ? nullptr : &it->second;
}

void Session::RunClientCallback(const hooks::CallbackRecord& record) {
  uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(callback_mu_);
    absl::StatusOr<transport::RecordWriter> w = channel_->callbacks().BeginRecord(
        sizeof(record), absl::Now() + options_.callback_timeout);
    if (!w.ok()) {
      REVENANT_LOG(ERROR, "agent") << "cannot post a host callback: " << w.status();
      return;
    }
    std::memcpy(w->body(), &record, sizeof(record));
    w->header().api_id = 1;
    channel_->callbacks().Commit(std::move(*w));
    ticket = ++callbacks_sent_;
  }
  absl::Status s =
      channel_->WaitCallbacksDone(ticket, absl::Now() + options_.callback_timeout);
  if (!s.ok() && !disconnected_.load()) {
    REVENANT_LOG(ERROR, "agent") << "host callback " << ticket << " did not complete: " << s;
  }
}

}  // namespace agent
}  // namespace revenant
