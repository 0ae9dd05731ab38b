// How stage 1 reads a tile of logits. Each lane owns 32 tokens in 16-byte vectors (LaneLayout), so
// that one warp-wide vector load covers 512 contiguous bytes, and all 8 (fp32) or 4 (16-bit) loads
// of a lane are in flight at once.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/row_job.cuh"

namespace sonic::cuda {

// Where a lane's 32 logits lie: 16-byte loads of W tokens, load c of lane l at warp_base + c*32*W + l*W.
// Register i holds token token(i); registers run in increasing token order.
template <DType D>
struct LaneLayout {
  static constexpr int kElem = D == DType::kF32 ? 4 : 2;
  static constexpr int kWidth = 16 / kElem;
  static constexpr int kLoads = kLaneTokens / kWidth;
  __device__ static __forceinline__ int32_t token(int32_t warp_base, int lane, int i) {
    return warp_base + (i / kWidth) * (32 * kWidth) + lane * kWidth + (i % kWidth);
  }
};

template <DType D>
__device__ __forceinline__ float decode_half(uint32_t h) {
  if constexpr (D == DType::kBF16) return __uint_as_float(h << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

template <DType D>
__device__ __forceinline__ void decode_vector(const uint4& v, float* x) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    if constexpr (D == DType::kF32) {
      x[j] = __uint_as_float(w[j]);
    } else {
      x[2 * j] = decode_half<D>(w[j] & 0xFFFFu);
      x[2 * j + 1] = decode_half<D>(w[j] >> 16);
    }
  }
}

template <DType D>
__device__ __forceinline__ float load_one(const void* row, int32_t t) {
  if constexpr (D == DType::kF32) return __ldcs(static_cast<const float*>(row) + t);
  else return decode_half<D>(__ldcs(static_cast<const unsigned short*>(row) + t));
}

// This thread's logits straight from global memory (16-byte streaming loads where the row is
// aligned), -inf past V; NaN is kept for the caller to flag.
template <DType D>
__device__ __forceinline__ void load_lane(const void* row, int32_t warp_base, int32_t V, float (&x)[kLaneTokens]) {
  using L = LaneLayout<D>;
  const int lane = threadIdx.x & 31;
  const bool vec_ok = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
#pragma unroll
  for (int c = 0; c < L::kLoads; ++c) {
    const int32_t t0 = L::token(warp_base, lane, c * L::kWidth);
    if (vec_ok && t0 + L::kWidth <= V) {
      decode_vector<D>(__ldcs(reinterpret_cast<const uint4*>(static_cast<const char*>(row) + static_cast<int64_t>(t0) * L::kElem)),
                       x + c * L::kWidth);
    } else {
#pragma unroll
      for (int j = 0; j < L::kWidth; ++j) x[c * L::kWidth + j] = t0 + j < V ? load_one<D>(row, t0 + j) : -INFINITY;
    }
  }
}

}  // namespace sonic::cuda
