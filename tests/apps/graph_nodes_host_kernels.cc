// Host kernel library of graph_nodes.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/graph_nodes_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(axpy);
REVENANT_HOST_KERNEL(plus_one);
