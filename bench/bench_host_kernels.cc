// Host kernel library of shim_bench (the host backend's benchmark kernels).
#include "hostkernel/cuda_host_compat.h"
#include "bench/bench_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(empty_kernel);
REVENANT_HOST_KERNEL(axpy);
