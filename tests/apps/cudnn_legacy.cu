// cuDNN's legacy (v7-style) API as PyTorch uses it: tensor, filter,
// convolution, activation, pooling, dropout, RNN and RNN data descriptors,
// the convolutions with their algorithm queries, batch norm, pooling,
// dropout and an LSTM.
//
//   cudnn_legacy [--iters N]      N iterations (default 3) of: input copy,
//                                 convolution forward, backward data,
//                                 backward filter, bias + activation
//                                 forward, batch norm forward training (Ex,
//                                 running statistics accumulate), backward
//                                 (Ex), inference, max pooling, dropout (its
//                                 random state advances), a two-layer LSTM
//                                 forward in training mode with dropout
//                                 between the layers, output copies. Prints
//                                 "QUERY <what> <value>" for the workspace
//                                 sizes, heuristics and searches, "RESULT
//                                 <output> <checksum>" per output over all
//                                 iterations, "final checksum <hex>" and
//                                 "PASS cudnn_legacy"
//   cudnn_legacy --descriptors [--after-destroy]
//                                 lifecycle of the pooling, dropout, RNN, RNN
//                                 data, CTC loss and spatial transformer
//                                 descriptors (create, set, get, destroy) and
//                                 bad input; "CODE <case> <status>" and
//                                 "VALUES" lines. No GPU needed: run natively
//                                 and under Revenant, the same lines.
//                                 --after-destroy adds destroyed and
//                                 wrong-kind handles (defined only under
//                                 Revenant: CUDNN_STATUS_BAD_PARAM)
//   cudnn_legacy --refusals       every computation and query once with
//                                 live descriptors, for a backend without
//                                 cuDNN (the host backend): "CODE" lines,
//                                 and the last error string. Not natively.
//
// Convolution algorithms are fixed deterministic ones (the heuristics'
// and searches' answers are printed, not used), so native and Revenant
// runs are bitwise comparable. Every wait is bounded.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tests/apps/app_check.h"

#define CHECK_DNN(call)                                                                    \
  do {                                                                                     \
    cudnnStatus_t check_dnn_ = (call);                                                     \
    if (check_dnn_ != CUDNN_STATUS_SUCCESS) {                                              \
      char check_dnn_msg_[512];                                                            \
      cudnnGetLastErrorString(check_dnn_msg_, sizeof(check_dnn_msg_));                     \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %s (%d): %s\n", __FILE__, __LINE__,    \
                   #call, cudnnGetErrorString(check_dnn_), static_cast<int>(check_dnn_),   \
                   check_dnn_msg_);                                                        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

namespace {

// NCHW fp32, 3x3 filters, padding 1, stride 1; 2x2 max pooling.
constexpr int kN = 2, kC = 8, kH = 16, kW = 16, kK = 16, kR = 3, kS = 3;
constexpr int kPH = kH / 2, kPW = kW / 2;
// LSTM: sequence 5, batch 3, input 8, hidden 16, two layers.
constexpr int kSeq = 5, kBatch = 3, kIn = 8, kHidden = 16, kLayers = 2;
constexpr float kDropout = 0.5f;
constexpr unsigned long long kSeed = 1234;

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

std::vector<float> Values(size_t n, int seed) {
  std::vector<float> v(n);
  uint32_t s = 2654435761u * static_cast<uint32_t>(seed + 1);
  for (size_t i = 0; i < n; ++i) {
    s = s * 1664525u + 1013904223u;
    v[i] = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return v;
}

void Code(const char* name, cudnnStatus_t s) {
  std::printf("CODE %s %d\n", name, static_cast<int>(s));
}

cudnnTensorDescriptor_t Tensor(std::vector<int> dims) {
  cudnnTensorDescriptor_t t = nullptr;
  CHECK_DNN(cudnnCreateTensorDescriptor(&t));
  std::vector<int> strides(dims.size());
  int s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  CHECK_DNN(cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, static_cast<int>(dims.size()),
                                       dims.data(), strides.data()));
  return t;
}

// A device buffer of `n` floats and its checksum over the iterations.
struct Output {
  const char* name;
  size_t n;
  float* dev = nullptr;
  uint64_t sum = 1469598103934665603ull;
};

float* DeviceFloats(size_t n) {
  float* p = nullptr;
  CHECK_CUDA(cudaMalloc(&p, n * sizeof(float)));
  CHECK_CUDA(cudaMemset(p, 0, n * sizeof(float)));
  return p;
}

int RunLoop(int iters) {
  cudnnHandle_t h = nullptr;
  CHECK_DNN(cudnnCreate(&h));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(h, stream));

  // --- Convolution descriptors and buffers.
  cudnnTensorDescriptor_t xd = Tensor({kN, kC, kH, kW}), yd = Tensor({kN, kK, kH, kW});
  cudnnTensorDescriptor_t biasd = Tensor({1, kK, 1, 1}), bnd = Tensor({1, kK, 1, 1});
  cudnnTensorDescriptor_t pd = Tensor({kN, kK, kPH, kPW});
  cudnnFilterDescriptor_t wd = nullptr;
  CHECK_DNN(cudnnCreateFilterDescriptor(&wd));
  const int wdims[4] = {kK, kC, kR, kS};
  CHECK_DNN(cudnnSetFilterNdDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, wdims));
  cudnnConvolutionDescriptor_t cd = nullptr;
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&cd));
  const int pad[2] = {1, 1}, one[2] = {1, 1};
  CHECK_DNN(cudnnSetConvolutionNdDescriptor(cd, 2, pad, one, one, CUDNN_CROSS_CORRELATION,
                                            CUDNN_DATA_FLOAT));
  CHECK_DNN(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
  cudnnActivationDescriptor_t relu = nullptr;
  CHECK_DNN(cudnnCreateActivationDescriptor(&relu));
  CHECK_DNN(cudnnSetActivationDescriptor(relu, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  cudnnPoolingDescriptor_t pool = nullptr;
  CHECK_DNN(cudnnCreatePoolingDescriptor(&pool));
  CHECK_DNN(cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0,
                                        0, 2, 2));

  const size_t xn = size_t{kN} * kC * kH * kW, yn = size_t{kN} * kK * kH * kW;
  const size_t wn = size_t{kK} * kC * kR * kS, pn = size_t{kN} * kK * kPH * kPW;
  float* x = DeviceFloats(xn);
  float* w = DeviceFloats(wn);
  float* bias = DeviceFloats(kK);
  float* scale = DeviceFloats(kK);
  float* shift = DeviceFloats(kK);
  float* running_mean = DeviceFloats(kK);
  float* running_var = DeviceFloats(kK);
  float* save_mean = DeviceFloats(kK);
  float* save_inv_var = DeviceFloats(kK);
  {
    const std::vector<float> wv = Values(wn, 2), bv = Values(kK, 3), sv = Values(kK, 4);
    std::vector<float> ones(kK, 1.0f);
    CHECK_CUDA(cudaMemcpy(w, wv.data(), wn * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(bias, bv.data(), kK * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(shift, sv.data(), kK * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(scale, ones.data(), kK * sizeof(float), cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMemcpy(running_var, ones.data(), kK * sizeof(float), cudaMemcpyHostToDevice));
  }
  Output y{"conv_forward", yn}, dx{"conv_backward_data", xn}, dw{"conv_backward_filter", wn},
      ba{"conv_bias_activation", yn}, bn{"batchnorm_training", yn}, bndx{"batchnorm_backward", yn},
      dscale{"batchnorm_dscale", kK}, dbias{"batchnorm_dbias", kK}, inf{"batchnorm_inference", yn},
      stats{"batchnorm_running_mean", kK}, pooled{"pooling_forward", pn},
      dropped{"dropout_forward", yn};
  for (Output* o : {&y, &dx, &dw, &ba, &bn, &bndx, &dscale, &dbias, &inf, &pooled, &dropped})
    o->dev = DeviceFloats(o->n);
  stats.dev = running_mean;

  // --- Queries: printed (the same natively and under Revenant on one GPU
  // model), not used.
  const cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  const cudnnConvolutionBwdDataAlgo_t bwd_data_algo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  const cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  size_t ws_fwd = 0, ws_bwd_data = 0, ws_bwd_filter = 0;
  CHECK_DNN(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, fwd_algo, &ws_fwd));
  CHECK_DNN(cudnnGetConvolutionBackwardDataWorkspaceSize(h, wd, yd, cd, xd, bwd_data_algo,
                                                         &ws_bwd_data));
  CHECK_DNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(h, xd, yd, cd, wd, bwd_filter_algo,
                                                           &ws_bwd_filter));
  std::printf("QUERY workspace forward %zu backward_data %zu backward_filter %zu\n", ws_fwd,
              ws_bwd_data, ws_bwd_filter);
  int returned = -1;
  cudnnConvolutionFwdAlgoPerf_t fwd_perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  CHECK_DNN(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd,
                                                   CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned,
                                                   fwd_perf));
  EXPECT_APP(returned > 0, "no forward heuristic");
  std::printf("QUERY forward_v7 %d first %d\n", returned, static_cast<int>(fwd_perf[0].algo));
  cudnnConvolutionBwdDataAlgoPerf_t data_perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  CHECK_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
      h, wd, yd, cd, xd, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, data_perf));
  std::printf("QUERY backward_data_v7 %d first %d\n", returned, static_cast<int>(data_perf[0].algo));
  cudnnConvolutionBwdFilterAlgoPerf_t filter_perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  CHECK_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
      h, xd, yd, cd, wd, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, filter_perf));
  std::printf("QUERY backward_filter_v7 %d first %d\n", returned,
              static_cast<int>(filter_perf[0].algo));

  size_t bn_ws = 0, bn_bwd_ws = 0, bn_reserve = 0;
  CHECK_DNN(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
      h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, yd, nullptr, yd, bnd, nullptr, &bn_ws));
  CHECK_DNN(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
      h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, yd, yd, yd, nullptr, yd, bnd, nullptr,
      &bn_bwd_ws));
  CHECK_DNN(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
      h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, nullptr, yd, &bn_reserve));
  std::printf("QUERY batchnorm workspace %zu backward %zu reserve %zu\n", bn_ws, bn_bwd_ws,
              bn_reserve);

  // --- Dropout: its random state lives in device memory.
  size_t states_size = 0, drop_reserve_size = 0;
  CHECK_DNN(cudnnDropoutGetStatesSize(h, &states_size));
  CHECK_DNN(cudnnDropoutGetReserveSpaceSize(yd, &drop_reserve_size));
  std::printf("QUERY dropout states %zu reserve %zu\n", states_size, drop_reserve_size);
  void* states = nullptr;
  CHECK_CUDA(cudaMalloc(&states, states_size));
  cudnnDropoutDescriptor_t drop = nullptr;
  CHECK_DNN(cudnnCreateDropoutDescriptor(&drop));
  CHECK_DNN(cudnnSetDropoutDescriptor(drop, h, kDropout, states, states_size, kSeed));
  void* drop_reserve = nullptr;
  CHECK_CUDA(cudaMalloc(&drop_reserve, std::max<size_t>(drop_reserve_size, 16)));

  // --- LSTM with dropout between its layers (its own dropout state).
  void* rnn_states = nullptr;
  CHECK_CUDA(cudaMalloc(&rnn_states, states_size));
  cudnnDropoutDescriptor_t rnn_drop = nullptr;
  CHECK_DNN(cudnnCreateDropoutDescriptor(&rnn_drop));
  CHECK_DNN(cudnnSetDropoutDescriptor(rnn_drop, h, kDropout, rnn_states, states_size, kSeed + 1));
  cudnnRNNDescriptor_t rnn = nullptr;
  CHECK_DNN(cudnnCreateRNNDescriptor(&rnn));
  CHECK_DNN(cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
                                     CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
                                     CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                     CUDNN_FMA_MATH, kIn, kHidden, kHidden, kLayers, rnn_drop,
                                     CUDNN_RNN_PADDED_IO_DISABLED));
  const int seq_lengths[kBatch] = {kSeq, kSeq, kSeq};
  cudnnRNNDataDescriptor_t rx = nullptr, ry = nullptr;
  CHECK_DNN(cudnnCreateRNNDataDescriptor(&rx));
  CHECK_DNN(cudnnCreateRNNDataDescriptor(&ry));
  CHECK_DNN(cudnnSetRNNDataDescriptor(rx, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
                                      kSeq, kBatch, kIn, seq_lengths, nullptr));
  CHECK_DNN(cudnnSetRNNDataDescriptor(ry, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED,
                                      kSeq, kBatch, kHidden, seq_lengths, nullptr));
  cudnnTensorDescriptor_t hd = Tensor({kLayers, kBatch, kHidden});
  size_t weight_size = 0, rnn_ws = 0, rnn_reserve = 0;
  CHECK_DNN(cudnnGetRNNWeightSpaceSize(h, rnn, &weight_size));
  CHECK_DNN(cudnnGetRNNTempSpaceSizes(h, rnn, CUDNN_FWD_MODE_TRAINING, rx, &rnn_ws, &rnn_reserve));
  std::printf("QUERY rnn weights %zu workspace %zu reserve %zu\n", weight_size, rnn_ws,
              rnn_reserve);
  float* weights = DeviceFloats(weight_size / sizeof(float));
  {
    const std::vector<float> v = Values(weight_size / sizeof(float), 5);
    CHECK_CUDA(cudaMemcpy(weights, v.data(), v.size() * sizeof(float), cudaMemcpyHostToDevice));
  }
  // The first layer's input matrix: its shape and where it lies.
  cudnnTensorDescriptor_t md = nullptr, bd = nullptr;
  CHECK_DNN(cudnnCreateTensorDescriptor(&md));
  CHECK_DNN(cudnnCreateTensorDescriptor(&bd));
  void *m_addr = nullptr, *b_addr = nullptr;
  CHECK_DNN(cudnnGetRNNWeightParams(h, rnn, 0, weight_size, weights, 0, md, &m_addr, bd, &b_addr));
  {
    cudnnDataType_t t;
    int nd = 0, dims[4] = {0}, strides[4] = {0};
    CHECK_DNN(cudnnGetTensorNdDescriptor(md, 4, &t, &nd, dims, strides));
    std::printf("QUERY rnn weight matrix offset %lld dims %d: %d %d %d bias offset %lld\n",
                (long long)(static_cast<char*>(m_addr) - reinterpret_cast<char*>(weights)), nd,
                dims[0], dims[1], dims[2],
                (long long)(static_cast<char*>(b_addr) - reinterpret_cast<char*>(weights)));
  }
  int32_t* dev_seq = nullptr;
  CHECK_CUDA(cudaMalloc(&dev_seq, sizeof(seq_lengths)));
  CHECK_CUDA(cudaMemcpy(dev_seq, seq_lengths, sizeof(seq_lengths), cudaMemcpyHostToDevice));
  const size_t rxn = size_t{kSeq} * kBatch * kIn, ryn = size_t{kSeq} * kBatch * kHidden;
  const size_t hn = size_t{kLayers} * kBatch * kHidden;
  float* rnn_x = DeviceFloats(rxn);
  float* hx = DeviceFloats(hn);
  float* cx = DeviceFloats(hn);
  float* hy = DeviceFloats(hn);
  float* cy = DeviceFloats(hn);
  Output rnn_y{"rnn_forward", ryn}, rnn_hy{"rnn_hy", hn};
  rnn_y.dev = DeviceFloats(ryn);
  rnn_hy.dev = hy;

  // Searches run the candidates on the buffers (outputs are scratch):
  // the count and status are printed, the choice is not used.
  size_t ws_size = std::max({ws_fwd, ws_bwd_data, ws_bwd_filter, bn_ws, bn_bwd_ws, rnn_ws,
                             size_t{1} << 20});
  void* ws = nullptr;
  CHECK_CUDA(cudaMalloc(&ws, ws_size));
  void* bn_reserve_buf = nullptr;
  CHECK_CUDA(cudaMalloc(&bn_reserve_buf, std::max<size_t>(bn_reserve, 16)));
  void* rnn_reserve_buf = nullptr;
  CHECK_CUDA(cudaMalloc(&rnn_reserve_buf, std::max<size_t>(rnn_reserve, 16)));
  cudnnStatus_t found = cudnnFindConvolutionForwardAlgorithmEx(
      h, xd, x, wd, w, cd, yd, y.dev, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, fwd_perf, ws,
      ws_size);
  std::printf("QUERY find_forward status %d\n", static_cast<int>(found));
  found = cudnnFindConvolutionBackwardDataAlgorithmEx(
      h, wd, w, yd, y.dev, cd, xd, dx.dev, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
      data_perf, ws, ws_size);
  std::printf("QUERY find_backward_data status %d\n", static_cast<int>(found));
  found = cudnnFindConvolutionBackwardFilterAlgorithmEx(
      h, xd, x, yd, y.dev, cd, wd, dw.dev, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned,
      filter_perf, ws, ws_size);
  std::printf("QUERY find_backward_filter status %d\n", static_cast<int>(found));

  // The buffers' initial values (legacy stream) before the handle's stream,
  // which does not wait for the legacy stream.
  CHECK_CUDA(cudaDeviceSynchronize());
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<Output*> outputs = {&y,      &dx,   &dw,    &ba,     &bn,      &bndx,  &dscale,
                                  &dbias, &inf,  &stats, &pooled, &dropped, &rnn_y, &rnn_hy};
  std::vector<float> host;
  for (int it = 0; it < iters; ++it) {
    const std::vector<float> xv = Values(xn, 100 + it);
    CHECK_CUDA(cudaMemcpyAsync(x, xv.data(), xn * sizeof(float), cudaMemcpyHostToDevice, stream));
    CHECK_DNN(cudnnConvolutionForward(h, &alpha, xd, x, wd, w, cd, fwd_algo, ws, ws_size, &beta,
                                      yd, y.dev));
    CHECK_DNN(cudnnConvolutionBackwardData(h, &alpha, wd, w, yd, y.dev, cd, bwd_data_algo, ws,
                                           ws_size, &beta, xd, dx.dev));
    CHECK_DNN(cudnnConvolutionBackwardFilter(h, &alpha, xd, x, yd, y.dev, cd, bwd_filter_algo, ws,
                                             ws_size, &beta, wd, dw.dev));
    // z = the plain convolution, scaled by 0: y = relu(conv + bias).
    CHECK_DNN(cudnnConvolutionBiasActivationForward(h, &alpha, xd, x, wd, w, cd, fwd_algo, ws,
                                                    ws_size, &beta, yd, y.dev, biasd, bias, relu,
                                                    yd, ba.dev));
    CHECK_DNN(cudnnBatchNormalizationForwardTrainingEx(
        h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta, yd, y.dev, nullptr,
        nullptr, yd, bn.dev, bnd, scale, shift, 0.1, running_mean, running_var, 1e-5, save_mean,
        save_inv_var, nullptr, ws, ws_size, bn_reserve_buf, bn_reserve));
    CHECK_DNN(cudnnBatchNormalizationBackwardEx(
        h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta, &alpha, &beta, yd,
        y.dev, nullptr, nullptr, yd, ba.dev, nullptr, nullptr, yd, bndx.dev, bnd, scale, shift,
        dscale.dev, dbias.dev, 1e-5, save_mean, save_inv_var, nullptr, ws, ws_size,
        bn_reserve_buf, bn_reserve));
    CHECK_DNN(cudnnBatchNormalizationForwardInference(h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta,
                                                      yd, y.dev, yd, inf.dev, bnd, scale, shift,
                                                      running_mean, running_var, 1e-5));
    CHECK_DNN(cudnnPoolingForward(h, pool, &alpha, yd, y.dev, &beta, pd, pooled.dev));
    CHECK_DNN(cudnnDropoutForward(h, drop, yd, y.dev, yd, dropped.dev, drop_reserve,
                                  drop_reserve_size));
    const std::vector<float> rv = Values(rxn, 200 + it);
    CHECK_CUDA(cudaMemcpyAsync(rnn_x, rv.data(), rxn * sizeof(float), cudaMemcpyHostToDevice,
                               stream));
    CHECK_DNN(cudnnRNNForward(h, rnn, CUDNN_FWD_MODE_TRAINING, dev_seq, rx, rnn_x, ry, rnn_y.dev,
                              hd, hx, hy, hd, cx, cy, weight_size, weights, rnn_ws, ws,
                              rnn_reserve, rnn_reserve_buf));
    for (Output* o : outputs) {
      host.resize(o->n);
      CHECK_CUDA(cudaMemcpyAsync(host.data(), o->dev, o->n * sizeof(float),
                                 cudaMemcpyDeviceToHost, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream));
      o->sum = Fnv(host.data(), o->n * sizeof(float), o->sum);
    }
  }
  uint64_t all = 1469598103934665603ull;
  for (Output* o : outputs) {
    std::printf("RESULT %s %016llx\n", o->name, (unsigned long long)o->sum);
    all = Fnv(&o->sum, sizeof(o->sum), all);
  }
  std::printf("final checksum %016llx\n", (unsigned long long)all);

  CHECK_DNN(cudnnDestroyRNNDataDescriptor(rx));
  CHECK_DNN(cudnnDestroyRNNDataDescriptor(ry));
  CHECK_DNN(cudnnDestroyRNNDescriptor(rnn));
  CHECK_DNN(cudnnDestroyDropoutDescriptor(rnn_drop));
  CHECK_DNN(cudnnDestroyDropoutDescriptor(drop));
  CHECK_DNN(cudnnDestroyPoolingDescriptor(pool));
  CHECK_DNN(cudnnDestroyActivationDescriptor(relu));
  CHECK_DNN(cudnnDestroyConvolutionDescriptor(cd));
  CHECK_DNN(cudnnDestroyFilterDescriptor(wd));
  for (cudnnTensorDescriptor_t t : {xd, yd, biasd, bnd, pd, hd, md, bd})
    CHECK_DNN(cudnnDestroyTensorDescriptor(t));
  CHECK_DNN(cudnnDestroy(h));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS cudnn_legacy\n");
  return 0;
}

int RunDescriptors(bool after_destroy) {
  cudnnPoolingDescriptor_t pool = nullptr;
  cudnnDropoutDescriptor_t drop = nullptr;
  cudnnRNNDescriptor_t rnn = nullptr;
  cudnnRNNDataDescriptor_t data = nullptr;
  cudnnCTCLossDescriptor_t ctc = nullptr;
  cudnnSpatialTransformerDescriptor_t st = nullptr;
  CHECK_DNN(cudnnCreatePoolingDescriptor(&pool));
  CHECK_DNN(cudnnCreateDropoutDescriptor(&drop));
  CHECK_DNN(cudnnCreateRNNDescriptor(&rnn));
  CHECK_DNN(cudnnCreateRNNDataDescriptor(&data));
  CHECK_DNN(cudnnCreateCTCLossDescriptor(&ctc));
  CHECK_DNN(cudnnCreateSpatialTransformerDescriptor(&st));
  Code("pooling_create_null", cudnnCreatePoolingDescriptor(nullptr));
  Code("dropout_create_null", cudnnCreateDropoutDescriptor(nullptr));
  Code("rnn_create_null", cudnnCreateRNNDescriptor(nullptr));
  Code("rnn_data_create_null", cudnnCreateRNNDataDescriptor(nullptr));
  Code("ctc_create_null", cudnnCreateCTCLossDescriptor(nullptr));
  Code("spatial_create_null", cudnnCreateSpatialTransformerDescriptor(nullptr));
  Code("pooling_destroy_null", cudnnDestroyPoolingDescriptor(nullptr));
  Code("dropout_destroy_null", cudnnDestroyDropoutDescriptor(nullptr));
  Code("rnn_destroy_null", cudnnDestroyRNNDescriptor(nullptr));
  Code("rnn_data_destroy_null", cudnnDestroyRNNDataDescriptor(nullptr));
  Code("ctc_destroy_null", cudnnDestroyCTCLossDescriptor(nullptr));
  Code("spatial_destroy_null", cudnnDestroySpatialTransformerDescriptor(nullptr));

  // Pooling.
  Code("pooling_set", cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX, CUDNN_NOT_PROPAGATE_NAN,
                                                  3, 2, 1, 0, 2, 1));
  Code("pooling_set_unknown_mode",
       cudnnSetPooling2dDescriptor(pool, static_cast<cudnnPoolingMode_t>(99),
                                   CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  Code("pooling_set_zero_window", cudnnSetPooling2dDescriptor(pool, CUDNN_POOLING_MAX,
                                                              CUDNN_NOT_PROPAGATE_NAN, 0, 2, 0, 0,
                                                              2, 2));
  Code("pooling_set_null", cudnnSetPooling2dDescriptor(nullptr, CUDNN_POOLING_MAX,
                                                       CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
  cudnnPoolingMode_t mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  cudnnNanPropagation_t nan = CUDNN_PROPAGATE_NAN;
  int v[6] = {-1, -1, -1, -1, -1, -1};
  Code("pooling_get", cudnnGetPooling2dDescriptor(pool, &mode, &nan, &v[0], &v[1], &v[2], &v[3],
                                                  &v[4], &v[5]));
  std::printf("VALUES pooling_get mode %d nan %d window %d %d padding %d %d stride %d %d\n",
              static_cast<int>(mode), static_cast<int>(nan), v[0], v[1], v[2], v[3], v[4], v[5]);

  // CTC loss.
  Code("ctc_set_v9", cudnnSetCTCLossDescriptor_v9(ctc, CUDNN_DATA_FLOAT,
                                                  CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                                                  CUDNN_CTC_SKIP_OOB_GRADIENTS, 12));
  cudnnDataType_t type = CUDNN_DATA_DOUBLE;
  cudnnLossNormalizationMode_t norm = CUDNN_LOSS_NORMALIZATION_NONE;
  cudnnCTCGradMode_t grad = CUDNN_CTC_ZERO_OOB_GRADIENTS;
  int max_label = -1;
  Code("ctc_get_v9", cudnnGetCTCLossDescriptor_v9(ctc, &type, &norm, &grad, &max_label));
  std::printf("VALUES ctc_get_v9 type %d norm %d grad %d max_label %d\n", static_cast<int>(type),
              static_cast<int>(norm), static_cast<int>(grad), max_label);
  Code("ctc_set_ex", cudnnSetCTCLossDescriptorEx(ctc, CUDNN_DATA_FLOAT,
                                                 CUDNN_LOSS_NORMALIZATION_NONE,
                                                 CUDNN_PROPAGATE_NAN));
  Code("ctc_set_null", cudnnSetCTCLossDescriptor_v9(nullptr, CUDNN_DATA_FLOAT,
                                                    CUDNN_LOSS_NORMALIZATION_SOFTMAX,
                                                    CUDNN_CTC_ZERO_OOB_GRADIENTS, 12));

  // Spatial transformer.
  const int dims[4] = {2, 3, 8, 8};
  Code("spatial_set", cudnnSetSpatialTransformerNdDescriptor(st, CUDNN_SAMPLER_BILINEAR,
                                                             CUDNN_DATA_FLOAT, 4, dims));
  Code("spatial_set_unknown_sampler",
       cudnnSetSpatialTransformerNdDescriptor(st, static_cast<cudnnSamplerType_t>(5),
                                              CUDNN_DATA_FLOAT, 4, dims));
  Code("spatial_set_null", cudnnSetSpatialTransformerNdDescriptor(nullptr, CUDNN_SAMPLER_BILINEAR,
                                                                  CUDNN_DATA_FLOAT, 4, dims));

  // RNN data.
  const int seq[3] = {4, 3, 2};
  const float fill = 0.5f;
  Code("rnn_data_set", cudnnSetRNNDataDescriptor(data, CUDNN_DATA_FLOAT,
                                                 CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, 4, 3, 8,
                                                 seq, const_cast<float*>(&fill)));
  Code("rnn_data_set_no_fill", cudnnSetRNNDataDescriptor(data, CUDNN_DATA_FLOAT,
                                                         CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                                         4, 3, 8, seq, nullptr));
  Code("rnn_data_set_unknown_layout",
       cudnnSetRNNDataDescriptor(data, CUDNN_DATA_FLOAT, static_cast<cudnnRNNDataLayout_t>(9), 4,
                                 3, 8, seq, nullptr));
  Code("rnn_data_set_negative_batch",
       cudnnSetRNNDataDescriptor(data, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                 4, -3, 8, seq, nullptr));
  Code("rnn_data_set_null_lengths",
       cudnnSetRNNDataDescriptor(data, CUDNN_DATA_FLOAT, CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED,
                                 4, 3, 8, nullptr, nullptr));
  Code("rnn_data_set_null", cudnnSetRNNDataDescriptor(nullptr, CUDNN_DATA_FLOAT,
                                                      CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, 4,
                                                      3, 8, seq, nullptr));

  // RNN (no dropout descriptor: no dropout).
  Code("rnn_set", cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_GRU,
                                           CUDNN_RNN_DOUBLE_BIAS, CUDNN_BIDIRECTIONAL,
                                           CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT,
                                           CUDNN_DEFAULT_MATH, 8, 16, 16, 2, nullptr, 0));
  cudnnRNNAlgo_t algo = CUDNN_RNN_ALGO_PERSIST_STATIC;
  cudnnRNNMode_t cell = CUDNN_LSTM;
  cudnnRNNBiasMode_t bias = CUDNN_RNN_NO_BIAS;
  cudnnDirectionMode_t dir = CUDNN_UNIDIRECTIONAL;
  cudnnRNNInputMode_t input = CUDNN_SKIP_INPUT;
  cudnnDataType_t data_type = CUDNN_DATA_HALF, math_prec = CUDNN_DATA_HALF;
  cudnnMathType_t math = CUDNN_TENSOR_OP_MATH;
  int32_t sizes[4] = {-1, -1, -1, -1};
  cudnnDropoutDescriptor_t got_drop = reinterpret_cast<cudnnDropoutDescriptor_t>(0x1);
  uint32_t aux = 77;
  Code("rnn_get", cudnnGetRNNDescriptor_v8(rnn, &algo, &cell, &bias, &dir, &input, &data_type,
                                           &math_prec, &math, &sizes[0], &sizes[1], &sizes[2],
                                           &sizes[3], &got_drop, &aux));
  std::printf("VALUES rnn_get algo %d cell %d bias %d dir %d input %d types %d %d math %d sizes "
              "%d %d %d %d dropout %s aux %u\n",
              static_cast<int>(algo), static_cast<int>(cell), static_cast<int>(bias),
              static_cast<int>(dir), static_cast<int>(input), static_cast<int>(data_type),
              static_cast<int>(math_prec), static_cast<int>(math), sizes[0], sizes[1], sizes[2],
              sizes[3], got_drop == nullptr ? "null" : "set", aux);
  Code("rnn_set_unknown_cell",
       cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, static_cast<cudnnRNNMode_t>(9),
                                CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT,
                                CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, 8, 16, 16,
                                2, nullptr, 0));
  Code("rnn_set_null", cudnnSetRNNDescriptor_v8(nullptr, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
                                                CUDNN_RNN_DOUBLE_BIAS, CUDNN_UNIDIRECTIONAL,
                                                CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, 8, 16, 16, 2,
                                                nullptr, 0));
  // With the (unset) dropout descriptor.
  Code("rnn_set_dropout", cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM,
                                                   CUDNN_RNN_SINGLE_INP_BIAS, CUDNN_UNIDIRECTIONAL,
                                                   CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                                   CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, 8, 16, 16,
                                                   2, drop, 0));
  // A dropout descriptor needs a handle (and its GPU) to be set: only the
  // handle-free bad input here.
  Code("dropout_states_size_null_handle", cudnnDropoutGetStatesSize(nullptr, nullptr));

  if (after_destroy) {
    // Only defined under Revenant: a real cuDNN dereferences these.
    cudnnPoolingDescriptor_t gone = nullptr;
    CHECK_DNN(cudnnCreatePoolingDescriptor(&gone));
    CHECK_DNN(cudnnDestroyPoolingDescriptor(gone));
    Code("pooling_destroy_twice", cudnnDestroyPoolingDescriptor(gone));
    Code("pooling_set_destroyed", cudnnSetPooling2dDescriptor(gone, CUDNN_POOLING_MAX,
                                                              CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0,
                                                              2, 2));
    cudnnRNNDataDescriptor_t gone_data = nullptr;
    CHECK_DNN(cudnnCreateRNNDataDescriptor(&gone_data));
    CHECK_DNN(cudnnDestroyRNNDataDescriptor(gone_data));
    Code("rnn_data_set_destroyed",
         cudnnSetRNNDataDescriptor(gone_data, CUDNN_DATA_FLOAT,
                                   CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_UNPACKED, 4, 3, 8, seq,
                                   nullptr));
    // Another kind where a descriptor belongs.
    Code("rnn_set_pooling_as_dropout",
         cudnnSetRNNDescriptor_v8(rnn, CUDNN_RNN_ALGO_STANDARD, CUDNN_LSTM, CUDNN_RNN_DOUBLE_BIAS,
                                  CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, CUDNN_DATA_FLOAT,
                                  CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH, 8, 16, 16, 2,
                                  reinterpret_cast<cudnnDropoutDescriptor_t>(pool), 0));
    Code("ctc_destroy_spatial",
         cudnnDestroyCTCLossDescriptor(reinterpret_cast<cudnnCTCLossDescriptor_t>(st)));
    Code("pooling_get_null_out", cudnnGetPooling2dDescriptor(pool, nullptr, &nan, &v[0], &v[1],
                                                             &v[2], &v[3], &v[4], &v[5]));
  }
  CHECK_DNN(cudnnDestroyPoolingDescriptor(pool));
  CHECK_DNN(cudnnDestroyRNNDescriptor(rnn));
  CHECK_DNN(cudnnDestroyDropoutDescriptor(drop));
  CHECK_DNN(cudnnDestroyRNNDataDescriptor(data));
  CHECK_DNN(cudnnDestroyCTCLossDescriptor(ctc));
  CHECK_DNN(cudnnDestroySpatialTransformerDescriptor(st));
  std::printf("PASS cudnn_legacy descriptors\n");
  return 0;
}

// For a backend without cuDNN: each computation and query once, with live
// descriptors (unset: setting them is refused too) and made-up device
// addresses the backend must never touch.
int RunRefusals() {
  cudnnHandle_t h = nullptr;
  CHECK_DNN(cudnnCreate(&h));
  cudnnTensorDescriptor_t t = nullptr;
  cudnnFilterDescriptor_t f = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  cudnnActivationDescriptor_t a = nullptr;
  cudnnPoolingDescriptor_t p = nullptr;
  cudnnDropoutDescriptor_t d = nullptr;
  cudnnRNNDescriptor_t r = nullptr;
  cudnnRNNDataDescriptor_t rd = nullptr;
  cudnnCTCLossDescriptor_t ctc = nullptr;
  cudnnSpatialTransformerDescriptor_t st = nullptr;
  CHECK_DNN(cudnnCreateTensorDescriptor(&t));
  CHECK_DNN(cudnnCreateFilterDescriptor(&f));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&c));
  CHECK_DNN(cudnnCreateActivationDescriptor(&a));
  CHECK_DNN(cudnnCreatePoolingDescriptor(&p));
  CHECK_DNN(cudnnCreateDropoutDescriptor(&d));
  CHECK_DNN(cudnnCreateRNNDescriptor(&r));
  CHECK_DNN(cudnnCreateRNNDataDescriptor(&rd));
  CHECK_DNN(cudnnCreateCTCLossDescriptor(&ctc));
  CHECK_DNN(cudnnCreateSpatialTransformerDescriptor(&st));
  void* dev = nullptr;
  CHECK_CUDA(cudaMalloc(&dev, 1 << 16));
  const float alpha = 1.0f, beta = 0.0f;
  size_t size = 0, size2 = 0;
  int returned = 0;
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  void* addr = nullptr;

  Code("conv_forward", cudnnConvolutionForward(h, &alpha, t, dev, f, dev, c,
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, dev, 0,
                                               &beta, t, dev));
  Code("conv_backward_data", cudnnConvolutionBackwardData(h, &alpha, f, dev, t, dev, c,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, dev,
                                                          0, &beta, t, dev));
  Code("conv_backward_filter", cudnnConvolutionBackwardFilter(h, &alpha, t, dev, t, dev, c,
                                                              CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1,
                                                              dev, 0, &beta, f, dev));
  Code("conv_bias_activation",
       cudnnConvolutionBiasActivationForward(h, &alpha, t, dev, f, dev, c,
                                             CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, dev,
                                             0, &beta, t, dev, t, dev, a, t, dev));
  Code("batchnorm_training", cudnnBatchNormalizationForwardTrainingEx(
                                 h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta,
                                 t, dev, nullptr, nullptr, t, dev, t, dev, dev, 0.1, dev, dev,
                                 1e-5, dev, dev, nullptr, dev, 0, dev, 0));
  Code("batchnorm_backward", cudnnBatchNormalizationBackwardEx(
                                 h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, &alpha, &beta,
                                 &alpha, &beta, t, dev, nullptr, nullptr, t, dev, nullptr, nullptr,
                                 t, dev, t, dev, dev, dev, dev, 1e-5, dev, dev, nullptr, dev, 0,
                                 dev, 0));
  Code("batchnorm_inference", cudnnBatchNormalizationForwardInference(
                                  h, CUDNN_BATCHNORM_SPATIAL, &alpha, &beta, t, dev, t, dev, t,
                                  dev, dev, dev, dev, 1e-5));
  Code("pooling_forward", cudnnPoolingForward(h, p, &alpha, t, dev, &beta, t, dev));
  Code("dropout_forward", cudnnDropoutForward(h, d, t, dev, t, dev, dev, 0));
  Code("rnn_forward", cudnnRNNForward(h, r, CUDNN_FWD_MODE_TRAINING, static_cast<int32_t*>(dev),
                                      rd, dev, rd, dev, t, dev, dev, t, dev, dev, 0, dev, 0, dev, 0,
                                      dev));
  Code("rnn_backward_data", cudnnRNNBackwardData_v8(h, r, static_cast<int32_t*>(dev), rd, dev, dev,
                                                    rd, dev, t, dev, dev, dev, t, dev, dev, dev, 0,
                                                    dev, 0, dev, 0, dev));
  Code("rnn_backward_weights",
       cudnnRNNBackwardWeights_v8(h, r, CUDNN_WGRAD_MODE_ADD, static_cast<int32_t*>(dev), rd, dev,
                                  t, dev, rd, dev, 0, dev, 0, dev, 0, dev));
  Code("ctc_loss_v8", cudnnCTCLoss_v8(h, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, ctc, t, dev,
                                      static_cast<int*>(dev), static_cast<int*>(dev),
                                      static_cast<int*>(dev), dev, t, dev, 0, dev));
  Code("spatial_grid_forward", cudnnSpatialTfGridGeneratorForward(h, st, dev, dev));
  Code("spatial_grid_backward", cudnnSpatialTfGridGeneratorBackward(h, st, dev, dev));
  Code("spatial_sampler_forward",
       cudnnSpatialTfSamplerForward(h, st, &alpha, t, dev, dev, &beta, t, dev));
  Code("spatial_sampler_backward", cudnnSpatialTfSamplerBackward(
                                       h, st, &alpha, t, dev, &beta, t, dev, &alpha, t, dev, dev,
                                       &beta, dev));
  Code("conv_forward_workspace",
       cudnnGetConvolutionForwardWorkspaceSize(h, t, f, c, t,
                                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &size));
  Code("conv_forward_v7", cudnnGetConvolutionForwardAlgorithm_v7(
                              h, t, f, c, t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  Code("conv_forward_find", cudnnFindConvolutionForwardAlgorithmEx(
                                h, t, dev, f, dev, c, t, dev, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                &returned, perf, dev, 0));
  Code("dropout_states_size", cudnnDropoutGetStatesSize(h, &size));
  Code("dropout_set", cudnnSetDropoutDescriptor(d, h, 0.5f, dev, 1 << 16, 1));
  Code("rnn_weight_space_size", cudnnGetRNNWeightSpaceSize(h, r, &size));
  Code("rnn_temp_space_sizes",
       cudnnGetRNNTempSpaceSizes(h, r, CUDNN_FWD_MODE_TRAINING, rd, &size, &size2));
  Code("rnn_weight_params",
       cudnnGetRNNWeightParams(h, r, 0, 1 << 16, dev, 0, t, &addr, nullptr, nullptr));
  Code("ctc_workspace_v8", cudnnGetCTCLossWorkspaceSize_v8(h, CUDNN_CTC_LOSS_ALGO_DETERMINISTIC,
                                                           ctc, t, t, &size));
  Code("batchnorm_reserve_size", cudnnGetBatchNormalizationTrainingExReserveSpaceSize(
                                     h, CUDNN_BATCHNORM_SPATIAL, CUDNN_BATCHNORM_OPS_BN, nullptr, t,
                                     &size));
  // Bad input answered before the backend: cuDNN's codes.
  Code("conv_forward_null_handle",
       cudnnConvolutionForward(nullptr, &alpha, t, dev, f, dev, c,
                               CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, dev, 0, &beta, t, dev));
  Code("conv_forward_unknown_algo",
       cudnnConvolutionForward(h, &alpha, t, dev, f, dev, c,
                               static_cast<cudnnConvolutionFwdAlgo_t>(42), dev, 0, &beta, t, dev));
  Code("conv_forward_filter_as_tensor",
       cudnnConvolutionForward(h, &alpha, reinterpret_cast<cudnnTensorDescriptor_t>(f), dev, f,
                               dev, c, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, dev, 0, &beta, t,
                               dev));
  Code("conv_forward_v7_zero_count",
       cudnnGetConvolutionForwardAlgorithm_v7(h, t, f, c, t, 0, &returned, perf));
  Code("ctc_loss_unset_probs",
       cudnnCTCLoss(h, t, dev, &returned, &returned, &returned, dev, t, dev,
                    CUDNN_CTC_LOSS_ALGO_DETERMINISTIC, ctc, dev, 0));
  CHECK_DNN(cudnnDestroyPoolingDescriptor(p));
  Code("pooling_forward_destroyed", cudnnPoolingForward(h, p, &alpha, t, dev, &beta, t, dev));
  char message[256] = "unset";
  cudnnGetLastErrorString(message, sizeof(message));
  std::printf("last error string: %s\n", message);

  CHECK_DNN(cudnnDestroySpatialTransformerDescriptor(st));
  CHECK_DNN(cudnnDestroyCTCLossDescriptor(ctc));
  CHECK_DNN(cudnnDestroyRNNDataDescriptor(rd));
  CHECK_DNN(cudnnDestroyRNNDescriptor(r));
  CHECK_DNN(cudnnDestroyDropoutDescriptor(d));
  CHECK_DNN(cudnnDestroyActivationDescriptor(a));
  CHECK_DNN(cudnnDestroyConvolutionDescriptor(c));
  CHECK_DNN(cudnnDestroyFilterDescriptor(f));
  CHECK_DNN(cudnnDestroyTensorDescriptor(t));
  CHECK_DNN(cudnnDestroy(h));
  CHECK_CUDA(cudaFree(dev));
  std::printf("PASS cudnn_legacy refusals\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--iters") == 0) return RunLoop(std::atoi(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "--descriptors") == 0) {
    EXPECT_APP(argc == 2 || (argc == 3 && std::strcmp(argv[2], "--after-destroy") == 0),
               "usage: cudnn_legacy --descriptors [--after-destroy]");
    return RunDescriptors(argc == 3);
  }
  if (argc == 2 && std::strcmp(argv[1], "--refusals") == 0) return RunRefusals();
  EXPECT_APP(argc == 1,
             "usage: cudnn_legacy [--iters N | --descriptors [--after-destroy] | --refusals]");
  return RunLoop(3);
}
