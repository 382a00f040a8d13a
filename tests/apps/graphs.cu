// graphs: stream capture (into a new and into an existing graph), explicit
// graphs with memset/kernel/memcpy/host/alloc/free nodes, instantiate, repeated
// launches, exec updates, clones and node queries.
// GRAPHS_HOST_NODE_SLEEP_MS=N: the host node sleeps N ms before it counts its
// run (a slow host function: a synchronize must still return after it).
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/graphs_kernels.cuh"

namespace {

constexpr int kN = 4096;
constexpr int kBlocks = kN / 256;

// What the host node of an explicit graph checks each time the graph runs.
struct HostCheck {
  const int* pinned;
  int expected;
  int runs = 0;
  int failures = 0;
};

void CUDART_CB CheckPinned(void* user) {
  HostCheck* c = static_cast<HostCheck*>(user);
  static const int sleep_ms = [] {
    const char* v = std::getenv("GRAPHS_HOST_NODE_SLEEP_MS");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  if (sleep_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
  ++c->runs;
  for (int i = 0; i < kN; ++i) {
    if (c->pinned[i] != c->expected) {
      ++c->failures;
      return;
    }
  }
}

void CopyBackAndCheck(const int* d, int expected, const char* what) {
  std::vector<int> h(kN);
  CHECK_CUDA(cudaMemcpy(h.data(), d, kN * sizeof(int), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) {
    EXPECT_APP(h[i] == expected, "%s: x[%d] = %d, expected %d", what, i, h[i], expected);
  }
}

// memset(dy, 0) -> add_value(dy, value) -> copy to pinned -> host check.
cudaGraph_t BuildExplicit(int* dy, int* pinned, int value, HostCheck* check,
                          cudaGraphNode_t* kernel_node, cudaKernelNodeParams* kp_out) {
  cudaGraph_t g;
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  cudaMemsetParams mp = {};
  mp.dst = dy;
  mp.value = 0;
  mp.elementSize = sizeof(int);
  mp.width = kN;
  mp.height = 1;
  cudaGraphNode_t memset_node, copy_node, host_node;
  CHECK_CUDA(cudaGraphAddMemsetNode(&memset_node, g, nullptr, 0, &mp));
  static int n = kN;
  static int* target;
  static int v;
  target = dy;
  v = value;
  void* args[] = {&target, &v, &n};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(add_value);
  kp.gridDim = dim3(kBlocks);
  kp.blockDim = dim3(256);
  kp.kernelParams = args;
  CHECK_CUDA(cudaGraphAddKernelNode(kernel_node, g, &memset_node, 1, &kp));
  *kp_out = kp;
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&copy_node, g, kernel_node, 1, pinned, dy,
                                      kN * sizeof(int), cudaMemcpyDeviceToHost));
  cudaHostNodeParams hp = {};
  hp.fn = CheckPinned;
  hp.userData = check;
  CHECK_CUDA(cudaGraphAddHostNode(&host_node, g, &copy_node, 1, &hp));
  return g;
}

}  // namespace

int main() {
  CHECK_CUDA(cudaSetDevice(0));
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int *dx, *dy, *dz, *pinned;
  CHECK_CUDA(cudaMalloc(&dx, kN * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&dy, kN * sizeof(int)));
  CHECK_CUDA(cudaMalloc(&dz, kN * sizeof(int)));
  CHECK_CUDA(cudaMallocHost(&pinned, kN * sizeof(int)));
  CHECK_CUDA(cudaMemset(dx, 0, kN * sizeof(int)));

  // 1. Stream capture into a new graph; replayed three times.
  cudaStreamCaptureStatus status;
  unsigned long long capture_id = 0;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  CHECK_CUDA(cudaStreamGetCaptureInfo(s, &status, &capture_id));
  EXPECT_APP(status == cudaStreamCaptureStatusActive, "capture status %d", status);
  add_value<<<kBlocks, 256, 0, s>>>(dx, 1, kN);
  add_value<<<kBlocks, 256, 0, s>>>(dx, 10, kN);
  cudaGraph_t captured;
  CHECK_CUDA(cudaStreamEndCapture(s, &captured));
  CHECK_CUDA(cudaStreamGetCaptureInfo(s, &status));
  EXPECT_APP(status == cudaStreamCaptureStatusNone, "capture status %d after end", status);
  size_t count = 0;
  CHECK_CUDA(cudaGraphGetNodes(captured, nullptr, &count));
  EXPECT_APP(count == 2, "captured graph has %zu nodes", count);
  cudaGraphExec_t captured_exec;
  CHECK_CUDA(cudaGraphInstantiate(&captured_exec, captured, 0));
  for (int i = 0; i < 3; ++i) CHECK_CUDA(cudaGraphLaunch(captured_exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CopyBackAndCheck(dx, 33, "captured graph x3");

  // 2. Capture appended to an existing graph, after a node added by hand.
  cudaGraph_t into;
  CHECK_CUDA(cudaGraphCreate(&into, 0));
  cudaGraphNode_t first;
  CHECK_CUDA(cudaGraphAddMemsetNode(&first, into, nullptr, 0, [&] {
    static cudaMemsetParams mp = {};
    mp.dst = dz;
    mp.elementSize = sizeof(int);
    mp.width = kN;
    mp.height = 1;
    return &mp;
  }()));
  CHECK_CUDA(cudaStreamBeginCaptureToGraph(s, into, &first, nullptr, 1,
                                           cudaStreamCaptureModeGlobal));
  scale_into<<<kBlocks, 256, 0, s>>>(dx, dz, 2, kN);
  // Re-point the capture at the memset only (replacing the kernel as the
  // dependency): the next kernel then runs after the memset, beside scale_into.
  CHECK_CUDA(cudaStreamUpdateCaptureDependencies(s, &first, nullptr, 1,
                                                 cudaStreamSetCaptureDependencies));
  add_value<<<kBlocks, 256, 0, s>>>(dy, 0, kN);
  cudaGraph_t into_out;
  CHECK_CUDA(cudaStreamEndCapture(s, &into_out));
  EXPECT_APP(into_out == into, "capture to graph returned another graph");
  CHECK_CUDA(cudaGraphGetNodes(into, nullptr, &count));
  EXPECT_APP(count == 3, "graph captured into has %zu nodes, expected 3", count);
  cudaGraphExec_t into_exec;
  CHECK_CUDA(cudaGraphInstantiate(&into_exec, into, 0));
  CHECK_CUDA(cudaGraphLaunch(into_exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  CopyBackAndCheck(dz, 66, "capture into existing graph");

  // 3. Explicit graph with host node; parameters changed on the exec.
  HostCheck check{pinned, 1};
  cudaGraphNode_t kernel_node;
  cudaKernelNodeParams kp;
  cudaGraph_t g = BuildExplicit(dy, pinned, 1, &check, &kernel_node, &kp);
  CHECK_CUDA(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT_APP(count == 4, "explicit graph has %zu nodes", count);
  std::vector<cudaGraphNode_t> nodes(count);
  CHECK_CUDA(cudaGraphGetNodes(g, nodes.data(), &count));
  cudaGraph_t clone;
  CHECK_CUDA(cudaGraphClone(&clone, g));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(check.runs == 2 && check.failures == 0, "host node: %d runs, %d failures",
             check.runs, check.failures);

  int five = 5, n = kN;
  void* args5[] = {&dy, &five, &n};
  kp.kernelParams = args5;
  CHECK_CUDA(cudaGraphExecKernelNodeSetParams(exec, kernel_node, &kp));
  check.expected = 5;
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(check.runs == 3 && check.failures == 0, "after SetParams: %d runs, %d failures",
             check.runs, check.failures);

  // Whole-graph update from a graph of the same shape with another value.
  cudaGraphNode_t kernel_node7;
  cudaKernelNodeParams kp7;
  cudaGraph_t g7 = BuildExplicit(dy, pinned, 7, &check, &kernel_node7, &kp7);
  cudaGraphExecUpdateResultInfo info;
  CHECK_CUDA(cudaGraphExecUpdate(exec, g7, &info));
  EXPECT_APP(info.result == cudaGraphExecUpdateSuccess, "update result %d", info.result);
  check.expected = 7;
  CHECK_CUDA(cudaGraphLaunch(exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(check.runs == 4 && check.failures == 0, "after ExecUpdate: %d runs, %d failures",
             check.runs, check.failures);

  // The clone still adds 1.
  size_t clone_count = 0;
  CHECK_CUDA(cudaGraphGetNodes(clone, nullptr, &clone_count));
  EXPECT_APP(clone_count == 4, "clone has %zu nodes", clone_count);
  cudaGraphExec_t clone_exec;
  CHECK_CUDA(cudaGraphInstantiate(&clone_exec, clone, 0));
  check.expected = 1;
  CHECK_CUDA(cudaGraphLaunch(clone_exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  EXPECT_APP(check.runs == 5 && check.failures == 0, "clone: %d runs, %d failures",
             check.runs, check.failures);

  // 4. Generic cudaGraphAddNode, with graph-owned memory (alloc/free nodes).
  cudaGraph_t ga;
  CHECK_CUDA(cudaGraphCreate(&ga, 0));
  cudaMemAllocNodeParams ap = {};
  ap.poolProps.allocType = cudaMemAllocationTypePinned;
  ap.poolProps.location.type = cudaMemLocationTypeDevice;
  ap.poolProps.location.id = 0;
  ap.bytesize = kN * sizeof(int);
  cudaGraphNode_t alloc_node, scale_node, copy_node, free_node;
  CHECK_CUDA(cudaGraphAddMemAllocNode(&alloc_node, ga, nullptr, 0, &ap));
  int* scratch = static_cast<int*>(ap.dptr);
  EXPECT_APP(scratch != nullptr, "alloc node returned no address");
  int three = 3;
  void* sargs[] = {&dx, &scratch, &three, &n};
  cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeKernel;
  np.kernel.func = reinterpret_cast<void*>(scale_into);
  np.kernel.gridDim = dim3(kBlocks);
  np.kernel.blockDim = dim3(256);
  np.kernel.kernelParams = sargs;
  CHECK_CUDA(cudaGraphAddNode(&scale_node, ga, &alloc_node, nullptr, 1, &np));
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&copy_node, ga, &scale_node, 1, pinned, scratch,
                                      kN * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaGraphAddMemFreeNode(&free_node, ga, &copy_node, 1, scratch));
  cudaGraphExec_t ga_exec;
  CHECK_CUDA(cudaGraphInstantiate(&ga_exec, ga, 0));
  CHECK_CUDA(cudaGraphLaunch(ga_exec, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int i = 0; i < kN; ++i) {
    EXPECT_APP(pinned[i] == 99, "alloc graph: pinned[%d] = %d, expected 99", i, pinned[i]);
  }

  for (cudaGraphExec_t e : {captured_exec, into_exec, exec, clone_exec, ga_exec}) {
    CHECK_CUDA(cudaGraphExecDestroy(e));
  }
  for (cudaGraph_t gr : {captured, into, g, g7, clone, ga}) CHECK_CUDA(cudaGraphDestroy(gr));
  CHECK_CUDA(cudaFree(dx));
  CHECK_CUDA(cudaFree(dy));
  CHECK_CUDA(cudaFree(dz));
  CHECK_CUDA(cudaFreeHost(pinned));

  // 5. Capture status by cudaStreamIsCapturing before, during and after a
  // capture (the shim answers the first and last itself), and after a capture
  // ended in an error (ending a capture of a stream that is not capturing).
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_APP(status == cudaStreamCaptureStatusNone, "is-capturing before: %d", status);
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_APP(status == cudaStreamCaptureStatusActive, "is-capturing during: %d", status);
  cudaGraph_t empty;
  CHECK_CUDA(cudaStreamEndCapture(s, &empty));
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_APP(status == cudaStreamCaptureStatusNone, "is-capturing after: %d", status);
  cudaGraph_t none = nullptr;
  EXPECT_APP(cudaStreamEndCapture(s, &none) == cudaErrorIllegalState,
             "ending a capture that is not there");
  (void)cudaGetLastError();
  CHECK_CUDA(cudaStreamIsCapturing(s, &status));
  EXPECT_APP(status == cudaStreamCaptureStatusNone, "is-capturing after a bad end: %d", status);
  EXPECT_APP(cudaStreamIsCapturing(s, nullptr) == cudaErrorInvalidValue,
             "is-capturing without a status pointer");
  (void)cudaGetLastError();
  CHECK_CUDA(cudaGraphDestroy(empty));
  CHECK_CUDA(cudaStreamDestroy(s));
  std::printf("PASS graphs\n");
  return 0;
}
