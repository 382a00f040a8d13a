#include "agent/upload_capture.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <cerrno>
#include <cstring>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "api/hook_protocol.h"
#include "api/hook_structs.h"
#include "api/traits.h"
#include "api/wire.h"
#include "common/content_hash.h"
#include "common/logging.h"
#include "common/populate.h"
#include "common/timeline.h"

namespace revenant {
namespace agent {
namespace {

constexpr absl::string_view kPrefix = "capture-";
constexpr absl::string_view kHoldPrefix = "hold-";
// Each capture starts on its own page; its completion word is the last 8
// bytes of the page before it.
constexpr uint64_t kPage = 4096;
constexpr uint64_t kFileRound = 2ull << 20;

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

std::string ErrnoText() { return std::strerror(errno); }

}  // namespace

bool IsCaptureCandidate(uint16_t api_id, absl::string_view body, uint64_t min_bytes,
                        hooks::CopyHead* head) {
  const auto id = static_cast<api::ApiId>(api_id);
  if (id != api::ApiId::cudaMemcpy && id != api::ApiId::cudaMemcpyAsync) return false;
  wire::Decoder in(body.data(), body.size());
  hooks::CopyHead h;
  if (!h.Decode(in) || h.mode != hooks::kDirect || h.count < min_bytes) return false;
  if (h.kind != cudaMemcpyHostToDevice && h.kind != cudaMemcpyDefault) return false;
  if (head != nullptr) *head = h;
  return true;
}

absl::StatusOr<std::unique_ptr<UploadCapturePool>> UploadCapturePool::Create(
    const std::string& dir, Backend* backend, const Options& options, bool continued,
    uint64_t minibatch, uint64_t first_seq) {
  std::unique_ptr<UploadCapturePool> pool(new UploadCapturePool(dir, backend, options));
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat(dir, ": ", ErrnoText()));
  std::vector<std::tuple<bool, int, std::string>> found;  // (hold file, index, name)
  while (dirent* ent = readdir(d)) {
    const absl::string_view name(ent->d_name);
    int index = 0;
    const bool hold = absl::StartsWith(name, kHoldPrefix);
    const absl::string_view prefix = hold ? kHoldPrefix : kPrefix;
    if (!(hold || absl::StartsWith(name, kPrefix)) ||
        !absl::SimpleAtoi(name.substr(prefix.size()), &index) || index < 0) {
      continue;
    }
    found.emplace_back(hold, index, std::string(name));
  }
  closedir(d);
  std::sort(found.begin(), found.end());
  for (const auto& [hold, index, name] : found) {
    int& next = hold ? pool->next_hold_index_ : pool->next_index_;
    next = std::max(next, index + 1);
    if (!continued) {
      // An earlier application's captures: nothing names them any more.
      unlink(absl::StrCat(dir, "/", name).c_str());
      continue;
    }
    // The dead agent's: its current minibatch may name them. Full, so
    // nothing is placed in them before they are two boundaries old.
    struct stat st;
    if (stat(absl::StrCat(dir, "/", name).c_str(), &st) != 0 || st.st_size <= 0) continue;
    auto f = std::make_unique<File>();
    if (absl::Status s = hold ? pool->MakeHoldFile(name, static_cast<uint64_t>(st.st_size), false,
                                                   f.get())
                              : pool->MapFile(name, static_cast<uint64_t>(st.st_size), false,
                                              f.get());
        !s.ok()) {
      return s;
    }
    f->index = index;
    f->cursor = f->size;
    f->last_minibatch = minibatch;
    f->last_seq = first_seq > 0 ? first_seq - 1 : 0;
    pool->total_bytes_ += f->size;
    pool->files_.push_back(std::move(f));
  }
  return pool;
}

UploadCapturePool::~UploadCapturePool() {
  for (const auto& f : files_) {
    if (f->hold) continue;  // never mapped here
    backend_->UnregisterSharedHost(f->base);
    munmap(f->base, f->size);
  }
}

absl::Status UploadCapturePool::MapFile(const std::string& name, uint64_t size, bool create,
                                        File* f) {
  const std::string path = absl::StrCat(dir_, "/", name);
  timeline::Span span("capture file mapped and registered");
  if (span.active()) span.set_detail(absl::StrFormat("%s, %.1f MiB", name, size / 1048576.0));
  const absl::Time t0 = absl::Now();
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
  if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", ErrnoText()));
  if (create && ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const std::string why = ErrnoText();
    close(fd);
    unlink(path.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot size it: ", why));
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    const std::string why = ErrnoText();
    close(fd);
    if (create) unlink(path.c_str());
    return absl::InternalError(absl::StrCat(path, ": mmap: ", why));
  }
  if (create) {
    // Allocated now, by several threads (common/populate.h): a full tmpfs
    // fails here, not as SIGBUS when the device writes into the mapping.
    absl::Status s = PopulateWritable(base, size);
    if (absl::IsUnimplemented(s)) {
      const int rc = posix_fallocate(fd, 0, static_cast<off_t>(size));
      s = rc == 0 ? absl::OkStatus()
                  : absl::ResourceExhaustedError(std::strerror(rc));
    }
    if (!s.ok()) {
      close(fd);
      munmap(base, size);
      unlink(path.c_str());
      return absl::ResourceExhaustedError(
          absl::StrCat(path, ": cannot allocate ", size, " bytes: ", s.message()));
    }
  }
  close(fd);
  const absl::Time t1 = absl::Now();
  if (const cudaError_t e = backend_->RegisterSharedHost(base, size, 0); e != cudaSuccess) {
    munmap(base, size);
    if (create) unlink(path.c_str());
    return absl::InternalError(absl::StrCat(path, ": the backend cannot register it (error ",
                                            static_cast<int>(e), ")"));
  }
  f->name = name;
  f->base = static_cast<char*>(base);
  f->size = size;
  // New host memory is what a capture costs (pages allocated, then pinned
  // for the device): said for the first files and at each doubling.
  if (++files_made_ <= 3 || (files_made_ & (files_made_ - 1)) == 0) {
    REVENANT_LOG(INFO, "agent") << absl::StrFormat(
        "capture file %s: %.0f MiB %s in %.1f ms (%.1f ms allocating, %.1f ms registering); "
        "%d capture files made",
        name, size / 1048576.0, create ? "made" : "taken over",
        absl::ToDoubleMilliseconds(absl::Now() - t0), absl::ToDoubleMilliseconds(t1 - t0),
        absl::ToDoubleMilliseconds(absl::Now() - t1), files_made_);
  }
  return absl::OkStatus();
}

absl::Status UploadCapturePool::MakeHoldFile(const std::string& name, uint64_t size, bool create,
                                             File* f) {
  if (create) {
    // Sparse: pages are allocated by the copy that needs them (HoldPlaces).
    const std::string path = absl::StrCat(dir_, "/", name);
    const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_CREAT | O_EXCL, 0600);
    if (fd < 0) return absl::InternalError(absl::StrCat(path, ": ", ErrnoText()));
    if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
      const std::string why = ErrnoText();
      close(fd);
      unlink(path.c_str());
      return absl::ResourceExhaustedError(absl::StrCat(path, ": cannot size it: ", why));
    }
    close(fd);
    ++files_made_;
  }
  f->name = name;
  f->hold = true;
  f->size = size;
  return absl::OkStatus();
}

bool UploadCapturePool::Reusable(File& f, uint64_t minibatch) {
  if (f.last_minibatch + 2 > minibatch && f.last_seq >= released_before_) return false;
  if (f.hold) {
    // Its holds end now; one being copied out is waited for (a copy of at
    // most a few hundred MiB), else the file is left alone.
    return holds_ == nullptr ||
           holds_->FreeFile(static_cast<uint32_t>(f.index), absl::Seconds(10));
  }
  // Every capture placed in it must have completed: its device writes would
  // land in the next one's bytes. They completed long ago in practice (two
  // boundaries); one still running is waited for briefly, then the file is
  // left alone.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(100);
  for (;;) {
    auto& open = f.open;
    open.erase(std::remove_if(open.begin(), open.end(),
                              [](const auto& w) {
                                return __atomic_load_n(w.first, __ATOMIC_ACQUIRE) == w.second;
                              }),
               open.end());
    if (open.empty()) return true;
    if (absl::Now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

UploadCapturePool::File* UploadCapturePool::FileFor(uint64_t need, uint64_t minibatch,
                                                    bool hold) {
  // The file being filled, then a reusable one, then a new one.
  for (auto& f : files_) {
    if (f->hold == hold && f->cursor != 0 && f->cursor <= f->size &&
        f->size - RoundUp(f->cursor, kPage) >= need) {
      return f.get();
    }
  }
  for (auto& f : files_) {
    if (f->hold == hold && f->size >= need && Reusable(*f, minibatch)) {
      f->cursor = 0;
      ++reuses_;
      return f.get();
    }
  }
  const uint64_t size = RoundUp(std::max(need, options_.file_bytes), kFileRound);
  if (total_bytes_ + size > options_.max_bytes) {
    if (!warned_full_) {
      warned_full_ = true;
      REVENANT_LOG(WARNING, "agent") << absl::StrFormat(
          "captured uploads: %.0f MiB held for minibatches still replayable, no room for %.0f MiB "
          "more (REVENANT_CAPTURE_MAX_MIB=%d): large uploads are journaled by the CPU until "
          "older minibatches end",
          total_bytes_ / 1048576.0, size / 1048576.0, options_.max_bytes >> 20);
    }
    return nullptr;
  }
  auto f = std::make_unique<File>();
  int& next = hold ? next_hold_index_ : next_index_;
  if (absl::Status s = hold ? MakeHoldFile(HoldPlaces::FileName(next), size, true, f.get())
                            : MapFile(absl::StrCat(kPrefix, next), size, true, f.get());
      !s.ok()) {
    REVENANT_LOG(WARNING, "agent") << "captured uploads: " << s
                                   << " (the upload is journaled by the CPU)";
    return nullptr;
  }
  f->index = next++;
  total_bytes_ += f->size;
  files_.push_back(std::move(f));
  return files_.back().get();
}

bool UploadCapturePool::Reserve(const transport::RecordHeader& rec, uint64_t minibatch,
                                uint64_t size, journal::DeviceCapture* ref) {
  pending_ = Capture();
  pending_file_ = nullptr;
  hooks::CopyHead head;
  if (size < options_.min_bytes ||
      !IsCaptureCandidate(rec.api_id, absl::string_view(rec.body(), rec.body_size()), 0, &head)) {
    return false;
  }
  File* f = FileFor(kPage + size, minibatch, holding_uploads());
  if (f == nullptr) return false;
  const uint64_t offset = RoundUp(f->cursor, kPage) + kPage;
  if (offset + size > f->size) return false;  // FileFor left room for a page-aligned start
  // A held upload is held from before its entry is appended: an agent that
  // dies before the copy ran leaves a hold the shim copies out.
  int slot = -1;
  if (f->hold &&
      !HoldNow(rec.seq, head.src, size, static_cast<uint32_t>(f->index), offset, &slot)) {
    return false;  // journaled with its bytes
  }
  f->cursor = offset + size;
  f->last_minibatch = minibatch;
  f->last_seq = rec.seq;
  pending_.seq = rec.seq;
  pending_.size = size;
  if (f->hold) {
    pending_.held = true;
    pending_.file_index = static_cast<uint32_t>(f->index);
    pending_.offset = offset;
    pending_.hash_words = slot >= 0 ? holds_->HashWords(slot) : nullptr;
    pending_.slot = slot;
  } else {
    pending_.data = f->base + offset;
    pending_.done = reinterpret_cast<uint64_t*>(f->base + offset - sizeof(uint64_t));
  }
  pending_file_ = f;
  ref->set_file(f->name);
  ref->set_offset(offset);
  ref->set_length(size);
  return true;
}

void UploadCapturePool::Ran(uint64_t seq, bool captured) {
  if (pending_.seq != seq || pending_file_ == nullptr) return;
  if (captured) {
    pending_file_->open.emplace_back(pending_.done, seq);
    ++captures_;
    captured_bytes_ += pending_.size;
  }
  pending_ = Capture();
  pending_file_ = nullptr;
}

bool UploadCapturePool::holding_uploads() {
  if (holds_ == nullptr || holds_off_) return false;
  if (const uint64_t changed = holds_->changed(); changed > 0) {
    // A copy out found a held source changed with no write the shim or the
    // agent saw (common/upload_hold.h): holding relies on seeing them all.
    holds_off_ = true;
    REVENANT_LOG(WARNING, "agent")
        << "held uploads: " << changed
        << " held source(s) changed before their bytes were copied out, by a write neither the "
           "application's process nor the agent saw (a kernel writing pinned memory through a "
           "pointer it did not get as a parameter, a graph node, a child process): a recovery that "
           "needs one is refused, and uploads are captured by the device from now on (run with "
           "--upload_hold=false to capture from the start)";
  }
  return !holds_off_;
}

bool UploadCapturePool::HoldNow(uint64_t seq, uint64_t src, uint64_t size, uint32_t file_index,
                                uint64_t offset, int* slot) {
  *slot = holds_->Add(seq, src, size, file_index, offset);
  if (*slot >= 0) return true;
  // Every slot taken (1024 uploads held): this one's bytes go to its place
  // now, as the shim would copy them.
  char* place = places_ != nullptr ? places_->Place(file_index, offset, size) : nullptr;
  if (place == nullptr) {
    if (!warned_hold_) {
      warned_hold_ = true;
      REVENANT_LOG(WARNING, "agent") << "held uploads: no slot and no room for upload " << seq
                                     << "'s bytes in its place: journaled with its bytes";
    }
    return false;
  }
  std::memcpy(place, reinterpret_cast<const char*>(src), size);
  __atomic_store_n(reinterpret_cast<uint64_t*>(place - sizeof(uint64_t)), seq, __ATOMIC_RELEASE);
  ++holds_copied_at_once_;
  return true;
}

void UploadCapturePool::HeldRan(uint64_t seq, bool hashed) {
  if (pending_.seq != seq || !pending_.held) return;
  ++holds_made_;
  if (hashed) ++holds_hashed_;
  held_bytes_ += pending_.size;
  pending_ = Capture();
  pending_file_ = nullptr;
}

void UploadCapturePool::HeldIntoGraph(uint64_t seq) {
  if (pending_.seq != seq || !pending_.held) return;
  if (pending_.slot >= 0) holds_->MarkNode(pending_.slot, absl::Seconds(10));
  ++holds_into_graphs_;
  pending_ = Capture();
  pending_file_ = nullptr;
}

int UploadCapturePool::CopyOutHolds(uint64_t lo, uint64_t hi) {
  if (holds_ == nullptr || places_ == nullptr) return 0;
  int lost = 0;
  const int n = holds_->CopyOutMine(lo, hi, places_->Fn(), 8, &lost);
  if (lost > 0) {
    REVENANT_LOG(ERROR, "agent") << "held uploads: " << lost
                                 << " could not be copied out (no room in the journal's tmpfs): "
                                    "a replay that needs them is refused";
  }
  return n;
}

absl::Status LoadCapturedUploads(const std::string& journal_dir,
                                 std::vector<journal::JournalEntry>* entries, absl::Duration wait,
                                 uint64_t from_seq, const HoldTable* holds) {
  int read = 0, from_source = 0;
  for (journal::JournalEntry& e : *entries) {
    if (!e.has_capture() || e.seq() / 2 < from_seq) continue;
    const journal::DeviceCapture ref = e.capture();
    if (ref.file().empty() || ref.file().find('/') != std::string::npos || ref.offset() < kPage) {
      return absl::DataLossError(absl::StrCat("journal entry ", e.seq(),
                                              ": a captured upload with a bad reference"));
    }
    const std::string path = absl::StrCat(journal_dir, "/", ref.file());
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      return absl::DataLossError(absl::StrCat("journal entry ", e.seq(), ": captured upload ",
                                              path, ": ", ErrnoText()));
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < ref.offset() ||
        static_cast<uint64_t>(st.st_size) - ref.offset() < ref.length()) {
      close(fd);
      return absl::DataLossError(absl::StrCat("journal entry ", e.seq(), ": captured upload ",
                                              path, " is shorter than the entry says"));
    }
    const uint64_t want = e.seq() / 2;
    const absl::Time deadline = absl::Now() + wait;
    uint64_t word = 0;
    for (;;) {
      if (pread(fd, &word, sizeof(word), static_cast<off_t>(ref.offset() - sizeof(word))) !=
          static_cast<ssize_t>(sizeof(word))) {
        word = 0;
      }
      if (word == want || absl::Now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (holds != nullptr && absl::StartsWith(ref.file(), kHoldPrefix) &&
        holds->StateOf(want, absl::ZeroDuration()) == HoldTable::kNode) {
      // A graph node's copy: the node reads its source whenever the graph
      // runs, and so does the replay's.
      close(fd);
      ++from_source;
      continue;
    }
    if (word != want && holds != nullptr &&
        absl::StartsWith(ref.file(), kHoldPrefix)) {
      // A held upload: its bytes are in the application's protected source
      // until someone copies them out; the shim does when its agent dies.
      const HoldTable::State st = holds->StateOf(want, absl::Seconds(10));
      if (st == HoldTable::kDone &&
          pread(fd, &word, sizeof(word), static_cast<off_t>(ref.offset() - sizeof(word))) !=
              static_cast<ssize_t>(sizeof(word))) {
        word = 0;
      }
      if (word != want) {
        close(fd);
        if (st == HoldTable::kChanged) {
          return absl::DataLossError(absl::StrCat(
              "journal entry ", e.seq(), ": held upload ", path, " (", ref.length(),
              " bytes): its source had changed when it was copied out, by a write neither the "
              "application's process nor the agent saw (a kernel writing pinned memory through "
              "a pointer it did not get as a parameter?); not replayed. Run the job with "
              "--upload_hold=false"));
        }
        return absl::DataLossError(absl::StrCat(
            "journal entry ", e.seq(), ": held upload ", path, " was not copied out (hold state ",
            static_cast<int>(st), "): the application's source may have changed since"));
      }
    }
    if (word != want) {
      // Not completed: the application had not been told the copy was done,
      // so its source still holds the bytes; the replay copies from there.
      close(fd);
      ++from_source;
      continue;
    }
    std::string bytes(ref.length(), '\0');
    uint64_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = pread(fd, bytes.data() + done, bytes.size() - done,
                              static_cast<off_t>(ref.offset() + done));
      if (n <= 0) break;
      done += static_cast<uint64_t>(n);
    }
    close(fd);
    if (done != bytes.size()) {
      return absl::DataLossError(absl::StrCat("journal entry ", e.seq(), ": captured upload ",
                                              path, ": short read"));
    }
    uint64_t device_hash = 0;
    if (holds != nullptr && absl::StartsWith(ref.file(), kHoldPrefix) &&
        holds->HashOf(want, &device_hash) && ContentHash(bytes.data(), bytes.size()) != device_hash) {
      // Copied out before the device's hash arrived, from a source that had
      // changed by then: not the bytes the device received.
      return absl::DataLossError(absl::StrCat(
          "journal entry ", e.seq(), ": held upload ", path, " (", ref.length(),
          " bytes) differs from what the device received (its hash): its source changed before it "
          "was copied out, by a write nobody saw; not replayed. Run the job with "
          "--upload_hold=false"));
    }
    e.set_inline_payload(std::move(bytes));  // replaces the reference (one oneof)
    ++read;
  }
  if (read + from_source > 0) {
    REVENANT_LOG(INFO, "agent") << "captured uploads for the replay: " << read
                                << " read from capture files, " << from_source
                                << " not completed (replayed from the application's source)";
  }
  return absl::OkStatus();
}

}  // namespace agent
}  // namespace revenant
