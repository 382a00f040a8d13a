// graph_nodes: graph memcpy nodes as programs write them -- cudaGraphAddMemcpyNode
// with cudaMemcpy3DParms for a 1D copy and for whole rows, cudaGraphAddNode
// with a memcpy node, cudaGraphAddMemcpyNode1D, a memset node -- and
// stream-ordered allocation inside stream capture (cudaMallocAsync and
// cudaFreeAsync captured as memory nodes). A training-like loop (one input
// upload per step, a kernel, both graphs launched) is checked exactly
// against a host reference and its checksum printed, so a recovered run can
// be compared bitwise. A strided 2D memcpy node passes natively; under
// Revenant it is refused with cudaErrorNotSupported (not supported yet).
//
// Then the other node types, in a second loop: a graph that waits for an
// event recorded on another stream (an event wait node, cudaGraphAddNode's
// form), records an event another stream waits for (cudaGraphAddEventRecordNode),
// and runs two child graphs (cudaGraphAddChildGraphNode, and cudaGraphAddNode's
// form; a node added to the child afterwards must not reach the parent's
// copy); and a while loop (cudaGraphConditionalHandleCreate with a default
// value, a conditional node whose body graph is populated afterwards, a
// kernel setting the condition with cudaGraphSetConditional) running a
// per-step number of iterations read from device memory. A backend that
// refuses conditional nodes (cudaErrorNotSupported at the handle's creation)
// makes the program run the rest without the loop and say so.
//
//   graph_nodes [--iters N]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tests/apps/app_check.h"
#include "tests/apps/graph_nodes_kernels.cuh"

namespace {

uint64_t Fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

cudaMemcpy3DParms Copy1D(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  cudaMemcpy3DParms p = {};
  p.srcPtr = make_cudaPitchedPtr(const_cast<void*>(src), bytes, bytes, 1);
  p.dstPtr = make_cudaPitchedPtr(dst, bytes, bytes, 1);
  p.extent = make_cudaExtent(bytes, 1, 1);
  p.kind = kind;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  int iters = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--iters") == 0) iters = std::atoi(argv[i + 1]);
  }
  const bool under_revenant = std::getenv("REVENANT_AGENT_SOCKET") != nullptr;
  std::printf("graph_nodes: %d iterations\n", iters);
  CHECK_CUDA(cudaSetDevice(0));
  const int n = 1024, rows = 4;
  const size_t bytes = n * sizeof(float);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *hx = nullptr, *hout = nullptr;
  int* hz = nullptr;
  CHECK_CUDA(cudaMallocHost(&hx, bytes));
  CHECK_CUDA(cudaMallocHost(&hout, bytes));
  CHECK_CUDA(cudaMallocHost(&hz, n * sizeof(int)));
  for (int j = 0; j < n; ++j) hx[j] = static_cast<float>(j % 7);
  float *dx, *dw, *dy, *dstep, *dcap;
  int* dz;
  CHECK_CUDA(cudaMalloc(&dx, bytes));
  CHECK_CUDA(cudaMalloc(&dw, bytes));
  CHECK_CUDA(cudaMalloc(&dy, bytes));
  CHECK_CUDA(cudaMalloc(&dstep, bytes));
  CHECK_CUDA(cudaMalloc(&dcap, bytes));
  CHECK_CUDA(cudaMalloc(&dz, n * sizeof(int)));
  CHECK_CUDA(cudaMemsetAsync(dy, 0, bytes, s));

  // The explicit graph.
  cudaGraph_t g;
  CHECK_CUDA(cudaGraphCreate(&g, 0));
  cudaGraphNode_t n1, n2, n3, n4, n5, n6;
  cudaMemcpy3DParms c1 = Copy1D(dx, hx, bytes, cudaMemcpyHostToDevice);
  CHECK_CUDA(cudaGraphAddMemcpyNode(&n1, g, nullptr, 0, &c1));
  cudaMemcpy3DParms c2 = {};  // whole rows: 4 rows of n/4 floats, no gaps
  c2.srcPtr = make_cudaPitchedPtr(dx, bytes / rows, bytes / rows, rows);
  c2.dstPtr = make_cudaPitchedPtr(dw, bytes / rows, bytes / rows, rows);
  c2.extent = make_cudaExtent(bytes / rows, rows, 1);
  c2.kind = cudaMemcpyDeviceToDevice;
  CHECK_CUDA(cudaGraphAddMemcpyNode(&n2, g, &n1, 1, &c2));
  float a = 0.5f;
  int nn = n;
  void* kargs[] = {&a, &dw, &dy, &nn};
  cudaKernelNodeParams kp = {};
  kp.func = reinterpret_cast<void*>(axpy);
  kp.gridDim = dim3((n + 255) / 256);
  kp.blockDim = dim3(256);
  kp.kernelParams = kargs;
  CHECK_CUDA(cudaGraphAddKernelNode(&n3, g, &n2, 1, &kp));
  cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeMemcpy;
  np.memcpy.copyParams = Copy1D(hout, dy, bytes, cudaMemcpyDeviceToHost);
  CHECK_CUDA(cudaGraphAddNode(&n4, g, &n3, nullptr, 1, &np));
  cudaMemsetParams mp = {};
  mp.dst = dz;
  mp.value = 7;
  mp.elementSize = sizeof(int);
  mp.width = n;
  mp.height = 1;
  CHECK_CUDA(cudaGraphAddMemsetNode(&n5, g, nullptr, 0, &mp));
  CHECK_CUDA(cudaGraphAddMemcpyNode1D(&n6, g, &n5, 1, hz, dz, n * sizeof(int),
                                      cudaMemcpyDeviceToHost));
  size_t count = 0;
  CHECK_CUDA(cudaGraphGetNodes(g, nullptr, &count));
  EXPECT_APP(count == 6, "the graph has %zu nodes", count);
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));

  // The captured graph: scratch memory allocated and freed inside it.
  cudaStream_t cs;
  CHECK_CUDA(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  cudaGraph_t cg;
  float* tmp = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
  CHECK_CUDA(cudaMallocAsync(&tmp, bytes, cs));
  plus_one<<<(n + 255) / 256, 256, 0, cs>>>(dy, tmp, n);
  CHECK_CUDA(cudaMemcpyAsync(dcap, tmp, bytes, cudaMemcpyDeviceToDevice, cs));
  CHECK_CUDA(cudaFreeAsync(tmp, cs));
  CHECK_CUDA(cudaStreamEndCapture(cs, &cg));
  EXPECT_APP(tmp != nullptr, "cudaMallocAsync in capture gave no address");
  count = 0;
  CHECK_CUDA(cudaGraphGetNodes(cg, nullptr, &count));
  EXPECT_APP(count == 4, "the captured graph has %zu nodes", count);
  cudaGraphExec_t cexec;
  CHECK_CUDA(cudaGraphInstantiate(&cexec, cg, 0));

  std::vector<float> in(n), ref(n, 0.0f), cap(n);
  for (int step = 0; step < iters; ++step) {
    for (int j = 0; j < n; ++j) in[j] = static_cast<float>((step * 3 + j) % 5) - 2.0f;
    // The step's input (pageable: copied before the call returns).
    CHECK_CUDA(cudaMemcpyAsync(dstep, in.data(), bytes, cudaMemcpyHostToDevice, s));
    float one = 1.0f;
    axpy<<<(n + 255) / 256, 256, 0, s>>>(one, dstep, dy, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaGraphLaunch(cexec, s));
    CHECK_CUDA(cudaMemcpyAsync(cap.data(), dcap, bytes, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int j = 0; j < n; ++j) {
      ref[j] += in[j] + 0.5f * static_cast<float>(j % 7);
      EXPECT_APP(hout[j] == ref[j], "step %d: hout[%d] = %g, expected %g", step, j, hout[j], ref[j]);
      EXPECT_APP(cap[j] == ref[j] + 1.0f, "step %d: captured graph's out[%d] = %g, expected %g",
                 step, j, cap[j], ref[j] + 1.0f);
      EXPECT_APP(hz[j] == 7, "step %d: memset node's hz[%d] = %d", step, j, hz[j]);
    }
  }
  const uint64_t memcpy_nodes_sum = Fnv1a(hout, bytes);

  // Positions and depth: the second half of dw (a source position) into the
  // first half of dcap, and dw as 2 slices of 2 whole rows into dx.
  {
    cudaGraph_t g4;
    cudaGraphNode_t a4, b4;
    CHECK_CUDA(cudaGraphCreate(&g4, 0));
    cudaMemcpy3DParms half = {};
    half.srcPtr = make_cudaPitchedPtr(dw, bytes, bytes, 1);
    half.srcPos = make_cudaPos(bytes / 2, 0, 0);
    half.dstPtr = make_cudaPitchedPtr(dcap, bytes, bytes, 1);
    half.extent = make_cudaExtent(bytes / 2, 1, 1);
    half.kind = cudaMemcpyDeviceToDevice;
    CHECK_CUDA(cudaGraphAddMemcpyNode(&a4, g4, nullptr, 0, &half));
    cudaMemcpy3DParms slices = {};
    slices.srcPtr = make_cudaPitchedPtr(dw, bytes / rows, bytes / rows, 2);
    slices.dstPtr = make_cudaPitchedPtr(dx, bytes / rows, bytes / rows, 2);
    slices.extent = make_cudaExtent(bytes / rows, 2, rows / 2);
    slices.kind = cudaMemcpyDeviceToDevice;
    CHECK_CUDA(cudaGraphAddMemcpyNode(&b4, g4, &a4, 1, &slices));
    CHECK_CUDA(cudaMemsetAsync(dx, 0, bytes, s));
    cudaGraphExec_t e4;
    CHECK_CUDA(cudaGraphInstantiate(&e4, g4, 0));
    CHECK_CUDA(cudaGraphLaunch(e4, s));
    std::vector<float> w(n), got_cap(n), got_x(n);
    CHECK_CUDA(cudaMemcpyAsync(w.data(), dw, bytes, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(got_cap.data(), dcap, bytes, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(got_x.data(), dx, bytes, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int j = 0; j < n / 2; ++j) {
      EXPECT_APP(got_cap[j] == w[n / 2 + j], "positioned copy: dcap[%d] = %g, expected %g", j,
                 got_cap[j], w[n / 2 + j]);
    }
    for (int j = 0; j < n; ++j) {
      EXPECT_APP(got_x[j] == w[j], "slices copy: dx[%d] = %g, expected %g", j, got_x[j], w[j]);
    }
    CHECK_CUDA(cudaGraphExecDestroy(e4));
    CHECK_CUDA(cudaGraphDestroy(g4));
  }

  // A strided 2D copy node: every other row of dw into dx.
  cudaMemcpy3DParms c3 = {};
  c3.srcPtr = make_cudaPitchedPtr(dw, 2 * (bytes / rows), bytes / rows, rows / 2);
  c3.dstPtr = make_cudaPitchedPtr(dx, bytes / rows, bytes / rows, rows / 2);
  c3.extent = make_cudaExtent(bytes / rows, rows / 2, 1);
  c3.kind = cudaMemcpyDeviceToDevice;
  cudaGraph_t g3;
  cudaGraphNode_t n7;
  CHECK_CUDA(cudaGraphCreate(&g3, 0));
  if (under_revenant) {
    EXPECT_CUDA_ERROR(cudaGraphAddMemcpyNode(&n7, g3, nullptr, 0, &c3), cudaErrorNotSupported);
    (void)cudaGetLastError();
  } else {
    CHECK_CUDA(cudaGraphAddMemcpyNode(&n7, g3, nullptr, 0, &c3));
  }
  CHECK_CUDA(cudaGraphDestroy(g3));

  // --- Child graphs, event nodes, a while loop ---------------------------------------
  const int blocks = (n + 255) / 256;
  int *dv, *dacc, *dout, *dsum, *dsnap, *dloop, *diter, *dlimit;
  for (int** p : {&dv, &dacc, &dout, &dsum, &dsnap, &dloop}) {
    CHECK_CUDA(cudaMalloc(p, n * sizeof(int)));
  }
  CHECK_CUDA(cudaMalloc(&diter, sizeof(int)));
  CHECK_CUDA(cudaMalloc(&dlimit, sizeof(int)));
  for (int* p : {dacc, dsum, dloop}) CHECK_CUDA(cudaMemsetAsync(p, 0, n * sizeof(int), s));
  cudaStream_t s2;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t ev_in, ev_acc;  // the input is ready; acc is updated
  CHECK_CUDA(cudaEventCreateWithFlags(&ev_in, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&ev_acc, cudaEventDisableTiming));

  // child: out = 3 * acc + 1; child2: sum += out.
  cudaGraph_t child, child2, pg;
  CHECK_CUDA(cudaGraphCreate(&child, 0));
  CHECK_CUDA(cudaGraphCreate(&child2, 0));
  CHECK_CUDA(cudaGraphCreate(&pg, 0));
  cudaGraphNode_t ck, ck2;
  {
    int nn2 = n;
    void* a1[] = {&dacc, &dout, &nn2};
    cudaKernelNodeParams k1 = {};
    k1.func = reinterpret_cast<void*>(triple_plus);
    k1.gridDim = dim3(blocks);
    k1.blockDim = dim3(256);
    k1.kernelParams = a1;
    CHECK_CUDA(cudaGraphAddKernelNode(&ck, child, nullptr, 0, &k1));
    void* a2[] = {&dsum, &dout, &nn2};
    cudaKernelNodeParams k2 = k1;
    k2.func = reinterpret_cast<void*>(add_into);
    k2.kernelParams = a2;
    CHECK_CUDA(cudaGraphAddKernelNode(&ck2, child2, nullptr, 0, &k2));
  }
  // The parent: wait for the input -> acc += v -> record ev_acc -> child -> child2.
  cudaGraphNode_t pw, pk, pr, pc, pc2;
  cudaGraphNodeParams wp = {};
  wp.type = cudaGraphNodeTypeWaitEvent;
  wp.eventWait.event = ev_in;
  CHECK_CUDA(cudaGraphAddNode(&pw, pg, nullptr, nullptr, 0, &wp));
  {
    int nn2 = n;
    void* a[] = {&dacc, &dv, &nn2};
    cudaKernelNodeParams k = {};
    k.func = reinterpret_cast<void*>(add_into);
    k.gridDim = dim3(blocks);
    k.blockDim = dim3(256);
    k.kernelParams = a;
    CHECK_CUDA(cudaGraphAddKernelNode(&pk, pg, &pw, 1, &k));
  }
  CHECK_CUDA(cudaGraphAddEventRecordNode(&pr, pg, &pk, 1, ev_acc));
  CHECK_CUDA(cudaGraphAddChildGraphNode(&pc, pg, &pr, 1, child));
  cudaGraphNodeParams cp = {};
  cp.type = cudaGraphNodeTypeGraph;
  cp.graph.graph = child2;
  CHECK_CUDA(cudaGraphAddNode(&pc2, pg, &pc, nullptr, 1, &cp));
  // The parent holds a copy: this node (zeroing out) must never run there.
  {
    cudaMemsetParams z = {};
    z.dst = dout;
    z.value = 0;
    z.elementSize = sizeof(int);
    z.width = n;
    z.height = 1;
    cudaGraphNode_t late;
    CHECK_CUDA(cudaGraphAddMemsetNode(&late, child, &ck, 1, &z));
  }
  count = 0;
  CHECK_CUDA(cudaGraphGetNodes(pg, nullptr, &count));
  EXPECT_APP(count == 5, "the parent graph has %zu nodes", count);
  cudaGraphExec_t pexec;
  CHECK_CUDA(cudaGraphInstantiate(&pexec, pg, 0));

  // The while loop: iter = 0, then the body (loop += acc % 7; ++iter; go on
  // while iter < limit) runs `limit` times, the default value 1 starting it.
  cudaGraph_t wg;
  CHECK_CUDA(cudaGraphCreate(&wg, 0));
  cudaGraphConditionalHandle cond = 0;
  const cudaError_t ce = cudaGraphConditionalHandleCreate(&cond, wg, 1, cudaGraphCondAssignDefault);
  const bool loops = ce == cudaSuccess;
  cudaGraphExec_t wexec = nullptr;
  if (loops) {
    cudaGraphNode_t m0, wn, b1, b2;
    cudaMemsetParams z = {};
    z.dst = diter;
    z.value = 0;
    z.elementSize = sizeof(int);
    z.width = 1;
    z.height = 1;
    CHECK_CUDA(cudaGraphAddMemsetNode(&m0, wg, nullptr, 0, &z));
    cudaGraphNodeParams wl = {};
    wl.type = cudaGraphNodeTypeConditional;
    wl.conditional.handle = cond;
    wl.conditional.type = cudaGraphCondTypeWhile;
    wl.conditional.size = 1;
    CHECK_CUDA(cudaGraphAddNode(&wn, wg, &m0, nullptr, 1, &wl));
    EXPECT_APP(wl.conditional.phGraph_out != nullptr && wl.conditional.phGraph_out[0] != nullptr,
               "the while node has no body graph");
    cudaGraph_t body = wl.conditional.phGraph_out[0];
    int nn2 = n;
    void* a1[] = {&dloop, &dacc, &nn2};
    cudaKernelNodeParams k1 = {};
    k1.func = reinterpret_cast<void*>(loop_add);
    k1.gridDim = dim3(blocks);
    k1.blockDim = dim3(256);
    k1.kernelParams = a1;
    CHECK_CUDA(cudaGraphAddKernelNode(&b1, body, nullptr, 0, &k1));
    void* a2[] = {&cond, &diter, &dlimit};
    cudaKernelNodeParams k2 = {};
    k2.func = reinterpret_cast<void*>(loop_step);
    k2.gridDim = dim3(1);
    k2.blockDim = dim3(1);
    k2.kernelParams = a2;
    CHECK_CUDA(cudaGraphAddKernelNode(&b2, body, &b1, 1, &k2));
    count = 0;
    CHECK_CUDA(cudaGraphGetNodes(body, nullptr, &count));
    EXPECT_APP(count == 2, "the loop body has %zu nodes", count);
    CHECK_CUDA(cudaGraphInstantiate(&wexec, wg, 0));
    std::printf("conditional nodes: a while loop\n");
  } else {
    EXPECT_APP(ce == cudaErrorNotSupported && under_revenant,
               "cudaGraphConditionalHandleCreate: %s", cudaGetErrorName(ce));
    EXPECT_APP(cudaGetLastError() == cudaErrorNotSupported, "the refusal is the last error");
    std::printf("conditional nodes: refused by this backend, the loop is left out\n");
  }

  std::vector<int> acc_ref(n, 0), sum_ref(n, 0), loop_ref(n, 0);
  std::vector<int> acc(n), out(n), sum(n), snap(n), loopx(n);
  for (int step = 0; step < iters; ++step) {
    fill_step<<<blocks, 256, 0, s2>>>(dv, step, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaEventRecord(ev_in, s2));
    const int limit = 1 + step % 3;
    CHECK_CUDA(cudaMemcpyAsync(dlimit, &limit, sizeof(int), cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaGraphLaunch(pexec, s));
    // acc as the graph's event record left it.
    CHECK_CUDA(cudaStreamWaitEvent(s2, ev_acc, 0));
    copy_int<<<blocks, 256, 0, s2>>>(dacc, dsnap, n);
    CHECK_CUDA(cudaGetLastError());
    if (loops) CHECK_CUDA(cudaGraphLaunch(wexec, s));
    CHECK_CUDA(cudaMemcpyAsync(acc.data(), dacc, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(out.data(), dout, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(sum.data(), dsum, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(loopx.data(), dloop, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUDA(cudaMemcpyAsync(snap.data(), dsnap, n * sizeof(int), cudaMemcpyDeviceToHost, s2));
    CHECK_CUDA(cudaStreamSynchronize(s2));
    for (int j = 0; j < n; ++j) {
      acc_ref[j] += (j * 7 + step) % 11 - 5;
      sum_ref[j] += 3 * acc_ref[j] + 1;
      if (loops) loop_ref[j] += (acc_ref[j] % 7) * limit;
      EXPECT_APP(acc[j] == acc_ref[j], "step %d: acc[%d] = %d, expected %d (event wait node?)",
                 step, j, acc[j], acc_ref[j]);
      EXPECT_APP(snap[j] == acc_ref[j], "step %d: snapshot[%d] = %d, expected %d (event record "
                 "node?)", step, j, snap[j], acc_ref[j]);
      EXPECT_APP(out[j] == 3 * acc_ref[j] + 1, "step %d: child graph's out[%d] = %d, expected %d",
                 step, j, out[j], 3 * acc_ref[j] + 1);
      EXPECT_APP(sum[j] == sum_ref[j], "step %d: second child graph's sum[%d] = %d, expected %d",
                 step, j, sum[j], sum_ref[j]);
      EXPECT_APP(loopx[j] == loop_ref[j], "step %d: while loop's x[%d] = %d, expected %d", step,
                 j, loopx[j], loop_ref[j]);
    }
  }
  int iterations = -1;
  if (loops) {
    CHECK_CUDA(cudaMemcpy(&iterations, diter, sizeof(int), cudaMemcpyDeviceToHost));
    EXPECT_APP(iterations == 1 + (iters - 1) % 3, "the last loop ran %d iterations", iterations);
  }
  uint64_t h = memcpy_nodes_sum;
  for (const std::vector<int>* v : {&acc, &out, &sum, &loopx}) {
    h = (h * 1099511628211ull) ^ Fnv1a(v->data(), v->size() * sizeof(int));
  }
  std::printf("final checksum %016llx\n", static_cast<unsigned long long>(h));
  if (wexec != nullptr) CHECK_CUDA(cudaGraphExecDestroy(wexec));
  CHECK_CUDA(cudaGraphDestroy(wg));
  CHECK_CUDA(cudaGraphExecDestroy(pexec));
  for (cudaGraph_t g5 : {pg, child, child2}) CHECK_CUDA(cudaGraphDestroy(g5));
  CHECK_CUDA(cudaEventDestroy(ev_in));
  CHECK_CUDA(cudaEventDestroy(ev_acc));
  CHECK_CUDA(cudaStreamDestroy(s2));
  for (int* p : {dv, dacc, dout, dsum, dsnap, dloop, diter, dlimit}) CHECK_CUDA(cudaFree(p));

  CHECK_CUDA(cudaGraphExecDestroy(cexec));
  CHECK_CUDA(cudaGraphDestroy(cg));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphDestroy(g));
  CHECK_CUDA(cudaStreamDestroy(cs));
  CHECK_CUDA(cudaStreamDestroy(s));
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dw), static_cast<void*>(dy),
                  static_cast<void*>(dstep), static_cast<void*>(dcap), static_cast<void*>(dz)}) {
    CHECK_CUDA(cudaFree(p));
  }
  CHECK_CUDA(cudaFreeHost(hx));
  CHECK_CUDA(cudaFreeHost(hout));
  CHECK_CUDA(cudaFreeHost(hz));
  std::printf("PASS graph_nodes\n");
  return 0;
}
