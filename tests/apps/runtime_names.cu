// runtime_names: the CUDA runtime names PyTorch imports beyond the basics --
// `__device__` variables through cudaMemcpyToSymbol & co., cudaLaunchKernelExC
// (through the cudaLaunchKernelEx template) with launch attributes, peer
// access and peer copies on a single device, the PCI bus id,
// cudaGraphInstantiateWithFlags and cudaGraphNodeGetDependencies,
// cudaMemPoolSetAccess, and CUDA IPC (refused under Revenant, whose agents
// own the memory). Runs natively and under the shim with either backend.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include "tests/apps/app_check.h"
#include "tests/apps/runtime_names_kernels.cuh"

namespace {

int host_only_variable = 0;  // not a __device__ variable

bool UnderRevenant() { return std::getenv("REVENANT_AGENT_SOCKET") != nullptr; }

std::vector<int> ReadTable() {
  std::vector<int> t(kTableSize, -1);
  CHECK_CUDA(cudaMemcpyFromSymbol(t.data(), rn_table, sizeof(int) * kTableSize));
  return t;
}

void DeviceVariables(cudaStream_t s) {
  size_t size = 0;
  CHECK_CUDA(cudaGetSymbolSize(&size, rn_table));
  EXPECT_APP(size == sizeof(int) * kTableSize, "cudaGetSymbolSize(rn_table) = %zu", size);
  CHECK_CUDA(cudaGetSymbolSize(&size, rn::counter));
  EXPECT_APP(size == sizeof(unsigned long long), "cudaGetSymbolSize(rn::counter) = %zu", size);

  std::vector<int> table(kTableSize);
  for (int i = 0; i < kTableSize; ++i) table[i] = 3 * i + 1;
  const float scale = 2.5f;
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int) * kTableSize));
  CHECK_CUDA(cudaMemcpyToSymbol(rn_scale, &scale, sizeof(scale)));

  // A kernel reads what the copies wrote.
  const int n = 1000;
  float* d_out = nullptr;
  CHECK_CUDA(cudaMalloc(&d_out, n * sizeof(float)));
  rn_use_table<<<(n + 127) / 128, 128>>>(d_out, n);
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> out(n);
  CHECK_CUDA(cudaMemcpy(out.data(), d_out, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const float want = table[i % kTableSize] * scale + i;
    EXPECT_APP(out[i] == want, "rn_use_table: out[%d] = %f, expected %f", i, out[i], want);
  }
  EXPECT_APP(ReadTable() == table, "cudaMemcpyFromSymbol does not return what was written");

  // Part of the table, at an offset.
  std::vector<int> part(8);
  for (int i = 0; i < 8; ++i) part[i] = -100 - i;
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, part.data(), sizeof(int) * 8, sizeof(int) * 16));
  for (int i = 0; i < 8; ++i) table[16 + i] = part[i];
  EXPECT_APP(ReadTable() == table, "partial cudaMemcpyToSymbol at an offset");
  int one = 0;
  CHECK_CUDA(cudaMemcpyFromSymbol(&one, rn_table, sizeof(int), sizeof(int) * 20));
  EXPECT_APP(one == table[20], "cudaMemcpyFromSymbol at an offset: %d, expected %d", one,
             table[20]);

  // A kernel writes the variables; the copies see it.
  unsigned long long counter = 99;
  CHECK_CUDA(cudaMemcpyFromSymbol(&counter, rn::counter, sizeof(counter)));
  EXPECT_APP(counter == 0, "rn::counter starts at %llu", counter);
  rn_bump_table<<<1, kTableSize>>>(5);
  CHECK_CUDA(cudaGetLastError());
  for (int& v : table) v += 5;
  EXPECT_APP(ReadTable() == table, "the table after rn_bump_table");
  CHECK_CUDA(cudaMemcpyFromSymbol(&counter, rn::counter, sizeof(counter)));
  EXPECT_APP(counter == 1, "rn::counter after one bump: %llu", counter);

  // Asynchronous forms on a stream, through pinned memory.
  int* pinned = nullptr;
  CHECK_CUDA(cudaMallocHost(&pinned, sizeof(int) * kTableSize));
  for (int i = 0; i < kTableSize; ++i) pinned[i] = 1000 + i;
  CHECK_CUDA(cudaMemcpyToSymbolAsync(rn_table, pinned, sizeof(int) * kTableSize, 0,
                                     cudaMemcpyHostToDevice, s));
  rn_bump_table<<<1, kTableSize, 0, s>>>(1);
  CHECK_CUDA(cudaGetLastError());
  std::memset(pinned, 0, sizeof(int) * kTableSize);
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpyFromSymbolAsync(pinned, rn_table, sizeof(int) * kTableSize, 0,
                                       cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < kTableSize; ++i) {
    EXPECT_APP(pinned[i] == 1001 + i, "async round trip: [%d] = %d", i, pinned[i]);
    table[i] = 1001 + i;
  }

  // Device to device, both ways.
  int *d_a = nullptr, *d_b = nullptr;
  CHECK_CUDA(cudaMalloc(&d_a, sizeof(int) * kTableSize));
  CHECK_CUDA(cudaMalloc(&d_b, sizeof(int) * kTableSize));
  std::vector<int> fresh(kTableSize);
  for (int i = 0; i < kTableSize; ++i) fresh[i] = 7 * i - 3;
  CHECK_CUDA(cudaMemcpy(d_a, fresh.data(), sizeof(int) * kTableSize, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, d_a, sizeof(int) * kTableSize, 0,
                                cudaMemcpyDeviceToDevice));
  CHECK_CUDA(cudaMemcpyFromSymbol(d_b, rn_table, sizeof(int) * kTableSize, 0,
                                  cudaMemcpyDeviceToDevice));
  std::vector<int> back(kTableSize);
  CHECK_CUDA(cudaMemcpy(back.data(), d_b, sizeof(int) * kTableSize, cudaMemcpyDeviceToHost));
  EXPECT_APP(back == fresh, "device-to-device through the variable");
  table = fresh;

  // Errors, with the runtime's codes.
  EXPECT_CUDA_ERROR(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int) * 8,
                                       sizeof(int) * (kTableSize - 4)),
                    cudaErrorInvalidValue);
  (void)cudaGetLastError();
  EXPECT_CUDA_ERROR(cudaMemcpyToSymbol(host_only_variable, &one, sizeof(one)),
                    cudaErrorInvalidSymbol);
  (void)cudaGetLastError();
  EXPECT_CUDA_ERROR(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int), 0,
                                       cudaMemcpyDeviceToHost),
                    cudaErrorInvalidMemcpyDirection);
  (void)cudaGetLastError();
  EXPECT_APP(ReadTable() == table, "a refused copy changed the table");

  CHECK_CUDA(cudaFreeHost(pinned));
  CHECK_CUDA(cudaFree(d_a));
  CHECK_CUDA(cudaFree(d_b));
  CHECK_CUDA(cudaFree(d_out));
  std::printf("device variables: ok\n");
}

// cudaGetSymbolAddress last: a replacement agent may have the variable
// elsewhere, so the program cannot be recovered past it (runtime_names_recovery_test).
void SymbolAddress() {
  std::vector<int> table(kTableSize);
  for (int i = 0; i < kTableSize; ++i) table[i] = 11 * i + 2;
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int) * kTableSize));
  int* d_b = nullptr;
  CHECK_CUDA(cudaMalloc(&d_b, sizeof(int) * kTableSize));
  std::vector<int> back(kTableSize);
  // The variable's address, used by a kernel and by a plain copy.
  void* addr = nullptr;
  CHECK_CUDA(cudaGetSymbolAddress(&addr, rn_table));
  EXPECT_APP(addr != nullptr, "cudaGetSymbolAddress gave null");
  rn_read_ptr<<<1, kTableSize>>>(static_cast<const int*>(addr), d_b, kTableSize);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaMemcpy(back.data(), d_b, sizeof(int) * kTableSize, cudaMemcpyDeviceToHost));
  EXPECT_APP(back == table, "a kernel reading through cudaGetSymbolAddress's pointer");
  std::fill(back.begin(), back.end(), 0);
  CHECK_CUDA(cudaMemcpy(back.data(), addr, sizeof(int) * kTableSize, cudaMemcpyDeviceToHost));
  EXPECT_APP(back == table, "cudaMemcpy from cudaGetSymbolAddress's pointer");

  CHECK_CUDA(cudaFree(d_b));
  std::printf("symbol address: ok\n");
}

void LaunchEx(cudaStream_t s) {
  std::vector<int> table(kTableSize, 10);
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int) * kTableSize));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(1);
  cfg.blockDim = dim3(kTableSize);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = s;
  // No attributes.
  CHECK_CUDA(cudaLaunchKernelEx(&cfg, rn_bump_table, 1));
  // Priority and programmatic stream serialization.
  cudaLaunchAttribute attrs[2];
  std::memset(attrs, 0, sizeof(attrs));
  attrs[0].id = cudaLaunchAttributePriority;
  attrs[0].val.priority = 0;
  attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[1].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = 2;
  CHECK_CUDA(cudaLaunchKernelEx(&cfg, rn_bump_table, 2));
  // Cooperative, a grid that fits.
  cudaLaunchAttribute coop;
  std::memset(&coop, 0, sizeof(coop));
  coop.id = cudaLaunchAttributeCooperative;
  coop.val.cooperative = 1;
  cfg.attrs = &coop;
  cfg.numAttrs = 1;
  CHECK_CUDA(cudaLaunchKernelEx(&cfg, rn_bump_table, 4));
  // Clusters of 2 blocks over a grid of 2 (the second block has nothing to do).
  cudaLaunchAttribute cluster;
  std::memset(&cluster, 0, sizeof(cluster));
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 2;
  cluster.val.clusterDim.y = 1;
  cluster.val.clusterDim.z = 1;
  cfg.gridDim = dim3(2);
  cfg.attrs = &cluster;
  cfg.numAttrs = 1;
  CHECK_CUDA(cudaLaunchKernelEx(&cfg, rn_bump_table, 8));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int& v : table) v += 1 + 2 + 4 + 8;
  EXPECT_APP(ReadTable() == table, "cudaLaunchKernelEx launches did not all run");
  // A launch-completion event (an event handle inside an attribute): the
  // host backend cannot signal it from inside a kernel and refuses the
  // launch at the call; elsewhere the event completes with the kernel.
  cudaEvent_t done = nullptr;
  CHECK_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  cudaLaunchAttribute completion;
  std::memset(&completion, 0, sizeof(completion));
  completion.id = cudaLaunchAttributeLaunchCompletionEvent;
  completion.val.launchCompletionEvent.event = done;
  completion.val.launchCompletionEvent.flags = 0;
  cfg.gridDim = dim3(1);
  cfg.attrs = &completion;
  cfg.numAttrs = 1;
  const cudaError_t ce = cudaLaunchKernelEx(&cfg, rn_bump_table, 16);
  if (ce == cudaSuccess) {
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaEventQuery(done));
    for (int& v : table) v += 16;
    std::printf("launch-completion event: signalled\n");
  } else {
    EXPECT_APP(ce == cudaErrorNotSupported && UnderRevenant(),
               "launch with a completion event: %s", cudaGetErrorName(ce));
    EXPECT_APP(cudaGetLastError() == cudaErrorNotSupported, "the refusal is the last error");
    CHECK_CUDA(cudaStreamSynchronize(s));
    std::printf("launch-completion event: refused at the call\n");
  }
  EXPECT_APP(ReadTable() == table, "after the launch with a completion event");
  CHECK_CUDA(cudaEventDestroy(done));
  // Unknown kernel.
  cfg.attrs = nullptr;
  cfg.numAttrs = 0;
  EXPECT_CUDA_ERROR(cudaLaunchKernelExC(&cfg, reinterpret_cast<const void*>(&host_only_variable),
                                        nullptr),
                    cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  std::printf("cudaLaunchKernelEx: ok\n");
}

void DeviceQueries(int count) {
  char bus[64] = {0};
  CHECK_CUDA(cudaDeviceGetPCIBusId(bus, sizeof(bus), 0));
  unsigned domain = 99, b = 99, dev = 99, fn = 99;
  EXPECT_APP(std::sscanf(bus, "%x:%x:%x.%x", &domain, &b, &dev, &fn) == 4, "PCI bus id '%s'",
             bus);
  int attr_bus = -1, attr_dev = -1, attr_domain = -1;
  CHECK_CUDA(cudaDeviceGetAttribute(&attr_bus, cudaDevAttrPciBusId, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&attr_dev, cudaDevAttrPciDeviceId, 0));
  CHECK_CUDA(cudaDeviceGetAttribute(&attr_domain, cudaDevAttrPciDomainId, 0));
  EXPECT_APP(int(b) == attr_bus && int(dev) == attr_dev && int(domain) == attr_domain,
             "PCI bus id '%s' vs attributes domain %d bus %d device %d", bus, attr_domain,
             attr_bus, attr_dev);
  EXPECT_CUDA_ERROR(cudaDeviceGetPCIBusId(bus, sizeof(bus), count), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  std::printf("PCI bus id of device 0: %s\n", bus);

  // A device is not its own peer; there is no other.
  int can = -1;
  CHECK_CUDA(cudaDeviceCanAccessPeer(&can, 0, 0));
  EXPECT_APP(can == 0, "cudaDeviceCanAccessPeer(0, 0) = %d", can);
  EXPECT_CUDA_ERROR(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported);
  (void)cudaGetLastError();
  EXPECT_CUDA_ERROR(cudaDeviceEnablePeerAccess(count, 0), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  std::printf("peer access: ok\n");
}

void PeerCopies(cudaStream_t s, int count) {
  const int n = 4096;
  std::vector<int> src(n), back(n, 0);
  for (int i = 0; i < n; ++i) src[i] = i * i;
  int *d1 = nullptr, *d2 = nullptr;
  CHECK_CUDA(cudaMalloc(&d1, n * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&d2, n * sizeof(int)));
  CHECK_CUDA(cudaMemcpy(d1, src.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemsetAsync(d2, 0, n * sizeof(int), s));
  CHECK_CUDA(cudaMemcpyPeerAsync(d2, 0, d1, 0, n * sizeof(int), s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaMemcpy(back.data(), d2, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_APP(back == src, "cudaMemcpyPeerAsync on one device");
  CHECK_CUDA(cudaMemset(d2, 0, n * sizeof(int)));
  CHECK_CUDA(cudaMemcpyPeer(d2, 0, d1, 0, n * sizeof(int)));
  CHECK_CUDA(cudaMemcpy(back.data(), d2, n * sizeof(int), cudaMemcpyDeviceToHost));
  EXPECT_APP(back == src, "cudaMemcpyPeer on one device");
  EXPECT_CUDA_ERROR(cudaMemcpyPeerAsync(d2, count, d1, 0, n * sizeof(int), s),
                    cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  EXPECT_CUDA_ERROR(cudaMemcpyPeer(d2, 0, d1, count, n * sizeof(int)), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  CHECK_CUDA(cudaFree(d1));
  CHECK_CUDA(cudaFree(d2));
  std::printf("peer copies: ok\n");
}

void Graphs(cudaStream_t s) {
  std::vector<int> table(kTableSize, 0);
  CHECK_CUDA(cudaMemcpyToSymbol(rn_table, table.data(), sizeof(int) * kTableSize));
  // a -> b, a -> c, {b, c} -> d (d bumps the table by 3).
  cudaGraph_t g = nullptr;
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  cudaGraphNodeParams empty = {};
  empty.type = cudaGraphNodeTypeEmpty;
  cudaGraphNode_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  CHECK_CUDA(cudaGraphAddNode(&a, g, nullptr, nullptr, 0, &empty));
  CHECK_CUDA(cudaGraphAddNode(&b, g, &a, nullptr, 1, &empty));
  CHECK_CUDA(cudaGraphAddNode(&c, g, &a, nullptr, 1, &empty));
  int delta = 3;
  void* args[] = {&delta};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(rn_bump_table);
  kp.gridDim = dim3(1);
  kp.blockDim = dim3(kTableSize);
  kp.kernelParams = args;
  cudaGraphNode_t bc[2] = {b, c};
  CHECK_CUDA(cudaGraphAddKernelNode(&d, g, bc, 2, &kp));

  size_t num = 99;
  CHECK_CUDA(cudaGraphNodeGetDependencies(d, nullptr, nullptr, &num));
  EXPECT_APP(num == 2, "d has %zu dependencies", num);
  cudaGraphNode_t deps[3] = {a, a, a};
  cudaGraphEdgeData edges[3];
  std::memset(edges, 0xff, sizeof(edges));
  num = 3;
  CHECK_CUDA(cudaGraphNodeGetDependencies(d, deps, edges, &num));
  EXPECT_APP(num == 2 && deps[2] == nullptr, "capacity 3: %zu dependencies, third %p", num,
             static_cast<void*>(deps[2]));
  EXPECT_APP((std::set<cudaGraphNode_t>{deps[0], deps[1]} == std::set<cudaGraphNode_t>{b, c}),
             "d's dependencies are not b and c");
  cudaGraphEdgeData zero;
  std::memset(&zero, 0, sizeof(zero));
  EXPECT_APP(std::memcmp(&edges[0], &zero, sizeof(zero)) == 0 &&
                 std::memcmp(&edges[1], &zero, sizeof(zero)) == 0,
             "default edges have zero edge data");
  num = 5;
  CHECK_CUDA(cudaGraphNodeGetDependencies(a, nullptr, nullptr, &num));
  EXPECT_APP(num == 0, "a has %zu dependencies", num);
  num = 1;
  CHECK_CUDA(cudaGraphNodeGetDependencies(b, deps, nullptr, &num));
  EXPECT_APP(num == 1 && deps[0] == a, "b's dependency");

  cudaGraphExec_t exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiateWithFlags(&exec, g, cudaGraphInstantiateFlagAutoFreeOnLaunch));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int& v : table) v += 6;
  EXPECT_APP(ReadTable() == table, "two launches of the instantiated graph");
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphInstantiateWithFlags(&exec, g, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int& v : table) v += 3;
  EXPECT_APP(ReadTable() == table, "a launch of the graph instantiated without flags");
  CHECK_CUDA(cudaGraphExecDestroy(exec));

  // A DOT description of the graph, written where the application says.
  char path[128];
  std::snprintf(path, sizeof(path), "/tmp/runtime_names_%d.dot", static_cast<int>(getpid()));
  CHECK_CUDA(cudaGraphDebugDotPrint(g, path, cudaGraphDebugDotFlagsVerbose));
  FILE* f = std::fopen(path, "r");
  EXPECT_APP(f != nullptr, "cudaGraphDebugDotPrint wrote no %s", path);
  std::string dot;
  char buf[4096];
  size_t got = 0;
  while ((got = std::fread(buf, 1, sizeof(buf), f)) > 0) dot.append(buf, got);
  std::fclose(f);
  std::remove(path);
  EXPECT_APP(dot.find("digraph") != std::string::npos && dot.find("->") != std::string::npos,
             "the graph's DOT file has no digraph with edges (%zu bytes)", dot.size());
  size_t arrows = 0;
  for (size_t at = dot.find("->"); at != std::string::npos; at = dot.find("->", at + 2)) ++arrows;
  EXPECT_APP(arrows >= 4, "the graph DOT file has %zu edges, the graph 4", arrows);
  std::printf("graph DOT file: %zu bytes, %zu edges\n", dot.size(), arrows);
  CHECK_CUDA(cudaGraphDestroy(g));
  std::printf("graphs: ok\n");
}

void Pools() {
  cudaMemPool_t pool = nullptr;
  CHECK_CUDA(cudaDeviceGetDefaultMemPool(&pool, 0));
  cudaMemAccessDesc desc = {};
  desc.location.type = cudaMemLocationTypeDevice;
  desc.location.id = 0;
  desc.flags = cudaMemAccessFlagsProtReadWrite;
  CHECK_CUDA(cudaMemPoolSetAccess(pool, &desc, 1));
  std::printf("pool access: ok\n");
}

void Ipc() {
  void* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, 1 << 20));
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, d);
  if (UnderRevenant()) {
    EXPECT_APP(e == cudaErrorNotSupported, "cudaIpcGetMemHandle under Revenant: %s",
               cudaGetErrorName(e));
    (void)cudaGetLastError();
    cudaEvent_t ev = nullptr;
    CHECK_CUDA(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
    cudaIpcEventHandle_t eh;
    EXPECT_CUDA_ERROR(cudaIpcGetEventHandle(&eh, ev), cudaErrorNotSupported);
    (void)cudaGetLastError();
    void* opened = nullptr;
    EXPECT_CUDA_ERROR(cudaIpcOpenMemHandle(&opened, h, cudaIpcMemLazyEnablePeerAccess),
                      cudaErrorNotSupported);
    (void)cudaGetLastError();
    CHECK_CUDA(cudaEventDestroy(ev));
  } else {
    EXPECT_APP(e == cudaSuccess, "cudaIpcGetMemHandle natively: %s", cudaGetErrorName(e));
  }
  CHECK_CUDA(cudaFree(d));
  std::printf("ipc: ok (%s)\n", UnderRevenant() ? "refused under Revenant" : "native");
}

}  // namespace

int main() {
  int count = 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  EXPECT_APP(count >= 1, "no device");
  // The peer checks assume the process sees one device (as it does under Revenant).
  if (count > 1) {
    std::printf("%d devices: run with CUDA_VISIBLE_DEVICES set to one of them\n", count);
    return 1;
  }
  cudaStream_t s = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DeviceVariables(s);
  LaunchEx(s);
  DeviceQueries(count);
  PeerCopies(s, count);
  Graphs(s);
  Pools();
  Ipc();
  SymbolAddress();
  CHECK_CUDA(cudaStreamDestroy(s));
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("PASS runtime_names\n");
  return 0;
}
