// A second library registering saxpy again: the loader must refuse the pair.
#include "hostkernel/cuda_host_compat.h"
#include "hostkernel/host_kernel.h"

__global__ void saxpy(int n, float a, const float* __restrict__ x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
REVENANT_HOST_KERNEL(saxpy);

// Internal linkage: no exported symbol, so it is registered under an
// explicit name.
static __global__ void named_kernel(int* x, int v) { *x = v; }
REVENANT_HOST_KERNEL_NAMED(named_kernel, "_Z12named_kernelPii");
