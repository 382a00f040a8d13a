#include "agent/handles.h"

#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

using api::HandleKind;

TEST(HandleTableTest, VirtualIdsAreDeterministicPerKind) {
  HandleTable a, b;
  void* s1 = reinterpret_cast<void*>(0x1000);
  void* s2 = reinterpret_cast<void*>(0x2000);
  void* e1 = reinterpret_cast<void*>(0x3000);
  a.Register(HandleKind::kStream, &s1);
  a.Register(HandleKind::kStream, &s2);
  a.Register(HandleKind::kEvent, &e1);
  // A replacement replaying the same creations against other backend objects.
  void* t1 = reinterpret_cast<void*>(0x9000);
  void* t2 = reinterpret_cast<void*>(0xa000);
  b.Register(HandleKind::kStream, &t1);
  b.Register(HandleKind::kStream, &t2);
  EXPECT_EQ(s1, t1);
  EXPECT_EQ(s2, t2);
  EXPECT_NE(s1, s2);
  EXPECT_NE(reinterpret_cast<uintptr_t>(e1) & ~0xffull,
            reinterpret_cast<uintptr_t>(s1) & ~0xffull);  // kind is encoded
}

TEST(HandleTableTest, TranslatesBackAndRemoves) {
  HandleTable t;
  void* backend = reinterpret_cast<void*>(0x1234);
  void* v = backend;
  t.Register(HandleKind::kGraph, &v);
  void* x = v;
  ASSERT_TRUE(t.ToBackend(HandleKind::kGraph, &x));
  EXPECT_EQ(x, backend);
  x = v;
  EXPECT_FALSE(t.ToBackend(HandleKind::kEvent, &x)) << "wrong kind must not translate";
  EXPECT_TRUE(t.Remove(HandleKind::kGraph, v));
  EXPECT_FALSE(t.Remove(HandleKind::kGraph, v));
  x = v;
  EXPECT_FALSE(t.ToBackend(HandleKind::kGraph, &x)) << "destroyed handle must not translate";
  EXPECT_EQ(t.size(HandleKind::kGraph), 0u);
}

TEST(HandleTableTest, SpecialStreamsPassThrough) {
  HandleTable t;
  for (uintptr_t special : {0, 1, 2}) {
    void* s = reinterpret_cast<void*>(special);
    ASSERT_TRUE(t.ToBackend(HandleKind::kStream, &s));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(s), special);
  }
  void* bogus = reinterpret_cast<void*>(0x7e00000000000099ull);
  EXPECT_FALSE(t.ToBackend(HandleKind::kStream, &bogus));
}

// A graph node created at the address of a node that died with its graph
// gets an id of its own (found by a graph-building replay that handed out
// another node id than the journal's).
TEST(HandleTableTest, ANewObjectAtADeadOnesAddressGetsANewId) {
  HandleTable t;
  const uint64_t old_id = t.RegisterRaw(HandleKind::kGraphNode, 0x5000);
  const uint64_t new_id = t.RegisterNew(HandleKind::kGraphNode, 0x5000);
  EXPECT_NE(old_id, new_id);
  uint64_t v = old_id;
  EXPECT_FALSE(t.ToBackendRaw(HandleKind::kGraphNode, &v));
  v = new_id;
  ASSERT_TRUE(t.ToBackendRaw(HandleKind::kGraphNode, &v));
  EXPECT_EQ(v, 0x5000u);
  // A replay's expected id still applies.
  t.ExpectNext(HandleKind::kGraphNode, old_id);
  EXPECT_EQ(t.RegisterNew(HandleKind::kGraphNode, 0x5000), old_id);
}

TEST(HandleTableTest, RegisteringTheSameObjectTwiceGivesOneId) {
  HandleTable t;
  void* a = reinterpret_cast<void*>(0x55);
  void* b = a;
  t.Register(HandleKind::kMemPool, &a);
  t.Register(HandleKind::kMemPool, &b);
  EXPECT_EQ(a, b);
  EXPECT_EQ(t.size(HandleKind::kMemPool), 1u);
}

TEST(HandleTableTest, ExpectNextRestoresIdsAcrossCompactedHistory) {
  HandleTable t;
  const uint64_t third = HandleTable::kVirtualTag | (uint64_t{1} << 40) | 3;
  t.ExpectNext(HandleKind::kStream, third);
  void* s = reinterpret_cast<void*>(0x1000);
  t.Register(HandleKind::kStream, &s);
  EXPECT_EQ(reinterpret_cast<uint64_t>(s), third);
  void* next = reinterpret_cast<void*>(0x2000);
  t.Register(HandleKind::kStream, &next);
  EXPECT_EQ(reinterpret_cast<uint64_t>(next), third + 1) << "serials continue after the restored id";
}

// A conditional node's body graphs: their ids follow from the node's, so a
// second table (a replacement agent) that registers the same node id gets
// the same body ids, whatever serials it handed out before.
TEST(HandleTableTest, DerivedIdsFollowTheParentNotTheSerials) {
  HandleTable a, b;
  void* g = reinterpret_cast<void*>(0x10);
  b.Register(HandleKind::kGraph, &g);  // b is one graph serial ahead
  const uint64_t node = HandleTable::kVirtualTag |
                        (static_cast<uint64_t>(HandleKind::kGraphNode) << 40) | 7;
  const uint64_t body_a = a.RegisterDerived(HandleKind::kGraph, 0x100, node, 1);
  const uint64_t body_b = b.RegisterDerived(HandleKind::kGraph, 0x200, node, 1);
  EXPECT_EQ(body_a, body_b);
  EXPECT_NE(body_a, a.RegisterDerived(HandleKind::kGraph, 0x101, node, 0));
  uint64_t raw = body_b;
  ASSERT_TRUE(b.ToBackendRaw(HandleKind::kGraph, &raw));
  EXPECT_EQ(raw, 0x200u);
  // Serials are untouched: the next plain registration is serial 1 in `a`.
  void* next = reinterpret_cast<void*>(0x20);
  a.Register(HandleKind::kGraph, &next);
  EXPECT_EQ(reinterpret_cast<uint64_t>(next) & ((uint64_t{1} << 40) - 1), 1u);
  // Registering the id again (a replay) rebinds it to the new object.
  EXPECT_EQ(a.RegisterDerived(HandleKind::kGraph, 0x300, node, 1), body_a);
  raw = body_a;
  ASSERT_TRUE(a.ToBackendRaw(HandleKind::kGraph, &raw));
  EXPECT_EQ(raw, 0x300u);
}

// Creations the shim sent without waiting carry their id: the table takes
// it (and a replacement's table the same id for its own object), refuses
// ids of another form or kind and live ones, and its own serials go on
// untouched.
TEST(HandleTableTest, ShimAssignedIdsAreTakenAsGivenAndNeverShared) {
  HandleTable a, b;
  const uint64_t id = api::ShimAssignedId(HandleKind::kLtMatmulDesc, 5);
  EXPECT_TRUE(api::IsShimAssignedId(HandleKind::kLtMatmulDesc, id));
  EXPECT_FALSE(api::IsShimAssignedId(HandleKind::kLtMatrixLayout, id));
  ASSERT_TRUE(a.CanAssign(HandleKind::kLtMatmulDesc, id));
  void* desc = reinterpret_cast<void*>(0x1000);
  a.RegisterAssigned(HandleKind::kLtMatmulDesc, &desc, id);
  EXPECT_EQ(reinterpret_cast<uint64_t>(desc), id);
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatmulDesc, id)) << "a live id is refused";
  void* other = reinterpret_cast<void*>(0x2000);
  b.RegisterAssigned(HandleKind::kLtMatmulDesc, &other, id);
  uint64_t raw = id;
  ASSERT_TRUE(b.ToBackendRaw(HandleKind::kLtMatmulDesc, &raw));
  EXPECT_EQ(raw, 0x2000u);
  // Not the shim's form: an agent serial, a derived id, another kind, serial 0.
  const uint64_t agent_id =
      HandleTable::kVirtualTag | (static_cast<uint64_t>(HandleKind::kLtMatmulDesc) << 40) | 5;
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatmulDesc, agent_id));
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatmulDesc,
                           HandleTable::DerivedId(HandleKind::kLtMatmulDesc, 3, 1)));
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatrixLayout, id));
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatmulDesc,
                           api::ShimAssignedId(HandleKind::kLtMatmulDesc, 0)));
  EXPECT_FALSE(a.CanAssign(HandleKind::kLtMatmulDesc, 0x1000));
  // The agent's serials are untouched, and an expected id of the shim's
  // form (never journaled that way, but a corrupt outcome might) does not
  // move them into the shim's range.
  a.ExpectNext(HandleKind::kLtMatmulDesc, api::ShimAssignedId(HandleKind::kLtMatmulDesc, 9));
  void* mine = reinterpret_cast<void*>(0x3000);
  a.Register(HandleKind::kLtMatmulDesc, &mine);
  void* next = reinterpret_cast<void*>(0x4000);
  a.Register(HandleKind::kLtMatmulDesc, &next);
  EXPECT_EQ(reinterpret_cast<uint64_t>(mine), api::ShimAssignedId(HandleKind::kLtMatmulDesc, 9));
  EXPECT_EQ(reinterpret_cast<uint64_t>(next) & ((uint64_t{1} << 40) - 1), 2u)
      << "the agent's serials go on below the shim's range";
  // Destroyed, the id is free again (a replay of its creation takes it).
  EXPECT_TRUE(a.Remove(HandleKind::kLtMatmulDesc, reinterpret_cast<void*>(id)));
  EXPECT_TRUE(a.CanAssign(HandleKind::kLtMatmulDesc, id));
}

}  // namespace
}  // namespace agent
}  // namespace revenant
