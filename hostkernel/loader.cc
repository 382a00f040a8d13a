#include "hostkernel/loader.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/logging.h"

namespace revenant {
namespace hostkernel {
namespace {

constexpr int kCudaErrorInvalidValue = 1;
constexpr int kCudaErrorCooperativeLaunchTooLarge = 720;
constexpr int kCudaErrorUnknown = 999;

absl::Status WithCudaError(absl::Status status, int cuda_error) {
  status.SetPayload(kCudaErrorPayload, absl::Cord(absl::StrCat(cuda_error)));
  return status;
}

}  // namespace

int CudaErrorOf(const absl::Status& status) {
  if (status.ok()) return 0;
  absl::optional<absl::Cord> payload = status.GetPayload(kCudaErrorPayload);
  int value = 0;
  if (payload.has_value() && absl::SimpleAtoi(std::string(*payload), &value)) {
    return value;
  }
  return kCudaErrorUnknown;
}

absl::Status HostKernel::Launch(Dim3 grid, Dim3 block, size_t shared_bytes,
                                const void* packed_args, bool cooperative) const {
  if (!params.empty() && packed_args == nullptr) {
    return WithCudaError(
        absl::InvalidArgumentError(absl::StrCat(
            "cudaErrorInvalidValue: kernel ", name, " takes ", params.size(),
            " parameters but no argument buffer was given")),
        kCudaErrorInvalidValue);
  }
  const int err = launch_({grid.x, grid.y, grid.z}, {block.x, block.y, block.z},
                          shared_bytes, packed_args, cooperative ? 1 : 0);
  if (err == 0) return absl::OkStatus();
  const std::string why = absl::StrCat("kernel ", name, ": ", last_error_());
  switch (err) {
    case kCudaErrorInvalidValue:
      return WithCudaError(absl::InvalidArgumentError(why), err);
    case kCudaErrorCooperativeLaunchTooLarge:
      return WithCudaError(absl::ResourceExhaustedError(why), err);
    default:
      return WithCudaError(absl::InternalError(why), err);
  }
}

absl::StatusOr<std::unique_ptr<HostKernelRegistry>> HostKernelRegistry::Load(
    const std::vector<std::string>& paths) {
  std::unique_ptr<HostKernelRegistry> registry(new HostKernelRegistry());
  for (const std::string& path : paths) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      return absl::NotFoundError(
          absl::StrCat("host kernel library ", path, " does not exist"));
    }
    // RTLD_LOCAL: two libraries built from different sources must not bind
    // each other's kernels or scheduler state.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "cannot load host kernel library ", path, ": ", dlerror()));
    }
    registry->handles_.push_back(handle);
    auto table_fn = reinterpret_cast<RevenantHostKernelTableFn>(
        dlsym(handle, REVENANT_HOST_KERNEL_TABLE_SYMBOL));
    if (table_fn == nullptr) {
      return absl::NotFoundError(absl::StrCat(
          path, " is not a host kernel library: it does not export ",
          REVENANT_HOST_KERNEL_TABLE_SYMBOL,
          " (link it with //hostkernel:runtime and REVENANT_HOST_KERNEL lines)"));
    }
    const RevenantHostKernelTable* table = table_fn();
    if (table == nullptr || table->abi_version != REVENANT_HOST_KERNEL_ABI_VERSION) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": host kernel ABI version ",
          table == nullptr ? 0u : table->abi_version, ", expected ",
          REVENANT_HOST_KERNEL_ABI_VERSION));
    }
    if (table->num_unnamed != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": ", table->num_unnamed,
          " registered kernels have no exported symbol to name them; use "
          "REVENANT_HOST_KERNEL_NAMED or give them default visibility"));
    }
    for (uint32_t i = 0; i < table->num_kernels; ++i) {
      const RevenantHostKernelDesc& d = table->kernels[i];
      auto kernel = std::make_unique<HostKernel>();
      kernel->name = d.name;
      kernel->library = path;
      kernel->args_size = d.args_size;
      for (uint32_t p = 0; p < d.num_params; ++p) {
        kernel->params.push_back({d.param_offsets[p], d.param_sizes[p]});
      }
      kernel->launch_ = d.launch;
      kernel->last_error_ = table->last_error;
      auto it = registry->kernels_.find(kernel->name);
      if (it != registry->kernels_.end()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "host kernel ", kernel->name, " is registered twice: in ",
            it->second->library, " and in ", path));
      }
      registry->kernels_.emplace(kernel->name, std::move(kernel));
    }
    // Device variables: optional (a library may have none).
    auto var_fn = reinterpret_cast<RevenantHostDeviceVarTableFn>(
        dlsym(handle, REVENANT_HOST_DEVICE_VAR_TABLE_SYMBOL));
    const RevenantHostDeviceVarTable* vars = var_fn == nullptr ? nullptr : var_fn();
    if (vars != nullptr) {
      if (vars->abi_version != REVENANT_HOST_KERNEL_ABI_VERSION || vars->num_unnamed != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": device variable table version ", vars->abi_version, " with ",
            vars->num_unnamed,
            " unnamed variables (use REVENANT_HOST_DEVICE_VARIABLE_NAMED for variables "
            "without an exported symbol)"));
      }
      for (uint32_t i = 0; i < vars->num_vars; ++i) {
        const RevenantHostDeviceVarDesc& d = vars->vars[i];
        Variable v{d.name, d.address, d.size, path};
        auto [it, inserted] = registry->variables_.emplace(v.name, v);
        if (!inserted) {
          return absl::AlreadyExistsError(absl::StrCat("device variable ", v.name,
                                                       " is registered twice: in ",
                                                       it->second.library, " and in ", path));
        }
      }
    }
    REVENANT_LOG(INFO, "hostkernel")
        << "loaded " << table->num_kernels << " host kernels and "
        << (vars == nullptr ? 0 : vars->num_vars) << " device variables from " << path;
  }
  return registry;
}

HostKernelRegistry::~HostKernelRegistry() {
  kernels_.clear();
  for (void* handle : handles_) dlclose(handle);
}

const HostKernel* HostKernelRegistry::Find(absl::string_view mangled_name) const {
  auto it = kernels_.find(mangled_name);
  return it == kernels_.end() ? nullptr : it->second.get();
}

std::vector<std::string> HostKernelRegistry::Names() const {
  std::vector<std::string> names;
  names.reserve(kernels_.size());
  for (const auto& entry : kernels_) names.push_back(entry.first);
  std::sort(names.begin(), names.end());
  return names;
}

const HostKernelRegistry::Variable* HostKernelRegistry::FindVariable(
    absl::string_view name) const {
  auto it = variables_.find(name);
  return it == variables_.end() ? nullptr : &it->second;
}

std::vector<std::string> SplitHostKernelPaths(absl::string_view list) {
  return absl::StrSplit(list, ':', absl::SkipEmpty());
}

}  // namespace hostkernel
}  // namespace revenant
