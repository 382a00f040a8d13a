// Host kernel library of streams_events.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/streams_events_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(produce);
REVENANT_HOST_KERNEL(consume);
