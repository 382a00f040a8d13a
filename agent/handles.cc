#include "agent/handles.h"

namespace revenant {
namespace agent {

bool HandleTable::IsPassThrough(api::HandleKind kind, uint64_t value) {
  // 0 = legacy default stream, 1 = cudaStreamLegacy, 2 = cudaStreamPerThread.
  return kind == api::HandleKind::kStream && value <= 2;
}

uint64_t HandleTable::RegisterRaw(api::HandleKind kind, uint64_t backend_value) {
  PerKind& k = kinds_[static_cast<int>(kind)];
  auto it = k.to_virtual.find(backend_value);
  if (it != k.to_virtual.end()) {
    // A replay's expected id belongs to this registration even when the
    // object is already known: do not leave it for the next new handle.
    k.expected = 0;
    return it->second;
  }
  uint64_t v = kVirtualTag | (static_cast<uint64_t>(kind) << 40) | k.next_serial++;
  if (k.expected != 0) {
    v = k.expected;
    k.expected = 0;
    // Only the agent's own serials advance the counter (a derived or
    // shim-assigned id has bit 39 or 38 set).
    const uint64_t serial = v & ((uint64_t{1} << 40) - 1);
    if (serial < api::kShimAssignedBit && serial >= k.next_serial) k.next_serial = serial + 1;
  }
  k.to_backend[v] = backend_value;
  k.to_virtual[backend_value] = v;
  return v;
}

void HandleTable::ForgetBackend(PerKind& k, uint64_t backend_value) {
  auto stale = k.to_virtual.find(backend_value);
  if (stale != k.to_virtual.end()) {
    k.to_backend.erase(stale->second);
    k.to_virtual.erase(stale);
  }
}

uint64_t HandleTable::Bind(PerKind& k, uint64_t id, uint64_t backend_value) {
  ForgetBackend(k, backend_value);
  k.to_backend[id] = backend_value;
  k.to_virtual[backend_value] = id;
  return id;
}

uint64_t HandleTable::RegisterNew(api::HandleKind kind, uint64_t backend_value) {
  if (IsPassThrough(kind, backend_value)) return backend_value;
  ForgetBackend(kinds_[static_cast<int>(kind)], backend_value);
  return RegisterRaw(kind, backend_value);
}

uint64_t HandleTable::RegisterDerived(api::HandleKind kind, uint64_t backend_value,
                                      uint64_t parent, uint32_t index) {
  PerKind& k = kinds_[static_cast<int>(kind)];
  const uint64_t v = DerivedId(kind, parent, index);
  auto old = k.to_backend.find(v);
  if (old != k.to_backend.end()) {
    k.to_virtual.erase(old->second);
    k.to_backend.erase(old);
  }
  return Bind(k, v, backend_value);
}

bool HandleTable::CanAssign(api::HandleKind kind, uint64_t id) const {
  return api::IsShimAssignedId(kind, id) &&
         kinds_[static_cast<int>(kind)].to_backend.count(id) == 0;
}

uint64_t HandleTable::RegisterAssignedRaw(api::HandleKind kind, uint64_t backend_value,
                                          uint64_t id) {
  // A new object: an earlier id at the same address is stale (its object
  // was destroyed without this table hearing of it).
  return Bind(kinds_[static_cast<int>(kind)], id, backend_value);
}

uint64_t HandleTable::ToVirtualRaw(api::HandleKind kind, uint64_t backend_value) {
  if (IsPassThrough(kind, backend_value)) return backend_value;
  return RegisterRaw(kind, backend_value);
}

bool HandleTable::ToBackendRaw(api::HandleKind kind, uint64_t* value) const {
  if (IsPassThrough(kind, *value)) return true;
  const PerKind& k = kinds_[static_cast<int>(kind)];
  auto it = k.to_backend.find(*value);
  if (it == k.to_backend.end()) return false;
  *value = it->second;
  return true;
}

bool HandleTable::RemoveRaw(api::HandleKind kind, uint64_t virtual_value) {
  PerKind& k = kinds_[static_cast<int>(kind)];
  auto it = k.to_backend.find(virtual_value);
  if (it == k.to_backend.end()) return false;
  k.to_virtual.erase(it->second);
  k.to_backend.erase(it);
  return true;
}

size_t HandleTable::size(api::HandleKind kind) const {
  return kinds_[static_cast<int>(kind)].to_backend.size();
}

void HandleTable::Clear() {
  for (PerKind& k : kinds_) k = PerKind();
}

}  // namespace agent
}  // namespace revenant
