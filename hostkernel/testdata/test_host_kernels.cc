// The host kernel library of test_kernels.cuh.
#include "hostkernel/cuda_host_compat.h"
#include "hostkernel/testdata/test_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(saxpy);
REVENANT_HOST_KERNEL(block_sum);
REVENANT_HOST_KERNEL(mixed_params);
REVENANT_HOST_KERNEL(reverse_tiles);
REVENANT_HOST_KERNEL(atomics);
REVENANT_HOST_KERNEL(rvtest::scale);
REVENANT_HOST_KERNEL(rvtest::fill<int>);
REVENANT_HOST_KERNEL(grid_rotate);
REVENANT_HOST_KERNEL(early_exit_sum);
REVENANT_HOST_KERNEL(index_3d);
REVENANT_HOST_KERNEL(stack_hog);
