// Host kernel library of callbacks.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/callbacks_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(iota_times);
