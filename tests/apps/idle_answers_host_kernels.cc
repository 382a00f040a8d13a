// Host kernel library of idle_answers.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/idle_answers_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(slow_tag);
