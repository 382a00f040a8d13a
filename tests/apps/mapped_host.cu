// mapped_host: host memory the device reaches at its own address --
// cudaHostAlloc(cudaHostAllocMapped) and application memory registered with
// cudaHostRegister(cudaHostRegisterMapped), their device pointers
// (cudaHostGetDevicePointer) and flags (cudaHostGetFlags), kernels reading
// and writing them, asynchronous copies into registered memory, the bytes
// around a registered range left alone, memory usable after
// cudaHostUnregister, stack memory (kept pageable under Revenant, a mapped
// registration of it refused there), and bad input with CUDA's codes. Then a loop whose
// kernels read a weight vector from registered host memory and write their
// result back there (zero-copy), checked exactly against a host reference;
// its checksum is printed so a recovered run can be compared bitwise.
//
//   mapped_host [--iters N] [--seed S]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/mapped_host_kernels.cuh"

namespace {

uint64_t Fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 12;
  uint32_t seed = 20261202u;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--seed") == 0) seed = static_cast<uint32_t>(std::atoll(argv[i + 1]));
  }
  std::printf("mapped_host: seed %u, %d iterations\n", seed, iters);
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int n = 1 << 14;
  const size_t bytes = n * sizeof(int);

  // 1. cudaHostAlloc(mapped): written by a kernel through its device pointer.
  int* alloc = nullptr;
  int* alloc_dev = nullptr;
  CHECK_CUDA(cudaHostAlloc(&alloc, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  unsigned int flags = 0;
  CHECK_CUDA(cudaHostGetFlags(&flags, alloc));
  EXPECT_APP(flags & cudaHostAllocMapped, "cudaHostGetFlags of mapped memory: 0x%x", flags);
  std::printf("hostflags hostalloc_mapped_portable 0x%x\n", flags);
  CHECK_CUDA(cudaHostGetFlags(&flags, alloc + 100));  // inside the allocation
  EXPECT_CUDA_ERROR(cudaHostGetDevicePointer(reinterpret_cast<void**>(&alloc_dev), alloc, 1),
                    cudaErrorInvalidValue);
  (void)cudaGetLastError();  // a failed call is the thread's last error
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&alloc_dev), alloc, 0));
  std::memset(alloc, 0, bytes);
  fill_mapped<<<(n + 255) / 256, 256, 0, s>>>(alloc_dev, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT_APP(alloc[i] == 3 * i, "alloc[%d] = %d", i, alloc[i]);
  int* plain = nullptr;
  CHECK_CUDA(cudaMallocHost(&plain, 64));
  CHECK_CUDA(cudaHostGetFlags(&flags, plain));
  std::printf("hostflags mallochost 0x%x\n", flags);
  // As the runtime answers on the H200: mapped and portable (unified addressing).
  EXPECT_APP(flags == (cudaHostAllocMapped | cudaHostAllocPortable),
             "cudaHostGetFlags of cudaMallocHost memory: 0x%x", flags);
  CHECK_CUDA(cudaFreeHost(plain));

  // 2. Application memory registered as mapped, at an unaligned offset of a
  // larger buffer: the kernel writes it through the device pointer, the
  // bytes around it keep their values, an asynchronous copy lands in it.
  const int pad = 1000;  // ints on either side, not page-aligned
  std::vector<int> big(n + 2 * pad);
  for (int i = 0; i < n + 2 * pad; ++i) big[i] = -i;
  int* reg = big.data() + pad;
  CHECK_CUDA(cudaHostRegister(reg, bytes, cudaHostRegisterMapped));
  EXPECT_CUDA_ERROR(cudaHostRegister(reg, bytes, cudaHostRegisterMapped),
                    cudaErrorHostMemoryAlreadyRegistered);
  (void)cudaGetLastError();
  // The H200's runtime answers the registration flags (cudaSuccess, 0x2);
  // printed, compared with native by the GPU section.
  flags = 0;
  const cudaError_t reg_flags = cudaHostGetFlags(&flags, reg);
  (void)cudaGetLastError();
  std::printf("hostflags registered_mapped error %d 0x%x\n", static_cast<int>(reg_flags), flags);
  EXPECT_APP(reg_flags == cudaSuccess && flags == cudaHostRegisterMapped,
             "cudaHostGetFlags of registered memory: error %d, 0x%x", static_cast<int>(reg_flags),
             flags);
  int* reg_dev = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&reg_dev), reg, 0));
  fill_mapped<<<(n + 255) / 256, 256, 0, s>>>(reg_dev, n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT_APP(reg[i] == 3 * i, "reg[%d] = %d", i, reg[i]);
  for (int i = 0; i < pad; ++i) {
    EXPECT_APP(big[i] == -i, "big[%d] = %d before the registered range", i, big[i]);
    EXPECT_APP(big[pad + n + i] == -(pad + n + i), "big[%d] = %d after it", pad + n + i,
               big[pad + n + i]);
    big[i] = 7;  // still writable
  }
  int* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, bytes));
  std::vector<int> src(n);
  for (int i = 0; i < n; ++i) src[i] = i ^ 0x5a5a;
  CHECK_CUDA(cudaMemcpy(d, src.data(), bytes, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpyAsync(reg, d, bytes, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < n; ++i) EXPECT_APP(reg[i] == (i ^ 0x5a5a), "copied reg[%d] = %d", i, reg[i]);
  CHECK_CUDA(cudaDeviceSynchronize());
  EXPECT_APP(reg[0] == 0x5a5a && reg[1] == (1 ^ 0x5a5a), "reg[0] = %d, reg[1] = %d after the synchronize",
             reg[0], reg[1]);
  CHECK_CUDA(cudaHostUnregister(reg));
  EXPECT_CUDA_ERROR(cudaHostUnregister(reg), cudaErrorHostMemoryNotRegistered);
  (void)cudaGetLastError();
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(reg[i] == (i ^ 0x5a5a), "reg[%d] = %d after cudaHostUnregister", i, reg[i]);
    reg[i] = i;  // writable, private memory again
  }
  EXPECT_APP(big[0] == 7 && big[pad + n] == -(pad + n), "neighbours changed by cudaHostUnregister");

  // Memory that cannot be shared with the agent in place (the main
  // thread's stack): a default registration still serves copies (kept
  // pageable under Revenant); a mapped one is refused there.
  {
    const bool under_revenant = std::getenv("REVENANT_AGENT_SOCKET") != nullptr;
    int on_stack[1024];
    CHECK_CUDA(cudaHostRegister(on_stack, sizeof(on_stack), cudaHostRegisterDefault));
    CHECK_CUDA(cudaMemcpyAsync(on_stack, d, sizeof(on_stack), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < 1024; ++i) {
      EXPECT_APP(on_stack[i] == (i ^ 0x5a5a), "on_stack[%d] = %d", i, on_stack[i]);
    }
    CHECK_CUDA(cudaHostUnregister(on_stack));
    if (under_revenant) {
      EXPECT_CUDA_ERROR(cudaHostRegister(on_stack, sizeof(on_stack), cudaHostRegisterMapped),
                        cudaErrorNotSupported);
      (void)cudaGetLastError();
    }
  }

  // Bad input.
  EXPECT_CUDA_ERROR(cudaHostRegister(nullptr, bytes, cudaHostRegisterMapped), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaHostRegister(reg, 0, cudaHostRegisterMapped), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaHostRegister(reg, bytes, 0x80u), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaHostUnregister(nullptr), cudaErrorInvalidValue);
  EXPECT_CUDA_ERROR(cudaHostUnregister(src.data()), cudaErrorHostMemoryNotRegistered);
  EXPECT_CUDA_ERROR(cudaHostGetFlags(&flags, src.data()), cudaErrorInvalidValue);
  (void)cudaGetLastError();

  // 3. The loop: weights in registered memory (a page-aligned buffer of its
  // own, rewritten by the host at the start of every step, after that
  // step's input upload), the result written back into registered memory.
  const int m = 1 << 12;
  const size_t fbytes = m * sizeof(float);
  float* weight = static_cast<float*>(std::aligned_alloc(4096, fbytes));
  float* result = static_cast<float*>(std::aligned_alloc(4096, fbytes));
  EXPECT_APP(weight != nullptr && result != nullptr, "aligned_alloc failed");
  CHECK_CUDA(cudaHostRegister(weight, fbytes, cudaHostRegisterMapped | cudaHostRegisterPortable));
  CHECK_CUDA(cudaHostRegister(result, fbytes, cudaHostRegisterMapped));
  float *weight_dev = nullptr, *result_dev = nullptr, *acc = nullptr, *in = nullptr;
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&weight_dev), weight, 0));
  CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&result_dev), result, 0));
  CHECK_CUDA(cudaMalloc(&acc, fbytes));
  CHECK_CUDA(cudaMalloc(&in, fbytes));
  CHECK_CUDA(cudaMemsetAsync(acc, 0, fbytes, s));
  std::vector<float> h_in(m), ref(m, 0.0f);
  for (int step = 0; step < iters; ++step) {
    for (int j = 0; j < m; ++j) {
      h_in[j] = static_cast<float>(static_cast<int>((seed + step * 31u + j * 7u) % 9u) - 4);
    }
    CHECK_CUDA(cudaMemcpyAsync(in, h_in.data(), fbytes, cudaMemcpyHostToDevice, s));
    for (int j = 0; j < m; ++j) weight[j] = static_cast<float>((step + j) % 5 - 2);
    mapped_step<<<(m + 255) / 256, 256, 0, s>>>(acc, in, weight_dev, result_dev, m);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int j = 0; j < m; ++j) {
      ref[j] += h_in[j] * weight[j];
      EXPECT_APP(result[j] == ref[j], "step %d: result[%d] = %g, expected %g", step, j, result[j],
                 ref[j]);
    }
  }
  std::printf("final checksum %016llx\n", static_cast<unsigned long long>(Fnv1a(result, fbytes)));
  CHECK_CUDA(cudaHostUnregister(weight));
  CHECK_CUDA(cudaHostUnregister(result));
  std::free(weight);
  std::free(result);
  CHECK_CUDA(cudaFree(acc));
  CHECK_CUDA(cudaFree(in));
  CHECK_CUDA(cudaFree(d));
  CHECK_CUDA(cudaFreeHost(alloc));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS mapped_host\n");
  return 0;
}
