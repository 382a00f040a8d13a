// For tests tagged "etcd": the etcd they talk to. REVENANT_TEST_ETCD_ENDPOINT
// (HOST:PORT, the one .ci/run starts) or, when unset, a private etcd started
// on loopback for the test binary (scripts/etcd_local.sh, which the test
// lists in its data) and stopped when it ends.
//
//   std::string endpoint = TestEtcdEndpoint();   // "" (and a test failure): none
//
// A test linking this never skips: without etcd it fails with the reason.
#ifndef REVENANT_RECOVERY_ETCD_TEST_ENV_H_
#define REVENANT_RECOVERY_ETCD_TEST_ENV_H_

#include <string>

namespace revenant {
namespace recovery {

std::string TestEtcdEndpoint();

}  // namespace recovery
}  // namespace revenant

#endif  // REVENANT_RECOVERY_ETCD_TEST_ENV_H_
