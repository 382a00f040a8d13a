// Kernels of rdc_link.cu (also in librdc_link_host_kernels.so). Built with
// relocatable device code (nvcc -rdc=true): they call a device function and
// read a __device__ variable defined in another translation unit
// (rdc_link_device.cu, whose definitions are rdc_link_device.cuh).
#ifndef REVENANT_TESTS_APPS_RDC_LINK_KERNELS_CUH_
#define REVENANT_TESTS_APPS_RDC_LINK_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

typedef int (*rdc_op_t)(int);

extern __device__ int rdc_offset;
extern __device__ rdc_op_t rdc_op_ptr;
__device__ int rdc_transform(int x);

__global__ void rdc_apply(int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = rdc_transform(i) + rdc_offset;
}

// Calls a device function through a pointer the host read from a
// __device__ variable of the other translation unit.
__global__ void rdc_call(rdc_op_t op, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = op(out[i]);
}

#endif  // REVENANT_TESTS_APPS_RDC_LINK_KERNELS_CUH_
