// Warp-wide reductions (all 32 lanes active): every lane gets the sum / maximum, combined in a fixed butterfly order.
#pragma once
#include <cuda_runtime.h>

namespace gl::cuda {

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace gl::cuda
