// Kernels of train_mlp.cu (also compiled into libtrain_mlp_host_kernels.so).
//
// A 2-layer MLP (in -> hidden -> out, ReLU, softmax cross-entropy). Every
// kernel computes each output element in one thread with a fixed loop order
// and no atomics, so results are bitwise reproducible run to run.
#ifndef REVENANT_TESTS_APPS_TRAIN_MLP_KERNELS_CUH_
#define REVENANT_TESTS_APPS_TRAIN_MLP_KERNELS_CUH_

#include <math.h>

#include "hostkernel/kernel_portability.h"

// hpre[b, h] = b1[h] + sum_k x[b, k] * w1[h, k];  hact = relu(hpre).
__global__ void mlp_fc1_forward(const float* x, const float* w1, const float* b1, float* hpre,
                                float* hact, int batch, int in, int hidden) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * hidden) return;
  int b = i / hidden, h = i % hidden;
  float z = b1[h];
  for (int k = 0; k < in; ++k) z += x[b * in + k] * w1[h * in + k];
  hpre[i] = z;
  hact[i] = z > 0.0f ? z : 0.0f;
}

// logits[b, o] = b2[o] + sum_h hact[b, h] * w2[o, h].
__global__ void mlp_fc2_forward(const float* hact, const float* w2, const float* b2,
                                float* logits, int batch, int hidden, int out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * out) return;
  int b = i / out, o = i % out;
  float z = b2[o];
  for (int h = 0; h < hidden; ++h) z += hact[b * hidden + h] * w2[o * hidden + h];
  logits[i] = z;
}

// One thread per sample: softmax, its loss, and dlogits = (p - onehot) / batch.
__global__ void mlp_softmax_xent(const float* logits, const int* labels, float* dlogits,
                                 float* loss, int batch, int out) {
  int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b >= batch) return;
  const float* z = logits + b * out;
  float m = z[0];
  for (int o = 1; o < out; ++o) m = z[o] > m ? z[o] : m;
  float sum = 0.0f;
  for (int o = 0; o < out; ++o) sum += expf(z[o] - m);
  const int y = labels[b];
  for (int o = 0; o < out; ++o) {
    float p = expf(z[o] - m) / sum;
    dlogits[b * out + o] = (p - (o == y ? 1.0f : 0.0f)) / (float)batch;
  }
  loss[b] = -(z[y] - m - logf(sum));
}

// A single thread sums the per-sample losses in order (deterministic).
__global__ void mlp_loss_sum(const float* loss, int batch, float* total) {
  if (blockIdx.x * blockDim.x + threadIdx.x != 0) return;
  float s = 0.0f;
  for (int b = 0; b < batch; ++b) s += loss[b];
  *total = s / (float)batch;
}

// dw2[o, h] = sum_b dlogits[b, o] * hact[b, h]; then db2[o] = sum_b dlogits[b, o].
__global__ void mlp_fc2_backward(const float* dlogits, const float* hact, float* dw2, float* db2,
                                 int batch, int hidden, int out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < out * hidden) {
    int o = i / hidden, h = i % hidden;
    float g = 0.0f;
    for (int b = 0; b < batch; ++b) g += dlogits[b * out + o] * hact[b * hidden + h];
    dw2[i] = g;
  } else if (i < out * hidden + out) {
    int o = i - out * hidden;
    float g = 0.0f;
    for (int b = 0; b < batch; ++b) g += dlogits[b * out + o];
    db2[o] = g;
  }
}

// dh[b, h] = relu'(hpre[b, h]) * sum_o dlogits[b, o] * w2[o, h].
__global__ void mlp_hidden_backward(const float* dlogits, const float* w2, const float* hpre,
                                    float* dh, int batch, int hidden, int out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= batch * hidden) return;
  int b = i / hidden, h = i % hidden;
  float g = 0.0f;
  for (int o = 0; o < out; ++o) g += dlogits[b * out + o] * w2[o * hidden + h];
  dh[i] = hpre[i] > 0.0f ? g : 0.0f;
}

// dw1[h, k] = sum_b dh[b, h] * x[b, k]; then db1[h] = sum_b dh[b, h].
__global__ void mlp_fc1_backward(const float* dh, const float* x, float* dw1, float* db1,
                                 int batch, int in, int hidden) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < hidden * in) {
    int h = i / in, k = i % in;
    float g = 0.0f;
    for (int b = 0; b < batch; ++b) g += dh[b * hidden + h] * x[b * in + k];
    dw1[i] = g;
  } else if (i < hidden * in + hidden) {
    int h = i - hidden * in;
    float g = 0.0f;
    for (int b = 0; b < batch; ++b) g += dh[b * hidden + h];
    db1[h] = g;
  }
}

// p -= lr * g * scale (scale = 1 / world turns the summed gradients into a mean).
__global__ void mlp_sgd(float* params, const float* grads, int n, float lr, float scale) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) params[i] -= lr * (grads[i] * scale);
}

#endif  // REVENANT_TESTS_APPS_TRAIN_MLP_KERNELS_CUH_
