// Statistical tests of single-step sampling (SPEC.md section 2): draws from sonic::ref::sample_row
// with a fixed seed and step = 0..N-1, G-tested against the exact distribution of the row computed
// independently here (stats.hpp's oracle: steps 1-5 in fp32, steps 6-8 and the softmax in double).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ref/reference.hpp"
#include "sonic/types.hpp"
#include "stats.hpp"

namespace {

namespace ref = sonic::ref;
namespace st = sonic_stats;
using sonic::RequestParams;

constexpr int64_t kDraws = 1000000;          // per case
constexpr int64_t kControlDraws = 4000000;   // negative-control cases (power for a 1% change)
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct RowCase {
  int32_t V = 32;
  std::vector<float> logits;
  RequestParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::vector<int32_t> bitmask;  // empty: no grammar mask
};

struct Draws {
  std::vector<int64_t> counts;  // [V]
  int64_t bad_tokens = 0;       // tokens outside [0, V)
  int32_t status_or = 0;
  int32_t status_and = ~0;
};

int num_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hc, 2u, 8u));
}

// n draws of sample_row, steps 0..n-1, split over threads by step range.
Draws draw(const RowCase& c, int64_t n) {
  const ref::TokenCounts tc = ref::count_tokens(c.prompt, c.output);
  const int T = num_threads();
  std::vector<Draws> parts(static_cast<size_t>(T));
  auto work = [&](int i) {
    Draws& d = parts[static_cast<size_t>(i)];
    d.counts.assign(static_cast<size_t>(c.V), 0);
    ref::RowContext ctx;
    ctx.params = &c.params;
    ctx.counts = &tc;
    ctx.bitmask_row = c.bitmask.empty() ? nullptr : c.bitmask.data();
    ctx.vocab_size = c.V;
    ctx.position = 0;
    const int64_t s0 = n * i / T, s1 = n * (i + 1) / T;
    for (int64_t s = s0; s < s1; ++s) {
      ctx.step = static_cast<uint64_t>(s);
      const ref::RowResult r = ref::sample_row(c.logits.data(), ctx, sonic::LogprobMode::kRaw);
      if (r.token >= 0 && r.token < c.V)
        ++d.counts[static_cast<size_t>(r.token)];
      else
        ++d.bad_tokens;
      d.status_or |= r.status;
      d.status_and &= r.status;
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < T; ++i) threads.emplace_back(work, i);
  work(0);
  for (auto& t : threads) t.join();
  Draws all = parts[0];
  for (size_t i = 1; i < parts.size(); ++i) {
    for (size_t t = 0; t < all.counts.size(); ++t) all.counts[t] += parts[i].counts[t];
    all.bad_tokens += parts[i].bad_tokens;
    all.status_or |= parts[i].status_or;
    all.status_and &= parts[i].status_and;
  }
  return all;
}

st::OracleDist oracle(const RowCase& c, bool* nan_seen = nullptr) {
  const std::vector<float> z =
      st::oracle_scores(c.logits.data(), c.V, c.params, c.prompt, c.output,
                        c.bitmask.empty() ? nullptr : c.bitmask.data(), nan_seen);
  return st::oracle_kept(z, c.params);
}

// Draws n samples, checks the statuses and G-tests against the oracle. Returns the counts.
Draws check_case(const RowCase& c, int64_t n, const std::string& name,
                 int32_t expected_status = sonic::kStatusOk) {
  bool nan_seen = false;
  const st::OracleDist d = oracle(c, &nan_seen);
  // A fair case has no kept-set boundary within fp32 reach of its threshold (SPEC.md section 4).
  EXPECT_GT(d.margin, 1e-4) << name << ": the case itself has a near-tie at a kept-set boundary";
  EXPECT_FALSE(d.kept.empty()) << name;
  const auto t0 = std::chrono::steady_clock::now();
  Draws r = draw(c, n);
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(r.bad_tokens, 0) << name << ": tokens outside [0, V)";
  EXPECT_EQ(r.status_or, expected_status) << name << ": status bits seen (OR over draws)";
  EXPECT_EQ(r.status_and, expected_status) << name << ": status bits seen (AND over draws)";
  const st::GTestResult g = st::expect_matches(r.counts, d.probs, name);
  std::printf("[ stats    ] %-40s kept %zu of %zu, G = %.2f, dof = %d, p = %.4g, %.2f s\n",
              name.c_str(), d.kept.size(), d.valid, g.g, g.dof, g.p_value, secs);
  return r;
}

// Logits spread uniformly over [lo, hi): probabilities that are not tiny.
std::vector<float> spread_logits(int32_t V, uint64_t seed, float lo = -2.0f, float hi = 3.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(static_cast<size_t>(V));
  for (float& v : x) v = u(gen);
  return x;
}

// Penalties over a history, logit bias, banned and allowed lists and a grammar bitmask, all on.
// alt_scopes: repetition over the output only, frequency/presence counting the prompt too.
void processors_on(RowCase& c, bool alt_scopes) {
  ASSERT_GE(c.V, 32);
  // Force both branches of the repetition penalty on tokens of the history.
  c.logits[2] = 2.2f;    // output token, x > 0: divided
  c.logits[11] = -0.8f;  // output token, x < 0: multiplied
  c.logits[1] = 1.7f;    // prompt-only token: in the default repetition scope only
  c.logits[30] = 2.6f;   // prompt-only token
  c.prompt = {1, 4, 4, 9, 30, 12};
  c.output = {4, 2, 2, 2, 11, 9, 17, 12};
  RequestParams& p = c.params;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.3f;
  p.logit_bias = {{0, 1.5f}, {6, -0.7f}, {13, 0.9f}, {21, 2.0f}, {4, 0.5f}};
  p.banned_tokens = {3, 25};
  p.allowed_tokens.clear();
  for (int32_t t = 0; t < c.V; ++t)
    if (t != 8 && t != 28 && t != 31) p.allowed_tokens.push_back(t);
  c.bitmask.assign(static_cast<size_t>((c.V + 31) / 32), -1);
  for (int32_t t : {10, 19}) c.bitmask[static_cast<size_t>(t / 32)] &= ~(1 << (t % 32));
  p.repetition_output_only = alt_scopes;
  p.penalties_include_prompt = alt_scopes;
}

// ---------------------------------------------------------------------------------------------
// The truncation matrix: each rule and combination with the processors (penalties, bias, banned
// and allowed lists, grammar bitmask) on, plus the plain softmax.

enum class Trunc { kNone, kTopK, kTopP, kMinP, kTopKTopP, kAllThree, kJoint };
enum class Proc { kOff, kOn, kOnAltScopes };

struct MatrixParam {
  Trunc trunc;
  Proc proc;
  bool control = false;  // also the negative control at 2% (see below)
};

std::string trunc_name(Trunc t) {
  switch (t) {
    case Trunc::kNone: return "NoTruncation";
    case Trunc::kTopK: return "TopK";
    case Trunc::kTopP: return "TopP";
    case Trunc::kMinP: return "MinP";
    case Trunc::kTopKTopP: return "TopKTopP";
    case Trunc::kAllThree: return "AllThree";
    case Trunc::kJoint: return "JointTopPWithTopKMinP";
  }
  return "?";
}

std::string matrix_name(const MatrixParam& m) {
  const char* suffix = m.proc == Proc::kOff ? "" : m.proc == Proc::kOn ? "_Processors" : "_ProcessorsAltScopes";
  return trunc_name(m.trunc) + suffix;
}

void PrintTo(const MatrixParam& m, std::ostream* os) { *os << matrix_name(m); }

RowCase matrix_case(const MatrixParam& m) {
  RowCase c;
  c.V = 32;
  const uint64_t id = static_cast<uint64_t>(m.trunc) * 3 + static_cast<uint64_t>(m.proc);
  c.logits = spread_logits(c.V, 1000 + id, -2.0f, 2.0f);
  c.logits[7] = 3.6f;  // a likely token (a third to two thirds of the mass): the controls need one
  RequestParams& p = c.params;
  p.seed = 0x5eed0000ull + 7919 * id;
  switch (m.trunc) {
    case Trunc::kNone: p.temperature = 1.0f; break;
    case Trunc::kTopK: p.temperature = 0.8f; p.top_k = 6; break;
    case Trunc::kTopP: p.temperature = 1.3f; p.top_p = 0.8f; break;
    case Trunc::kMinP: p.temperature = 0.9f; p.min_p = 0.1f; break;
    case Trunc::kTopKTopP: p.temperature = 1.1f; p.top_k = 10; p.top_p = 0.75f; break;
    case Trunc::kAllThree: p.temperature = 0.7f; p.top_k = 12; p.top_p = 0.85f; p.min_p = 0.03f; break;
    case Trunc::kJoint:
      p.temperature = 1.0f; p.top_k = 9; p.top_p = 0.6f; p.min_p = 0.04f; p.top_p_joint = true;
      break;
  }
  if (m.proc != Proc::kOff) processors_on(c, m.proc == Proc::kOnAltScopes);
  return c;
}

class DistributionMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(DistributionMatrix, MatchesSpec) {
  const MatrixParam m = GetParam();
  const RowCase c = matrix_case(m);
  const std::string name = matrix_name(m);
  // The case must exercise its rules: every truncation removes tokens, and each rule that is on
  // binds somewhere (otherwise the case would not test it).
  const st::OracleDist d = oracle(c);
  if (m.trunc != Trunc::kNone) {
    EXPECT_LT(d.kept.size(), d.valid) << name << ": truncates nothing";
  }
  if (c.params.top_k > 0) {
    EXPECT_LT(d.after_top_k, d.valid) << name;
  }
  if (c.params.min_p > 0) {
    EXPECT_LT(d.after_min_p, d.valid) << name;
  }
  if (m.trunc == Trunc::kJoint) {
    // The joint rule must give another kept set than the default rule on this row.
    RowCase other = c;
    other.params.top_p_joint = false;
    EXPECT_NE(oracle(other).kept, d.kept) << name << ": joint and default top-p agree here";
  }
  if (m.proc != Proc::kOff) {
    // The masks and penalties must change the distribution.
    RowCase plain = c;
    plain.params = RequestParams{};
    plain.params.temperature = c.params.temperature;
    plain.params.top_k = c.params.top_k;
    plain.params.top_p = c.params.top_p;
    plain.params.min_p = c.params.min_p;
    plain.params.top_p_joint = c.params.top_p_joint;
    plain.bitmask.clear();
    EXPECT_NE(oracle(plain).probs, d.probs) << name;
  }
  const Draws r = check_case(c, kDraws, name);
  if (m.control) {
    // Negative control at this case's 10^6 draws: the top token's probability times 1.02,
    // renormalised, is rejected. (A 1% change of a token holding mass p is a
    // 0.01 * sqrt(N p (1 - p)) <= 5 sigma effect at N = 10^6: at the edge of p = 1e-6, so 1%
    // is shown with 4x the draws in DistributionNegativeControl below.)
    const double top = *std::max_element(d.probs.begin(), d.probs.end());
    EXPECT_GT(top, 0.25) << name << ": the control needs a likely token";
    EXPECT_LT(top, 0.8) << name << ": the control needs a likely token";
    const st::GTestResult g = st::expect_rejects(r.counts, st::perturb_top(d.probs, 1.02), name + " perturbed by 2%");
    std::printf("[ stats    ] %-40s perturbed by 2%%: G = %.2f, dof = %d, p = %.4g\n", name.c_str(), g.g,
                g.dof, g.p_value);
  }
}

// Every rule with the processors on; the plain softmax and one case with the other history scopes
// besides.
std::vector<MatrixParam> matrix_params() {
  std::vector<MatrixParam> v;
  v.push_back({Trunc::kNone, Proc::kOff});
  for (Trunc t : {Trunc::kNone, Trunc::kTopK, Trunc::kTopP, Trunc::kMinP, Trunc::kTopKTopP,
                  Trunc::kAllThree, Trunc::kJoint})
    v.push_back({t, Proc::kOn, t == Trunc::kNone || t == Trunc::kAllThree});
  v.push_back({Trunc::kAllThree, Proc::kOnAltScopes});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Distribution, DistributionMatrix, ::testing::ValuesIn(matrix_params()),
                         [](const ::testing::TestParamInfo<MatrixParam>& info) {
                           return matrix_name(info.param);
                         });

// ---------------------------------------------------------------------------------------------
// Special rows.

// Equal values straddling the top-k boundary: the id tie-break decides which of them stay.
TEST(DistributionSpecial, TiesAtTopKBoundary) {
  RowCase c;
  c.V = 32;
  c.logits = spread_logits(c.V, 77, -2.0f, 1.0f);
  c.logits[2] = 4.0f;
  c.logits[9] = 3.5f;
  c.logits[14] = 3.0f;
  for (int32_t t : {27, 5, 20, 11}) c.logits[static_cast<size_t>(t)] = 2.5f;
  c.params.temperature = 0.7f;
  c.params.top_k = 5;
  c.params.seed = 4242;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.kept, (std::vector<int32_t>{2, 9, 14, 5, 11}));
  EXPECT_EQ(d.probs[5], d.probs[11]);
  const Draws r = check_case(c, kDraws, "TiesAtTopKBoundary");
  EXPECT_EQ(r.counts[20], 0);
  EXPECT_EQ(r.counts[27], 0);
}

// Ties at the top: the tied tokens have equal probability (and the lower id is not favoured).
TEST(DistributionSpecial, TiesAtTheTop) {
  RowCase c;
  c.V = 24;
  c.logits = spread_logits(c.V, 78, -1.0f, 1.0f);
  for (int32_t t : {3, 8, 19}) c.logits[static_cast<size_t>(t)] = 2.0f;
  c.params.top_k = 4;
  c.params.seed = 4243;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.kept.size(), 4u);
  EXPECT_EQ(d.kept[0], 3);
  check_case(c, kDraws, "TiesAtTheTop");
}

// A bf16 plateau: 32 tokens share one bf16 value, 15 more share the next lower one.
RowCase plateau_case() {
  RowCase c;
  c.V = 48;
  std::vector<int32_t> ids;
  for (int32_t t = 0; t < c.V; ++t)
    if (t != 40) ids.push_back(t);
  std::mt19937_64 gen(99);
  std::shuffle(ids.begin(), ids.end(), gen);
  auto bf16 = [](uint16_t bits) {
    const uint32_t u = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  };
  c.logits.assign(static_cast<size_t>(c.V), 0.0f);
  c.logits[40] = bf16(0x4040);  // 3.0
  for (size_t i = 0; i < ids.size(); ++i)
    c.logits[static_cast<size_t>(ids[i])] = i < 32 ? bf16(0x4000) /* 2.0 */ : bf16(0x3FFF) /* 1.9921875 */;
  return c;
}

TEST(DistributionSpecial, Bf16PlateauTopK) {
  RowCase c = plateau_case();
  c.params.top_k = 20;
  c.params.seed = 31337;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.kept.size(), 20u);
  // The 19 plateau tokens kept are the 19 lowest ids of the plateau.
  std::vector<int32_t> plateau;
  for (int32_t t = 0; t < c.V; ++t)
    if (c.logits[static_cast<size_t>(t)] == 2.0f) plateau.push_back(t);
  ASSERT_EQ(plateau.size(), 32u);
  for (size_t i = 0; i < 19; ++i) EXPECT_EQ(d.kept[i + 1], plateau[i]);
  check_case(c, kDraws, "Bf16PlateauTopK");
}

TEST(DistributionSpecial, Bf16PlateauTopP) {
  RowCase c = plateau_case();
  c.params.top_p = 0.5f;  // crosses inside the plateau: 23 of its 32 tokens are kept
  c.params.seed = 31338;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.kept.size(), 24u);
  check_case(c, kDraws, "Bf16PlateauTopP");
}

// +inf logits share the mass equally; the finite tokens get nothing.
TEST(DistributionSpecial, TwoPositiveInfinities) {
  RowCase c;
  c.V = 24;
  c.logits = spread_logits(c.V, 5);
  c.logits[6] = kInf;
  c.logits[15] = kInf;
  c.params.temperature = 0.9f;
  c.params.seed = 777;
  const st::OracleDist d = oracle(c);
  for (int32_t t = 0; t < c.V; ++t) EXPECT_EQ(d.probs[static_cast<size_t>(t)], t == 6 || t == 15 ? 0.5 : 0.0);
  check_case(c, kDraws, "TwoPositiveInfinities");
}

// Three +inf tokens and top-p 0.6: mass 1/3 each, the prefix reaching 0.6 is the first two ids.
TEST(DistributionSpecial, ThreePositiveInfinitiesTopP) {
  RowCase c;
  c.V = 24;
  c.logits = spread_logits(c.V, 6);
  c.logits[19] = kInf;
  c.logits[4] = kInf;
  c.logits[11] = kInf;
  c.params.top_p = 0.6f;
  c.params.seed = 778;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.kept, (std::vector<int32_t>{4, 11}));
  const Draws r = check_case(c, kDraws, "ThreePositiveInfinitiesTopP");
  EXPECT_EQ(r.counts[19], 0);
}

// NaN logits count as -inf; every draw reports status bit 0 and a valid token.
TEST(DistributionSpecial, NaNLogits) {
  RowCase c;
  c.V = 32;
  c.logits = spread_logits(c.V, 8);
  for (int32_t t : {3, 17, 29}) c.logits[static_cast<size_t>(t)] = kNaN;
  c.logits[8] = -kInf;
  c.params.top_p = 0.9f;
  c.params.seed = 779;
  const st::OracleDist d = oracle(c);
  ASSERT_EQ(d.valid, 28u);
  check_case(c, kDraws, "NaNLogits", sonic::kStatusNaN);
}

// ---------------------------------------------------------------------------------------------
// Negative controls: the same G-test, on the same draws, rejects the expectation perturbed by 1%
// (the most likely token's probability times 1.01, renormalised). A 1% change of a token with
// mass p is a 0.01 * sqrt(N p (1 - p)) sigma effect: 5 sigma at N = 10^6 and p = 1/2, the edge of
// p = 1e-6; these cases take 4 * 10^6 draws (10 sigma) on small rows to keep the time down. The
// matrix above also shows a 2% change rejected at its 10^6 draws.

void negative_control(RowCase& c, const std::string& name) {
  const st::OracleDist d = oracle(c);
  const double top = *std::max_element(d.probs.begin(), d.probs.end());
  ASSERT_GT(top, 0.35) << name;
  ASSERT_LT(top, 0.65) << name;
  const Draws r = check_case(c, kControlDraws, name);
  const st::GTestResult g = st::expect_rejects(r.counts, st::perturb_top(d.probs, 1.01), name + " perturbed by 1%");
  std::printf("[ stats    ] %-40s perturbed by 1%%: G = %.2f, dof = %d, p = %.4g\n", name.c_str(), g.g,
              g.dof, g.p_value);
}

TEST(DistributionNegativeControl, TopK) {
  RowCase c;
  c.V = 20;
  c.logits = spread_logits(c.V, 2024, -1.5f, 1.5f);
  c.logits[13] = 2.4f;
  c.params.top_k = 4;
  c.params.seed = 9001;
  negative_control(c, "NegControl_TopK");
}

TEST(DistributionNegativeControl, AllThreeWithBiasAndBans) {
  RowCase c;
  c.V = 20;
  c.logits = spread_logits(c.V, 2025, -2.0f, 2.0f);
  c.logits[4] = 2.9f;
  c.params.temperature = 0.9f;
  c.params.top_k = 8;
  c.params.top_p = 0.9f;
  c.params.min_p = 0.02f;
  c.params.logit_bias = {{9, 0.8f}, {4, 0.3f}};
  c.params.banned_tokens = {0, 17};
  c.params.seed = 9002;
  const st::OracleDist d = oracle(c);
  EXPECT_LT(d.kept.size(), d.valid);
  negative_control(c, "NegControl_AllThree");
}

// The G-test machinery itself: the survival function against known values.
TEST(DistributionStats, ChiSquareSurvival) {
  EXPECT_NEAR(st::chi2_sf(3.841458820694124, 1), 0.05, 1e-9);
  EXPECT_NEAR(st::chi2_sf(23.209251158954356, 10), 0.01, 1e-9);
  EXPECT_NEAR(st::chi2_sf(2.0, 2), std::exp(-1.0), 1e-12);
  EXPECT_NEAR(st::chi2_sf(100.0, 2), std::exp(-50.0), 1e-30);
  EXPECT_NEAR(st::chi2_sf(0.5, 30), 1.0, 1e-12);
  EXPECT_NEAR(st::chi2_sf(20.0, 30) / 0.916541527065337175, 1.0, 1e-12);   // series branch
  EXPECT_NEAR(st::chi2_sf(67.0, 30) / 1.2099033136011232e-4, 1.0, 1e-10);  // continued fraction
  EXPECT_NEAR(st::chi2_sf(23.2, 1) / 1.45997328751044766e-6, 1.0, 1e-10);
  EXPECT_EQ(st::chi2_sf(0.0, 5), 1.0);
  // A G-test of a perfect match, and of a draw on a zero-probability token.
  const st::GTestResult ok = st::g_test({500, 300, 200}, {0.5, 0.3, 0.2});
  EXPECT_NEAR(ok.g, 0.0, 1e-9);
  EXPECT_EQ(ok.dof, 2);
  const st::GTestResult bad = st::g_test({500, 300, 1}, {0.5, 0.5, 0.0});
  EXPECT_EQ(bad.zero_prob_hits, 1);
}

}  // namespace
