// Held uploads: a pinned upload's source kept write-protected in the
// application instead of its bytes being captured while the copy runs
// (revenant-run --upload_hold; docs/recovery.md, "Held uploads").
//
// A captured upload (agent/upload_capture.h) copies the destination back
// over the link behind the upload, which costs a 256 MiB upload ~15 % of
// its bandwidth on an H100 (the link's two directions). A held upload runs
// alone: the shim write-protects the source range in the application with
// userfaultfd (kernel-mode writes, such as read(2) into the buffer, wait
// for the handler too), and the bytes are copied into the upload's place in
// a capture file only when something is about to change them:
//   - the application writes the range: the shim's fault handler copies
//     every held upload of that allocation out, then lifts the protection;
//   - the device is about to write it (a copy into that host memory): the
//     agent copies the held uploads out first;
//   - the agent dies: the shim copies every held upload out before it
//     connects to the replacement, which therefore finds every place
//     complete (its completion word holds the request's seq) or the
//     source untouched since the upload.
// A hold ends when no replay can need its bytes (the place may be reused):
// the agent frees its slot.
//
// The table is a file of the journal directory (`holds`), mapped by the
// agent and the shim: a header and kSlots slots. A slot's state word holds a
// generation (bumped by every Add) and a state; whoever copies a slot out
// claims it by compare-and-swap of the exact word it read, so a slot freed
// and reused meanwhile is never copied from stale fields.
//
//   auto t = HoldTable::Create(dir + "/holds");          // agent, fresh journal
//   int slot = t->Add(seq, src, size, file_index, offset);
//   ... shim: t->CopyOut(lo, hi, place_fn, "app")
//   t->FreeFile(file_index, absl::Seconds(10));            // before the place is reused
#ifndef REVENANT_COMMON_UPLOAD_HOLD_H_
#define REVENANT_COMMON_UPLOAD_HOLD_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace revenant {

// Uploads of at least this many bytes are held (smaller ones keep their
// bytes in the journal): the shim and the agent decide alike.
inline constexpr uint64_t kHoldMinBytes = 1 << 20;

class HoldTable {
 public:
  static constexpr int kSlots = 1024;
  enum State : uint32_t {
    kFree = 0,
    kHeld = 1,     // the source is protected and holds the bytes
    kCopying = 2,  // being copied into its place
    kDone = 3,     // the place holds the bytes (completion word = seq)
    kLost = 4,     // the copy could not be made: a replay of it is refused
    kChanged = 5,  // the source no longer held the bytes the device received
                   // (a device write the agent did not see): refused too
    kNode = 6,     // the copy became a graph node (a stream being captured):
                   // the node reads its source whenever the graph runs, so a
                   // replay copies from the source; never copied out
  };
  struct Slot {
    std::atomic<uint64_t> word;  // generation << 8 | State
    uint64_t seq;                // the upload's request
    uint64_t addr;               // its source (the same address in both processes)
    uint64_t size;
    uint64_t offset;             // its place in capture-<file_index>
    uint32_t file_index;
    uint32_t pad;
    // The device's ContentHash of what the upload wrote (common/content_hash.h),
    // valid once hash_tag == seq (the backend stores the tag after the hash,
    // behind the copy; 0 until then, or for good where the backend hashes
    // nothing). A copy out compares the bytes it copied with it.
    uint64_t hash;
    uint64_t hash_tag;
  };
  static_assert(sizeof(Slot) == 64, "slot layout");

  // Where a slot's bytes go: the place's first byte (its completion word is
  // the 8 bytes before it), or null when it cannot be reached.
  using PlaceFn = std::function<char*(uint32_t file_index, uint64_t offset, uint64_t size)>;

  // A fresh table (an existing file is emptied) / the table of a journal a
  // replacement continues or the application's shim maps.
  static absl::StatusOr<std::unique_ptr<HoldTable>> Create(const std::string& path);
  static absl::StatusOr<std::unique_ptr<HoldTable>> Open(const std::string& path);
  ~HoldTable();
  HoldTable(const HoldTable&) = delete;
  HoldTable& operator=(const HoldTable&) = delete;

  const std::string& path() const { return path_; }

  // Agent: holds request `seq`'s upload of [addr, addr + size), whose place
  // is `offset` in capture-<file_index>. -1 when every slot is taken.
  int Add(uint64_t seq, uint64_t addr, uint64_t size, uint32_t file_index, uint64_t offset);

  // Agent: slot i's two hash words {hash, hash_tag}, for the backend to fill
  // behind the copy (in the mapping the table's file has here; the table's
  // memory is [base(), base() + bytes())).
  uint64_t* HashWords(int i) const { return &slot(i).hash; }
  void* base() const { return base_; }
  size_t bytes() const { return size_; }
  // The device's hash of request `seq`'s upload, if the table holds it.
  bool HashOf(uint64_t seq, uint64_t* hash) const;
  // Agent: slot i's copy became a graph node (kNode), whatever a copy out
  // did meanwhile (one in progress is waited for, up to `wait`).
  void MarkNode(int i, absl::Duration wait);

  // Copies every held slot whose source overlaps [lo, hi) into its place
  // (then its completion word, then kDone); `threads` copy one slot's bytes.
  // Returns the slots copied; `*lost` (if given) counts those whose place
  // could not be reached (kLost). Where the device's hash is there, the
  // copied bytes are hashed too, and bytes no longer the upload's leave the
  // place incomplete (kChanged, counted in changed(), not in *lost).
  // `by_app` says which side copied (counted in the header).
  // `take_over`: slots in kCopying are copied too — for the shim when its
  // agent died, whose copy out stopped with it (the device write it came
  // before never ran, so the source still holds the bytes); the caller
  // must be the only other copier then (the shim holds its copy lock).
  int CopyOut(uint64_t lo, uint64_t hi, const PlaceFn& place, bool by_app, int threads = 8,
              int* lost = nullptr, bool take_over = false);

  // Agent: CopyOut over the holds it made only (every hold in the table is
  // one: a dead predecessor's were copied out by the shim before this agent
  // connected), without a look at every slot: the hook before each device
  // write into shared host memory.
  int CopyOutMine(uint64_t lo, uint64_t hi, const PlaceFn& place, int threads = 8,
                  int* lost = nullptr);

  // Agent: copies out the holds it made whose source contains one of the
  // 8-byte-aligned words of `bytes` (a kernel's parameters: a pointer into a
  // held source lets the kernel write it through mapped memory). Cheap when
  // it holds nothing: only its own live holds are looked at.
  int CopyOutNamed(const char* bytes, size_t n, const PlaceFn& place);

  // Agent: ends the holds whose place is in capture-<file_index> / whose
  // request precedes `seq`. A slot being copied is waited for, up to
  // `wait`; false if one still was then (the place must not be reused).
  bool FreeFile(uint32_t file_index, absl::Duration wait);
  bool FreeBefore(uint64_t seq, absl::Duration wait);

  // Replacement: the state of request `seq`'s hold, waiting up to `wait`
  // while it is kHeld or kCopying (the shim copies held uploads out when
  // its agent dies); kFree when the table has none for `seq`.
  State StateOf(uint64_t seq, absl::Duration wait) const;

  // Counts: holds made, slots copied out by the application's shim / by the
  // agent, held now.
  uint64_t added() const;
  uint64_t copied_by_app() const;
  uint64_t copied_by_agent() const;
  // Holds whose source was found changed at their copy out (kChanged).
  uint64_t changed() const;
  int held() const;

 private:
  struct Header;
  HoldTable(std::string path, void* base, size_t size);
  Slot& slot(int i) const;
  Header& header() const;
  bool FreeIf(const std::function<bool(const Slot&)>& match, absl::Duration wait);
  // CopyOut's work on slot i; true when it copied the slot out.
  bool CopyOutSlot(int i, uint64_t lo, uint64_t hi, const PlaceFn& place, bool by_app,
                   int threads, int* lost, bool take_over);
  void PruneMine();  // drops the slots no longer held from mine_

  const std::string path_;
  void* const base_;
  const size_t size_;
  int next_ = 0;            // the agent's search start for Add
  std::vector<int> mine_;   // slots this agent's Add filled (pruned as they end)
};

// The places of held uploads: files hold-<index> of the journal directory,
// sized by the agent and left sparse (their pages are allocated by the copy
// that needs them; a full tmpfs then loses that copy, kLost, instead of
// raising SIGBUS). Mapped on first use; thread-safe.
class HoldPlaces {
 public:
  explicit HoldPlaces(std::string dir) : dir_(std::move(dir)) {}
  ~HoldPlaces();
  HoldPlaces(const HoldPlaces&) = delete;
  HoldPlaces& operator=(const HoldPlaces&) = delete;
  static std::string FileName(uint32_t index);
  // The place's first byte with its completion word's page allocated; null
  // if the file is missing or short, or tmpfs has no room.
  char* Place(uint32_t index, uint64_t offset, uint64_t size);
  HoldTable::PlaceFn Fn() {
    return [this](uint32_t i, uint64_t o, uint64_t n) { return Place(i, o, n); };
  }

 private:
  struct Mapped {
    int fd = -1;
    char* base = nullptr;
    uint64_t size = 0;
  };
  const std::string dir_;
  std::mutex mu_;
  std::map<uint32_t, Mapped> files_;
};

}  // namespace revenant

#endif  // REVENANT_COMMON_UPLOAD_HOLD_H_
