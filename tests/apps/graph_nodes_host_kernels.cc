// Host kernel library of graph_nodes.
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/graph_nodes_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(axpy);
REVENANT_HOST_KERNEL(plus_one);
REVENANT_HOST_KERNEL(fill_step);
REVENANT_HOST_KERNEL(add_into);
REVENANT_HOST_KERNEL(triple_plus);
REVENANT_HOST_KERNEL(copy_int);
REVENANT_HOST_KERNEL(loop_add);
REVENANT_HOST_KERNEL(loop_step);
