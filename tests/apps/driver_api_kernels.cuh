// Kernels of driver_api.cu (also compiled into libdriver_api_host_kernels.so).
#ifndef REVENANT_TESTS_APPS_DRIVER_API_KERNELS_CUH_
#define REVENANT_TESTS_APPS_DRIVER_API_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

// words[i] = words[i] * 3 + i: runs on memory the driver API allocated and set.
__global__ void mix_words(unsigned int* words, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) words[i] = words[i] * 3u + static_cast<unsigned int>(i);
}

// words[i] += k: the kernel driver_api loads as PTX through the driver API
// and finds by its mangled name (as NVRTC's users find theirs through
// nvrtcGetLoweredName).
__global__ void driver_add(unsigned int* words, int n, unsigned int k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) words[i] += k;
}

#endif  // REVENANT_TESTS_APPS_DRIVER_API_KERNELS_CUH_
