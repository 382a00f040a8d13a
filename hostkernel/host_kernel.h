// Registers kernels of a host kernel library so the agent can find and run
// them by their mangled name.
//
//   // saxpy_host_kernels.cc, built with cc_binary(linkshared = 1)
//   #include "hostkernel/cuda_host_compat.h"
//   #include "mylib/saxpy_kernels.cuh"   // the source nvcc also compiles
//   #include "hostkernel/host_kernel.h"
//
//   REVENANT_HOST_KERNEL(saxpy);                    // name found with dladdr
//   REVENANT_HOST_KERNEL(scale<float>);             // template instances too
//   REVENANT_HOST_KERNEL_NAMED(helper, "_Z6helperi");  // static/hidden kernels
//
// Each registration instantiates a trampoline from the kernel's signature
// that (a) computes the CUDA parameter layout: parameter i at
// align_up(end of parameter i-1, alignof(Ti)), size sizeof(Ti) — what
// cuFuncGetParamInfo reports for the nvcc-compiled kernel, since nvcc lays
// parameters out with the host ABI's sizes and alignments; (b) copies each
// parameter out of the packed argument buffer; (c) runs the grid through
// fiber_scheduler.h. The table is exported as the C ABI of host_kernel_abi.h.
//
// Names: a kernel defined with default visibility is exported by the .so,
// so dladdr() on its address yields the very mangled name nvcc registers
// (same namespace, same signature, same Itanium ABI). Kernels that are
// static, in an anonymous namespace or hidden need REVENANT_HOST_KERNEL_NAMED.
#ifndef REVENANT_HOSTKERNEL_HOST_KERNEL_H_
#define REVENANT_HOSTKERNEL_HOST_KERNEL_H_

#include <cstddef>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#include "hostkernel/fiber_scheduler.h"
#include "hostkernel/host_kernel_abi.h"

#pragma GCC visibility push(hidden)

namespace revenant {
namespace hostkernel {
namespace internal {

// What one REVENANT_HOST_KERNEL line records; the table is built from these
// on the first call of revenant_host_kernel_table_v1().
struct Registration {
  const void* address;        // the kernel function, for dladdr
  const char* explicit_name;  // REVENANT_HOST_KERNEL_NAMED, else nullptr
  unsigned num_params;
  const size_t* offsets;
  const size_t* sizes;
  size_t args_size;
  RevenantHostLaunchFn launch;
};

// Appends to the library's registration list (runs during dlopen).
bool AddRegistration(const Registration& r);

// One REVENANT_HOST_DEVICE_VARIABLE line.
struct VariableRegistration {
  void* address;
  size_t size;
  const char* explicit_name;  // REVENANT_HOST_DEVICE_VARIABLE_NAMED, else nullptr
};
bool AddVariableRegistration(const VariableRegistration& r);

constexpr size_t AlignUp(size_t v, size_t a) { return (v + a - 1) / a * a; }

template <typename... Args>
struct ParamLayout {
  static constexpr size_t kCount = sizeof...(Args);
  static constexpr size_t kSizes[kCount + 1] = {sizeof(Args)..., 0};
  static constexpr size_t kAligns[kCount + 1] = {alignof(Args)..., 1};
  struct Offsets {
    size_t value[kCount + 1] = {};
    size_t end = 0;
    constexpr Offsets() {
      size_t at = 0;
      for (size_t i = 0; i < kCount; ++i) {
        at = AlignUp(at, kAligns[i]);
        value[i] = at;
        at += kSizes[i];
      }
      end = at;
    }
  };
  static constexpr Offsets kOffsets{};
};

template <typename F>
struct KernelTraits;

template <typename... Args>
struct KernelTraits<void (*)(Args...)> {
  static_assert((std::is_trivially_copyable<Args>::value && ...),
                "kernel parameters must be trivially copyable, as CUDA requires");
  using Layout = ParamLayout<Args...>;
  using Tuple = std::tuple<std::decay_t<Args>...>;

  template <size_t... I>
  static void Unpack(const void* packed, Tuple* out, std::index_sequence<I...>) {
    const char* base = static_cast<const char*>(packed);
    (std::memcpy(&std::get<I>(*out), base + Layout::kOffsets.value[I],
                 sizeof(std::get<I>(*out))),
     ...);
  }
};

template <auto Fn>
void RunOneThread(const void* args) {
  using Traits = KernelTraits<decltype(Fn)>;
  std::apply(Fn, *static_cast<const typename Traits::Tuple*>(args));
}

template <auto Fn>
int Launch(RevenantDim3 grid, RevenantDim3 block, size_t shared_bytes,
           const void* packed_args, int cooperative) {
  using Traits = KernelTraits<decltype(Fn)>;
  typename Traits::Tuple args{};
  if (Traits::Layout::kCount > 0) {
    if (packed_args == nullptr) return kErrInvalidValue;
    Traits::Unpack(packed_args, &args,
                   std::make_index_sequence<Traits::Layout::kCount>());
  }
  GridLaunch launch;
  launch.grid = grid;
  launch.block = block;
  launch.shared_bytes = shared_bytes;
  launch.cooperative = cooperative != 0;
  launch.body = &RunOneThread<Fn>;
  launch.args = &args;
  return RunGrid(launch);
}

template <auto Fn>
bool Register(const char* explicit_name) {
  using Traits = KernelTraits<decltype(Fn)>;
  using Layout = typename Traits::Layout;
  Registration r;
  r.address = reinterpret_cast<const void*>(Fn);
  r.explicit_name = explicit_name;
  r.num_params = static_cast<unsigned>(Layout::kCount);
  r.offsets = Layout::kOffsets.value;
  r.sizes = Layout::kSizes;
  r.args_size = Layout::kOffsets.end;
  r.launch = &Launch<Fn>;
  return AddRegistration(r);
}

}  // namespace internal
}  // namespace hostkernel
}  // namespace revenant

#pragma GCC visibility pop

#define REVENANT_HK_CONCAT_INNER(a, b) a##b
#define REVENANT_HK_CONCAT(a, b) REVENANT_HK_CONCAT_INNER(a, b)

// Registers kernel `fn` (a function name, possibly qualified or a template
// instance) under the mangled name dladdr() reports for it.
#define REVENANT_HOST_KERNEL(...)                                        \
  [[maybe_unused]] static const bool REVENANT_HK_CONCAT(                 \
      revenant_host_kernel_registered_, __COUNTER__) =                   \
      ::revenant::hostkernel::internal::Register<&__VA_ARGS__>(nullptr)

// Registers one overload of an overloaded kernel, picked by its function
// type: REVENANT_HOST_KERNEL_OVERLOAD(scale, void(float*, float, int)).
// Templates need no macro of their own: REVENANT_HOST_KERNEL(fill<float>).
#define REVENANT_HOST_KERNEL_OVERLOAD(fn, ...)                           \
  [[maybe_unused]] static const bool REVENANT_HK_CONCAT(                 \
      revenant_host_kernel_registered_, __COUNTER__) =                   \
      ::revenant::hostkernel::internal::Register<                        \
          static_cast<std::add_pointer_t<__VA_ARGS__>>(&fn)>(nullptr)

// Registers kernel `fn` under an explicit mangled name.
#define REVENANT_HOST_KERNEL_NAMED(fn, mangled_name)                     \
  [[maybe_unused]] static const bool REVENANT_HK_CONCAT(                 \
      revenant_host_kernel_registered_, __COUNTER__) =                   \
      ::revenant::hostkernel::internal::Register<&fn>(mangled_name)

// Registers a `__device__` variable (any type, arrays too) under the name
// dladdr() reports for it: the variable's own name at global scope, its
// mangled name inside a namespace -- what nvcc passes to __cudaRegisterVar.
#define REVENANT_HOST_DEVICE_VARIABLE(var)                               \
  [[maybe_unused]] static const bool REVENANT_HK_CONCAT(                 \
      revenant_host_device_variable_registered_, __COUNTER__) =          \
      ::revenant::hostkernel::internal::AddVariableRegistration(         \
          {static_cast<void*>(&(var)), sizeof(var), nullptr})

// A variable without an exported symbol (`__constant__` is `static` under
// g++, see cuda_host_compat.h) under an explicit name.
#define REVENANT_HOST_DEVICE_VARIABLE_NAMED(var, name)                   \
  [[maybe_unused]] static const bool REVENANT_HK_CONCAT(                 \
      revenant_host_device_variable_registered_, __COUNTER__) =          \
      ::revenant::hostkernel::internal::AddVariableRegistration(         \
          {static_cast<void*>(&(var)), sizeof(var), name})

#endif  // REVENANT_HOSTKERNEL_HOST_KERNEL_H_
