// One block's pass over a row, with the row's loads in flight together. A loop that loads one value
// a thread and then uses it waits a full memory latency per iteration: a block alone on a row of
// 151936 tokens makes 297 such round trips a pass (about 0.5 us each from HBM), which made the exact
// kernels' passes latency-bound (the top-k kernel's two passes took ~240 us). Here each thread
// evaluates U values first (independent loads, issued back to back), then hands them to the body in
// order, so a pass costs about n / (Block * U) round trips.
#pragma once

#include <cstdint>

namespace sonic::cuda {

// For t in [0, n) in rounds of Block * U: value_of(t) for the thread's U ids t = base + j * Block +
// threadIdx.x, then body(t, value) for each, both unrolled. Every thread calls body the same number
// of times (ids at or past n get `none`), so body may use warp-wide collectives; it must skip those
// ids itself. For cheap bodies (compares, counts, shared atomics): a body with double-precision exp
// or log would be inlined U times. (Tried for the exact sampler's passes, with such bodies in a
// rolled loop behind a select chain: its top-p rows, FP64-bound, went 8 % slower.)
template <int Block, int U, class T, class ValueFn, class BodyFn>
__device__ __forceinline__ void block_pass(int32_t n, T none, ValueFn value_of, BodyFn body) {
  for (int32_t base = 0; base < n; base += Block * U) {
    T v[U];
#pragma unroll
    for (int j = 0; j < U; ++j) {
      const int32_t t = base + j * Block + static_cast<int32_t>(threadIdx.x);
      v[j] = t < n ? value_of(t) : none;
    }
#pragma unroll
    for (int j = 0; j < U; ++j) body(base + j * Block + static_cast<int32_t>(threadIdx.x), v[j]);
  }
}

}  // namespace sonic::cuda
