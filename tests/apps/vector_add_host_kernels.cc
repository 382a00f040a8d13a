// Host kernel library of vector_add (the host backend's vector_add kernels).
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/vector_add_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(vector_add);
