// Host kernel library of symbol_loop.
#include "hostkernel/cuda_host_compat.h"
#include "tests/integration/symbol_loop_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(sl_step);
REVENANT_HOST_DEVICE_VARIABLE(sl_weight);
