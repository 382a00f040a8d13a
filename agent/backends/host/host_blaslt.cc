// The cuBLASLt rows on the host backend: plain objects for the handles and
// descriptors, OpenBLAS for cublasLtMatmul on the plain layouts
// (host_backend.h says what runs and what is refused).
#include <cblas.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "agent/backends/host/host_backend.h"
#include "agent/backends/host/host_blas_internal.h"
#include "api/blaslt_attrs.h"
#include "common/logging.h"

namespace revenant {
namespace agent {
namespace host {
namespace {

using blas_internal::Aligned;
using blas_internal::Gemm1;
using blas_internal::kLog;
using blas_internal::MatrixBytes;
using blas_internal::RefuseTypes;
using blas_internal::Scalar;
using blas_internal::SingleThreadedBlas;
using blas_internal::ToCblas;
using blas_internal::Unreachable;

using api::FindLtAttr;
using api::kLtLayoutAttrs;
using api::kLtMatmulDescAttrs;
using api::kLtPreferenceAttrs;
using AttrSpec = api::LtAttr;

template <size_t N>
void Defaults(const AttrSpec (&specs)[N], std::map<int, std::vector<char>>* out) {
  for (const AttrSpec& s : specs) {
    std::vector<char>& v = (*out)[s.id];
    v.resize(s.size);
    std::memcpy(v.data(), &s.value, s.size);  // little-endian: the low bytes
  }
}

cublasStatus_t Invalid(const char* api, const std::string& why) {
  REVENANT_LOG(DEBUG, kLog) << api << ": " << why << ": CUBLAS_STATUS_INVALID_VALUE";
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t NotSupported(const char* api, const std::string& what) {
  return RefuseTypes(absl::StrCat(api, ": ", what), "cuBLASLt matmuls on column-major fp32/fp64 "
                     "matrices with the DEFAULT, RELU, BIAS, RELU_BIAS, GELU and GELU_BIAS epilogues");
}

// The epilogues cuBLASLt knows (the others it answers INVALID_VALUE).
bool KnownEpilogue(int64_t e) {
  switch (e) {
    case CUBLASLT_EPILOGUE_DEFAULT: case CUBLASLT_EPILOGUE_RELU: case CUBLASLT_EPILOGUE_RELU_AUX:
    case CUBLASLT_EPILOGUE_BIAS: case CUBLASLT_EPILOGUE_RELU_BIAS:
    case CUBLASLT_EPILOGUE_RELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DRELU:
    case CUBLASLT_EPILOGUE_DRELU_BGRAD: case CUBLASLT_EPILOGUE_GELU:
    case CUBLASLT_EPILOGUE_GELU_AUX: case CUBLASLT_EPILOGUE_GELU_BIAS:
    case CUBLASLT_EPILOGUE_GELU_AUX_BIAS: case CUBLASLT_EPILOGUE_DGELU:
    case CUBLASLT_EPILOGUE_DGELU_BGRAD: case CUBLASLT_EPILOGUE_BGRADA:
    case CUBLASLT_EPILOGUE_BGRADB:
      return true;
    default:
      return false;
  }
}

// The algorithm the host backend offers (the first word of its opaque data).
constexpr uint64_t kHostAlgo = 0x726576656e616e74ull;  // "revenant"

// cuBLASLt's GELU: the tanh approximation.
template <typename T>
T Gelu(T x) {
  const T c = static_cast<T>(0.7978845608028654);  // sqrt(2 / pi)
  return static_cast<T>(0.5) * x *
         (static_cast<T>(1) + std::tanh(c * (x + static_cast<T>(0.044715) * x * x * x)));
}

}  // namespace

// What a checked cublasLtMatmul runs.
struct HostBackend::LtPlan {
  cudaDataType type = CUDA_R_32F;
  cublasOperation_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  int m = 0, n = 0, k = 0;
  int rows_a = 0, cols_a = 0, rows_b = 0, cols_b = 0;
  int lda = 0, ldb = 0, ldc = 0, ldd = 0;
  long long stride_a = 0, stride_b = 0, stride_c = 0, stride_d = 0;
  int batch = 1;
  bool relu = false, gelu = false, bias = false;
  const void* bias_pointer = nullptr;
  long long bias_stride = 0;
  bool device_scalars = false;
};

// An attribute's value, sign-extended from its size.
int64_t HostBackend::LtAttr(const LtObject& o, int id) {
  auto it = o.attributes.find(id);
  if (it == o.attributes.end()) return 0;
  const std::vector<char>& v = it->second;
  switch (v.size()) {
    case 1: { int8_t x; std::memcpy(&x, v.data(), 1); return x; }
    case 4: { int32_t x; std::memcpy(&x, v.data(), 4); return x; }
    case 8: { int64_t x; std::memcpy(&x, v.data(), 8); return x; }
    default: return 0;
  }
}

const HostBackend::LtObject* HostBackend::LtFindLocked(api::HandleKind kind, const void* p) const {
  auto it = lt_objects_.find(p);
  if (p == nullptr || it == lt_objects_.end() || it->second->kind != kind) return nullptr;
  return it->second.get();
}

bool HostBackend::LtHandleLiveLocked(const void* handle) const {
  // A cuBLAS handle serves as a cuBLASLt handle too, as cuBLAS documents.
  return LtFindLocked(api::HandleKind::kLtHandle, handle) != nullptr ||
         blas_handles_.contains(static_cast<BlasHandle*>(const_cast<void*>(handle)));
}

bool HostBackend::LtDevicePointers(uint64_t desc) {
  std::lock_guard<std::mutex> lock(mu_);
  const LtObject* o =
      LtFindLocked(api::HandleKind::kLtMatmulDesc, reinterpret_cast<const void*>(desc));
  return o != nullptr && LtAttr(*o, CUBLASLT_MATMUL_DESC_POINTER_MODE) == CUBLASLT_POINTER_MODE_DEVICE;
}

cublasStatus_t HostBackend::LtCreate(api::HandleKind kind, void** out,
                                     const std::vector<std::pair<int, int64_t>>& init) {
  if (out == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  SingleThreadedBlas();
  auto o = std::make_unique<LtObject>();
  o->kind = kind;
  switch (kind) {
    case api::HandleKind::kLtMatmulDesc: Defaults(kLtMatmulDescAttrs, &o->attributes); break;
    case api::HandleKind::kLtMatrixLayout: Defaults(kLtLayoutAttrs, &o->attributes); break;
    case api::HandleKind::kLtMatmulPreference: Defaults(kLtPreferenceAttrs, &o->attributes); break;
    default: break;
  }
  for (const auto& [id, value] : init) {
    std::vector<char>& v = o->attributes[id];
    std::memcpy(v.data(), &value, v.size());
  }
  std::lock_guard<std::mutex> lock(mu_);
  *out = o.get();
  lt_objects_[o.get()] = std::move(o);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::LtDestroy(api::HandleKind kind, void* object) {
  // Queued matmuls hold copies of what they need: nothing waits.
  std::lock_guard<std::mutex> lock(mu_);
  if (LtFindLocked(kind, object) == nullptr) {
    return kind == api::HandleKind::kLtHandle ? CUBLAS_STATUS_NOT_INITIALIZED
                                              : CUBLAS_STATUS_INVALID_VALUE;
  }
  lt_objects_.erase(object);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::LtSetAttribute(api::HandleKind kind, void* object, int attr,
                                           const void* buf, size_t size) {
  const char* api = "cuBLASLt set attribute";
  const AttrSpec* spec = FindLtAttr(kind, attr);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = lt_objects_.find(object);
  if (object == nullptr || it == lt_objects_.end() || it->second->kind != kind) {
    return Invalid(api, "not a live descriptor");
  }
  if (spec == nullptr) return Invalid(api, absl::StrCat("unknown attribute ", attr));
  if (buf == nullptr || size != spec->size) {
    return Invalid(api, absl::StrCat("attribute ", attr, " takes ", spec->size, " bytes, not ",
                                     size));
  }
  // Values are checked where they are used (the heuristic, the matmul), as
  // cuBLASLt does.
  std::memcpy(it->second->attributes[attr].data(), buf, size);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::LtGetAttribute(api::HandleKind kind, void* object, int attr,
                                           void* buf, size_t size, size_t* written) {
  const char* api = "cuBLASLt get attribute";
  const AttrSpec* spec = FindLtAttr(kind, attr);
  std::lock_guard<std::mutex> lock(mu_);
  const LtObject* o = LtFindLocked(kind, object);
  if (o == nullptr) return Invalid(api, "not a live descriptor");
  if (spec == nullptr) return Invalid(api, absl::StrCat("unknown attribute ", attr));
  if (size == 0) {
    // The size the attribute needs.
    if (written == nullptr) return Invalid(api, "no size asked for and none to write");
    *written = spec->size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size != spec->size) {
    return Invalid(api, absl::StrCat("attribute ", attr, " has ", spec->size, " bytes, not ", size));
  }
  std::memcpy(buf, o->attributes.at(attr).data(), spec->size);
  if (written != nullptr) *written = spec->size;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::LtPlanLocked(const char* api, cublasLtMatmulDesc_t desc,
                                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                                         LtPlan* plan) {
  const LtObject* op = LtFindLocked(api::HandleKind::kLtMatmulDesc, desc);
  if (op == nullptr) return Invalid(api, "not a live matmul descriptor");
  const LtObject* layouts[4] = {};
  const void* given[4] = {a, b, c, d};
  for (int i = 0; i < 4; ++i) {
    layouts[i] = LtFindLocked(api::HandleKind::kLtMatrixLayout, given[i]);
    if (layouts[i] == nullptr) return Invalid(api, "not a live matrix layout");
  }
  const LtObject &la = *layouts[0], &lb = *layouts[1], &lc = *layouts[2], &ld = *layouts[3];
  // Types: A, B, C, D and the scale type alike, fp32 or fp64.
  const int64_t type = LtAttr(la, CUBLASLT_MATRIX_LAYOUT_TYPE);
  const int64_t compute = LtAttr(*op, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE);
  const bool fp32 = type == CUDA_R_32F &&
                    (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC);
  const bool fp64 = type == CUDA_R_64F &&
                    (compute == CUBLAS_COMPUTE_64F || compute == CUBLAS_COMPUTE_64F_PEDANTIC);
  if ((!fp32 && !fp64) || LtAttr(lb, CUBLASLT_MATRIX_LAYOUT_TYPE) != type ||
      LtAttr(lc, CUBLASLT_MATRIX_LAYOUT_TYPE) != type ||
      LtAttr(ld, CUBLASLT_MATRIX_LAYOUT_TYPE) != type ||
      LtAttr(*op, CUBLASLT_MATMUL_DESC_SCALE_TYPE) != type) {
    return NotSupported(
        api, absl::StrCat("types A ", type, ", B ", LtAttr(lb, CUBLASLT_MATRIX_LAYOUT_TYPE), ", C ",
                          LtAttr(lc, CUBLASLT_MATRIX_LAYOUT_TYPE), ", D ",
                          LtAttr(ld, CUBLASLT_MATRIX_LAYOUT_TYPE), ", scale ",
                          LtAttr(*op, CUBLASLT_MATMUL_DESC_SCALE_TYPE), ", compute ", compute));
  }
  plan->type = static_cast<cudaDataType>(type);
  for (const LtObject* l : layouts) {
    if (LtAttr(*l, CUBLASLT_MATRIX_LAYOUT_ORDER) != CUBLASLT_ORDER_COL ||
        LtAttr(*l, CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET) != 0) {
      return NotSupported(api, "memory orders other than CUBLASLT_ORDER_COL");
    }
  }
  if (cublasStatus_t s = LtPlanDescriptor(api, *op, type, plan)) return s;
  return LtPlanShapes(api, layouts, plan);
}

cublasStatus_t HostBackend::LtPlanDescriptor(const char* api, const LtObject& op, int64_t type,
                                             LtPlan* plan) {
  // The descriptor: what is interpreted, and every other attribute at its
  // default.
  for (const AttrSpec& s : kLtMatmulDescAttrs) {
    switch (s.id) {
      case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE:
      case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      case CUBLASLT_MATMUL_DESC_TRANSA:
      case CUBLASLT_MATMUL_DESC_TRANSB:
      case CUBLASLT_MATMUL_DESC_EPILOGUE:
      case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE:
      case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET:  // a performance hint
      case CUBLASLT_MATMUL_DESC_FAST_ACCUM:       // fp8 only
        continue;
      default:
        if (LtAttr(op, s.id) != s.value) {
          return NotSupported(api, absl::StrCat("matmul descriptor attribute ", s.id,
                                                " other than its default"));
        }
    }
  }
  const int64_t bias_type = LtAttr(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE);
  if (bias_type != -1 && bias_type != type) {
    return NotSupported(api, "a bias of another type than D's");
  }
  const int64_t epilogue = LtAttr(op, CUBLASLT_MATMUL_DESC_EPILOGUE);
  switch (epilogue) {
    case CUBLASLT_EPILOGUE_DEFAULT: break;
    case CUBLASLT_EPILOGUE_RELU: plan->relu = true; break;
    case CUBLASLT_EPILOGUE_BIAS: plan->bias = true; break;
    case CUBLASLT_EPILOGUE_RELU_BIAS: plan->relu = plan->bias = true; break;
    case CUBLASLT_EPILOGUE_GELU: plan->gelu = true; break;
    case CUBLASLT_EPILOGUE_GELU_BIAS: plan->gelu = plan->bias = true; break;
    default:
      return KnownEpilogue(epilogue) ? NotSupported(api, absl::StrCat("epilogue ", epilogue))
                                     : Invalid(api, absl::StrCat("unknown epilogue ", epilogue));
  }
  plan->bias_pointer =
      reinterpret_cast<const void*>(LtAttr(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER));
  plan->bias_stride = LtAttr(op, CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE);
  const int64_t pointer_mode = LtAttr(op, CUBLASLT_MATMUL_DESC_POINTER_MODE);
  if (pointer_mode != CUBLASLT_POINTER_MODE_HOST && pointer_mode != CUBLASLT_POINTER_MODE_DEVICE) {
    return pointer_mode >= CUBLASLT_POINTER_MODE_DEVICE_VECTOR &&
                   pointer_mode <= CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST
               ? NotSupported(api, "the vector pointer modes")
               : Invalid(api, absl::StrCat("unknown pointer mode ", pointer_mode));
  }
  plan->device_scalars = pointer_mode == CUBLASLT_POINTER_MODE_DEVICE;
  const int64_t transa = LtAttr(op, CUBLASLT_MATMUL_DESC_TRANSA);
  const int64_t transb = LtAttr(op, CUBLASLT_MATMUL_DESC_TRANSB);
  if (transa < CUBLAS_OP_N || transa > CUBLAS_OP_C || transb < CUBLAS_OP_N || transb > CUBLAS_OP_C) {
    return Invalid(api, "unknown operation");
  }
  plan->transa = static_cast<cublasOperation_t>(transa);
  plan->transb = static_cast<cublasOperation_t>(transb);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::LtPlanShapes(const char* api, const LtObject* const layouts[4],
                                         LtPlan* plan) {
  const LtObject& ld = *layouts[3];
  // Shapes: op(A) is m x k, op(B) k x n, C and D m x n.
  uint64_t dims[4][2];
  int64_t lds[4];
  for (int i = 0; i < 4; ++i) {
    dims[i][0] = static_cast<uint64_t>(LtAttr(*layouts[i], CUBLASLT_MATRIX_LAYOUT_ROWS));
    dims[i][1] = static_cast<uint64_t>(LtAttr(*layouts[i], CUBLASLT_MATRIX_LAYOUT_COLS));
    lds[i] = LtAttr(*layouts[i], CUBLASLT_MATRIX_LAYOUT_LD);
    if (dims[i][0] > INT_MAX || dims[i][1] > INT_MAX || lds[i] > INT_MAX) {
      return NotSupported(api, "matrices of more than INT_MAX rows, columns or leading dimension");
    }
    if (lds[i] < 1 || static_cast<uint64_t>(lds[i]) < dims[i][0]) {
      return Invalid(api, "a leading dimension below the rows");
    }
  }
  plan->m = static_cast<int>(dims[3][0]);
  plan->n = static_cast<int>(dims[3][1]);
  plan->rows_a = static_cast<int>(dims[0][0]);
  plan->cols_a = static_cast<int>(dims[0][1]);
  plan->rows_b = static_cast<int>(dims[1][0]);
  plan->cols_b = static_cast<int>(dims[1][1]);
  const bool ta = plan->transa != CUBLAS_OP_N, tb = plan->transb != CUBLAS_OP_N;
  plan->k = ta ? plan->rows_a : plan->cols_a;
  if ((ta ? plan->cols_a : plan->rows_a) != plan->m ||
      (tb ? plan->cols_b : plan->rows_b) != plan->k ||
      (tb ? plan->rows_b : plan->cols_b) != plan->n || dims[2][0] != dims[3][0] ||
      dims[2][1] != dims[3][1]) {
    return Invalid(api, "the layouts' shapes do not fit op(A) * op(B) = D");
  }
  plan->lda = static_cast<int>(lds[0]);
  plan->ldb = static_cast<int>(lds[1]);
  plan->ldc = static_cast<int>(lds[2]);
  plan->ldd = static_cast<int>(lds[3]);
  // Batches: the same count everywhere, strides >= 0.
  plan->batch = static_cast<int>(LtAttr(ld, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT));
  if (plan->batch < 1) return Invalid(api, "a batch count below 1");
  long long* strides[4] = {&plan->stride_a, &plan->stride_b, &plan->stride_c, &plan->stride_d};
  for (int i = 0; i < 4; ++i) {
    if (LtAttr(*layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) != plan->batch) {
      return Invalid(api, "layouts of different batch counts");
    }
    *strides[i] = LtAttr(*layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET);
    if (*strides[i] < 0) return NotSupported(api, "negative batch strides");
  }
  if (plan->bias_stride < 0) return NotSupported(api, "a negative bias batch stride");
  return CUBLAS_STATUS_SUCCESS;
}

template <typename T>
cublasStatus_t HostBackend::LtMatmul(const LtPlan& p, const void* alpha_p, const void* a_p,
                                     const void* b_p, const void* beta_p, const void* c_p,
                                     void* d_p, cudaStream_t stream) {
  const char* api = "cublasLtMatmul";
  if (p.bias && p.bias_pointer == nullptr) return Invalid(api, "a bias epilogue without a bias");
  if (c_p == d_p && (p.ldc != p.ldd || p.stride_c != p.stride_d)) {
    return Invalid(api, "C is D (in place) with another layout");
  }
  Scalar<T> alpha, beta;
  if (p.device_scalars) {
    alpha.device = static_cast<const T*>(alpha_p);
    beta.device = static_cast<const T*>(beta_p);
  } else {
    std::memcpy(&alpha.value, alpha_p, sizeof(T));
    std::memcpy(&beta.value, beta_p, sizeof(T));
  }
  if (p.m == 0 || p.n == 0) return CUBLAS_STATUS_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto reach = [&](const void* ptr, uint64_t n) {
      return n == 0 || (Aligned<T>(ptr) && DeviceAccessible(ptr, n));
    };
    if (p.device_scalars && (!reach(alpha_p, sizeof(T)) || !reach(beta_p, sizeof(T)))) {
      return Unreachable(api, "alpha/beta are not aligned device memory (pointer mode device)");
    }
    if (!reach(a_p, MatrixBytes<T>(p.rows_a, p.cols_a, p.lda, p.stride_a, p.batch)) ||
        !reach(b_p, MatrixBytes<T>(p.rows_b, p.cols_b, p.ldb, p.stride_b, p.batch)) ||
        !reach(c_p, MatrixBytes<T>(p.m, p.n, p.ldc, p.stride_c, p.batch)) ||
        !reach(d_p, MatrixBytes<T>(p.m, p.n, p.ldd, p.stride_d, p.batch))) {
      return Unreachable(api, "A, B, C or D is not aligned device memory of that size");
    }
    if (p.bias && !reach(p.bias_pointer, MatrixBytes<T>(p.m, 1, p.m, p.bias_stride, p.batch))) {
      return Unreachable(api, "the bias is not aligned device memory of that size");
    }
  }
  const LtPlan plan = p;
  const cudaError_t e = EnqueueFallible(stream, [plan, alpha, beta, a_p, b_p, c_p, d_p]() {
    const T al = alpha.Get(), be = beta.Get();
    for (int i = 0; i < plan.batch; ++i) {
      const T* a = static_cast<const T*>(a_p) + i * plan.stride_a;
      const T* b = static_cast<const T*>(b_p) + i * plan.stride_b;
      const T* c = static_cast<const T*>(c_p) + i * plan.stride_c;
      T* d = static_cast<T*>(d_p) + i * plan.stride_d;
      if (c != d && be != static_cast<T>(0)) {
        // D = alpha op(A) op(B) + beta C: C first into D (beta 0 reads no C).
        for (int j = 0; j < plan.n; ++j) {
          std::memmove(d + static_cast<long long>(j) * plan.ldd,
                       c + static_cast<long long>(j) * plan.ldc, sizeof(T) * plan.m);
        }
      }
      Gemm1(ToCblas(plan.transa), ToCblas(plan.transb), plan.m, plan.n, plan.k, al, a, plan.lda,
            b, plan.ldb, be, d, plan.ldd);
      if (!plan.bias && !plan.relu && !plan.gelu) continue;
      const T* bias =
          plan.bias ? static_cast<const T*>(plan.bias_pointer) + i * plan.bias_stride : nullptr;
      for (int j = 0; j < plan.n; ++j) {
        T* col = d + static_cast<long long>(j) * plan.ldd;
        for (int r = 0; r < plan.m; ++r) {
          T x = col[r];
          if (bias != nullptr) x += bias[r];
          if (plan.relu) x = x > static_cast<T>(0) ? x : static_cast<T>(0);
          if (plan.gelu) x = Gelu(x);
          col[r] = x;
        }
      }
    }
    return cudaSuccess;
  });
  return e == cudaSuccess ? CUBLAS_STATUS_SUCCESS : Unreachable(api, "the stream is gone");
}

// --- The rows -------------------------------------------------------------------

cublasStatus_t HostBackend::cublasLtCreate(cublasLtHandle_t* lightHandle) {
  return LtCreate(api::HandleKind::kLtHandle, reinterpret_cast<void**>(lightHandle), {});
}

cublasStatus_t HostBackend::cublasLtDestroy(cublasLtHandle_t lightHandle) {
  return LtDestroy(api::HandleKind::kLtHandle, lightHandle);
}

cublasStatus_t HostBackend::cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc,
                                                     cublasComputeType_t computeType,
                                                     cudaDataType_t scaleType) {
  // Types are checked at the heuristic and the matmul, as cuBLASLt does.
  return LtCreate(api::HandleKind::kLtMatmulDesc, reinterpret_cast<void**>(matmulDesc),
                  {{CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, computeType},
                   {CUBLASLT_MATMUL_DESC_SCALE_TYPE, scaleType}});
}

cublasStatus_t HostBackend::cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  return LtDestroy(api::HandleKind::kLtMatmulDesc, matmulDesc);
}

cublasStatus_t HostBackend::cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
  return LtSetAttribute(api::HandleKind::kLtMatmulDesc, matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t HostBackend::cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           void* buf, size_t sizeInBytes,
                                                           size_t* sizeWritten) {
  return LtGetAttribute(api::HandleKind::kLtMatmulDesc, matmulDesc, attr, buf, sizeInBytes,
                        sizeWritten);
}

cublasStatus_t HostBackend::cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout,
                                                       cudaDataType type, uint64_t rows,
                                                       uint64_t cols, int64_t ld) {
  return LtCreate(api::HandleKind::kLtMatrixLayout, reinterpret_cast<void**>(matLayout),
                  {{CUBLASLT_MATRIX_LAYOUT_TYPE, type},
                   {CUBLASLT_MATRIX_LAYOUT_ROWS, static_cast<int64_t>(rows)},
                   {CUBLASLT_MATRIX_LAYOUT_COLS, static_cast<int64_t>(cols)},
                   {CUBLASLT_MATRIX_LAYOUT_LD, ld}});
}

cublasStatus_t HostBackend::cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  return LtDestroy(api::HandleKind::kLtMatrixLayout, matLayout);
}

cublasStatus_t HostBackend::cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t sizeInBytes) {
  return LtSetAttribute(api::HandleKind::kLtMatrixLayout, matLayout, attr, buf, sizeInBytes);
}

cublasStatus_t HostBackend::cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             void* buf, size_t sizeInBytes,
                                                             size_t* sizeWritten) {
  return LtGetAttribute(api::HandleKind::kLtMatrixLayout, matLayout, attr, buf, sizeInBytes,
                        sizeWritten);
}

cublasStatus_t HostBackend::cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return LtCreate(api::HandleKind::kLtMatmulPreference, reinterpret_cast<void**>(pref), {});
}

cublasStatus_t HostBackend::cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return LtDestroy(api::HandleKind::kLtMatmulPreference, pref);
}

cublasStatus_t HostBackend::cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t sizeInBytes) {
  return LtSetAttribute(api::HandleKind::kLtMatmulPreference, pref, attr, buf, sizeInBytes);
}

cublasStatus_t HostBackend::cublasLtMatmulPreferenceGetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, void* buf,
    size_t sizeInBytes, size_t* sizeWritten) {
  return LtGetAttribute(api::HandleKind::kLtMatmulPreference, pref, attr, buf, sizeInBytes,
                        sizeWritten);
}

cublasStatus_t HostBackend::cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t* heuristicResultsArray, int* returnAlgoCount) {
  const char* api = "cublasLtMatmulAlgoGetHeuristic";
  std::lock_guard<std::mutex> lock(mu_);
  if (!LtHandleLiveLocked(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (LtFindLocked(api::HandleKind::kLtMatmulPreference, preference) == nullptr) {
    return Invalid(api, "not a live preference");
  }
  if (requestedAlgoCount <= 0) return Invalid(api, "requestedAlgoCount <= 0");
  if (heuristicResultsArray == nullptr || returnAlgoCount == nullptr) {
    return Invalid(api, "null result array or count");
  }
  LtPlan plan;
  if (cublasStatus_t s = LtPlanLocked(api, operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &plan)) {
    return s;
  }
  cublasLtMatmulHeuristicResult_t& r = heuristicResultsArray[0];
  std::memset(&r, 0, sizeof(r));
  r.algo.data[0] = kHostAlgo;
  r.workspaceSize = 0;
  r.state = CUBLAS_STATUS_SUCCESS;
  r.wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t HostBackend::cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
    const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
    const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
    size_t workspaceSizeInBytes, cudaStream_t stream) {
  const char* api = "cublasLtMatmul";
  LtPlan plan;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!LtHandleLiveLocked(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (cublasStatus_t s = LtPlanLocked(api, computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &plan)) {
      return s;
    }
    if (workspaceSizeInBytes > 0 && !DeviceAccessible(workspace, workspaceSizeInBytes)) {
      return Unreachable(api, "the workspace is not device memory of that size");
    }
  }
  if (alpha == nullptr || beta == nullptr) return Invalid(api, "null scalar");
  if (algo != nullptr && algo->data[0] != kHostAlgo) {
    return NotSupported(api, "an algorithm the host backend did not offer");
  }
  return plan.type == CUDA_R_32F ? LtMatmul<float>(plan, alpha, A, B, beta, C, D, stream)
                                 : LtMatmul<double>(plan, alpha, A, B, beta, C, D, stream);
}

}  // namespace host
}  // namespace agent
}  // namespace revenant
