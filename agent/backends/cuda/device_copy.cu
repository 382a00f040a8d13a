// The agent's device-to-device copy kernel: a one-rank communicator's
// collective is the copy of its send buffer into its receive buffer, and
// the agent issues it (CudaNccl::OneRankLocked). A kernel launch costs the
// issuing thread less than cudaMemcpyAsync's device-to-device path, which
// for a small collective is the whole cost of the call (docs/performance.md,
// "The whole table again; a copy kernel for one-rank collectives").
// Compiled to a fat binary at build time (sm_90 code and compute_90 PTX:
// no compilation at load time on Hopper) and loaded by the agent with
// cuModuleLoadData (device_copy_fatbin.h) when its backend is created.
//
// Both addresses and the size are multiples of 16 bytes (the caller checks
// and copies anything else with cudaMemcpyAsync); the ranges do not
// overlap. A grid-stride loop of 16-byte words.
extern "C" __global__ void revenant_device_copy(const uint4* __restrict__ src,
                                                uint4* __restrict__ dst,
                                                unsigned long long words) {
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += stride) {
    dst[i] = src[i];
  }
}
