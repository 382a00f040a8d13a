// Host kernel library of func_stubs.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/func_stubs_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL_OVERLOAD(scale, void(float*, float, int));
REVENANT_HOST_KERNEL_OVERLOAD(scale, void(int*, int, int));
REVENANT_HOST_KERNEL(fill<float>);
REVENANT_HOST_KERNEL(fill<int>);
REVENANT_HOST_KERNEL(times<3>);
REVENANT_HOST_KERNEL(stubs::add_one);
