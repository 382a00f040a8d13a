// Host kernel library of errors.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/errors_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(fill_value);
