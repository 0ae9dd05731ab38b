// The per-token rules of SPEC.md section 2, steps 1-5, and the packed sort key: one definition for
// the CPU reference, the CUDA kernels and the fused LM-head epilogue.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "hd.hpp"
#include "sonic/types.hpp"

namespace sonic::detail {

SONIC_HD float bits_to_float(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
#endif
}

SONIC_HD uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return bits;
#endif
}

SONIC_HD float neg_inf() { return bits_to_float(0xFF800000u); }
SONIC_HD float pos_inf() { return bits_to_float(0x7F800000u); }

SONIC_HD float bf16_to_float(uint16_t h) { return bits_to_float(static_cast<uint32_t>(h) << 16); }

// IEEE binary16 -> binary32, exact (every half is a float), subnormals and NaN included.
SONIC_HD float fp16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t man = h & 0x3FFu;
  if (exp == 0x1Fu) return bits_to_float(sign | 0x7F800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return bits_to_float(sign);
    exp = 1;  // subnormal: normalise
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --exp;
    }
    man &= 0x3FFu;
    return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
  }
  return bits_to_float(sign | ((exp + 112u) << 23) | (man << 13));
}

SONIC_HD float load_logit(const void* row, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(row)[i]);
    case DType::kF16:
      return fp16_to_float(static_cast<const uint16_t*>(row)[i]);
    case DType::kF32:
    default:
      return static_cast<const float*>(row)[i];
  }
}

SONIC_HD bool is_nan(float x) { return x != x; }

// Step 1 for the grammar bitmask: bit (t % 32) of word t / 32.
SONIC_HD bool bitmask_allows(const int32_t* mask_row, int32_t t) {
  return (static_cast<uint32_t>(mask_row[t >> 5]) >> (t & 31)) & 1u;
}

// Penalty parameters of one request (steps 3-4).
struct Penalties {
  float repetition = 1.0f;
  float frequency = 0.0f;
  float presence = 0.0f;
};

// Steps 2-4 for one unmasked token. x: the logit after step 1 (NaN already -inf).
// in_repetition_scope: the token occurs in the repetition scope; count: its occurrences in the
// counting scope. A NaN the arithmetic makes (inf - inf) becomes -inf like an input NaN.
SONIC_HD float adjust_logit(float x, float bias, bool in_repetition_scope, int32_t count,
                            const Penalties& pen) {
  x = add_rn(x, bias);
  if (in_repetition_scope && pen.repetition != 1.0f)
    x = x > 0.0f ? div_rn(x, pen.repetition) : mul_rn(x, pen.repetition);
  if (count > 0) {
    x = sub_rn(x, mul_rn(pen.frequency, static_cast<float>(count)));
    x = sub_rn(x, pen.presence);
  }
  return is_nan(x) ? neg_inf() : x;
}

// Step 5.
SONIC_HD float apply_temperature(float x, float temperature) { return div_rn(x, temperature); }

// Step 7 cuts only for 0 < top_k < V: a top_k of at most 0 or of at least V is disabled (SPEC's table).
SONIC_HD bool top_k_cuts(int32_t top_k, int32_t vocab_size) { return top_k > 0 && top_k < vocab_size; }

// Monotone map of a float to an unsigned key (larger float, larger key); -0 and +0 are equal.
SONIC_HD uint32_t order_bits(float z) {
  if (z == 0.0f) z = 0.0f;
  const uint32_t b = float_to_bits(z);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

SONIC_HD float order_bits_to_float(uint32_t k) {
  return bits_to_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}
// order_bits(-FLT_MAX), the least of a finite value. Below it lie -inf's (one less) and the negative
// NaNs': a bound on keys there has no finite value to compare logits with.
constexpr uint32_t kLeastFiniteOrderBits = 0x00800000u;

// The relative error stage 2's fast top-p decision allows stage 1's total mass (an fp32 sum of
// exp((x - x_max) / T)) against the reference's (a double sum over z = x / T rounded): decide_kept
// settles a row only where the crossing stays put over it, so that the token cannot depend on the
// sum's order, which follows the batch size (perf-notes v3.31, v3.32; bench/sum_error_model.cpp
// measures it against adversarial rows).
// In 2^-24 units, a term: the z roundings 2 |zm| + |e| (e = z - zm), stage 1's exponent 4 |e| + 0.7
// (c = log2(e) / T's three roundings and the FFMA's of x c - k, stage1_chunk.cuh's ExpSum) and
// ex2.approx's documented 2 ulp, 4, where the mass-weighted |e| stays below about 10 (at most
// 9.3 for V <= 262144: the worst rows put every token but one at a single depth); the fp32
// summation at most about 20 (7 in the largest term's partial, 2 joining the partials, 3 the
// compensated lane sum and its join, 5 the warp tree, 3 the block's adds; every rescale exact, a
// power of two, and the chunks' merge in double): 2 |zm| + 75 of 2 |zm| + 76 (|zm| + 38 since
// perf-notes v3.38; + 44 before, whose budget had no exact rescales), and 16.8 more (the 1e-6). The
// model's worst: 10.9 units (the sea row, as before: its maximum is 0, so k = 0; the rising rows 10.5).
SONIC_HD double top_p_sum_margin(float zm) {
  return 1e-6 + expm1((fabs(static_cast<double>(zm)) + 38.0) * 0x1p-23);
}

// The total order of steps 7-8 as one integer: z descending, then token id ascending. A larger
// key comes first. Keeps the full fp32 value (a truncated key would change the kept set).
SONIC_HD uint64_t pack_key(float z, int32_t id) {
  return (static_cast<uint64_t>(order_bits(z)) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(id));
}
SONIC_HD float key_value(uint64_t key) { return order_bits_to_float(static_cast<uint32_t>(key >> 32)); }
SONIC_HD int32_t key_token(uint64_t key) {
  return static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(key));
}

}  // namespace sonic::detail
