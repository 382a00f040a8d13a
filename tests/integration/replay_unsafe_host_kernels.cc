// Host kernel library of replay_unsafe (the host backend's kernels).
#include "hostkernel/cuda_host_compat.h"
#include "tests/integration/replay_unsafe_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(ru_accumulate);
REVENANT_HOST_KERNEL(ru_update);
