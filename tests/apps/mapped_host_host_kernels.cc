// Host kernel library of mapped_host.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/mapped_host_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(fill_mapped);
REVENANT_HOST_KERNEL(mapped_step);
