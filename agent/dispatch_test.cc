// The generated dispatcher against a fake backend: argument decoding, OUT
// values, handle virtualization, and refusal of malformed requests.
#include "agent/dispatch.h"

#include <cstring>
#include <utility>
#include <vector>

#include "api/backend_api.h"
#include "api/hook_structs.h"
#include "api/wire.h"
#include "gtest/gtest.h"

namespace revenant {
namespace agent {
namespace {

class FakeBackend : public api::BackendApi {
 public:
  cudaError_t cudaMalloc(void** devPtr, size_t size) override {
    ++calls;
    last_size = size;
    *devPtr = reinterpret_cast<void*>(0x200000001000ull);
    return cudaSuccess;
  }
  cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) override {
    ++calls;
    last_flags = flags;
    *s = reinterpret_cast<cudaStream_t>(0xabc0 + calls);
    return cudaSuccess;
  }
  cudaError_t cudaStreamSynchronize(cudaStream_t s) override {
    ++calls;
    last_stream = s;
    return cudaSuccess;
  }
  cudaError_t cudaStreamDestroy(cudaStream_t s) override {
    ++calls;
    last_stream = s;
    return cudaSuccess;
  }
  cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode) override {
    ++calls;
    last_stream = s;
    last_capture_mode = mode;
    return cudaSuccess;
  }
  cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) override {
    ++calls;
    last_stream = s;
    if (graph != nullptr) *graph = reinterpret_cast<cudaGraph_t>(0x6a);
    return cudaSuccess;
  }
  cudaStreamCaptureMode last_capture_mode = cudaStreamCaptureModeGlobal;
  // cuBLAS: one handle whose pointer mode the test sets.
  cublasStatus_t cublasCreate_v2(cublasHandle_t* h) override {
    ++calls;
    *h = reinterpret_cast<cublasHandle_t>(0xb1a5);
    return CUBLAS_STATUS_SUCCESS;
  }
  bool DevicePointers(api::HandleKind kind, uint64_t handle) override {
    if (kind == api::HandleKind::kLtMatmulDesc) return handle == 0xde5c && lt_device_pointers;
    return kind == api::HandleKind::kBlasHandle && handle == 0xb1a5 && device_pointers;
  }
  // cuBLASLt: one handle, one matmul descriptor (whose pointer mode the test
  // sets), one layout.
  cublasStatus_t cublasLtCreate(cublasLtHandle_t* h) override {
    ++calls;
    *h = reinterpret_cast<cublasLtHandle_t>(0x17);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* d, cublasComputeType_t,
                                          cudaDataType_t) override {
    ++calls;
    *d = reinterpret_cast<cublasLtMatmulDesc_t>(0xde5c);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* l, cudaDataType, uint64_t,
                                            uint64_t, int64_t) override {
    ++calls;
    *l = reinterpret_cast<cublasLtMatrixLayout_t>(0x1a70);
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t,
                                                void* buf, size_t size, size_t* written) override {
    ++calls;
    if (buf != nullptr) std::memset(buf, 0x5a, size);  // writes all it is told it may
    if (written != nullptr) *written = size;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasLtMatmul(cublasLtHandle_t h, cublasLtMatmulDesc_t d, const void* alpha,
                                const void*, cublasLtMatrixLayout_t, const void*,
                                cublasLtMatrixLayout_t, const void* beta, const void*,
                                cublasLtMatrixLayout_t, void*, cublasLtMatrixLayout_t,
                                const cublasLtMatmulAlgo_t*, void*, size_t,
                                cudaStream_t) override {
    ++calls;
    last_lt = {reinterpret_cast<uint64_t>(h), reinterpret_cast<uint64_t>(d)};
    last_alpha = alpha;
    if (!lt_device_pointers) {
      std::memcpy(&last_scalars[0], alpha, sizeof(float));
      std::memcpy(&last_scalars[1], beta, sizeof(float));
    }
    return CUBLAS_STATUS_SUCCESS;
  }
  bool lt_device_pointers = false;
  std::pair<uint64_t, uint64_t> last_lt{0, 0};
  cublasStatus_t cublasSdot_v2(cublasHandle_t h, int n, const float* x, int incx, const float* y,
                               int incy, float* result) override {
    ++calls;
    (void)h; (void)n; (void)x; (void)incx; (void)y; (void)incy;
    last_result = result;
    if (!device_pointers) *result = 42.0f;
    return CUBLAS_STATUS_SUCCESS;
  }
  cublasStatus_t cublasSgemv_v2(cublasHandle_t h, cublasOperation_t trans, int m, int n,
                                const float* alpha, const float* A, int lda, const float* x,
                                int incx, const float* beta, float* y, int incy) override {
    ++calls;
    (void)h; (void)trans; (void)m; (void)n; (void)A; (void)lda; (void)x; (void)incx; (void)y;
    (void)incy;
    last_alpha = alpha;
    if (!device_pointers) {
      std::memcpy(&last_scalars[0], alpha, sizeof(float));
      std::memcpy(&last_scalars[1], beta, sizeof(float));
    }
    return CUBLAS_STATUS_SUCCESS;
  }
  // Driver rows: CUstream arguments arrive as the backend's streams.
  CUresult cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                   unsigned int flags) override {
    ++calls;
    last_stream = reinterpret_cast<cudaStream_t>(s);
    last_size = addr;
    last_flags = value + flags;
    return CUDA_SUCCESS;
  }
  // cuDNN: one RNN and one dropout descriptor; the RNN's dropout descriptor
  // is optional (null_ok) both ways.
  cudnnStatus_t cudnnCreateRNNDescriptor(cudnnRNNDescriptor_t* d) override {
    ++calls;
    *d = reinterpret_cast<cudnnRNNDescriptor_t>(0x7271);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnCreateDropoutDescriptor(cudnnDropoutDescriptor_t* d) override {
    ++calls;
    *d = reinterpret_cast<cudnnDropoutDescriptor_t>(0xd0);
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnSetRNNDescriptor_v8(cudnnRNNDescriptor_t, cudnnRNNAlgo_t, cudnnRNNMode_t,
                                         cudnnRNNBiasMode_t, cudnnDirectionMode_t,
                                         cudnnRNNInputMode_t, cudnnDataType_t, cudnnDataType_t,
                                         cudnnMathType_t, int32_t, int32_t, int32_t, int32_t,
                                         cudnnDropoutDescriptor_t dropout, uint32_t) override {
    ++calls;
    rnn_dropout = dropout;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnStatus_t cudnnGetRNNDescriptor_v8(cudnnRNNDescriptor_t, cudnnRNNAlgo_t*, cudnnRNNMode_t*,
                                         cudnnRNNBiasMode_t*, cudnnDirectionMode_t*,
                                         cudnnRNNInputMode_t*, cudnnDataType_t*, cudnnDataType_t*,
                                         cudnnMathType_t*, int32_t*, int32_t*, int32_t*, int32_t*,
                                         cudnnDropoutDescriptor_t* dropout, uint32_t*) override {
    ++calls;
    if (dropout != nullptr) *dropout = rnn_dropout;
    return CUDNN_STATUS_SUCCESS;
  }
  cudnnDropoutDescriptor_t rnn_dropout = nullptr;
  bool device_pointers = false;
  const void* last_result = nullptr;
  const void* last_alpha = nullptr;
  float last_scalars[2] = {0, 0};
  int calls = 0;
  size_t last_size = 0;
  unsigned last_flags = 0;
  cudaStream_t last_stream = nullptr;
};

struct Request {
  std::vector<char> body = std::vector<char>(256);
  wire::Encoder enc{body.data(), body.size()};
};

class DispatchTest : public testing::Test {
 protected:
  int32_t Run(api::ApiId id, Request& req) {
    reply_.assign(1024, 0);
    wire::Decoder in(req.body.data(), req.enc.size());
    out_ = wire::Encoder(reply_.data(), reply_.size());
    return Dispatch(id, in, out_, ctx_);
  }
  template <typename T>
  T Out(int index) {
    wire::Decoder d(reply_.data(), out_.size());
    const char* data = nullptr;
    uint64_t n = 0;
    for (int i = 0; i <= index; ++i) EXPECT_TRUE(d.GetBytes(&data, &n));
    T v{};
    EXPECT_EQ(n, sizeof(T));
    std::memcpy(&v, data, sizeof(T));
    return v;
  }

  // Dispatches a request encoded from its struct (api/hook_structs.h).
  template <typename Struct>
  int32_t RunStruct(api::ApiId id, const Struct& request) {
    Request r;
    request.Encode(r.enc);
    return Run(id, r);
  }
  // A stream created through the dispatcher: its virtual handle.
  uint64_t CreateStream(unsigned int flags) {
    Request create;
    create.enc.PutFlag(true);
    create.enc.Put(flags);
    EXPECT_EQ(Run(api::ApiId::cudaStreamCreateWithFlags, create), cudaSuccess);
    return Out<uint64_t>(0);
  }

  FakeBackend backend_;
  HandleTable handles_;
  DispatchContext ctx_{&backend_, &handles_, nullptr, 0};
  std::vector<char> reply_;
  wire::Encoder out_;
};

TEST_F(DispatchTest, DecodesArgumentsAndReturnsOutValues) {
  Request r;
  r.enc.PutFlag(true);
  r.enc.Put(size_t{4096});
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, r), cudaSuccess);
  EXPECT_EQ(backend_.last_size, 4096u);
  EXPECT_EQ(Out<uint64_t>(0), 0x200000001000ull);
}

TEST_F(DispatchTest, StreamsAreVirtualizedAndTranslatedBack) {
  Request create;
  create.enc.PutFlag(true);
  create.enc.Put(1u);  // cudaStreamNonBlocking
  ASSERT_EQ(Run(api::ApiId::cudaStreamCreateWithFlags, create), cudaSuccess);
  EXPECT_EQ(backend_.last_flags, 1u);
  const auto virtual_stream = Out<cudaStream_t>(0);
  EXPECT_NE(reinterpret_cast<uint64_t>(virtual_stream), 0xabc1u) << "backend handle leaked";

  Request sync;
  sync.enc.Put(virtual_stream);
  ASSERT_EQ(Run(api::ApiId::cudaStreamSynchronize, sync), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_stream), 0xabc1u);

  Request destroy;
  destroy.enc.Put(virtual_stream);
  ASSERT_EQ(Run(api::ApiId::cudaStreamDestroy, destroy), cudaSuccess);
  // The destroyed handle no longer translates: the native error, no backend call.
  const int calls = backend_.calls;
  EXPECT_EQ(Run(api::ApiId::cudaStreamSynchronize, sync), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(backend_.calls, calls);
}

// The structs the shim's hand-written hooks of SHIM_HOOK rows fill
// (api/hook_structs.h, derived from the rows' parameters) are what the
// generated dispatcher reads, and its reply is what they decode.
TEST_F(DispatchTest, ShimHookStructsAreWhatTheDispatcherReads) {
  const uint64_t stream = CreateStream(0);

  hooks::cudaStreamBeginCaptureRequest b;
  b.stream = stream;
  b.mode = cudaStreamCaptureModeThreadLocal;
  ASSERT_EQ(RunStruct(api::ApiId::cudaStreamBeginCapture, b), cudaSuccess);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_stream), 0xabc1u);
  EXPECT_EQ(backend_.last_capture_mode, cudaStreamCaptureModeThreadLocal);

  hooks::cudaStreamEndCaptureRequest e;
  e.stream = stream;
  e.pGraph = true;
  ASSERT_EQ(RunStruct(api::ApiId::cudaStreamEndCapture, e), cudaSuccess);
  hooks::cudaStreamEndCaptureReply reply;
  wire::Decoder in(reply_.data(), out_.size());
  ASSERT_TRUE(reply.Decode(in, e));
  EXPECT_EQ(in.remaining(), 0u);
  uint64_t graph = 0;
  ASSERT_EQ(reply.pGraph.CopyTo(&graph, sizeof(graph)), sizeof(graph));
  EXPECT_NE(graph, 0u);
  EXPECT_NE(graph, 0x6au) << "backend handle leaked";

  // A mode outside the enumeration never reaches the backend.
  const int calls = backend_.calls;
  b.mode = 77;
  EXPECT_EQ(RunStruct(api::ApiId::cudaStreamBeginCapture, b), cudaErrorInvalidValue);
  EXPECT_EQ(backend_.calls, calls);
}

// A null_ok handle parameter: null reaches the backend as null (an RNN
// without dropout) and comes back null; a live handle of the kind is
// translated both ways; anything else is CUDNN_STATUS_BAD_PARAM before the
// backend.
TEST_F(DispatchTest, OptionalHandlesPassNullAndTranslateTheRest) {
  auto create = [&](api::ApiId id) {
    Request r;
    r.enc.PutFlag(true);
    EXPECT_EQ(Run(id, r), CUDNN_STATUS_SUCCESS);
    return Out<uint64_t>(0);
  };
  const uint64_t rnn = create(api::ApiId::cudnnCreateRNNDescriptor);
  const uint64_t dropout = create(api::ApiId::cudnnCreateDropoutDescriptor);
  EXPECT_NE(dropout, 0xd0u) << "backend handle leaked";
  auto set = [&](uint64_t dropout_arg) {
    Request r;
    r.enc.Put(rnn);
    r.enc.Put(CUDNN_RNN_ALGO_STANDARD);
    r.enc.Put(CUDNN_LSTM);
    r.enc.Put(CUDNN_RNN_DOUBLE_BIAS);
    r.enc.Put(CUDNN_UNIDIRECTIONAL);
    r.enc.Put(CUDNN_LINEAR_INPUT);
    r.enc.Put(CUDNN_DATA_FLOAT);
    r.enc.Put(CUDNN_DATA_FLOAT);
    r.enc.Put(CUDNN_DEFAULT_MATH);
    for (int32_t v : {8, 16, 16, 2}) r.enc.Put(v);
    r.enc.Put(dropout_arg);
    r.enc.Put(uint32_t{0});
    return Run(api::ApiId::cudnnSetRNNDescriptor_v8, r);
  };
  auto get_dropout = [&]() {
    Request r;
    r.enc.Put(rnn);
    for (int i = 0; i < 14; ++i) r.enc.PutFlag(true);
    EXPECT_EQ(Run(api::ApiId::cudnnGetRNNDescriptor_v8, r), CUDNN_STATUS_SUCCESS);
    return Out<uint64_t>(12);
  };
  backend_.rnn_dropout = reinterpret_cast<cudnnDropoutDescriptor_t>(0x1);
  ASSERT_EQ(set(0), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(backend_.rnn_dropout, nullptr);
  EXPECT_EQ(get_dropout(), 0u) << "a null the library wrote became a handle";
  ASSERT_EQ(set(dropout), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.rnn_dropout), 0xd0u);
  EXPECT_EQ(get_dropout(), dropout);
  const int calls = backend_.calls;
  EXPECT_EQ(set(0x1234), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(set(rnn), CUDNN_STATUS_BAD_PARAM) << "an RNN descriptor passed as a dropout one";
  EXPECT_EQ(backend_.calls, calls);
}

TEST_F(DispatchTest, MalformedRequestsNeverReachTheBackend) {
  Request truncated;
  truncated.enc.PutFlag(true);  // size_t missing
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, truncated), cudaErrorInvalidValue);
  Request trailing;
  trailing.enc.PutFlag(true);
  trailing.enc.Put(size_t{1});
  trailing.enc.Put(uint32_t{7});  // extra bytes
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, trailing), cudaErrorInvalidValue);
  Request bad_flag;
  bad_flag.enc.Put(uint8_t{9});
  bad_flag.enc.Put(size_t{1});
  EXPECT_EQ(Run(api::ApiId::cudaMalloc, bad_flag), cudaErrorInvalidValue);
  EXPECT_EQ(backend_.calls, 0);
}

// Enum arguments are checked against their enumeration's range at decode
// (the agent never holds an out-of-range enum) and answered with the real
// library's code.
TEST_F(DispatchTest, OutOfRangeEnumsGetTheNativeCodeAndNeverReachTheBackend) {
  Request limit;
  limit.enc.PutFlag(true);
  limit.enc.Put(int32_t{1 << 24});
  EXPECT_EQ(Run(api::ApiId::cudaDeviceGetLimit, limit), cudaErrorUnsupportedLimit);
  Request below;
  below.enc.PutFlag(true);
  below.enc.Put(int32_t{-1});
  EXPECT_EQ(Run(api::ApiId::cudaDeviceGetLimit, below), cudaErrorUnsupportedLimit);
  Request attr;
  attr.enc.PutFlag(true);
  attr.enc.Put(int32_t{0});  // below cudaDevAttrMaxThreadsPerBlock
  attr.enc.Put(int32_t{0});
  EXPECT_EQ(Run(api::ApiId::cudaDeviceGetAttribute, attr), cudaErrorInvalidValue);
  EXPECT_EQ(backend_.calls, 0);
}

// Enums without a dense range (cublasComputeType_t, cudaDataType with its
// gaps checked by value, cuBLASLt attributes) are checked by the decoder
// too: a value the enum does not name is CUBLAS_STATUS_INVALID_VALUE before
// the backend, and the same request with a real value reaches it.
TEST_F(DispatchTest, SparseEnumsAreCheckedAtDecode) {
  auto desc = [&](int32_t compute, int32_t scale) {
    Request r;
    r.enc.Put(uint64_t{0});
    r.enc.PutFlag(true);
    r.enc.Put(compute);
    r.enc.Put(scale);
    return Run(api::ApiId::cublasLtMatmulDescCreate, r);
  };
  auto layout = [&](int32_t type) {
    Request r;
    r.enc.Put(uint64_t{0});
    r.enc.PutFlag(true);
    r.enc.Put(type);
    r.enc.Put(uint64_t{4});
    r.enc.Put(uint64_t{4});
    r.enc.Put(int64_t{4});
    return Run(api::ApiId::cublasLtMatrixLayoutCreate, r);
  };
  EXPECT_EQ(desc(66, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);  // between 65 and 68
  EXPECT_EQ(desc(CUBLAS_COMPUTE_32F, 34), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(desc(-1, CUDA_R_32F), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(layout(1 << 20), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(backend_.calls, 0);
  EXPECT_EQ(layout(CUDA_R_4F_E2M1), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(desc(CUBLAS_COMPUTE_64F_PEDANTIC, CUDA_R_64F), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(backend_.calls, 2);
  const auto d = Out<cublasLtMatmulDesc_t>(0);
  auto get = [&](int32_t attribute) {
    Request r;
    r.enc.Put(d);
    r.enc.Put(attribute);
    r.enc.PutFlag(true);
    r.enc.Put(uint64_t{4});
    r.enc.Put(uint64_t{4});
    r.enc.PutFlag(true);
    return Run(api::ApiId::cublasLtMatmulDescGetAttribute, r);
  };
  EXPECT_EQ(get(16), CUBLAS_STATUS_INVALID_VALUE);  // no CUBLASLT_MATMUL_DESC_ attribute is 16
  EXPECT_EQ(backend_.calls, 2);
  EXPECT_EQ(get(CUBLASLT_MATMUL_DESC_TRANSA), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(backend_.calls, 3);
}

// cuBLAS scalars travel as values (host pointer mode) or device addresses
// (device pointer mode); a request that disagrees with the backend's handle
// is refused before the backend could dereference it, and short scalar bytes
// are zero-padded rather than read past.
TEST_F(DispatchTest, CublasScalarsFollowTheHandlesPointerMode) {
  Request create;
  create.enc.PutFlag(true);
  ASSERT_EQ(Run(api::ApiId::cublasCreate_v2, create), CUBLAS_STATUS_SUCCESS);
  const auto handle = Out<cublasHandle_t>(0);
  auto dot = [&](bool device) {
    Request r;
    r.enc.Put(handle);
    r.enc.Put(3);
    r.enc.Put(static_cast<const float*>(nullptr));
    r.enc.Put(1);
    r.enc.Put(static_cast<const float*>(nullptr));
    r.enc.Put(1);
    r.enc.PutFlag(device);
    if (device) {
      r.enc.Put(uint64_t{0x200000002000ull});
    } else {
      r.enc.PutFlag(true);
    }
    return Run(api::ApiId::cublasSdot_v2, r);
  };
  // Host mode: the result comes back in the reply.
  EXPECT_EQ(dot(false), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Out<float>(0), 42.0f);
  const int calls = backend_.calls;
  EXPECT_EQ(dot(true), CUBLAS_STATUS_INVALID_VALUE) << "a device address for a host-mode handle";
  backend_.device_pointers = true;
  EXPECT_EQ(dot(false), CUBLAS_STATUS_INVALID_VALUE) << "a host result for a device-mode handle";
  EXPECT_EQ(backend_.calls, calls);
  EXPECT_EQ(dot(true), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_result), 0x200000002000ull);

  backend_.device_pointers = false;
  Request gemv;
  gemv.enc.Put(handle);
  gemv.enc.Put(CUBLAS_OP_N);
  gemv.enc.Put(2);
  gemv.enc.Put(2);
  gemv.enc.PutFlag(false);
  gemv.enc.PutBytes("\x01", 1);  // alpha: 1 byte of a float
  gemv.enc.Put(static_cast<const float*>(nullptr));
  gemv.enc.Put(2);
  gemv.enc.Put(static_cast<const float*>(nullptr));
  gemv.enc.Put(1);
  gemv.enc.PutFlag(false);
  const float beta = 2.5f;
  gemv.enc.PutBytes(&beta, sizeof(beta));
  gemv.enc.Put(static_cast<float*>(nullptr));
  gemv.enc.Put(1);
  ASSERT_EQ(Run(api::ApiId::cublasSgemv_v2, gemv), CUBLAS_STATUS_SUCCESS);
  float one_byte = 0;
  std::memcpy(&one_byte, "\x01\0\0\0", 4);
  EXPECT_EQ(backend_.last_scalars[0], one_byte) << "short scalar not zero-padded";
  EXPECT_EQ(backend_.last_scalars[1], 2.5f);
}

// A driver row: its CUstream is a virtual stream like the runtime's; an
// unknown one, a short body or trailing bytes get the driver's codes and
// never reach the backend.
TEST_F(DispatchTest, DriverRowsTranslateStreamsAndRefuseMalformedRequests) {
  const auto virtual_stream = reinterpret_cast<CUstream>(CreateStream(1u));
  auto write = [&](CUstream s, bool truncated, bool trailing) {
    Request r;
    r.enc.Put(s);
    r.enc.Put(CUdeviceptr{0x200000001000ull});
    r.enc.Put(cuuint32_t{5});
    if (!truncated) r.enc.Put(1u);
    if (trailing) r.enc.Put(uint8_t{0});
    return Run(api::ApiId::cuStreamWriteValue32_v2, r);
  };
  const int calls = backend_.calls;
  EXPECT_EQ(write(reinterpret_cast<CUstream>(0x7e00000000000999ull), false, false),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(write(virtual_stream, true, false), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(write(virtual_stream, false, true), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(backend_.calls, calls);
  ASSERT_EQ(write(virtual_stream, false, false), CUDA_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_stream), 0xabc1u);
  EXPECT_EQ(backend_.last_size, 0x200000001000ull);
  EXPECT_EQ(backend_.last_flags, 6u);
  // A row the backend does not implement answers the driver's not-supported.
  Request memset;
  memset.enc.Put(CUdeviceptr{0x200000001000ull});
  memset.enc.Put(0u);
  memset.enc.Put(size_t{4});
  EXPECT_EQ(Run(api::ApiId::cuMemsetD32_v2, memset), CUDA_ERROR_NOT_SUPPORTED);
}

// cublasLtMatmul's alpha/beta follow the matmul descriptor's pointer mode
// (its second parameter, pointer_mode_from), not the library handle's.
TEST_F(DispatchTest, CublasLtScalarsFollowTheMatmulDescriptorsPointerMode) {
  Request create;
  create.enc.PutFlag(true);
  ASSERT_EQ(Run(api::ApiId::cublasLtCreate, create), CUBLAS_STATUS_SUCCESS);
  const auto handle = Out<cublasLtHandle_t>(0);
  Request desc_create;
  desc_create.enc.Put(uint64_t{0});  // no id assigned by the shim
  desc_create.enc.PutFlag(true);
  desc_create.enc.Put(CUBLAS_COMPUTE_32F);
  desc_create.enc.Put(CUDA_R_32F);
  ASSERT_EQ(Run(api::ApiId::cublasLtMatmulDescCreate, desc_create), CUBLAS_STATUS_SUCCESS);
  const auto desc = Out<cublasLtMatmulDesc_t>(0);
  Request layout_create;
  layout_create.enc.Put(uint64_t{0});
  layout_create.enc.PutFlag(true);
  layout_create.enc.Put(CUDA_R_32F);
  layout_create.enc.Put(uint64_t{4});
  layout_create.enc.Put(uint64_t{4});
  layout_create.enc.Put(int64_t{4});
  ASSERT_EQ(Run(api::ApiId::cublasLtMatrixLayoutCreate, layout_create), CUBLAS_STATUS_SUCCESS);
  const auto layout = Out<cublasLtMatrixLayout_t>(0);
  auto matmul = [&](bool device, cublasLtMatmulDesc_t d, cublasLtHandle_t lt = nullptr) {
    Request r;
    r.enc.Put(lt != nullptr ? lt : handle);
    r.enc.Put(d);
    const float alpha = 1.5f, beta = -2.0f;
    auto scalar = [&](const float* v, uint64_t address) {
      r.enc.PutFlag(device);
      if (device) {
        r.enc.Put(address);
      } else {
        r.enc.PutBytes(v, sizeof(*v));
      }
    };
    scalar(&alpha, 0x200000003000ull);
    r.enc.Put(static_cast<const void*>(nullptr));
    r.enc.Put(layout);
    r.enc.Put(static_cast<const void*>(nullptr));
    r.enc.Put(layout);
    scalar(&beta, 0x200000003004ull);
    r.enc.Put(static_cast<const void*>(nullptr));
    r.enc.Put(layout);
    r.enc.Put(static_cast<void*>(nullptr));
    r.enc.Put(layout);
    r.enc.PutBytes(nullptr, 0);  // no algorithm
    r.enc.Put(static_cast<void*>(nullptr));
    r.enc.Put(size_t{0});
    r.enc.Put(static_cast<cudaStream_t>(nullptr));
    return Run(api::ApiId::cublasLtMatmul, r);
  };
  ASSERT_EQ(matmul(false, desc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(backend_.last_lt, std::make_pair(uint64_t{0x17}, uint64_t{0xde5c}));
  EXPECT_EQ(backend_.last_scalars[0], 1.5f);
  EXPECT_EQ(backend_.last_scalars[1], -2.0f);
  const int calls = backend_.calls;
  EXPECT_EQ(matmul(true, desc), CUBLAS_STATUS_INVALID_VALUE) << "device scalars, host-mode descriptor";
  backend_.lt_device_pointers = true;
  EXPECT_EQ(matmul(false, desc), CUBLAS_STATUS_INVALID_VALUE) << "host scalars, device-mode descriptor";
  EXPECT_EQ(backend_.calls, calls);
  ASSERT_EQ(matmul(true, desc), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(reinterpret_cast<uint64_t>(backend_.last_alpha), 0x200000003000ull);
  // A descriptor that is no handle: cuBLASLt's INVALID_VALUE, not the
  // library handle's NOT_INITIALIZED.
  EXPECT_EQ(matmul(true, reinterpret_cast<cublasLtMatmulDesc_t>(0x999)), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(backend_.calls, calls + 1);
  // A cuBLAS handle in the cuBLASLt handle's place is translated as one;
  // anything else is not initialized.
  Request blas_create;
  blas_create.enc.PutFlag(true);
  ASSERT_EQ(Run(api::ApiId::cublasCreate_v2, blas_create), CUBLAS_STATUS_SUCCESS);
  const auto blas = Out<cublasLtHandle_t>(0);
  ASSERT_EQ(matmul(true, desc, blas), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(backend_.last_lt.first, uint64_t{0xb1a5});
  EXPECT_EQ(matmul(true, desc, reinterpret_cast<cublasLtHandle_t>(desc)), CUBLAS_STATUS_NOT_INITIALIZED)
      << "a descriptor is no handle";
}

// A getter's OUT buffer is as long as its sizeInBytes says: a request whose
// buffer is shorter (the backend would write past it) is refused.
TEST_F(DispatchTest, OutBuffersMustBeAsLongAsTheirLengthSays) {
  Request desc_create;
  desc_create.enc.Put(uint64_t{0});  // no id assigned by the shim
  desc_create.enc.PutFlag(true);
  desc_create.enc.Put(CUBLAS_COMPUTE_32F);
  desc_create.enc.Put(CUDA_R_32F);
  ASSERT_EQ(Run(api::ApiId::cublasLtMatmulDescCreate, desc_create), CUBLAS_STATUS_SUCCESS);
  const auto desc = Out<cublasLtMatmulDesc_t>(0);
  auto get = [&](uint64_t buffer, size_t size_in_bytes) {
    Request r;
    r.enc.Put(desc);
    r.enc.Put(CUBLASLT_MATMUL_DESC_TRANSA);
    r.enc.PutFlag(true);
    r.enc.Put(buffer);
    r.enc.Put(size_in_bytes);
    r.enc.PutFlag(true);
    return Run(api::ApiId::cublasLtMatmulDescGetAttribute, r);
  };
  const int calls = backend_.calls;
  EXPECT_EQ(get(4, 4096), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(get(8, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(backend_.calls, calls);
  EXPECT_EQ(get(4, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(backend_.calls, calls + 1);
}

TEST_F(DispatchTest, EveryForwardedRowHasADispatcher) {
  // A one-byte garbage body: every dispatcher must refuse it with the
  // library's invalid-argument error, and none may be missing.
  for (int i = 1; i < api::kApiCount; ++i) {
    const api::ApiTraits& t = api::Traits(static_cast<uint32_t>(i));
    Request r;
    r.enc.Put(uint8_t{0xee});
    const int32_t status = Run(static_cast<api::ApiId>(i), r);
    if (t.dispatched) {
      EXPECT_NE(status, kNoDispatcher) << t.name;
      EXPECT_NE(status, 0) << t.name << " accepted a garbage request";
    } else {
      EXPECT_EQ(status, kNoDispatcher) << t.name;
    }
  }
  EXPECT_EQ(backend_.calls, 0);
}

}  // namespace
}  // namespace agent
}  // namespace revenant
