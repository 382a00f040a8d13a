// A forward convolution through cuDNN 9's backend API, as PyTorch's
// cudnn_frontend builds it: tensors X/W/Y, a convolution descriptor, the
// operation, an operation graph, engine heuristics (results fetched into
// engine configs the program created), execution plans tried in heuristic
// order, a variant pack, cudnnBackendExecute.
//
//   cudnn_conv                    one convolution; checks it against a CPU
//                                 reference, prints "RESULT conv <checksum>"
//                                 (the output's bytes) and "PASS cudnn_conv"
//   cudnn_conv --iters N          N iterations of (input copy, execute, output
//                                 copy) on one plan; prints "final checksum <hex>"
//   cudnn_conv --errors           handle and descriptor lifecycle and bad
//                                 input; prints "CODE <case> <status>" per case
//                                 (natively and under Revenant the same calls)
//   cudnn_conv --errors --after-destroy
//                                 also uses destroyed and made-up handles,
//                                 which only Revenant answers defined (a real
//                                 cuDNN may crash): expects CUDNN_STATUS_BAD_PARAM
//   cudnn_conv --legacy [--after-destroy]
//                                 the legacy tensor/filter/convolution/activation
//                                 descriptors (no GPU needed): "CODE" and
//                                 "VALUES" lines, the same natively and under
//                                 Revenant on the cuda backend
//
// Runs natively and under the shim (revenant-run); every wait is bounded.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"

#define CHECK_DNN(call)                                                              \
  do {                                                                               \
    cudnnStatus_t check_dnn_ = (call);                                               \
    if (check_dnn_ != CUDNN_STATUS_SUCCESS) {                                        \
      char check_dnn_msg_[512];                                                      \
      cudnnGetLastErrorString(check_dnn_msg_, sizeof(check_dnn_msg_));               \
      std::fprintf(stderr, "FAIL %s:%d: %s returned %s (%d): %s\n", __FILE__, __LINE__, \
                   #call, cudnnGetErrorString(check_dnn_), static_cast<int>(check_dnn_), \
                   check_dnn_msg_);                                                  \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

namespace {

// The problem: NCHW fp32, 3x3 filters, padding 1, stride 1.
constexpr int64_t kN = 2, kC = 8, kH = 16, kW = 16, kK = 16, kR = 3, kS = 3;
constexpr int64_t kP = kH, kQ = kW;  // output spatial size with padding 1
constexpr int64_t kXid = 'x', kWid = 'w', kYid = 'y';

uint64_t Fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

cudnnBackendDescriptor_t Make(cudnnBackendDescriptorType_t type) {
  cudnnBackendDescriptor_t d = nullptr;
  CHECK_DNN(cudnnBackendCreateDescriptor(type, &d));
  return d;
}

void SetI64(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
            std::vector<int64_t> v) {
  CHECK_DNN(cudnnBackendSetAttribute(d, name, CUDNN_TYPE_INT64, static_cast<int64_t>(v.size()),
                                     v.data()));
}

void SetDesc(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
             cudnnBackendDescriptor_t v) {
  CHECK_DNN(cudnnBackendSetAttribute(d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v));
}

cudnnBackendDescriptor_t Tensor(int64_t uid, std::vector<int64_t> dims) {
  cudnnBackendDescriptor_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  CHECK_DNN(cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type));
  std::vector<int64_t> strides(dims.size());
  int64_t s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  SetI64(t, CUDNN_ATTR_TENSOR_DIMENSIONS, dims);
  SetI64(t, CUDNN_ATTR_TENSOR_STRIDES, strides);
  SetI64(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, {uid});
  SetI64(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, {16});
  CHECK_DNN(cudnnBackendFinalize(t));
  return t;
}

struct Conv {
  cudnnHandle_t handle = nullptr;
  std::vector<cudnnBackendDescriptor_t> all;  // destroyed at the end, in reverse
  cudnnBackendDescriptor_t plan = nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  int64_t engine = -1;
  int64_t workspace_size = 0;
  float *x = nullptr, *w = nullptr, *y = nullptr;
  void* workspace = nullptr;
};

// Builds the whole graph, plan and variant pack for device buffers x, w, y.
void Build(Conv* c) {
  CHECK_DNN(cudnnCreate(&c->handle));
  cudnnBackendDescriptor_t x = Tensor(kXid, {kN, kC, kH, kW});
  cudnnBackendDescriptor_t w = Tensor(kWid, {kK, kC, kR, kS});
  cudnnBackendDescriptor_t y = Tensor(kYid, {kN, kK, kP, kQ});

  cudnnBackendDescriptor_t conv = Make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  SetI64(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, {2});
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  CHECK_DNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE,
                                     1, &comp));
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  CHECK_DNN(cudnnBackendSetAttribute(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE,
                                     CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode));
  SetI64(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1});
  SetI64(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {1, 1});
  SetI64(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {1, 1});
  SetI64(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {1, 1});
  CHECK_DNN(cudnnBackendFinalize(conv));

  cudnnBackendDescriptor_t op = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  SetDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x);
  SetDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w);
  SetDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, y);
  SetDesc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv);
  const float alpha = 1.0f, beta = 0.0f;
  CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                     CUDNN_TYPE_FLOAT, 1, &alpha));
  CHECK_DNN(cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                     CUDNN_TYPE_FLOAT, 1, &beta));
  CHECK_DNN(cudnnBackendFinalize(op));

  cudnnBackendDescriptor_t graph = Make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  SetDesc(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, op);
  CHECK_DNN(cudnnBackendSetAttribute(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
                                     &c->handle));
  CHECK_DNN(cudnnBackendFinalize(graph));

  cudnnBackendDescriptor_t heur = Make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  SetDesc(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  CHECK_DNN(cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
                                     &heur_mode));
  CHECK_DNN(cudnnBackendFinalize(heur));
  int64_t count = 0;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  EXPECT_APP(count > 0, "the heuristics found no engine config (%lld)", (long long)count);
  std::vector<cudnnBackendDescriptor_t> cfgs(static_cast<size_t>(count));
  for (auto& cfg : cfgs) cfg = Make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
  int64_t got = 0;
  CHECK_DNN(cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs.data()));
  EXPECT_APP(got > 0 && got <= count, "%lld engine configs of %lld", (long long)got,
             (long long)count);
  std::printf("heuristics: %lld engine configs\n", (long long)got);

  // The first config whose plan finalizes, as cudnn_frontend does.
  for (int64_t i = 0; i < got && c->plan == nullptr; ++i) {
    cudnnBackendDescriptor_t plan = Make(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    CHECK_DNN(cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE,
                                       1, &c->handle));
    SetDesc(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfgs[static_cast<size_t>(i)]);
    if (cudnnBackendFinalize(plan) == CUDNN_STATUS_SUCCESS) {
      c->plan = plan;
      // The config's engine: a descriptor-typed get into one the program made.
      cudnnBackendDescriptor_t engine = Make(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
      int64_t n = 0;
      CHECK_DNN(cudnnBackendGetAttribute(cfgs[static_cast<size_t>(i)], CUDNN_ATTR_ENGINECFG_ENGINE,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine));
      EXPECT_APP(n == 1, "%lld engines in a config", (long long)n);
      CHECK_DNN(cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64,
                                         1, &n, &c->engine));
      c->all.push_back(engine);
      std::printf("plan: engine config %lld of %lld\n", (long long)i, (long long)got);
    } else {
      CHECK_DNN(cudnnBackendDestroyDescriptor(plan));
    }
  }
  EXPECT_APP(c->plan != nullptr, "no engine config finalized into a plan");
  int64_t n = 0;
  CHECK_DNN(cudnnBackendGetAttribute(c->plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                     CUDNN_TYPE_INT64, 1, &n, &c->workspace_size));
  std::printf("engine %lld, workspace %lld bytes\n", (long long)c->engine,
              (long long)c->workspace_size);
  if (c->workspace_size > 0) CHECK_CUDA(cudaMalloc(&c->workspace, c->workspace_size));

  c->pack = Make(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  SetI64(c->pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, {kXid, kWid, kYid});
  void* pointers[3] = {c->x, c->w, c->y};
  CHECK_DNN(cudnnBackendSetAttribute(c->pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                     CUDNN_TYPE_VOID_PTR, 3, pointers));
  CHECK_DNN(cudnnBackendSetAttribute(c->pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                     CUDNN_TYPE_VOID_PTR, 1, &c->workspace));
  CHECK_DNN(cudnnBackendFinalize(c->pack));

  for (auto d : {x, w, y, conv, op, graph, heur}) c->all.push_back(d);
  for (auto d : cfgs) c->all.push_back(d);
  c->all.push_back(c->plan);
  c->all.push_back(c->pack);
}

void Destroy(Conv* c) {
  for (size_t i = c->all.size(); i-- > 0;) CHECK_DNN(cudnnBackendDestroyDescriptor(c->all[i]));
  CHECK_DNN(cudnnDestroy(c->handle));
  if (c->workspace != nullptr) CHECK_CUDA(cudaFree(c->workspace));
}

std::vector<float> Values(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed;
  for (float& f : v) {
    s = s * 1664525u + 1013904223u;
    f = static_cast<float>((s >> 8) % 2001) / 1000.0f - 1.0f;
  }
  return v;
}

std::vector<float> Reference(const std::vector<float>& x, const std::vector<float>& w) {
  std::vector<float> y(static_cast<size_t>(kN * kK * kP * kQ));
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t k = 0; k < kK; ++k)
      for (int64_t p = 0; p < kP; ++p)
        for (int64_t q = 0; q < kQ; ++q) {
          double acc = 0;
          for (int64_t c = 0; c < kC; ++c)
            for (int64_t r = 0; r < kR; ++r)
              for (int64_t s = 0; s < kS; ++s) {
                const int64_t h = p + r - 1, ww = q + s - 1;
                if (h < 0 || h >= kH || ww < 0 || ww >= kW) continue;
                acc += static_cast<double>(x[((n * kC + c) * kH + h) * kW + ww]) *
                       w[((k * kC + c) * kR + r) * kS + s];
              }
          y[((n * kK + k) * kP + p) * kQ + q] = static_cast<float>(acc);
        }
  return y;
}

const size_t kXn = kN * kC * kH * kW, kWn = kK * kC * kR * kS, kYn = kN * kK * kP * kQ;

void Allocate(Conv* c) {
  CHECK_CUDA(cudaMalloc(&c->x, kXn * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&c->w, kWn * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&c->y, kYn * sizeof(float)));
}

int RunOnce() {
  Conv c;
  Allocate(&c);
  const std::vector<float> x = Values(kXn, 1), w = Values(kWn, 2);
  CHECK_CUDA(cudaMemcpy(c.x, x.data(), kXn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(c.w, w.data(), kWn * sizeof(float), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemset(c.y, 0, kYn * sizeof(float)));
  Build(&c);
  CHECK_DNN(cudnnBackendExecute(c.handle, c.plan, c.pack));
  std::vector<float> y(kYn);
  CHECK_CUDA(cudaMemcpy(y.data(), c.y, kYn * sizeof(float), cudaMemcpyDeviceToHost));
  const std::vector<float> ref = Reference(x, w);
  double worst = 0;
  for (size_t i = 0; i < kYn; ++i) worst = std::fmax(worst, std::fabs(y[i] - ref[i]));
  // TF32 tensor cores may take part (fp32 data): a loose bound, the bitwise
  // check is native against Revenant.
  EXPECT_APP(worst < 5e-2, "output differs from the CPU reference by %g", worst);
  std::printf("max |y - reference| %.3g\n", worst);
  std::printf("RESULT conv engine %lld\n", (long long)c.engine);
  std::printf("RESULT conv %016llx\n", (unsigned long long)Fnv(y.data(), kYn * sizeof(float)));
  Destroy(&c);
  CHECK_CUDA(cudaFree(c.x));
  CHECK_CUDA(cudaFree(c.w));
  CHECK_CUDA(cudaFree(c.y));
  std::printf("PASS cudnn_conv\n");
  return 0;
}

int RunLoop(int iters) {
  Conv c;
  Allocate(&c);
  const std::vector<float> w = Values(kWn, 2);
  CHECK_CUDA(cudaMemcpy(c.w, w.data(), kWn * sizeof(float), cudaMemcpyHostToDevice));
  Build(&c);
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK_DNN(cudnnSetStream(c.handle, stream));
  cudaStream_t got = nullptr;
  CHECK_DNN(cudnnGetStream(c.handle, &got));
  EXPECT_APP(got == stream, "cudnnGetStream gave another stream");
  uint64_t checksum = 1469598103934665603ull;
  std::vector<float> y(kYn);
  for (int it = 0; it < iters; ++it) {
    const std::vector<float> x = Values(kXn, 100 + it);
    CHECK_CUDA(cudaMemcpyAsync(c.x, x.data(), kXn * sizeof(float), cudaMemcpyHostToDevice,
                               stream));
    CHECK_DNN(cudnnBackendExecute(c.handle, c.plan, c.pack));
    CHECK_CUDA(cudaMemcpyAsync(y.data(), c.y, kYn * sizeof(float), cudaMemcpyDeviceToHost,
                               stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    checksum = Fnv(y.data(), kYn * sizeof(float), checksum);
  }
  std::printf("final checksum %016llx\n", (unsigned long long)checksum);
  Destroy(&c);
  CHECK_CUDA(cudaStreamDestroy(stream));
  return 0;
}

void Code(const char* name, cudnnStatus_t s) { std::printf("CODE %s %d\n", name, static_cast<int>(s)); }

int RunErrors(bool after_destroy) {
  EXPECT_APP(cudnnGetVersion() >= 90000, "cudnnGetVersion() = %zu", cudnnGetVersion());
  EXPECT_APP(cudnnGetCudartVersion() > 0, "cudnnGetCudartVersion() = 0");
  int major = 0;
  CHECK_DNN(cudnnGetProperty(MAJOR_VERSION, &major));
  EXPECT_APP(major == 9, "cuDNN major version %d", major);
  EXPECT_APP(std::strcmp(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM") == 0,
             "cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM) = %s",
             cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM));
  std::printf("cuDNN %zu (cudart %zu)\n", cudnnGetVersion(), cudnnGetCudartVersion());

  // Lifecycle.
  cudnnHandle_t h = nullptr;
  CHECK_DNN(cudnnCreate(&h));
  cudaStream_t stream = nullptr;
  CHECK_CUDA(cudaStreamCreate(&stream));
  CHECK_DNN(cudnnSetStream(h, stream));
  cudaStream_t got = nullptr;
  CHECK_DNN(cudnnGetStream(h, &got));
  EXPECT_APP(got == stream, "cudnnGetStream gave another stream");
  cudnnBackendDescriptor_t t = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  cudnnBackendDescriptor_t t2 = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  EXPECT_APP(t != t2, "two descriptors with one handle");

  // Bad input a real cuDNN answers defined (cuDNN 9.19's codes in
  // tests/integration/cudnn_host_test.sh and scripts/gpu/cudnn.sh).
  Code("create_null", cudnnCreate(nullptr));
  Code("destroy_null_handle", cudnnDestroy(nullptr));
  Code("set_stream_null_handle", cudnnSetStream(nullptr, stream));
  cudnnBackendDescriptor_t bad = nullptr;
  Code("create_descriptor_unknown_type",
       cudnnBackendCreateDescriptor(static_cast<cudnnBackendDescriptorType_t>(999), &bad));
  Code("destroy_null_descriptor", cudnnBackendDestroyDescriptor(nullptr));
  Code("finalize_null_descriptor", cudnnBackendFinalize(nullptr));
  const int64_t dims[4] = {2, 3, 4, 5};
  Code("set_null_descriptor",
       cudnnBackendSetAttribute(nullptr, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  Code("set_unknown_attribute_type",
       cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                static_cast<cudnnBackendAttributeType_t>(999), 4, dims));
  Code("set_negative_count",
       cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, -1, dims));
  const float f = 1.0f;
  Code("set_wrong_attribute_type",
       cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_FLOAT, 1, &f));
  Code("set_null_array",
       cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, nullptr));
  Code("set_null_array_zero_count",
       cudnnBackendSetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, nullptr));
  cudnnBackendDescriptor_t null_element = nullptr;
  cudnnBackendDescriptor_t op = Make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
  Code("set_null_element", cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                    CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &null_element));
  Code("finalize_incomplete", cudnnBackendFinalize(t));
  Code("execute_null_handle", cudnnBackendExecute(nullptr, t, t2));
  char message[256] = "unset";
  cudnnGetLastErrorString(message, sizeof(message));
  std::printf("last error string: %s\n", message);

  // A complete tensor (the host backend cannot finalize it: it has no cuDNN).
  cudnnBackendDescriptor_t tf = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const cudnnDataType_t type = CUDNN_DATA_FLOAT;
  const int64_t strides[4] = {60, 20, 5, 1}, uid = 1, alignment = 16;
  Code("set_data_type", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_DATA_TYPE,
                                                 CUDNN_TYPE_DATA_TYPE, 1, &type));
  Code("set_dims", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims));
  Code("set_strides", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides));
  Code("set_uid", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid));
  Code("set_alignment", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
                                                 CUDNN_TYPE_INT64, 1, &alignment));
  Code("finalize_complete", cudnnBackendFinalize(tf));
  Code("finalize_twice", cudnnBackendFinalize(tf));
  Code("set_after_finalize", cudnnBackendSetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                      CUDNN_TYPE_INT64, 4, dims));
  int64_t n = -7, v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  Code("get_negative_count",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, -1, &n, v));
  Code("get_unknown_attribute_type",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                static_cast<cudnnBackendAttributeType_t>(999), 4, &n, v));
  Code("get_wrong_attribute_type",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_FLOAT, 4, &n, v));
  Code("get_null_descriptor",
       cudnnBackendGetAttribute(nullptr, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, &n, v));
  // An array too small: the first elements, and how many were written.
  Code("get_two_of_four",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 2, &n, v));
  std::printf("VALUES get_two_of_four %lld: %lld %lld %lld\n", (long long)n, (long long)v[0],
              (long long)v[1], (long long)v[2]);
  Code("get_count_only",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 0, &n, nullptr));
  std::printf("VALUES get_count_only %lld\n", (long long)n);
  v[0] = v[1] = v[2] = v[3] = 0;
  Code("get_without_count",
       cudnnBackendGetAttribute(tf, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, nullptr, v));
  std::printf("VALUES get_without_count %lld %lld %lld %lld\n", (long long)v[0], (long long)v[1],
              (long long)v[2], (long long)v[3]);

  if (after_destroy) {
    // Only defined under Revenant: a real cuDNN dereferences these.
    Code("create_descriptor_null_out",
         cudnnBackendCreateDescriptor(CUDNN_BACKEND_TENSOR_DESCRIPTOR, nullptr));
    Code("get_stream_null_out", cudnnGetStream(h, nullptr));
    cudnnBackendDescriptor_t gone = Make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    CHECK_DNN(cudnnBackendDestroyDescriptor(gone));
    Code("destroy_twice", cudnnBackendDestroyDescriptor(gone));
    Code("set_destroyed", cudnnBackendSetAttribute(gone, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                   CUDNN_TYPE_INT64, 4, dims));
    Code("get_destroyed", cudnnBackendGetAttribute(gone, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                   CUDNN_TYPE_INT64, 4, &n, v));
    Code("finalize_destroyed", cudnnBackendFinalize(gone));
    Code("set_destroyed_element", cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &gone));
    cudnnBackendDescriptor_t made_up = reinterpret_cast<cudnnBackendDescriptor_t>(0x1234);
    Code("set_made_up_descriptor", cudnnBackendSetAttribute(made_up, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                            CUDNN_TYPE_INT64, 4, dims));
    cudnnBackendDescriptor_t pair[2] = {t, made_up};
    Code("get_made_up_element", cudnnBackendGetAttribute(t, CUDNN_ATTR_TENSOR_DIMENSIONS,
                                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, 2, &n, pair));
    cudnnHandle_t gone_handle = nullptr;
    CHECK_DNN(cudnnCreate(&gone_handle));
    CHECK_DNN(cudnnDestroy(gone_handle));
    Code("set_stream_destroyed_handle", cudnnSetStream(gone_handle, stream));
    Code("destroy_handle_twice", cudnnDestroy(gone_handle));
    Code("execute_destroyed_plan", cudnnBackendExecute(h, gone, t2));
    Code("set_handle_made_up_element",
         cudnnBackendSetAttribute(op, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &made_up));
  }

  // Everything still works afterwards.
  CHECK_DNN(cudnnBackendDestroyDescriptor(op));
  CHECK_DNN(cudnnBackendDestroyDescriptor(tf));
  CHECK_DNN(cudnnBackendDestroyDescriptor(t));
  CHECK_DNN(cudnnBackendDestroyDescriptor(t2));
  CHECK_DNN(cudnnDestroy(h));
  cudnnHandle_t h2 = nullptr;
  CHECK_DNN(cudnnCreate(&h2));
  CHECK_DNN(cudnnDestroy(h2));
  CHECK_CUDA(cudaStreamDestroy(stream));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS cudnn_conv errors\n");
  return 0;
}

int RunLegacy(bool after_destroy) {
  cudnnTensorDescriptor_t t = nullptr;
  cudnnFilterDescriptor_t f = nullptr;
  cudnnConvolutionDescriptor_t c = nullptr;
  cudnnActivationDescriptor_t a = nullptr;
  CHECK_DNN(cudnnCreateTensorDescriptor(&t));
  CHECK_DNN(cudnnCreateFilterDescriptor(&f));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&c));
  CHECK_DNN(cudnnCreateActivationDescriptor(&a));
  Code("tensor_create_null", cudnnCreateTensorDescriptor(nullptr));
  Code("filter_create_null", cudnnCreateFilterDescriptor(nullptr));
  Code("convolution_create_null", cudnnCreateConvolutionDescriptor(nullptr));
  Code("activation_create_null", cudnnCreateActivationDescriptor(nullptr));
  Code("tensor_destroy_null", cudnnDestroyTensorDescriptor(nullptr));
  Code("filter_destroy_null", cudnnDestroyFilterDescriptor(nullptr));
  Code("convolution_destroy_null", cudnnDestroyConvolutionDescriptor(nullptr));
  Code("activation_destroy_null", cudnnDestroyActivationDescriptor(nullptr));

  const int dims[4] = {2, 3, 4, 5}, strides[4] = {60, 20, 5, 1};
  Code("tensor_set", cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, dims, strides));
  Code("tensor_set_negative", cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, -1, dims, strides));
  const int nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  Code("tensor_set_nine", cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 9, nine, nine));
  Code("tensor_set_null_descriptor",
       cudnnSetTensorNdDescriptor(nullptr, CUDNN_DATA_FLOAT, 4, dims, strides));
  cudnnDataType_t type = CUDNN_DATA_DOUBLE;
  int n = -1, d[8] = {0}, st[8] = {0};
  Code("tensor_get_two", cudnnGetTensorNdDescriptor(t, 2, &type, &n, d, st));
  std::printf("VALUES tensor_get_two type %d dims %d: %d %d %d strides %d %d %d\n",
              static_cast<int>(type), n, d[0], d[1], d[2], st[0], st[1], st[2]);
  Code("tensor_get_nine", cudnnGetTensorNdDescriptor(t, 9, &type, &n, d, st));
  std::printf("VALUES tensor_get_nine %d: %d %d %d %d\n", n, d[0], d[1], d[2], d[3]);

  Code("filter_set", cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, dims));
  Code("filter_set_negative",
       cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, -1, dims));
  cudnnTensorFormat_t format = CUDNN_TENSOR_NHWC;
  n = -1;
  Code("filter_get", cudnnGetFilterNdDescriptor(f, 8, &type, &format, &n, d));
  std::printf("VALUES filter_get type %d format %d dims %d: %d %d %d %d\n", static_cast<int>(type),
              static_cast<int>(format), n, d[0], d[1], d[2], d[3]);

  const int pad[2] = {1, 1}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  Code("convolution_set", cudnnSetConvolutionNdDescriptor(c, 2, pad, stride, dilation,
                                                          CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  Code("convolution_set_negative",
       cudnnSetConvolutionNdDescriptor(c, -1, pad, stride, dilation, CUDNN_CROSS_CORRELATION,
                                       CUDNN_DATA_FLOAT));
  Code("convolution_groups", cudnnSetConvolutionGroupCount(c, 2));
  Code("convolution_groups_zero", cudnnSetConvolutionGroupCount(c, 0));
  Code("convolution_math", cudnnSetConvolutionMathType(c, CUDNN_TENSOR_OP_MATH));
  Code("convolution_math_unknown", cudnnSetConvolutionMathType(c, static_cast<cudnnMathType_t>(99)));
  Code("activation_set", cudnnSetActivationDescriptor(a, CUDNN_ACTIVATION_RELU, CUDNN_PROPAGATE_NAN, 0.0));
  Code("activation_set_unknown", cudnnSetActivationDescriptor(a, static_cast<cudnnActivationMode_t>(99),
                                                              CUDNN_PROPAGATE_NAN, 0.0));

  if (after_destroy) {
    // Only defined under Revenant: a real cuDNN dereferences these.
    Code("tensor_set_null_dims", cudnnSetTensorNdDescriptor(t, CUDNN_DATA_FLOAT, 4, nullptr, strides));
    Code("filter_set_null_dims",
         cudnnSetFilterNdDescriptor(f, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 4, nullptr));
    Code("convolution_set_null_pads",
         cudnnSetConvolutionNdDescriptor(c, 2, nullptr, stride, dilation, CUDNN_CROSS_CORRELATION,
                                         CUDNN_DATA_FLOAT));
    Code("tensor_get_null_out", cudnnGetTensorNdDescriptor(t, 4, &type, &n, nullptr, st));
    cudnnTensorDescriptor_t gone = nullptr;
    CHECK_DNN(cudnnCreateTensorDescriptor(&gone));
    CHECK_DNN(cudnnDestroyTensorDescriptor(gone));
    Code("tensor_destroy_twice", cudnnDestroyTensorDescriptor(gone));
    Code("tensor_set_destroyed", cudnnSetTensorNdDescriptor(gone, CUDNN_DATA_FLOAT, 4, dims, strides));
    // A filter where a tensor belongs: another kind of handle.
    Code("tensor_set_filter", cudnnSetTensorNdDescriptor(reinterpret_cast<cudnnTensorDescriptor_t>(f),
                                                         CUDNN_DATA_FLOAT, 4, dims, strides));
    Code("activation_destroy_convolution",
         cudnnDestroyActivationDescriptor(reinterpret_cast<cudnnActivationDescriptor_t>(c)));
  }
  CHECK_DNN(cudnnDestroyTensorDescriptor(t));
  CHECK_DNN(cudnnDestroyFilterDescriptor(f));
  CHECK_DNN(cudnnDestroyConvolutionDescriptor(c));
  CHECK_DNN(cudnnDestroyActivationDescriptor(a));
  std::printf("PASS cudnn_conv legacy\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--iters") == 0) return RunLoop(std::atoi(argv[2]));
  if (argc >= 2 && std::strcmp(argv[1], "--errors") == 0) {
    EXPECT_APP(argc == 2 || (argc == 3 && std::strcmp(argv[2], "--after-destroy") == 0),
               "usage: cudnn_conv --errors [--after-destroy]");
    return RunErrors(argc == 3);
  }
  if (argc >= 2 && std::strcmp(argv[1], "--legacy") == 0) {
    EXPECT_APP(argc == 2 || (argc == 3 && std::strcmp(argv[2], "--after-destroy") == 0),
               "usage: cudnn_conv --legacy [--after-destroy]");
    return RunLegacy(argc == 3);
  }
  EXPECT_APP(argc == 1,
             "usage: cudnn_conv [--iters N | --errors [--after-destroy] | --legacy [--after-destroy]]");
  return RunOnce();
}
