// Host kernel library of multithread.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/multithread_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(affine);
