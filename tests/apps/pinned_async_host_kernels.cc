// Host kernel library of pinned_async.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/pinned_async_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(add_scalar);
REVENANT_HOST_KERNEL(write_mapped);
REVENANT_HOST_KERNEL(set_flag);
