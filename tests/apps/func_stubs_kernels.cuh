// Kernels of func_stubs.cu (also in libfunc_stubs_host_kernels.so):
// overloads, templates (type and non-type parameters) and a kernel in a
// namespace, whose host stubs the per-function calls must accept.
#ifndef REVENANT_TESTS_APPS_FUNC_STUBS_KERNELS_CUH_
#define REVENANT_TESTS_APPS_FUNC_STUBS_KERNELS_CUH_

#include "hostkernel/kernel_portability.h"

__global__ void scale(float* x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

__global__ void scale(int* x, int a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

template <typename T>
__global__ void fill(T* x, T v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = v;
}

template <int N>
__global__ void times(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= N;
}

namespace stubs {
__global__ void add_one(int* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1;
}
}  // namespace stubs

// The instantiations the program uses (explicit, so that the host kernel
// library has the same ones).
template __global__ void fill<float>(float*, float, int);
template __global__ void fill<int>(int*, int, int);
template __global__ void times<3>(int*, int);

#endif  // REVENANT_TESTS_APPS_FUNC_STUBS_KERNELS_CUH_
