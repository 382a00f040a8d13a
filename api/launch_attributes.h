// The launch attributes of cudaLaunchKernelExC on the host backend: which
// ones it honours and why the others are refused. Shared by the shim (so a
// refusal comes back from the launch itself, which is asynchronous to the
// agent) and the host backend (which decides for good).
//
//   bool cooperative = false;
//   std::string why;
//   cudaError_t e = api::CheckHostLaunchAttributes(attrs, n, grid, &cooperative, &why);
//   if (e != cudaSuccess) { log(why); return e; }
//
// The host backend runs a stream's work in order on a CPU. Attributes that
// only allow a GPU more overlap or change scheduling hints (priority,
// programmatic stream serialization, memory synchronization domains, access
// policy windows, cluster scheduling preferences, shared memory carveout)
// cannot change a result there: they are accepted. A cooperative launch is
// one (the fiber scheduler refuses a grid that does not fit, with
// cudaErrorCooperativeLaunchTooLarge). Cluster dimensions are accepted when
// they divide the grid and hold at most 8 blocks (the portable limit);
// otherwise cudaErrorInvalidClusterSize. Attributes that signal events from
// inside a kernel, graph-only ones, stream-only ones and unknown ones are
// refused with cudaErrorNotSupported.
#ifndef REVENANT_API_LAUNCH_ATTRIBUTES_H_
#define REVENANT_API_LAUNCH_ATTRIBUTES_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace revenant {
namespace api {

// At most this many attributes travel with one launch (a request larger
// than this is malformed).
inline constexpr unsigned kMaxLaunchAttributes = 32;

inline cudaError_t CheckHostLaunchAttributes(const cudaLaunchAttribute* attrs, size_t n,
                                             dim3 grid, bool* cooperative, std::string* why) {
  *cooperative = false;
  if (n > 0 && attrs == nullptr) {
    *why = "numAttrs > 0 with a null attrs array";
    return cudaErrorInvalidValue;
  }
  for (size_t i = 0; i < n; ++i) {
    const cudaLaunchAttribute& a = attrs[i];
    switch (a.id) {
      case cudaLaunchAttributeIgnore:
      case cudaLaunchAttributeAccessPolicyWindow:
      case cudaLaunchAttributeClusterSchedulingPolicyPreference:
      case cudaLaunchAttributeProgrammaticStreamSerialization:
      case cudaLaunchAttributePriority:
      case cudaLaunchAttributeMemSyncDomainMap:
      case cudaLaunchAttributeMemSyncDomain:
      case cudaLaunchAttributePreferredSharedMemoryCarveout:
      case cudaLaunchAttributeNvlinkUtilCentricScheduling:
        break;
      case cudaLaunchAttributeCooperative:
        if (a.val.cooperative != 0) *cooperative = true;
        break;
      case cudaLaunchAttributeClusterDimension:
      case cudaLaunchAttributePreferredClusterDimension: {
        const unsigned x = a.val.clusterDim.x, y = a.val.clusterDim.y, z = a.val.clusterDim.z;
        if (x == 0 || y == 0 || z == 0 || grid.x % x != 0 || grid.y % y != 0 ||
            grid.z % z != 0 || uint64_t{x} * y * z > 8) {
          *why = "cluster dimensions (" + std::to_string(x) + ", " + std::to_string(y) + ", " +
                 std::to_string(z) + ") do not divide the grid (" + std::to_string(grid.x) +
                 ", " + std::to_string(grid.y) + ", " + std::to_string(grid.z) +
                 ") or hold more than 8 blocks";
          return cudaErrorInvalidClusterSize;
        }
        break;
      }
      default:
        *why = "launch attribute " + std::to_string(static_cast<int>(a.id)) +
               " (events signalled from inside a kernel, graph-only or stream-only "
               "attributes) cannot be honoured by the host backend";
        return cudaErrorNotSupported;
    }
  }
  return cudaSuccess;
}

}  // namespace api
}  // namespace revenant

#endif  // REVENANT_API_LAUNCH_ATTRIBUTES_H_
