// Runs everywhere (CI has no GPU): creating the cuda backend either works
// (a GPU is there) or fails with a clear kUnavailable status -- never a crash
// or a missing libcuda at load time. The GPU behaviour itself is tested by
// cuda_backend_gpu_test (manual, GPU machines).
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <vector>

#include "agent/backends/cuda/cuda_backend.h"
#include "agent/backends/cuda/cuda_gloo.h"
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

// --collectives=gloo: without a GPU the backend is refused as without Gloo
// (kUnavailable naming the GPU); with one, the NCCL rows are Gloo's (the
// version of the API table) and a 1-rank all-reduce goes through the
// staging and the stream gate.
TEST(CudaBackendTest, GlooCollectivesCreateOrSayWhyNot) {
  BackendOptions options;
  options.rank = 5;
  options.collectives = "gloo";
  absl::StatusOr<std::unique_ptr<Backend>> b = MakeCudaBackend(options);
  if (!b.ok()) {
    EXPECT_EQ(b.status().code(), absl::StatusCode::kUnavailable) << b.status();
    EXPECT_NE(b.status().message().find("GPU"), absl::string_view::npos) << b.status();
    return;
  }
  Backend& be = **b;
  int version = 0;
  ASSERT_EQ(be.ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, kGlooNcclVersion);
  ncclUniqueId id;
  ASSERT_EQ(be.ncclGetUniqueId(&id), ncclSuccess);
  ncclComm_t comm = nullptr;
  ASSERT_EQ(be.ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(be.cudaStreamCreate(&stream), cudaSuccess);
  constexpr size_t kCount = 1000;
  void* buf = nullptr;
  ASSERT_EQ(be.cudaMalloc(&buf, kCount * sizeof(float)), cudaSuccess);
  std::vector<float> host(kCount);
  for (size_t i = 0; i < kCount; ++i) host[i] = float(i) * 0.25f;
  ASSERT_EQ(be.Memcpy(buf, host.data(), kCount * sizeof(float), cudaMemcpyHostToDevice, stream,
                      /*async=*/false),
            cudaSuccess);
  // In place, then a bad buffer (refused at the call).
  ASSERT_EQ(be.ncclAllReduce(buf, buf, kCount, ncclFloat, ncclSum, comm, stream), ncclSuccess);
  EXPECT_EQ(be.ncclAllReduce(buf, buf, kCount * 2, ncclFloat, ncclSum, comm, stream),
            ncclInvalidArgument);
  std::vector<float> back(kCount, -1.f);
  ASSERT_EQ(be.Memcpy(back.data(), buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream,
                      /*async=*/false),
            cudaSuccess);
  EXPECT_EQ(back, host);
  EXPECT_EQ(be.cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(be.ncclCommDestroy(comm), ncclSuccess);
  EXPECT_EQ(be.cudaFree(buf), cudaSuccess);
  EXPECT_EQ(be.cudaStreamDestroy(stream), cudaSuccess);
}

TEST(CudaGlooTest, RefusesMissingHooksBeforeTouchingTheGpu) {
  BackendOptions options;
  options.collectives = "gloo";
  absl::StatusOr<std::unique_ptr<cuda::CudaGloo>> g =
      cuda::CudaGloo::Create(options, DeviceRange{cuda::kDefaultDeviceBase, 1 << 30}, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
}

}  // namespace
}  // namespace agent
}  // namespace revenant
