// Kernels of cuda_backend_gpu_test, compiled to a fat binary the test loads
// through CudaBackend::LoadModule.
extern "C" __global__ void fill_u32(unsigned int* out, unsigned int n, unsigned int value,
                                    unsigned char add_index) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + (add_index ? i : 0u);
}
