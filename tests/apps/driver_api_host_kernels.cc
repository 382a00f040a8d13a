// Host kernel library of driver_api (the host backend's driver_api kernels).
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/driver_api_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(mix_words);
REVENANT_HOST_KERNEL(driver_add);
