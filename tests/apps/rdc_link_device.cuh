// The other translation unit of rdc_link: a device function, a __device__
// variable and a device function pointer in a __device__ variable, used by
// rdc_link_kernels.cuh across the device link (nvcc -rdc=true).
#ifndef REVENANT_TESTS_APPS_RDC_LINK_DEVICE_CUH_
#define REVENANT_TESTS_APPS_RDC_LINK_DEVICE_CUH_

#include "hostkernel/kernel_portability.h"

typedef int (*rdc_op_t)(int);

__device__ int rdc_offset = 100;

__device__ int rdc_transform(int x) { return 3 * x + 1; }

__device__ int rdc_square(int x) { return x * x; }

__device__ rdc_op_t rdc_op_ptr = rdc_square;

#endif  // REVENANT_TESTS_APPS_RDC_LINK_DEVICE_CUH_
