// Host kernel library of the load test.
#include "hostkernel/cuda_host_compat.h"
#include "tests/hardening/load_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(seq_step);
