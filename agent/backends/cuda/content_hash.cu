// The device's ContentHash (common/content_hash.h): the hash of a held
// upload's destination, computed behind the upload on its stream
// (CudaBackend::MemcpyHeld). Compiled to PTX at build time and loaded by
// the agent with cuModuleLoadData (content_hash_ptx.h).
//
// Each thread sums the mixed words of a grid stride; a block's sum goes
// into scratch[0], and the last block to finish (scratch[1] counts them)
// writes the finished hash to out[0] (host memory mapped for the device)
// and resets the scratch for the next hash on this slot. The stream then
// writes the tag into out[1] (cuStreamWriteValue64), after the kernel. A
// large upload is hashed in pieces, each behind its part of the copy, so
// that the hash runs beside the copy's rest (revenant_content_hash_piece).

#define REVENANT_STEP 0x9e3779b97f4a7c15ull
#define REVENANT_SEED 0x632be59bd9b4e019ull

__device__ __forceinline__ unsigned long long RevenantMix(unsigned long long z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// The sum over the words of [p, p + n) (word i of the piece is word
// first_word + i of the whole range), a block's sum added into scratch[0],
// the blocks counted in scratch[1]. The grid's last block resets the count
// and, where finish_n is not 0 (the range's last piece, finish_n bytes in
// all), writes the finished hash to out[0] and resets the sum.
__device__ __forceinline__ void RevenantHashPiece(const unsigned char* p, unsigned long long n,
                                                  unsigned long long first_word,
                                                  unsigned long long* scratch,
                                                  unsigned long long* out,
                                                  unsigned long long finish_n) {
  const unsigned long long words = (n + 7) / 8;
  const bool aligned = (reinterpret_cast<unsigned long long>(p) & 7) == 0;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  unsigned long long sum = 0;
  for (unsigned long long i = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += stride) {
    unsigned long long w = 0;
    if (aligned && (i + 1) * 8 <= n) {
      w = reinterpret_cast<const unsigned long long*>(p)[i];
    } else {
      for (unsigned long long b = 0; b < 8 && i * 8 + b < n; ++b) {
        w |= static_cast<unsigned long long>(p[i * 8 + b]) << (8 * b);
      }
    }
    sum += RevenantMix(w ^ ((first_word + i) * REVENANT_STEP + REVENANT_SEED));
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  __shared__ unsigned long long warp_sums[32];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) warp_sums[warp] = sum;
  __syncthreads();
  if (warp != 0) return;
  sum = lane < (blockDim.x + 31) / 32 ? warp_sums[lane] : 0;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, o);
  if (lane != 0) return;
  atomicAdd(&scratch[0], sum);
  __threadfence();
  if (atomicAdd(&scratch[1], 1ull) != gridDim.x - 1) return;
  scratch[1] = 0;
  if (finish_n == 0) return;  // a piece before the last: the sum stays
  const unsigned long long total = atomicAdd(&scratch[0], 0ull);
  *reinterpret_cast<volatile unsigned long long*>(out) = RevenantMix(total ^ (finish_n * REVENANT_STEP));
  __threadfence_system();
  scratch[0] = 0;
}

// The whole range in one launch.
extern "C" __global__ void revenant_content_hash(const unsigned char* p, unsigned long long n,
                                                 unsigned long long* scratch,
                                                 unsigned long long* out) {
  RevenantHashPiece(p, n, 0, scratch, out, n);
}

// One piece of a range hashed in pieces, in order on one stream
// (CudaBackend::MemcpyHeld: each piece behind its part of the copy).
extern "C" __global__ void revenant_content_hash_piece(const unsigned char* p, unsigned long long n,
                                                       unsigned long long first_word,
                                                       unsigned long long* scratch,
                                                       unsigned long long* out,
                                                       unsigned long long finish_n) {
  RevenantHashPiece(p, n, first_word, scratch, out, finish_n);
}
