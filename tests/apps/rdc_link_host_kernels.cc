// Host kernel library of rdc_link: both translation units' device code.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/rdc_link_kernels.cuh"
#include "tests/apps/rdc_link_device.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(rdc_apply);
REVENANT_HOST_KERNEL(rdc_call);
REVENANT_HOST_DEVICE_VARIABLE(rdc_offset);
REVENANT_HOST_DEVICE_VARIABLE(rdc_op_ptr);
