// A fake of the CUDA runtime calls agent/backends/cuda/cuda_gloo.cc makes,
// for testing its staging, gates and recovery without a GPU (linked instead
// of libcudart into cuda_gloo_test only).
//
// Model: "device memory" is host memory; each stream runs its operations in
// order on a thread of its own; the legacy stream (0) is one more stream per
// device. As in CUDA, the host functions (cudaLaunchHostFunc) of one device
// (context) all run on one callback thread, so a host function that waits
// holds the host functions of every other stream of that device. Events order
// streams (cudaEventRecord / cudaStreamWaitEvent, cudaEventQuery). Memory
// (cudaMalloc, cudaMallocHost) is malloc; cudaHostRegister records the range
// (cudaHostUnregister of a range not registered fails); the device has no identity (no
// properties, no PCI bus id). Nothing else of CUDA is modelled. Also linked
// into cuda_nccl_fake_test, with testdata/fake_nccl.h.
#ifndef REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_CUDART_H_
#define REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_CUDART_H_

#include <cuda_runtime_api.h>

#include <functional>

namespace fake_cudart {

// Queues `op` on `stream` (of the calling thread's device), as a kernel.
void Enqueue(cudaStream_t stream, std::function<void()> op);
// Waits until `stream`'s queued work ran; false after `seconds`.
bool Synchronize(cudaStream_t stream, double seconds);
// Host functions run so far (all devices).
long HostFunctionsRun();
// While held, device-to-host copies (cudaMemcpyAsync of that kind) wait on
// their stream until released (at most 30 s each): a slow link.
void HoldHostCopies(bool hold);
// Device-to-host copies done so far (all devices).
long HostCopiesLanded();
// Host ranges registered (cudaHostRegister) and not unregistered yet.
long RegisteredHostRanges();

}  // namespace fake_cudart

#endif  // REVENANT_AGENT_BACKENDS_CUDA_TESTDATA_FAKE_CUDART_H_
