// Host kernel library of runtime_names: its kernels and its device variables.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/runtime_names_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(rn_use_table);
REVENANT_HOST_KERNEL(rn_bump_table);
REVENANT_HOST_KERNEL(rn_read_ptr);
REVENANT_HOST_DEVICE_VARIABLE(rn_table);
REVENANT_HOST_DEVICE_VARIABLE(rn_scale);
REVENANT_HOST_DEVICE_VARIABLE(rn::counter);
