// Kernels of the remoting integration tests (compiled by nvcc and, for the
// host backend, by g++ into libremoting_host_kernels.so).
#pragma once

// Waits until the host sets *flag (mapped pinned memory) or `max_polls`
// polls passed, then records whether it saw the flag. A launch that returned
// only after the kernel ran could never see the flag the host sets after the
// launch returns.
__global__ void wait_for_flag(volatile int* flag, int* saw_flag, long long max_polls) {
  long long polls = 0;
  while (*flag == 0 && polls < max_polls) ++polls;
  *saw_flag = (*flag != 0) ? 1 : 0;
}

__global__ void add_one(int* data, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += 1;
}

// acc[i] = acc[i] * 31 + in[i] for every i < n: a grid-stride loop, so that
// the host backend runs few simulated threads for a large buffer.
__global__ void fold_upload(unsigned* acc, const unsigned* in, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    acc[i] = acc[i] * 31u + in[i];
  }
}

// out[i] = in[i] for every i < n (grid-stride): the device writing a buffer
// through its mapped pointer.
__global__ void copy_back(unsigned* out, const unsigned* in, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = in[i];
  }
}

// (*where)[i] = in[i] ^ 0x5a5a5a5a for every i < n (grid-stride): the device
// writing host memory through a pointer it finds in device memory, not in
// its parameters (a write the agent cannot see coming).
__global__ void scribble_via(unsigned* const* where, const unsigned* in, int n) {
  unsigned* out = *where;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    out[i] = in[i] ^ 0x5a5a5a5au;
  }
}
