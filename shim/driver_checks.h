// Checks the driver makes at the call for the driver rows the agent runs
// (api/driver.textproto `shim_check`s): a non-zero CUresult is returned at
// once and nothing is forwarded, so an asynchronous row still fails at the
// call. The backends check the same again (the agent trusts no request).
#ifndef REVENANT_SHIM_DRIVER_CHECKS_H_
#define REVENANT_SHIM_DRIVER_CHECKS_H_

#include <cuda.h>

#include <cstdint>

namespace revenant {
namespace shim {

// cuMemsetD32*: the destination is 4-byte aligned.
inline int DriverCheckMemsetD32(CUdeviceptr dst) {
  return (dst & 3) != 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

// cuStreamWriteValue32_v2: a 4-byte aligned address, flags DEFAULT or
// NO_MEMORY_BARRIER.
inline int DriverCheckWriteValue32(CUdeviceptr addr, unsigned int flags) {
  if ((addr & 3) != 0 || addr == 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & ~static_cast<unsigned int>(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// cuStreamWaitValue32_v2: a 4-byte aligned address, one of GEQ/EQ/AND/NOR,
// optionally with FLUSH.
inline int DriverCheckWaitValue32(CUdeviceptr addr, unsigned int flags) {
  if ((addr & 3) != 0 || addr == 0) return CUDA_ERROR_INVALID_VALUE;
  const unsigned int op = flags & ~static_cast<unsigned int>(CU_STREAM_WAIT_VALUE_FLUSH);
  if (op > CU_STREAM_WAIT_VALUE_NOR) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_DRIVER_CHECKS_H_
