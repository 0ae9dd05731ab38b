// Hand-computed cases for each rule of SPEC.md section 2 (and the single-step choices of
// docs/semantics.md), run through sonic::Sampler on the CPU backend and, where the row fits the
// reference's row API, through sonic::ref::sample_row as well. Every expected value below is
// worked out from the SPEC text in the comments next to it, never taken from a run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <vector>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "ref/reference.hpp"
#include "ref/sort_keys.hpp"
#include "sonic/sampler.hpp"

namespace {

using namespace sonic;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const double kNegInfD = -std::numeric_limits<double>::infinity();

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

SamplerConfig make_config(int32_t vocab, int32_t slots = 4, int32_t rows = 8) {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = vocab;
  c.max_slots = slots;
  c.max_rows = rows;
  c.max_drafts = 3;
  c.max_history = 256;
  c.max_top_logprobs = 8;
  c.max_final_entries = 8;
  return c;
}

struct RowOut {
  int32_t token = 0;
  int32_t status = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;  // top_stride entries
  std::vector<float> top_lp;
  int32_t final_count = 0;
  std::vector<int32_t> final_ids;  // final_stride entries
  std::vector<float> final_probs;
};

constexpr int32_t kSentinel = 0x5EED;

std::vector<RowOut> run_sample(Sampler& s, const LogitsView& lv, const int32_t* slots,
                               const BitmaskView& bm, const CallOptions& opt) {
  const SamplerConfig& c = s.config();
  const int64_t rows = lv.rows;
  const int64_t ts = std::max<int64_t>(1, c.max_top_logprobs);
  const int64_t fs = std::max<int64_t>(1, c.max_final_entries);
  std::vector<int32_t> tokens(rows, kSentinel), status(rows, kSentinel), rank(rows, kSentinel),
      top_ids(rows * ts, kSentinel), final_ids(rows * fs, kSentinel), final_count(rows, kSentinel);
  std::vector<float> logprob(rows, 777.0f), top_lp(rows * ts, 777.0f),
      final_probs(rows * fs, 777.0f);
  SampleOutputs out;
  out.tokens = tokens.data();
  out.status = status.data();
  out.logprob = logprob.data();
  out.rank = rank.data();
  out.top_ids = top_ids.data();
  out.top_logprobs = top_lp.data();
  out.top_stride = ts;
  out.final_ids = final_ids.data();
  out.final_probs = final_probs.data();
  out.final_count = final_count.data();
  out.final_stride = fs;
  s.sample(lv, slots, bm, out, opt);
  std::vector<RowOut> res(rows);
  for (int64_t r = 0; r < rows; ++r) {
    RowOut& o = res[r];
    o.token = tokens[r];
    o.status = status[r];
    o.logprob = logprob[r];
    o.rank = rank[r];
    o.top_ids.assign(top_ids.begin() + r * ts, top_ids.begin() + (r + 1) * ts);
    o.top_lp.assign(top_lp.begin() + r * ts, top_lp.begin() + (r + 1) * ts);
    o.final_count = final_count[r];
    o.final_ids.assign(final_ids.begin() + r * fs, final_ids.begin() + (r + 1) * fs);
    o.final_probs.assign(final_probs.begin() + r * fs, final_probs.begin() + (r + 1) * fs);
  }
  return res;
}

LogitsView f32_view(const std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride) {
  LogitsView lv;
  lv.data = v.data();
  lv.dtype = DType::kF32;
  lv.rows = rows;
  lv.cols = cols;
  lv.row_stride = stride;
  return lv;
}

const int32_t kDummyToken = 0;
const int32_t* ptr_or_dummy(const std::vector<int32_t>& v) {
  return v.empty() ? &kDummyToken : v.data();
}

// Logprob comparison: -inf must be -inf, otherwise within 1e-5 relative to max(1, |want|).
#define EXPECT_LP(got, want)                                            \
  do {                                                                  \
    const double want_ = (want);                                        \
    const double got_ = (got);                                          \
    if (std::isinf(want_)) {                                            \
      EXPECT_EQ(got_, want_);                                           \
    } else {                                                            \
      EXPECT_NEAR(got_, want_, 1e-5 * std::max(1.0, std::fabs(want_))); \
    }                                                                   \
  } while (0)

double lse(const std::vector<double>& v) {
  double m = kNegInfD;
  for (double x : v) m = std::max(m, x);
  if (std::isinf(m)) return m;
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

// One admitted request in slot 0 of its own sampler. Tracks its output history so that every
// call can also be checked against ref::sample_row with the same counts and step.
class OneSlot {
 public:
  OneSlot(const RequestParams& p, int32_t vocab, std::vector<int32_t> prompt = {},
          std::vector<int32_t> output = {}, SamplerConfig cfg = SamplerConfig{})
      : params_(p), prompt_(std::move(prompt)), output_(std::move(output)) {
    if (cfg.vocab_size == 0) cfg = make_config(vocab);
    sampler_ = std::make_unique<Sampler>(cfg);
    sampler_->admit(0, params_, ptr_or_dummy(prompt_), static_cast<int64_t>(prompt_.size()));
    if (!output_.empty())
      sampler_->append_output(0, output_.data(), static_cast<int64_t>(output_.size()));
  }

  // One fp32 row of exactly vocab_size values; optional grammar mask row (words of 32 tokens).
  RowOut sample(const std::vector<float>& logits, LogprobMode mode = LogprobMode::kRaw,
                const std::vector<int32_t>* mask = nullptr) {
    const int32_t vocab = sampler_->config().vocab_size;
    EXPECT_EQ(static_cast<int32_t>(logits.size()), vocab);
    const uint64_t step_before = sampler_->step(0);
    BitmaskView bm;
    if (mask) {
      bm.data = mask->data();
      bm.rows = 1;
      bm.words = static_cast<int64_t>(mask->size());
      bm.row_stride = bm.words;
    }
    CallOptions opt;
    opt.logprob_mode = mode;
    RowOut o = run_sample(*sampler_, f32_view(logits, 1, vocab, vocab), nullptr, bm, opt)[0];

    // The reference's row API on the same inputs must say the same.
    const ref::TokenCounts counts = ref::count_tokens(prompt_, output_);
    ref::RowContext ctx;
    ctx.params = &params_;
    ctx.counts = &counts;
    ctx.bitmask_row = mask ? mask->data() : nullptr;
    ctx.vocab_size = vocab;
    ctx.step = step_before;
    ctx.position = 0;
    const ref::RowResult rr = ref::sample_row(logits.data(), ctx, mode);
    EXPECT_EQ(o.token, rr.token) << "Sampler and ref::sample_row disagree";
    EXPECT_EQ(o.status, rr.status);
    EXPECT_EQ(o.rank, rr.rank);
    if (std::isinf(rr.logprob)) {
      EXPECT_EQ(o.logprob, rr.logprob);
    } else {
      EXPECT_NEAR(o.logprob, rr.logprob, 1e-6 * std::max(1.0f, std::fabs(rr.logprob)));
    }
    const int32_t n = params_.top_logprobs;
    EXPECT_EQ(static_cast<int32_t>(rr.top_ids.size()), n);
    for (int32_t i = 0; i < n && i < static_cast<int32_t>(rr.top_ids.size()); ++i)
      EXPECT_EQ(o.top_ids[i], rr.top_ids[i]) << "top entry " << i;
    EXPECT_EQ(o.final_count, static_cast<int32_t>(rr.final_dist.ids.size()));

    if (o.token >= 0 && (o.status & kStatusHistoryFull) == 0) output_.push_back(o.token);
    EXPECT_EQ(sampler_->step(0), step_before + 1);
    return o;
  }

  uint64_t step() const { return sampler_->step(0); }
  Sampler& sampler() { return *sampler_; }

 private:
  RequestParams params_;
  std::vector<int32_t> prompt_, output_;
  std::unique_ptr<Sampler> sampler_;
};

RequestParams greedy_params(int32_t top_n = 0) {
  RequestParams p;
  p.temperature = 0.0f;
  p.top_logprobs = top_n;
  return p;
}

RequestParams random_params(float temperature = 1.0f, uint64_t seed = 20240601u,
                            int32_t top_n = 0) {
  RequestParams p;
  p.temperature = temperature;
  p.seed = seed;
  p.top_logprobs = top_n;
  return p;
}

// Gumbel noise of SPEC.md section 4, computed here from the Philox functions (checked against
// the Random123 vectors in test_philox.cpp).
double gumbel(uint64_t seed, uint64_t step, uint32_t purp, int32_t t) {
  return detail::gumbel_from_uniform_exact(
      detail::uniform_from_word(detail::random_word(seed, step, purp, static_cast<uint32_t>(t))));
}

struct HandPick {
  int32_t token = -1;
  double margin = std::numeric_limits<double>::infinity();
};

// argmax over the kept ids of score_t + G_t, ties to the lower id; when some kept score is +inf,
// argmax G_t over those alone (SPEC.md section 2 step 8).
HandPick hand_gumbel(const std::vector<double>& score, std::vector<int32_t> kept, uint64_t seed,
                     uint64_t step, uint32_t purp) {
  std::sort(kept.begin(), kept.end());
  bool any_inf = false;
  for (int32_t t : kept) any_inf = any_inf || (std::isinf(score[t]) && score[t] > 0);
  HandPick h;
  double best = kNegInfD, second = kNegInfD;
  for (int32_t t : kept) {
    if (any_inf && !(std::isinf(score[t]) && score[t] > 0)) continue;
    const double s = (any_inf ? 0.0 : score[t]) + gumbel(seed, step, purp, t);
    if (s > best) {
      second = best;
      best = s;
      h.token = t;
    } else if (s > second) {
      second = s;
    }
  }
  h.margin = best - second;
  return h;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

std::vector<float> divide(const std::vector<float>& x, float t) {
  std::vector<float> z(x.size());
  for (size_t i = 0; i < x.size(); ++i) z[i] = x[i] / t;  // fp32, one rounding (step 5)
  return z;
}

void expect_final(const RowOut& o, const std::vector<int32_t>& ids,
                  const std::vector<double>& probs) {
  ASSERT_EQ(o.final_count, static_cast<int32_t>(ids.size()));
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_EQ(o.final_ids[i], ids[i]) << "final entry " << i;
    EXPECT_NEAR(o.final_probs[i], probs[i], 1e-6) << "final entry " << i;
    sum += o.final_probs[i];
  }
  EXPECT_NEAR(sum, 1.0, 1e-5);
}

// ---------------------------------------------------------------------------------------------
// Step 1: mask
// ---------------------------------------------------------------------------------------------

TEST(Rules, MaskBitmaskTwoWords) {
  // V = 40, two mask words. Allowed: token 3 (word 0 bit 3) and token 33 (word 1 bit 1).
  // Logits: 100 everywhere except x_3 = 4, x_33 = 5. The 100s are all masked.
  std::vector<float> x(40, 100.0f);
  x[3] = 4.0f;
  x[33] = 5.0f;
  const std::vector<int32_t> mask = {1 << 3, 1 << 1};
  {
    // Greedy: argmax over {3: 4, 33: 5} = 33.
    OneSlot s(greedy_params(2), 40);
    const RowOut raw = s.sample(x, LogprobMode::kRaw, &mask);
    EXPECT_EQ(raw.token, 33);
    EXPECT_EQ(raw.status, kStatusOk);
    // Raw logprob is before the mask (semantics.md 1): 5 - log(38 e^100 + e^4 + e^5);
    // rank counts raw logits >= 5: the 38 hundreds and itself = 39.
    EXPECT_LP(raw.logprob, 5.0 - lse({100 + std::log(38.0), 4.0, 5.0}));
    EXPECT_EQ(raw.rank, 39);
    // Raw top-2: the first two 100s by id: 0 and 1, each 100 - lse.
    EXPECT_EQ(raw.top_ids[0], 0);
    EXPECT_EQ(raw.top_ids[1], 1);
    EXPECT_LP(raw.top_lp[0], 100.0 - lse({100 + std::log(38.0), 4.0, 5.0}));
    // Processed (greedy: T = 1) is after the mask: 5 - log(e^4 + e^5) = -log(1 + e^-1).
    const RowOut pr = s.sample(x, LogprobMode::kProcessed, &mask);
    EXPECT_EQ(pr.token, 33);
    EXPECT_LP(pr.logprob, -std::log1p(std::exp(-1.0)));
    EXPECT_EQ(pr.rank, 1);
    EXPECT_EQ(pr.top_ids[0], 33);
    EXPECT_EQ(pr.top_ids[1], 3);
    EXPECT_LP(pr.top_lp[1], -1.0 - std::log1p(std::exp(-1.0)));
  }
  {
    // Random, T = 1: the kept set is {33, 3} with probabilities e/(1+e), 1/(1+e).
    OneSlot s(random_params(1.0f, 77), 40);
    for (int i = 0; i < 12; ++i) {
      const uint64_t step = s.step();
      const RowOut o = s.sample(x, LogprobMode::kFinal, &mask);
      const HandPick h = hand_gumbel(to_double(x), {3, 33}, 77, step, 0);
      ASSERT_GT(h.margin, 1e-4);
      EXPECT_EQ(o.token, h.token) << "step " << step;
      expect_final(o, {33, 3}, {1.0 / (1.0 + std::exp(-1.0)), 1.0 / (1.0 + std::exp(1.0))});
    }
  }
}

TEST(Rules, MaskBitmaskSignBitAndRowIndex) {
  // V = 40, logits x_t = t / 8 (argmax 39). Mask rows:
  //   row 0: word0 = 0x80000000 (bit 31: token 31), word1 = 0x1 (token 32)
  //   row 1: word0 = 0x1 (token 0 only)
  // Call rows: row 0 uses mask row 1, row 1 no mask (-1), row 2 mask row 0.
  // Greedy: row 0 -> 0, row 1 -> 39, row 2 -> argmax{31: 3.875, 32: 4} = 32.
  const int32_t vocab = 40;
  std::vector<float> row(vocab);
  for (int t = 0; t < vocab; ++t) row[t] = static_cast<float>(t) / 8.0f;
  std::vector<float> logits;
  for (int r = 0; r < 3; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const std::vector<int32_t> masks = {static_cast<int32_t>(0x80000000u), 0x1, 0x1, 0x0};
  const std::vector<int32_t> row_index = {1, -1, 0};
  Sampler s(make_config(vocab));
  for (int32_t slot = 0; slot < 3; ++slot) s.admit(slot, greedy_params(), &kDummyToken, 0);
  BitmaskView bm;
  bm.data = masks.data();
  bm.rows = 2;
  bm.words = 2;
  bm.row_stride = 2;
  bm.row_index = row_index.data();
  const auto res = run_sample(s, f32_view(logits, 3, vocab, vocab), nullptr, bm, CallOptions{});
  EXPECT_EQ(res[0].token, 0);
  EXPECT_EQ(res[1].token, 39);
  EXPECT_EQ(res[2].token, 32);
  // Now make token 31 the larger: row 2 -> 31 (the sign bit of word 0 allows it).
  std::vector<float> logits2 = logits;
  logits2[2 * vocab + 31] = 10.0f;
  const auto res2 = run_sample(s, f32_view(logits2, 3, vocab, vocab), nullptr, bm, CallOptions{});
  EXPECT_EQ(res2[2].token, 31);
  for (const auto& r : res2) EXPECT_EQ(r.status, kStatusOk);
}

TEST(Rules, MaskBannedAndAllowed) {
  {
    // Banned {1, 3}: x = [0, 9, 1, 8, 2, 0, 0, 0] -> best of {0:0, 2:1, 4:2, 5..7:0} = 4.
    RequestParams p = greedy_params();
    p.banned_tokens = {1, 3};
    OneSlot s(p, 8);
    EXPECT_EQ(s.sample({0, 9, 1, 8, 2, 0, 0, 0}).token, 4);
  }
  {
    // Allowed {5, 6}: x = [9, 9, 9, 9, 9, 1, 2, 9] -> 6.
    RequestParams p = greedy_params();
    p.allowed_tokens = {5, 6};
    OneSlot s(p, 8);
    EXPECT_EQ(s.sample({9, 9, 9, 9, 9, 1, 2, 9}).token, 6);
  }
  {
    // Allowed {5, 6} and banned {6}: only 5.
    RequestParams p = greedy_params();
    p.allowed_tokens = {5, 6};
    p.banned_tokens = {6};
    OneSlot s(p, 8);
    EXPECT_EQ(s.sample({9, 9, 9, 9, 9, 1, 2, 9}).token, 5);
  }
  {
    // Random, allowed {5, 6}: the kept set is [6, 5] with e^2/(e+e^2) = 1/(1+e^-1) and
    // 1/(1+e).
    RequestParams p = random_params(1.0f, 5);
    p.allowed_tokens = {5, 6};
    OneSlot s(p, 8);
    for (int i = 0; i < 8; ++i) {
      const RowOut o = s.sample({9, 9, 9, 9, 9, 1, 2, 9}, LogprobMode::kFinal);
      EXPECT_TRUE(o.token == 5 || o.token == 6) << o.token;
      expect_final(o, {6, 5}, {1.0 / (1.0 + std::exp(-1.0)), 1.0 / (1.0 + std::exp(1.0))});
    }
  }
}

TEST(Rules, MaskPaddedVocab) {
  // V = 8 but rows are 12 columns wide with a stride of 16. Columns 8..11 are padding: 1e30
  // (and one NaN, id 9, which must not set the NaN status: semantics.md 6 counts ids < V only);
  // columns 12..15 lie outside the matrix and hold NaN that must never be read.
  const int32_t vocab = 8;
  std::vector<float> row(16, kNaN);
  for (int t = 0; t < 8; ++t) row[t] = 0.0f;
  for (int t = 8; t < 12; ++t) row[t] = 1e30f;
  row[9] = kNaN;
  {
    Sampler s(make_config(vocab));
    RequestParams p = random_params(1.0f, 99);
    s.admit(0, p, &kDummyToken, 0);
    std::set<int32_t> seen;
    for (int i = 0; i < 40; ++i) {
      const auto res = run_sample(s, f32_view(row, 1, 12, 16), nullptr, BitmaskView{}, {});
      ASSERT_GE(res[0].token, 0);
      ASSERT_LT(res[0].token, vocab);
      EXPECT_EQ(res[0].status, kStatusOk);
      // Raw logprob over ids < V only: 8 zeros -> -ln 8.
      EXPECT_LP(res[0].logprob, -std::log(8.0));
      // Raw rank: all 8 logits are >= 0.
      EXPECT_EQ(res[0].rank, 8);
      EXPECT_EQ(res[0].final_count, 8);
      seen.insert(res[0].token);
    }
    EXPECT_GT(seen.size(), 3u);  // uniform over 8: 40 draws hit several ids
  }
  {
    // Greedy: all eight real logits tie at 0 -> token 0 (ties to the lower id).
    Sampler s(make_config(vocab));
    s.admit(0, greedy_params(), &kDummyToken, 0);
    const auto res = run_sample(s, f32_view(row, 1, 12, 16), nullptr, BitmaskView{}, {});
    EXPECT_EQ(res[0].token, 0);
    EXPECT_EQ(res[0].status, kStatusOk);
  }
  {
    // Padding in a bf16 row: 0x7F7F (3.39e38) in columns 8..11.
    Sampler s(make_config(vocab));
    s.admit(0, greedy_params(), &kDummyToken, 0);
    std::vector<uint16_t> b(12, 0x7F7F);
    for (int t = 0; t < 8; ++t) b[t] = 0x3F80;  // 1.0
    b[6] = 0x4000;                              // 2.0 -> argmax 6
    LogitsView lv;
    lv.data = b.data();
    lv.dtype = DType::kBF16;
    lv.rows = 1;
    lv.cols = 12;
    lv.row_stride = 12;
    const auto res = run_sample(s, lv, nullptr, BitmaskView{}, {});
    EXPECT_EQ(res[0].token, 6);
  }
}

// ---------------------------------------------------------------------------------------------
// Steps 2-4: bias and penalties
// ---------------------------------------------------------------------------------------------

TEST(Rules, LogitBias) {
  {
    // Zeros plus bias {3: +2, 5: +1.5}: greedy -> 3.
    RequestParams p = greedy_params();
    p.logit_bias = {{3, 2.0f}, {5, 1.5f}};
    OneSlot s(p, 8);
    EXPECT_EQ(s.sample({0, 0, 0, 0, 0, 0, 0, 0}).token, 3);
  }
  {
    // x = [5, 4, 0 x6], bias {0: -2} -> [3, 4, 0 x6]: greedy -> 1.
    RequestParams p = greedy_params(2);
    p.logit_bias = {{0, -2.0f}};
    OneSlot s(p, 8);
    const std::vector<float> x = {5, 4, 0, 0, 0, 0, 0, 0};
    const RowOut raw = s.sample(x, LogprobMode::kRaw);
    EXPECT_EQ(raw.token, 1);
    // Raw: before the bias: 4 - log(e^5 + e^4 + 6); rank: {5, 4} >= 4 -> 2.
    EXPECT_LP(raw.logprob, 4.0 - lse({5, 4, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(raw.rank, 2);
    EXPECT_EQ(raw.top_ids[0], 0);
    EXPECT_EQ(raw.top_ids[1], 1);
    // Processed (T = 1 for greedy): after the bias: 4 - log(e^3 + e^4 + 6); rank 1.
    const RowOut pr = s.sample(x, LogprobMode::kProcessed);
    EXPECT_EQ(pr.token, 1);
    EXPECT_LP(pr.logprob, 4.0 - lse({3, 4, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(pr.rank, 1);
    EXPECT_EQ(pr.top_ids[0], 1);
    EXPECT_EQ(pr.top_ids[1], 0);
    EXPECT_LP(pr.top_lp[1], 3.0 - lse({3, 4, 0, 0, 0, 0, 0, 0}));
  }
}

TEST(Rules, RepetitionPenaltyScopes) {
  const std::vector<float> x = {2.0f, 1.8f, 0, 0, 0, 0, 0, 0};
  RequestParams p = greedy_params();
  p.repetition_penalty = 2.0f;
  {
    // Default scope (prompt + output), token 0 in the prompt: x0 = 2 / 2 = 1 < 1.8 -> 1.
    OneSlot s(p, 8, {0});
    EXPECT_EQ(s.sample(x).token, 1);
  }
  {
    // Same with token 0 in the output: 1.
    OneSlot s(p, 8, {}, {0});
    EXPECT_EQ(s.sample(x).token, 1);
  }
  RequestParams q = p;
  q.repetition_output_only = true;
  {
    // Output-only scope, token 0 only in the prompt: untouched, 2 > 1.8 -> 0.
    OneSlot s(q, 8, {0});
    EXPECT_EQ(s.sample(x).token, 0);
  }
  {
    // Output-only scope, token 0 in the output: 1.
    OneSlot s(q, 8, {}, {0});
    EXPECT_EQ(s.sample(x).token, 1);
  }
  {
    // Repeats do not compound: prompt {0, 0, 0} still gives x0 = 2 / 2 = 1 (not 0.25).
    // Processed logprob (greedy, T = 1) of token 0 = 1 - log(e^1 + e^1.8 + 6).
    RequestParams r = p;
    r.top_logprobs = 2;
    OneSlot s(r, 8, {0, 0, 0});
    const RowOut o = s.sample(x, LogprobMode::kProcessed);
    EXPECT_EQ(o.token, 1);
    EXPECT_EQ(o.top_ids[1], 0);
    EXPECT_LP(o.top_lp[1], 1.0 - lse({1.0, 1.8f, 0, 0, 0, 0, 0, 0}));
  }
  {
    // Negative logits are multiplied: x = [-1, -1.5, -3 x6], prompt {0}: x0 = -2 < -1.5 -> 1.
    const std::vector<float> neg = {-1.0f, -1.5f, -3, -3, -3, -3, -3, -3};
    OneSlot s(p, 8, {0});
    EXPECT_EQ(s.sample(neg).token, 1);
    // Output-only scope with the token in the prompt: untouched -> 0.
    OneSlot t(q, 8, {0});
    EXPECT_EQ(t.sample(neg).token, 0);
  }
  {
    // A penalty below 1 boosts: rho = 0.5, prompt {1}: x1 = 1.8 / 0.5 = 3.6 > 2 -> 1.
    RequestParams r = p;
    r.repetition_penalty = 0.5f;
    OneSlot s(r, 8, {1});
    EXPECT_EQ(s.sample(x).token, 1);
  }
}

TEST(Rules, FrequencyPresenceScopes) {
  // x = [3, 2.2, 0 x6], phi = 0.5, pi = 0.1.
  const std::vector<float> x = {3.0f, 2.2f, 0, 0, 0, 0, 0, 0};
  RequestParams p = greedy_params(2);
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.1f;
  {
    // Output {0}: c = 1: 3 - 0.5 - 0.1 = 2.4 > 2.2 -> 0. Processed logprob:
    // 2.4 - log(e^2.4 + e^2.2 + 6).
    OneSlot s(p, 8, {}, {0});
    const RowOut o = s.sample(x, LogprobMode::kProcessed);
    EXPECT_EQ(o.token, 0);
    const double x0 = (3.0f - 0.5f * 1.0f) - 0.1f;
    EXPECT_LP(o.logprob, x0 - lse({x0, 2.2f, 0, 0, 0, 0, 0, 0}));
  }
  {
    // Output {0, 0}: c = 2: 3 - 1 - 0.1 = 1.9 < 2.2 -> 1.
    OneSlot s(p, 8, {}, {0, 0});
    EXPECT_EQ(s.sample(x).token, 1);
  }
  {
    // Prompt {0, 0, 0}: the default counting scope is output only: untouched -> 0.
    OneSlot s(p, 8, {0, 0, 0});
    EXPECT_EQ(s.sample(x).token, 0);
  }
  {
    // Prompt {0} + output {0}: default c = 1 -> 2.4 -> 0.
    OneSlot s(p, 8, {0}, {0});
    EXPECT_EQ(s.sample(x).token, 0);
  }
  RequestParams q = p;
  q.penalties_include_prompt = true;
  {
    // Including the prompt: prompt {0, 0, 0}: c = 3: 3 - 1.5 - 0.1 = 1.4 -> 1.
    OneSlot s(q, 8, {0, 0, 0});
    const RowOut o = s.sample(x, LogprobMode::kProcessed);
    EXPECT_EQ(o.token, 1);
    const double x0 = (3.0f - 0.5f * 3.0f) - 0.1f;
    EXPECT_EQ(o.top_ids[1], 0);
    EXPECT_LP(o.top_lp[1], x0 - lse({x0, 2.2f, 0, 0, 0, 0, 0, 0}));
  }
  {
    // Prompt {0} + output {0}, including the prompt: c = 2 -> 1.9 -> 1.
    OneSlot s(q, 8, {0}, {0});
    EXPECT_EQ(s.sample(x).token, 1);
  }
  {
    // A negative frequency penalty rewards: phi = -5, output {2}: x2 = 0 + 5 = 5 -> 2.
    RequestParams r = greedy_params();
    r.frequency_penalty = -5.0f;
    OneSlot s(r, 8, {}, {2});
    EXPECT_EQ(s.sample(x).token, 2);
  }
}

TEST(Rules, PenaltiesInOrderProcessedLogprobs) {
  // x = [4, -1, 2, 0.5, 1, 0, -2, 3], bias {2: +2}, rho = 1.5, phi = 0.25, pi = 1,
  // prompt {0, 1}, output {0, 2, 2, 7}.
  const std::vector<float> in = {4, -1, 2, 0.5f, 1, 0, -2, 3};
  RequestParams p = greedy_params(8);
  p.logit_bias = {{2, 2.0f}};
  p.repetition_penalty = 1.5f;
  p.frequency_penalty = 0.25f;
  p.presence_penalty = 1.0f;
  {
    // Default scopes: repetition over prompt + output = {0, 1, 2, 7}; counts over the output:
    // c0 = 1, c2 = 2, c7 = 1.
    //   x0 = 4 / 1.5 - 0.25 - 1            = 1.41667
    //   x1 = -1 * 1.5                        = -1.5
    //   x2 = (2 + 2) / 1.5 - 0.5 - 1         = 1.16667
    //   x3 = 0.5, x4 = 1, x5 = 0, x6 = -2
    //   x7 = 3 / 1.5 - 0.25 - 1              = 0.75
    // Greedy -> 0; processed (T = 1) order: 0, 2, 4, 7, 3, 5, 1, 6.
    std::vector<float> x(8);
    x[0] = (4.0f / 1.5f - 0.25f * 1.0f) - 1.0f;
    x[1] = -1.0f * 1.5f;
    x[2] = ((2.0f + 2.0f) / 1.5f - 0.25f * 2.0f) - 1.0f;
    x[3] = 0.5f;
    x[4] = 1.0f;
    x[5] = 0.0f;
    x[6] = -2.0f;
    x[7] = (3.0f / 1.5f - 0.25f * 1.0f) - 1.0f;
    OneSlot s(p, 8, {0, 1}, {0, 2, 2, 7});
    const RowOut o = s.sample(in, LogprobMode::kProcessed);
    EXPECT_EQ(o.token, 0);
    EXPECT_EQ(o.rank, 1);
    const double l = lse(to_double(x));
    const std::vector<int32_t> order = {0, 2, 4, 7, 3, 5, 1, 6};
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(o.top_ids[i], order[i]) << i;
      EXPECT_LP(o.top_lp[i], x[order[i]] - l);
    }
    EXPECT_LP(o.logprob, x[0] - l);
  }
  {
    // Flags flipped: repetition over the output only {0, 2, 7}; counts over prompt + output:
    // c0 = 2, c1 = 1, c2 = 2, c7 = 1.
    //   x0 = 4 / 1.5 - 0.5 - 1     = 1.16667
    //   x1 = -1 - 0.25 - 1         = -2.25   (not in the repetition scope)
    //   x2 = 4 / 1.5 - 0.5 - 1     = 1.16667 (the same fp32 value as x0: a tie)
    //   x7 = 3 / 1.5 - 0.25 - 1    = 0.75
    // Greedy: tie of 0 and 2 -> 0. Order: 0, 2, 4, 7, 3, 5, 6, 1.
    RequestParams q = p;
    q.repetition_output_only = true;
    q.penalties_include_prompt = true;
    std::vector<float> x(8);
    x[0] = (4.0f / 1.5f - 0.25f * 2.0f) - 1.0f;
    x[1] = (-1.0f - 0.25f * 1.0f) - 1.0f;
    x[2] = ((2.0f + 2.0f) / 1.5f - 0.25f * 2.0f) - 1.0f;
    x[3] = 0.5f;
    x[4] = 1.0f;
    x[5] = 0.0f;
    x[6] = -2.0f;
    x[7] = (3.0f / 1.5f - 0.25f * 1.0f) - 1.0f;
    ASSERT_EQ(x[0], x[2]);
    OneSlot s(q, 8, {0, 1}, {0, 2, 2, 7});
    const RowOut o = s.sample(in, LogprobMode::kProcessed);
    EXPECT_EQ(o.token, 0);
    // Rank counts scores >= the token's: x0 and x2 -> 2.
    EXPECT_EQ(o.rank, 2);
    const double l = lse(to_double(x));
    const std::vector<int32_t> order = {0, 2, 4, 7, 3, 5, 6, 1};
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(o.top_ids[i], order[i]) << i;
      EXPECT_LP(o.top_lp[i], x[order[i]] - l);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Steps 5 and 9: temperature, greedy
// ---------------------------------------------------------------------------------------------

TEST(Rules, GreedyTiesToLowerIdAndIgnoresNoise) {
  // x = [1, 3, 2, 3, 0, -1, 2.5, 3]: the max 3 is at ids 1, 3, 7 -> 1, at every step, whatever
  // the truncation parameters say (greedy rows skip steps 6-8).
  RequestParams p = greedy_params();
  p.top_k = 2;
  p.top_p = 0.5f;
  p.min_p = 0.5f;
  p.seed = 4242;
  OneSlot s(p, 8);
  for (int i = 0; i < 10; ++i) {
    const RowOut o = s.sample({1, 3, 2, 3, 0, -1, 2.5f, 3});
    EXPECT_EQ(o.token, 1);
    EXPECT_EQ(o.status, kStatusOk);
  }
}

TEST(Rules, TemperatureInProcessedLogprobs) {
  // x = [2, 1, 0, -1, 0.5, 0, 0, 0], T = 0.5, top_k = 1: token 0 for sure (the first of the
  // order). Processed = log_softmax(z) before truncation, z = 2x = [4, 2, 0, -2, 1, 0, 0, 0].
  const std::vector<float> x = {2, 1, 0, -1, 0.5f, 0, 0, 0};
  RequestParams p = random_params(0.5f, 3, 4);
  p.top_k = 1;
  OneSlot s(p, 8);
  const double lz = lse({4, 2, 0, -2, 1, 0, 0, 0});
  const RowOut pr = s.sample(x, LogprobMode::kProcessed);
  EXPECT_EQ(pr.token, 0);
  EXPECT_LP(pr.logprob, 4.0 - lz);
  EXPECT_EQ(pr.rank, 1);
  // Top-4 processed: 0 (4), 1 (2), 4 (1), then the tie at 0 among 2, 5, 6, 7 -> 2.
  EXPECT_EQ(pr.top_ids[0], 0);
  EXPECT_EQ(pr.top_ids[1], 1);
  EXPECT_EQ(pr.top_ids[2], 4);
  EXPECT_EQ(pr.top_ids[3], 2);
  EXPECT_LP(pr.top_lp[1], 2.0 - lz);
  EXPECT_LP(pr.top_lp[2], 1.0 - lz);
  EXPECT_LP(pr.top_lp[3], 0.0 - lz);
  // Raw ignores T: 2 - log(e^2 + e + e^-1 + e^0.5 + 4).
  const RowOut raw = s.sample(x, LogprobMode::kRaw);
  EXPECT_EQ(raw.token, 0);
  EXPECT_LP(raw.logprob, 2.0 - lse({2, 1, 0, -1, 0.5, 0, 0, 0}));
  // Final: the kept set is {0} alone: logprob 0, rank 1, top-N = [0, -1, -1, -1].
  const RowOut fin = s.sample(x, LogprobMode::kFinal);
  EXPECT_EQ(fin.token, 0);
  EXPECT_LP(fin.logprob, 0.0);
  EXPECT_EQ(fin.rank, 1);
  EXPECT_EQ(fin.top_ids[0], 0);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(fin.top_ids[i], -1);
    EXPECT_LP(fin.top_lp[i], kNegInfD);
  }
  expect_final(fin, {0}, {1.0});
}

TEST(Rules, RandomRowIsTheGumbelMaxOfZ) {
  // x = [0.5, -1.25, 3, 2.75, -0.125, 1, 0, 2.5], T = 0.7, no truncation: the token is
  // argmax_t (x_t / T + G_t) with G from (seed, step, kind 0, position 0).
  const std::vector<float> x = {0.5f, -1.25f, 3.0f, 2.75f, -0.125f, 1.0f, 0.0f, 2.5f};
  const uint64_t seed = 0x1234567890abcdefull;
  RequestParams p = random_params(0.7f, seed);
  p.initial_step = 1000;
  OneSlot s(p, 8);
  const std::vector<float> z = divide(x, 0.7f);
  std::set<int32_t> seen;
  for (int i = 0; i < 40; ++i) {
    const uint64_t step = s.step();
    EXPECT_EQ(step, 1000u + i);
    const HandPick h = hand_gumbel(to_double(z), {0, 1, 2, 3, 4, 5, 6, 7}, seed, step, 0);
    const RowOut o = s.sample(x);
    seen.insert(o.token);
    if (h.margin < 1e-4) continue;  // a near-tie: SPEC.md section 4 allows either
    EXPECT_EQ(o.token, h.token) << "step " << step;
  }
  EXPECT_GE(seen.size(), 3u);
  // With top_k = 3 the kept set is {2, 3, 7} and the argmax runs over those alone.
  RequestParams q = p;
  q.top_k = 3;
  OneSlot t(q, 8);
  for (int i = 0; i < 20; ++i) {
    const uint64_t step = t.step();
    const HandPick h = hand_gumbel(to_double(z), {2, 3, 7}, seed, step, 0);
    const RowOut o = t.sample(x);
    if (h.margin < 1e-4) continue;
    EXPECT_EQ(o.token, h.token) << "step " << step;
  }
}

// ---------------------------------------------------------------------------------------------
// Steps 6-8: min-p, top-k, top-p (read off the final distribution, which does not depend on the
// noise)
// ---------------------------------------------------------------------------------------------

TEST(Rules, MinPOneKeepsTheMaxTiedSet) {
  // x = [1, 3, 3, 2, 3, 0, 0, 0], min_p = 1: keep z >= z_max + ln 1 = 3: ids {1, 2, 4}, 1/3 each.
  const std::vector<float> x = {1, 3, 3, 2, 3, 0, 0, 0};
  RequestParams p = random_params(1.0f, 11);
  p.min_p = 1.0f;
  OneSlot s(p, 8);
  std::set<int32_t> seen;
  for (int i = 0; i < 30; ++i) {
    const uint64_t step = s.step();
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    expect_final(o, {1, 2, 4}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    const HandPick h = hand_gumbel(to_double(x), {1, 2, 4}, 11, step, 0);
    if (h.margin > 1e-4) {
      EXPECT_EQ(o.token, h.token);
    }
    EXPECT_LP(o.logprob, -std::log(3.0));
    EXPECT_EQ(o.rank, 3);  // three kept scores >= 3
    seen.insert(o.token);
  }
  EXPECT_EQ(seen, (std::set<int32_t>{1, 2, 4}));
}

TEST(Rules, MinPThresholdAfterTemperature) {
  // x = [1, 0.5, 0.2, 0.3, -0.8, 0.95, 0.255, 0.245], T = 0.5: z = 2x =
  // [2, 1, 0.4, 0.6, -1.6, 1.9, 0.51, 0.49]. min_p = e^-1.5: keep z >= 2 - 1.5 = 0.5:
  // {0: 2, 5: 1.9, 1: 1, 3: 0.6, 6: 0.51}. (On x the threshold would be 1 - 1.5 = -0.5 and keep
  // all eight: the rule runs on z.)
  const std::vector<float> x = {1, 0.5f, 0.2f, 0.3f, -0.8f, 0.95f, 0.255f, 0.245f};
  RequestParams p = random_params(0.5f, 12);
  p.min_p = static_cast<float>(std::exp(-1.5));
  OneSlot s(p, 8);
  const std::vector<float> z = divide(x, 0.5f);
  const std::vector<int32_t> kept = {0, 5, 1, 3, 6};
  std::vector<double> e;
  double sum = 0.0;
  for (int32_t t : kept) {
    e.push_back(std::exp(static_cast<double>(z[t])));
    sum += e.back();
  }
  for (double& v : e) v /= sum;
  for (int i = 0; i < 10; ++i) {
    const uint64_t step = s.step();
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    expect_final(o, kept, e);
    const HandPick h = hand_gumbel(to_double(z), kept, 12, step, 0);
    if (h.margin > 1e-4) {
      EXPECT_EQ(o.token, h.token);
    }
  }
}

TEST(Rules, TopKExactWithTies) {
  // x = [1, 2, 2, 0.5, 2, 3, -1, 0], T = 1. The order: 5 (3), 1 (2), 2 (2), 4 (2), 0 (1),
  // 3 (0.5), 7 (0), 6 (-1).
  const std::vector<float> x = {1, 2, 2, 0.5f, 2, 3, -1, 0};
  const std::vector<int32_t> order = {5, 1, 2, 4, 0, 3, 7, 6};
  for (int32_t k : {1, 2, 3, 4, 7}) {
    RequestParams p = random_params(1.0f, 13);
    p.top_k = k;
    OneSlot s(p, 8);
    // Exactly k tokens, ties broken by id (k = 3 keeps 1 and 2 but not 4).
    const std::vector<int32_t> kept(order.begin(), order.begin() + k);
    std::vector<double> pr;
    double sum = 0.0;
    for (int32_t t : kept) sum += std::exp(static_cast<double>(x[t]));
    for (int32_t t : kept) pr.push_back(std::exp(static_cast<double>(x[t])) / sum);
    for (int i = 0; i < 4; ++i) {
      const uint64_t step = s.step();
      const RowOut o = s.sample(x, LogprobMode::kFinal);
      SCOPED_TRACE("k = " + std::to_string(k));
      expect_final(o, kept, pr);
      const HandPick h = hand_gumbel(to_double(x), kept, 13, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token);
      }
    }
  }
}

TEST(Rules, TopKDisabledValues) {
  // k >= V (8, 100) and k <= 0 (0, -1) disable top-k: the kept set is all 8 tokens.
  const std::vector<float> x = {1, 2, 2, 0.5f, 2, 3, -1, 0};
  const std::vector<int32_t> order = {5, 1, 2, 4, 0, 3, 7, 6};
  const double l = lse(to_double(x));
  std::vector<double> pr;
  for (int32_t t : order) pr.push_back(std::exp(x[t] - l));
  for (int32_t k : {8, 100, 0, -1}) {
    RequestParams p = random_params(1.0f, 14);
    p.top_k = k;
    OneSlot s(p, 8);
    SCOPED_TRACE("k = " + std::to_string(k));
    expect_final(s.sample(x, LogprobMode::kFinal), order, pr);
  }
}

// Logits whose softmax is [0.4, 0.3, 0.2, 0.1] over ids 0..3; ids 4..7 are -inf.
std::vector<float> four_token_row() {
  return {std::log(0.4f), std::log(0.3f), std::log(0.2f), std::log(0.1f),
          -kInf,          -kInf,          -kInf,          -kInf};
}

TEST(Rules, TopPCrossingTokenKept) {
  const std::vector<float> x = four_token_row();
  struct Case {
    float p;
    std::vector<int32_t> kept;
  };
  // Cumulative masses 0.4, 0.7, 0.9, 1.0: the shortest prefix reaching p, the crossing token
  // included. p = 1 disables top-p: the four finite tokens (the -inf ones have no mass).
  const Case cases[] = {
      {0.3f, {0}}, {0.6f, {0, 1}}, {0.75f, {0, 1, 2}}, {0.95f, {0, 1, 2, 3}}, {1.0f, {0, 1, 2, 3}}};
  const double mass[] = {0.4, 0.3, 0.2, 0.1};
  for (const Case& c : cases) {
    RequestParams p = random_params(1.0f, 15);
    p.top_p = c.p;
    OneSlot s(p, 8);
    double sum = 0.0;
    for (int32_t t : c.kept) sum += mass[t];
    std::vector<double> pr;
    for (int32_t t : c.kept) pr.push_back(mass[t] / sum);
    SCOPED_TRACE("p = " + std::to_string(c.p));
    for (int i = 0; i < 4; ++i) {
      const uint64_t step = s.step();
      const RowOut o = s.sample(x, LogprobMode::kFinal);
      expect_final(o, c.kept, pr);
      const HandPick h = hand_gumbel(to_double(x), c.kept, 15, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token);
      }
    }
  }
}

TEST(Rules, TopPRenormalisesAfterMinPAndTopK) {
  const std::vector<float> x = four_token_row();
  {
    // top_k = 2 keeps {0, 1}, renormalised [4/7, 3/7]; p = 0.5: 4/7 = 0.571 >= 0.5 -> {0}.
    RequestParams p = random_params(1.0f, 16);
    p.top_k = 2;
    p.top_p = 0.5f;
    OneSlot s(p, 8);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.token, 0);
    expect_final(o, {0}, {1.0});
  }
  {
    // Without top-k, p = 0.5 keeps {0, 1} (0.4 < 0.5 <= 0.7), [4/7, 3/7].
    RequestParams p = random_params(1.0f, 16);
    p.top_p = 0.5f;
    OneSlot s(p, 8);
    expect_final(s.sample(x, LogprobMode::kFinal), {0, 1}, {4.0 / 7, 3.0 / 7});
  }
  {
    // min_p = 0.6 keeps p_t >= 0.24: {0, 1}, renormalised [4/7, 3/7]; p = 0.5 -> {0}.
    RequestParams p = random_params(1.0f, 16);
    p.min_p = 0.6f;
    p.top_p = 0.5f;
    OneSlot s(p, 8);
    expect_final(s.sample(x, LogprobMode::kFinal), {0}, {1.0});
  }
}

TEST(Rules, TopPJointDiffersFromSequential) {
  const std::vector<float> x = four_token_row();
  {
    // Joint (SGLang): the top-p prefix on softmax(z) over all tokens: p = 0.5 -> {0, 1};
    // top_k = 2 -> {0, 1}; the intersection {0, 1}, renormalised [4/7, 3/7].
    // (Sequential gave {0} above.)
    RequestParams p = random_params(1.0f, 17);
    p.top_k = 2;
    p.top_p = 0.5f;
    p.top_p_joint = true;
    OneSlot s(p, 8);
    for (int i = 0; i < 6; ++i) {
      const uint64_t step = s.step();
      const RowOut o = s.sample(x, LogprobMode::kFinal);
      expect_final(o, {0, 1}, {4.0 / 7, 3.0 / 7});
      const HandPick h = hand_gumbel(to_double(x), {0, 1}, 17, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token);
      }
    }
  }
  {
    // Joint with min_p = 0.6 ({0, 1}) and p = 0.5 ({0, 1} on the full softmax): {0, 1}.
    RequestParams p = random_params(1.0f, 17);
    p.min_p = 0.6f;
    p.top_p = 0.5f;
    p.top_p_joint = true;
    OneSlot s(p, 8);
    expect_final(s.sample(x, LogprobMode::kFinal), {0, 1}, {4.0 / 7, 3.0 / 7});
  }
  {
    // Joint where top-p binds: top_k = 3 ({0, 1, 2}), p = 0.5 ({0, 1}) -> {0, 1}; the
    // sequential rule agrees here (renormalised [4/9, 3/9, 2/9]: 0.44 < 0.5 <= 0.78).
    for (bool joint : {true, false}) {
      RequestParams p = random_params(1.0f, 17);
      p.top_k = 3;
      p.top_p = 0.5f;
      p.top_p_joint = joint;
      OneSlot s(p, 8);
      expect_final(s.sample(x, LogprobMode::kFinal), {0, 1}, {4.0 / 7, 3.0 / 7});
    }
  }
}

TEST(Rules, MostLikelyTokenAlwaysSurvives) {
  // x = [1, 3, 3, 2, 3, 0, 0, 0]: the first of the order is id 1 (3, lowest id among 1, 2, 4).
  const std::vector<float> x = {1, 3, 3, 2, 3, 0, 0, 0};
  {
    // A tiny top_p keeps the first token alone.
    RequestParams p = random_params(1.0f, 18);
    p.top_p = 1e-6f;
    OneSlot s(p, 8);
    for (int i = 0; i < 5; ++i) {
      const RowOut o = s.sample(x, LogprobMode::kFinal);
      EXPECT_EQ(o.token, 1);
      expect_final(o, {1}, {1.0});
    }
  }
  {
    // All three rules at their tightest: min_p = 1 ({1, 2, 4}), top_k = 1 ({1}), top_p = 0.01.
    RequestParams p = random_params(1.0f, 18);
    p.min_p = 1.0f;
    p.top_k = 1;
    p.top_p = 0.01f;
    OneSlot s(p, 8);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.token, 1);
    expect_final(o, {1}, {1.0});
  }
  {
    // Same with the joint rule.
    RequestParams p = random_params(1.0f, 18);
    p.min_p = 1.0f;
    p.top_k = 1;
    p.top_p = 0.01f;
    p.top_p_joint = true;
    OneSlot s(p, 8);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.token, 1);
    expect_final(o, {1}, {1.0});
  }
  {
    // min_p = 1 then top_p = 0.5 on the renormalised {1, 2, 4} (1/3 each): 1/3 < 0.5 <= 2/3
    // -> {1, 2}, [1/2, 1/2].
    RequestParams p = random_params(1.0f, 18);
    p.min_p = 1.0f;
    p.top_p = 0.5f;
    OneSlot s(p, 8);
    expect_final(s.sample(x, LogprobMode::kFinal), {1, 2}, {0.5, 0.5});
  }
}

// ---------------------------------------------------------------------------------------------
// Special values (SPEC.md section 5)
// ---------------------------------------------------------------------------------------------

TEST(Rules, PosInfLogitsShareMass) {
  // x = [0, +inf, 5, +inf, 0, 0, 0, 0]: ids 1 and 3 share all the mass, 1/2 each.
  const std::vector<float> x = {0, kInf, 5, kInf, 0, 0, 0, 0};
  const double half = -std::log(2.0);
  {
    RequestParams p = random_params(1.0f, 19, 4);
    OneSlot s(p, 8);
    for (int i = 0; i < 16; ++i) {
      // The token is argmax G_t over {1, 3} (SPEC.md section 2 step 8).
      const uint64_t step = s.step();
      const HandPick h = hand_gumbel(to_double(x), {0, 1, 2, 3, 4, 5, 6, 7}, 19, step, 0);
      const RowOut o = s.sample(x, static_cast<LogprobMode>(i % 3));
      EXPECT_EQ(o.status, kStatusOk);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token) << "step " << step;
      }
      ASSERT_TRUE(o.token == 1 || o.token == 3);
      // Every mode: logprob -log 2 (n_inf = 2); rank: both +inf scores are >= it -> 2.
      EXPECT_LP(o.logprob, half);
      EXPECT_EQ(o.rank, 2);
      // Top-4: [1, 3] then padding (the other tokens have probability 0, logprob -inf).
      EXPECT_EQ(o.top_ids[0], 1);
      EXPECT_EQ(o.top_ids[1], 3);
      EXPECT_LP(o.top_lp[0], half);
      EXPECT_LP(o.top_lp[1], half);
      EXPECT_EQ(o.top_ids[2], -1);
      EXPECT_EQ(o.top_ids[3], -1);
      EXPECT_LP(o.top_lp[2], kNegInfD);
      EXPECT_LP(o.top_lp[3], kNegInfD);
      // The final distribution: 1 and 3 first with 1/2 each. Whether the finite tokens (with
      // probability e^x / inf = 0) are listed after them is left open by SPEC.md; if they are,
      // their probability is 0.
      ASSERT_GE(o.final_count, 2);
      ASSERT_LE(o.final_count, 8);
      EXPECT_EQ(o.final_ids[0], 1);
      EXPECT_EQ(o.final_ids[1], 3);
      EXPECT_EQ(o.final_probs[0], 0.5f);
      EXPECT_EQ(o.final_probs[1], 0.5f);
      for (int j = 2; j < o.final_count; ++j) EXPECT_EQ(o.final_probs[j], 0.0f);
    }
  }
  {
    // T = 0.25 leaves +inf at +inf; top_k = 1 keeps id 1 only.
    RequestParams p = random_params(0.25f, 19);
    p.top_k = 1;
    OneSlot s(p, 8);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.token, 1);
    expect_final(o, {1}, {1.0});
  }
  {
    // Greedy: the tie of +infs goes to id 1; raw logprob -log 2, rank 2.
    OneSlot s(greedy_params(), 8);
    const RowOut o = s.sample(x, LogprobMode::kRaw);
    EXPECT_EQ(o.token, 1);
    EXPECT_LP(o.logprob, half);
    EXPECT_EQ(o.rank, 2);
  }
}

TEST(Rules, NaNLogitSetsStatusAndIsSkipped) {
  {
    // x = [0, NaN, 2, 1, 0, 0, 0, 0]: greedy -> 2, status bit 0. Raw logprob treats NaN as
    // -inf: 2 - log(5 e^0 + e^1 + e^2).
    OneSlot s(greedy_params(), 8);
    const RowOut o = s.sample({0, kNaN, 2, 1, 0, 0, 0, 0});
    EXPECT_EQ(o.token, 2);
    EXPECT_EQ(o.status, kStatusNaN);
    EXPECT_LP(o.logprob, 2.0 - std::log(5.0 + std::exp(1.0) + std::exp(2.0)));
    EXPECT_EQ(o.rank, 1);
  }
  {
    // Random with a dominant token: [NaN, 50, 0 x6]: 50 + G >= 47.2 > 0 + 22.9 -> 1.
    OneSlot s(random_params(1.0f, 20), 8);
    for (int i = 0; i < 5; ++i) {
      const RowOut o = s.sample({kNaN, 50, 0, 0, 0, 0, 0, 0}, LogprobMode::kFinal);
      EXPECT_EQ(o.token, 1);
      EXPECT_EQ(o.status, kStatusNaN);
      // Final distribution: the NaN token is never kept.
      ASSERT_EQ(o.final_count, 7);
      for (int j = 0; j < 7; ++j) EXPECT_NE(o.final_ids[j], 0);
    }
  }
  {
    // A NaN on a banned token still sets the status (semantics.md 6).
    RequestParams p = greedy_params();
    p.banned_tokens = {0};
    OneSlot s(p, 8);
    const RowOut o = s.sample({kNaN, 1, 2, 0, 0, 0, 0, 0});
    EXPECT_EQ(o.token, 2);
    EXPECT_EQ(o.status, kStatusNaN);
  }
}

TEST(Rules, NoValidToken) {
  auto expect_none = [](const RowOut& o, int32_t status) {
    EXPECT_EQ(o.token, -1);
    EXPECT_EQ(o.status, status);
    // semantics.md 4: logprob -inf, rank 0.
    EXPECT_LP(o.logprob, kNegInfD);
    EXPECT_EQ(o.rank, 0);
    EXPECT_EQ(o.final_count, 0);
  };
  const std::vector<float> x = {0, 5, 1, 0, 0, 0, 0, 0};
  for (float t : {0.0f, 1.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(t));
    {
      // Allowed {3} and banned {3}: everything masked.
      RequestParams p = random_params(t, 21, 2);
      p.allowed_tokens = {3};
      p.banned_tokens = {3};
      OneSlot s(p, 8);
      const RowOut raw = s.sample(x, LogprobMode::kRaw);
      expect_none(raw, kStatusNoValidToken);
      // semantics.md 4: the top-N is still filled from the mode's distribution; raw mode holds
      // the masked tokens: [1 (5), 2 (1)].
      EXPECT_EQ(raw.top_ids[0], 1);
      EXPECT_EQ(raw.top_ids[1], 2);
      EXPECT_LP(raw.top_lp[0], 5.0 - lse({0, 5, 1, 0, 0, 0, 0, 0}));
      EXPECT_LP(raw.top_lp[1], 1.0 - lse({0, 5, 1, 0, 0, 0, 0, 0}));
      // Processed: every score is -inf: padding only.
      const RowOut pr = s.sample(x, LogprobMode::kProcessed);
      expect_none(pr, kStatusNoValidToken);
      EXPECT_EQ(pr.top_ids[0], -1);
      EXPECT_EQ(pr.top_ids[1], -1);
      EXPECT_LP(pr.top_lp[0], kNegInfD);
    }
    {
      // A grammar mask with no bit set.
      OneSlot s(random_params(t, 21), 8);
      const std::vector<int32_t> mask = {0};
      expect_none(s.sample(x, LogprobMode::kRaw, &mask), kStatusNoValidToken);
    }
    {
      // Every logit -inf.
      OneSlot s(random_params(t, 21), 8);
      expect_none(s.sample(std::vector<float>(8, -kInf)), kStatusNoValidToken);
    }
    {
      // Every logit NaN: both bits.
      OneSlot s(random_params(t, 21), 8);
      expect_none(s.sample(std::vector<float>(8, kNaN)), kStatusNoValidToken | kStatusNaN);
    }
    {
      // A NaN and everything else masked: both bits.
      RequestParams p = random_params(t, 21);
      p.allowed_tokens = {0};
      OneSlot s(p, 8);
      expect_none(s.sample({kNaN, 1, 1, 1, 1, 1, 1, 1}), kStatusNoValidToken | kStatusNaN);
    }
  }
}

TEST(Rules, BadRowsDoNotAffectOthers) {
  // Four rows in one call: a NaN row, an all-masked row, an all -inf row and a plain row. The
  // plain row's results equal those of the same request alone.
  const int32_t vocab = 8;
  const std::vector<float> plain = {0.5f, -1.25f, 3.0f, 2.75f, -0.125f, 1.0f, 0.0f, 2.5f};
  std::vector<float> logits = {kNaN, 50, 0, 0, 0, 0, 0, 0};  // row 0: NaN, token 1
  logits.insert(logits.end(), plain.begin(), plain.end());   // row 1: slot 1, banned all
  for (int i = 0; i < 8; ++i) logits.push_back(-kInf);       // row 2: all -inf
  logits.insert(logits.end(), plain.begin(), plain.end());   // row 3: plain
  RequestParams banned_all = random_params(1.0f, 1);
  banned_all.banned_tokens = {0, 1, 2, 3, 4, 5, 6, 7};
  const RequestParams plain_p = random_params(0.9f, 31337, 3);
  Sampler s(make_config(vocab));
  s.admit(0, random_params(1.0f, 2), &kDummyToken, 0);
  s.admit(1, banned_all, &kDummyToken, 0);
  s.admit(2, random_params(1.0f, 3), &kDummyToken, 0);
  s.admit(3, plain_p, &kDummyToken, 0);
  CallOptions opt;
  opt.logprob_mode = LogprobMode::kProcessed;
  const auto res = run_sample(s, f32_view(logits, 4, vocab, vocab), nullptr, BitmaskView{}, opt);
  EXPECT_EQ(res[0].token, 1);
  EXPECT_EQ(res[0].status, kStatusNaN);
  EXPECT_EQ(res[1].token, -1);
  EXPECT_EQ(res[1].status, kStatusNoValidToken);
  EXPECT_EQ(res[2].token, -1);
  EXPECT_EQ(res[2].status, kStatusNoValidToken);
  Sampler alone(make_config(vocab));
  alone.admit(0, plain_p, &kDummyToken, 0);
  const auto solo =
      run_sample(alone, f32_view(plain, 1, vocab, vocab), nullptr, BitmaskView{}, opt);
  EXPECT_EQ(res[3].token, solo[0].token);
  EXPECT_EQ(res[3].status, kStatusOk);
  EXPECT_EQ(res[3].logprob, solo[0].logprob);
  EXPECT_EQ(res[3].rank, solo[0].rank);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(res[3].top_ids[i], solo[0].top_ids[i]);
  // And by hand: argmax of z + G with z = x / 0.9 at step 0.
  const HandPick h =
      hand_gumbel(to_double(divide(plain, 0.9f)), {0, 1, 2, 3, 4, 5, 6, 7}, 31337, 0, 0);
  if (h.margin > 1e-4) {
    EXPECT_EQ(res[3].token, h.token);
  }
}

// ---------------------------------------------------------------------------------------------
// Dtypes
// ---------------------------------------------------------------------------------------------

LogitsView half_view(const std::vector<uint16_t>& v, DType dt, int64_t rows, int64_t cols) {
  LogitsView lv;
  lv.data = v.data();
  lv.dtype = dt;
  lv.rows = rows;
  lv.cols = cols;
  lv.row_stride = cols;
  return lv;
}

TEST(Rules, Bf16PlateauTiesById) {
  const int32_t vocab = 8;
  {
    // All eight equal (0x3F80 = 1.0): greedy -> 0.
    Sampler s(make_config(vocab));
    s.admit(0, greedy_params(), &kDummyToken, 0);
    const std::vector<uint16_t> row(8, 0x3F80);
    EXPECT_EQ(run_sample(s, half_view(row, DType::kBF16, 1, 8), nullptr, {}, {})[0].token, 0);
  }
  {
    // Random, top_k = 3 on the plateau: the kept set is the three lowest ids, 1/3 each.
    Sampler s(make_config(vocab));
    RequestParams p = random_params(1.0f, 40);
    p.top_k = 3;
    s.admit(0, p, &kDummyToken, 0);
    const std::vector<uint16_t> row(8, 0x3F80);
    for (int i = 0; i < 10; ++i) {
      const uint64_t step = s.step(0);
      CallOptions opt;
      opt.logprob_mode = LogprobMode::kFinal;
      const RowOut o = run_sample(s, half_view(row, DType::kBF16, 1, 8), nullptr, {}, opt)[0];
      expect_final(o, {0, 1, 2}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
      const HandPick h = hand_gumbel(std::vector<double>(8, 1.0), {0, 1, 2}, 40, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token);
      }
    }
  }
  {
    // Untruncated plateau: 1/8 each, the token is argmax G.
    Sampler s(make_config(vocab));
    s.admit(0, random_params(1.0f, 41), &kDummyToken, 0);
    const std::vector<uint16_t> row(8, 0xC0A0);  // -5.0
    for (int i = 0; i < 10; ++i) {
      const uint64_t step = s.step(0);
      const RowOut o = run_sample(s, half_view(row, DType::kBF16, 1, 8), nullptr, {}, {})[0];
      EXPECT_EQ(o.final_count, 8);
      for (int j = 0; j < 8; ++j) {
        EXPECT_EQ(o.final_ids[j], j);
        EXPECT_NEAR(o.final_probs[j], 0.125, 1e-7);
      }
      const HandPick h =
          hand_gumbel(std::vector<double>(8, -5.0), {0, 1, 2, 3, 4, 5, 6, 7}, 41, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(o.token, h.token);
      }
    }
  }
  {
    // Plateau at the max only: [1, 2, 2, 2, 1, 1, 1, 1] -> greedy 1; top_k = 2 keeps {1, 2}.
    const std::vector<uint16_t> row = {0x3F80, 0x4000, 0x4000, 0x4000,
                                       0x3F80, 0x3F80, 0x3F80, 0x3F80};
    Sampler g(make_config(vocab));
    g.admit(0, greedy_params(), &kDummyToken, 0);
    EXPECT_EQ(run_sample(g, half_view(row, DType::kBF16, 1, 8), nullptr, {}, {})[0].token, 1);
    Sampler s(make_config(vocab));
    RequestParams p = random_params(1.0f, 42);
    p.top_k = 2;
    s.admit(0, p, &kDummyToken, 0);
    const RowOut o = run_sample(s, half_view(row, DType::kBF16, 1, 8), nullptr, {}, {})[0];
    expect_final(o, {1, 2}, {0.5, 0.5});
  }
}

TEST(Rules, HalfDtypesMatchFp32) {
  // Values exactly representable in fp16 and bf16, hand-encoded:
  //   0.5  -1.25  3.0  2.75  -0.125  1.0  0.0  2.5
  const std::vector<float> f32 = {0.5f, -1.25f, 3.0f, 2.75f, -0.125f, 1.0f, 0.0f, 2.5f};
  const std::vector<uint16_t> bf16 = {0x3F00, 0xBFA0, 0x4040, 0x4030,
                                      0xBE00, 0x3F80, 0x0000, 0x4020};
  const std::vector<uint16_t> fp16 = {0x3800, 0xBD00, 0x4200, 0x4180,
                                      0xB000, 0x3C00, 0x0000, 0x4100};
  RequestParams p = random_params(0.7f, 555, 3);
  p.top_p = 0.9f;
  for (LogprobMode mode : {LogprobMode::kRaw, LogprobMode::kProcessed, LogprobMode::kFinal}) {
    Sampler a(make_config(8)), b(make_config(8)), c(make_config(8));
    a.admit(0, p, &kDummyToken, 0);
    b.admit(0, p, &kDummyToken, 0);
    c.admit(0, p, &kDummyToken, 0);
    CallOptions opt;
    opt.logprob_mode = mode;
    for (int i = 0; i < 20; ++i) {
      const RowOut ra = run_sample(a, f32_view(f32, 1, 8, 8), nullptr, {}, opt)[0];
      const RowOut rb = run_sample(b, half_view(bf16, DType::kBF16, 1, 8), nullptr, {}, opt)[0];
      const RowOut rc = run_sample(c, half_view(fp16, DType::kF16, 1, 8), nullptr, {}, opt)[0];
      EXPECT_EQ(ra.token, rb.token);
      EXPECT_EQ(ra.token, rc.token);
      EXPECT_EQ(ra.logprob, rb.logprob);
      EXPECT_EQ(ra.logprob, rc.logprob);
      EXPECT_EQ(ra.rank, rb.rank);
      EXPECT_EQ(ra.rank, rc.rank);
      EXPECT_EQ(ra.final_count, rb.final_count);
      EXPECT_EQ(ra.final_count, rc.final_count);
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(ra.top_ids[j], rb.top_ids[j]);
        EXPECT_EQ(ra.top_ids[j], rc.top_ids[j]);
      }
    }
  }
  // And the greedy token of each dtype: argmax is 3.0 at id 2.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    Sampler g(make_config(8));
    g.admit(0, greedy_params(), &kDummyToken, 0);
    const auto& v = dt == DType::kBF16 ? bf16 : fp16;
    EXPECT_EQ(run_sample(g, half_view(v, dt, 1, 8), nullptr, {}, {})[0].token, 2);
  }
}

TEST(Rules, HalfDtypeSpecialValues) {
  // bf16 [NaN, 1, +inf, +inf, 1, 1, 1, 1] and the same in fp16: greedy -> 2 (the +inf tie goes
  // to the lower id), status NaN; random T = 1 -> argmax G over {2, 3}.
  const std::vector<uint16_t> bf16 = {0x7FC0, 0x3F80, 0x7F80, 0x7F80,
                                      0x3F80, 0x3F80, 0x3F80, 0x3F80};
  const std::vector<uint16_t> fp16 = {0x7E00, 0x3C00, 0x7C00, 0x7C00,
                                      0x3C00, 0x3C00, 0x3C00, 0x3C00};
  const std::vector<double> score = {kNegInfD, 1, kInf, kInf, 1, 1, 1, 1};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const auto& v = dt == DType::kBF16 ? bf16 : fp16;
    Sampler g(make_config(8));
    g.admit(0, greedy_params(), &kDummyToken, 0);
    const RowOut o = run_sample(g, half_view(v, dt, 1, 8), nullptr, {}, {})[0];
    EXPECT_EQ(o.token, 2);
    EXPECT_EQ(o.status, kStatusNaN);
    Sampler s(make_config(8));
    s.admit(0, random_params(1.0f, 43), &kDummyToken, 0);
    for (int i = 0; i < 8; ++i) {
      const uint64_t step = s.step(0);
      const RowOut r = run_sample(s, half_view(v, dt, 1, 8), nullptr, {}, {})[0];
      EXPECT_EQ(r.status, kStatusNaN);
      const HandPick h = hand_gumbel(score, {1, 2, 3, 4, 5, 6, 7}, 43, step, 0);
      if (h.margin > 1e-4) {
        EXPECT_EQ(r.token, h.token);
      }
      EXPECT_TRUE(r.token == 2 || r.token == 3);
    }
  }
  // fp16 subnormals are values like any other: [2^-24, 2^-23, 0 x6] -> greedy 1.
  const std::vector<uint16_t> sub = {0x0001, 0x0002, 0, 0, 0, 0, 0, 0x8001};
  Sampler g(make_config(8));
  g.admit(0, greedy_params(), &kDummyToken, 0);
  EXPECT_EQ(run_sample(g, half_view(sub, DType::kF16, 1, 8), nullptr, {}, {})[0].token, 1);
}

// ---------------------------------------------------------------------------------------------
// Logprob outputs
// ---------------------------------------------------------------------------------------------

TEST(Rules, LogprobRawAndProcessedGreedy) {
  // x = [1, 3, 2, 3, 0, -1, 2, 0.5], greedy -> 1 (the max 3 is at ids 1 and 3: ties to the lower
  // id).
  const std::vector<float> x = {1, 3, 2, 3, 0, -1, 2, 0.5f};
  const double l = lse(to_double(x));
  {
    OneSlot s(greedy_params(5), 8);
    const RowOut o = s.sample(x, LogprobMode::kRaw);
    EXPECT_EQ(o.token, 1);
    EXPECT_LP(o.logprob, 3.0 - l);
    EXPECT_EQ(o.rank, 2);  // ids 1 and 3 score 3 >= 3
    // Top-5 by raw logit, ties by id: 1 (3), 3 (3), 2 (2), 6 (2), 0 (1).
    const int32_t ids[5] = {1, 3, 2, 6, 0};
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(o.top_ids[i], ids[i]) << i;
      EXPECT_LP(o.top_lp[i], x[ids[i]] - l);
    }
    // Processed of a greedy row with no penalty: T = 1, the same values.
    const RowOut pr = s.sample(x, LogprobMode::kProcessed);
    EXPECT_EQ(pr.token, 1);
    EXPECT_LP(pr.logprob, 3.0 - l);
    EXPECT_EQ(pr.rank, 2);
    for (int i = 0; i < 5; ++i) EXPECT_EQ(pr.top_ids[i], ids[i]) << i;
  }
  {
    // Banned {3}: raw keeps seeing id 3 (rank 2, top list includes it); processed does not:
    // 3 - lse(x without id 3), rank 1, top-5: 1, 2, 6, 0, 7.
    RequestParams p = greedy_params(5);
    p.banned_tokens = {3};
    OneSlot s(p, 8);
    const RowOut raw = s.sample(x, LogprobMode::kRaw);
    EXPECT_EQ(raw.token, 1);
    EXPECT_EQ(raw.rank, 2);
    EXPECT_EQ(raw.top_ids[1], 3);
    const RowOut pr = s.sample(x, LogprobMode::kProcessed);
    std::vector<double> rest = to_double(x);
    rest[3] = kNegInfD;
    const double l3 = lse(rest);
    EXPECT_EQ(pr.token, 1);
    EXPECT_LP(pr.logprob, 3.0 - l3);
    EXPECT_EQ(pr.rank, 1);
    const int32_t ids[5] = {1, 2, 6, 0, 7};
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(pr.top_ids[i], ids[i]) << i;
      EXPECT_LP(pr.top_lp[i], x[ids[i]] - l3);
    }
  }
}

TEST(Rules, LogprobFinalGreedyIsOneHot) {
  // semantics.md 3: final mode on a greedy row is the one-hot at the token: logprob 0, rank 1,
  // top-N = the token alone; the sparse final distribution is that one entry.
  const std::vector<float> x = {1, 3, 2, 3, 0, -1, 2, 0.5f};
  OneSlot s(greedy_params(4), 8);
  const RowOut o = s.sample(x, LogprobMode::kFinal);
  EXPECT_EQ(o.token, 1);
  EXPECT_LP(o.logprob, 0.0);
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.top_ids[0], 1);
  EXPECT_LP(o.top_lp[0], 0.0);
  for (int i = 1; i < 4; ++i) {
    EXPECT_EQ(o.top_ids[i], -1);
    EXPECT_LP(o.top_lp[i], kNegInfD);
  }
  expect_final(o, {1}, {1.0});
  // The sparse final distribution is written in every mode (it does not depend on the mode).
  const RowOut raw = s.sample(x, LogprobMode::kRaw);
  expect_final(raw, {1}, {1.0});
}

TEST(Rules, LogprobFinalRandomKeptSet) {
  // x = [1, 3, 2, 3, 0, -1, 2, 0.5], T = 1, top_k = 3: kept {1 (3), 3 (3), 2 (2)} (2 beats 6 on
  // id). p = [e^3, e^3, e^2] / (2 e^3 + e^2).
  const std::vector<float> x = {1, 3, 2, 3, 0, -1, 2, 0.5f};
  RequestParams p = random_params(1.0f, 50, 5);
  p.top_k = 3;
  OneSlot s(p, 8);
  const double lk = lse({3, 3, 2});
  for (int i = 0; i < 12; ++i) {
    const uint64_t step = s.step();
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    const HandPick h = hand_gumbel(to_double(x), {1, 2, 3}, 50, step, 0);
    if (h.margin > 1e-4) {
      EXPECT_EQ(o.token, h.token);
    }
    ASSERT_TRUE(o.token == 1 || o.token == 2 || o.token == 3);
    if (o.token == 2) {
      EXPECT_LP(o.logprob, 2.0 - lk);
      EXPECT_EQ(o.rank, 3);  // scores >= 2 within the kept set: 3, 3, 2
    } else {
      EXPECT_LP(o.logprob, 3.0 - lk);
      EXPECT_EQ(o.rank, 2);
    }
    // Top-5 of the kept set, then padding.
    const int32_t ids[5] = {1, 3, 2, -1, -1};
    const double lps[5] = {3.0 - lk, 3.0 - lk, 2.0 - lk, kNegInfD, kNegInfD};
    for (int j = 0; j < 5; ++j) {
      EXPECT_EQ(o.top_ids[j], ids[j]) << j;
      EXPECT_LP(o.top_lp[j], lps[j]);
    }
    expect_final(o, {1, 3, 2}, {std::exp(3.0 - lk), std::exp(3.0 - lk), std::exp(2.0 - lk)});
  }
}

TEST(Rules, LogprobProcessedRandomUsesTemperature) {
  // Same row, T = 2, top_k = 3. Processed = log_softmax(x / 2) over all 8 tokens, before the
  // truncation; rank over all of z.
  const std::vector<float> x = {1, 3, 2, 3, 0, -1, 2, 0.5f};
  RequestParams p = random_params(2.0f, 51, 4);
  p.top_k = 3;
  OneSlot s(p, 8);
  const std::vector<float> z = divide(x, 2.0f);
  const double l = lse(to_double(z));
  for (int i = 0; i < 8; ++i) {
    const RowOut o = s.sample(x, LogprobMode::kProcessed);
    ASSERT_TRUE(o.token == 1 || o.token == 2 || o.token == 3);
    EXPECT_LP(o.logprob, z[o.token] - l);
    // rank over all z: token 1 or 3 -> 2; token 2: z >= 1 are ids 1, 3, 2, 6 -> 4.
    EXPECT_EQ(o.rank, o.token == 2 ? 4 : 2);
    const int32_t ids[4] = {1, 3, 2, 6};
    for (int j = 0; j < 4; ++j) {
      EXPECT_EQ(o.top_ids[j], ids[j]);
      EXPECT_LP(o.top_lp[j], z[ids[j]] - l);
    }
  }
}

TEST(Rules, LogprobTopNPaddingRaw) {
  // Raw mode with only two finite inputs: x = [0, -inf x6, 1]. Top-5: 7 (1), 0 (0), then -1 /
  // -inf.
  std::vector<float> x(8, -kInf);
  x[0] = 0.0f;
  x[7] = 1.0f;
  OneSlot s(greedy_params(5), 8);
  const RowOut o = s.sample(x, LogprobMode::kRaw);
  EXPECT_EQ(o.token, 7);
  const double l = lse({0.0, 1.0});
  EXPECT_EQ(o.top_ids[0], 7);
  EXPECT_EQ(o.top_ids[1], 0);
  EXPECT_LP(o.top_lp[0], 1.0 - l);
  EXPECT_LP(o.top_lp[1], 0.0 - l);
  for (int i = 2; i < 5; ++i) {
    EXPECT_EQ(o.top_ids[i], -1);
    EXPECT_LP(o.top_lp[i], kNegInfD);
  }
}

TEST(Rules, LogprobFarBelowTheMaxStaysFinite) {
  // x = [0, -800, -1000, 5, -inf x4]: exp(-805) underflows in double, but log_softmax is finite
  // (SPEC.md section 2: -inf padding only where fewer than N tokens have a finite log-probability).
  std::vector<float> x(8, -kInf);
  x[0] = 0.0f;
  x[1] = -800.0f;
  x[2] = -1000.0f;
  x[3] = 5.0f;
  const double l = lse({0.0, -800.0, -1000.0, 5.0});
  OneSlot s(greedy_params(5), 8);
  for (LogprobMode mode : {LogprobMode::kRaw, LogprobMode::kProcessed}) {
    const RowOut o = s.sample(x, mode);
    EXPECT_EQ(o.token, 3);
    EXPECT_LP(o.logprob, 5.0 - l);
    const int32_t ids[4] = {3, 0, 1, 2};
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(o.top_ids[i], ids[i]) << i;
      EXPECT_LP(o.top_lp[i], x[ids[i]] - l);
    }
    EXPECT_EQ(o.top_ids[4], -1);
    EXPECT_LP(o.top_lp[4], kNegInfD);
  }
}

TEST(Rules, SparseFinalDistributionOverflow) {
  // V = 16, capacity 8: an untruncated row keeps 16 tokens -> final_count 16 and the row's
  // entries are -1 / 0 (semantics.md 5). With top_k = 8 it fits: 8 entries, ids in order.
  const int32_t vocab = 16;
  std::vector<float> x(vocab);
  for (int t = 0; t < vocab; ++t) x[t] = static_cast<float>((t * 7) % 16) / 4.0f;
  // Values: t -> (7t mod 16) / 4; the order by value descending: 7t mod 16 = 15, 14, ..., 0:
  // t = 9 (63 mod 16 = 15), 2 (14), 11 (13), 4 (12), 13 (11), 6 (10), 15 (9), 8 (8), ...
  const std::vector<int32_t> top8 = {9, 2, 11, 4, 13, 6, 15, 8};
  {
    OneSlot s(random_params(1.0f, 60), vocab);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.final_count, 16);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(o.final_ids[i], -1);
      EXPECT_EQ(o.final_probs[i], 0.0f);
    }
  }
  {
    RequestParams p = random_params(1.0f, 60);
    p.top_k = 8;
    OneSlot s(p, vocab);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    std::vector<double> pr;
    double sum = 0.0;
    for (int32_t t : top8) sum += std::exp(static_cast<double>(x[t]));
    for (int32_t t : top8) pr.push_back(std::exp(static_cast<double>(x[t])) / sum);
    expect_final(o, top8, pr);
    // Probabilities are non-increasing along the list.
    for (int i = 1; i < 8; ++i) EXPECT_LE(o.final_probs[i], o.final_probs[i - 1]);
  }
  {
    // top_k = 9 overflows by one.
    RequestParams p = random_params(1.0f, 60);
    p.top_k = 9;
    OneSlot s(p, vocab);
    const RowOut o = s.sample(x, LogprobMode::kFinal);
    EXPECT_EQ(o.final_count, 9);
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(o.final_ids[i], -1);
      EXPECT_EQ(o.final_probs[i], 0.0f);
    }
  }
}

TEST(Rules, OrderTokensIsTheComparatorSort) {
  // order_tokens sorts packed keys (sort_keys.hpp); it must give exactly the order of a comparator
  // sort by (score descending, id ascending, -0 == +0), -inf dropped, on rows with ties, signed
  // zeros, infinities and sizes on both sides of the radix sort's small-row cut (256).
  std::mt19937_64 gen(11);
  for (const int n : {1, 2, 255, 256, 257, 3001, 40000, 151936}) {
    for (int shape = 0; shape < 4; ++shape) {
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<float> score(static_cast<size_t>(n));
      for (float& v : score) {
        v = normal(gen);
        if (shape == 1) v = std::round(v * 4.0f) / 4.0f;  // many ties
        if (shape == 2) v = gen() % 4 == 0 ? 0.0f : (gen() % 4 == 0 ? -0.0f : v);
        if (shape == 3) v = gen() % 5 == 0 ? -kInf : (gen() % 7 == 0 ? kInf : v);
      }
      std::vector<int32_t> want;
      for (int32_t t = 0; t < n; ++t)
        if (score[t] > -kInf) want.push_back(t);
      std::sort(want.begin(), want.end(), [&](int32_t a, int32_t b) {
        return score[a] != score[b] ? score[a] > score[b] : a < b;
      });
      EXPECT_EQ(ref::order_tokens(score), want) << "n = " << n << ", shape " << shape;
    }
  }
}

TEST(Rules, SortKeysDescendingOnEveryDigit) {
  // Keys that differ in every radix digit, and keys that share all but the lowest bits.
  std::mt19937_64 gen(12);
  for (const uint64_t high : {uint64_t{0}, uint64_t{0xABCDEF0123456789ull} & ~uint64_t{0xFFFF}}) {
    for (const size_t n : {size_t{3}, size_t{300}, size_t{5000}}) {
      std::set<uint64_t> distinct;
      while (distinct.size() < n) distinct.insert(high ? high | (gen() & 0xFFFF) : gen());
      std::vector<uint64_t> keys(distinct.begin(), distinct.end()), scratch;
      std::shuffle(keys.begin(), keys.end(), gen);
      ref::sort_keys_descending(keys, scratch);
      EXPECT_TRUE(std::equal(keys.begin(), keys.end(), distinct.rbegin())) << "n = " << n;
    }
  }
}

TEST(Rules, RowApiPieces) {
  // The reference's row-level helpers on hand cases.
  // order_tokens: score descending, id ascending, -inf dropped.
  const std::vector<float> score = {1, 3, -kInf, 3, 0, kInf};
  EXPECT_EQ(ref::order_tokens(score), (std::vector<int32_t>{5, 1, 3, 0, 4}));
  // softmax_over: +inf shares the mass.
  const auto sm = ref::softmax_over(score, {5, 1});
  ASSERT_EQ(sm.size(), 2u);
  EXPECT_DOUBLE_EQ(sm[0], 1.0);
  EXPECT_DOUBLE_EQ(sm[1], 0.0);
  const auto sm2 = ref::softmax_over({0.0f, std::log(3.0f)}, {0, 1});
  EXPECT_NEAR(sm2[0], 0.25, 1e-7);
  EXPECT_NEAR(sm2[1], 0.75, 1e-7);
  // greedy_token: ties to the lower id; -1 when nothing is finite.
  EXPECT_EQ(ref::greedy_token({1, 3, 3, -kInf}), 1);
  EXPECT_EQ(ref::greedy_token({-kInf, -kInf}), -1);
  // count_tokens: split by origin.
  const ref::TokenCounts c = ref::count_tokens({1, 1, 2}, {2, 5});
  EXPECT_EQ(c.prompt.at(1), 2);
  EXPECT_EQ(c.prompt.at(2), 1);
  EXPECT_EQ(c.output.at(2), 1);
  EXPECT_EQ(c.output.at(5), 1);
  EXPECT_EQ(c.prompt.count(5), 0u);
  // row_to_float: bf16 / fp16 decode.
  const uint16_t b[2] = {0x3F80, 0xC000};
  EXPECT_EQ(ref::row_to_float(b, DType::kBF16, 2), (std::vector<float>{1.0f, -2.0f}));
  const uint16_t h[2] = {0x3C00, 0x0001};
  EXPECT_EQ(ref::row_to_float(h, DType::kF16, 2),
            (std::vector<float>{1.0f, std::ldexp(1.0f, -24)}));
  // gumbel_argmax: the hand Gumbel-max.
  const std::vector<float> z = {0.5f, 0.1f, 0.3f, -0.2f};
  for (uint64_t step = 0; step < 10; ++step) {
    const HandPick hp = hand_gumbel(to_double(z), {0, 1, 2, 3}, 9, step, 0x00020001u);
    if (hp.margin > 1e-4) {
      EXPECT_EQ(ref::gumbel_argmax(z, {0, 1, 2, 3}, 9, step, 0x00020001u), hp.token);
    }
  }
  EXPECT_EQ(ref::gumbel_argmax(z, {}, 9, 0, 0), -1);
}

}  // namespace
