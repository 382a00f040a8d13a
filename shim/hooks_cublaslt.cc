// The cuBLASLt handle and descriptor registry and checks (blaslt_checks.h),
// and the cuBLASLt rows answered in the shim (versions, status texts).
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "api/blaslt_attrs.h"
#include "common/logging.h"
#include "shim/blas_checks.h"
#include "shim/blaslt_checks.h"
#include "shim/call.h"

extern "C" const char* cublasGetStatusName(cublasStatus_t status);
extern "C" const char* cublasGetStatusString(cublasStatus_t status);

namespace revenant {
namespace shim {
namespace {

struct Entry {
  api::HandleKind kind = api::HandleKind::kNone;
  // Matmul descriptors only.
  int32_t scale_type = CUDA_R_32F;
  bool device_pointers = false;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  bool bias = false;
  // Descriptors: what the heuristic's answer is a function of. The creation's
  // arguments, and each attribute's latest value (attribute id -> bytes).
  std::string created;
  std::map<int32_t, std::string> attributes;
};

// A heuristic's answer: an algorithm for a descriptor and four layouts.
struct AlgoKey {
  const void* objects[5];
  uint64_t algo[8];
  bool operator==(const AlgoKey& o) const {
    return std::memcmp(objects, o.objects, sizeof(objects)) == 0 &&
           std::memcmp(algo, o.algo, sizeof(algo)) == 0;
  }
  template <typename H>
  friend H AbslHashValue(H h, const AlgoKey& k) {
    return H::combine_contiguous(std::move(h), reinterpret_cast<const char*>(&k), sizeof(k));
  }
};

AlgoKey MakeAlgoKey(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                   cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                   const cublasLtMatmulAlgo_t& algo) {
  AlgoKey key;
  key.objects[0] = desc;
  key.objects[1] = a;
  key.objects[2] = b;
  key.objects[3] = c;
  key.objects[4] = d;
  std::memcpy(key.algo, algo.data, sizeof(key.algo));
  return key;
}

// Heuristic answers kept at most (PyTorch drops its descriptors after each
// matmul, which forgets their answers): past it the oldest are forgotten,
// and a too small workspace is then found by the agent's library instead.
constexpr size_t kMaxAlgos = 1024;
// Heuristic answers by contents kept at most (one per distinct matmul shape
// and configuration of the job: a few dozen in a training step); past it
// they are forgotten and asked of the agent again.
constexpr size_t kMaxAnswers = 4096;

struct Registry {
  std::mutex mu;
  absl::flat_hash_map<const void*, Entry> live;
  absl::flat_hash_map<AlgoKey, size_t> workspace_needed;
  // The agent's heuristic answers by what they are a function of (AnswerKey).
  absl::flat_hash_map<std::string, std::vector<cublasLtMatmulHeuristicResult_t>> answers;
  uint64_t answered = 0;  // heuristics answered here
};

Registry& Live() {
  static Registry* r = new Registry();  // never destroyed: used until exit
  return *r;
}

int32_t Refuse(int32_t status, const char* why) {
  REVENANT_LOG(DEBUG, "shim") << "cuBLASLt call refused: " << why;
  return status;
}

// Whether `p` is a live handle of `kind` (r.mu held).
bool IsLive(const Registry& r, api::HandleKind kind, const void* p) {
  auto it = r.live.find(p);
  return p != nullptr && it != r.live.end() && it->second.kind == kind;
}

// Forgets the heuristic answers that involve `object` (r.mu held).
void ForgetAlgos(Registry& r, const void* object) {
  if (r.workspace_needed.empty()) return;
  for (auto it = r.workspace_needed.begin(); it != r.workspace_needed.end();) {
    const AlgoKey& k = it->first;
    bool involved = false;
    for (const void* o : k.objects) involved |= o == object;
    if (involved) {
      r.workspace_needed.erase(it++);
    } else {
      ++it;
    }
  }
}

template <typename T>
void Append(std::string* out, const T& v) {
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// A descriptor's contents as bytes (r.mu held; false for one not live).
bool AppendContents(const Registry& r, api::HandleKind kind, const void* object,
                    std::string* out) {
  auto it = r.live.find(object);
  if (object == nullptr || it == r.live.end() || it->second.kind != kind) return false;
  const Entry& e = it->second;
  Append(out, static_cast<uint8_t>(kind));
  Append(out, static_cast<uint32_t>(e.created.size()));
  out->append(e.created);
  Append(out, static_cast<uint32_t>(e.attributes.size()));
  for (const auto& [attr, value] : e.attributes) {
    Append(out, attr);
    Append(out, static_cast<uint32_t>(value.size()));
    out->append(value);
  }
  return true;
}

// What cuBLASLt's heuristic answer is a function of: the library handle,
// the contents of the matmul descriptor, the four layouts and the
// preference, and the count asked for (r.mu held; empty: an object unknown).
std::string AnswerKey(const Registry& r, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                      cublasLtMatmulPreference_t pref, int requested) {
  std::string key;
  key.reserve(512);
  Append(&key, reinterpret_cast<uint64_t>(handle));
  Append(&key, requested);
  if (!AppendContents(r, api::HandleKind::kLtMatmulDesc, desc, &key)) return {};
  for (const void* layout : {static_cast<const void*>(a), static_cast<const void*>(b),
                             static_cast<const void*>(c), static_cast<const void*>(d)}) {
    if (!AppendContents(r, api::HandleKind::kLtMatrixLayout, layout, &key)) return {};
  }
  if (!AppendContents(r, api::HandleKind::kLtMatmulPreference, pref, &key)) return {};
  return key;
}

// Notes the workspace each returned algorithm needs for these objects (r.mu
// held).
void NoteWorkspaces(Registry& r, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                    const cublasLtMatmulHeuristicResult_t* results, int returned) {
  for (int i = 0; i < returned; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    if (r.workspace_needed.size() >= kMaxAlgos) r.workspace_needed.clear();
    r.workspace_needed[MakeAlgoKey(desc, a, b, c, d, results[i].algo)] = results[i].workspaceSize;
  }
}

// Registers a new object with its creation's arguments; returns its entry
// (r.mu held).
Entry& NoteCreatedLocked(Registry& r, api::HandleKind kind, const void* handle,
                         std::string created) {
  Entry& e = r.live[handle];
  e = Entry();
  e.kind = kind;
  e.created = std::move(created);
  return e;
}

void NoteCreated(api::HandleKind kind, const void* handle, std::string created) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  NoteCreatedLocked(r, kind, handle, std::move(created));
}

// Notes an attribute's latest value; the object's entry, or null for one not
// live (r.mu held).
Entry* NoteAttributeLocked(Registry& r, api::HandleKind kind, const void* handle, int32_t attr,
                           const void* buf, size_t size) {
  if (!IsLive(r, kind, handle)) return nullptr;
  ForgetAlgos(r, handle);
  Entry& e = r.live.find(handle)->second;
  e.attributes[attr].assign(static_cast<const char*>(buf), buf == nullptr ? 0 : size);
  return &e;
}

}  // namespace

void LtCreated(api::HandleKind kind, const void* handle) { NoteCreated(kind, handle, {}); }

void LtGone(api::HandleKind kind, const void* handle) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  if (IsLive(r, kind, handle)) r.live.erase(handle);
  ForgetAlgos(r, handle);
}

bool LtAssignMatmulDesc(cublasComputeType_t compute_type, cudaDataType_t scale_type) {
  if (!ShimAnswers()) return false;
  // The combinations cuBLASLt documents for cublasLtMatmul (PyTorch's all
  // among them); anything else is created synchronously, so the library's
  // own answer reaches the application at the call.
  switch (compute_type) {
    case CUBLAS_COMPUTE_32F:
    case CUBLAS_COMPUTE_32F_PEDANTIC:
    case CUBLAS_COMPUTE_32F_FAST_16F:
    case CUBLAS_COMPUTE_32F_FAST_16BF:
    case CUBLAS_COMPUTE_32F_FAST_TF32:
      return scale_type == CUDA_R_32F || scale_type == CUDA_C_32F;
    case CUBLAS_COMPUTE_64F:
    case CUBLAS_COMPUTE_64F_PEDANTIC:
      return scale_type == CUDA_R_64F || scale_type == CUDA_C_64F;
    case CUBLAS_COMPUTE_16F:
    case CUBLAS_COMPUTE_16F_PEDANTIC:
      return scale_type == CUDA_R_16F;
    case CUBLAS_COMPUTE_32I:
    case CUBLAS_COMPUTE_32I_PEDANTIC:
      return scale_type == CUDA_R_32I || scale_type == CUDA_R_32F;
    default:
      return false;
  }
}

bool LtAssignLayout(cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld) {
  // A type the shim knows, and a column-major leading dimension that holds
  // a column: what a layout of a real matrix has. Anything else (a short ld
  // the heuristic refuses later, an unknown type) goes synchronously.
  return ShimAnswers() && LtTypeSize(type) != 0 && rows > 0 && cols > 0 && ld > 0 &&
         static_cast<uint64_t>(ld) >= rows;
}

bool LtAssignPreference() { return ShimAnswers(); }

void LtNoteAttribute(api::HandleKind kind, const void* handle, int32_t attr, const void* buf,
                     size_t size) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  NoteAttributeLocked(r, kind, handle, attr, buf, size);
}

void LtNoteHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
                     cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
                     cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
                     const cublasLtMatmulHeuristicResult_t* results, const int* returned) {
  if (results == nullptr || returned == nullptr || *returned < 0 || *returned > requested) return;
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  NoteWorkspaces(r, desc, a, b, c, d, results, *returned);
  if (!ShimAnswers()) return;
  std::string key = AnswerKey(r, handle, desc, a, b, c, d, pref, requested);
  if (key.empty()) return;
  if (r.answers.size() >= kMaxAnswers) r.answers.clear();
  r.answers[std::move(key)].assign(results, results + *returned);
}

bool LtAnswerHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                       cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                       cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                       cublasLtMatmulPreference_t pref, int requested,
                       cublasLtMatmulHeuristicResult_t* results, int* returned) {
  if (!ShimAnswers() || results == nullptr || returned == nullptr) return false;
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.answers.empty()) return false;
  const std::string key = AnswerKey(r, handle, desc, a, b, c, d, pref, requested);
  if (key.empty()) return false;
  auto it = r.answers.find(key);
  if (it == r.answers.end()) return false;
  const std::vector<cublasLtMatmulHeuristicResult_t>& answer = it->second;
  std::copy(answer.begin(), answer.end(), results);
  *returned = static_cast<int>(answer.size());
  NoteWorkspaces(r, desc, a, b, c, d, results, *returned);
  ++r.answered;
  return true;
}

uint64_t LtHeuristicsAnswered() {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.answered;
}

void LtMatmulDescCreated(cublasLtMatmulDesc_t desc, cublasComputeType_t compute_type,
                         cudaDataType_t scale_type) {
  std::string created;
  Append(&created, static_cast<int32_t>(compute_type));
  Append(&created, static_cast<int32_t>(scale_type));
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  NoteCreatedLocked(r, api::HandleKind::kLtMatmulDesc, desc, std::move(created)).scale_type =
      scale_type;
}

void LtLayoutCreated(cublasLtMatrixLayout_t layout, cudaDataType type, uint64_t rows,
                     uint64_t cols, int64_t ld) {
  std::string created;
  Append(&created, static_cast<int32_t>(type));
  Append(&created, rows);
  Append(&created, cols);
  Append(&created, ld);
  NoteCreated(api::HandleKind::kLtMatrixLayout, layout, std::move(created));
}

void LtNoteMatmulDescAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                               const void* buf, size_t size) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  Entry* e = NoteAttributeLocked(r, api::HandleKind::kLtMatmulDesc, desc, attr, buf, size);
  if (e == nullptr || buf == nullptr || (size != sizeof(int32_t) && size != sizeof(uint64_t))) {
    return;
  }
  int64_t value = 0;
  std::memcpy(&value, buf, size);
  if (size == sizeof(int32_t)) value = static_cast<int32_t>(value);
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_POINTER_MODE:
      e->device_pointers = value == CUBLASLT_POINTER_MODE_DEVICE;
      break;
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE:
      e->scale_type = static_cast<int32_t>(value);
      break;
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      e->epilogue = static_cast<uint32_t>(value);
      break;
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      e->bias = value != 0;
      break;
    default:
      break;
  }
}

bool LtDevicePointers(cublasLtMatmulDesc_t desc) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  return IsLive(r, api::HandleKind::kLtMatmulDesc, desc) && r.live.find(desc)->second.device_pointers;
}

size_t LtTypeSize(int32_t type) {
  switch (type) {
    case CUDA_R_8I:
    case CUDA_R_8U:
      return 1;
    case CUDA_R_16F:
    case CUDA_R_16BF:
      return 2;
    case CUDA_R_32F:
    case CUDA_R_32I:
    case CUDA_R_32U:
    case CUDA_C_16F:
    case CUDA_C_16BF:
      return 4;
    case CUDA_R_64F:
    case CUDA_C_32F:
      return 8;
    case CUDA_C_64F:
      return 16;
    default:
      return 0;
  }
}

size_t LtScalarSize(cublasLtMatmulDesc_t desc) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLive(r, api::HandleKind::kLtMatmulDesc, desc)) return 0;
  return LtTypeSize(r.live.find(desc)->second.scale_type);
}

int32_t LtCheckHandle(cublasLtHandle_t handle) {
  {
    Registry& r = Live();
    std::lock_guard<std::mutex> lock(r.mu);
    if (IsLive(r, api::HandleKind::kLtHandle, handle)) return CUBLAS_STATUS_SUCCESS;
  }
  // A cuBLAS handle is a cuBLASLt handle too (cuBLAS documents the cast).
  if (handle != nullptr &&
      BlasCheckHandle(reinterpret_cast<cublasHandle_t>(handle)) == CUBLAS_STATUS_SUCCESS) {
    return CUBLAS_STATUS_SUCCESS;
  }
  return Refuse(CUBLAS_STATUS_NOT_INITIALIZED, handle ? "unknown handle" : "null handle");
}

int32_t LtCheckDestroyHandle(cublasLtHandle_t handle) {
  if (handle == nullptr) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "null handle");
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  // Only handles of cublasLtCreate (a cuBLAS handle goes with cublasDestroy).
  if (!IsLive(r, api::HandleKind::kLtHandle, handle)) {
    return Refuse(CUBLAS_STATUS_NOT_INITIALIZED, "unknown handle");
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t LtCheckDescriptor(api::HandleKind kind, const void* desc) {
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  if (!IsLive(r, kind, desc)) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, desc ? "unknown descriptor" : "null descriptor");
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t LtCheckSetAttribute(api::HandleKind kind, const void* desc, int attr, const void* buf,
                            size_t size) {
  if (int32_t s = LtCheckDescriptor(kind, desc)) return s;
  const api::LtAttr* a = api::FindLtAttr(kind, attr);
  if (a == nullptr) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "unknown attribute");
  if (buf == nullptr) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "null attribute value");
  if (size != a->size) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "attribute value of another size");
  return CUBLAS_STATUS_SUCCESS;
}

int32_t LtCheckMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                      cublasLtMatmulDescAttributes_t attr, const void* buf,
                                      size_t size) {
  if (int32_t s = LtCheckSetAttribute(api::HandleKind::kLtMatmulDesc, desc, attr, buf, size)) {
    return s;
  }
  if (attr == CUBLASLT_MATMUL_DESC_POINTER_MODE && size == sizeof(int32_t)) {
    int32_t mode = 0;
    std::memcpy(&mode, buf, sizeof(mode));
    if (mode == CUBLASLT_POINTER_MODE_DEVICE_VECTOR ||
        mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO ||
        mode == CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST) {
      // Per-row alpha vectors (and a beta of another residence than alpha's)
      // have no form on the wire yet.
      REVENANT_LOG(WARNING, "shim") << "cublasLtMatmulDescSetAttribute: pointer mode " << mode
                                    << " (a vector mode) is not supported under Revenant: "
                                       "CUBLAS_STATUS_NOT_SUPPORTED";
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  if (attr == CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR && size == sizeof(void*)) {
    void* emulation = nullptr;
    std::memcpy(&emulation, buf, sizeof(emulation));
    if (emulation != nullptr) {
      // Emulation descriptors are not intercepted (their functions are
      // refused): the application cannot hold one the agent knows.
      REVENANT_LOG(WARNING, "shim") << "cublasLtMatmulDescSetAttribute: an emulation descriptor "
                                       "is not supported under Revenant: CUBLAS_STATUS_NOT_SUPPORTED";
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t LtCheckHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                         cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                         cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                         cublasLtMatmulPreference_t pref, int requested,
                         const cublasLtMatmulHeuristicResult_t* results, const int* returned) {
  if (int32_t s = LtCheckHandle(handle)) return s;
  if (int32_t s = LtCheckDescriptor(api::HandleKind::kLtMatmulDesc, desc)) return s;
  for (const void* layout : {static_cast<const void*>(a), static_cast<const void*>(b),
                             static_cast<const void*>(c), static_cast<const void*>(d)}) {
    if (int32_t s = LtCheckDescriptor(api::HandleKind::kLtMatrixLayout, layout)) return s;
  }
  if (int32_t s = LtCheckDescriptor(api::HandleKind::kLtMatmulPreference, pref)) return s;
  if (requested <= 0) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "requestedAlgoCount <= 0");
  if (results == nullptr || returned == nullptr) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, "null result array or count");
  }
  return CUBLAS_STATUS_SUCCESS;
}

int32_t LtCheckMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha,
                      cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b, const void* beta,
                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
                      const cublasLtMatmulAlgo_t* algo, const void* workspace,
                      size_t workspace_size) {
  if (int32_t s = LtCheckHandle(handle)) return s;
  if (int32_t s = LtCheckDescriptor(api::HandleKind::kLtMatmulDesc, desc)) return s;
  for (const void* layout : {static_cast<const void*>(a), static_cast<const void*>(b),
                             static_cast<const void*>(c), static_cast<const void*>(d)}) {
    if (int32_t s = LtCheckDescriptor(api::HandleKind::kLtMatrixLayout, layout)) return s;
  }
  if (alpha == nullptr || beta == nullptr) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "null scalar");
  if (LtScalarSize(desc) == 0) return Refuse(CUBLAS_STATUS_INVALID_VALUE, "unknown scale type");
  if (workspace == nullptr && workspace_size > 0) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, "a workspace size without a workspace");
  }
  Registry& r = Live();
  std::lock_guard<std::mutex> lock(r.mu);
  auto live = r.live.find(desc);
  if (live == r.live.end()) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, "descriptor destroyed during the call");
  }
  const Entry& e = live->second;
  if ((e.epilogue & CUBLASLT_EPILOGUE_BIAS) != 0 && !e.bias) {
    return Refuse(CUBLAS_STATUS_INVALID_VALUE, "a bias epilogue without a bias pointer");
  }
  if (algo != nullptr && !r.workspace_needed.empty()) {
    auto it = r.workspace_needed.find(MakeAlgoKey(desc, a, b, c, d, *algo));
    if (it != r.workspace_needed.end() && workspace_size < it->second) {
      return Refuse(CUBLAS_STATUS_INVALID_VALUE, "less workspace than the algorithm needs");
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace shim
}  // namespace revenant

// Answered here: the versions are those of the headers Revenant is built
// with, which are those of the agent's library.
extern "C" REVENANT_EXPORT size_t cublasLtGetVersion(void) { return CUBLAS_VERSION; }
extern "C" REVENANT_EXPORT size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

// cuBLASLt's statuses are cuBLAS's.
extern "C" REVENANT_EXPORT const char* cublasLtGetStatusName(cublasStatus_t status) {
  return cublasGetStatusName(status);
}
extern "C" REVENANT_EXPORT const char* cublasLtGetStatusString(cublasStatus_t status) {
  return cublasGetStatusString(status);
}
