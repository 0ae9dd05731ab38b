// A token's Gumbel noise on the device (Philox keyed on seed, step, purpose and token, as the
// reference draws it), exact in double or fast in fp32, and the bounds that let a screen with the
// fast noise stand in for the exact noise without changing the token. Used by stage 2's draw, the
// exact kernel and verification.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/random.hpp"

namespace sonic::cuda {

// Gumbel noise of token t, in double as the reference draws it.
__device__ inline double gumbel_exact(uint64_t seed, uint64_t step, uint32_t purpose, int32_t t) {
  return detail::gumbel_from_uniform_exact(
      detail::uniform_from_word(detail::random_word(seed, step, purpose, static_cast<uint32_t>(t))));
}
// The same noise in fp32 with fast logarithms (within 2^-18 of gumbel_exact's): the screens that
// leave out tokens that cannot win.
__device__ __forceinline__ float gumbel_fast(uint64_t seed, uint64_t step, uint32_t purpose, int32_t t) {
  return detail::gumbel_from_uniform_fast(
      detail::uniform_from_word(detail::random_word(seed, step, purpose, static_cast<uint32_t>(t))));
}
// |gumbel_from_uniform_fast - gumbel_from_uniform_exact| <= ulp(G) / 2 + 2^-20 < 2^-18 for every
// uniform (G < 23; SharedRulesDevice checks all 2^32 words): 2^-16 leaves room for the double adds.
constexpr double kFastNoiseSlack = 1.0 / 65536.0;
// The least score z + G that a key scored with the fast noise (the add in double) must reach to
// possibly tie or beat, under the exact noise, a key whose fast score is `best`: each key's two
// scores differ by at most kFastNoiseSlack plus the adds' roundings, |score| 2^-53 each (taken at
// |best| with a factor of two to spare). A key below it loses to `best`'s key under either noise.
__device__ __forceinline__ double fast_noise_reach(double best) {
  return best - (2.0 * kFastNoiseSlack + fabs(best) * 0x1p-51);
}
// How near a fast score s must come to the best fast score m of the keys before it for the row's
// draw to need the exact noise (write_prefix_winners' screen): at least best - fast_noise_reach(best)
// for any best within it of m (|best| <= |m| + that, so |m| 2^-50 covers best's 2^-51 whenever |m|
// is above 2^-38, and 2^-40 covers it below), with room for the subtraction's rounding.
__device__ __forceinline__ double fast_noise_near(double m) {
  return fma(fabs(m), 0x1p-50, 2.0 * kFastNoiseSlack + 0x1p-40);
}

}  // namespace sonic::cuda
