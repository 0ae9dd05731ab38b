// Distribution tests on the CUDA backend: >= 10^6 draws per case against the exact distribution of
// the independent oracle (tests/cpu/stats.hpp), on each device path: the fast path with candidates
// (truncated rows), stage 1's Gumbel-max with fast fp32 noise (untruncated rows), and the exact
// path (asking for ranks sends every row there). Each case also shows the test's power: the same
// counts must reject the expectation with its most likely token made 2% more likely (more where
// that token is too rare for 2% to be seen in 10^6 draws; the figure is printed).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cpu/stats.hpp"
#include "gpu/gpu_harness.hpp"

namespace sonic_gpu {
namespace {

constexpr int32_t kV = 48;
constexpr int32_t kRows = 256;  // one slot a row, same request, different seeds
constexpr int32_t kCalls = 4000;

enum class Path { kFast, kExact };

void run_case(const char* name, sonic::RequestParams params, const std::vector<int32_t>& prompt, Path path) {
  std::mt19937_64 rng(std::hash<std::string>{}(name));
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> row(kV);
  for (float& x : row) x = normal(rng);
  row[3] += 2.0f;  // a likely token, so the 2% control has power

  // The exact distribution, from the oracle.
  bool nan = false;
  const std::vector<float> z = sonic_stats::oracle_scores(row.data(), kV, params, prompt, {}, nullptr, &nan);
  const sonic_stats::OracleDist expect = sonic_stats::oracle_kept(z, params);
  ASSERT_GT(expect.margin, 1e-4) << name << ": a threshold sits too close to a token for a fair test";

  sonic::SamplerConfig c;
  c.backend = sonic::Backend::kCuda;
  c.vocab_size = kV;
  c.max_slots = kRows;
  c.max_rows = kRows;
  sonic::Sampler s(c);
  for (int32_t r = 0; r < kRows; ++r) {
    params.seed = 0x5EED0000ull + r;
    s.admit(r, params, prompt.data(), static_cast<int64_t>(prompt.size()));
  }
  std::vector<float> logits(static_cast<size_t>(kRows) * kV);
  for (int32_t r = 0; r < kRows; ++r) std::copy(row.begin(), row.end(), logits.begin() + r * kV);
  DeviceBuffer<float> d_logits(logits.size());
  d_logits.upload(logits);
  DeviceBuffer<int32_t> tokens(kRows), status(kRows), rank(kRows);
  sonic::SampleOutputs o;
  o.tokens = tokens.get();
  o.status = status.get();
  if (path == Path::kExact) o.rank = rank.get();
  sonic::CallOptions opt;
  opt.append_to_history = false;  // every draw from the same distribution
  std::vector<int64_t> counts(kV, 0);
  int64_t bad = 0;
  for (int i = 0; i < kCalls; ++i) {
    s.sample(sonic::LogitsView{d_logits.get(), sonic::DType::kF32, kRows, kV, kV}, nullptr, {}, o, opt);
    const std::vector<int32_t> t = tokens.download();
    for (int32_t v : t) {
      if (v < 0 || v >= kV) ++bad;
      else ++counts[v];
    }
  }
  EXPECT_EQ(bad, 0);
  const sonic_stats::GTestResult g = sonic_stats::expect_matches(counts, expect.probs, name);
  // Power: the smallest change of the top token's probability that these draws must detect,
  // 2% or what gives an expected G of about 120 (N p (1 - p) d^2 = 120), whichever is larger.
  const double p_top = *std::max_element(expect.probs.begin(), expect.probs.end());
  const double n = static_cast<double>(kRows) * kCalls;
  const double d = std::max(0.02, std::sqrt(120.0 / (n * p_top * (1.0 - p_top))));
  const sonic_stats::GTestResult neg = sonic_stats::expect_rejects(counts, sonic_stats::perturb_top(expect.probs, 1.0 + d), name);
  std::printf("[ gpu stats ] %-28s kept %zu of %d: G = %.2f, dof = %d, p = %.4g; top token x%.3f rejected at p = %.3g\n",
              name, expect.kept.size(), kV, g.g, g.dof, g.p_value, 1.0 + d, neg.p_value);
}

sonic::RequestParams processors() {
  sonic::RequestParams p;
  p.temperature = 0.8f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.1f;
  p.penalties_include_prompt = true;
  p.logit_bias = {{5, 1.0f}, {7, -2.0f}};
  p.banned_tokens = {11};
  return p;
}

const std::vector<int32_t> kPrompt = {3, 3, 9, 20, 21, 40};

TEST(CudaDistribution, FastPathTopKTopP) {
  sonic::RequestParams p = processors();
  p.top_k = 12;
  p.top_p = 0.85f;
  run_case("fast top-k + top-p", p, kPrompt, Path::kFast);
}

TEST(CudaDistribution, FastPathJointTopPMinP) {
  sonic::RequestParams p = processors();
  p.top_k = 20;
  p.top_p = 0.8f;
  p.top_p_joint = true;
  p.min_p = 0.02f;
  run_case("fast joint top-p + min-p", p, kPrompt, Path::kFast);
}

TEST(CudaDistribution, FastNoiseUntruncated) {
  run_case("untruncated, fast fp32 noise", processors(), kPrompt, Path::kFast);
}

TEST(CudaDistribution, ExactPathTopP) {
  sonic::RequestParams p = processors();
  p.top_p = 0.9f;
  run_case("exact path, top-p", p, kPrompt, Path::kExact);
}

TEST(CudaDistribution, ExactPathTopKMinP) {
  sonic::RequestParams p = processors();
  p.top_k = 15;
  p.min_p = 0.03f;
  run_case("exact path, top-k + min-p", p, kPrompt, Path::kExact);
}

}  // namespace
}  // namespace sonic_gpu
