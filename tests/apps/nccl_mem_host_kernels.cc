// Host kernel library of nccl_mem.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/nccl_mem_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(accumulate);
