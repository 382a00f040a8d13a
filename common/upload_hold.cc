#include "common/upload_hold.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/content_hash.h"

namespace revenant {
namespace {

constexpr uint64_t kMagic = 0x31646c6f48766552ull;  // "RevHold1"
constexpr uint64_t kStateMask = 0xff;

uint32_t StateOfWord(uint64_t w) { return static_cast<uint32_t>(w & kStateMask); }
uint64_t GenOf(uint64_t w) { return w >> 8; }
uint64_t Word(uint64_t gen, uint32_t state) { return gen << 8 | state; }

// Copies n bytes with up to `threads` threads; with `hash`, also returns
// the ContentHashSum of what it copied (each piece hashed right after its
// copy, while its bytes are still in the cache).
uint64_t CopyBytes(char* dst, const char* src, uint64_t n, int threads, bool hash) {
  constexpr uint64_t kPiece = 4ull << 20;  // a multiple of 8: pieces hash alone
  auto piece = [&](uint64_t o) -> uint64_t {
    const uint64_t len = std::min(kPiece, n - o);
    std::memcpy(dst + o, src + o, len);
    return hash ? ContentHashSum(dst + o, len, o / 8) : 0;
  };
  if (threads <= 1 || n < 2 * kPiece) {
    uint64_t sum = 0;
    for (uint64_t o = 0; o < n; o += kPiece) sum += piece(o);
    return sum;
  }
  const int t_count = static_cast<int>(std::min<uint64_t>(threads, n / kPiece));
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> total{0};
  auto work = [&] {
    uint64_t sum = 0;
    for (uint64_t o = next.fetch_add(kPiece); o < n; o = next.fetch_add(kPiece)) sum += piece(o);
    total.fetch_add(sum, std::memory_order_relaxed);
  };
  std::vector<std::thread> ts;
  for (int t = 1; t < t_count; ++t) ts.emplace_back(work);
  work();
  for (auto& t : ts) t.join();
  return total.load();
}

}  // namespace

struct HoldTable::Header {
  uint64_t magic;
  uint64_t slots;
  std::atomic<uint64_t> added;
  std::atomic<uint64_t> copied_by_app;
  std::atomic<uint64_t> copied_by_agent;
  std::atomic<uint64_t> changed;
  uint64_t reserved[2];
};
static_assert(sizeof(std::atomic<uint64_t>) == 8, "shared words");

namespace {
constexpr size_t kHeaderBytes = 64;
constexpr size_t TableBytes() { return kHeaderBytes + sizeof(HoldTable::Slot) * HoldTable::kSlots; }

absl::StatusOr<void*> MapTable(const std::string& path, bool create) {
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_TRUNC : 0), 0600);
  if (fd < 0) return absl::NotFoundError(absl::StrCat(path, ": ", std::strerror(errno)));
  struct stat st;
  if (create ? ftruncate(fd, static_cast<off_t>(TableBytes())) != 0
             : fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != TableBytes()) {
    close(fd);
    return absl::DataLossError(absl::StrCat(path, ": not a table of held uploads of ",
                                            TableBytes(), " bytes"));
  }
  void* p = mmap(nullptr, TableBytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return absl::InternalError(absl::StrCat(path, ": mmap: ", std::strerror(errno)));
  return p;
}
}  // namespace

absl::StatusOr<std::unique_ptr<HoldTable>> HoldTable::Create(const std::string& path) {
  absl::StatusOr<void*> p = MapTable(path, true);
  if (!p.ok()) return p.status();
  std::memset(*p, 0, TableBytes());
  auto* h = static_cast<Header*>(*p);
  h->slots = kSlots;
  __atomic_store_n(&h->magic, kMagic, __ATOMIC_RELEASE);
  return std::unique_ptr<HoldTable>(new HoldTable(path, *p, TableBytes()));
}

absl::StatusOr<std::unique_ptr<HoldTable>> HoldTable::Open(const std::string& path) {
  absl::StatusOr<void*> p = MapTable(path, false);
  if (!p.ok()) return p.status();
  auto* h = static_cast<Header*>(*p);
  if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != kMagic || h->slots != kSlots) {
    munmap(*p, TableBytes());
    return absl::DataLossError(absl::StrCat(path, ": not a table of held uploads"));
  }
  return std::unique_ptr<HoldTable>(new HoldTable(path, *p, TableBytes()));
}

HoldTable::HoldTable(std::string path, void* base, size_t size)
    : path_(std::move(path)), base_(base), size_(size) {}

HoldTable::~HoldTable() { munmap(base_, size_); }

HoldTable::Header& HoldTable::header() const { return *static_cast<Header*>(base_); }

HoldTable::Slot& HoldTable::slot(int i) const {
  return reinterpret_cast<Slot*>(static_cast<char*>(base_) + kHeaderBytes)[i];
}

int HoldTable::Add(uint64_t seq, uint64_t addr, uint64_t size, uint32_t file_index,
                   uint64_t offset) {
  for (int k = 0; k < kSlots; ++k) {
    const int i = (next_ + k) % kSlots;
    Slot& s = slot(i);
    uint64_t w = s.word.load(std::memory_order_acquire);
    if (StateOfWord(w) != kFree) continue;
    // Only the agent moves a slot out of kFree, and one agent serves a table.
    s.seq = seq;
    s.addr = addr;
    s.size = size;
    s.file_index = file_index;
    s.offset = offset;
    __atomic_store_n(&s.hash_tag, 0, __ATOMIC_RELAXED);
    s.hash = 0;
    s.word.store(Word(GenOf(w) + 1, kHeld), std::memory_order_release);
    header().added.fetch_add(1, std::memory_order_relaxed);
    next_ = (i + 1) % kSlots;
    mine_.push_back(i);
    return i;
  }
  return -1;
}

bool HoldTable::CopyOutSlot(int i, uint64_t lo, uint64_t hi, const PlaceFn& place, bool by_app,
                            int threads, int* lost, bool take_over) {
  Slot& s = slot(i);
  uint64_t w = s.word.load(std::memory_order_acquire);
  const uint32_t state = StateOfWord(w);
  if (state != kHeld && !(take_over && state == kCopying)) return false;
  const uint64_t seq = s.seq, addr = s.addr, size = s.size, offset = s.offset;
  const uint32_t file = s.file_index;
  if (addr >= hi || addr + size <= lo) return false;
  // Claim exactly the hold whose fields were read (one being copied by a
  // dead agent is the taker's already: nobody else may free or claim it).
  if (state == kHeld &&
      !s.word.compare_exchange_strong(w, Word(GenOf(w), kCopying), std::memory_order_acq_rel)) {
    return false;
  }
  char* dst = place ? place(file, offset, size) : nullptr;
  if (dst == nullptr) {
    s.word.store(Word(GenOf(w), kLost), std::memory_order_release);
    if (lost != nullptr) ++*lost;
    return false;
  }
  // The device's hash, if it is there yet (it is once the application could
  // know the copy was done: the backend stores it behind the copy).
  const bool hashed = __atomic_load_n(&s.hash_tag, __ATOMIC_ACQUIRE) == seq;
  const uint64_t want = s.hash;
  const uint64_t sum = CopyBytes(dst, reinterpret_cast<const char*>(addr), size, threads, hashed);
  if (hashed && ContentHashFinish(sum, size) != want) {
    // The source changed since the device read it, with no write the shim or
    // the agent saw: the place must never be replayed.
    s.word.store(Word(GenOf(w), kChanged), std::memory_order_release);
    header().changed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  __atomic_store_n(reinterpret_cast<uint64_t*>(dst - sizeof(uint64_t)), seq, __ATOMIC_RELEASE);
  s.word.store(Word(GenOf(w), kDone), std::memory_order_release);
  (by_app ? header().copied_by_app : header().copied_by_agent)
      .fetch_add(1, std::memory_order_relaxed);
  return true;
}

int HoldTable::CopyOut(uint64_t lo, uint64_t hi, const PlaceFn& place, bool by_app, int threads,
                       int* lost, bool take_over) {
  int copied = 0;
  for (int i = 0; i < kSlots; ++i) {
    copied += CopyOutSlot(i, lo, hi, place, by_app, threads, lost, take_over) ? 1 : 0;
  }
  return copied;
}

void HoldTable::PruneMine() {
  mine_.erase(std::remove_if(mine_.begin(), mine_.end(),
                             [this](int i) {
                               return StateOfWord(slot(i).word.load(std::memory_order_acquire)) !=
                                      kHeld;
                             }),
              mine_.end());
}

int HoldTable::CopyOutMine(uint64_t lo, uint64_t hi, const PlaceFn& place, int threads,
                           int* lost) {
  if (mine_.empty()) return 0;
  PruneMine();
  int copied = 0;
  for (int i : mine_) {
    copied += CopyOutSlot(i, lo, hi, place, /*by_app=*/false, threads, lost, false) ? 1 : 0;
  }
  return copied;
}

int HoldTable::CopyOutNamed(const char* bytes, size_t n, const PlaceFn& place) {
  if (mine_.empty()) return 0;
  int copied = 0;
  PruneMine();  // still-held ones only
  for (size_t o = 0; o + sizeof(uint64_t) <= n; o += sizeof(uint64_t)) {
    uint64_t v;
    std::memcpy(&v, bytes + o, sizeof(v));
    for (int i : mine_) copied += CopyOutSlot(i, v, v + 1, place, false, 8, nullptr, false) ? 1 : 0;
  }
  return copied;
}

bool HoldTable::FreeIf(const std::function<bool(const Slot&)>& match, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  bool all = true;
  for (int i = 0; i < kSlots; ++i) {
    Slot& s = slot(i);
    for (;;) {
      uint64_t w = s.word.load(std::memory_order_acquire);
      if (StateOfWord(w) == kFree || !match(s)) break;
      if (StateOfWord(w) == kCopying) {
        if (absl::Now() >= deadline) {
          all = false;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        continue;
      }
      if (s.word.compare_exchange_strong(w, Word(GenOf(w), kFree), std::memory_order_acq_rel)) {
        break;
      }
    }
  }
  return all;
}

bool HoldTable::FreeFile(uint32_t file_index, absl::Duration wait) {
  return FreeIf([file_index](const Slot& s) { return s.file_index == file_index; }, wait);
}

bool HoldTable::FreeBefore(uint64_t seq, absl::Duration wait) {
  return FreeIf([seq](const Slot& s) { return s.seq < seq; }, wait);
}

void HoldTable::MarkNode(int i, absl::Duration wait) {
  const absl::Time deadline = absl::Now() + wait;
  Slot& s = slot(i);
  for (;;) {
    uint64_t w = s.word.load(std::memory_order_acquire);
    const uint32_t state = StateOfWord(w);
    if (state == kFree || state == kNode) return;
    if (state == kCopying && absl::Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      continue;
    }
    if (s.word.compare_exchange_strong(w, Word(GenOf(w), kNode), std::memory_order_acq_rel)) return;
  }
}

bool HoldTable::HashOf(uint64_t seq, uint64_t* hash) const {
  for (int i = 0; i < kSlots; ++i) {
    const Slot& s = slot(i);
    const uint64_t w = s.word.load(std::memory_order_acquire);
    if (StateOfWord(w) == kFree || s.seq != seq) continue;
    if (__atomic_load_n(&s.hash_tag, __ATOMIC_ACQUIRE) != seq) return false;
    *hash = s.hash;
    return true;
  }
  return false;
}

HoldTable::State HoldTable::StateOf(uint64_t seq, absl::Duration wait) const {
  const absl::Time deadline = absl::Now() + wait;
  for (;;) {
    State found = kFree;
    for (int i = 0; i < kSlots; ++i) {
      const Slot& s = slot(i);
      const uint64_t w = s.word.load(std::memory_order_acquire);
      if (StateOfWord(w) == kFree || s.seq != seq) continue;
      found = static_cast<State>(StateOfWord(w));
      break;
    }
    if ((found != kHeld && found != kCopying) || absl::Now() >= deadline) return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

HoldPlaces::~HoldPlaces() {
  for (auto& [index, m] : files_) {
    if (m.base != nullptr) munmap(m.base, m.size);
    if (m.fd >= 0) close(m.fd);
  }
}

std::string HoldPlaces::FileName(uint32_t index) { return absl::StrCat("hold-", index); }

char* HoldPlaces::Place(uint32_t index, uint64_t offset, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  Mapped& m = files_[index];
  if (m.base == nullptr) {
    const std::string path = absl::StrCat(dir_, "/", FileName(index));
    m.fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    struct stat st;
    if (m.fd < 0 || fstat(m.fd, &st) != 0 || st.st_size <= 0) {
      if (m.fd >= 0) close(m.fd);
      files_.erase(index);
      return nullptr;
    }
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                   m.fd, 0);
    if (p == MAP_FAILED) {
      close(m.fd);
      files_.erase(index);
      return nullptr;
    }
    m.base = static_cast<char*>(p);
    m.size = static_cast<uint64_t>(st.st_size);
  }
  if (offset < sizeof(uint64_t) || offset > m.size || size > m.size - offset) return nullptr;
  // The pages, allocated now: a full tmpfs is an error here, not SIGBUS in
  // the copy.
  if (posix_fallocate(m.fd, static_cast<off_t>(offset - sizeof(uint64_t)),
                      static_cast<off_t>(size + sizeof(uint64_t))) != 0) {
    return nullptr;
  }
  return m.base + offset;
}

uint64_t HoldTable::added() const { return header().added.load(std::memory_order_relaxed); }
uint64_t HoldTable::copied_by_app() const {
  return header().copied_by_app.load(std::memory_order_relaxed);
}
uint64_t HoldTable::copied_by_agent() const {
  return header().copied_by_agent.load(std::memory_order_relaxed);
}
uint64_t HoldTable::changed() const {
  return header().changed.load(std::memory_order_relaxed);
}
int HoldTable::held() const {
  int n = 0;
  for (int i = 0; i < kSlots; ++i) {
    if (StateOfWord(slot(i).word.load(std::memory_order_acquire)) == kHeld) ++n;
  }
  return n;
}

}  // namespace revenant
