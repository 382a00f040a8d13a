// All app host kernel libraries load together (as a CI run that passes every
// library to revenant-run at once does): no name collides across apps, and
// each kernel runs.
#include <cstring>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "hostkernel/loader.h"

namespace revenant {
namespace {

const char* const kApps[] = {"vector_add", "streams_events", "pinned_async", "callbacks",
                             "graphs",     "multithread",    "errors",       "mempool"};

TEST(AppHostKernelsTest, AllLibrariesLoadTogether) {
  std::vector<std::string> paths;
  for (const char* app : kApps) {
    paths.push_back(std::string("tests/apps/lib") + app + "_host_kernels.so");
  }
  auto registry = hostkernel::HostKernelRegistry::Load(paths);
  ASSERT_TRUE(registry.ok()) << registry.status();
  EXPECT_EQ((*registry)->Names().size(), 14u);

  // vector_add's kernel, packed as the shim would pack it.
  const hostkernel::HostKernel* k = (*registry)->Find("_Z10vector_addPKfS0_Pfi");
  ASSERT_NE(k, nullptr);
  const int n = 1000;
  std::vector<float> a(n, 1.5f), b(n, 2.0f), c(n, 0.0f);
  const float* pa = a.data();
  const float* pb = b.data();
  float* pc = c.data();
  std::vector<char> args(k->args_size);
  std::memcpy(&args[k->params[0].offset], &pa, sizeof(pa));
  std::memcpy(&args[k->params[1].offset], &pb, sizeof(pb));
  std::memcpy(&args[k->params[2].offset], &pc, sizeof(pc));
  std::memcpy(&args[k->params[3].offset], &n, sizeof(n));
  ASSERT_TRUE(k->Launch({4, 1, 1}, {256, 1, 1}, 0, args.data(), false).ok());
  EXPECT_THAT(c, ::testing::Each(3.5f));

  // mempool's cooperative kernel through a cooperative launch.
  const hostkernel::HostKernel* g = (*registry)->Find("_Z13grid_exchangePiS_");
  ASSERT_NE(g, nullptr);
  const int total = 8 * 128;
  std::vector<int> data(total), out(total);
  int* pd = data.data();
  int* po = out.data();
  std::vector<char> gargs(g->args_size);
  std::memcpy(&gargs[g->params[0].offset], &pd, sizeof(pd));
  std::memcpy(&gargs[g->params[1].offset], &po, sizeof(po));
  ASSERT_TRUE(g->Launch({8, 1, 1}, {128, 1, 1}, 0, gargs.data(), true).ok());
  for (int r = 0; r < total; ++r) ASSERT_EQ(out[r], (r + 1) % total + 1) << r;
}

}  // namespace
}  // namespace revenant
