// Butterfly reductions over the 32 lanes of a warp (every lane gets the result).
#pragma once

#include <cstdint>

namespace sonic::cuda {

template <class T, class Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_reduce(v, [](T a, T b) { return a + b; });
}

// Integer maxima; floats through fmaxf (NaN never wins).
template <class T>
__device__ __forceinline__ T warp_max(T v) {
  return warp_reduce(v, [](T a, T b) { return max(a, b); });
}
__device__ __forceinline__ float warp_max(float v) {
  return warp_reduce(v, [](float a, float b) { return fmaxf(a, b); });
}

}  // namespace sonic::cuda
