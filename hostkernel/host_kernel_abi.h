/* The C ABI between a host kernel library and the agent that loads it.
 *
 * A host kernel library is a shared object built with g++ from the same kernel
 * source (.cuh) that nvcc compiles into the real CUDA program. It exports one
 * symbol, revenant_host_kernel_table_v1(), that lists every registered kernel
 * by its Itanium-mangled name (the name nvcc hands to __cudaRegisterFunction),
 * its CUDA parameter layout and an entry point that runs a whole grid on the
 * calling CPU thread:
 *
 *   const RevenantHostKernelTable* t = revenant_host_kernel_table_v1();
 *   for (uint32_t i = 0; i < t->num_kernels; ++i) {
 *     const RevenantHostKernelDesc* k = &t->kernels[i];
 *     // k->name == "_Z5saxpyifPKfPf", k->param_offsets[1] == 4, ...
 *   }
 *   int err = k->launch(grid, block, shared_bytes, packed_args, 0);
 *
 * The interface is plain C on purpose: the agent and the library may be built
 * by different compilers or standard libraries, and nothing but these structs
 * crosses the boundary. Everything the table points to lives as long as the
 * library stays loaded.
 */
#ifndef REVENANT_HOSTKERNEL_HOST_KERNEL_ABI_H_
#define REVENANT_HOSTKERNEL_HOST_KERNEL_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Bumped only with an incompatible layout change (and a new _vN symbol). */
#define REVENANT_HOST_KERNEL_ABI_VERSION 1
#define REVENANT_HOST_KERNEL_TABLE_SYMBOL "revenant_host_kernel_table_v1"

typedef struct RevenantDim3 {
  uint32_t x, y, z;
} RevenantDim3;

/* Runs the whole grid synchronously on the calling thread (cooperative
 * launches use one extra thread per block; see fiber_scheduler.h) and returns
 * a cudaError_t value: 0 on success, 1 (cudaErrorInvalidValue) for bad
 * dimensions or too much shared memory (what CUDA 13 itself returns), 720
 * (cudaErrorCooperativeLaunchTooLarge), 719 (cudaErrorLaunchFailure) when the
 * threads of a block can never all reach a barrier. "packed_args" holds every
 * parameter at its offset (the layout below), as cuLaunchKernel's
 * kernelParams would after packing. */
typedef int (*RevenantHostLaunchFn)(RevenantDim3 grid, RevenantDim3 block,
                                    size_t shared_bytes,
                                    const void* packed_args, int cooperative);

typedef struct RevenantHostKernelDesc {
  const char* name;             /* Itanium-mangled, e.g. "_Z5saxpyifPKfPf" */
  uint32_t num_params;
  const size_t* param_offsets;  /* num_params entries */
  const size_t* param_sizes;    /* num_params entries */
  size_t args_size;             /* end of the last parameter */
  RevenantHostLaunchFn launch;
} RevenantHostKernelDesc;

typedef struct RevenantHostKernelTable {
  uint32_t abi_version; /* REVENANT_HOST_KERNEL_ABI_VERSION */
  uint32_t num_kernels;
  const RevenantHostKernelDesc* kernels;
  /* Why the last launch on this thread failed ("" after a success). */
  const char* (*last_error)(void);
  /* Registrations that could not be named (no dladdr symbol, no explicit
   * name); the loader refuses such a library. 0 normally. */
  uint32_t num_unnamed;
} RevenantHostKernelTable;

typedef const RevenantHostKernelTable* (*RevenantHostKernelTableFn)(void);

/* The library's `__device__`/`__constant__` variables (REVENANT_HOST_DEVICE_VARIABLE
 * lines), by the name nvcc passes to __cudaRegisterVar: the agent's copies
 * to and from a symbol (cudaMemcpyToSymbol...) read and write this storage,
 * which the library's kernels use directly. Optional: a library without
 * variables may lack the symbol. */
#define REVENANT_HOST_DEVICE_VAR_TABLE_SYMBOL "revenant_host_device_var_table_v1"

typedef struct RevenantHostDeviceVarDesc {
  const char* name; /* e.g. "table" or "_ZN2ns5tableE" */
  void* address;
  size_t size;
} RevenantHostDeviceVarDesc;

typedef struct RevenantHostDeviceVarTable {
  uint32_t abi_version; /* REVENANT_HOST_KERNEL_ABI_VERSION */
  uint32_t num_vars;
  const RevenantHostDeviceVarDesc* vars;
  uint32_t num_unnamed; /* as for kernels: the loader refuses such a library */
} RevenantHostDeviceVarTable;

typedef const RevenantHostDeviceVarTable* (*RevenantHostDeviceVarTableFn)(void);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* REVENANT_HOSTKERNEL_HOST_KERNEL_ABI_H_ */
