// A one-rank loop of large pinned uploads, the shape of shim_bench's 256 MiB
// bandwidth loop and of a data loader: every step fills a pinned buffer,
// uploads it into the same device buffer (the step boundary the journal
// detects) and folds it into an accumulator. The host computes the same
// fold; the device's must equal it bitwise at the end, which a replay that
// read another step's bytes from a reused capture file would break.
//
// With `pageable`, the batch comes from ordinary host memory instead (as
// PyTorch's `.cuda()` of a tensor that is not pinned): a batch of up to 1 MiB
// travels inside the request, a larger one through the staging area.
// With `pread`, the pinned batch is filled by pread(2) from a file (the
// kernel writes it, as a data loader reading files does); with `download`,
// each step also copies the device's `in` back into the pinned batch after
// the fold (the device writes the buffer the upload read); with `kernel`, a
// kernel writes it through its mapped pointer instead. These are the
// writes a held upload's source must survive (docs/recovery.md, "Held
// uploads"). With `hidden`, a kernel scribbles over the batch through a
// pointer it reads from device memory (a write the agent cannot see coming:
// a held upload's source changed behind its back, which its copy out must
// find), then the step synchronizes.
//
//   upload_loop [STEPS=48] [MIB=16] [pageable|pread|download|kernel|hidden]
#include <cuda_runtime_api.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/integration/remoting_kernels.cuh"

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 48;
  const int mib = argc > 2 ? std::atoi(argv[2]) : 16;
  const std::string mode = argc > 3 ? argv[3] : "";
  const bool pageable = mode == "pageable", by_pread = mode == "pread", download = mode == "download";
  const bool by_kernel = mode == "kernel", hidden = mode == "hidden";
  EXPECT_APP(steps > 1 && mib > 0 && mib <= 1024 &&
                 (argc <= 3 || pageable || by_pread || download || by_kernel || hidden),
             "bad arguments");
  const int n = mib << 18;  // unsigned values
  const size_t bytes = static_cast<size_t>(n) * sizeof(unsigned);
  unsigned* in = nullptr;
  unsigned* acc = nullptr;
  CHECK_CUDA(cudaMalloc(&in, bytes));
  CHECK_CUDA(cudaMalloc(&acc, bytes));
  CHECK_CUDA(cudaMemset(acc, 0, bytes));
  unsigned* pinned = nullptr;
  std::vector<unsigned> host_batch;
  if (pageable) {
    host_batch.resize(n);
    pinned = host_batch.data();
  } else {
    CHECK_CUDA(cudaMallocHost(&pinned, bytes));
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreate(&s));
  unsigned** where = nullptr;  // hidden: the batch's mapped pointer, in device memory
  if (hidden) {
    unsigned* mapped = nullptr;
    CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), pinned, 0));
    CHECK_CUDA(cudaMalloc(&where, sizeof(unsigned*)));
    CHECK_CUDA(cudaMemcpy(where, &mapped, sizeof(mapped), cudaMemcpyHostToDevice));
  }
  std::vector<unsigned> expect(n, 0);
  std::vector<unsigned> batch(n);
  int fd = -1;
  if (by_pread) {
    char path[] = "/tmp/upload_loop.XXXXXX";
    fd = mkstemp(path);
    EXPECT_APP(fd >= 0, "mkstemp: %s", std::strerror(errno));
    unlink(path);
  }
  for (int step = 0; step < steps; ++step) {
    // The previous upload has read the buffer once the stream is idle.
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int i = 0; i < n; ++i) batch[i] = static_cast<unsigned>(i) * 2654435761u + step * 40503u;
    if (by_pread) {
      EXPECT_APP(pwrite(fd, batch.data(), bytes, 0) == static_cast<ssize_t>(bytes), "pwrite");
      EXPECT_APP(pread(fd, pinned, bytes, 0) == static_cast<ssize_t>(bytes), "pread into the "
                 "pinned batch: %s", std::strerror(errno));
    } else {
      std::memcpy(pinned, batch.data(), bytes);
    }
    CHECK_CUDA(cudaMemcpyAsync(in, pinned, bytes, cudaMemcpyHostToDevice, s));
    fold_upload<<<8, 256, 0, s>>>(acc, in, n);
    CHECK_CUDA(cudaGetLastError());
    for (int i = 0; i < n; ++i) expect[i] = expect[i] * 31u + batch[i];
    if (download || by_kernel) {
      if (download) {
        CHECK_CUDA(cudaMemcpyAsync(pinned, in, bytes, cudaMemcpyDeviceToHost, s));
      } else {
        unsigned* mapped = nullptr;
        CHECK_CUDA(cudaHostGetDevicePointer(reinterpret_cast<void**>(&mapped), pinned, 0));
        copy_back<<<8, 256, 0, s>>>(mapped, in, n);
        CHECK_CUDA(cudaGetLastError());
      }
      CHECK_CUDA(cudaStreamSynchronize(s));
      EXPECT_APP(std::memcmp(pinned, batch.data(), bytes) == 0, "step %d: the download differs",
                 step);
    }
    if (hidden) {
      scribble_via<<<8, 256, 0, s>>>(where, in, n);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaStreamSynchronize(s));
    }
    if (step % 8 == 7) {
      std::printf("progress %d\n", step + 1);
      std::fflush(stdout);
    }
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  std::vector<unsigned> out(n);
  CHECK_CUDA(cudaMemcpy(out.data(), acc, bytes, cudaMemcpyDeviceToHost));
  uint64_t hash = 1469598103934665603ull;
  for (int i = 0; i < n; ++i) {
    EXPECT_APP(out[i] == expect[i], "acc[%d] = %u, expected %u", i, out[i], expect[i]);
    hash = (hash ^ out[i]) * 1099511628211ull;
  }
  std::printf("final checksum %016llx\n", static_cast<unsigned long long>(hash));
  if (!pageable) CHECK_CUDA(cudaFreeHost(pinned));
  if (fd >= 0) close(fd);
  if (where != nullptr) CHECK_CUDA(cudaFree(where));
  CHECK_CUDA(cudaFree(acc));
  CHECK_CUDA(cudaFree(in));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS upload_loop\n");
  return 0;
}
