// What the driver rows the shim carries out through its runtime rows share
// (shim/hooks_driver.cc, shim/hooks_launch.cc): the runtime status as the
// driver's, and the thread's runtime last error left as it was.
#ifndef REVENANT_SHIM_DRIVER_STATUS_H_
#define REVENANT_SHIM_DRIVER_STATUS_H_

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "shim/runtime.h"

namespace revenant {
namespace shim {

// The same number where the driver has the error (the numbering is shared),
// else CUDA_ERROR_INVALID_VALUE for the runtime's argument errors (below
// 100: bad pitch, symbol, direction, configuration...) and
// CUDA_ERROR_UNKNOWN for the rest.
CUresult CuFromRuntime(cudaError_t e);

// Keeps the thread's runtime last error (cudaGetLastError) as it was across
// the runtime calls a driver call makes: driver calls never set it.
class KeepLastError {
 public:
  KeepLastError() : saved_(TakeLastError()) {}
  ~KeepLastError() {
    TakeLastError();
    SetLastError(saved_);
  }
  KeepLastError(const KeepLastError&) = delete;
  KeepLastError& operator=(const KeepLastError&) = delete;

 private:
  int32_t saved_;
};

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_DRIVER_STATUS_H_
