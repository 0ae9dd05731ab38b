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

// 32-bit integers through the warp-wide reduction instruction (REDUX, sm_80 on): one instruction
// where the butterfly is five dependent shuffles, on paths (stage 2's merge, the ends of stage 1's
// chunks, its top-k bisection) that are chains of such steps. 64-bit maxima as two of them: the
// largest high word, then the largest low word among the lanes that hold it.
__device__ __forceinline__ int32_t warp_sum(int32_t v) { return __reduce_add_sync(0xFFFFFFFFu, v); }
__device__ __forceinline__ uint32_t warp_sum(uint32_t v) { return __reduce_add_sync(0xFFFFFFFFu, v); }
__device__ __forceinline__ int32_t warp_max(int32_t v) { return __reduce_max_sync(0xFFFFFFFFu, v); }
__device__ __forceinline__ uint32_t warp_max(uint32_t v) { return __reduce_max_sync(0xFFFFFFFFu, v); }
__device__ __forceinline__ unsigned long long warp_max(unsigned long long v) {
  const uint32_t hi = __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(v >> 32));
  const uint32_t lo = __reduce_max_sync(0xFFFFFFFFu, static_cast<uint32_t>(v >> 32) == hi ? static_cast<uint32_t>(v) : 0u);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}

// Inclusive prefix sum over the lanes (lane l gets the sum of lanes 0..l).
template <class T>
__device__ __forceinline__ T warp_inclusive_sum(T v) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T u = __shfl_up_sync(0xFFFFFFFFu, v, o);
    if (lane >= o) v += u;
  }
  return v;
}

}  // namespace sonic::cuda
