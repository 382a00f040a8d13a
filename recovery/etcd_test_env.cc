#include "recovery/etcd_test_env.h"

#include <stdio.h>
#include <stdlib.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace revenant {
namespace recovery {
namespace {

std::string g_endpoint;
std::string g_why;

class EtcdEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* e = getenv("REVENANT_TEST_ETCD_ENDPOINT");
    if (e != nullptr && *e != '\0') {
      g_endpoint = e;
      return;
    }
    const char* srcdir = getenv("TEST_SRCDIR");
    const char* tmp = getenv("TEST_TMPDIR");
    if (srcdir == nullptr || tmp == nullptr) {
      g_why = "not run by bazel test (no TEST_SRCDIR/TEST_TMPDIR)";
      return;
    }
    script_ = absl::StrCat(srcdir, "/revenant/scripts/etcd_local.sh");
    dir_ = absl::StrCat(tmp, "/etcd");
    FILE* p = popen(absl::StrCat("bash ", script_, " start ", dir_).c_str(), "r");
    if (p == nullptr) {
      g_why = "cannot run scripts/etcd_local.sh";
      return;
    }
    char buf[256] = {0};
    if (fgets(buf, sizeof(buf), p) != nullptr) {
      g_endpoint = std::string(absl::StripAsciiWhitespace(buf));
    }
    if (pclose(p) != 0) {
      g_endpoint.clear();
      g_why = "scripts/etcd_local.sh could not start etcd (its reason is above)";
    }
  }
  void TearDown() override {
    if (!dir_.empty()) {
      int ignored = system(absl::StrCat("bash ", script_, " stop ", dir_).c_str());
      (void)ignored;
    }
  }

 private:
  std::string script_, dir_;
};

const ::testing::Environment* const kEtcd =
    ::testing::AddGlobalTestEnvironment(new EtcdEnvironment);

}  // namespace

std::string TestEtcdEndpoint() {
  if (g_endpoint.empty()) {
    ADD_FAILURE() << "no etcd: REVENANT_TEST_ETCD_ENDPOINT is not set and no private etcd "
                     "could be started ("
                  << g_why << "; apt-get install etcd-server, see scripts/setup.sh)";
  }
  return g_endpoint;
}

}  // namespace recovery
}  // namespace revenant
