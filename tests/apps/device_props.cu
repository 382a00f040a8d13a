// device_props: what a program learns about its device -- every field of
// cudaDeviceProp (cudaGetDeviceProperties) and every cudaDeviceGetAttribute
// value (or its error) for attributes 1..147 -- printed one per line
// with a checksum of them all, so that a run under Revenant can be compared
// with a native run of the same device line by line: the answers must be
// the real device's. Also the runtime and driver versions and the device
// count.
//
//   device_props
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "tests/apps/app_check.h"

namespace {

void Line(std::string* out, const std::string& key, long long value) {
  const std::string line = key + " " + std::to_string(value) + "\n";
  std::fputs(line.c_str(), stdout);
  *out += line;
}

uint64_t Fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

int main() {
  std::string out;
  int count = 0, runtime = 0, driver = 0, device = -1;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_APP(count >= 1, "no device");
  CHECK_CUDA(cudaRuntimeGetVersion(&runtime));
  CHECK_CUDA(cudaDriverGetVersion(&driver));
  CHECK_CUDA(cudaGetDevice(&device));
  Line(&out, "runtime_version", runtime);
  Line(&out, "driver_version", driver);
  Line(&out, "device", device);
  cudaDeviceProp p;
  std::memset(&p, 0, sizeof(p));
  CHECK_CUDA(cudaGetDeviceProperties(&p, 0));
  const std::string name = "prop name " + std::string(p.name) + "\n";
  std::fputs(name.c_str(), stdout);
  out += name;
  for (int i = 0; i < 16; ++i) {
    Line(&out, "prop uuid[" + std::to_string(i) + "]", static_cast<unsigned char>(p.uuid.bytes[i]));
  }
  Line(&out, "prop luidDeviceNodeMask", static_cast<long long>(p.luidDeviceNodeMask));
  Line(&out, "prop totalGlobalMem", static_cast<long long>(p.totalGlobalMem));
  Line(&out, "prop sharedMemPerBlock", static_cast<long long>(p.sharedMemPerBlock));
  Line(&out, "prop regsPerBlock", static_cast<long long>(p.regsPerBlock));
  Line(&out, "prop warpSize", static_cast<long long>(p.warpSize));
  Line(&out, "prop memPitch", static_cast<long long>(p.memPitch));
  Line(&out, "prop maxThreadsPerBlock", static_cast<long long>(p.maxThreadsPerBlock));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxThreadsDim[" + std::to_string(i) + "]", static_cast<long long>(p.maxThreadsDim[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxGridSize[" + std::to_string(i) + "]", static_cast<long long>(p.maxGridSize[i]));
  Line(&out, "prop totalConstMem", static_cast<long long>(p.totalConstMem));
  Line(&out, "prop major", static_cast<long long>(p.major));
  Line(&out, "prop minor", static_cast<long long>(p.minor));
  Line(&out, "prop textureAlignment", static_cast<long long>(p.textureAlignment));
  Line(&out, "prop texturePitchAlignment", static_cast<long long>(p.texturePitchAlignment));
  Line(&out, "prop multiProcessorCount", static_cast<long long>(p.multiProcessorCount));
  Line(&out, "prop integrated", static_cast<long long>(p.integrated));
  Line(&out, "prop canMapHostMemory", static_cast<long long>(p.canMapHostMemory));
  Line(&out, "prop maxTexture1D", static_cast<long long>(p.maxTexture1D));
  Line(&out, "prop maxTexture1DMipmap", static_cast<long long>(p.maxTexture1DMipmap));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxTexture2D[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture2D[i]));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxTexture2DMipmap[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture2DMipmap[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxTexture2DLinear[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture2DLinear[i]));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxTexture2DGather[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture2DGather[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxTexture3D[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture3D[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxTexture3DAlt[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture3DAlt[i]));
  Line(&out, "prop maxTextureCubemap", static_cast<long long>(p.maxTextureCubemap));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxTexture1DLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture1DLayered[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxTexture2DLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxTexture2DLayered[i]));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxTextureCubemapLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxTextureCubemapLayered[i]));
  Line(&out, "prop maxSurface1D", static_cast<long long>(p.maxSurface1D));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxSurface2D[" + std::to_string(i) + "]", static_cast<long long>(p.maxSurface2D[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxSurface3D[" + std::to_string(i) + "]", static_cast<long long>(p.maxSurface3D[i]));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxSurface1DLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxSurface1DLayered[i]));
  for (int i = 0; i < 3; ++i) Line(&out, "prop maxSurface2DLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxSurface2DLayered[i]));
  Line(&out, "prop maxSurfaceCubemap", static_cast<long long>(p.maxSurfaceCubemap));
  for (int i = 0; i < 2; ++i) Line(&out, "prop maxSurfaceCubemapLayered[" + std::to_string(i) + "]", static_cast<long long>(p.maxSurfaceCubemapLayered[i]));
  Line(&out, "prop surfaceAlignment", static_cast<long long>(p.surfaceAlignment));
  Line(&out, "prop concurrentKernels", static_cast<long long>(p.concurrentKernels));
  Line(&out, "prop ECCEnabled", static_cast<long long>(p.ECCEnabled));
  Line(&out, "prop pciBusID", static_cast<long long>(p.pciBusID));
  Line(&out, "prop pciDeviceID", static_cast<long long>(p.pciDeviceID));
  Line(&out, "prop pciDomainID", static_cast<long long>(p.pciDomainID));
  Line(&out, "prop tccDriver", static_cast<long long>(p.tccDriver));
  Line(&out, "prop asyncEngineCount", static_cast<long long>(p.asyncEngineCount));
  Line(&out, "prop unifiedAddressing", static_cast<long long>(p.unifiedAddressing));
  Line(&out, "prop memoryBusWidth", static_cast<long long>(p.memoryBusWidth));
  Line(&out, "prop l2CacheSize", static_cast<long long>(p.l2CacheSize));
  Line(&out, "prop persistingL2CacheMaxSize", static_cast<long long>(p.persistingL2CacheMaxSize));
  Line(&out, "prop maxThreadsPerMultiProcessor", static_cast<long long>(p.maxThreadsPerMultiProcessor));
  Line(&out, "prop streamPrioritiesSupported", static_cast<long long>(p.streamPrioritiesSupported));
  Line(&out, "prop globalL1CacheSupported", static_cast<long long>(p.globalL1CacheSupported));
  Line(&out, "prop localL1CacheSupported", static_cast<long long>(p.localL1CacheSupported));
  Line(&out, "prop sharedMemPerMultiprocessor", static_cast<long long>(p.sharedMemPerMultiprocessor));
  Line(&out, "prop regsPerMultiprocessor", static_cast<long long>(p.regsPerMultiprocessor));
  Line(&out, "prop managedMemory", static_cast<long long>(p.managedMemory));
  Line(&out, "prop isMultiGpuBoard", static_cast<long long>(p.isMultiGpuBoard));
  Line(&out, "prop multiGpuBoardGroupID", static_cast<long long>(p.multiGpuBoardGroupID));
  Line(&out, "prop hostNativeAtomicSupported", static_cast<long long>(p.hostNativeAtomicSupported));
  Line(&out, "prop pageableMemoryAccess", static_cast<long long>(p.pageableMemoryAccess));
  Line(&out, "prop concurrentManagedAccess", static_cast<long long>(p.concurrentManagedAccess));
  Line(&out, "prop computePreemptionSupported", static_cast<long long>(p.computePreemptionSupported));
  Line(&out, "prop canUseHostPointerForRegisteredMem", static_cast<long long>(p.canUseHostPointerForRegisteredMem));
  Line(&out, "prop cooperativeLaunch", static_cast<long long>(p.cooperativeLaunch));
  Line(&out, "prop sharedMemPerBlockOptin", static_cast<long long>(p.sharedMemPerBlockOptin));
  Line(&out, "prop pageableMemoryAccessUsesHostPageTables", static_cast<long long>(p.pageableMemoryAccessUsesHostPageTables));
  Line(&out, "prop directManagedMemAccessFromHost", static_cast<long long>(p.directManagedMemAccessFromHost));
  Line(&out, "prop maxBlocksPerMultiProcessor", static_cast<long long>(p.maxBlocksPerMultiProcessor));
  Line(&out, "prop accessPolicyMaxWindowSize", static_cast<long long>(p.accessPolicyMaxWindowSize));
  Line(&out, "prop reservedSharedMemPerBlock", static_cast<long long>(p.reservedSharedMemPerBlock));
  Line(&out, "prop hostRegisterSupported", static_cast<long long>(p.hostRegisterSupported));
  Line(&out, "prop sparseCudaArraySupported", static_cast<long long>(p.sparseCudaArraySupported));
  Line(&out, "prop hostRegisterReadOnlySupported", static_cast<long long>(p.hostRegisterReadOnlySupported));
  Line(&out, "prop timelineSemaphoreInteropSupported", static_cast<long long>(p.timelineSemaphoreInteropSupported));
  Line(&out, "prop memoryPoolsSupported", static_cast<long long>(p.memoryPoolsSupported));
  Line(&out, "prop gpuDirectRDMASupported", static_cast<long long>(p.gpuDirectRDMASupported));
  Line(&out, "prop gpuDirectRDMAFlushWritesOptions", static_cast<long long>(p.gpuDirectRDMAFlushWritesOptions));
  Line(&out, "prop gpuDirectRDMAWritesOrdering", static_cast<long long>(p.gpuDirectRDMAWritesOrdering));
  Line(&out, "prop memoryPoolSupportedHandleTypes", static_cast<long long>(p.memoryPoolSupportedHandleTypes));
  Line(&out, "prop deferredMappingCudaArraySupported", static_cast<long long>(p.deferredMappingCudaArraySupported));
  Line(&out, "prop ipcEventSupported", static_cast<long long>(p.ipcEventSupported));
  Line(&out, "prop clusterLaunch", static_cast<long long>(p.clusterLaunch));
  Line(&out, "prop unifiedFunctionPointers", static_cast<long long>(p.unifiedFunctionPointers));
  Line(&out, "prop deviceNumaConfig", static_cast<long long>(p.deviceNumaConfig));
  Line(&out, "prop deviceNumaId", static_cast<long long>(p.deviceNumaId));
  Line(&out, "prop mpsEnabled", static_cast<long long>(p.mpsEnabled));
  Line(&out, "prop hostNumaId", static_cast<long long>(p.hostNumaId));
  Line(&out, "prop gpuPciDeviceID", static_cast<long long>(p.gpuPciDeviceID));
  Line(&out, "prop gpuPciSubsystemID", static_cast<long long>(p.gpuPciSubsystemID));
  Line(&out, "prop hostNumaMultinodeIpcSupported", static_cast<long long>(p.hostNumaMultinodeIpcSupported));
  int answered = 0;
  for (int a = 1; a <= 147; ++a) {
    int v = 0;
    const cudaError_t e = cudaDeviceGetAttribute(&v, static_cast<cudaDeviceAttr>(a), 0);
    if (e == cudaSuccess) {
      ++answered;
      Line(&out, "attr " + std::to_string(a), v);
    } else {
      (void)cudaGetLastError();
      Line(&out, "attr " + std::to_string(a) + " error", static_cast<long long>(e));
    }
  }
  EXPECT_APP(answered > 100, "only %d attributes answered", answered);
  // Agreement between the two ways of asking.
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  EXPECT_APP(sms == p.multiProcessorCount, "SMs %d vs %d", sms, p.multiProcessorCount);
  std::printf("props checksum %016llx\n", static_cast<unsigned long long>(Fnv1a(out)));
  std::printf("PASS device_props\n");
  return 0;
}
