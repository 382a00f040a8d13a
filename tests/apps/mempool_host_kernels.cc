// Host kernel library of mempool.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/mempool_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(square);
REVENANT_HOST_KERNEL(block_sums);
REVENANT_HOST_KERNEL(grid_exchange);
