// Runs everywhere (CI has no GPU): creating the cuda backend either works
// (a GPU is there) or fails with a clear kUnavailable status -- never a crash
// or a missing libcuda at load time. The GPU behaviour itself is tested by
// cuda_backend_gpu_test (manual, GPU machines).
#include <cuda_runtime_api.h>

#include "agent/backends/cuda/cuda_backend.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

TEST(CudaBackendTest, CreatesOrSaysWhyNot) {
  BackendOptions options;
  options.rank = 3;
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(options);
  if (!b.ok()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_NE(b.status().message().find("GPU"), absl::string_view::npos) << b.status();
    return;
  }
  EXPECT_STREQ((*b)->name(), "cuda");
  EXPECT_EQ((*b)->device_range().base, cuda::kDefaultDeviceBase + 3 * cuda::kRankStride);
  EXPECT_EQ((*b)->device_range().size, cuda::kDefaultDeviceSize);
}

TEST(CudaBackendTest, DefaultRangesStayClearOfEachOtherAndOfPinnedMemory) {
  // Ranks 0..15 below 0x300000000000 (the lowest address the shim has used
  // for pinned host memory) and inside the 47-bit user address space.
  for (uint64_t r = 0; r < 16; ++r) {
    const uint64_t base = cuda::kDefaultDeviceBase + r * cuda::kRankStride;
    EXPECT_LE(base + cuda::kDefaultDeviceSize, 0x300000000000ull);
    EXPECT_EQ(base % (2ull << 20), 0u);
  }
}

}  // namespace
}  // namespace agent
}  // namespace revenant
