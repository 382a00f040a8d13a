// A library with a kernel that has no exported symbol and no explicit name:
// the loader must refuse it rather than guess.
#include "hostkernel/cuda_host_compat.h"
#include "hostkernel/host_kernel.h"

namespace {
__global__ void invisible(int* x) { *x = 1; }
}  // namespace
REVENANT_HOST_KERNEL(invisible);
