// Host kernel library of train_mlp (the host backend's MLP kernels).
#include "hostkernel/cuda_host_compat.h"
#include "tests/apps/train_mlp_kernels.cuh"
#include "hostkernel/host_kernel.h"

REVENANT_HOST_KERNEL(mlp_fc1_forward);
REVENANT_HOST_KERNEL(mlp_fc2_forward);
REVENANT_HOST_KERNEL(mlp_softmax_xent);
REVENANT_HOST_KERNEL(mlp_loss_sum);
REVENANT_HOST_KERNEL(mlp_fc2_backward);
REVENANT_HOST_KERNEL(mlp_hidden_backward);
REVENANT_HOST_KERNEL(mlp_fc1_backward);
REVENANT_HOST_KERNEL(mlp_sgd);
