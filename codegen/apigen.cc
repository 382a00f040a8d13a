// apigen: turns the API table (api/*.textproto, schema api/api_table.proto)
// into the code and docs every other part of Revenant uses.
//
//   apigen --out_dir=DIR [--library_exports=FILE] [--driver_versions=VFILE]
//          table1.textproto [table2.textproto ...]
//
// writes DIR/{api_ids.h, api_traits.cc, shim_stubs.cc, shim_refused.cc,
// backend_api.h, backend_api.cc, dispatch.cc, agent_hooks.h, shim_hooks.h,
// shim.map, library_rows.h, shim_driver_names.cc, api_coverage.md,
// hook_structs.h, hook_structs_testing.h}. FILE
// lists the CUDA libraries' exports ("<soname> <name>" lines): those without
// a row get a refusing stub in shim_refused.cc. VFILE lists the CUDA version
// each driver function variant was introduced in ("<base> <version>" lines,
// from cudaTypedefs.h): with the driver's exports it gives the table
// cuGetProcAddress answers from (shim_driver_names.cc). Every file is a pure function of the table, so Bazel
// reruns it only when a row changes. Validation errors name the row and
// exit 1: a bad row fails the build, not the run.
#include <fcntl.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/api_table.pb.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "google/protobuf/text_format.h"

namespace revenant {
namespace codegen {
namespace pb = ::revenant::api_table;
namespace {

using pb::Direction;
using pb::Function;
using pb::HandleKind;
using pb::Library;
using pb::Param;

[[noreturn]] void Die(const std::string& message) {
  std::cerr << "apigen: " << message << "\n";
  std::exit(1);
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t");
  size_t e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

bool IsPointer(const std::string& c_type) {
  return !Trim(c_type).empty() && Trim(c_type).back() == '*';
}

// "const struct cudaDeviceProp *" -> "struct cudaDeviceProp"
std::string Pointee(const std::string& c_type) {
  std::string t = Trim(c_type);
  t = Trim(t.substr(0, t.size() - 1));
  if (t.rfind("const ", 0) == 0) t = Trim(t.substr(6));
  return t;
}

enum class Kind { kValue, kInBytes, kOutValue, kOutBytes, kInOutValue };

Kind KindOf(const Function& f, const Param& p) {
  const bool ptr = IsPointer(p.c_type());
  switch (p.dir()) {
    case pb::IN:
      if (!ptr || p.length().empty()) return Kind::kValue;
      return Kind::kInBytes;
    case pb::OUT:
      if (!ptr) Die(f.name() + "." + p.name() + ": OUT parameter must be a pointer");
      return p.length().empty() ? Kind::kOutValue : Kind::kOutBytes;
    case pb::INOUT:
      if (!ptr || !p.length().empty())
        Die(f.name() + "." + p.name() + ": INOUT parameter must be a pointer without length");
      return Kind::kInOutValue;
    default:
      Die(f.name() + "." + p.name() + ": bad direction");
  }
}

// Whether the agent writes into the parameter (OUT and INOUT): its value or
// bytes come back in the reply.
bool WritesBack(const Function& f, const Param& p) {
  const Kind k = KindOf(f, p);
  return k != Kind::kValue && k != Kind::kInBytes;
}

// The type of a local variable holding a by-value parameter: top-level
// const dropped ("const ncclComm_t" -> "ncclComm_t"), pointee const kept.
std::string LocalType(const std::string& c_type) {
  std::string t = Trim(c_type);
  if (t.rfind("const ", 0) == 0 && t.back() != '*') return Trim(t.substr(6));
  return t;
}

std::string HandleEnum(HandleKind k) {
  static const char* kNames[] = {"kNone",          "kStream",          "kEvent",
                                 "kGraph",         "kGraphExec",       "kGraphNode",
                                 "kMemPool",       "kComm",            "kFunction",
                                 "kKernel",        "kBlasHandle",      "kLtHandle",
                                 "kLtMatmulDesc",  "kLtMatrixLayout",  "kLtMatmulPreference",
                                 "kDnnHandle",     "kDnnDescriptor",   "kDnnTensor",
                                 "kDnnFilter",     "kDnnConvolution",  "kDnnActivation",
                                 "kDnnPooling",    "kDnnDropout",      "kDnnRnn",
                                 "kDnnRnnData",    "kDnnCtcLoss",      "kDnnSpatialTransformer"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == pb::HandleKind_ARRAYSIZE,
                "one name per handle kind");
  return std::string("::revenant::api::HandleKind::") + kNames[static_cast<int>(k)];
}


bool IsNccl(const Function& f) { return f.library() == pb::NCCL; }
bool IsCublas(const Function& f) { return f.library() == pb::CUBLAS; }
// cuBLAS and cuBLASLt answer with the same cublasStatus_t.
bool IsBlasStatus(const Function& f) {
  return f.library() == pb::CUBLAS || f.library() == pb::CUBLASLT;
}
bool IsCudnn(const Function& f) { return f.library() == pb::CUDNN; }
bool IsDriver(const Function& f) { return f.library() == pb::DRIVER; }

// Each library's own status codes, for what the generated code answers.
std::string Unreachable(const Function& f) {
  if (!f.unreachable().empty()) return f.unreachable();
  if (IsBlasStatus(f)) return "CUBLAS_STATUS_INTERNAL_ERROR";
  if (IsCudnn(f)) return "CUDNN_STATUS_INTERNAL_ERROR";
  if (IsDriver(f)) return "CUDA_ERROR_DEVICE_UNAVAILABLE";
  return IsNccl(f) ? "ncclRemoteError" : "cudaErrorDevicesUnavailable";
}
std::string NotSupported(const Function& f) {
  if (IsBlasStatus(f)) return "CUBLAS_STATUS_NOT_SUPPORTED";
  if (IsCudnn(f)) return "CUDNN_STATUS_NOT_SUPPORTED";
  if (IsDriver(f)) return "CUDA_ERROR_NOT_SUPPORTED";
  return IsNccl(f) ? "ncclInvalidUsage" : "cudaErrorNotSupported";
}
std::string BadRequest(const Function& f) {
  if (IsBlasStatus(f)) return "CUBLAS_STATUS_INVALID_VALUE";
  if (IsCudnn(f)) return "CUDNN_STATUS_BAD_PARAM";
  if (IsDriver(f)) return "CUDA_ERROR_INVALID_VALUE";
  return IsNccl(f) ? "ncclInvalidArgument" : "cudaErrorInvalidValue";
}
// Enum types whose values cross the wire with a dense range and a code of
// their own: decoded as their underlying integer and checked against the
// enumeration's range before they become the enum, answered outside it with
// the code the real library answers. The bounds are enumerators, so the
// headers check them at compile time. Every other enum a generated decoder
// reads goes through wire::Decoder::Get, which checks it against
// api/wire_enums.h (sparse enums value by value) and fails the request with
// BadRequest's code.
struct EnumRange {
  const char* type;
  const char* min;
  const char* max;
  // For rows of the enum's own library (the runtime for cuda* enums, cuDNN
  // for cudnn* ones); other rows, or none given: BadRequest's code.
  const char* own_library_error;
};
constexpr EnumRange kEnumRanges[] = {
    {"cudaMemcpyKind", "cudaMemcpyHostToHost", "cudaMemcpyDefault", "cudaErrorInvalidMemcpyDirection"},
    {"cudaLimit", "cudaLimitStackSize", "cudaLimitPersistingL2CacheSize", "cudaErrorUnsupportedLimit"},
    {"cudaStreamCaptureMode", "cudaStreamCaptureModeGlobal", "cudaStreamCaptureModeRelaxed",
     "cudaErrorInvalidValue"},
    {"cudaMemPoolAttr", "cudaMemPoolReuseFollowEventDependencies", "cudaMemPoolAttrUsedMemHigh",
     "cudaErrorInvalidValue"},
    {"cudaFuncAttribute", "cudaFuncAttributeMaxDynamicSharedMemorySize", "cudaFuncAttributeMax",
     "cudaErrorInvalidValue"},
    {"cudaDeviceAttr", "cudaDevAttrMaxThreadsPerBlock", "cudaDevAttrMax", "cudaErrorInvalidValue"},
    {"ncclDataType_t", "ncclInt8", "ncclNumTypes", ""},
    {"ncclScalarResidence_t", "ncclScalarDevice", "ncclScalarHostImmediate", ""},
    {"cublasOperation_t", "CUBLAS_OP_N", "CUBLAS_OP_CONJG", ""},
    {"cublasSideMode_t", "CUBLAS_SIDE_LEFT", "CUBLAS_SIDE_RIGHT", ""},
    {"cublasFillMode_t", "CUBLAS_FILL_MODE_LOWER", "CUBLAS_FILL_MODE_FULL", ""},
    {"cublasDiagType_t", "CUBLAS_DIAG_NON_UNIT", "CUBLAS_DIAG_UNIT", ""},
    {"cublasPointerMode_t", "CUBLAS_POINTER_MODE_HOST", "CUBLAS_POINTER_MODE_DEVICE", ""},
    // cuDNN 9.19 answers an unknown descriptor type so (read off the library).
    {"cudnnBackendDescriptorType_t", "CUDNN_BACKEND_POINTWISE_DESCRIPTOR",
     "CUDNN_BACKEND_OPERATION_SDPA_BWD_DESCRIPTOR", "CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED"},
};

const EnumRange* FindEnumRange(const std::string& c_type) {
  for (const EnumRange& e : kEnumRanges)
    if (LocalType(c_type) == e.type) return &e;
  return nullptr;
}

// A handle parameter that names no live handle: cuBLAS answers a null or
// destroyed cublasHandle_t with NOT_INITIALIZED, anything else it is handed
// (a stream) with INVALID_VALUE.
std::string BadHandle(const Function& f, const Param& p) {
  if (IsCublas(f)) {
    return p.handle() == pb::BLAS_HANDLE ? "CUBLAS_STATUS_NOT_INITIALIZED"
                                         : "CUBLAS_STATUS_INVALID_VALUE";
  }
  // cuBLASLt: a dead library handle is NOT_INITIALIZED; a dead descriptor is
  // a bad argument (INVALID_VALUE), as cuBLASLt answers a null one.
  if (f.library() == pb::CUBLASLT) {
    return p.handle() == pb::LT_HANDLE ? "CUBLAS_STATUS_NOT_INITIALIZED"
                                       : "CUBLAS_STATUS_INVALID_VALUE";
  }
  if (IsCudnn(f)) return "CUDNN_STATUS_BAD_PARAM";
  if (IsDriver(f)) return "CUDA_ERROR_INVALID_HANDLE";
  return IsNccl(f) ? "ncclInvalidArgument" : "cudaErrorInvalidResourceHandle";
}
const char* kStatusTypes[] = {"cudaError_t", "ncclResult_t", "cublasStatus_t", "cudnnStatus_t",
                              "CUresult"};
bool IsStatusType(const std::string& t) {
  for (const char* s : kStatusTypes)
    if (t == s) return true;
  return false;
}
// The version node a library's names are exported in (shim.map); the
// unversioned libraries' names (NCCL, the driver) go into libcudart.so.13's.
const char* VersionNode(Library l) {
  switch (l) {
    case pb::CUBLAS: return "libcublas.so.13";
    case pb::CUBLASLT: return "libcublasLt.so.13";
    case pb::CUDNN: return "libcudnn.so.9";
    default: return "libcudart.so.13";
  }
}

bool Forwarded(const Function& f) {
  return f.mode() != pb::LOCAL && f.support() != pb::REFUSED;
}
bool HasGeneratedShim(const Function& f) {
  return f.support() == pb::GENERATED || f.support() == pb::REFUSED;
}
bool HasGeneratedDispatch(const Function& f) {
  return Forwarded(f) && (f.support() == pb::GENERATED || f.support() == pb::SHIM_HOOK);
}
bool HasHookDispatch(const Function& f) { return Forwarded(f) && f.support() == pb::HOOK; }
// A forwarded row whose shim side is hand-written and whose dispatcher is
// generated (support SHIM_HOOK): its hook structs are derived from its
// parameters, laid out as the generated dispatcher reads them.
bool HasParamStructs(const Function& f) {
  return f.support() == pb::SHIM_HOOK && HasGeneratedDispatch(f);
}

std::string ParamList(const Function& f, bool with_names) {
  std::string out;
  for (int i = 0; i < f.params_size(); ++i) {
    if (i) out += ", ";
    out += f.params(i).c_type();
    if (with_names) out += " " + f.params(i).name();
  }
  return out;
}

std::string ArgList(const Function& f) {
  std::string out;
  for (int i = 0; i < f.params_size(); ++i) {
    if (i) out += ", ";
    out += f.params(i).name();
  }
  return out;
}

// The parameter whose pointer mode decides the row's device_if parameters:
// pointer_mode_from, else the first; -1 when it names no parameter.
int PointerModeFrom(const Function& f) {
  if (f.pointer_mode_from().empty()) return f.params_size() > 0 ? 0 : -1;
  for (int i = 0; i < f.params_size(); ++i)
    if (f.params(i).name() == f.pointer_mode_from()) return i;
  return -1;
}

void Validate(const std::vector<Function>& fns) {
  std::set<std::string> names;
  for (const Function& f : fns) {
    if (f.name().empty()) Die("a row has no name");
    if (!names.insert(f.name()).second) Die(f.name() + ": duplicate row");
    if (f.library() == pb::LIBRARY_UNSPECIFIED) Die(f.name() + ": no library");
    if (f.returns().empty()) Die(f.name() + ": no return type");
    std::set<std::string> pnames;
    int out_params = 0;
    for (const Param& p : f.params()) {
      if (p.name().empty() || p.c_type().empty()) Die(f.name() + ": parameter without name/type");
      if (!pnames.insert(p.name()).second) Die(f.name() + ": duplicate parameter " + p.name());
      Kind k = KindOf(f, p);
      if (WritesBack(f, p)) ++out_params;
      if (p.handle() != pb::NO_HANDLE && k == Kind::kInBytes)
        Die(f.name() + "." + p.name() + ": a handle cannot be a byte buffer");
      if (!p.device_if().empty() && k != Kind::kInBytes && k != Kind::kOutValue)
        Die(f.name() + "." + p.name() +
            ": device_if belongs to IN pointers with a length or OUT pointers without one");
      if (p.null_ok() && (p.handle() == pb::NO_HANDLE ||
                          !((p.dir() == pb::IN && k == Kind::kValue) || k == Kind::kOutValue)))
        Die(f.name() + "." + p.name() + ": null_ok belongs to IN and OUT handle parameters");
      if (p.or_handle() != pb::NO_HANDLE &&
          (p.handle() == pb::NO_HANDLE || p.dir() != pb::IN || k != Kind::kValue))
        Die(f.name() + "." + p.name() + ": or_handle belongs to IN handle parameters");
      if (!p.device_if().empty() && p.handle() != pb::NO_HANDLE)
        Die(f.name() + "." + p.name() + ": a handle cannot be a device pointer");
    }
    bool has_device_if = false;
    for (const Param& p : f.params()) has_device_if |= !p.device_if().empty();
    if (has_device_if) {
      const int from = PointerModeFrom(f);
      if (from < 0 || f.params(from).handle() == pb::NO_HANDLE || f.params(from).dir() != pb::IN ||
          KindOf(f, f.params(from)) != Kind::kValue)
        Die(f.name() + ": device_if needs an IN handle whose pointer mode decides (the first "
                       "parameter, or pointer_mode_from)");
      for (int i = 0; i < from; ++i)
        if (!f.params(i).device_if().empty())
          Die(f.name() + "." + f.params(i).name() +
              ": a device_if parameter must follow the handle whose pointer mode decides");
    } else if (!f.pointer_mode_from().empty()) {
      Die(f.name() + ": pointer_mode_from without a device_if parameter");
    }
    if (f.attribute_in_second() &&
        (!f.sets_attribute() || f.params_size() < 2 || KindOf(f, f.params(1)) != Kind::kValue ||
         IsPointer(f.params(1).c_type())))
      Die(f.name() + ": attribute_in_second needs sets_attribute and an attribute enum as the "
                     "second parameter");
    if (f.sets_attribute() &&
        (f.params_size() == 0 || f.params(0).handle() == pb::NO_HANDLE || f.params(0).dir() != pb::IN))
      Die(f.name() + ": sets_attribute needs the handle as the first (IN) parameter");
    if (f.sets_attribute() && f.journal() != pb::STATE)
      Die(f.name() + ": an attribute setter is journaled as STATE");
    if (!f.async_if().empty() && (f.mode() != pb::SYNC || out_params > 0))
      Die(f.name() + ": async_if belongs to SYNC rows without OUT parameters");
    if ((!f.shim_check().empty() || !f.shim_done().empty() || !f.success_if().empty() ||
         !f.async_if().empty() || !f.assign_if().empty() || !f.shim_answer().empty()) &&
        f.support() != pb::GENERATED)
      Die(f.name() +
          ": shim_check/shim_done/success_if/async_if/assign_if/shim_answer belong to generated "
          "stubs");
    if (!f.assign_if().empty()) {
      if (f.mode() != pb::SYNC || f.creates() == pb::NO_HANDLE || out_params != 1 ||
          !f.async_if().empty())
        Die(f.name() + ": assign_if belongs to SYNC rows that create a handle, with one OUT "
                       "parameter (the handle) and no async_if");
      for (const Param& p : f.params())
        if (WritesBack(f, p) && (p.handle() != f.creates() || KindOf(f, p) != Kind::kOutValue))
          Die(f.name() + ": assign_if needs the created handle as the only OUT parameter");
    }
    if (f.mode() == pb::ASYNC && out_params > 0)
      Die(f.name() + ": an ASYNC call cannot have OUT parameters");
    if (f.mode() == pb::LOCAL && f.support() == pb::GENERATED)
      Die(f.name() + ": a LOCAL call needs a shim hook");
    if (HasGeneratedShim(f) && !IsStatusType(f.returns()))
      Die(f.name() + ": generated stubs return their library's status type; use a hook");
    if (IsBlasStatus(f) != (f.returns() == "cublasStatus_t") && HasGeneratedShim(f))
      Die(f.name() + ": cuBLAS and cuBLASLt rows, and only they, return cublasStatus_t");
    if (IsCudnn(f) != (f.returns() == "cudnnStatus_t") && HasGeneratedShim(f))
      Die(f.name() + ": cuDNN rows, and only they, return cudnnStatus_t");
    if (IsDriver(f) != (f.returns() == "CUresult") && HasGeneratedShim(f))
      Die(f.name() + ": driver rows, and only they, return CUresult");
    if (f.creates() != pb::NO_HANDLE && HasGeneratedDispatch(f)) {
      bool found = false;
      for (const Param& p : f.params())
        if (p.handle() == f.creates() && p.dir() == pb::OUT) found = true;
      if (!found) Die(f.name() + ": creates a handle but no OUT parameter of that kind");
    }
    if (f.destroys() != pb::NO_HANDLE && HasGeneratedDispatch(f)) {
      bool found = false;
      for (const Param& p : f.params())
        if (p.handle() == f.destroys() && p.dir() == pb::IN) found = true;
      if (!found) Die(f.name() + ": destroys a handle but no IN parameter of that kind");
    }
  }
}

class Out {
 public:
  Out(const std::string& dir, const std::string& name) : path_(dir + "/" + name) {}
  ~Out() {
    std::ofstream f(path_);
    f << s_.str();
    if (!f) Die("cannot write " + path_);
  }
  std::ostringstream& s() { return s_; }

 private:
  std::string path_;
  std::ostringstream s_;
};

const char* kBanner = "// Generated by codegen/apigen from api/*.textproto. Do not edit.\n";

void EmitIds(const std::vector<Function>& fns, const std::string& dir) {
  Out o(dir, "api_ids.h");
  auto& s = o.s();
  s << kBanner
    << "#ifndef REVENANT_API_API_IDS_H_\n#define REVENANT_API_API_IDS_H_\n\n"
    << "#include <cstdint>\n\n";
  // cuda.h #defines some driver names to their newest variant
  // (cuGetProcAddress is cuGetProcAddress_v2): the enumerators must not be
  // renamed where cuda.h was included first.
  for (const Function& f : fns) {
    if (IsDriver(f))
      s << "#pragma push_macro(\"" << f.name() << "\")\n#undef " << f.name() << "\n";
  }
  s << "\nnamespace revenant {\nnamespace api {\n\n"
    << "// One id per row of the API table, in table order; 0 is invalid.\n"
    << "enum class ApiId : uint16_t {\n  kInvalid = 0,\n";
  for (size_t i = 0; i < fns.size(); ++i) s << "  " << fns[i].name() << " = " << i + 1 << ",\n";
  s << "};\n\ninline constexpr int kApiCount = " << fns.size() + 1 << ";\n\n"
    << "}  // namespace api\n}  // namespace revenant\n\n";
  for (const Function& f : fns) {
    if (IsDriver(f)) s << "#pragma pop_macro(\"" << f.name() << "\")\n";
  }
  s << "\nnamespace revenant {\nnamespace api {\n\n"
    << "}  // namespace api\n}  // namespace revenant\n\n#endif  // REVENANT_API_API_IDS_H_\n";
}

void EmitTraits(const std::vector<Function>& fns, const std::string& dir) {
  Out o(dir, "api_traits.cc");
  auto& s = o.s();
  s << kBanner << "#include <cstring>\n\n#include \"api/traits.h\"\n\n"
    << "namespace revenant {\nnamespace api {\nnamespace {\n\n"
    << "const ApiTraits kTraits[kApiCount] = {\n"
    << "    {\"<invalid>\", Library::kUnspecified, Mode::kSync, JournalClass::kSkip, "
       "HandleKind::kNone, HandleKind::kNone, Support::kRefused, false, false, false, false},\n";
  for (const Function& f : fns) {
    s << "    {\"" << f.name() << "\", static_cast<Library>(" << f.library()
      << "), static_cast<Mode>(" << f.mode() << "), static_cast<JournalClass>(" << f.journal()
      << "), static_cast<HandleKind>(" << f.creates() << "), static_cast<HandleKind>("
      << f.destroys() << "), static_cast<Support>(" << f.support() << "), "
      << ((HasGeneratedDispatch(f) || HasHookDispatch(f)) ? "true" : "false") << ", "
      << (f.sets_attribute() ? "true" : "false") << ", "
      << (f.attribute_in_second() ? "true" : "false") << ", "
      << (f.assign_if().empty() ? "false" : "true") << "},\n";
  }
  s << "};\n\n}  // namespace\n\n"
    << "const ApiTraits& Traits(ApiId id) { return Traits(static_cast<uint32_t>(id)); }\n"
    << "const ApiTraits& Traits(uint32_t id) {\n"
    << "  return id < static_cast<uint32_t>(kApiCount) ? kTraits[id] : kTraits[0];\n}\n\n"
    << "ApiId FindApi(const char* name) {\n"
    << "  for (int i = 1; i < kApiCount; ++i)\n"
    << "    if (std::strcmp(kTraits[i].name, name) == 0) return static_cast<ApiId>(i);\n"
    << "  return ApiId::kInvalid;\n}\n\n"
    << "const char* HandleKindName(HandleKind kind) {\n"
    << "  static const char* kNames[] = {\"none\", \"stream\", \"event\", \"graph\", "
       "\"graph_exec\", \"graph_node\", \"mem_pool\", \"comm\", \"function\", \"kernel\", "
       "\"blas_handle\", \"lt_handle\", \"lt_matmul_desc\", \"lt_matrix_layout\", "
       "\"lt_matmul_preference\", \"dnn_handle\", \"dnn_descriptor\", \"dnn_tensor\", "
       "\"dnn_filter\", \"dnn_convolution\", \"dnn_activation\", \"dnn_pooling\", "
       "\"dnn_dropout\", \"dnn_rnn\", \"dnn_rnn_data\", \"dnn_ctc_loss\", "
       "\"dnn_spatial_transformer\"};\n"
    << "  static_assert(sizeof(kNames) / sizeof(kNames[0]) == kHandleKindCount,\n"
    << "                \"one name per handle kind\");\n"
    << "  int i = static_cast<int>(kind);\n"
    << "  return i >= 0 && i < kHandleKindCount ? kNames[i] : \"?\";\n}\n\n"
    << "}  // namespace api\n}  // namespace revenant\n";
}

// ---------------------------------------------------------------------------
// Shim stubs.

// The Sizer (pass 0, `sizer_`) or Encoder (pass 1, `args_`) calls of a
// generated stub for its parameters: the request layout the generated
// dispatcher reads. Expects `<name>_device_` for device_if parameters and
// `<name>_wire` for FUNCTION handles.
void EmitStubPuts(const Function& f, int pass, std::ostringstream& s) {
  const std::string w = pass == 0 ? "sizer_" : "args_";
  // An assign_if row: the id the shim assigned (0: none) comes first.
  if (!f.assign_if().empty()) s << "  " << w << ".Put(assigned_);\n";
  for (const Param& p : f.params()) {
    const std::string n = p.name();
    // A device_if pointer: a flag, then the address or the usual encoding.
    if (!p.device_if().empty()) {
      s << "  " << w << ".PutFlag(" << (pass == 0 ? "" : n + "_device_") << ");\n"
        << "  if (" << n << "_device_) {\n"
        << "    " << w << ".Put(reinterpret_cast<uint64_t>(" << n << "));\n  } else {\n  ";
    }
    switch (KindOf(f, p)) {
      case Kind::kValue:
        if (p.handle() == pb::FUNCTION)
          s << "  " << w << ".Put(" << n << "_wire);\n";
        else
          s << "  " << w << ".Put(" << n << ");\n";
        break;
      case Kind::kInBytes:
        s << "  " << w << ".PutBytes(" << n << ", " << n << " == nullptr ? 0 : (" << p.length()
          << "));\n";
        break;
      case Kind::kOutValue:
        s << "  " << w << (pass == 0 ? ".PutFlag();\n" : ".PutFlag(" + n + " != nullptr);\n");
        break;
      case Kind::kOutBytes:
        s << "  " << w << (pass == 0 ? ".PutFlag();\n" : ".PutFlag(" + n + " != nullptr);\n");
        s << "  " << w << ".Put(static_cast<uint64_t>(" << n << " == nullptr ? 0 : ("
          << p.length() << ")));\n";
        break;
      case Kind::kInOutValue:
        s << "  " << w << ".PutBytes(" << n << ", sizeof(*" << n << "));\n";
        break;
    }
    if (!p.device_if().empty()) s << "  }\n";
  }
}

void EmitShimStub(const Function& f, std::ostringstream& s) {
  const std::string unreachable = Unreachable(f);
  s << "extern \"C\" REVENANT_EXPORT " << f.returns() << " " << f.name() << "("
    << ParamList(f, true) << ") {\n";
  if (f.support() == pb::REFUSED) {
    s << "  ::revenant::shim::LogNotSupported(\"" << f.name() << "\");\n"
      << "  return " << NotSupported(f) << ";\n}\n\n";
    return;
  }
  // Calls the native library answers with success doing nothing.
  if (!f.success_if().empty()) {
    s << "  if (" << f.success_if() << ") return static_cast<" << f.returns() << ">(0);\n";
  }
  // Checks the native library makes at the call, before anything is sent.
  if (!f.shim_check().empty()) {
    s << "  {\n    const int32_t check_ = static_cast<int32_t>(" << f.shim_check() << ");\n"
      << "    if (check_ != 0) return static_cast<" << f.returns() << ">(check_);\n  }\n";
  }
  // Calls the shim answers itself (OUT values written by the expression).
  if (!f.shim_answer().empty()) {
    s << "  if (" << f.shim_answer() << ") return static_cast<" << f.returns() << ">(0);\n";
  }
  // A creation the shim assigns the handle of: sent without waiting.
  const Param* assigned = nullptr;
  if (!f.assign_if().empty()) {
    for (const Param& p : f.params())
      if (WritesBack(f, p)) assigned = &p;
    s << "  const uint64_t assigned_ = " << assigned->name() << " != nullptr && static_cast<bool>("
      << f.assign_if() << ") ? ::revenant::shim::AssignHandle(" << HandleEnum(f.creates())
      << ") : 0;\n";
  }
  // Pointers that travel as device addresses: decided once, before sizing.
  for (const Param& p : f.params()) {
    if (!p.device_if().empty())
      s << "  const bool " << p.name() << "_device_ = static_cast<bool>(" << p.device_if() << ");\n";
  }
  // Kernel handles are resolved before the request is opened: resolving may
  // itself send a request, and an open Call holds the ring.
  for (const Param& p : f.params()) {
    if (p.handle() == pb::FUNCTION && KindOf(f, p) == Kind::kValue) {
      s << "  const uint64_t " << p.name() << "_wire = ::revenant::shim::FunctionToWire("
        << p.name() << ");\n";
      // A registered kernel the agent could not resolve answers its own
      // error (cudaErrorInvalidDeviceFunction...), not an unknown handle's.
      if (f.library() == pb::CUDART) {
        s << "  if (const int32_t e_ = ::revenant::shim::FunctionError(" << p.name()
          << "); e_ != 0) return static_cast<" << f.returns() << ">(e_);\n";
      }
    }
  }
  // Size pass, then encode pass: identical sequences of calls.
  for (int pass = 0; pass < 2; ++pass) {
    if (pass == 0) {
      s << "  ::revenant::wire::Sizer sizer_;\n";
    } else {
      s << "  ::revenant::shim::Call call_(::revenant::api::ApiId::" << f.name()
        << ", sizer_.size()"
        << (f.async_if().empty() ? "" : ", static_cast<bool>(" + f.async_if() + ")")
        << (f.assign_if().empty() ? "" : ", assigned_ != 0") << ");\n"
        << "  if (!call_.ok()) return static_cast<" << f.returns() << ">(call_.FailureStatus("
        << unreachable << "));\n"
        << "  ::revenant::wire::Encoder& args_ = call_.args();\n  (void)args_;\n";
    }
    EmitStubPuts(f, pass, s);
  }
  s << "  if (!call_.Send()) return static_cast<" << f.returns() << ">(call_.FailureStatus("
    << unreachable << "));\n";
  if (assigned != nullptr) {
    // The handle is the id the shim assigned: the agent registers its object
    // under it (a failure there surfaces as a deferred error, and later calls
    // on the handle fail).
    s << "  if (assigned_ != 0) {\n"
      << "    std::memcpy(" << assigned->name() << ", &assigned_, sizeof(*" << assigned->name()
      << "));\n";
    if (!f.shim_done().empty()) s << "    " << f.shim_done() << ";\n";
    s << "    return static_cast<" << f.returns() << ">(call_.status());\n  }\n";
  }
  bool has_out = false;
  for (const Param& p : f.params()) has_out |= WritesBack(f, p);
  // OUT values and shim_done follow the agent's own status: a deferred NCCL
  // error returned by this call (docs/design.md, "NCCL calls") does not undo
  // what the call did.
  if (has_out || !f.shim_done().empty()) {
    s << "  if (call_.executed_status() == 0) {\n";
    if (has_out) s << "    ::revenant::wire::Decoder& reply_ = call_.reply();\n";
    for (const Param& p : f.params()) {
      if (!WritesBack(f, p)) continue;
      const Kind k = KindOf(f, p);
      const std::string n = p.name();
      s << "    if (" << n << " != nullptr" << (p.device_if().empty() ? "" : " && !" + n + "_device_")
        << ") call_.CopyOut(reply_, " << n << ", "
        << (k == Kind::kOutBytes ? "(" + p.length() + ")" : "sizeof(*" + n + ")") << ");\n";
    }
    if (!f.shim_done().empty()) s << "    " << f.shim_done() << ";\n";
    s << "  }\n";
  }
  s << "  return static_cast<" << f.returns() << ">(call_.status());\n}\n\n";
}

void EmitShim(const std::vector<Function>& fns, const std::string& dir) {
  Out o(dir, "shim_stubs.cc");
  auto& s = o.s();
  s << kBanner
    << "// The exported entry points of librevenant_shim.so for every row without a\n"
    << "// hand-written shim hook. Compiled against the real headers, so a row whose\n"
    << "// signature differs from CUDA's or NCCL's fails to compile.\n"
    << "#include <cublasLt.h>\n#include <cublas_api.h>\n#include <cuda.h>\n"
    << "#include <cuda_profiler_api.h>\n#include <cuda_runtime_api.h>\n#include <cudnn.h>\n"
    << "#include <nccl.h>\n\n#include <cstring>\n\n"
    << "#include \"api/dnn_args.h\"\n#include \"api/wire.h\"\n#include \"shim/blas_checks.h\"\n"
    << "#include \"shim/blaslt_checks.h\"\n#include \"shim/call.h\"\n"
    << "#include \"shim/dnn_checks.h\"\n#include \"shim/driver_checks.h\"\n#include \"shim/idle.h\"\n"
    << "#include \"shim/nccl_checks.h\"\n\n";
  for (const Function& f : fns)
    if (HasGeneratedShim(f)) EmitShimStub(f, s);
  // NCCL's profiling aliases: pncclX is ncclX.
  // Hand-written NCCL hooks define their own p-aliases.
  for (const Function& f : fns) {
    if (!IsNccl(f) || !HasGeneratedShim(f)) continue;
    s << "extern \"C\" REVENANT_EXPORT " << f.returns() << " p" << f.name() << "("
      << ParamList(f, true) << ") __attribute__((alias(\"" << f.name() << "\")));\n";
  }
}

void EmitShimHooksHeader(const std::vector<Function>& fns, const std::string& dir) {
  Out o(dir, "shim_hooks.h");
  auto& s = o.s();
  s << kBanner
    << "// Rows whose shim side is hand-written (support SHIM_HOOK/HOOK or mode\n"
    << "// LOCAL). shim/hooks_*.cc define them; a missing one fails the shim link\n"
    << "// test (every row must be exported).\n"
    << "#ifndef REVENANT_API_SHIM_HOOKS_H_\n#define REVENANT_API_SHIM_HOOKS_H_\n\n"
    << "inline constexpr const char* kShimHookNames[] = {\n";
  int n = 0;
  for (const Function& f : fns)
    if (!HasGeneratedShim(f)) {
      s << "    \"" << f.name() << "\",\n";
      ++n;
    }
  if (n == 0) s << "    \"\",\n";
  s << "};\n\n#endif  // REVENANT_API_SHIM_HOOKS_H_\n";
}

// ---------------------------------------------------------------------------
// Every other function the CUDA libraries export: refused in the shim.
//
// The libraries' exports (api:library_exports, from `nm -D` of the toolkit's
// libraries at build time) less the table's rows: each gets a stub in the
// shim that logs once and answers its library's "not supported" status, so
// no call of an application reaches a real CUDA library in its own process
// unseen (where the agent's memory does not exist).

struct LibraryExport {
  std::string soname;  // "libcublasLt.so.13"
  std::string name;    // "cublasLtMatmul"
};

struct LibraryInfo {
  const char* soname;
  const char* short_name;
  const char* version_node;   // "" for an unversioned library (NCCL)
  const char* refused_value;  // the library's "not supported" status
};

// The libraries whose every export the shim answers (PyTorch links them all).
constexpr LibraryInfo kLibraries[] = {
    {"libcudart.so.13", "cudart", "libcudart.so.13", "801 /* cudaErrorNotSupported */"},
    {"libcublas.so.13", "cublas", "libcublas.so.13", "15 /* CUBLAS_STATUS_NOT_SUPPORTED */"},
    {"libcublasLt.so.13", "cublasLt", "libcublasLt.so.13", "15 /* CUBLAS_STATUS_NOT_SUPPORTED */"},
    {"libcudnn.so.9", "cudnn", "libcudnn.so.9", "3000 /* CUDNN_STATUS_NOT_SUPPORTED */"},
    {"libnccl.so.2", "nccl", "", "5 /* ncclInvalidUsage */"},
    {"libcusparse.so.12", "cusparse", "libcusparse.so.12", "10 /* CUSPARSE_STATUS_NOT_SUPPORTED */"},
    {"libcufft.so.12", "cufft", "libcufft.so.12", "16 /* CUFFT_NOT_SUPPORTED */"},
    {"libcurand.so.10", "curand", "libcurand.so.10", "203 /* CURAND_STATUS_NOT_INITIALIZED */"},
    {"libcusolver.so.12", "cusolver", "libcusolver.so.12", "15 /* CUSOLVER_STATUS_NOT_SUPPORTED */"},
    {"libcuda.so.1", "driver", "", "801 /* CUDA_ERROR_NOT_SUPPORTED */"},
};

const LibraryInfo* FindLibrary(const std::string& soname) {
  for (const LibraryInfo& l : kLibraries)
    if (soname == l.soname) return &l;
  return nullptr;
}

// Names the shim exports from the table (and its own).
std::set<std::string> TableExports(const std::vector<Function>& fns) {
  std::set<std::string> out = {"revenantMarkStep"};
  for (const Function& f : fns) {
    out.insert(f.name());
    if (IsNccl(f)) out.insert("p" + f.name());
  }
  return out;
}

std::vector<LibraryExport> ReadLibraryExports(const std::string& path) {
  std::vector<LibraryExport> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) Die("cannot read " + path);
  std::string soname, name;
  std::set<std::string> seen;
  while (in >> soname >> name) {
    if (FindLibrary(soname) == nullptr) Die(path + ": unknown library " + soname);
    // C++ names are not part of the libraries' C APIs.
    if (name.rfind("_Z", 0) == 0) continue;
    if (!seen.insert(name).second) continue;  // exported by two: the first one
    out.push_back({soname, name});
  }
  return out;
}

// The refused exports: the libraries' exports the table has no row for.
std::vector<LibraryExport> Refused(const std::vector<Function>& fns,
                                   const std::vector<LibraryExport>& exports) {
  const std::set<std::string> table = TableExports(fns);
  std::vector<LibraryExport> out;
  for (const LibraryExport& e : exports)
    if (!table.count(e.name)) out.push_back(e);
  return out;
}

// Functions whose result is not a status: a string, or a version number.
enum class RefusedShape { kStatus, kString, kVersion };
RefusedShape ShapeOf(const std::string& name) {
  auto ends = [&](const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  if (ends("ErrorString") || ends("StatusString") || ends("ErrorName") || ends("StatusName"))
    return RefusedShape::kString;
  if (name == "cudnnGetVersion" || name == "cudnnGetMaxDeviceVersion" ||
      name == "cudnnGetCudartVersion" || name == "cublasLtGetVersion" ||
      name == "cublasLtGetCudartVersion" || name == "cublasGetCudartVersion")
    return RefusedShape::kVersion;
  return RefusedShape::kStatus;
}

void EmitRefused(const std::vector<Function>& fns, const std::vector<LibraryExport>& exports,
                 const std::string& dir) {
  Out o(dir, "shim_refused.cc");
  auto& s = o.s();
  s << kBanner
    << "// Every function the CUDA libraries export that the table has no row for:\n"
    << "// refused with one log line. No CUDA header is included: the stubs do not\n"
    << "// claim the functions' signatures (arguments are ignored; the result is a\n"
    << "// status, a string or a version number in a register).\n"
    << "#include <atomic>\n#include <cstddef>\n\n#include \"shim/refused.h\"\n\n"
    << "#define REVENANT_REFUSED_EXPORT extern \"C\" __attribute__((visibility(\"default\")))\n\n";
  int i = 0;
  for (const LibraryExport& e : Refused(fns, exports)) {
    const LibraryInfo& lib = *FindLibrary(e.soname);
    s << "static std::atomic<bool> refused_" << i << "{false};\n";
    switch (ShapeOf(e.name)) {
      case RefusedShape::kString:
        s << "REVENANT_REFUSED_EXPORT const char* " << e.name << "(...) {\n"
          << "  ::revenant::shim::NoteRefused(&refused_" << i << ", \"" << e.name << "\", \""
          << lib.soname << "\");\n"
          << "  return \"" << e.name << " is not supported under Revenant\";\n}\n";
        break;
      case RefusedShape::kVersion:
        s << "REVENANT_REFUSED_EXPORT size_t " << e.name << "(...) {\n"
          << "  ::revenant::shim::NoteRefused(&refused_" << i << ", \"" << e.name << "\", \""
          << lib.soname << "\");\n  return 0;\n}\n";
        break;
      case RefusedShape::kStatus:
        s << "REVENANT_REFUSED_EXPORT int " << e.name << "(...) {\n"
          << "  ::revenant::shim::NoteRefused(&refused_" << i << ", \"" << e.name << "\", \""
          << lib.soname << "\");\n  return " << lib.refused_value << ";\n}\n";
        break;
    }
    ++i;
  }
}

void EmitVersionScript(const std::vector<Function>& fns, const std::vector<LibraryExport>& exports,
                       const std::string& dir) {
  Out o(dir, "shim.map");
  auto& s = o.s();
  s << "/* Generated by codegen/apigen. Each name carries the version node of the\n"
    << "   library that exports it (runtime names libcudart.so.13's, cuBLAS names\n"
    << "   libcublas.so.13's, ...), so versioned references (name@libcublasLt.so.13)\n"
    << "   bind to the shim; NCCL's and other unversioned references bind to these\n"
    << "   default versions too. */\n";
  const std::vector<LibraryExport> refused = Refused(fns, exports);
  for (const LibraryInfo& lib : kLibraries) {
    const std::string node = *lib.version_node ? lib.version_node : "libcudart.so.13";
    if (!*lib.version_node) continue;  // unversioned names go into libcudart.so.13's node
    s << node << " {\n  global:\n";
    for (const Function& f : fns) {
      if (std::string(VersionNode(f.library())) != node) continue;
      s << "    " << f.name() << ";\n";
      if (IsNccl(f)) s << "    p" << f.name() << ";\n";
    }
    for (const LibraryExport& e : refused) {
      const LibraryInfo& from = *FindLibrary(e.soname);
      const std::string its = *from.version_node ? from.version_node : "libcudart.so.13";
      if (its == node) s << "    " << e.name << ";\n";
    }
    if (node == "libcudart.so.13") s << "    revenantMarkStep;\n  local:\n    *;\n";
    s << "};\n";
  }
  // The shim's dlopen/dlmopen (shim/hooks_driver_entry.cc) answer a load of
  // the driver with the shim itself. They carry glibc's versions (bound with
  // .symver there), so the application's versioned references (dlopen@GLIBC_2.2.5
  // and dlmopen@GLIBC_2.3.4 from libdl, both @GLIBC_2.34) bind to them.
  s << "GLIBC_2.2.5 {\n};\nGLIBC_2.3.4 {\n} GLIBC_2.2.5;\nGLIBC_2.34 {\n} GLIBC_2.3.4;\n";
}

// ---------------------------------------------------------------------------
// Agent: backend interface and dispatch.

void EmitBackend(const std::vector<Function>& fns, const std::string& dir) {
  {
    Out o(dir, "backend_api.h");
    auto& s = o.s();
    s << kBanner
      << "#ifndef REVENANT_API_BACKEND_API_H_\n#define REVENANT_API_BACKEND_API_H_\n\n"
      << "#include <cublasLt.h>\n#include <cublas_api.h>\n#include <cuda.h>\n"
      << "#include <cuda_runtime_api.h>\n#include <cudnn.h>\n#include <nccl.h>\n\n"
      << "#include <cstdint>\n\n#include \"api/traits.h\"\n\n"
      << "namespace revenant {\nnamespace api {\n\n"
      << "// What a backend (agent/backends/*) implements: one virtual per forwarded row\n"
      << "// with a generated dispatcher, in the API's own signature, after handle\n"
      << "// translation (stream/event/... arguments are the backend's own objects).\n"
      << "// Every default answers not-supported with one log line per function.\n"
      << "class BackendApi {\n public:\n  virtual ~BackendApi() = default;\n\n"
      << "  // Whether the scalars of calls on this handle (a backend object of\n"
      << "  // `kind`) are device pointers: cuBLAS's pointer mode. The dispatcher\n"
      << "  // refuses a device_if argument that disagrees. Default: host pointers.\n"
      << "  virtual bool DevicePointers(HandleKind kind, uint64_t handle) {\n"
      << "    (void)kind;\n    (void)handle;\n    return false;\n  }\n\n"
      << "  // A cuDNN row this backend does not implement: the default logs once per\n"
      << "  // function and answers CUDNN_STATUS_NOT_SUPPORTED; a backend may say why\n"
      << "  // (the host backend, for cudnnGetLastErrorString).\n"
      << "  virtual cudnnStatus_t DnnUnsupported(const char* api);\n\n";
    for (const Function& f : fns) {
      if (!HasGeneratedDispatch(f)) continue;
      s << "  virtual " << f.returns() << " " << f.name() << "(" << ParamList(f, true) << ");\n";
    }
    s << "};\n\n}  // namespace api\n}  // namespace revenant\n\n"
      << "#endif  // REVENANT_API_BACKEND_API_H_\n";
  }
  {
    Out o(dir, "backend_api.cc");
    auto& s = o.s();
    s << kBanner << "#include \"api/backend_api.h\"\n\n#include <mutex>\n#include <set>\n"
      << "#include <string>\n\n#include \"common/logging.h\"\n\n"
      << "namespace revenant {\nnamespace api {\n\n"
      << "cudnnStatus_t BackendApi::DnnUnsupported(const char* api) {\n"
      << "  static std::mutex mu;\n  static std::set<std::string>* logged = new std::set<std::string>();\n"
      << "  std::lock_guard<std::mutex> lock(mu);\n"
      << "  if (logged->insert(api).second)\n"
      << "    REVENANT_LOG(WARNING, \"agent\") << api << \" is not supported by this backend\";\n"
      << "  return CUDNN_STATUS_NOT_SUPPORTED;\n}\n\n";
    for (const Function& f : fns) {
      if (!HasGeneratedDispatch(f)) continue;
      if (IsCudnn(f)) {
        s << f.returns() << " BackendApi::" << f.name() << "(" << ParamList(f, false) << ") {\n"
          << "  return DnnUnsupported(\"" << f.name() << "\");\n}\n\n";
        continue;
      }
      s << f.returns() << " BackendApi::" << f.name() << "(" << ParamList(f, false) << ") {\n"
        << "  static bool logged = false;\n"
        << "  if (!logged) {\n    logged = true;\n"
        << "    REVENANT_LOG(WARNING, \"agent\") << \"" << f.name()
        << " is not supported by this backend\";\n  }\n"
        << "  return " << NotSupported(f) << ";\n}\n\n";
    }
    s << "}  // namespace api\n}  // namespace revenant\n";
  }
}

// Where the dispatcher's reply (`out`) takes an OUT value the backend writes:
// a byte field of the pointee's size.
std::string ReserveOutValue(const Param& p) {
  return "out.ReserveBytes(sizeof(" + Pointee(p.c_type()) + "))";
}

void EmitDispatchCase(const Function& f, std::ostringstream& s) {
  s << "    case ApiId::" << f.name() << ": {\n";
  // An assign_if row: the id the shim assigned (0: none) comes first. An id
  // of another form, or one already live, is refused before anything is
  // created (a misbehaving client cannot take over a live handle).
  if (!f.assign_if().empty()) {
    s << "      uint64_t assigned_ = 0;\n"
      << "      if (!in.Get(&assigned_)) return " << BadRequest(f) << ";\n"
      << "      if (assigned_ != 0 && !ctx.handles->CanAssign(" << HandleEnum(f.creates())
      << ", assigned_)) return " << BadRequest(f) << ";\n";
  }
  // Decode.
  for (const Param& p : f.params()) {
    const std::string n = p.name();
    if (!p.device_if().empty()) {
      // A flag, then a device address or the usual encoding.
      s << "      bool " << n << "_device = false;\n"
        << "      if (!in.GetFlag(&" << n << "_device)) return " << BadRequest(f) << ";\n"
        << "      " << p.c_type() << " " << n << " = nullptr;\n"
        // The backend reads the pointer by its own handle's pointer mode: a
        // request that disagrees with it is refused, never dereferenced.
        << "      if (" << n << "_device != ctx.backend->DevicePointers("
        << HandleEnum(f.params(PointerModeFrom(f)).handle()) << ", reinterpret_cast<uint64_t>("
        << f.params(PointerModeFrom(f)).name() << "))) return " << BadRequest(f) << ";\n"
        << "      alignas(16) char " << n << "_scalar[kScalarBytes] = {};\n"
        << "      (void)" << n << "_scalar;\n"
        << "      char* " << n << "_reply = nullptr;\n"
        << "      (void)" << n << "_reply;\n"
        << "      if (" << n << "_device) {\n"
        << "        uint64_t " << n << "_address = 0;\n"
        << "        if (!in.Get(&" << n << "_address)) return " << BadRequest(f) << ";\n"
        << "        " << n << " = reinterpret_cast<" << p.c_type() << ">(" << n << "_address);\n"
        << "      } else {\n";
      if (KindOf(f, p) == Kind::kInBytes) {
        // Scalars are copied into an aligned buffer at their type's size
        // (the request's bytes are only 8-byte aligned; a library may load
        // a double complex with 16-byte aligned loads): short ones are
        // zero-padded, so a truncated request never makes the backend read
        // past it; a longer one is refused.
        s << "        const char* " << n << "_data = nullptr;\n        uint64_t " << n << "_size = 0;\n"
          << "        if (!in.GetBytes(&" << n << "_data, &" << n << "_size)) return "
          << BadRequest(f) << ";\n"
          << "        if (" << n << "_size > kScalarBytes) return " << BadRequest(f) << ";\n"
          << "        if (" << n << "_data != nullptr) {\n"
          << "          std::memcpy(" << n << "_scalar, " << n << "_data, " << n << "_size);\n"
          << "          " << n << "_data = " << n << "_scalar;\n"
          << "        }\n"
          << "        " << n << " = reinterpret_cast<" << p.c_type() << ">(const_cast<char*>(" << n
          << "_data));\n";
      } else {
        s << "        bool " << n << "_present = false;\n"
          << "        if (!in.GetFlag(&" << n << "_present)) return " << BadRequest(f) << ";\n"
          << "        if (" << n << "_present) {\n"
          // The backend writes into the aligned scalar; it is copied into
          // the reply after the call.
          << "          " << n << "_reply = " << ReserveOutValue(p) << ";\n"
          << "          if (" << n << "_reply == nullptr) return " << BadRequest(f) << ";\n"
          << "          " << n << " = reinterpret_cast<" << p.c_type() << ">(" << n << "_scalar);\n"
          << "        }\n";
      }
      s << "      }\n";
      continue;
    }
    switch (KindOf(f, p)) {
      case Kind::kValue:
        if (const EnumRange* e = FindEnumRange(p.c_type()); e != nullptr && p.handle() == pb::NO_HANDLE) {
          const bool cudnn_enum = std::string(e->type).rfind("cudnn", 0) == 0;
          const bool own_library =
              cudnn_enum ? IsCudnn(f) : f.library() == pb::CUDART || f.library() == pb::CUDART_NVCC;
          const std::string bad =
              own_library && *e->own_library_error != '\0' ? e->own_library_error : BadRequest(f);
          s << "      std::underlying_type_t<" << e->type << "> " << n << "_raw{};\n"
            << "      if (!in.Get(&" << n << "_raw)) return " << BadRequest(f) << ";\n"
            << "      if (" << n << "_raw < static_cast<std::underlying_type_t<" << e->type << ">>("
            << e->min << ") || " << n << "_raw > static_cast<std::underlying_type_t<" << e->type
            << ">>(" << e->max << ")) return " << bad << ";\n"
            << "      const " << e->type << " " << n << " = static_cast<" << e->type << ">(" << n
            << "_raw);\n";
          break;
        }
        s << "      " << LocalType(p.c_type()) << " " << n << "{};\n"
          << "      if (!in.Get(&" << n << ")) return " << BadRequest(f) << ";\n";
        if (p.handle() != pb::NO_HANDLE) {
          s << "      const auto " << n << "_virtual = " << n << ";\n"
            << "      if (" << (p.null_ok() ? n + " != " + LocalType(p.c_type()) + "{} && " : std::string())
            << "!ctx.handles->ToBackend(" << HandleEnum(p.handle()) << ", &" << n << ")"
            << (p.or_handle() == pb::NO_HANDLE
                    ? std::string()
                    : " && !ctx.handles->ToBackend(" + HandleEnum(p.or_handle()) + ", &" + n + ")")
            << ") return " << BadHandle(f, p) << ";\n"
            << "      (void)" << n << "_virtual;\n";
        }
        break;
      case Kind::kInBytes:
        s << "      const char* " << n << "_data = nullptr;\n      uint64_t " << n
          << "_size = 0;\n"
          << "      if (!in.GetBytes(&" << n << "_data, &" << n << "_size)) return "
          << BadRequest(f) << ";\n"
          << "      " << p.c_type() << " " << n << " = reinterpret_cast<" << p.c_type()
          << ">(const_cast<char*>(" << n << "_data));\n";
        break;
      case Kind::kOutValue:
        s << "      bool " << n << "_present = false;\n"
          << "      if (!in.GetFlag(&" << n << "_present)) return " << BadRequest(f) << ";\n"
          << "      " << p.c_type() << " " << n << " = nullptr;\n"
          << "      if (" << n << "_present) {\n"
          << "        " << n << " = reinterpret_cast<" << p.c_type() << ">(" << ReserveOutValue(p)
          << ");\n"
          << "        if (" << n << " == nullptr) return " << BadRequest(f) << ";\n"
          << "        std::memset(" << n << ", 0, sizeof(" << Pointee(p.c_type()) << "));\n      }\n";
        break;
      case Kind::kOutBytes:
        s << "      bool " << n << "_present = false;\n      uint64_t " << n << "_size = 0;\n"
          << "      if (!in.GetFlag(&" << n << "_present) || !in.Get(&" << n << "_size)) return "
          << BadRequest(f) << ";\n"
          << "      " << p.c_type() << " " << n << " = nullptr;\n"
          << "      if (" << n << "_present) {\n"
          << "        char* " << n << "_buf = out.ReserveBytes(" << n << "_size);\n"
          << "        if (" << n << "_buf == nullptr) return " << BadRequest(f) << ";\n"
          << "        std::memset(" << n << "_buf, 0, " << n << "_size);\n"
          << "        " << n << " = reinterpret_cast<" << p.c_type() << ">(" << n << "_buf);\n"
          << "      }\n";
        break;
      case Kind::kInOutValue:
        s << "      const char* " << n << "_data = nullptr;\n      uint64_t " << n
          << "_size = 0;\n"
          << "      if (!in.GetBytes(&" << n << "_data, &" << n << "_size)) return "
          << BadRequest(f) << ";\n"
          << "      " << p.c_type() << " " << n << " = nullptr;\n"
          << "      if (" << n << "_data != nullptr) {\n"
          << "        if (" << n << "_size != sizeof(" << Pointee(p.c_type()) << ")) return "
          << BadRequest(f) << ";\n"
          << "        char* " << n << "_buf = out.ReserveBytes(" << n << "_size);\n"
          << "        if (" << n << "_buf == nullptr) return " << BadRequest(f) << ";\n"
          << "        std::memcpy(" << n << "_buf, " << n << "_data, " << n << "_size);\n"
          << "        " << n << " = reinterpret_cast<" << p.c_type() << ">(" << n << "_buf);\n"
          << "      }\n";
        break;
    }
  }
  s << "      if (in.remaining() != 0) return " << BadRequest(f) << ";\n";
  // A byte buffer's size is what its length expression says, where the agent
  // can evaluate it (no shim function): the backend reads or writes that
  // many bytes (a getter's sizeInBytes), so a request whose buffer is shorter
  // is refused, never overrun.
  for (const Param& p : f.params()) {
    const Kind k = KindOf(f, p);
    if (!p.device_if().empty() || p.length().find("::") != std::string::npos) continue;
    if (k == Kind::kInBytes) {
      s << "      if (" << p.name() << "_data != nullptr && " << p.name()
        << "_size != static_cast<uint64_t>(" << p.length() << ")) return " << BadRequest(f)
        << ";\n";
    } else if (k == Kind::kOutBytes) {
      s << "      if (" << p.name() << "_present && " << p.name()
        << "_size != static_cast<uint64_t>(" << p.length() << ")) return " << BadRequest(f)
        << ";\n";
    }
  }
  s << "      const " << f.returns() << " rc = ctx.backend->" << f.name() << "(" << ArgList(f)
    << ");\n";
  for (const Param& p : f.params()) {
    if (p.device_if().empty() || KindOf(f, p) == Kind::kInBytes) continue;
    s << "      if (" << p.name() << "_reply != nullptr) std::memcpy(" << p.name() << "_reply, "
      << p.name() << "_scalar, sizeof(" << Pointee(p.c_type()) << "));\n";
  }
  // Handle bookkeeping on success.
  bool any = false;
  for (const Param& p : f.params()) {
    Kind k = KindOf(f, p);
    if (p.handle() == pb::NO_HANDLE) continue;
    if ((k == Kind::kOutValue || k == Kind::kInOutValue)) any = true;
  }
  if (any || f.destroys() != pb::NO_HANDLE) {
    s << "      if (rc == 0) {\n";
    for (const Param& p : f.params()) {
      Kind k = KindOf(f, p);
      if (p.handle() == pb::NO_HANDLE) continue;
      if (k == Kind::kOutValue || k == Kind::kInOutValue) {
        const std::string fn = p.handle() == f.creates() ? "Register" : "ToVirtual";
        if (!f.assign_if().empty() && p.handle() == f.creates()) {
          s << "        if (" << p.name() << " != nullptr && assigned_ != 0) ctx.handles->"
            << "RegisterAssigned(" << HandleEnum(p.handle()) << ", " << p.name()
            << ", assigned_);\n"
            << "        else if (" << p.name() << " != nullptr) ctx.handles->Register("
            << HandleEnum(p.handle()) << ", " << p.name() << ");\n";
          continue;
        }
        // An optional handle the library answers null for stays null.
        s << "        if (" << p.name() << " != nullptr"
          << (p.null_ok() ? " && *" + p.name() + " != " + Pointee(p.c_type()) + "{}" : std::string())
          << ") ctx.handles->" << fn << "("
          << HandleEnum(p.handle()) << ", " << p.name() << ");\n";
      }
    }
    if (f.destroys() != pb::NO_HANDLE) {
      for (const Param& p : f.params()) {
        if (p.handle() == f.destroys() && p.dir() == pb::IN) {
          s << "        ctx.handles->Remove(" << HandleEnum(p.handle()) << ", " << p.name()
            << "_virtual);\n";
          break;
        }
      }
    }
    s << "      }\n";
  }
  s << "      return static_cast<int32_t>(rc);\n    }\n";
}

void EmitDispatch(const std::vector<Function>& fns, const std::string& dir) {
  {
    Out o(dir, "agent_hooks.h");
    auto& s = o.s();
    s << kBanner
      << "#ifndef REVENANT_API_AGENT_HOOKS_H_\n#define REVENANT_API_AGENT_HOOKS_H_\n\n"
      << "#include <cstdint>\n\n#include \"api/wire.h\"\n\n"
      << "namespace revenant {\nnamespace agent {\n\nstruct DispatchContext;\n\n"
      << "// Hand-written agent handlers of HOOK rows (agent/hooks_*.cc). Each decodes\n"
      << "// its request from `in`, writes OUT values to `out` and returns the API's\n"
      << "// status; a missing definition fails the agent's link.\n";
    for (const Function& f : fns)
      if (HasHookDispatch(f))
        s << "int32_t Hook_" << f.name()
          << "(DispatchContext& ctx, wire::Decoder& in, wire::Encoder& out);\n";
    s << "\n}  // namespace agent\n}  // namespace revenant\n\n#endif  // REVENANT_API_AGENT_HOOKS_H_\n";
  }
  Out o(dir, "dispatch.cc");
  auto& s = o.s();
  s << kBanner << "#include <cstring>\n#include <type_traits>\n\n#include \"agent/dispatch.h\"\n"
    << "#include \"api/agent_hooks.h\"\n#include \"api/backend_api.h\"\n\n"
    << "namespace revenant {\nnamespace agent {\n\nusing ::revenant::api::ApiId;\n\n"
    << "// The largest scalar a device_if parameter points to (a double complex).\n"
    << "constexpr uint64_t kScalarBytes = 16;\n\n"
    << "int32_t Dispatch(ApiId id, wire::Decoder& in, wire::Encoder& out, DispatchContext& ctx) {\n"
    << "  switch (id) {\n";
  for (const Function& f : fns) {
    if (HasGeneratedDispatch(f)) EmitDispatchCase(f, s);
    if (HasHookDispatch(f))
      s << "    case ApiId::" << f.name() << ":\n      return Hook_" << f.name()
        << "(ctx, in, out);\n";
  }
  s << "    default:\n      return kNoDispatcher;\n  }\n}\n\n"
    << "}  // namespace agent\n}  // namespace revenant\n";
}

// A library's forwarded rows as an X-macro, for backends that forward them to
// the real library (CudaBackend and libcublas) or declare them all alike.
void EmitLibraryRows(const std::vector<Function>& fns, const std::string& dir) {
  Out o(dir, "library_rows.h");
  auto& s = o.s();
  s << kBanner
    << "#ifndef REVENANT_API_LIBRARY_ROWS_H_\n#define REVENANT_API_LIBRARY_ROWS_H_\n\n"
    << "// X(name, (parameters with types), (arguments)) for every row of a library\n"
    << "// with a generated dispatcher (a virtual of api::BackendApi returning the\n"
    << "// library's status type).\n";
  const std::pair<Library, const char*> kMacros[] = {
      {pb::CUBLAS, "REVENANT_CUBLAS_ROWS"},
      {pb::CUBLASLT, "REVENANT_CUBLASLT_ROWS"},
      {pb::CUDNN, "REVENANT_CUDNN_ROWS"},
      {pb::DRIVER, "REVENANT_DRIVER_ROWS"},
  };
  for (const auto& [lib, macro] : kMacros) {
    s << "#define " << macro << "(X)";
    for (const Function& f : fns) {
      if (f.library() != lib || !HasGeneratedDispatch(f)) continue;
      s << " \\\n  X(" << f.name() << ", (" << ParamList(f, true) << "), (" << ArgList(f) << "))";
    }
    s << "\n";
  }
  s << "\n#endif  // REVENANT_API_LIBRARY_ROWS_H_\n";
}


// ---------------------------------------------------------------------------
// The driver's entry points by base name and CUDA version.
//
// cuda.h's `#define cuMemAlloc cuMemAlloc_v2` and cudaTypedefs.h's
// PFN_cuMemAlloc_v2000 / PFN_cuMemAlloc_v3020 say which variant a program
// built for a CUDA version calls: the base name's variants (cuMemAlloc,
// cuMemAlloc_v2, cuMemAlloc_v3...: the driver's exports, per-thread-stream
// _ptsz/_ptds variants left out) are paired in order with the versions its
// typedefs name (the n-th variant was introduced in the n-th version). A
// base whose variants and versions differ in number fails the build: the
// toolkit changed its naming and the rule must be looked at again. An export
// without typedefs is reachable under its own name from version 0.

std::map<std::string, std::set<int>> ReadDriverVersions(const std::string& path) {
  std::map<std::string, std::set<int>> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  if (!in) Die("cannot read " + path);
  std::string base;
  int version = 0;
  while (in >> base >> version) out[base].insert(version);
  return out;
}

void EmitDriverNames(const std::vector<LibraryExport>& exports,
                     const std::map<std::string, std::set<int>>& versions,
                     const std::string& dir) {
  Out o(dir, "shim_driver_names.cc");
  auto& s = o.s();
  std::set<std::string> driver;
  for (const LibraryExport& e : exports)
    if (e.soname == "libcuda.so.1") driver.insert(e.name);
  auto ends = [](const std::string& n, const char* suffix) {
    const std::string x(suffix);
    return n.size() > x.size() && n.compare(n.size() - x.size(), x.size(), x) == 0;
  };
  // (base, version, export), sorted by base then version.
  std::map<std::string, std::vector<std::pair<int, std::string>>> table;
  std::set<std::string> paired;
  for (const auto& [base, vs] : versions) {
    std::vector<std::string> variants;
    if (driver.count(base)) variants.push_back(base);
    for (int n = 2; n < 10; ++n) {
      const std::string v = base + "_v" + std::to_string(n);
      if (driver.count(v)) variants.push_back(v);
    }
    if (variants.empty()) continue;  // a typedef of a function this driver lacks
    if (variants.size() != vs.size())
      Die("driver function " + base + ": " + std::to_string(variants.size()) +
          " exported variants but " + std::to_string(vs.size()) +
          " introduction versions in cudaTypedefs.h; see EmitDriverNames");
    size_t i = 0;
    for (int v : vs) {
      table[base].push_back({v, variants[i]});
      paired.insert(variants[i]);
      ++i;
    }
  }
  for (const std::string& name : driver) {
    if (paired.count(name) || ends(name, "_ptsz") || ends(name, "_ptds")) continue;
    if (table.count(name)) continue;
    table[name].push_back({0, name});
  }
  s << kBanner
    << "// The driver's base names with the CUDA version each variant was introduced\n"
    << "// in and the shim's export that answers it (codegen/apigen.cc, EmitDriverNames).\n"
    << "#include \"shim/driver_names.h\"\n\n"
    << "namespace revenant {\nnamespace shim {\n\n"
    << "const DriverSymbol kDriverSymbols[] = {\n";
  size_t n = 0;
  for (const auto& [base, rows] : table) {
    for (const auto& [v, name] : rows) {
      s << "    {\"" << base << "\", " << v << ", \"" << name << "\"},\n";
      ++n;
    }
  }
  if (n == 0) s << "    {\"\", 0, \"\"},\n";
  s << "};\n\nconst size_t kDriverSymbolCount = " << n << ";\n\n"
    << "}  // namespace shim\n}  // namespace revenant\n";
}
// ---------------------------------------------------------------------------

const char* ModeName(pb::Mode m) {
  return m == pb::SYNC ? "sync" : m == pb::ASYNC ? "async" : "local";
}
const char* JournalName(pb::JournalClass j) {
  return j == pb::STATE ? "STATE" : j == pb::REPLAY ? "REPLAY" : "SKIP";
}
const char* SupportName(pb::Support s) {
  switch (s) {
    case pb::GENERATED: return "generated";
    case pb::SHIM_HOOK: return "shim hook";
    case pb::HOOK: return "hook";
    default: return "refused";
  }
}
const char* LibraryName(Library l) {
  switch (l) {
    case pb::CUDART: return "cudart";
    case pb::CUDART_NVCC: return "nvcc";
    case pb::NCCL: return "nccl";
    case pb::CUBLAS: return "cublas";
    case pb::CUBLASLT: return "cublasLt";
    case pb::CUDNN: return "cudnn";
    case pb::DRIVER: return "driver";
    default: return "?";
  }
}

void EmitCoverage(const std::vector<Function>& fns, const std::vector<LibraryExport>& exports,
                  const std::string& dir) {
  Out o(dir, "api_coverage.md");
  auto& s = o.s();
  std::map<std::string, int> per_support;
  for (const Function& f : fns) per_support[SupportName(f.support())]++;
  s << "# API coverage\n\n"
    << "Generated by codegen/apigen from the API table (api/*.textproto); do not edit.\n"
    << "`scripts/update_api_coverage.sh` refreshes this file and `//api:coverage_doc_test`\n"
    << "fails when it is stale.\n\n"
    << fns.size() << " functions:";
  for (auto& [k, v] : per_support) s << " " << v << " " << k << ";";
  // Per library: remoted (answered by the agent) and answered in the shim.
  std::map<std::string, std::pair<int, int>> per_library;
  for (const Function& f : fns) {
    auto& [remoted, other] = per_library[LibraryName(f.library())];
    (Forwarded(f) ? remoted : other)++;
  }
  s << "\n\nPer library (remoted by the agent / answered in the shim, refusals included):";
  for (auto& [lib, counts] : per_library)
    s << " " << lib << " " << counts.first << " / " << counts.second << ";";
  if (!exports.empty()) {
    // Per shared object: its exports with a row, and those refused.
    std::map<std::string, std::pair<int, int>> per_so;
    const std::set<std::string> table = TableExports(fns);
    for (const LibraryExport& e : exports) {
      auto& [rows, refused] = per_so[e.soname];
      (table.count(e.name) ? rows : refused)++;
    }
    s << "\n\nEvery function the CUDA libraries export (`nm -D` of the toolkit's libraries at"
      << " build time) is exported by the shim: from a row of the table, or refused (one log"
      << " line, the library's \"not supported\" status; `//shim:library_exports_test` checks"
      << " it). Per library (with a row / refused):";
    for (const LibraryInfo& l : kLibraries) {
      auto it = per_so.find(l.soname);
      if (it == per_so.end()) continue;
      s << " " << l.soname << " " << it->second.first << " / " << it->second.second << ";";
    }
  }
  s << "\n\n- **mode**: sync (waits for the agent), async (returns at once; errors surface"
    << " later), local (answered in the shim).\n"
    << "- **journal**: STATE (setup log, compacted), REPLAY (minibatch log), SKIP.\n"
    << "- **support**: generated (stub and dispatcher from the row), shim hook / hook"
    << " (hand-written shim side / both sides), refused (answers not-supported with one log"
    << " line).\n\n"
    << "| function | library | mode | journal | support | handles | note |\n"
    << "|---|---|---|---|---|---|---|\n";
  for (const Function& f : fns) {
    std::string handles;
    if (f.creates() != pb::NO_HANDLE)
      handles += std::string("creates ") + pb::HandleKind_Name(f.creates());
    if (f.destroys() != pb::NO_HANDLE)
      handles += std::string(handles.empty() ? "" : ", ") + "destroys " +
                 pb::HandleKind_Name(f.destroys());
    s << "| `" << f.name() << "` | " << LibraryName(f.library()) << " | " << ModeName(f.mode())
      << " | " << JournalName(f.journal()) << " | " << SupportName(f.support()) << " | "
      << handles << " | " << f.note() << " |\n";
  }
}


// --- Hook structs (api/hook_structs.h) ------------------------------------------------
//
// Every HOOK row's request and reply as a struct with Size/Encode/Decode, so
// the shim and the agent share one definition of each layout. Groups
// (ApiTable.groups) are structs of their own, inlined on the wire.

using pb::WireField;
using pb::WireGroup;

// --- Structs of SHIM_HOOK rows, from their parameters ----------------------------
//
// A SHIM_HOOK row's request is what a generated stub would encode for its
// parameters (EmitStubPuts) and its reply what the generated dispatcher
// writes: the hand-written shim side fills the derived structs instead of
// calling the encoder field by field. //api:hook_structs_test compares the
// two encodings byte for byte.

// The wire type of an IN value parameter: a handle or a pointer is 8 bytes
// (a FUNCTION handle: the shim's id of the kernel), an integer its own
// width, any other type an enum of 4 bytes (*as_enum set; the test helpers
// assert it).
std::string ParamWireType(const Param& p, bool* as_enum) {
  *as_enum = false;
  if (p.handle() != pb::NO_HANDLE || IsPointer(p.c_type())) return "u64";
  static const std::map<std::string, std::string> kIntegers = {
      {"int", "i32"},       {"int32_t", "i32"},           {"unsigned int", "u32"},
      {"unsigned", "u32"},  {"uint32_t", "u32"},          {"size_t", "u64"},
      {"uint64_t", "u64"},  {"unsigned long long", "u64"}, {"cuuint64_t", "u64"},
      {"CUdeviceptr", "u64"}, {"int64_t", "i64"},         {"long long", "i64"},
      {"uint8_t", "u8"},    {"unsigned char", "u8"},      {"dim3", "dim3"}};
  auto it = kIntegers.find(LocalType(p.c_type()));
  if (it != kIntegers.end()) return it->second;
  *as_enum = true;
  return "i32";
}

// The request and reply fields of a SHIM_HOOK row, in the dispatcher's
// order: an IN value is its wire type, an OUT value a flag (whether the
// pointer is non-null), and the reply holds each OUT value asked for as
// bytes of the pointee's size. Any other parameter fails the build.
void ParamWireFields(const Function& f, google::protobuf::RepeatedPtrField<WireField>* request,
                     google::protobuf::RepeatedPtrField<WireField>* reply) {
  for (const Param& p : f.params()) {
    if (!p.device_if().empty())
      Die(f.name() + "." + p.name() + ": a SHIM_HOOK row's structs have no device_if parameters");
    WireField* field = request->Add();
    field->set_name(p.name());
    bool as_enum = false;
    switch (KindOf(f, p)) {
      case Kind::kValue:
        field->set_type(ParamWireType(p, &as_enum));
        field->set_doc(p.c_type() + " " + p.name());
        if (p.handle() == pb::FUNCTION) {
          field->set_doc(field->doc() + ": the shim's id of the kernel (shim::FunctionToWire)");
        } else if (p.handle() != pb::NO_HANDLE) {
          field->set_doc(field->doc() + ": a virtual " + pb::HandleKind_Name(p.handle()) + " handle");
        }
        break;
      case Kind::kOutValue: {
        field->set_type("flag");
        field->set_doc("whether " + p.name() + " is non-null");
        WireField* out = reply->Add();
        out->set_name(p.name());
        out->set_type("bytes");
        out->set_present_if("req." + p.name());
        out->set_doc("*" + p.name() + " (" + Pointee(p.c_type()) + ")");
        break;
      }
      default:
        Die(f.name() + "." + p.name() +
            ": a SHIM_HOOK row's structs take IN and OUT values only (ParamWireFields)");
    }
  }
}

// The row as its hook structs see it: a SHIM_HOOK row with the fields its
// parameters give.
Function WithWireFields(const Function& f) {
  Function out = f;
  if (HasParamStructs(f)) ParamWireFields(f, out.mutable_request(), out.mutable_reply());
  return out;
}

// Rows with structs of their own: HOOK rows not laid out as another row,
// and SHIM_HOOK rows.
bool HasOwnStructs(const Function& f) {
  return (f.support() == pb::HOOK && f.wire_as().empty()) || HasParamStructs(f);
}

bool IsScalarWireType(const std::string& t) {
  return t == "u8" || t == "u32" || t == "i32" || t == "u64" || t == "i64" || t == "dim3";
}

std::string WireCType(const std::string& t) {
  if (t == "u8") return "uint8_t";
  if (t == "u32") return "uint32_t";
  if (t == "i32") return "int32_t";
  if (t == "u64") return "uint64_t";
  if (t == "i64") return "int64_t";
  if (t == "dim3") return "dim3";
  if (t == "flag") return "bool";
  if (t == "bytes") return "wire::Bytes";
  return t;  // a group
}

bool NeedsRequest(const google::protobuf::RepeatedPtrField<WireField>& fields) {
  for (const WireField& f : fields)
    if (f.present_if().find("req.") != std::string::npos) return true;
  return false;
}

void ValidateWireFields(const std::string& where,
                        const google::protobuf::RepeatedPtrField<WireField>& fields,
                        const std::set<std::string>& groups, bool reply) {
  std::set<std::string> names;
  for (const WireField& f : fields) {
    if (f.name().empty()) Die(where + ": a wire field without a name");
    if (!names.insert(f.name()).second) Die(where + ": duplicate wire field " + f.name());
    const std::string& t = f.type();
    if (!IsScalarWireType(t) && t != "flag" && t != "bytes" && !groups.count(t))
      Die(where + "." + f.name() + ": unknown wire type '" + t +
          "' (u8, u32, i32, u64, i64, flag, bytes, dim3 or an earlier group)");
    if (!reply && f.present_if().find("req.") != std::string::npos)
      Die(where + "." + f.name() + ": only a reply's condition may name the request");
  }
}

void ValidateHookWire(const std::vector<Function>& fns, const std::vector<WireGroup>& groups) {
  std::set<std::string> known;
  for (const WireGroup& g : groups) {
    if (g.name().empty()) Die("a wire group without a name");
    ValidateWireFields("group " + g.name(), g.fields(), known, false);
    if (!known.insert(g.name()).second) Die("duplicate wire group " + g.name());
  }
  std::map<std::string, const Function*> by_name;
  for (const Function& f : fns) by_name[f.name()] = &f;
  for (const Function& f : fns) {
    const bool has_wire = f.request_size() > 0 || f.reply_size() > 0 || !f.wire_as().empty();
    if (HasParamStructs(f) && !has_wire) {
      const Function derived = WithWireFields(f);
      ValidateWireFields(f.name() + " request", derived.request(), known, false);
      ValidateWireFields(f.name() + " reply", derived.reply(), known, true);
    }
    if (f.support() != pb::HOOK) {
      if (has_wire) Die(f.name() + ": request/reply/wire_as belong to HOOK rows");
      continue;
    }
    if (!f.wire_as().empty()) {
      auto it = by_name.find(f.wire_as());
      if (f.request_size() > 0 || f.reply_size() > 0)
        Die(f.name() + ": wire_as and fields of its own");
      if (it == by_name.end() || it->second->support() != pb::HOOK || !it->second->wire_as().empty())
        Die(f.name() + ": wire_as must name a HOOK row with fields of its own");
    }
    ValidateWireFields(f.name() + " request", f.request(), known, false);
    ValidateWireFields(f.name() + " reply", f.reply(), known, true);
  }
}

// The members, then Size/Encode/Decode of one struct. `req_type`: the
// request struct a reply's conditions read (empty: none).
void EmitWireStruct(const std::string& name, const std::string& doc,
                    const google::protobuf::RepeatedPtrField<WireField>& fields,
                    const std::string& req_type, std::ostringstream& s) {
  if (!doc.empty()) s << "// " << doc << "\n";
  s << "struct " << name << " {\n";
  for (const WireField& f : fields) {
    if (!f.doc().empty()) s << "  // " << f.doc() << "\n";
    if (!f.present_if().empty()) s << "  // On the wire when " << f.present_if() << ".\n";
    const std::string ct = WireCType(f.type());
    s << "  " << ct << " " << f.name();
    if (IsScalarWireType(f.type()) && f.type() != "dim3") s << " = 0";
    if (f.type() == "flag") s << " = false";
    s << ";\n";
  }
  const std::string rp = req_type.empty() ? "" : ", const " + req_type + "& req";
  const std::string rp_only = req_type.empty() ? "" : "const " + req_type + "& req";
  // One statement per field, in wire order, under the field's condition.
  auto each_field = [&](auto statement) {
    if (!req_type.empty()) s << "    (void)req;\n";
    for (const WireField& f : fields) {
      const bool conditional = !f.present_if().empty();
      if (conditional) s << "    if (" << f.present_if() << ") {\n";
      s << (conditional ? "      " : "    ") << statement(f.name(), f.type()) << "\n";
      if (conditional) s << "    }\n";
    }
  };
  s << "\n  // The bytes Encode writes.\n"
    << "  size_t Size(" << rp_only << ") const {\n    wire::Sizer w;\n    SizeInto(w"
    << (req_type.empty() ? "" : ", req") << ");\n    return w.size();\n  }\n"
    << "  void SizeInto(wire::Sizer& w" << rp << ") const {\n";
  each_field([](const std::string& n, const std::string& t) {
    if (IsScalarWireType(t)) return "w.Put(" + n + ");";
    if (t == "flag") return std::string("w.PutFlag();");
    if (t == "bytes")
      return "if (" + n + ".reserve) w.ReserveBytes(" + n + ".size); else w.PutBytes(" + n +
             ".data, " + n + ".size);";
    return n + ".SizeInto(w);";
  });
  s << "  }\n"
    << "  // A bytes field with `reserve` set is reserved, not copied: its\n"
    << "  // `fill` then says where its bytes go (null on overflow).\n"
    << "  void Encode(wire::Encoder& w" << rp << ") const {\n";
  each_field([](const std::string& n, const std::string& t) {
    if (IsScalarWireType(t)) return "w.Put(" + n + ");";
    if (t == "flag") return "w.PutFlag(" + n + ");";
    if (t == "bytes")
      return "if (" + n + ".reserve) " + n + ".fill = w.ReserveBytes(" + n +
             ".size); else w.PutBytes(" + n + ".data, " + n + ".size);";
    return n + ".Encode(w);";
  });
  s << "  }\n"
    << "  // False when the body is too short or a flag is not 0/1 (the fields\n"
    << "  // read so far are set). Bytes fields point into the body.\n"
    << "  bool Decode(wire::Decoder& r" << rp << ") {\n";
  each_field([](const std::string& n, const std::string& t) {
    if (IsScalarWireType(t)) return "if (!r.Get(&" + n + ")) return false;";
    if (t == "flag") return "if (!r.GetFlag(&" + n + ")) return false;";
    if (t == "bytes") return "if (!r.GetBytes(&" + n + ".data, &" + n + ".size)) return false;";
    return "if (!" + n + ".Decode(r)) return false;";
  });
  s << "    return true;\n  }\n};\n\n";
}

// A test helper: fills every field of a struct from `seed` (scalars small
// enough that conditions on modes and types take every branch over seeds).
void EmitFill(const std::string& name,
              const google::protobuf::RepeatedPtrField<WireField>& fields,
              std::ostringstream& s) {
  s << "inline void FillForTest(" << name << "* x, uint64_t seed) {\n  (void)x; (void)seed;\n";
  int ordinal = 0;
  for (const WireField& f : fields) {
    ++ordinal;
    const std::string& t = f.type();
    const std::string m = "x->" + f.name();
    if (t == "u8" || t == "u32" || t == "i32")
      s << "  " << m << " = static_cast<" << WireCType(t) << ">(seed % 16);\n";
    else if (t == "u64" || t == "i64")
      s << "  " << m << " = static_cast<" << WireCType(t) << ">(seed % 16 + 16 * " << ordinal
        << ");\n";
    else if (t == "dim3")
      s << "  " << m << " = dim3(static_cast<unsigned>(seed + 1), 2, " << ordinal << ");\n";
    else if (t == "flag")
      s << "  " << m << " = ((seed >> " << (ordinal % 5) << ") & 1) != 0;\n";
    else if (t == "bytes")
      s << "  " << m << " = TestBytes(seed + " << ordinal << ");\n";
    else s << "  FillForTest(&" << m << ", seed + " << ordinal << ");\n";
  }
  s << "}\n";
}

// Test helpers of a SHIM_HOOK row: its request as a generated stub encodes
// the parameters a request struct stands for (EmitStubPuts), and the reply
// the generated dispatcher writes for it (ReserveOutValue), OUT values
// filled from a seed.
void EmitGenericEncoders(const Function& f, std::ostringstream& s) {
  const std::string req = f.name() + "Request";
  s << "\n// " << f.name() << ": the request a generated stub encodes for the parameters\n"
    << "// `x` stands for, the layout the generated dispatcher reads.\n"
    << "inline std::string GenericRequestForTest(const " << req << "& x) {\n  (void)x;\n";
  for (const Param& p : f.params()) {
    const std::string& n = p.name();
    bool as_enum = false;
    if (KindOf(f, p) == Kind::kOutValue) {
      s << "  " << p.c_type() << " const " << n << " = x." << n << " ? static_cast<" << p.c_type()
        << ">(OutSlot()) : nullptr;\n";
    } else if (p.handle() == pb::FUNCTION) {
      s << "  const uint64_t " << n << "_wire = x." << n << ";\n";
    } else {
      ParamWireType(p, &as_enum);
      const std::string t = LocalType(p.c_type());
      if (as_enum)
        s << "  static_assert(std::is_enum<" << t << ">::value && sizeof(" << t
          << ") == sizeof(int32_t), \"" << f.name() << "." << n
          << ": not a 4-byte enum; teach apigen's ParamWireType its type\");\n";
      s << "  " << t << " const " << n << " = FromWire<" << t << ">(x." << n << ");\n";
    }
  }
  s << "  ::revenant::wire::Sizer sizer_;\n";
  EmitStubPuts(f, 0, s);
  s << "  std::string body_(sizer_.size(), '\\xee');\n"
    << "  ::revenant::wire::Encoder args_(&body_[0], body_.size());\n";
  EmitStubPuts(f, 1, s);
  s << "  return body_;\n}\n\n"
    << "// " << f.name() << ": the reply its generated dispatcher writes for `x`.\n"
    << "inline std::string GenericReplyForTest(const " << req << "& x, uint64_t seed) {\n"
    << "  (void)x;\n  (void)seed;\n  ::revenant::wire::Sizer sizer_;\n";
  std::ostringstream fills;
  int ordinal = 0;
  for (const Param& p : f.params()) {
    if (KindOf(f, p) != Kind::kOutValue) continue;
    const std::string size = "sizeof(" + Pointee(p.c_type()) + ")";
    s << "  if (x." << p.name() << ") sizer_.ReserveBytes(" << size << ");\n";
    fills << "  if (x." << p.name() << ") FillForTest(" << ReserveOutValue(p) << ", " << size
          << ", seed + " << ++ordinal << ");\n";
  }
  s << "  std::string body_(sizer_.size(), '\\xee');\n"
    << "  ::revenant::wire::Encoder out(&body_[0], body_.size());\n"
    << fills.str();
  s << "  return body_;\n}\n";
}

void EmitHookStructs(const std::vector<Function>& fns, const std::vector<WireGroup>& groups,
                     const std::string& dir) {
  std::vector<Function> rows;  // with structs of their own, fields derived
  for (const Function& f : fns)
    if (HasOwnStructs(f)) rows.push_back(WithWireFields(f));
  {
    Out o(dir, "hook_structs.h");
    auto& s = o.s();
    s << kBanner
      << "// The request and reply of every hand-written row: support HOOK rows'\n"
      << "// from their `request`/`reply` fields, support SHIM_HOOK rows' from their\n"
      << "// parameters (the layout of their generated dispatcher). The shim encodes\n"
      << "// and the agent decodes these, the agent encodes the reply and the shim\n"
      << "// decodes it.\n"
      << "#ifndef REVENANT_API_HOOK_STRUCTS_H_\n#define REVENANT_API_HOOK_STRUCTS_H_\n\n"
      << "#include <cuda_runtime_api.h>\n\n#include <cstddef>\n#include <cstdint>\n\n"
      << "#include \"api/hook_protocol.h\"\n#include \"api/wire.h\"\n\n"
      << "namespace revenant {\nnamespace hooks {\n\n";
    for (const WireGroup& g : groups) EmitWireStruct(g.name(), g.doc(), g.fields(), "", s);
    for (const Function& f : rows) {
      const std::string req = f.name() + "Request";
      EmitWireStruct(req, f.name() + ": request.", f.request(), "", s);
      EmitWireStruct(f.name() + "Reply", f.name() + ": reply.", f.reply(),
                     NeedsRequest(f.reply()) ? req : "", s);
    }
    for (const Function& f : fns) {
      if (f.support() != pb::HOOK || f.wire_as().empty()) continue;
      s << "// " << f.name() << ": laid out as " << f.wire_as() << ".\n"
        << "using " << f.name() << "Request = " << f.wire_as() << "Request;\n"
        << "using " << f.name() << "Reply = " << f.wire_as() << "Reply;\n";
    }
    s << "\n}  // namespace hooks\n}  // namespace revenant\n\n"
      << "#endif  // REVENANT_API_HOOK_STRUCTS_H_\n";
  }
  Out o(dir, "hook_structs_testing.h");
  auto& s = o.s();
  s << kBanner
    << "// Test helpers for api/hook_structs.h: every struct filled from a seed,\n"
    << "// every row's pair of structs visited, and the SHIM_HOOK rows' layouts as\n"
    << "// the generated stubs and dispatcher write them.\n"
    << "#ifndef REVENANT_API_HOOK_STRUCTS_TESTING_H_\n#define REVENANT_API_HOOK_STRUCTS_TESTING_H_\n\n"
    << "#include <cublasLt.h>\n#include <cublas_api.h>\n#include <cuda.h>\n"
    << "#include <cuda_runtime_api.h>\n#include <cudnn.h>\n#include <nccl.h>\n\n"
    << "#include <cstdint>\n#include <string>\n#include <type_traits>\n\n"
    << "#include \"api/hook_structs.h\"\n#include \"api/wire.h\"\n\n"
    << "namespace revenant {\nnamespace hooks {\nnamespace testing {\n\n"
    << "// Bytes of a length that follows the seed; null for some seeds.\n"
    << "inline wire::Bytes TestBytes(uint64_t seed) {\n"
    << "  static const char kData[32] = \"0123456789abcdefghijklmnopqrstu\";\n"
    << "  wire::Bytes b;\n  if (seed % 7 == 6) return b;\n"
    << "  b.data = kData;\n  b.size = seed % 19;\n  return b;\n}\n\n"
    << "// `n` bytes at `p` (none when null) that follow the seed.\n"
    << "inline void FillForTest(char* p, size_t n, uint64_t seed) {\n"
    << "  for (size_t i = 0; p != nullptr && i < n; ++i) p[i] = static_cast<char>(seed * 31 + i);\n"
    << "}\n\n"
    << "// A parameter's value from its wire field.\n"
    << "template <typename T, typename W>\nT FromWire(W w) {\n"
    << "  if constexpr (std::is_pointer<T>::value) {\n"
    << "    return reinterpret_cast<T>(static_cast<uintptr_t>(w));\n"
    << "  } else {\n    return static_cast<T>(w);\n  }\n}\n\n"
    << "// Where a non-null OUT parameter points (only its being non-null is sent).\n"
    << "inline void* OutSlot() {\n  alignas(16) static char slot[256];\n  return slot;\n}\n\n";
  for (const WireGroup& g : groups) EmitFill(g.name(), g.fields(), s);
  for (const Function& f : rows) {
    EmitFill(f.name() + "Request", f.request(), s);
    EmitFill(f.name() + "Reply", f.reply(), s);
  }
  for (const Function& f : rows)
    if (HasParamStructs(f)) EmitGenericEncoders(f, s);
  auto for_each = [&](const char* name, const char* doc, bool shim_hook) {
    s << "\n// Calls visit(name, Request{}, Reply{}) for every " << doc << ".\n"
      << "template <typename Visit>\nvoid " << name << "(Visit&& visit) {\n";
    for (const Function& f : rows) {
      if (HasParamStructs(f) != shim_hook) continue;
      s << "  visit(\"" << f.name() << "\", " << f.name() << "Request{}, " << f.name()
        << "Reply{});\n";
    }
    s << "}\n";
  };
  for_each("ForEachHookRow", "HOOK row with fields of its own", false);
  for_each("ForEachShimHookRow", "SHIM_HOOK row (structs from its parameters)", true);
  s << "\n}  // namespace testing\n}  // namespace hooks\n}  // namespace revenant\n\n"
    << "#endif  // REVENANT_API_HOOK_STRUCTS_TESTING_H_\n";
}

}  // namespace
}  // namespace codegen
}  // namespace revenant

int main(int argc, char** argv) {
  using namespace revenant::codegen;
  std::string out_dir, exports_path, versions_path;
  std::vector<revenant::api_table::Function> fns;
  std::vector<revenant::api_table::WireGroup> groups;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--out_dir=", 0) == 0) {
      out_dir = arg.substr(10);
      continue;
    }
    if (arg.rfind("--library_exports=", 0) == 0) {
      exports_path = arg.substr(18);
      continue;
    }
    if (arg.rfind("--driver_versions=", 0) == 0) {
      versions_path = arg.substr(18);
      continue;
    }
    std::ifstream in(arg);
    if (!in) Die("cannot read " + arg);
    std::stringstream buf;
    buf << in.rdbuf();
    revenant::api_table::ApiTable table;
    if (!google::protobuf::TextFormat::ParseFromString(buf.str(), &table))
      Die(arg + ": does not parse as revenant.api_table.ApiTable (see the message above)");
    for (const auto& f : table.functions()) fns.push_back(f);
    for (const auto& g : table.groups()) groups.push_back(g);
  }
  if (out_dir.empty() || fns.empty()) Die("usage: apigen --out_dir=DIR table.textproto...");
  Validate(fns);
  ValidateHookWire(fns, groups);
  const std::vector<LibraryExport> exports = ReadLibraryExports(exports_path);
  EmitIds(fns, out_dir);
  EmitTraits(fns, out_dir);
  EmitShim(fns, out_dir);
  EmitShimHooksHeader(fns, out_dir);
  EmitVersionScript(fns, exports, out_dir);
  EmitRefused(fns, exports, out_dir);
  EmitBackend(fns, out_dir);
  EmitDispatch(fns, out_dir);
  EmitLibraryRows(fns, out_dir);
  EmitDriverNames(exports, ReadDriverVersions(versions_path), out_dir);
  EmitCoverage(fns, exports, out_dir);
  EmitHookStructs(fns, groups, out_dir);
  return 0;
}
