// The table a host kernel library exports (host_kernel_abi.h), built from the
// REVENANT_HOST_KERNEL registrations of the library.
#include <dlfcn.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "hostkernel/fiber_scheduler.h"
#include "hostkernel/host_kernel.h"
#include "hostkernel/host_kernel_abi.h"

namespace revenant {
namespace hostkernel {
namespace internal {
namespace {

// Function-local statics: registrations run from other translation units'
// static initializers, in an order we do not control.
std::vector<Registration>& Registrations() {
  static auto* list = new std::vector<Registration>();
  return *list;
}

const char* LastError() { return LastErrorMessage(); }

}  // namespace

bool AddRegistration(const Registration& r) {
  Registrations().push_back(r);
  return true;
}

namespace {
std::vector<VariableRegistration>& VariableRegistrations() {
  static auto* list = new std::vector<VariableRegistration>();
  return *list;
}
}  // namespace

bool AddVariableRegistration(const VariableRegistration& r) {
  VariableRegistrations().push_back(r);
  return true;
}

namespace {

const RevenantHostKernelTable* BuildTable() {
  static auto* descs = new std::vector<RevenantHostKernelDesc>();
  static RevenantHostKernelTable table;
  table.abi_version = REVENANT_HOST_KERNEL_ABI_VERSION;
  table.last_error = &LastError;
  table.num_unnamed = 0;
  for (const Registration& r : Registrations()) {
    const char* name = r.explicit_name;
    if (name == nullptr) {
      // The symbol must start exactly at the kernel: a nearby symbol would
      // give a wrong name.
      Dl_info info;
      if (dladdr(r.address, &info) != 0 && info.dli_sname != nullptr &&
          info.dli_saddr == r.address) {
        name = info.dli_sname;
      }
    }
    if (name == nullptr) {
      ++table.num_unnamed;
      continue;
    }
    RevenantHostKernelDesc d;
    d.name = name;
    d.num_params = r.num_params;
    d.param_offsets = r.offsets;
    d.param_sizes = r.sizes;
    d.args_size = r.args_size;
    d.launch = r.launch;
    descs->push_back(d);
  }
  table.num_kernels = static_cast<uint32_t>(descs->size());
  table.kernels = descs->data();
  return &table;
}

const RevenantHostDeviceVarTable* BuildVariableTable() {
  static auto* descs = new std::vector<RevenantHostDeviceVarDesc>();
  static RevenantHostDeviceVarTable table;
  table.abi_version = REVENANT_HOST_KERNEL_ABI_VERSION;
  table.num_unnamed = 0;
  for (const VariableRegistration& r : VariableRegistrations()) {
    const char* name = r.explicit_name;
    if (name == nullptr) {
      Dl_info info;
      if (dladdr(r.address, &info) != 0 && info.dli_sname != nullptr &&
          info.dli_saddr == r.address) {
        name = info.dli_sname;
      }
    }
    if (name == nullptr) {
      ++table.num_unnamed;
      continue;
    }
    descs->push_back({name, r.address, r.size});
  }
  table.num_vars = static_cast<uint32_t>(descs->size());
  table.vars = descs->data();
  return &table;
}

}  // namespace
}  // namespace internal
}  // namespace hostkernel
}  // namespace revenant

extern "C" __attribute__((visibility("default"))) const RevenantHostDeviceVarTable*
revenant_host_device_var_table_v1() {
  static std::once_flag once;
  static const RevenantHostDeviceVarTable* table = nullptr;
  std::call_once(once, [] { table = revenant::hostkernel::internal::BuildVariableTable(); });
  return table;
}

extern "C" __attribute__((visibility("default"))) const RevenantHostKernelTable*
revenant_host_kernel_table_v1() {
  static std::once_flag once;
  static const RevenantHostKernelTable* table = nullptr;
  std::call_once(once, [] { table = revenant::hostkernel::internal::BuildTable(); });
  return table;
}
