// The per-token rules of src/common/token_rules.hpp (SPEC.md section 2 steps 1-5 and the packed
// key of steps 7-8), against values worked out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "common/token_rules.hpp"

namespace {

using namespace sonic::detail;

constexpr float kInf = std::numeric_limits<float>::infinity();

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// An independent binary16 decoder written from the IEEE definition: value = (-1)^s * 2^(e-15) *
// (1 + m/1024) for 0 < e < 31, (-1)^s * 2^-14 * (m/1024) for e = 0, inf / NaN for e = 31.
double half_by_definition(uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double sign = s ? -1.0 : 1.0;
  if (e == 31)
    return m == 0 ? sign * std::numeric_limits<double>::infinity()
                  : std::numeric_limits<double>::quiet_NaN();
  if (e == 0) return sign * std::ldexp(static_cast<double>(m), -24);
  return sign * std::ldexp(static_cast<double>(1024 + m), e - 25);
}

// ---------------------------------------------------------------------------------------------
// Decoding
// ---------------------------------------------------------------------------------------------

TEST(TokenRules, Bf16Decoding) {
  // bf16 is the top half of a binary32.
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC000), -2.0f);
  EXPECT_EQ(bf16_to_float(0x4049), 3.140625f);  // 0x40490000: 1.5703125 * 2
  EXPECT_EQ(bf16_to_float(0x3F00), 0.5f);
  EXPECT_EQ(bf16_to_float(0xBE00), -0.125f);
  // Largest finite: 0x7F7F0000 = (2 - 2^-7) * 2^127.
  EXPECT_EQ(bf16_to_float(0x7F7F), static_cast<float>(std::ldexp(2.0 - std::ldexp(1.0, -7), 127)));
  // Smallest normal 2^-126 and the subnormals 0x0001 = 2^16 * 2^-149 = 2^-133, 0x007F =
  // 127 * 2^-133.
  EXPECT_EQ(bf16_to_float(0x0080), std::ldexp(1.0f, -126));
  EXPECT_EQ(bf16_to_float(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_to_float(0x007F), 127.0f * std::ldexp(1.0f, -133));
  EXPECT_EQ(bf16_to_float(0x8001), -std::ldexp(1.0f, -133));
  // Zeros keep their sign.
  EXPECT_EQ(bf16_to_float(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(bf16_to_float(0x0000)));
  EXPECT_EQ(bf16_to_float(0x8000), 0.0f);
  EXPECT_TRUE(std::signbit(bf16_to_float(0x8000)));
  // Infinities and NaNs.
  EXPECT_EQ(bf16_to_float(0x7F80), kInf);
  EXPECT_EQ(bf16_to_float(0xFF80), -kInf);
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7F81)));
  EXPECT_TRUE(std::isnan(bf16_to_float(0xFFC0)));
  // Every bf16 pattern is the binary32 with that top half.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = bf16_to_float(static_cast<uint16_t>(h));
    ASSERT_EQ(bits_of(f), h << 16) << "h = " << h;
  }
}

TEST(TokenRules, Fp16Decoding) {
  EXPECT_EQ(fp16_to_float(0x3C00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xC000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x3800), 0.5f);
  EXPECT_EQ(fp16_to_float(0x4180), 2.75f);                  // e = 16, m = 384: 1.375 * 2
  EXPECT_EQ(fp16_to_float(0xBD00), -1.25f);                 // e = 15, m = 256
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);        // e = 13, m = 341: 1365/1024 / 4
  EXPECT_EQ(fp16_to_float(0x7BFF), 65504.0f);               // largest finite: 2047 * 2^5
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  // Subnormals: m * 2^-24.
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x0002), std::ldexp(1.0f, -23));
  EXPECT_EQ(fp16_to_float(0x0200), std::ldexp(1.0f, -15));
  EXPECT_EQ(fp16_to_float(0x03FF), 1023.0f * std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16_to_float(0x8155), -341.0f * std::ldexp(1.0f, -24));
  // Zeros keep their sign.
  EXPECT_EQ(fp16_to_float(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(fp16_to_float(0x0000)));
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_EQ(fp16_to_float(0x8000), 0.0f);
  // Infinities and NaNs (quiet and signalling).
  EXPECT_EQ(fp16_to_float(0x7C00), kInf);
  EXPECT_EQ(fp16_to_float(0xFC00), -kInf);
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7C01)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0xFFFF)));
  // All 65536 patterns against the definition.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_float(static_cast<uint16_t>(h));
    const double want = half_by_definition(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << "h = " << h;
    } else {
      ASSERT_EQ(static_cast<double>(f), want) << "h = " << h;
      ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << "h = " << h;
    }
  }
}

TEST(TokenRules, LoadLogitPerDtype) {
  const float f32[3] = {1.5f, -kInf, 7.25f};
  const uint16_t b16[3] = {0x3FC0, 0xFF80, 0x40E8};  // 1.5, -inf, 7.25 (0x40E80000)
  const uint16_t h16[3] = {0x3E00, 0xFC00, 0x4740};  // 1.5, -inf, 7.25 (e = 17, m = 832)
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(load_logit(f32, sonic::DType::kF32, i), f32[i]);
    EXPECT_EQ(load_logit(b16, sonic::DType::kBF16, i), f32[i]);
    EXPECT_EQ(load_logit(h16, sonic::DType::kF16, i), f32[i]);
  }
}

TEST(TokenRules, BitmaskAllows) {
  // Bit j of word w allows token 32 w + j; bit 31 is the int32 sign bit.
  const int32_t words[2] = {static_cast<int32_t>(0x80000025u), 0x2};
  // Word 0 = 0x80000025: bits 0, 2, 5, 31. Word 1 = 0x2: bit 1 -> token 33.
  for (int32_t t = 0; t < 64; ++t) {
    const bool want = t == 0 || t == 2 || t == 5 || t == 31 || t == 33;
    EXPECT_EQ(bitmask_allows(words, t), want) << "t = " << t;
  }
}

// ---------------------------------------------------------------------------------------------
// adjust_logit: steps 2-4.
// ---------------------------------------------------------------------------------------------

TEST(TokenRules, AdjustLogitBias) {
  const Penalties none{};
  EXPECT_EQ(adjust_logit(1.5f, 0.25f, false, 0, none), 1.75f);
  EXPECT_EQ(adjust_logit(1.5f, -4.0f, false, 0, none), -2.5f);
  EXPECT_EQ(adjust_logit(-kInf, 3.0f, false, 0, none), -kInf);
  EXPECT_EQ(adjust_logit(kInf, -3.0f, false, 0, none), kInf);
  // Neutral penalties leave x alone even when the token is in scope and counted.
  EXPECT_EQ(adjust_logit(2.0f, 0.0f, true, 5, none), 2.0f);
}

TEST(TokenRules, AdjustLogitRepetition) {
  Penalties pen{};
  pen.repetition = 2.0f;
  // x > 0 is divided, x <= 0 multiplied.
  EXPECT_EQ(adjust_logit(3.0f, 0.0f, true, 0, pen), 1.5f);
  EXPECT_EQ(adjust_logit(-3.0f, 0.0f, true, 0, pen), -6.0f);
  EXPECT_EQ(adjust_logit(0.0f, 0.0f, true, 0, pen), 0.0f);
  EXPECT_EQ(adjust_logit(kInf, 0.0f, true, 0, pen), kInf);
  EXPECT_EQ(adjust_logit(-kInf, 0.0f, true, 0, pen), -kInf);
  // Out of scope: untouched.
  EXPECT_EQ(adjust_logit(3.0f, 0.0f, false, 0, pen), 3.0f);
  EXPECT_EQ(adjust_logit(-3.0f, 0.0f, false, 0, pen), -3.0f);
  // The bias comes first: 1 + (-2) = -1 <= 0, so it is multiplied: -2 (dividing would give -0.5).
  EXPECT_EQ(adjust_logit(1.0f, -2.0f, true, 0, pen), -2.0f);
  // A penalty below 1 boosts: 3 / 0.5 = 6, -3 * 0.5 = -1.5.
  pen.repetition = 0.5f;
  EXPECT_EQ(adjust_logit(3.0f, 0.0f, true, 0, pen), 6.0f);
  EXPECT_EQ(adjust_logit(-3.0f, 0.0f, true, 0, pen), -1.5f);
  // One fp32 division: 1 / 3 rounds to 0.333333343f.
  pen.repetition = 3.0f;
  EXPECT_EQ(adjust_logit(1.0f, 0.0f, true, 0, pen), 1.0f / 3.0f);
}

TEST(TokenRules, AdjustLogitFrequencyPresence) {
  Penalties pen{};
  pen.frequency = 0.5f;
  pen.presence = 1.0f;
  // 5 - 0.5 * 3 - 1 = 2.5
  EXPECT_EQ(adjust_logit(5.0f, 0.0f, false, 3, pen), 2.5f);
  // count 0: no change at all (presence needs c > 0).
  EXPECT_EQ(adjust_logit(5.0f, 0.0f, false, 0, pen), 5.0f);
  // count 1: 5 - 0.5 - 1 = 3.5
  EXPECT_EQ(adjust_logit(5.0f, 0.0f, false, 1, pen), 3.5f);
  // Negative penalties reward: 5 - (-1) * 2 - (-0.25) = 7.25
  pen.frequency = -1.0f;
  pen.presence = -0.25f;
  EXPECT_EQ(adjust_logit(5.0f, 0.0f, false, 2, pen), 7.25f);
  // All three: 4 + 2 = 6 (bias), 6 / 1.5 = 4 (repetition), 4 - 0.25 * 2 = 3.5, 3.5 - 1 = 2.5.
  Penalties all{};
  all.repetition = 1.5f;
  all.frequency = 0.25f;
  all.presence = 1.0f;
  EXPECT_EQ(adjust_logit(4.0f, 2.0f, true, 2, all), 2.5f);
  // Negative branch: -1 + 0 = -1, * 1.5 = -1.5, - 0.25 * 2 = -2, - 1 = -3.
  EXPECT_EQ(adjust_logit(-1.0f, 0.0f, true, 2, all), -3.0f);
}

TEST(TokenRules, AdjustLogitRoundsEachStep) {
  // x - phi * c with phi * c rounded to fp32 first (no FMA): phi = 0.1f, c = 3:
  // 0.1f * 3 rounds once, then the subtraction rounds again.
  Penalties pen{};
  pen.frequency = 0.1f;
  volatile float phi = 0.1f, three = 3.0f, x = 1.0f;
  const float product = phi * three;
  const float want = x - product;
  EXPECT_EQ(adjust_logit(1.0f, 0.0f, false, 3, pen), want);
}

TEST(TokenRules, AdjustLogitNaNBecomesNegInf) {
  // +inf - inf: phi * c overflows to +inf (3e38 * 2 > FLT_MAX), +inf - inf = NaN -> -inf.
  Penalties pen{};
  pen.frequency = 3e38f;
  const float r = adjust_logit(kInf, 0.0f, false, 2, pen);
  EXPECT_TRUE(std::isinf(r));
  EXPECT_LT(r, 0.0f);
  // +inf - presence inf.
  Penalties pres{};
  pres.presence = kInf;
  const float r2 = adjust_logit(kInf, 0.0f, false, 1, pres);
  EXPECT_TRUE(std::isinf(r2));
  EXPECT_LT(r2, 0.0f);
  // A finite x with the same overflow is just -inf (no NaN involved).
  EXPECT_EQ(adjust_logit(1.0f, 0.0f, false, 2, pen), -kInf);
}

TEST(TokenRules, Temperature) {
  EXPECT_EQ(apply_temperature(3.0f, 0.5f), 6.0f);
  EXPECT_EQ(apply_temperature(-3.0f, 2.0f), -1.5f);
  EXPECT_EQ(apply_temperature(1.0f, 3.0f), 1.0f / 3.0f);  // one rounding: 0.333333343f
  EXPECT_EQ(apply_temperature(1.0f, 3.0f), 0.333333343f);
  EXPECT_EQ(apply_temperature(kInf, 0.7f), kInf);
  EXPECT_EQ(apply_temperature(-kInf, 0.7f), -kInf);
  EXPECT_EQ(apply_temperature(2.0f, 1e-5f), 2.0f / 1e-5f);
}

// ---------------------------------------------------------------------------------------------
// pack_key: the total order (z descending, id ascending) as one integer, larger first.
// ---------------------------------------------------------------------------------------------

TEST(TokenRules, PackKeyOrder) {
  // Larger z first.
  EXPECT_GT(pack_key(2.0f, 5), pack_key(1.0f, 0));
  EXPECT_GT(pack_key(1.0f, 1000), pack_key(0.5f, 0));
  EXPECT_GT(pack_key(-1.0f, 9), pack_key(-2.0f, 0));
  EXPECT_GT(pack_key(0.0f, 9), pack_key(-1.0f, 0));
  // Ties: lower id first.
  EXPECT_GT(pack_key(1.0f, 3), pack_key(1.0f, 4));
  EXPECT_GT(pack_key(-7.5f, 0), pack_key(-7.5f, 2147483647));
  // -0 == +0: same key for the same id, and the id decides between them.
  EXPECT_EQ(pack_key(-0.0f, 7), pack_key(0.0f, 7));
  EXPECT_GT(pack_key(-0.0f, 1), pack_key(0.0f, 2));
  EXPECT_GT(pack_key(0.0f, 1), pack_key(-0.0f, 2));
  // Subnormals around zero.
  const float tiny = std::numeric_limits<float>::denorm_min();
  EXPECT_GT(pack_key(tiny, 5), pack_key(0.0f, 0));
  EXPECT_GT(pack_key(0.0f, 5), pack_key(-tiny, 0));
  // Infinities at the ends.
  const float big = std::numeric_limits<float>::max();
  EXPECT_GT(pack_key(kInf, 100000), pack_key(big, 0));
  EXPECT_LT(pack_key(-kInf, 0), pack_key(-big, 100000));
  EXPECT_LT(pack_key(-kInf, 0), pack_key(0.0f, 2147483647));
  EXPECT_GT(pack_key(-kInf, 0), pack_key(-kInf, 1));
}

TEST(TokenRules, PackKeySortsLikeTheTotalOrder) {
  // Sorting keys descending gives: by value descending, then id ascending. Worked by hand:
  //   (3, id 5) (2, 1) (2, 2) (2, 4) (1, 0) (+0/-0: 3, 6) (-1, 7) (-inf, 8)
  const std::vector<std::pair<float, int32_t>> items = {{1.0f, 0},  {2.0f, 4},  {2.0f, 1},
                                                        {-0.0f, 6}, {-1.0f, 7}, {3.0f, 5},
                                                        {-kInf, 8}, {0.0f, 3},  {2.0f, 2}};
  std::vector<uint64_t> keys;
  for (const auto& it : items) keys.push_back(pack_key(it.first, it.second));
  std::sort(keys.begin(), keys.end(), [](uint64_t a, uint64_t b) { return a > b; });
  const std::vector<int32_t> want = {5, 1, 2, 4, 0, 3, 6, 7, 8};
  ASSERT_EQ(keys.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(key_token(keys[i]), want[i]) << "i = " << i;
}

TEST(TokenRules, PackKeyRoundTrip) {
  const float values[] = {0.0f,
                          1.0f,
                          -1.0f,
                          3.14159274f,
                          -2.5e-3f,
                          1e30f,
                          -1e30f,
                          std::numeric_limits<float>::denorm_min(),
                          -std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          kInf,
                          -kInf};
  const int32_t ids[] = {0, 1, 31, 151935, 2147483647};
  for (float v : values) {
    for (int32_t id : ids) {
      const uint64_t k = pack_key(v, id);
      EXPECT_EQ(bits_of(key_value(k)), bits_of(v)) << v << " " << id;
      EXPECT_EQ(key_token(k), id) << v << " " << id;
    }
  }
  // -0 comes back as +0 (the key merges them).
  EXPECT_EQ(key_value(pack_key(-0.0f, 3)), 0.0f);
  EXPECT_EQ(key_token(pack_key(-0.0f, 3)), 3);
  // order_bits is monotone over a sweep of floats: every 4099th bit pattern of the negatives
  // (descending bits = ascending values), then of the positives.
  uint32_t prev_bits = order_bits(-kInf);
  for (uint64_t b = 0xFF800000ull; b >= 0x80000000ull; b -= 4099) {
    const uint32_t k = order_bits(bits_to_float(static_cast<uint32_t>(b)));
    ASSERT_GE(k, prev_bits) << b;
    prev_bits = k;
  }
  for (uint64_t b = 0; b <= 0x7F800000ull; b += 4099) {
    const uint32_t k = order_bits(bits_to_float(static_cast<uint32_t>(b)));
    ASSERT_GE(k, prev_bits) << b;
    prev_bits = k;
  }
  EXPECT_GT(order_bits(kInf), prev_bits);
  // The least finite value's high word, just above -inf's; below that the values are NaNs.
  EXPECT_EQ(order_bits(-std::numeric_limits<float>::max()), kLeastFiniteOrderBits);
  EXPECT_EQ(order_bits(-kInf), kLeastFiniteOrderBits - 1u);
  EXPECT_TRUE(std::isnan(order_bits_to_float(kLeastFiniteOrderBits - 2u)));
}

// ---------------------------------------------------------------------------------------------
// The top-p sum margin's budget
// ---------------------------------------------------------------------------------------------

// The mass-weighted mean of |e| (e = z - zm) over a row of V tokens with its maximum at e = 0 is
// largest when the other V - 1 sit at one depth E (docs/design-exact-top-p.md); its largest value
// over E, found here on a fine grid.
double worst_mean_depth(double V) {
  double worst = 0.0;
  for (double E = 0.0; E <= 40.0; E += 1e-3) {
    const double w = (V - 1.0) * std::exp(-E);
    worst = std::max(worst, w * E / (1.0 + w));
  }
  return worst;
}

// top_p_sum_margin's budget in units of 2^-24, a term: the z roundings 2 |zm| + |e|, stage 1's
// exponent 4 |e| + 0.7, ex2.approx's 4, with the mass-weighted |e| at most 10; and 20 for the fp32
// summation. The margin must cover it at every |zm| the fast path settles, for every vocabulary
// the CUDA backend takes (kMaxVocab = 2^18: cuda_backend.cu asserts it).
TEST(TopPSumMargin, CoversItsBudget) {
  constexpr double kVocabLimit = 262144.0;
  const double depth = worst_mean_depth(kVocabLimit);
  EXPECT_NEAR(depth, 9.25, 0.05);  // the design doc's E* - 1 at 2^18
  EXPECT_LT(worst_mean_depth(151936.0), 8.9);
  ASSERT_LE(depth, 10.0) << "the budget counts a mass-weighted |e| of at most 10";
  const double u = 0x1p-24;
  for (const float zm : {0.0f, 0.5f, 1.0f, 18.0f, 100.0f, 1024.0f, 65536.0f, 2.9e6f, -18.0f, -1024.0f}) {
    const double budget = (2.0 * std::fabs(zm) + 5.0 * 10.0 + 4.7 + 20.0) * u;
    // A product of n roundings (1 + d), |d| <= u, lies within expm1(n u) of 1: the margin without
    // its 1e-6 on top must reach that, not only the first-order n u.
    EXPECT_GE(top_p_sum_margin(zm) - 1e-6, std::expm1(budget)) << "zm = " << zm;
    // and it is no wider than the budget and its stated slack (1e-6 and 1.3 units, checked to
    // 1.5), which the rows it flags pay for.
    EXPECT_LE(top_p_sum_margin(zm), 1e-6 + std::expm1(budget + 1.5 * u)) << "zm = " << zm;
  }
}

}  // namespace
