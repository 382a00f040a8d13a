#include "hostkernel/loader.h"

#include <vector_functions.h>
#include <vector_types.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <numeric>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace revenant {
namespace hostkernel {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kLib[] = "hostkernel/libtest_host_kernels.so";
constexpr char kDuplicateLib[] = "hostkernel/libduplicate_host_kernels.so";

// Same definitions as testdata/test_kernels.cuh (compiled into the library).
struct Mixed {
  char c;
  double d;
  int3 v;
};
struct AtomicTotals {
  int count;
  unsigned max_id;
  float fsum;
  double dsum;
  unsigned long long big;
  int exch;
  int cas_winners;
  int cas_word;
};

// Packs `args` at the kernel's parameter offsets, as the shim does from the
// layout the agent reports.
template <typename... Args>
std::vector<char> Pack(const HostKernel& k, const Args&... args) {
  std::vector<char> buffer(k.args_size);
  size_t i = 0;
  auto put = [&](const auto& a) {
    EXPECT_LT(i, k.params.size());
    EXPECT_EQ(k.params[i].size, sizeof(a)) << "param " << i;
    std::memcpy(buffer.data() + k.params[i].offset, &a, sizeof(a));
    ++i;
  };
  (put(args), ...);
  EXPECT_EQ(i, k.params.size());
  return buffer;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = HostKernelRegistry::Load({kLib});
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    registry_ = std::move(*loaded);
  }
  const HostKernel& Get(const char* name) {
    const HostKernel* k = registry_->Find(name);
    EXPECT_NE(k, nullptr) << name;
    static HostKernel missing;
    return k ? *k : missing;
  }
  std::unique_ptr<HostKernelRegistry> registry_;
};

TEST_F(LoaderTest, NamesAreTheMangledNames) {
  EXPECT_THAT(registry_->Names(),
              ElementsAre("_Z11grid_rotatePiS_", "_Z12mixed_paramsc5Mixeds7double2Pd",
                          "_Z13reverse_tilesPi", "_Z14early_exit_sumPKiPii",
                          "_Z5saxpyifPKfPf",
                          "_Z7atomicsP12AtomicTotals", "_Z8index_3dP5uint4",
                          "_Z9block_sumPKfPfi", "_Z9stack_hogPi",
                          "_ZN6rvtest4fillIiEEvPT_S1_i", "_ZN6rvtest5scaleEPffi"));
  EXPECT_EQ(registry_->Find("_Z5saxpyifPKfPg"), nullptr);
}

TEST_F(LoaderTest, Saxpy) {
  const HostKernel& k = Get("_Z5saxpyifPKfPf");
  ASSERT_EQ(k.params.size(), 4u);
  EXPECT_EQ(k.params[0].offset, 0u);
  EXPECT_EQ(k.params[1].offset, 4u);
  EXPECT_EQ(k.params[2].offset, 8u);
  EXPECT_EQ(k.params[3].offset, 16u);
  EXPECT_EQ(k.args_size, 24u);
  const int n = 1000;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i;
    y[i] = 1;
  }
  std::vector<char> args = Pack(k, n, 2.0f, x.data(), y.data());
  ASSERT_TRUE(k.Launch({4, 1, 1}, {256, 1, 1}, 0, args.data(), false).ok());
  for (int i = 0; i < n; ++i) ASSERT_EQ(y[i], 2.0f * i + 1) << i;
}

TEST_F(LoaderTest, BlockReductionWithSharedMemoryAndBarriers) {
  const HostKernel& k = Get("_Z9block_sumPKfPfi");
  const int n = 1000, blocks = 4;
  std::vector<float> in(n), out(blocks, -1);
  std::iota(in.begin(), in.end(), 0.0f);
  std::vector<char> args = Pack(k, static_cast<const float*>(in.data()), out.data(), n);
  ASSERT_TRUE(k.Launch({blocks, 1, 1}, {256, 1, 1}, 0, args.data(), false).ok());
  for (int b = 0; b < blocks; ++b) {
    double expect = 0;
    for (int i = b * 256; i < std::min(n, (b + 1) * 256); ++i) expect += i;
    EXPECT_EQ(out[b], expect) << "block " << b;
  }
}

// __shared__ is per OS thread: launches on different threads (streams of the
// host backend) must not see each other's shared memory.
TEST_F(LoaderTest, ConcurrentLaunchesKeepSharedMemoryApart) {
  const HostKernel& k = Get("_Z9block_sumPKfPfi");
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const int n = 512;
      std::vector<float> in(n, static_cast<float>(t + 1)), out(2);
      std::vector<char> args = Pack(k, static_cast<const float*>(in.data()), out.data(), n);
      for (int round = 0; round < 50; ++round) {
        if (!k.Launch({2, 1, 1}, {256, 1, 1}, 0, args.data(), false).ok() ||
            out[0] != 256.0f * (t + 1) || out[1] != 256.0f * (t + 1)) {
          ++failures;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(LoaderTest, ThreadsThatExitDoNotHoldUpTheBarrier) {
  const HostKernel& k = Get("_Z14early_exit_sumPKiPii");
  std::vector<int> in(256);
  std::iota(in.begin(), in.end(), 1);
  int out = -1;
  std::vector<char> args = Pack(k, static_cast<const int*>(in.data()), &out, 100);
  ASSERT_TRUE(k.Launch({1, 1, 1}, {256, 1, 1}, 0, args.data(), false).ok());
  EXPECT_EQ(out, 5050);
}

// A fiber that overflows its stack hits the guard page (SIGSEGV) instead of
// silently overwriting a neighbouring fiber's stack.
TEST_F(LoaderTest, StackOverflowHitsTheGuardPage) {
  const HostKernel& k = Get("_Z9stack_hogPi");
  int out = 0;
  int* p = &out;
  std::vector<char> args = Pack(k, p);
  EXPECT_EXIT(
      { (void)k.Launch({1, 1, 1}, {1, 1, 1}, 0, args.data(), false); std::exit(0); },
      ::testing::KilledBySignal(SIGSEGV), "");
}

TEST_F(LoaderTest, ThreeDimensionalGridsRunInXYZOrder) {
  const HostKernel& k = Get("_Z8index_3dP5uint4");
  const Dim3 grid{2, 3, 2}, block{4, 2, 3};
  const unsigned per_block = 24, total = 12 * per_block;
  std::vector<uint4> out(total, make_uint4(~0u, ~0u, ~0u, ~0u));
  uint4* p = out.data();
  std::vector<char> args = Pack(k, p);
  ASSERT_TRUE(k.Launch(grid, block, 0, args.data(), false).ok());
  for (unsigned id = 0; id < total; ++id) {
    const unsigned b = id / per_block, t = id % per_block;
    EXPECT_EQ(out[id].x, b) << id;
    EXPECT_EQ(out[id].y, t) << id;
    EXPECT_EQ(out[id].z, (t / 4) % 2) << id;  // threadIdx.y
    EXPECT_EQ(out[id].w, b / 6) << id;        // blockIdx.z
  }
}

TEST_F(LoaderTest, StructByValueWithMixedAlignment) {
  const HostKernel& k = Get("_Z12mixed_paramsc5Mixeds7double2Pd");
  ASSERT_EQ(k.params.size(), 5u);
  std::vector<size_t> offsets, sizes;
  for (const ParamInfo& p : k.params) {
    offsets.push_back(p.offset);
    sizes.push_back(p.size);
  }
  EXPECT_THAT(offsets, ElementsAre(0, 8, 40, 48, 64));
  EXPECT_THAT(sizes, ElementsAre(1, 32, 2, 16, 8));
  EXPECT_EQ(k.args_size, 72u);
  std::vector<double> out(6, -1);
  Mixed m{'m', 2.5, {1, 2, 3}};
  double2 dd{0.25, 0.5};
  std::vector<char> args = Pack(k, 'T', m, short{-7}, dd, out.data());
  ASSERT_TRUE(k.Launch({2, 1, 1}, {32, 1, 1}, 0, args.data(), false).ok());
  EXPECT_THAT(out, ElementsAre('T', 'm', 2.5, 321, -7, 0.75));
}

TEST_F(LoaderTest, DynamicSharedMemoryIsPerLaunchAndPerBlock) {
  const HostKernel& k = Get("_Z13reverse_tilesPi");
  const int threads = 128, blocks = 3;
  std::vector<int> data(threads * blocks);
  std::iota(data.begin(), data.end(), 0);
  std::vector<char> args = Pack(k, data.data());
  ASSERT_TRUE(k.Launch({blocks, 1, 1}, {threads, 1, 1}, threads * sizeof(int),
                       args.data(), false)
                  .ok());
  for (int b = 0; b < blocks; ++b) {
    for (int t = 0; t < threads; ++t) {
      ASSERT_EQ(data[b * threads + t], b * threads + threads - 1 - t);
    }
  }
}

TEST_F(LoaderTest, Atomics) {
  const HostKernel& k = Get("_Z7atomicsP12AtomicTotals");
  AtomicTotals t{};
  std::vector<char> args = Pack(k, &t);
  ASSERT_TRUE(k.Launch({3, 1, 1}, {100, 1, 1}, 0, args.data(), false).ok());
  EXPECT_EQ(t.count, 300);
  EXPECT_EQ(t.max_id, 299u);
  EXPECT_EQ(t.fsum, 150.0f);
  EXPECT_EQ(t.dsum, 75.0);
  EXPECT_EQ(t.big, 300ull << 33);
  EXPECT_EQ(t.exch, 7);
  EXPECT_EQ(t.cas_winners, 1);
  EXPECT_EQ(t.cas_word, 1);
}

TEST_F(LoaderTest, NamespacedAndTemplateKernelsWithMultiDimensionalGrid) {
  const HostKernel& fill = Get("_ZN6rvtest4fillIiEEvPT_S1_i");
  const HostKernel& scale = Get("_ZN6rvtest5scaleEPffi");
  std::vector<int> xi(70, 0);
  std::vector<char> a1 = Pack(fill, xi.data(), 9, 70);
  ASSERT_TRUE(fill.Launch({3, 1, 1}, {32, 1, 1}, 0, a1.data(), false).ok());
  EXPECT_EQ(std::count(xi.begin(), xi.end(), 9), 70);
  std::vector<float> xf(10, 2.0f);
  std::vector<char> a2 = Pack(scale, xf.data(), 1.5f, 10);
  ASSERT_TRUE(scale.Launch({1, 1, 1}, {16, 1, 1}, 0, a2.data(), false).ok());
  EXPECT_EQ(xf[9], 3.0f);
}

TEST_F(LoaderTest, CooperativeGridSync) {
  const HostKernel& k = Get("_Z11grid_rotatePiS_");
  const int blocks = 4, threads = 64, total = blocks * threads;
  std::vector<int> data(total, -1), out(total, -1);
  std::vector<char> args = Pack(k, data.data(), out.data());
  ASSERT_TRUE(k.Launch({blocks, 1, 1}, {threads, 1, 1}, 0, args.data(), true).ok());
  for (int i = 0; i < total; ++i) ASSERT_EQ(out[i], ((i + 1) % total) * 3) << i;

  // The same kernel without a cooperative launch cannot synchronize the grid.
  absl::Status s = k.Launch({blocks, 1, 1}, {threads, 1, 1}, 0, args.data(), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(s.message(), HasSubstr("cudaErrorLaunchFailure"));
  EXPECT_THAT(s.message(), HasSubstr("not cooperative"));
  EXPECT_EQ(CudaErrorOf(s), 719);

  s = k.Launch({1000, 1, 1}, {threads, 1, 1}, 0, args.data(), true);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(CudaErrorOf(s), 720);
}

// CUDA 13 answers cudaErrorInvalidValue (1) for every bad configuration.
TEST_F(LoaderTest, InvalidConfigurationsGiveCudaErrors) {
  const HostKernel& k = Get("_Z5saxpyifPKfPf");
  std::vector<float> x(1), y(1);
  std::vector<char> args = Pack(k, 1, 1.0f, x.data(), y.data());
  absl::Status s = k.Launch({1, 1, 1}, {2048, 1, 1}, 0, args.data(), false);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cudaErrorInvalidValue"));
  EXPECT_THAT(s.message(), HasSubstr("1024 threads per block"));
  EXPECT_EQ(CudaErrorOf(s), 1);
  s = k.Launch({1, 1, 1}, {32, 32, 2}, 0, args.data(), false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  s = k.Launch({1, 1, 1}, {1, 1, 65}, 0, args.data(), false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  s = k.Launch({1, 65536, 1}, {1, 1, 1}, 0, args.data(), false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  s = k.Launch({0, 1, 1}, {32, 1, 1}, 0, args.data(), false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  EXPECT_THAT(s.message(), HasSubstr("zero"));
  s = k.Launch({1, 1, 1}, {32, 1, 1}, 232449, args.data(), false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  EXPECT_TRUE(k.Launch({1, 1, 1}, {32, 1, 1}, 232448, args.data(), false).ok());
  s = k.Launch({1, 1, 1}, {32, 1, 1}, 0, nullptr, false);
  EXPECT_EQ(CudaErrorOf(s), 1);
  // Still usable after errors.
  EXPECT_TRUE(k.Launch({1, 1, 1}, {32, 1, 1}, 0, args.data(), false).ok());
  EXPECT_EQ(CudaErrorOf(absl::OkStatus()), 0);
}

TEST(LoaderErrorsTest, MissingLibrary) {
  auto r = HostKernelRegistry::Load({"hostkernel/no_such_library.so"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("does not exist"));
}

TEST(LoaderErrorsTest, LibraryWithoutTable) {
  // Any shared object without the table symbol: the C library.
  auto r = HostKernelRegistry::Load({"/lib/x86_64-linux-gnu/libm.so.6"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(r.status().message(), HasSubstr("revenant_host_kernel_table_v1"));
}

TEST(LoaderErrorsTest, DuplicateNamesAcrossLibraries) {
  auto r = HostKernelRegistry::Load({kLib, kDuplicateLib});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(r.status().message(), HasSubstr("_Z5saxpyifPKfPf"));
  // Each alone is fine.
  EXPECT_TRUE(HostKernelRegistry::Load({kDuplicateLib}).ok());
}

TEST(LoaderErrorsTest, ExplicitNames) {
  auto r = HostKernelRegistry::Load({kDuplicateLib});
  ASSERT_TRUE(r.ok()) << r.status();
  const HostKernel* k = (*r)->Find("_Z12named_kernelPii");
  ASSERT_NE(k, nullptr);
  int x = 0;
  int* p = &x;
  std::vector<char> args = Pack(*k, p, 42);
  ASSERT_TRUE(k->Launch({1, 1, 1}, {1, 1, 1}, 0, args.data(), false).ok());
  EXPECT_EQ(x, 42);
}

TEST(LoaderErrorsTest, UnnamedKernelsAreRefused) {
  auto r = HostKernelRegistry::Load({"hostkernel/libunnamed_host_kernels.so"});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("REVENANT_HOST_KERNEL_NAMED"));
}

TEST(LoaderErrorsTest, SplitPaths) {
  EXPECT_THAT(SplitHostKernelPaths("/a.so::/b.so:"), ElementsAre("/a.so", "/b.so"));
}

}  // namespace
}  // namespace hostkernel
}  // namespace revenant
