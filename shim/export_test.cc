// Every row of the API table is exported by the built shim: CUDA runtime and
// nvcc entry points in the libcudart.so.13 version node (so versioned
// references of nvcc 13 programs bind to it), cuBLAS names in the
// libcublas.so.13 node (what programs linked against libcublas.so.13
// reference), cuBLASLt names in the libcublasLt.so.13 node, NCCL names with their pnccl aliases. A row that lost its stub or hook fails here.
#include <dlfcn.h>

#include <string>

#include "api/traits.h"
#include "gtest/gtest.h"

namespace revenant {
namespace {

const char* g_shim_path = nullptr;

TEST(ShimExportTest, EveryRowIsExported) {
  ASSERT_NE(g_shim_path, nullptr);
  void* h = dlopen(g_shim_path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  int checked = 0;
  for (int i = 1; i < api::kApiCount; ++i) {
    const api::ApiTraits& t = api::Traits(static_cast<uint32_t>(i));
    if (t.library == api::Library::kNccl) {
      EXPECT_NE(dlsym(h, t.name), nullptr) << t.name << " is not exported";
      EXPECT_NE(dlsym(h, (std::string("p") + t.name).c_str()), nullptr)
          << "p" << t.name << " is not exported";
    } else if (t.library == api::Library::kCublas || t.library == api::Library::kCublasLt) {
      const char* node =
          t.library == api::Library::kCublas ? "libcublas.so.13" : "libcublasLt.so.13";
      EXPECT_NE(dlvsym(h, t.name, node), nullptr) << t.name << "@" << node << " is not exported";
      EXPECT_EQ(dlvsym(h, t.name, "libcudart.so.13"), nullptr)
          << t.name << " is exported in the runtime's version node";
    } else if (t.library == api::Library::kCudnn) {
      EXPECT_NE(dlvsym(h, t.name, "libcudnn.so.9"), nullptr)
          << t.name << "@libcudnn.so.9 is not exported";
      EXPECT_EQ(dlvsym(h, t.name, "libcudart.so.13"), nullptr)
          << t.name << " is exported in the runtime's version node";
    } else {
      EXPECT_NE(dlvsym(h, t.name, "libcudart.so.13"), nullptr)
          << t.name << "@libcudart.so.13 is not exported";
    }
    ++checked;
  }
  EXPECT_GT(checked, 130);
  // Internal symbols stay local: only the table's names are exported.
  EXPECT_EQ(dlsym(h, "_ZN8revenant4shim7Runtime3GetEv"), nullptr)
      << "the shim leaks internal symbols";
  dlclose(h);
}

}  // namespace
}  // namespace revenant

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc > 1) revenant::g_shim_path = argv[1];
  return RUN_ALL_TESTS();
}
