// The few spellings a kernel source needs to compile both with nvcc and with
// g++ into a host kernel library (see cuda_host_compat.h).
//
//   #include "hostkernel/kernel_portability.h"
//   __global__ void scale(float* x, int n) {
//     REVENANT_DYNAMIC_SHARED(float, tile);  // extern __shared__ under nvcc
//     ...
//   }
#ifndef REVENANT_HOSTKERNEL_KERNEL_PORTABILITY_H_
#define REVENANT_HOSTKERNEL_KERNEL_PORTABILITY_H_

#if defined(__CUDACC__)
#include <cooperative_groups.h>
// Dynamic shared memory sized by the launch's sharedMem argument.
#define REVENANT_DYNAMIC_SHARED(type, name) \
  extern __shared__ __align__(16) type name[]
#else
#include "hostkernel/cuda_host_compat.h"
#endif

#endif  // REVENANT_HOSTKERNEL_KERNEL_PORTABILITY_H_
