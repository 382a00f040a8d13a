// The host kernel library of backend_test_kernels.cuh.
#include "hostkernel/cuda_host_compat.h"
#include "agent/backends/host/testdata/backend_test_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(saxpy);
REVENANT_HOST_KERNEL(add_one);
REVENANT_HOST_KERNEL(needs_cooperative);
REVENANT_HOST_KERNEL(copy_values);
REVENANT_HOST_KERNEL(count_down);
REVENANT_HOST_DEVICE_VARIABLE(bt_values);
