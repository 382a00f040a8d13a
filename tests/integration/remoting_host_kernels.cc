// Host kernel library of the remoting integration tests.
#include "hostkernel/cuda_host_compat.h"
#include "tests/integration/remoting_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(wait_for_flag);
REVENANT_HOST_KERNEL(add_one);
REVENANT_HOST_KERNEL(fold_upload);
REVENANT_HOST_KERNEL(copy_back);
REVENANT_HOST_KERNEL(scribble_via);
