// driver_api: the driver API as PyTorch reaches it -- dlopen("libcuda.so.1")
// and entry points from cuGetProcAddress / cudaGetDriverEntryPointByVersion,
// never a link against libcuda -- mixed with the runtime on the same memory,
// streams and events, and a module loaded from PTX (as NVRTC's output is)
// whose kernel is launched through cuLaunchKernel. Runs natively and under the shim; prints a checksum of
// its results so the two runs can be compared.
//
// Under the shim (detected by its own export revenantMarkStep) a few more
// things are checked that only hold there: the handle of libcuda.so.1 is the
// shim's (its entry points are the shim's exports), libcuda.so resolves too,
// a driver function without a row is refused loudly, and the shim's own
// argument checks answer with the driver's codes.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/driver_api_kernels.cuh"
#include "tests/apps/driver_api_ptx.h"

#define CHECK_CU(call)                                                                   \
  do {                                                                                   \
    CUresult check_cu_r_ = (call);                                                       \
    EXPECT_APP(check_cu_r_ == CUDA_SUCCESS, "%s returned CUresult %d", #call,            \
               static_cast<int>(check_cu_r_));                                           \
  } while (0)

#define EXPECT_CU(call, want)                                                            \
  do {                                                                                   \
    CUresult expect_cu_r_ = (call);                                                      \
    EXPECT_APP(expect_cu_r_ == (want), "%s returned CUresult %d, expected %d", #call,    \
               static_cast<int>(expect_cu_r_), static_cast<int>(want));                  \
  } while (0)

namespace {

PFN_cuGetProcAddress_v12000 get_proc = nullptr;

template <typename Fn>
Fn Entry(const char* name) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  CUresult r = get_proc(name, &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
  EXPECT_APP(r == CUDA_SUCCESS && q == CU_GET_PROC_ADDRESS_SUCCESS && p != nullptr,
             "cuGetProcAddress(%s) returned %d, status %d", name, static_cast<int>(r),
             static_cast<int>(q));
  return reinterpret_cast<Fn>(p);
}

}  // namespace

int main() {
  const bool under_shim = dlsym(RTLD_DEFAULT, "revenantMarkStep") != nullptr;
  std::printf("driver_api: %s\n", under_shim ? "under the Revenant shim" : "native");
  // The runtime first (as PyTorch): it initializes the primary context.
  CHECK_CUDA(cudaFree(nullptr));

  // c10's way: the driver is already loaded, RTLD_NOLOAD must find it.
  void* lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
  EXPECT_APP(lib != nullptr, "dlopen(libcuda.so.1, RTLD_NOLOAD): %s", dlerror());
  void* lib2 = dlopen("libcuda.so.1", RTLD_NOW);
  EXPECT_APP(lib2 != nullptr, "dlopen(libcuda.so.1): %s", dlerror());
  get_proc = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(lib, "cuGetProcAddress_v2"));
  EXPECT_APP(get_proc != nullptr, "no cuGetProcAddress_v2 in libcuda.so.1");

  // Lookup rules: base names, by version.
  {
    void* p = reinterpret_cast<void*>(1);
    CUdriverProcAddressQueryResult q = CU_GET_PROC_ADDRESS_SUCCESS;
    // cuda.h documents CUDA_SUCCESS with a null pointer and the status; the
    // shim answers so. Natively the return code is printed and also taken
    // as CUDA_ERROR_NOT_FOUND, should a driver answer that way.
    CUresult r = get_proc("cuNoSuchFunction", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    std::printf("driver_api: unknown name: %d, status %d\n", static_cast<int>(r),
                static_cast<int>(q));
    EXPECT_APP(r == CUDA_SUCCESS || (!under_shim && r == CUDA_ERROR_NOT_FOUND),
               "unknown name returned %d", static_cast<int>(r));
    EXPECT_APP(p == nullptr && q == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND,
               "unknown name: pointer %p, status %d", p, static_cast<int>(q));
    // cuMemAllocAsync was introduced in CUDA 11.2.
    r = get_proc("cuMemAllocAsync", &p, 11000, CU_GET_PROC_ADDRESS_DEFAULT, &q);
    std::printf("driver_api: version not sufficient: %d, status %d\n", static_cast<int>(r),
                static_cast<int>(q));
    EXPECT_APP(r == CUDA_SUCCESS || (!under_shim && r == CUDA_ERROR_NOT_FOUND),
               "cuMemAllocAsync at 11.0 returned %d", static_cast<int>(r));
    EXPECT_APP(p == nullptr && q == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT,
               "cuMemAllocAsync at 11.0: pointer %p, status %d", p, static_cast<int>(q));
    CHECK_CU(get_proc("cuMemAllocAsync", &p, 11020, CU_GET_PROC_ADDRESS_DEFAULT, &q));
    EXPECT_APP(p != nullptr && q == CU_GET_PROC_ADDRESS_SUCCESS, "cuMemAllocAsync at 11.2");
    if (under_shim) {
      // The newest variant by then: cuMemAlloc_v2 since 3.2, the shim's export.
      CHECK_CU(get_proc("cuMemAlloc", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT, &q));
      EXPECT_APP(p == dlsym(lib, "cuMemAlloc_v2"), "cuMemAlloc is not the shim's cuMemAlloc_v2");
      CHECK_CU(get_proc("cuStreamGetCaptureInfo", &p, 11030, CU_GET_PROC_ADDRESS_DEFAULT, &q));
      EXPECT_APP(p == dlsym(lib, "cuStreamGetCaptureInfo_v2"), "11.3 is the _v2 variant");
      EXPECT_CU(get_proc("cuMemAlloc", &p, CUDA_VERSION, 7, &q), CUDA_ERROR_INVALID_VALUE);
      // "If the specified CUDA version is greater than the driver version,
      // the API will return CUDA_ERROR_INVALID_VALUE" (cuda.h).
      EXPECT_CU(get_proc("cuMemAlloc", &p, 99000, CU_GET_PROC_ADDRESS_DEFAULT, &q),
                CUDA_ERROR_INVALID_VALUE);
      EXPECT_APP(dlopen("/no/such/dir/libcuda.so", RTLD_NOW) != nullptr,
                 "libcuda.so in any directory is the shim");
      // A driver function without a row: handed out, and refused when called.
      auto tex = Entry<CUresult (*)(void*)>("cuTexRefCreate");
      EXPECT_CU(tex(nullptr), CUDA_ERROR_NOT_SUPPORTED);
    }
  }

  // The runtime's lookup, as c10's DriverAPI makes it.
  void* state_fn = nullptr;
  cudaDriverEntryPointQueryResult qres = cudaDriverEntryPointSymbolNotFound;
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state_fn, 12000,
                                              cudaEnableDefault, &qres));
  EXPECT_APP(state_fn != nullptr && qres == cudaDriverEntryPointSuccess,
             "cudaGetDriverEntryPointByVersion: status %d", static_cast<int>(qres));
  {
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &state_fn, 12000,
                                                     cudaEnableDefault, &qres);
    std::printf("driver_api: runtime lookup of an unknown name: %d, status %d\n",
                static_cast<int>(e), static_cast<int>(qres));
    EXPECT_APP(e == cudaSuccess || (!under_shim && e == cudaErrorSymbolNotFound),
               "runtime lookup of an unknown name returned %d", static_cast<int>(e));
    cudaGetLastError();
    EXPECT_APP(state_fn == nullptr && qres == cudaDriverEntryPointSymbolNotFound, "unknown name");
  }
  CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &state_fn, 12000,
                                              cudaEnableDefault, &qres));

  // Devices and the primary context.
  auto primary_state = reinterpret_cast<PFN_cuDevicePrimaryCtxGetState_v7000>(state_fn);
  unsigned int ctx_flags = 99;
  int active = 0;
  CHECK_CU(primary_state(0, &ctx_flags, &active));
  EXPECT_APP(active == 1, "the primary context is not active after cudaFree(0)");
  auto ctx_get_current = Entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent");
  auto ctx_get_device = Entry<PFN_cuCtxGetDevice_v13000>("cuCtxGetDevice");
  auto retain = Entry<PFN_cuDevicePrimaryCtxRetain_v7000>("cuDevicePrimaryCtxRetain");
  auto release = Entry<PFN_cuDevicePrimaryCtxRelease_v11000>("cuDevicePrimaryCtxRelease");
  auto push = Entry<PFN_cuCtxPushCurrent_v4000>("cuCtxPushCurrent");
  auto pop = Entry<PFN_cuCtxPopCurrent_v4000>("cuCtxPopCurrent");
  CUcontext current = nullptr, primary = nullptr, popped = nullptr;
  CHECK_CU(ctx_get_current(&current));
  EXPECT_APP(current != nullptr, "no current context after cudaFree(0)");
  CHECK_CU(retain(&primary, 0));
  EXPECT_APP(primary == current, "the retained primary context is not the current one");
  CHECK_CU(push(primary));
  CHECK_CU(pop(&popped));
  EXPECT_APP(popped == primary, "popped another context");
  CUdevice ctx_dev = -1;
  CHECK_CU(ctx_get_device(&ctx_dev, nullptr));
  EXPECT_APP(ctx_dev == 0, "context device %d", ctx_dev);
  CHECK_CU(release(0));

  auto device_get = Entry<PFN_cuDeviceGet_v2000>("cuDeviceGet");
  auto device_count = Entry<PFN_cuDeviceGetCount_v2000>("cuDeviceGetCount");
  auto device_name = Entry<PFN_cuDeviceGetName_v2000>("cuDeviceGetName");
  auto device_mem = Entry<PFN_cuDeviceTotalMem_v3020>("cuDeviceTotalMem");
  auto device_uuid = Entry<PFN_cuDeviceGetUuid_v11040>("cuDeviceGetUuid");
  auto device_attr = Entry<PFN_cuDeviceGetAttribute_v2000>("cuDeviceGetAttribute");
  auto driver_version = Entry<PFN_cuDriverGetVersion_v2020>("cuDriverGetVersion");
  int count = 0, rt_count = 0, version = 0, rt_version = 0;
  CHECK_CU(device_count(&count));
  CHECK_CUDA(cudaGetDeviceCount(&rt_count));
  EXPECT_APP(count == rt_count && count > 0, "device counts %d and %d", count, rt_count);
  CHECK_CU(driver_version(&version));
  CHECK_CUDA(cudaDriverGetVersion(&rt_version));
  EXPECT_APP(version == rt_version, "driver versions %d and %d", version, rt_version);
  CUdevice dev = -1;
  CHECK_CU(device_get(&dev, 0));
  EXPECT_CU(device_get(&dev, 99), CUDA_ERROR_INVALID_DEVICE);
  CHECK_CU(device_get(&dev, 0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  char name[256] = {};
  CHECK_CU(device_name(name, sizeof(name), dev));
  EXPECT_APP(std::strcmp(name, prop.name) == 0, "names '%s' and '%s'", name, prop.name);
  size_t total_mem = 0;
  CHECK_CU(device_mem(&total_mem, dev));
  EXPECT_APP(total_mem == prop.totalGlobalMem, "total memory %zu and %zu", total_mem,
             prop.totalGlobalMem);
  CUuuid uuid;
  CHECK_CU(device_uuid(&uuid, dev));
  EXPECT_APP(std::memcmp(&uuid, &prop.uuid, sizeof(uuid)) == 0, "UUIDs differ");
  auto pci_bus_id = Entry<PFN_cuDeviceGetPCIBusId_v4010>("cuDeviceGetPCIBusId");
  char bus[64] = {};
  CHECK_CU(pci_bus_id(bus, sizeof(bus), dev));
  std::printf("driver_api: PCI bus id %s\n", bus);
  if (!under_shim) {  // the shim has no cudaDeviceGetPCIBusId row: the format is checked here
    char rt_bus[64] = {};
    CHECK_CUDA(cudaDeviceGetPCIBusId(rt_bus, sizeof(rt_bus), 0));
    EXPECT_APP(std::strcmp(bus, rt_bus) == 0, "PCI bus ids '%s' and '%s'", bus, rt_bus);
  }
  int sms = 0;
  CHECK_CU(device_attr(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  EXPECT_APP(sms == prop.multiProcessorCount, "SMs %d and %d", sms, prop.multiProcessorCount);

  // Error names and strings.
  auto error_name = Entry<PFN_cuGetErrorName_v6000>("cuGetErrorName");
  auto error_string = Entry<PFN_cuGetErrorString_v6000>("cuGetErrorString");
  const char* text = nullptr;
  CHECK_CU(error_name(CUDA_ERROR_OUT_OF_MEMORY, &text));
  EXPECT_APP(text != nullptr && std::strcmp(text, "CUDA_ERROR_OUT_OF_MEMORY") == 0, "name %s",
             text);
  CHECK_CU(error_string(CUDA_ERROR_INVALID_VALUE, &text));
  EXPECT_APP(text != nullptr && std::strcmp(text, "invalid argument") == 0, "string %s", text);
  EXPECT_CU(error_name(static_cast<CUresult>(12345), &text), CUDA_ERROR_INVALID_VALUE);

  // Memory: driver allocation, memsets and copies, a runtime kernel on it.
  auto mem_alloc = Entry<PFN_cuMemAlloc_v3020>("cuMemAlloc");
  auto mem_free = Entry<PFN_cuMemFree_v3020>("cuMemFree");
  auto mem_info = Entry<PFN_cuMemGetInfo_v3020>("cuMemGetInfo");
  auto memset_d32 = Entry<PFN_cuMemsetD32_v3020>("cuMemsetD32");
  auto memset_d8 = Entry<PFN_cuMemsetD8_v3020>("cuMemsetD8");
  auto memset_d32_async = Entry<PFN_cuMemsetD32Async_v3020>("cuMemsetD32Async");
  auto htod = Entry<PFN_cuMemcpyHtoD_v3020>("cuMemcpyHtoD");
  auto dtoh = Entry<PFN_cuMemcpyDtoH_v3020>("cuMemcpyDtoH");
  auto dtod = Entry<PFN_cuMemcpyDtoD_v3020>("cuMemcpyDtoD");
  auto htod_async = Entry<PFN_cuMemcpyHtoDAsync_v3020>("cuMemcpyHtoDAsync");
  auto dtoh_async = Entry<PFN_cuMemcpyDtoHAsync_v3020>("cuMemcpyDtoHAsync");
  auto copy_async = Entry<PFN_cuMemcpyAsync_v4000>("cuMemcpyAsync");
  auto pointer_attr = Entry<PFN_cuPointerGetAttribute_v4000>("cuPointerGetAttribute");
  const int n = 1 << 16;
  const size_t bytes = n * sizeof(unsigned int);
  CUdeviceptr a = 0, b = 0, flag = 0;
  CHECK_CU(mem_alloc(&a, bytes));
  CHECK_CU(mem_alloc(&b, bytes));
  CHECK_CU(mem_alloc(&flag, sizeof(unsigned int)));
  size_t free_mem = 0, total = 0;
  CHECK_CU(mem_info(&free_mem, &total));
  EXPECT_APP(total > 0 && free_mem <= total, "memory info %zu of %zu", free_mem, total);
  unsigned int mem_type = 0;
  CHECK_CU(pointer_attr(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, a + 64));
  EXPECT_APP(mem_type == CU_MEMORYTYPE_DEVICE, "memory type %u", mem_type);
  int stack_word = 0;
  EXPECT_CU(pointer_attr(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                         reinterpret_cast<CUdeviceptr>(&stack_word)),
            CUDA_ERROR_INVALID_VALUE);

  std::vector<unsigned int> h(n), want(n);
  CHECK_CU(memset_d32(a, 0x01020304u, n));
  CHECK_CU(dtoh(h.data(), a, bytes));
  for (int i = 0; i < n; ++i) EXPECT_APP(h[i] == 0x01020304u, "D32 word %d is %08x", i, h[i]);
  CHECK_CU(memset_d8(b, 0xab, bytes));
  CHECK_CU(dtoh(h.data(), b, bytes));
  EXPECT_APP(h[0] == 0xababababu && h[n - 1] == 0xababababu, "D8 gave %08x", h[n - 1]);
  for (int i = 0; i < n; ++i) want[i] = static_cast<unsigned int>(i) * 2654435761u;
  CHECK_CU(htod(b, want.data(), bytes));
  CHECK_CU(dtod(a, b, bytes));
  CHECK_CU(dtoh(h.data(), a, bytes));
  EXPECT_APP(h == want, "HtoD + DtoD + DtoH lost data");
  // A failing driver call leaves the runtime's last error alone.
  EXPECT_CU(memset_d32(a + 2, 0, 1), CUDA_ERROR_INVALID_VALUE);
  CHECK_CUDA(cudaGetLastError());

  // Streams: a wait on a device word released by a write on another stream.
  auto write_value = Entry<PFN_cuStreamWriteValue32_v11070>("cuStreamWriteValue32");
  auto wait_value = Entry<PFN_cuStreamWaitValue32_v11070>("cuStreamWaitValue32");
  auto stream_query = Entry<PFN_cuStreamQuery_v2000>("cuStreamQuery");
  auto stream_sync = Entry<PFN_cuStreamSynchronize_v2000>("cuStreamSynchronize");
  auto stream_wait_event = Entry<PFN_cuStreamWaitEvent_v3020>("cuStreamWaitEvent");
  cudaStream_t s1 = nullptr, s2 = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  CUstream c1 = reinterpret_cast<CUstream>(s1), c2 = reinterpret_cast<CUstream>(s2);
  CHECK_CU(memset_d32(flag, 0, 1));
  CHECK_CU(wait_value(c2, flag, 7, CU_STREAM_WAIT_VALUE_GEQ));
  CHECK_CU(memset_d32_async(a, 5, n, c2));
  EXPECT_CU(stream_query(c2), CUDA_ERROR_NOT_READY);
  CHECK_CU(memset_d32_async(b, 9, n, c1));
  CHECK_CU(write_value(c1, flag, 7, CU_STREAM_WRITE_VALUE_DEFAULT));
  CHECK_CU(stream_sync(c2));
  CHECK_CU(stream_query(c2));
  CHECK_CU(stream_sync(c1));
  CHECK_CU(dtoh_async(h.data(), a, bytes, c1));
  CHECK_CU(stream_sync(c1));
  EXPECT_APP(h[0] == 5 && h[n - 1] == 5, "after the wait: %u", h[n - 1]);
  unsigned int flag_value = 0;
  CHECK_CU(dtoh(&flag_value, flag, sizeof(flag_value)));
  EXPECT_APP(flag_value == 7, "flag %u", flag_value);
  if (under_shim) {
    EXPECT_CU(write_value(c1, flag, 1, 0x80), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CU(wait_value(c1, flag + 2, 1, CU_STREAM_WAIT_VALUE_EQ), CUDA_ERROR_INVALID_VALUE);
    EXPECT_CU(wait_value(c1, flag, 1, 9), CUDA_ERROR_INVALID_VALUE);
  }

  // Events around a runtime kernel on driver-allocated memory.
  auto event_create = Entry<PFN_cuEventCreate_v2000>("cuEventCreate");
  auto event_record = Entry<PFN_cuEventRecord_v2000>("cuEventRecord");
  auto event_sync = Entry<PFN_cuEventSynchronize_v2000>("cuEventSynchronize");
  auto event_query = Entry<PFN_cuEventQuery_v2000>("cuEventQuery");
  auto event_elapsed = Entry<PFN_cuEventElapsedTime_v12080>("cuEventElapsedTime");
  auto event_destroy = Entry<PFN_cuEventDestroy_v4000>("cuEventDestroy");
  CUevent e0 = nullptr, e1 = nullptr;
  CHECK_CU(event_create(&e0, CU_EVENT_DEFAULT));
  CHECK_CU(event_create(&e1, CU_EVENT_DEFAULT));
  CHECK_CU(htod_async(a, want.data(), bytes, c1));
  CHECK_CU(event_record(e0, c1));
  mix_words<<<(n + 255) / 256, 256, 0, s1>>>(reinterpret_cast<unsigned int*>(a), n);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CU(event_record(e1, c1));
  CHECK_CU(stream_wait_event(c2, e1, 0));
  CHECK_CU(copy_async(b, a, bytes, c2));
  CHECK_CU(event_sync(e1));
  CHECK_CU(event_query(e1));
  float ms = -1.0f;
  CHECK_CU(event_elapsed(&ms, e0, e1));
  EXPECT_APP(ms >= 0.0f, "elapsed %f ms", ms);
  CHECK_CU(stream_sync(c2));
  CHECK_CU(dtoh(h.data(), b, bytes));
  unsigned int checksum = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned int expect = want[i] * 3u + static_cast<unsigned int>(i);
    EXPECT_APP(h[i] == expect, "word %d is %08x, expected %08x", i, h[i], expect);
    checksum = checksum * 31u + h[i];
  }
  // A module the program loads itself (PTX), launched through the driver.
  auto module_load = Entry<PFN_cuModuleLoadData_v2000>("cuModuleLoadData");
  auto module_load_ex = Entry<PFN_cuModuleLoadDataEx_v2010>("cuModuleLoadDataEx");
  auto module_function = Entry<PFN_cuModuleGetFunction_v2000>("cuModuleGetFunction");
  auto module_unload = Entry<PFN_cuModuleUnload_v2000>("cuModuleUnload");
  auto launch = Entry<PFN_cuLaunchKernel_v4000>("cuLaunchKernel");
  auto func_attr = Entry<PFN_cuFuncGetAttribute_v2020>("cuFuncGetAttribute");
  auto func_set_attr = Entry<PFN_cuFuncSetAttribute_v9000>("cuFuncSetAttribute");
  auto occupancy =
      Entry<PFN_cuOccupancyMaxActiveBlocksPerMultiprocessor_v6050>("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  CUmodule mod = nullptr, mod_ex = nullptr;
  {
    std::vector<char> image(kDriverApiPtx, kDriverApiPtx + sizeof(kDriverApiPtx));
    CHECK_CU(module_load(&mod, image.data()));
    image.assign(image.size(), 0);  // the driver keeps what it needs
  }
  CHECK_CU(module_load_ex(&mod_ex, kDriverApiPtx, 0, nullptr, nullptr));
  CUfunction add = nullptr, add_again = nullptr, missing = nullptr;
  const char* kAdd = "_Z10driver_addPjij";  // driver_add(unsigned int*, int, unsigned int)
  CHECK_CU(module_function(&add, mod, kAdd));
  CHECK_CU(module_function(&add_again, mod, kAdd));
  EXPECT_APP(add == add_again, "two handles for one kernel");
  EXPECT_CU(module_function(&missing, mod, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
  int max_threads = 0, blocks = 0;
  CHECK_CU(func_attr(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, add));
  EXPECT_APP(max_threads >= 256, "max threads %d", max_threads);
  CHECK_CU(func_set_attr(add, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
  CHECK_CU(occupancy(&blocks, add, 256, 0));
  EXPECT_APP(blocks > 0, "occupancy %d", blocks);
  CUdeviceptr words = b;
  int count_arg = n;
  unsigned int k_arg = 1000;
  void* params[] = {&words, &count_arg, &k_arg};
  CHECK_CU(launch(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, c1, params, nullptr));
  // The packed form, as cuBLAS launches: one buffer at the parameters' offsets.
  struct {
    CUdeviceptr words;
    int n;
    unsigned int k;
  } packed = {b, n, 7};
  size_t packed_size = sizeof(packed);
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE,
                   &packed_size, CU_LAUNCH_PARAM_END};
  CHECK_CU(launch(add, (n + 255) / 256, 1, 1, 256, 1, 1, 0, c1, nullptr, extra));
  EXPECT_CU(launch(add, 0, 1, 1, 256, 1, 1, 0, c1, params, nullptr), CUDA_ERROR_INVALID_VALUE);
  CHECK_CU(stream_sync(c1));
  CHECK_CUDA(cudaGetLastError());
  CHECK_CU(dtoh(h.data(), b, bytes));
  for (int i = 0; i < n; ++i) {
    const unsigned int expect = want[i] * 3u + static_cast<unsigned int>(i) + 1007u;
    EXPECT_APP(h[i] == expect, "after driver_add: word %d is %08x, expected %08x", i, h[i],
               expect);
    checksum = checksum * 31u + h[i];
  }
  CHECK_CU(module_unload(mod_ex));
  CHECK_CU(module_unload(mod));

  CHECK_CU(event_destroy(e0));
  CHECK_CU(event_destroy(e1));
  CHECK_CUDA(cudaStreamDestroy(s1));
  CHECK_CUDA(cudaStreamDestroy(s2));
  CHECK_CU(mem_free(a));
  CHECK_CU(mem_free(b));
  CHECK_CU(mem_free(flag));
  std::printf("driver_api checksum=%08x\n", checksum);
  std::printf("PASS driver_api\n");
  return 0;
}
