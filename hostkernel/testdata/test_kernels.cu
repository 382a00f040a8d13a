// nvcc's view of test_kernels.cuh, for the mangled-name check.
#include "hostkernel/testdata/test_kernels.cuh"
