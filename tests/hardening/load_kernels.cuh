// Kernels of the load test (compiled by nvcc and, for the host backend, by
// g++ into libload_host_kernels.so). One thread each: the checks are about
// the order and count of requests, not about parallel work.
#pragma once

// Step `seq` of one application thread's sequence: the previous step must be
// seq - 1 and the marker byte (set by the cudaMemsetAsync just before this
// launch) must hold seq's low byte; a request lost, duplicated or reordered
// breaks one of them. hist[seq] counts how often step seq ran.
__global__ void seq_step(int* state, int* hist, const unsigned char* marker, int* errors,
                         int seq) {
  if (*state != seq - 1) errors[0] += 1;
  if (*marker != static_cast<unsigned char>(seq & 0xff)) errors[1] += 1;
  *state = seq;
  hist[seq] += 1;
}
