// Kernels of cuda_backend_gpu_test, compiled to a fat binary the test loads
// through CudaBackend::LoadModule.
extern "C" __global__ void fill_u32(unsigned int* out, unsigned int n, unsigned int value,
                                    unsigned char add_index) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value + (add_index ? i : 0u);
}

// Order-sensitive updates: a sequence of launches of these leaves a result
// that tells whether every launch ran, once, in its order.
extern "C" __global__ void affine_u32(unsigned int* x, unsigned int n, unsigned int mul,
                                      unsigned int add) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * mul + add;
}
extern "C" __global__ void xor_add_u32(unsigned int* x, unsigned int n, unsigned int mask,
                                       unsigned int add) {
  unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = (x[i] ^ mask) + add;
}
