// HandleTable: virtual handles for streams, events, graphs, communicators...
//
// The application never sees a backend object. Each handle it receives is a
// virtual id, deterministic per kind (1, 2, 3... in creation order), so a
// replacement agent that replays the same creations hands out the same ids
// and the application's handles stay valid across a recovery. Creations the
// shim sends without waiting (assign_if rows: cuBLASLt descriptors) carry
// the id the shim assigned, which a replay registers again.
//
//   cudaStream_t s = backend_stream;
//   table.Register(api::HandleKind::kStream, &s);     // s is now virtual
//   table.ToBackend(api::HandleKind::kStream, &s);    // and back
//
// Stream values 0 (legacy default), cudaStreamLegacy and cudaStreamPerThread
// are not handles: they translate to themselves. Not thread-safe: the agent
// executes one client's requests on one thread.
#ifndef REVENANT_AGENT_HANDLES_H_
#define REVENANT_AGENT_HANDLES_H_

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "absl/container/flat_hash_map.h"
#include "api/traits.h"

namespace revenant {
namespace agent {

class HandleTable {
 public:
  // Virtual ids look like kVirtualTag | kind << 40 | serial: far from real
  // pointers and from the special stream values, and self-describing in logs.
  static constexpr uint64_t kVirtualTag = api::kVirtualHandleTag;

  // Replaces `*value` (a backend object) with a new virtual id and records
  // the mapping. Registering an object that is already registered returns
  // its existing id (e.g. cudaDeviceGetDefaultMemPool called twice).
  template <typename T>
  void Register(api::HandleKind kind, T* value) {
    Store(value, RegisterRaw(kind, Load(*value)));
  }
  // Replaces `*value` (a backend object just created) with `id`, the virtual
  // id the shim assigned to it (an assign_if row), and records the mapping.
  // CanAssign(kind, id) must hold.
  template <typename T>
  void RegisterAssigned(api::HandleKind kind, T* value, uint64_t id) {
    Store(value, RegisterAssignedRaw(kind, Load(*value), id));
  }
  // Whether `id` may name a new handle of `kind`: a shim-assigned id of the
  // kind (api::IsShimAssignedId) that is not live.
  bool CanAssign(api::HandleKind kind, uint64_t id) const;
  // Replaces a backend object with its virtual id; unknown objects are
  // registered (a handle the backend created implicitly, e.g. a capture graph).
  template <typename T>
  void ToVirtual(api::HandleKind kind, T* value) {
    Store(value, ToVirtualRaw(kind, Load(*value)));
  }
  // Replaces a virtual id with its backend object. False for an id that is
  // not live (never created, destroyed, or of another kind).
  template <typename T>
  bool ToBackend(api::HandleKind kind, T* value) const {
    uint64_t raw = Load(*value);
    if (!ToBackendRaw(kind, &raw)) return false;
    Store(value, raw);
    return true;
  }
  // Forgets a virtual id; false if it was not live.
  template <typename T>
  bool Remove(api::HandleKind kind, T value) {
    return RemoveRaw(kind, Load(value));
  }

  // Makes the next new registration of `kind` use `virtual_value` (a replay
  // restoring the ids the application holds, although compaction dropped
  // handles created and destroyed in between).
  void ExpectNext(api::HandleKind kind, uint64_t virtual_value) {
    kinds_[static_cast<int>(kind)].expected = virtual_value;
  }

  uint64_t RegisterRaw(api::HandleKind kind, uint64_t backend_value);
  // Registers an object the backend has just created: a new id even when an
  // earlier object at the same address is still known. Graph nodes die with
  // their graph, not one by one, so their ids are never forgotten; the
  // backend may then give a new node the address of a dead one, which must
  // not inherit its id (a replay, whose addresses differ, would hand out
  // other ids than the application was told).
  uint64_t RegisterNew(api::HandleKind kind, uint64_t backend_value);
  // Registers `backend_value` under the id DerivedId(kind, parent, index):
  // a handle the backend creates as part of another (a conditional node's
  // body graphs) gets an id that follows from its parent's, so a replay that
  // restores the parent restores it too. Serials are left alone. An id
  // already live is rebound (its previous object is forgotten).
  uint64_t RegisterDerived(api::HandleKind kind, uint64_t backend_value, uint64_t parent,
                           uint32_t index);
  // kVirtualTag | kind << 40 | bit 39 | the parent's serial (31 bits) << 8 |
  // index (0-255): never a serial RegisterRaw hands out (below 2^38; ids with
  // bit 38 set are the shim's, api::ShimAssignedId).
  static uint64_t DerivedId(api::HandleKind kind, uint64_t parent, uint32_t index) {
    return kVirtualTag | (static_cast<uint64_t>(kind) << 40) | (uint64_t{1} << 39) |
           ((parent & 0x7fffffffull) << 8) | (index & 0xffu);
  }
  uint64_t RegisterAssignedRaw(api::HandleKind kind, uint64_t backend_value, uint64_t id);
  uint64_t ToVirtualRaw(api::HandleKind kind, uint64_t backend_value);
  bool ToBackendRaw(api::HandleKind kind, uint64_t* value) const;
  bool RemoveRaw(api::HandleKind kind, uint64_t virtual_value);

  // Live handles of `kind`.
  size_t size(api::HandleKind kind) const;
  // Forgets everything and restarts the serials (cudaDeviceReset).
  void Clear();

 private:
  template <typename T>
  static uint64_t Load(const T& v) {
    static_assert(sizeof(T) <= sizeof(uint64_t) && std::is_trivially_copyable<T>::value,
                  "handles are pointer-sized values");
    uint64_t raw = 0;
    std::memcpy(&raw, &v, sizeof(T));
    return raw;
  }
  template <typename T>
  static void Store(T* v, uint64_t raw) {
    std::memcpy(v, &raw, sizeof(T));
  }
  static bool IsPassThrough(api::HandleKind kind, uint64_t value);

  struct PerKind {
    uint64_t next_serial = 1;
    uint64_t expected = 0;
    absl::flat_hash_map<uint64_t, uint64_t> to_backend;
    absl::flat_hash_map<uint64_t, uint64_t> to_virtual;
  };
  // Forgets the id `backend_value` is known by, if any.
  static void ForgetBackend(PerKind& k, uint64_t backend_value);
  // Maps `id` <-> `backend_value` (a stale id of the object forgotten).
  static uint64_t Bind(PerKind& k, uint64_t id, uint64_t backend_value);
  PerKind kinds_[api::kHandleKindCount];
};

}  // namespace agent
}  // namespace revenant

#endif  // REVENANT_AGENT_HANDLES_H_
