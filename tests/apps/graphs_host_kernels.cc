// Host kernel library of graphs.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/graphs_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(add_value);
REVENANT_HOST_KERNEL(scale_into);
