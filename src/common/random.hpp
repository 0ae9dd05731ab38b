// The randomness contract of SPEC.md section 4: which Philox counter each draw uses, how a word
// becomes a uniform, and how a uniform becomes Gumbel noise.
#pragma once

#include <cmath>
#include <cstdint>

#include "hd.hpp"
#include "philox.hpp"

namespace sonic::detail {

// kind << 16 | position (SPEC.md section 4).
enum class Draw : uint32_t { kSampling = 0, kAcceptance = 1, kCorrection = 2 };

SONIC_HD uint32_t purpose(Draw kind, uint32_t position) {
  return (static_cast<uint32_t>(kind) << 16) | position;
}

// The block of four words that holds tokens 4*block .. 4*block+3.
SONIC_HD Philox4 random_block(uint64_t seed, uint64_t step, uint32_t purpose_word,
                              uint32_t block) {
  return philox4x32_10(block, static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                       purpose_word, static_cast<uint32_t>(seed),
                       static_cast<uint32_t>(seed >> 32));
}

SONIC_HD uint32_t random_word(uint64_t seed, uint64_t step, uint32_t purpose_word, uint32_t t) {
  const Philox4 b = random_block(seed, step, purpose_word, t >> 2);
#if defined(__CUDA_ARCH__)
  // Selects: an index into the block puts it in local memory, a store and a dependent load on the
  // noise's chain (row_stage2's 16-byte stack frame).
  const uint32_t lo = (t & 1u) ? b.v[1] : b.v[0], hi = (t & 1u) ? b.v[3] : b.v[2];
  return (t & 2u) ? hi : lo;
#else
  return b.v[t & 3u];
#endif
}

// v = min((float(w) + 0.5) * 2^-32, 1 - 2^-24) in fp32, round to nearest: v in [2^-33, 1 - 2^-24].
SONIC_HD float uniform_from_word(uint32_t w) {
#if defined(__CUDA_ARCH__)
  const float v = __fmul_rn(__fadd_rn(__uint2float_rn(w), 0.5f), 2.3283064365386963e-10f);
#else
  const float v = (static_cast<float>(w) + 0.5f) * 2.3283064365386963e-10f;
#endif
  constexpr float kMaxUniform = 0.99999994039535522f;  // 1 - 2^-24
  return v < kMaxUniform ? v : kMaxUniform;
}

// G = -log(-log1p(-v)), evaluated in double: the reference value that every faster evaluation
// must stay within 2^-20 of.
SONIC_HD double gumbel_from_uniform_exact(float v) {
  return -::log(-::log1p(-static_cast<double>(v)));
}

// G within about 2^-20 of gumbel_from_uniform_exact, in fp32 with the hardware's fast log2 where it
// is accurate (MUFU.LG2: 2^-22 absolute on [0.5, 2], 2 ulp elsewhere):
//   L = -log1p(-v): for v < 0.5 the series 2 atanh(s), s = v / (2 - v) <= 1/3, to s^13 (rel. 2^-26);
//                   for v >= 0.5, -log(1 - v) with 1 - v exact (Sterbenz) and |log2| >= 1;
//   G = -log(L):    L = m 2^e with m in [sqrt(1/2), sqrt(2)), so log2(m) stays in the accurate range.
// The host (which never takes this path in the reference) evaluates the exact formula.
SONIC_HD float gumbel_from_uniform_fast(float v) {
#if defined(__CUDA_ARCH__)
  constexpr float kLn2 = 0.69314718055994531f;
  float L;
  if (v < 0.5f) {
    const float s = __fdividef(v, 2.0f - v);
    const float s2 = s * s;
    float poly = fmaf(s2, 1.0f / 13.0f, 1.0f / 11.0f);
    poly = fmaf(s2, poly, 1.0f / 9.0f);
    poly = fmaf(s2, poly, 1.0f / 7.0f);
    poly = fmaf(s2, poly, 1.0f / 5.0f);
    poly = fmaf(s2, poly, 1.0f / 3.0f);
    poly = fmaf(s2, poly, 1.0f);
    L = 2.0f * s * poly;
  } else {
    L = -__log2f(1.0f - v) * kLn2;
  }
  const int bits = __float_as_int(L);
  int e = (bits >> 23) - 127;
  float m = __int_as_float((bits & 0x007FFFFF) | 0x3F800000);
  if (m > 1.41421356f) {
    m *= 0.5f;
    e += 1;
  }
  constexpr float kLn2Hi = 0.693145751953125f;        // few bits: e * kLn2Hi is exact
  constexpr float kLn2Lo = 1.42860682030941723e-06f;  // ln 2 - kLn2Hi
  const float e_f = static_cast<float>(e);
  const float ln_l = fmaf(e_f, kLn2Hi, fmaf(e_f, kLn2Lo, __log2f(m) * kLn2));
  return -ln_l;
#else
  return static_cast<float>(gumbel_from_uniform_exact(v));
#endif
}

}  // namespace sonic::detail
