// Philox4x32-10 and the randomness contract of SPEC.md section 4, checked against values worked
// out by hand (and the Random123 known-answer vectors), never against the implementation itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/philox.hpp"
#include "common/random.hpp"

namespace {

using sonic::detail::Draw;
using sonic::detail::gumbel_from_uniform_exact;
using sonic::detail::philox4x32_10;
using sonic::detail::purpose;
using sonic::detail::random_block;
using sonic::detail::random_word;
using sonic::detail::uniform_from_word;

void expect_block(const sonic::detail::Philox4& got, uint32_t a, uint32_t b, uint32_t c,
                  uint32_t d) {
  EXPECT_EQ(got.v[0], a);
  EXPECT_EQ(got.v[1], b);
  EXPECT_EQ(got.v[2], c);
  EXPECT_EQ(got.v[3], d);
}

// ---------------------------------------------------------------------------------------------
// Philox: the three known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
// ---------------------------------------------------------------------------------------------

TEST(Philox, KnownAnswerZero) {
  // counter (0,0,0,0), key (0,0) -> 6627e8d5 e169c58d bc57ac4c 9b00dbd8
  expect_block(philox4x32_10(0, 0, 0, 0, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
}

TEST(Philox, KnownAnswerAllOnes) {
  // counter (ffffffff x4), key (ffffffff, ffffffff) -> 408f276d 41c83b0e a20bc7c6 6d5451fd
  const uint32_t f = 0xffffffffu;
  expect_block(philox4x32_10(f, f, f, f, f, f), 0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
}

TEST(Philox, KnownAnswerPi) {
  // counter (243f6a88 85a308d3 13198a2e 03707344), key (a4093822 299f31d0)
  //   -> d16cfe09 94fdcceb 5001e420 24126ea1
  expect_block(
      philox4x32_10(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u),
      0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, DifferentCountersGiveDifferentBlocks) {
  // Sanity: one bit of counter or key changes the block (a broken round function that ignored an
  // input word would pass the vectors above only by accident; this pins each input word).
  const auto base = philox4x32_10(1, 2, 3, 4, 5, 6);
  const sonic::detail::Philox4 variants[] = {
      philox4x32_10(0, 2, 3, 4, 5, 6), philox4x32_10(1, 3, 3, 4, 5, 6),
      philox4x32_10(1, 2, 2, 4, 5, 6), philox4x32_10(1, 2, 3, 5, 5, 6),
      philox4x32_10(1, 2, 3, 4, 4, 6), philox4x32_10(1, 2, 3, 4, 5, 7)};
  for (const auto& v : variants) {
    const bool same =
        v.v[0] == base.v[0] && v.v[1] == base.v[1] && v.v[2] == base.v[2] && v.v[3] == base.v[3];
    EXPECT_FALSE(same);
  }
}

// ---------------------------------------------------------------------------------------------
// Randomness: the counter layout, purposes, uniforms and Gumbel noise of SPEC.md section 4.
// ---------------------------------------------------------------------------------------------

TEST(Randomness, PurposeWord) {
  // purpose = kind << 16 | position; kinds: 0 sampling, 1 acceptance, 2 correction.
  EXPECT_EQ(purpose(Draw::kSampling, 0), 0x00000000u);
  EXPECT_EQ(purpose(Draw::kSampling, 7), 0x00000007u);
  EXPECT_EQ(purpose(Draw::kAcceptance, 0), 0x00010000u);
  EXPECT_EQ(purpose(Draw::kAcceptance, 3), 0x00010003u);
  EXPECT_EQ(purpose(Draw::kCorrection, 0), 0x00020000u);
  EXPECT_EQ(purpose(Draw::kCorrection, 0xFFFF), 0x0002FFFFu);
  EXPECT_EQ(static_cast<uint32_t>(Draw::kSampling), 0u);
  EXPECT_EQ(static_cast<uint32_t>(Draw::kAcceptance), 1u);
  EXPECT_EQ(static_cast<uint32_t>(Draw::kCorrection), 2u);
}

TEST(Randomness, CounterLayoutKnownAnswer) {
  // SPEC.md section 4: key = (seed_lo, seed_hi), counter = (t / 4, step_lo, step_hi, purpose),
  // word t % 4 belongs to token t. So the third Random123 vector is reached through the layout
  // with seed = 0x299f31d0'a4093822, step = 0x13198a2e'85a308d3, purpose = 0x03707344 and
  // t = 4 * 0x243f6a88 + i = 0x90fdaa20 + i (fits in 32 bits).
  const uint64_t seed = 0x299f31d0a4093822ull;
  const uint64_t step = 0x13198a2e85a308d3ull;
  const uint32_t purp = 0x03707344u;
  const uint32_t t0 = 0x90fdaa20u;
  EXPECT_EQ(random_word(seed, step, purp, t0 + 0), 0xd16cfe09u);
  EXPECT_EQ(random_word(seed, step, purp, t0 + 1), 0x94fdccebu);
  EXPECT_EQ(random_word(seed, step, purp, t0 + 2), 0x5001e420u);
  EXPECT_EQ(random_word(seed, step, purp, t0 + 3), 0x24126ea1u);
  expect_block(random_block(seed, step, purp, 0x243f6a88u), 0xd16cfe09u, 0x94fdccebu, 0x5001e420u,
               0x24126ea1u);
  // The first vector: everything zero, tokens 0..3.
  EXPECT_EQ(random_word(0, 0, 0, 0), 0x6627e8d5u);
  EXPECT_EQ(random_word(0, 0, 0, 1), 0xe169c58du);
  EXPECT_EQ(random_word(0, 0, 0, 2), 0xbc57ac4cu);
  EXPECT_EQ(random_word(0, 0, 0, 3), 0x9b00dbd8u);
}

TEST(Randomness, CounterLayoutWordSplit) {
  // Hand split of the 64-bit values: seed 0x01234567'89abcdef -> (lo 0x89abcdef, hi 0x01234567),
  // step 0xfedcba98'76543210 -> (lo 0x76543210, hi 0xfedcba98), purpose (2, 5) -> 0x00020005.
  const uint64_t seed = 0x0123456789abcdefull;
  const uint64_t step = 0xfedcba9876543210ull;
  const uint32_t purp = purpose(Draw::kCorrection, 5);
  ASSERT_EQ(purp, 0x00020005u);
  for (uint32_t t = 0; t < 40; ++t) {
    const auto block =
        philox4x32_10(t / 4, 0x76543210u, 0xfedcba98u, 0x00020005u, 0x89abcdefu, 0x01234567u);
    EXPECT_EQ(random_word(seed, step, purp, t), block.v[t % 4]) << "t = " << t;
  }
  // Large token ids: block index t / 4 up to 2^30 - 1.
  for (uint32_t t : {0x7ffffffcu, 0xfffffffdu, 0xffffffffu, 151935u}) {
    const auto block =
        philox4x32_10(t / 4, 0x76543210u, 0xfedcba98u, 0x00020005u, 0x89abcdefu, 0x01234567u);
    EXPECT_EQ(random_word(seed, step, purp, t), block.v[t % 4]) << "t = " << t;
  }
}

TEST(Randomness, EachCounterFieldMatters) {
  // Changing the seed's high word, the step's high word or the purpose changes the words drawn:
  // the layout must not drop any half of the 64-bit values.
  const uint64_t seed = 0x0000000100000002ull, step = 0x0000000300000004ull;
  const uint32_t w = random_word(seed, step, 0, 0);
  EXPECT_NE(w, random_word(seed ^ (1ull << 40), step, 0, 0));
  EXPECT_NE(w, random_word(seed ^ 1ull, step, 0, 0));
  EXPECT_NE(w, random_word(seed, step ^ (1ull << 40), 0, 0));
  EXPECT_NE(w, random_word(seed, step ^ 1ull, 0, 0));
  EXPECT_NE(w, random_word(seed, step, purpose(Draw::kAcceptance, 0), 0));
  EXPECT_NE(w, random_word(seed, step, purpose(Draw::kSampling, 1), 0));
  EXPECT_NE(w, random_word(seed, step, 0, 4));  // next block
}

TEST(Randomness, UniformEndpoints) {
  // w = 0: (0 + 0.5) * 2^-32 = 2^-33 exactly.
  EXPECT_EQ(uniform_from_word(0u), std::ldexp(1.0f, -33));
  // w = 1: 1.5 * 2^-32 exactly.
  EXPECT_EQ(uniform_from_word(1u), 1.5f * std::ldexp(1.0f, -32));
  // w = 2^31: float(2^31) + 0.5 rounds to 2^31 (ulp 256), times 2^-32 = 0.5.
  EXPECT_EQ(uniform_from_word(0x80000000u), 0.5f);
  // w = 0xffffffff: float(w) rounds to 2^32, + 0.5 stays 2^32, times 2^-32 = 1; clamped to
  // 1 - 2^-24.
  const float top = 1.0f - std::ldexp(1.0f, -24);
  EXPECT_EQ(top, 0.99999994039535522f);
  EXPECT_EQ(uniform_from_word(0xffffffffu), top);
  // w = 2^32 - 2^8: float is exact (24 significant bits), (2^32 - 256 + 0.5) rounds to
  // 2^32 - 256, times 2^-32 = 1 - 2^-24: equal to the clamp.
  EXPECT_EQ(uniform_from_word(0xffffff00u), top);
  // w = 2^32 - 2^9 = 0xfffffe00: (2^32 - 512) * 2^-32 = 1 - 2^-23, below the clamp.
  EXPECT_EQ(uniform_from_word(0xfffffe00u), 1.0f - std::ldexp(1.0f, -23));
}

TEST(Randomness, UniformNeverZeroOrOneAndMonotone) {
  const float lo = std::ldexp(1.0f, -33), hi = 1.0f - std::ldexp(1.0f, -24);
  float prev = 0.0f;
  uint64_t count = 0;
  // A sweep that is dense at both ends and strided in the middle.
  auto check = [&](uint32_t w) {
    const float v = uniform_from_word(w);
    ASSERT_GE(v, lo) << "w = " << w;
    ASSERT_LE(v, hi) << "w = " << w;
    ASSERT_GT(v, 0.0f);
    ASSERT_LT(v, 1.0f);
    ASSERT_GE(v, prev) << "not monotone at w = " << w;
    prev = v;
    ++count;
  };
  for (uint32_t w = 0; w < 70000; ++w) check(w);
  for (uint64_t w = 70000; w < 0xffff0000ull; w += 9973) check(static_cast<uint32_t>(w));
  for (uint64_t w = 0xffff0000ull; w <= 0xffffffffull; ++w) check(static_cast<uint32_t>(w));
  EXPECT_GT(count, 500000u);
}

TEST(Randomness, GumbelEndpointsAndRange) {
  // G = -log(-log1p(-v)).
  // v = 2^-33: -log1p(-v) = v + v^2/2 + ... ~= 2^-33, so G ~= -log(2^-33) = 33 ln 2 = 22.8738...
  const double g_max = gumbel_from_uniform_exact(uniform_from_word(0u));
  EXPECT_NEAR(g_max, 33.0 * std::log(2.0), 1e-9);
  EXPECT_GT(g_max, 22.87);
  EXPECT_LT(g_max, 22.88);
  // v = 1 - 2^-24: -log1p(-v) = -log(2^-24) = 24 ln 2 = 16.6355..., G = -log(16.6355) = -2.8115.
  const double g_min = gumbel_from_uniform_exact(uniform_from_word(0xffffffffu));
  EXPECT_NEAR(g_min, -std::log(24.0 * std::log(2.0)), 1e-6);
  EXPECT_GT(g_min, -2.82);
  EXPECT_LT(g_min, -2.81);
  // v = 0.5: -log1p(-0.5) = ln 2, G = -ln(ln 2) = 0.36651292058166435.
  EXPECT_NEAR(gumbel_from_uniform_exact(0.5f), 0.36651292058166435, 1e-12);
  // The naive -log(-log(1 - v)) would be +inf at v = 2^-33 (1 - v rounds to 1 in fp32); the
  // exact form stays finite.
  EXPECT_TRUE(std::isfinite(gumbel_from_uniform_exact(std::ldexp(1.0f, -33))));
}

TEST(Randomness, GumbelFiniteEverywhereAndDecreasing) {
  // G is decreasing in v (1 - v shrinks, -log(1 - v) grows, -log of it shrinks): over a sweep of
  // words G never increases, and every value lies in [-2.82, 22.88].
  double prev = std::numeric_limits<double>::infinity();
  auto check = [&](uint32_t w) {
    const double g = gumbel_from_uniform_exact(uniform_from_word(w));
    ASSERT_TRUE(std::isfinite(g)) << "w = " << w;
    ASSERT_GE(g, -2.82) << "w = " << w;
    ASSERT_LE(g, 22.88) << "w = " << w;
    ASSERT_LE(g, prev) << "not monotone at w = " << w;
    prev = g;
  };
  for (uint32_t w = 0; w < 70000; ++w) check(w);
  for (uint64_t w = 70000; w < 0xffff0000ull; w += 7919) check(static_cast<uint32_t>(w));
  for (uint64_t w = 0xffff0000ull; w <= 0xffffffffull; ++w) check(static_cast<uint32_t>(w));
}

TEST(Randomness, GumbelOfDrawnWordsLooksGumbel) {
  // A loose sanity check of the whole chain: the mean of standard Gumbel noise is the
  // Euler-Mascheroni constant 0.5772 and its variance pi^2 / 6 = 1.6449. 200000 draws: the
  // standard error of the mean is sqrt(1.6449 / 200000) = 0.0029, so a 0.02 band is ~7 sigma.
  const int n = 200000;
  double sum = 0.0, sum2 = 0.0;
  for (int i = 0; i < n; ++i) {
    const uint32_t w = random_word(12345u, static_cast<uint64_t>(i / 1000), 0, i % 1000);
    const double g = gumbel_from_uniform_exact(uniform_from_word(w));
    sum += g;
    sum2 += g * g;
  }
  const double mean = sum / n, var = sum2 / n - mean * mean;
  EXPECT_NEAR(mean, 0.5772156649, 0.02);
  EXPECT_NEAR(var, 1.6449340668, 0.06);
}

}  // namespace
