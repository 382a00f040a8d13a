// Synchronizations and queries the shim answers itself, when their answer is
// already known (docs/design.md, "Answered in the shim").
//
// The agent executes requests in the order of the request ring (their seq).
// When a synchronization of a stream returned success and no request was
// published after it, the stream has no pending work: everything queued on
// it before was complete when the agent answered, and nothing can have been
// queued since (every enqueue is a request). So until the next request:
//   - cudaStreamSynchronize / cudaStreamQuery of that stream succeed at once;
//   - after a cudaDeviceSynchronize, the same holds for every stream;
//   - an event recorded on such a stream (the record being the only request
//     since) is complete, and cudaEventQuery / cudaEventSynchronize of it
//     succeed at once until it is recorded again.
// Anything else goes to the agent, as before. Streams 0 (legacy),
// cudaStreamLegacy and cudaStreamPerThread count per thread (a per-thread
// default stream is another stream on each thread); events count only when
// this process created them with cudaEventDisableTiming and without
// cudaEventInterprocess (cudaEventElapsedTime needs a timing event's record
// to have run in the agent; another process may record an IPC event). An asynchronous error of earlier work that
// surfaces on the device between a confirming reply and a locally answered
// call is reported by the next call that reaches the agent (CUDA documents
// that a synchronization "may" return such errors).
//
// All functions are thread-safe and never block on the agent.
#ifndef REVENANT_SHIM_IDLE_H_
#define REVENANT_SHIM_IDLE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace revenant {
namespace shim {

// True when `stream` is known to have no pending work.
bool StreamKnownIdle(cudaStream_t stream);
// True when every stream is known to have no pending work.
bool DeviceKnownIdle();
// True when `event` is known to be complete.
bool EventKnownComplete(cudaEvent_t event);

// After the agent's success for the request `seq`:
// cudaStreamSynchronize / cudaStreamQuery of `stream`,
void NoteStreamIdle(cudaStream_t stream, uint64_t seq);
// cudaDeviceSynchronize,
void NoteDeviceIdle(uint64_t seq);
// Whether cudaEventCreate(WithFlags) of `flags` goes without waiting, with
// an id the shim assigns (the assign_if of its rows): REVENANT_SHIM_ANSWERS
// is on, the agent has answered a runtime call (the device is up) and the
// flags are ones every device takes (no interprocess event: its IPC handle
// is the agent's). Other flags wait for the agent's answer (invalid ones:
// cudaErrorInvalidValue from the agent, as natively).
bool AssignEvent(unsigned int flags);
// cudaEventCreate(WithFlags) (`flags`; 0 for cudaEventCreate),
void NoteEventCreated(cudaEvent_t event, unsigned int flags);
// cudaEventSynchronize / cudaEventQuery,
void NoteEventComplete(cudaEvent_t event, uint64_t seq);
// cudaEventDestroy.
void ForgetEvent(cudaEvent_t event);
// After publishing cudaEventRecord(WithFlags) of `event` on `stream` as the
// request `seq` (asynchronous: no reply is awaited).
void NoteEventRecorded(cudaEvent_t event, cudaStream_t stream, uint64_t seq);

// How many calls were answered here (REVENANT_CALL_STATS prints it).
uint64_t IdleAnswers();

}  // namespace shim
}  // namespace revenant

#endif  // REVENANT_SHIM_IDLE_H_
