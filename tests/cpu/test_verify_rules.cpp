// Hand cases for SPEC.md section 3 (verification) through Sampler::verify on the CPU backend:
// packed cu_rows with n_r = 0..3, out_stride = max_drafts + 1. Every expectation is worked out
// from the SPEC text (and docs/semantics.md "Verification") in the comments; probabilistic
// outcomes are either certain by construction or computed here from the Philox functions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "sonic/sampler.hpp"

namespace {

using namespace sonic;

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const double kNegInfD = -std::numeric_limits<double>::infinity();
constexpr int32_t kV = 8;
constexpr int32_t kMaxDrafts = 3;
constexpr int64_t kStride = kMaxDrafts + 1;

SamplerConfig config() {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = kV;
  c.max_slots = 8;
  c.max_rows = 32;
  c.max_drafts = kMaxDrafts;
  c.max_history = 64;
  c.max_top_logprobs = 4;
  c.max_final_entries = 8;
  return c;
}

const int32_t kDummy = 0;

struct VCall {
  std::vector<std::vector<float>> rows;  // packed target rows, kV each
  std::vector<int32_t> cu_rows;
  std::vector<int32_t> slots;   // empty: request r is slot r
  std::vector<int32_t> drafts;  // packed: request r's drafts start at cu_rows[r] - r
  std::vector<int32_t> rules;   // empty: every request kOneHot
  std::vector<float> dense;     // [num_drafts, kV]
  std::vector<int32_t> sparse_ids, sparse_count;
  std::vector<float> sparse_probs;
  int64_t sparse_stride = 0;
  std::vector<int32_t> mask;  // [rows, 1 word] when given
};

struct VResult {
  std::vector<std::vector<int32_t>> tokens;  // [B][kStride]
  std::vector<int32_t> num_accepted;
  std::vector<int32_t> status;  // [rows]
  std::vector<std::vector<float>> logprob;
  std::vector<std::vector<int32_t>> rank;
  std::vector<std::vector<std::vector<int32_t>>> top_ids;  // [B][kStride][top]
  std::vector<std::vector<std::vector<float>>> top_lp;
};

// Every output asked for, or (with_logprobs false) all but the logprobs, ranks and top-N.
VResult run_verify(Sampler& s, const VCall& c, LogprobMode mode = LogprobMode::kRaw,
                   CallOptions opt = {}, bool with_logprobs = true) {
  const int32_t B = static_cast<int32_t>(c.cu_rows.size()) - 1;
  const int64_t rows = static_cast<int64_t>(c.rows.size());
  std::vector<float> logits;
  for (const auto& r : c.rows) {
    EXPECT_EQ(static_cast<int32_t>(r.size()), kV);
    logits.insert(logits.end(), r.begin(), r.end());
  }
  const int64_t top = s.config().max_top_logprobs;
  LogitsView lv;
  lv.data = logits.data();
  lv.dtype = DType::kF32;
  lv.rows = rows;
  lv.cols = kV;
  lv.row_stride = kV;
  VerifyInputs in;
  in.num_requests = B;
  in.cu_rows = c.cu_rows.data();
  in.slots = c.slots.empty() ? nullptr : c.slots.data();
  in.draft_tokens = c.drafts.empty() ? &kDummy : c.drafts.data();
  in.num_drafts_capacity = static_cast<int64_t>(c.drafts.size());
  in.rules = c.rules.empty() ? nullptr : c.rules.data();
  if (!c.dense.empty()) {
    in.draft_probs.dense = c.dense.data();
    in.draft_probs.dense_rows = static_cast<int64_t>(c.dense.size()) / kV;
    in.draft_probs.dense_stride = kV;
  }
  if (!c.sparse_ids.empty()) {
    in.draft_probs.sparse_ids = c.sparse_ids.data();
    in.draft_probs.sparse_probs = c.sparse_probs.data();
    in.draft_probs.sparse_count = c.sparse_count.data();
    in.draft_probs.sparse_rows = static_cast<int64_t>(c.sparse_count.size());
    in.draft_probs.sparse_stride = c.sparse_stride;
  }
  BitmaskView bm;
  if (!c.mask.empty()) {
    bm.data = c.mask.data();
    bm.rows = static_cast<int64_t>(c.mask.size());
    bm.words = 1;
    bm.row_stride = 1;
  }
  std::vector<int32_t> tokens(B * kStride, 0x5EED), num_acc(B, 0x5EED), status(rows, 0x5EED),
      rank(B * kStride, 0x5EED), top_ids(B * kStride * top, 0x5EED);
  std::vector<float> logprob(B * kStride, 777.0f), top_lp(B * kStride * top, 777.0f);
  VerifyOutputs out;
  out.tokens = tokens.data();
  out.num_accepted = num_acc.data();
  out.out_stride = kStride;
  out.status = status.data();
  out.logprob = logprob.data();
  out.rank = rank.data();
  out.top_ids = top_ids.data();
  out.top_logprobs = top_lp.data();
  out.top_stride = top;
  if (!with_logprobs) {
    out.logprob = nullptr;
    out.rank = nullptr;
    out.top_ids = nullptr;
    out.top_logprobs = nullptr;
  }
  opt.logprob_mode = mode;
  s.verify(lv, in, bm, out, opt);
  VResult r;
  r.num_accepted = num_acc;
  r.status = status;
  for (int32_t b = 0; b < B; ++b) {
    r.tokens.emplace_back(tokens.begin() + b * kStride, tokens.begin() + (b + 1) * kStride);
    r.logprob.emplace_back(logprob.begin() + b * kStride, logprob.begin() + (b + 1) * kStride);
    r.rank.emplace_back(rank.begin() + b * kStride, rank.begin() + (b + 1) * kStride);
    std::vector<std::vector<int32_t>> ti;
    std::vector<std::vector<float>> tl;
    for (int64_t j = 0; j < kStride; ++j) {
      const int64_t at = (b * kStride + j) * top;
      ti.emplace_back(top_ids.begin() + at, top_ids.begin() + at + top);
      tl.emplace_back(top_lp.begin() + at, top_lp.begin() + at + top);
    }
    r.top_ids.push_back(ti);
    r.top_lp.push_back(tl);
  }
  return r;
}

// A row with `hi` at id k and 0 elsewhere.
std::vector<float> peak(int32_t k, float hi = 5.0f) {
  std::vector<float> r(kV, 0.0f);
  r[k] = hi;
  return r;
}

// p uniform over ids 0..3: logits 0 there, -inf elsewhere (softmax: exactly 0.25 each).
std::vector<float> uniform4() { return {0, 0, 0, 0, -kInf, -kInf, -kInf, -kInf}; }

RequestParams greedy() {
  RequestParams p;
  p.temperature = 0.0f;
  return p;
}

RequestParams random_req(uint64_t seed, float temperature = 1.0f) {
  RequestParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

double lse(const std::vector<double>& v) {
  double m = kNegInfD;
  for (double x : v) m = std::max(m, x);
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

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

// SPEC.md section 4 by hand.
double gumbel(uint64_t seed, uint64_t step, uint32_t purp, int32_t t) {
  return detail::gumbel_from_uniform_exact(
      detail::uniform_from_word(detail::random_word(seed, step, purp, static_cast<uint32_t>(t))));
}
float acceptance_u(uint64_t seed, uint64_t step, uint32_t position) {
  return detail::uniform_from_word(
      detail::random_word(seed, step, detail::purpose(detail::Draw::kAcceptance, position), 0));
}
uint32_t sampling(uint32_t j) { return detail::purpose(detail::Draw::kSampling, j); }
uint32_t correction(uint32_t j) { return detail::purpose(detail::Draw::kCorrection, j); }

struct Pick {
  int32_t token = -1;
  double margin = std::numeric_limits<double>::infinity();
};

// argmax over ids of score[t] + G_t (ties to the lower id).
Pick gumbel_pick(const std::vector<double>& score, const std::vector<int32_t>& ids, uint64_t seed,
                 uint64_t step, uint32_t purp) {
  Pick p;
  double best = kNegInfD, second = kNegInfD;
  for (int32_t t : ids) {
    const double s = score[t] + gumbel(seed, step, purp, t);
    if (s > best) {
      second = best;
      best = s;
      p.token = t;
    } else if (s > second) {
      second = s;
    }
  }
  p.margin = best - second;
  return p;
}

void expect_tokens(const VResult& r, int32_t b, const std::vector<int32_t>& emitted,
                   int32_t accepted) {
  SCOPED_TRACE("request " + std::to_string(b));
  EXPECT_EQ(r.num_accepted[b], accepted);
  for (int64_t j = 0; j < kStride; ++j) {
    const int32_t want = j < static_cast<int64_t>(emitted.size()) ? emitted[j] : -1;
    EXPECT_EQ(r.tokens[b][j], want) << "position " << j;
  }
}

// ---------------------------------------------------------------------------------------------
// Greedy requests
// ---------------------------------------------------------------------------------------------

TEST(VerifyRules, GreedyExact) {
  // Five greedy requests (slots 0..4), n = 0, 1, 2, 3, 3. Rows are peaks (5 at one id, 0
  // elsewhere) except one tie row (5 at ids 2 and 6: argmax 2).
  //   r0 n=0: rows [5]                 -> [5]           bonus argmax p_0, accepted 0
  //   r1 n=1: drafts [2], rows [2, 4]  -> [2, 4]        d0 = argmax, then bonus 4
  //   r2 n=2: drafts [1, 0], rows [1, 3, 6] -> [1, 3]   d1 = 0 != 3: emit 3
  //   r3 n=3: drafts [6, 6, 6], rows [tie(2,6), 7, 7, 0] -> [2]  d0 = 6 != 2 (ties to the lower id)
  //   r4 n=3: drafts [1, 2, 3], rows [1, 2, 3, 4] -> [1, 2, 3, 4] all accepted + bonus
  Sampler s(config());
  for (int32_t slot = 0; slot < 5; ++slot) s.admit(slot, greedy(), &kDummy, 0);
  std::vector<float> tie = peak(2);
  tie[6] = 5.0f;
  VCall c;
  c.rows = {peak(5),                              // r0
            peak(2), peak(4),                     // r1
            peak(1), peak(3), peak(6),            // r2
            tie,     peak(7), peak(7), peak(0),   // r3
            peak(1), peak(2), peak(3), peak(4)};  // r4
  c.cu_rows = {0, 1, 3, 6, 10, 14};
  // Drafts of request r start at cu_rows[r] - r: r1 at 0, r2 at 1, r3 at 3, r4 at 6.
  c.drafts = {2, 1, 0, 6, 6, 6, 1, 2, 3};
  const VResult r = run_verify(s, c, LogprobMode::kRaw);
  expect_tokens(r, 0, {5}, 0);
  expect_tokens(r, 1, {2, 4}, 1);
  expect_tokens(r, 2, {1, 3}, 1);
  expect_tokens(r, 3, {2}, 0);
  expect_tokens(r, 4, {1, 2, 3, 4}, 3);
  for (int i = 0; i < 14; ++i) EXPECT_EQ(r.status[i], kStatusOk) << "row " << i;
  // The step advanced once per request, whatever its n.
  for (int32_t slot = 0; slot < 5; ++slot) EXPECT_EQ(s.step(slot), 1u);
  // Raw logprob of each emitted token under its own row: a peak row gives
  // 5 - log(e^5 + 7), rank 1; the tie row gives 5 - log(2 e^5 + 6), rank 2.
  const double lp_peak = 5.0 - std::log(std::exp(5.0) + 7.0);
  const double lp_tie = 5.0 - std::log(2.0 * std::exp(5.0) + 6.0);
  EXPECT_LP(r.logprob[0][0], lp_peak);
  EXPECT_EQ(r.rank[0][0], 1);
  for (int j = 0; j < 2; ++j) EXPECT_LP(r.logprob[1][j], lp_peak);
  for (int j = 0; j < 2; ++j) EXPECT_LP(r.logprob[2][j], lp_peak);
  EXPECT_LP(r.logprob[3][0], lp_tie);
  EXPECT_EQ(r.rank[3][0], 2);
  for (int j = 0; j < 4; ++j) {
    EXPECT_LP(r.logprob[4][j], lp_peak);
    EXPECT_EQ(r.rank[4][j], 1);
  }
}

TEST(VerifyRules, GreedyWithGrammarMaskPerRow) {
  // One greedy request, n = 1, uniform rows; mask row 0 allows {3}, row 1 allows {5}:
  // argmax p_0 = 3 = d0 (accepted), bonus argmax p_1 = 5.
  Sampler s(config());
  s.admit(0, greedy(), &kDummy, 0);
  VCall c;
  c.rows = {std::vector<float>(kV, 0.0f), std::vector<float>(kV, 0.0f)};
  c.cu_rows = {0, 2};
  c.drafts = {3};
  c.mask = {1 << 3, 1 << 5};
  const VResult r = run_verify(s, c);
  expect_tokens(r, 0, {3, 5}, 1);
}

TEST(VerifyRules, HistoryOfRowJIncludesEarlierDrafts) {
  // Rows x = [3, 2, 0 x6] three times, drafts [0, 0] (n = 2), greedy.
  //   slot 0: repetition 4 (prompt + output): row 0 sees no history -> argmax 0 = d0, accepted;
  //           row 1's history holds d0 = 0: x0 = 3 / 4 = 0.75 < 2 -> argmax 1 != d1: emit 1.
  //   slot 1: no penalty: both accepted, bonus argmax of row 2 = 0.
  //   slot 2: frequency 2 (output scope): row 1: x0 = 3 - 2 = 1 < 2 -> emit 1.
  //   slot 3: repetition 4, output-only scope: the drafts are output: same as slot 0.
  //   slot 4: repetition 4 with 0 in the prompt: row 0 already has x0 = 0.75 -> emit 1 at 0.
  Sampler s(config());
  RequestParams rep = greedy();
  rep.repetition_penalty = 4.0f;
  RequestParams freq = greedy();
  freq.frequency_penalty = 2.0f;
  RequestParams rep_out = rep;
  rep_out.repetition_output_only = true;
  const int32_t zero = 0;
  s.admit(0, rep, &kDummy, 0);
  s.admit(1, greedy(), &kDummy, 0);
  s.admit(2, freq, &kDummy, 0);
  s.admit(3, rep_out, &kDummy, 0);
  s.admit(4, rep, &zero, 1);
  const std::vector<float> x = {3, 2, 0, 0, 0, 0, 0, 0};
  VCall c;
  for (int i = 0; i < 15; ++i) c.rows.push_back(x);
  c.cu_rows = {0, 3, 6, 9, 12, 15};
  c.drafts = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  const VResult r = run_verify(s, c, LogprobMode::kProcessed);
  expect_tokens(r, 0, {0, 1}, 1);
  expect_tokens(r, 1, {0, 0, 0}, 2);
  expect_tokens(r, 2, {0, 1}, 1);
  expect_tokens(r, 3, {0, 1}, 1);
  expect_tokens(r, 4, {1}, 0);
  // Processed logprobs (greedy: T = 1) under each row's own x:
  //   slot 0, position 0: x = [3, 2, 0 x6]: 3 - lse
  //   slot 0, position 1: x = [0.75, 2, 0 x6]: 2 - lse
  EXPECT_LP(r.logprob[0][0], 3.0 - lse({3, 2, 0, 0, 0, 0, 0, 0}));
  EXPECT_LP(r.logprob[0][1], 2.0 - lse({0.75, 2, 0, 0, 0, 0, 0, 0}));
  //   slot 2, position 1: x = [1, 2, 0 x6].
  EXPECT_LP(r.logprob[2][1], 2.0 - lse({1, 2, 0, 0, 0, 0, 0, 0}));
}

// ---------------------------------------------------------------------------------------------
// Strict rule
// ---------------------------------------------------------------------------------------------

TEST(VerifyRules, StrictComparesWithTheRowSample) {
  // Random requests (T = 1) with rule kStrict on uniform rows (all 0): the section-2 sample of
  // row j is argmax_t G(seed, step, kind 0, position j, t). Computed here for j = 0..3.
  const uint64_t seed = 0xABCDEF01ull, step = 17;
  const std::vector<int32_t> all = {0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<double> zero_scores(kV, 0.0);
  std::vector<int32_t> sj;
  for (uint32_t j = 0; j < 4; ++j) {
    const Pick p = gumbel_pick(zero_scores, all, seed, step, sampling(j));
    ASSERT_GT(p.margin, 1e-6) << "choose another seed: near-tie at position " << j;
    sj.push_back(p.token);
  }
  auto other = [](int32_t t) { return (t + 1) % kV; };
  Sampler s(config());
  RequestParams p = random_req(seed);
  p.initial_step = step;
  for (int32_t slot = 0; slot < 4; ++slot) s.admit(slot, p, &kDummy, 0);
  VCall c;
  for (int i = 0; i < 4 + 4 + 2 + 1; ++i) c.rows.push_back(std::vector<float>(kV, 0.0f));
  c.cu_rows = {0, 4, 8, 10, 11};
  //   r0 n=3: drafts [s0, s1, not s2] -> [s0, s1, s2], 2 accepted
  //   r1 n=3: drafts [s0, s1, s2]     -> [s0, s1, s2, s3], the bonus is row 3's sample (kind 0,
  //           position 3: semantics.md "Strict")
  //   r2 n=1: drafts [not s0]          -> [s0], 0 accepted
  //   r3 n=0:                          -> [s0]
  c.drafts = {sj[0], sj[1], other(sj[2]), sj[0], sj[1], sj[2], other(sj[0])};
  c.rules.assign(4, static_cast<int32_t>(VerifyRule::kStrict));
  const VResult r = run_verify(s, c);
  expect_tokens(r, 0, {sj[0], sj[1], sj[2]}, 2);
  expect_tokens(r, 1, {sj[0], sj[1], sj[2], sj[3]}, 3);
  expect_tokens(r, 2, {sj[0]}, 0);
  expect_tokens(r, 3, {sj[0]}, 0);

  // Row 0's strict sample is the single-step sample of the same row at the same step.
  Sampler single(config());
  single.admit(0, p, &kDummy, 0);
  const std::vector<float> row(kV, 0.0f);
  LogitsView lv;
  lv.data = row.data();
  lv.rows = 1;
  lv.cols = kV;
  lv.row_stride = kV;
  int32_t token = -2;
  SampleOutputs out;
  out.tokens = &token;
  single.sample(lv, nullptr, BitmaskView{}, out);
  EXPECT_EQ(token, sj[0]);
}

// ---------------------------------------------------------------------------------------------
// Random requests without draft probabilities (one-hot q)
// ---------------------------------------------------------------------------------------------

TEST(VerifyRules, OneHotZeroTargetProbabilityAlwaysRejects) {
  // T = 1, top_k = 2 on row 0 = [2, 1, 0.5, 0 x5]: kept {0, 1}, p = [1/(1+e^-1), 1/(1+e)].
  // d0 = 2 has p_0(2) = 0: rejected whatever u is. The residual is p_0 with d0 removed (= p_0):
  // the emitted token is argmax_{t in {0, 1}} (log p_t + G(kind 2, position 0, t)).
  const uint64_t seed = 424242;
  RequestParams p = random_req(seed);
  p.top_k = 2;
  Sampler s(config());
  s.admit(0, p, &kDummy, 0);
  const std::vector<float> row0 = {2, 1, 0.5f, 0, 0, 0, 0, 0};
  const double p0 = 1.0 / (1.0 + std::exp(-1.0)), p1 = 1.0 / (1.0 + std::exp(1.0));
  std::vector<double> logp(kV, kNegInfD);
  logp[0] = std::log(p0);
  logp[1] = std::log(p1);
  std::set<int32_t> seen;
  for (uint64_t step = 0; step < 16; ++step) {
    ASSERT_EQ(s.step(0), step);
    VCall c;
    c.rows = {row0, peak(3)};
    c.cu_rows = {0, 2};
    c.drafts = {2};
    const VResult r = run_verify(s, c, LogprobMode::kFinal);
    const Pick want = gumbel_pick(logp, {0, 1}, seed, step, correction(0));
    EXPECT_EQ(r.num_accepted[0], 0);
    if (want.margin > 1e-4) {
      EXPECT_EQ(r.tokens[0][0], want.token) << "step " << step;
    }
    for (int j = 1; j < kStride; ++j) EXPECT_EQ(r.tokens[0][j], -1);
    // Final-mode logprob of the correction under row 0: log p of the emitted token.
    ASSERT_TRUE(r.tokens[0][0] == 0 || r.tokens[0][0] == 1);
    EXPECT_LP(r.logprob[0][0], r.tokens[0][0] == 0 ? std::log(p0) : std::log(p1));
    seen.insert(r.tokens[0][0]);
  }
  // p1 = 0.27: both tokens appear in 16 draws unless the residual ignores one of them (a correct
  // sampler misses one with probability 0.73^16 + 0.27^16 < 1%, fixed once the seed is).
  EXPECT_EQ(seen.size(), 2u);
}

TEST(VerifyRules, NegativeDraftProbabilitiesCountAsZero) {
  // Row 0 keeps ids 0 and 1 (top-k 2); the draft 2 (p = 0) is always rejected. Its dense q puts -1
  // on id 5 and NaN on id 6, outside the kept set: counted as 0 (semantics.md), the residual
  // max(0, p - q) is p itself, so the correction is 0 or 1, never 5 (whose r would be 1 with q = -1
  // taken as given, the largest of the residual) or 6.
  RequestParams p = random_req(515151);
  p.top_k = 2;
  Sampler s(config());
  s.admit(0, p, &kDummy, 0);
  std::vector<float> q(kV, 0.0f);
  q[2] = 1.0f;
  q[5] = -1.0f;
  q[6] = std::numeric_limits<float>::quiet_NaN();
  for (int step = 0; step < 16; ++step) {
    VCall c;
    c.rows = {{2, 1, 0.5f, 0, 0, 0, 0, 0}, peak(3)};
    c.cu_rows = {0, 2};
    c.drafts = {2};
    c.rules = {static_cast<int32_t>(VerifyRule::kDenseDraftProbs)};
    c.dense = q;
    const VResult r = run_verify(s, c);
    EXPECT_EQ(r.num_accepted[0], 0);
    EXPECT_TRUE(r.tokens[0][0] == 0 || r.tokens[0][0] == 1) << "step " << step << ": " << r.tokens[0][0];
  }
}

TEST(VerifyRules, OneHotCertainDraftsAccepted) {
  // T = 1, top_k = 1: every p_j is one-hot at the row's argmax. Drafts equal to the argmax have
  // p_j(d_j) = 1 and q_j(d_j) = 1: u * 1 <= 1 always. Rows: argmax 1, 2, 7 -> [1, 2, 7].
  RequestParams p = random_req(99);
  p.top_k = 1;
  p.top_logprobs = 2;
  Sampler s(config());
  s.admit(0, p, &kDummy, 0);
  for (int i = 0; i < 10; ++i) {
    VCall c;
    c.rows = {peak(1), peak(2, 3.0f), peak(7, 0.5f)};
    c.cu_rows = {0, 3};
    c.drafts = {1, 2};
    const VResult r = run_verify(s, c, LogprobMode::kFinal);
    expect_tokens(r, 0, {1, 2, 7}, 2);
    // Final mode: each token is its row's whole kept set: logprob 0, rank 1, top = [t, -1].
    const int32_t want[3] = {1, 2, 7};
    for (int j = 0; j < 3; ++j) {
      EXPECT_LP(r.logprob[0][j], 0.0);
      EXPECT_EQ(r.rank[0][j], 1);
      EXPECT_EQ(r.top_ids[0][j][0], want[j]);
      EXPECT_EQ(r.top_ids[0][j][1], -1);
      EXPECT_LP(r.top_lp[0][j][1], kNegInfD);
    }
  }
  EXPECT_EQ(s.step(0), 10u);
}

TEST(VerifyRules, OneHotAcceptanceComputedByHand) {
  // p_0 uniform over {0, 1, 2, 3} (0.25 each, exact), d0 = 1, one-hot q: accept iff
  // u_0 * 1 <= 0.25 with u_0 from (kind 1, position 0, t = 0).
  //   accepted: bonus from row 1 (uniform over {0..3}): argmax G(kind 2, position 1) over 0..3.
  //   rejected: residual max(0, p - onehot(1)) = 0.25 on {0, 2, 3}: argmax G(kind 2, pos 0).
  const uint64_t seed = 5150;
  Sampler s(config());
  s.admit(0, random_req(seed), &kDummy, 0);
  const std::vector<double> flat(kV, std::log(0.25));
  int accepted = 0, rejected = 0;
  for (uint64_t step = 0; step < 40; ++step) {
    VCall c;
    c.rows = {uniform4(), uniform4()};
    c.cu_rows = {0, 2};
    c.drafts = {1};
    const VResult r = run_verify(s, c);
    const float u = acceptance_u(seed, step, 0);
    if (std::fabs(u - 0.25f) < 1e-6f) continue;
    if (u <= 0.25f) {
      ++accepted;
      const Pick b = gumbel_pick(flat, {0, 1, 2, 3}, seed, step, correction(1));
      EXPECT_EQ(r.num_accepted[0], 1) << "step " << step;
      EXPECT_EQ(r.tokens[0][0], 1);
      if (b.margin > 1e-6) {
        EXPECT_EQ(r.tokens[0][1], b.token) << "step " << step;
      }
    } else {
      ++rejected;
      const Pick e = gumbel_pick(flat, {0, 2, 3}, seed, step, correction(0));
      EXPECT_EQ(r.num_accepted[0], 0) << "step " << step;
      if (e.margin > 1e-6) {
        EXPECT_EQ(r.tokens[0][0], e.token) << "step " << step;
      }
      EXPECT_EQ(r.tokens[0][1], -1);
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(VerifyRules, OneHotTwoDraftsPositionByPosition) {
  // n = 2, drafts [0, 0], three rows x = [ln 3, 0, 0, 0, -inf x4]: p = [1/2, 1/6, 1/6, 1/6].
  // Position j (0 or 1): accept d_j = 0 iff u_j <= 1/2, u_j from (kind 1, position j). At the
  // first rejection the residual p - onehot(0) is 1/6 on {1, 2, 3}: argmax G(kind 2, position j)
  // over {1, 2, 3}. Both accepted: the bonus is argmax (z_t + G(kind 2, position 2)) over
  // {0..3}.
  const uint64_t seed = 2718;
  Sampler s(config());
  s.admit(0, random_req(seed), &kDummy, 0);
  const std::vector<float> row = {std::log(3.0f), 0, 0, 0, -kInf, -kInf, -kInf, -kInf};
  const std::vector<double> z = {std::log(3.0f), 0, 0, 0, kNegInfD, kNegInfD, kNegInfD, kNegInfD};
  const std::vector<double> flat(kV, 0.0);
  int reached_1 = 0, all_accepted = 0;
  for (uint64_t step = 0; step < 60; ++step) {
    VCall c;
    c.rows = {row, row, row};
    c.cu_rows = {0, 3};
    c.drafts = {0, 0};
    const VResult r = run_verify(s, c);
    std::vector<int32_t> want;
    bool ambiguous = false;
    int32_t accepted = 0;
    for (uint32_t j = 0; j <= 2; ++j) {
      if (j == 2) {
        const Pick b = gumbel_pick(z, {0, 1, 2, 3}, seed, step, correction(2));
        ambiguous = ambiguous || b.margin < 1e-5;
        want.push_back(b.token);
        ++all_accepted;
        break;
      }
      const float u = acceptance_u(seed, step, j);
      ambiguous = ambiguous || std::fabs(u - 0.5f) < 1e-5f;
      if (u <= 0.5f) {
        want.push_back(0);
        ++accepted;
        if (j == 0) ++reached_1;
        continue;
      }
      const Pick e = gumbel_pick(flat, {1, 2, 3}, seed, step, correction(j));
      ambiguous = ambiguous || e.margin < 1e-6;
      want.push_back(e.token);
      break;
    }
    if (ambiguous) continue;
    SCOPED_TRACE("step " + std::to_string(step));
    expect_tokens(r, 0, want, accepted);
  }
  EXPECT_GT(reached_1, 5);
  EXPECT_GT(all_accepted, 2);
}

// ---------------------------------------------------------------------------------------------
// Random requests with draft probabilities
// ---------------------------------------------------------------------------------------------

TEST(VerifyRules, DenseQEqualToPAlwaysAccepts) {
  // Rows uniform over {0..3} (p = 0.25 exactly). Request 0: q = p: u * 0.25 <= 0.25 since
  // u <= 1 - 2^-24. Request 1: q(d) = 0.2 < p(d): accepted too. Both n = 2, drafts [1, 3];
  // the bonus is argmax G(kind 2, position 2) over {0..3} (the same law as sampling p_2).
  const uint64_t seed0 = 31, seed1 = 32;
  Sampler s(config());
  s.admit(0, random_req(seed0), &kDummy, 0);
  s.admit(1, random_req(seed1), &kDummy, 0);
  const std::vector<float> q_eq = {0.25f, 0.25f, 0.25f, 0.25f, 0, 0, 0, 0};
  const std::vector<float> q_lo = {0.1f, 0.2f, 0.3f, 0.2f, 0.2f, 0, 0, 0};
  const std::vector<double> flat(kV, 0.0);
  for (uint64_t step = 0; step < 10; ++step) {
    VCall c;
    for (int i = 0; i < 6; ++i) c.rows.push_back(uniform4());
    c.cu_rows = {0, 3, 6};
    c.drafts = {1, 3, 1, 3};
    c.rules = {static_cast<int32_t>(VerifyRule::kDenseDraftProbs),
               static_cast<int32_t>(VerifyRule::kDenseDraftProbs)};
    for (const auto* q : {&q_eq, &q_eq, &q_lo, &q_lo})
      c.dense.insert(c.dense.end(), q->begin(), q->end());
    const VResult r = run_verify(s, c);
    const Pick b0 = gumbel_pick(flat, {0, 1, 2, 3}, seed0, step, correction(2));
    const Pick b1 = gumbel_pick(flat, {0, 1, 2, 3}, seed1, step, correction(2));
    EXPECT_EQ(r.num_accepted[0], 2);
    EXPECT_EQ(r.num_accepted[1], 2);
    EXPECT_EQ(r.tokens[0][0], 1);
    EXPECT_EQ(r.tokens[0][1], 3);
    EXPECT_EQ(r.tokens[1][0], 1);
    EXPECT_EQ(r.tokens[1][1], 3);
    if (b0.margin > 1e-6) {
      EXPECT_EQ(r.tokens[0][2], b0.token) << "step " << step;
    }
    if (b1.margin > 1e-6) {
      EXPECT_EQ(r.tokens[1][2], b1.token) << "step " << step;
    }
    EXPECT_EQ(r.tokens[0][3], -1);
  }
}

// The residual cases shared by the dense and the sparse form: p_0 uniform on {0..3}, q_0 = 0.5 on
// {1, 2}. Request 0: d0 = 4 (p_0(4) = 0: always rejected). Request 1: d0 = 1: accepted iff
// u * 0.5 <= 0.25, i.e. u <= 0.5 (the product is exact in fp32). The residual
// max(0, p - q) = 0.25 on {0, 3}: the correction is argmax G(kind 2, position 0) over {0, 3}.
// An accepted d0 is followed by the bonus of row 1 (uniform on {0..3}, kind 2 position 1).
void check_residual_cases(VerifyRule rule) {
  const uint64_t seed0 = 600, seed1 = 601;
  Sampler s(config());
  s.admit(0, random_req(seed0), &kDummy, 0);
  s.admit(1, random_req(seed1), &kDummy, 0);
  const std::vector<double> flat(kV, std::log(0.25));
  int accepted = 0, rejected = 0;
  for (uint64_t step = 0; step < 40; ++step) {
    VCall c;
    for (int i = 0; i < 4; ++i) c.rows.push_back(uniform4());
    c.cu_rows = {0, 2, 4};
    c.drafts = {4, 1};
    c.rules = {static_cast<int32_t>(rule), static_cast<int32_t>(rule)};
    if (rule == VerifyRule::kDenseDraftProbs) {
      const std::vector<float> q = {0, 0.5f, 0.5f, 0, 0, 0, 0, 0};
      c.dense = q;
      c.dense.insert(c.dense.end(), q.begin(), q.end());
    } else {
      // Sparse lists with stride 3; the third entry lies past the count and must be ignored
      // (read, it would set q(0) = 0.9 for request 0, emptying the residual at 0, and q(1) = 0.1
      // for request 1, making d0 = 1 always accepted).
      c.sparse_stride = 3;
      c.sparse_ids = {1, 2, 0, 2, 1, 1};
      c.sparse_probs = {0.5f, 0.5f, 0.9f, 0.5f, 0.5f, 0.1f};
      c.sparse_count = {2, 2};
    }
    const VResult r = run_verify(s, c);
    // Request 0: always rejected.
    const Pick e0 = gumbel_pick(flat, {0, 3}, seed0, step, correction(0));
    EXPECT_EQ(r.num_accepted[0], 0);
    if (e0.margin > 1e-6) {
      EXPECT_EQ(r.tokens[0][0], e0.token) << "step " << step;
    }
    EXPECT_EQ(r.tokens[0][1], -1);
    // Request 1: by the hand-computed u.
    const float u = acceptance_u(seed1, step, 0);
    if (std::fabs(u - 0.5f) < 1e-6f) continue;
    if (u <= 0.5f) {
      ++accepted;
      EXPECT_EQ(r.num_accepted[1], 1) << "step " << step;
      EXPECT_EQ(r.tokens[1][0], 1);
      const Pick b = gumbel_pick(flat, {0, 1, 2, 3}, seed1, step, correction(1));
      if (b.margin > 1e-6) {
        EXPECT_EQ(r.tokens[1][1], b.token) << "step " << step;
      }
    } else {
      ++rejected;
      EXPECT_EQ(r.num_accepted[1], 0) << "step " << step;
      const Pick e1 = gumbel_pick(flat, {0, 3}, seed1, step, correction(0));
      if (e1.margin > 1e-6) {
        EXPECT_EQ(r.tokens[1][0], e1.token) << "step " << step;
      }
      EXPECT_EQ(r.tokens[1][1], -1);
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0);
}

TEST(VerifyRules, DenseResidualComputedByHand) {
  check_residual_cases(VerifyRule::kDenseDraftProbs);
}

TEST(VerifyRules, SparseResidualComputedByHand) {
  check_residual_cases(VerifyRule::kSparseDraftProbs);
}

TEST(VerifyRules, EmptyResidualFallsBackToP) {
  // p_0 uniform on {0..3}, dense q_0 = p_0 exactly, d0 = 5 with p_0(5) = 0: rejected (the
  // p_j(d_j) > 0 condition). The residual max(0, p - q) is 0 everywhere: semantics.md "Empty
  // residual": the token is sampled from p_0 with kind 2 noise at position 0, i.e.
  // argmax G(kind 2, position 0) over {0..3}.
  const uint64_t seed = 8080;
  Sampler s(config());
  s.admit(0, random_req(seed), &kDummy, 0);
  const std::vector<double> flat(kV, 0.0);
  for (uint64_t step = 0; step < 12; ++step) {
    VCall c;
    c.rows = {uniform4(), uniform4()};
    c.cu_rows = {0, 2};
    c.drafts = {5};
    c.rules = {static_cast<int32_t>(VerifyRule::kDenseDraftProbs)};
    c.dense = {0.25f, 0.25f, 0.25f, 0.25f, 0, 0, 0, 0};
    const VResult r = run_verify(s, c);
    const Pick e = gumbel_pick(flat, {0, 1, 2, 3}, seed, step, correction(0));
    EXPECT_EQ(r.num_accepted[0], 0);
    if (e.margin > 1e-6) {
      EXPECT_EQ(r.tokens[0][0], e.token) << "step " << step;
    }
    EXPECT_EQ(r.tokens[0][1], -1);
  }
}

TEST(VerifyRules, GreedyRequestIgnoresTheRule) {
  // "Greedy requests always use the greedy rule, whatever is asked here" (types.hpp; SPEC.md
  // section 3): a greedy request asking for kStrict or kOneHot gets the greedy outcome.
  Sampler s(config());
  s.admit(0, greedy(), &kDummy, 0);
  s.admit(1, greedy(), &kDummy, 0);
  VCall c;
  c.rows = {peak(2), peak(4), peak(2), peak(4)};
  c.cu_rows = {0, 2, 4};
  c.drafts = {2, 3};
  c.rules = {static_cast<int32_t>(VerifyRule::kStrict), static_cast<int32_t>(VerifyRule::kOneHot)};
  const VResult r = run_verify(s, c);
  expect_tokens(r, 0, {2, 4}, 1);
  expect_tokens(r, 1, {2}, 0);
}

// ---------------------------------------------------------------------------------------------
// Status, bad input, state updates, logprobs
// ---------------------------------------------------------------------------------------------

TEST(VerifyRules, PerRowStatusAndNoValidRow) {
  // Request 0 (greedy), n = 2, drafts [1, 2]: row 0 = peak(1) with a NaN at id 5 (status bit 0,
  // the draft accepted), row 1 all -inf (no valid token: the request stops there with -1,
  // accepted 1), row 2 anything. Request 1 (greedy), n = 1: untouched by request 0's rows.
  Sampler s(config());
  s.admit(0, greedy(), &kDummy, 0);
  s.admit(1, greedy(), &kDummy, 0);
  std::vector<float> nan_row = peak(1);
  nan_row[5] = kNaN;
  VCall c;
  c.rows = {nan_row, std::vector<float>(kV, -kInf), peak(3), peak(6), peak(0)};
  c.cu_rows = {0, 3, 5};
  c.drafts = {1, 2, 6};
  const VResult r = run_verify(s, c);
  EXPECT_EQ(r.status[0], kStatusNaN);
  EXPECT_EQ(r.status[1], kStatusNoValidToken);
  EXPECT_EQ(r.num_accepted[0], 1);
  EXPECT_EQ(r.tokens[0][0], 1);
  EXPECT_EQ(r.tokens[0][1], -1);
  EXPECT_EQ(r.tokens[0][2], -1);
  EXPECT_EQ(r.tokens[0][3], -1);
  EXPECT_EQ(r.status[3], kStatusOk);
  EXPECT_EQ(r.status[4], kStatusOk);
  expect_tokens(r, 1, {6, 0}, 1);
}

TEST(VerifyRules, InvalidInputFlagsOnlyThatRequest) {
  // Four greedy requests of n = 1 (rows peak(2), peak(4), drafts 2: [2, 4] when valid):
  //   r0 valid; r1 draft id 8 = V (outside [0, V)); r2 draft id -1; r3 valid.
  // Invalid requests: every row status bit 2, tokens all -1, accepted 0, step not advanced
  // (semantics.md: only valid requests advance).
  Sampler s(config());
  for (int32_t slot = 0; slot < 4; ++slot) s.admit(slot, greedy(), &kDummy, 0);
  VCall c;
  for (int i = 0; i < 4; ++i) {
    c.rows.push_back(peak(2));
    c.rows.push_back(peak(4));
  }
  c.cu_rows = {0, 2, 4, 6, 8};
  c.drafts = {2, 8, -1, 2};
  const VResult r = run_verify(s, c);
  expect_tokens(r, 0, {2, 4}, 1);
  expect_tokens(r, 1, {}, 0);
  expect_tokens(r, 2, {}, 0);
  expect_tokens(r, 3, {2, 4}, 1);
  const int32_t want_status[8] = {
      0, 0, kStatusInvalidInput, kStatusInvalidInput, kStatusInvalidInput, kStatusInvalidInput,
      0, 0};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.status[i], want_status[i]) << "row " << i;
  EXPECT_EQ(s.step(0), 1u);
  EXPECT_EQ(s.step(1), 0u);
  EXPECT_EQ(s.step(2), 0u);
  EXPECT_EQ(s.step(3), 1u);
}

TEST(VerifyRules, InvalidRequestShapesAndRules) {
  // semantics.md bit 2 in verification: n_r above max_drafts, an unknown rule, a rule whose
  // draft probabilities were not passed, a slot not admitted. Each flags its own request only.
  Sampler s(config());
  for (int32_t slot = 0; slot < 5; ++slot) s.admit(slot, random_req(70 + slot), &kDummy, 0);
  s.admit(5, greedy(), &kDummy, 0);
  VCall c;
  //   r0 (slot 0): n = 4 > max_drafts = 3 (5 rows)
  //   r1 (slot 1): unknown rule 9
  //   r2 (slot 2): kDenseDraftProbs with no dense rows passed
  //   r3 (slot 6): never admitted
  //   r4 (slot 5): valid greedy n = 1 -> [2, 4]
  for (int i = 0; i < 5; ++i) c.rows.push_back(peak(2));  // r0
  c.rows.push_back(peak(2));                              // r1
  c.rows.push_back(peak(4));
  c.rows.push_back(peak(2));  // r2
  c.rows.push_back(peak(4));
  c.rows.push_back(peak(2));  // r3
  c.rows.push_back(peak(4));
  c.rows.push_back(peak(2));  // r4
  c.rows.push_back(peak(4));
  c.cu_rows = {0, 5, 7, 9, 11, 13};
  // Drafts start at cu_rows[r] - r: r0 at 0 (4 drafts), r1 at 4, r2 at 5, r3 at 6, r4 at 7.
  c.drafts = {2, 2, 2, 2, 2, 2, 2, 2};
  c.slots = {0, 1, 2, 6, 5};
  c.rules = {static_cast<int32_t>(VerifyRule::kOneHot), 9,
             static_cast<int32_t>(VerifyRule::kDenseDraftProbs),
             static_cast<int32_t>(VerifyRule::kOneHot), static_cast<int32_t>(VerifyRule::kOneHot)};
  const VResult r = run_verify(s, c);
  for (int32_t b = 0; b < 4; ++b) expect_tokens(r, b, {}, 0);
  for (int i = 0; i < 11; ++i) EXPECT_EQ(r.status[i], kStatusInvalidInput) << "row " << i;
  expect_tokens(r, 4, {2, 4}, 1);
  EXPECT_EQ(r.status[11], kStatusOk);
  EXPECT_EQ(r.status[12], kStatusOk);
  EXPECT_EQ(s.step(0), 0u);
  EXPECT_EQ(s.step(1), 0u);
  EXPECT_EQ(s.step(2), 0u);
  EXPECT_EQ(s.step(5), 1u);
}

TEST(VerifyRules, CuRowsSteppingBackGiveNoRowToTwoRequests) {
  // cu_rows = {0, 2, 1, 1, 2} over two greedy rows peak(2), peak(4): r0's range [0, 2) and r3's
  // [1, 2) share row 1, r1's [2, 1) and r2's [1, 1) are empty. A request is valid only if it owns
  // every row of its range (detail::owner_of_row, the bisection the CUDA backend places rows by):
  // row 1 is r3's, so r0 is invalid and r3 (n = 0) emits row 1's argmax. Once the reference took
  // r0 and r3 both, and the CUDA backend gave r0 r3's row (semantics.md: cu_rows not increasing).
  Sampler s(config());
  for (int32_t slot = 0; slot < 4; ++slot) s.admit(slot, greedy(), &kDummy, 0);
  VCall c;
  c.rows.push_back(peak(2));
  c.rows.push_back(peak(4));
  c.cu_rows = {0, 2, 1, 1, 2};
  c.drafts = {2};
  const VResult r = run_verify(s, c);
  for (int32_t b = 0; b < 3; ++b) expect_tokens(r, b, {}, 0);
  expect_tokens(r, 3, {4}, 0);
  EXPECT_EQ(r.status[0], kStatusInvalidInput);
  EXPECT_EQ(r.status[1], kStatusOk);
  EXPECT_EQ(s.step(0), 0u);
  EXPECT_EQ(s.step(3), 1u);

  // An invalid request flags only the rows it owns: cu_rows = {0, 2, 1, 3} over peak(2), peak(4),
  // peak(5). r0 owns rows 0 and 1 (valid: d0 = 2 accepted, then 4); r1's [2, 1) is empty; r2's
  // [1, 3) holds row 1, r0's, so r2 is invalid and flags row 2 alone. Once the reference flagged
  // row 1 too, after r0 had written its status.
  Sampler s2(config());
  for (int32_t slot = 0; slot < 3; ++slot) s2.admit(slot, greedy(), &kDummy, 0);
  VCall c2;
  c2.rows = {peak(2), peak(4), peak(5)};
  c2.cu_rows = {0, 2, 1, 3};
  c2.drafts = {2};
  const VResult r2 = run_verify(s2, c2);
  expect_tokens(r2, 0, {2, 4}, 1);
  expect_tokens(r2, 1, {}, 0);
  expect_tokens(r2, 2, {}, 0);
  EXPECT_EQ(r2.status[0], kStatusOk);
  EXPECT_EQ(r2.status[1], kStatusOk);
  EXPECT_EQ(r2.status[2], kStatusInvalidInput);
}

TEST(VerifyRules, NoRowsStillWritesTheOutputs) {
  // A call whose requests name no rows (logits.rows = 0, cu_rows all 0): every request is invalid
  // (n = -1) and its outputs are still written: tokens -1, num_accepted 0, logprobs -inf. No step
  // moves. The GPU test CudaVerifyBadInput.NoRowsStillWritesTheOutputs holds the CUDA backend to it.
  Sampler s(config());
  s.admit(0, random_req(3, 0.8f), &kDummy, 0);
  s.admit(1, greedy(), &kDummy, 0);
  VCall c;
  c.cu_rows = {0, 0, 0};
  const VResult r = run_verify(s, c);
  for (int32_t b = 0; b < 2; ++b) {
    expect_tokens(r, b, {}, 0);
    for (int64_t j = 0; j < kStride; ++j) EXPECT_EQ(r.logprob[b][j], -kInf) << b << " " << j;
    EXPECT_EQ(s.step(b), 0u);
  }
}

TEST(VerifyRules, HistoryFullFlagsTheRowWhoseTokenDidNotFit) {
  // max_history 2, filled by the prompt {0, 0}. Greedy, one draft d0 = 1: row 0 (argmax 1) accepts
  // it, row 1 has no valid token and ends the request with -1. Token 1 does not fit the history: the
  // bit goes to row 0, whose token it is, not to row 1 (no token; "history full, the token itself
  // is valid" would contradict its no-valid-token bit), as the last emitted row once got it.
  SamplerConfig cfg = config();
  cfg.max_history = 2;
  Sampler s(cfg);
  const int32_t prompt[] = {0, 0};
  s.admit(0, greedy(), prompt, 2);
  VCall c;
  c.rows = {peak(1), std::vector<float>(kV, -kInf)};
  c.cu_rows = {0, 2};
  c.drafts = {1};
  const VResult r = run_verify(s, c);
  EXPECT_EQ(r.num_accepted[0], 1);
  EXPECT_EQ(r.tokens[0][0], 1);
  EXPECT_EQ(r.tokens[0][1], -1);
  EXPECT_EQ(r.status[0], kStatusHistoryFull);
  EXPECT_EQ(r.status[1], kStatusNoValidToken);
}

TEST(VerifyRules, StepAndHistoryUpdates) {
  // A greedy request with frequency and presence penalty 1: rows with 10 at the argmax (the
  // penalties, at most 2 per row, cannot move it), drafts [1, 2, 3] all accepted, bonus 4:
  // [1, 2, 3, 4]. With the updates switched off nothing changes; with them the step is + 1 and
  // the output history holds 1, 2, 3, 4 once each, which a single-step greedy row of zeros then
  // shows: x = [0, -2, -2, -2, -2, 0, 0, 0] (1 * 1 + 1 for each of 1..4).
  Sampler s(config());
  RequestParams p = random_req(1);
  p.temperature = 0.0f;
  p.frequency_penalty = 1.0f;
  p.presence_penalty = 1.0f;
  s.admit(0, p, &kDummy, 0);
  VCall c;
  c.rows = {peak(1, 10), peak(2, 10), peak(3, 10), peak(4, 10)};
  c.cu_rows = {0, 4};
  c.drafts = {1, 2, 3};
  // First with the updates switched off: no step, no history.
  CallOptions off;
  off.advance_step = false;
  off.append_to_history = false;
  expect_tokens(run_verify(s, c, LogprobMode::kRaw, off), 0, {1, 2, 3, 4}, 3);
  EXPECT_EQ(s.step(0), 0u);
  // Then with them: step + 1 and the emitted tokens in the history.
  expect_tokens(run_verify(s, c), 0, {1, 2, 3, 4}, 3);
  EXPECT_EQ(s.step(0), 1u);

  // Read the history back (greedy rows use T = 1 in processed mode).
  const std::vector<float> zeros(kV, 0.0f);
  LogitsView lv;
  lv.data = zeros.data();
  lv.rows = 1;
  lv.cols = kV;
  lv.row_stride = kV;
  int32_t token = -2, rank = -2, top_ids[4];
  float logprob = 0.0f, top_lp[4];
  SampleOutputs out;
  out.tokens = &token;
  out.logprob = &logprob;
  out.rank = &rank;
  out.top_ids = top_ids;
  out.top_logprobs = top_lp;
  out.top_stride = 4;
  CallOptions proc;
  proc.logprob_mode = LogprobMode::kProcessed;
  s.sample(lv, nullptr, BitmaskView{}, out, proc);
  // x = [0, -2, -2, -2, -2, 0, 0, 0]: greedy 0, processed logprob 0 - log(4 + 4 e^-2), rank 4
  // (0, 5, 6, 7 tie at 0).
  EXPECT_EQ(token, 0);
  EXPECT_LP(logprob, -std::log(4.0 + 4.0 * std::exp(-2.0)));
  EXPECT_EQ(rank, 4);
  EXPECT_EQ(s.step(0), 2u);
}

TEST(VerifyRules, LogprobsOfEmittedTokens) {
  // A random request (T = 0.5, top_k = 1: certain outcomes), one-hot rule, n = 2, drafts [0, 1]:
  //   row 0 x = [2, 1, 0 x6]     -> argmax 0 = d0 accepted; z = [4, 2, 0 x6]
  //   row 1 x = [1, 3, 0 x6]     -> argmax 1 = d1 accepted; z = [2, 6, 0 x6]
  //   row 2 x = [0, 0, 4, 0 x5]  -> bonus 2;                z = [0, 0, 8, 0 x5]
  RequestParams p = random_req(8, 0.5f);
  p.top_k = 1;
  p.top_logprobs = 2;
  const std::vector<float> r0 = {2, 1, 0, 0, 0, 0, 0, 0};
  const std::vector<float> r1 = {1, 3, 0, 0, 0, 0, 0, 0};
  const std::vector<float> r2 = {0, 0, 4, 0, 0, 0, 0, 0};
  for (LogprobMode mode : {LogprobMode::kRaw, LogprobMode::kProcessed, LogprobMode::kFinal}) {
    SCOPED_TRACE("mode " + std::to_string(static_cast<int>(mode)));
    Sampler s(config());
    s.admit(0, p, &kDummy, 0);
    VCall c;
    c.rows = {r0, r1, r2};
    c.cu_rows = {0, 3};
    c.drafts = {0, 1};
    const VResult r = run_verify(s, c, mode);
    expect_tokens(r, 0, {0, 1, 2}, 2);
    if (mode == LogprobMode::kRaw) {
      // log_softmax of the input rows.
      const double l0 = lse({2, 1, 0, 0, 0, 0, 0, 0}), l1 = lse({1, 3, 0, 0, 0, 0, 0, 0}),
                   l2 = lse({0, 0, 4, 0, 0, 0, 0, 0});
      EXPECT_LP(r.logprob[0][0], 2.0 - l0);
      EXPECT_LP(r.logprob[0][1], 3.0 - l1);
      EXPECT_LP(r.logprob[0][2], 4.0 - l2);
      EXPECT_EQ(r.top_ids[0][0][0], 0);
      EXPECT_EQ(r.top_ids[0][0][1], 1);
      EXPECT_LP(r.top_lp[0][0][1], 1.0 - l0);
      EXPECT_EQ(r.top_ids[0][1][0], 1);
      EXPECT_EQ(r.top_ids[0][1][1], 0);
      EXPECT_EQ(r.top_ids[0][2][0], 2);
      EXPECT_EQ(r.top_ids[0][2][1], 0);  // the tie at 0: lowest id
    } else if (mode == LogprobMode::kProcessed) {
      // log_softmax(z) before truncation.
      const double l0 = lse({4, 2, 0, 0, 0, 0, 0, 0}), l1 = lse({2, 6, 0, 0, 0, 0, 0, 0}),
                   l2 = lse({0, 0, 8, 0, 0, 0, 0, 0});
      EXPECT_LP(r.logprob[0][0], 4.0 - l0);
      EXPECT_LP(r.logprob[0][1], 6.0 - l1);
      EXPECT_LP(r.logprob[0][2], 8.0 - l2);
      EXPECT_LP(r.top_lp[0][0][1], 2.0 - l0);
      EXPECT_LP(r.top_lp[0][1][1], 2.0 - l1);
      EXPECT_LP(r.top_lp[0][2][1], 0.0 - l2);
    } else {
      // The kept set of each row is its argmax alone.
      for (int j = 0; j < 3; ++j) {
        EXPECT_LP(r.logprob[0][j], 0.0);
        EXPECT_EQ(r.top_ids[0][j][1], -1);
      }
    }
    for (int j = 0; j < 3; ++j) EXPECT_EQ(r.rank[0][j], 1);
  }
}

TEST(VerifyRules, LogprobOutputsChangeNothingElse) {
  // A call that asks for no logprob, rank or top-N skips them: tokens, acceptances, statuses and
  // the next call's state are those of a call that asks for everything, and the outputs it did not
  // ask for stay untouched. Greedy, one-hot and dense requests, draws that accept and reject.
  RequestParams g = greedy(), r1 = random_req(21), r2 = random_req(22, 0.7f);
  g.top_logprobs = r1.top_logprobs = r2.top_logprobs = 3;
  r2.top_k = 3;
  Sampler all(config()), some(config());
  for (Sampler* s : {&all, &some}) {
    s->admit(0, g, &kDummy, 0);
    s->admit(1, r1, &kDummy, 0);
    s->admit(2, r2, &kDummy, 0);
  }
  VCall c;
  c.rows = {peak(1), peak(2), uniform4(), uniform4(), uniform4(), peak(3, 1.0f), peak(6, 2.0f)};
  c.cu_rows = {0, 2, 5, 7};
  c.drafts = {1, 0, 1, 3};
  c.rules = {static_cast<int32_t>(VerifyRule::kOneHot), static_cast<int32_t>(VerifyRule::kOneHot),
             static_cast<int32_t>(VerifyRule::kDenseDraftProbs)};
  c.dense.assign(4 * kV, 0.0f);
  c.dense[3 * kV + 3] = 1.0f;  // accepted with probability p(3) = 0.68, else the residual
  std::set<int32_t> outcomes;  // request 2's accepted count and first token, over the calls
  for (int call = 0; call < 8; ++call) {
    SCOPED_TRACE("call " + std::to_string(call));
    const VResult a = run_verify(all, c), b = run_verify(some, c, LogprobMode::kRaw, {}, false);
    EXPECT_EQ(a.tokens, b.tokens);
    outcomes.insert(a.num_accepted[2] * kV + a.tokens[2][0]);
    EXPECT_EQ(a.num_accepted, b.num_accepted);
    EXPECT_EQ(a.status, b.status);
    for (size_t q = 0; q < b.logprob.size(); ++q) {
      EXPECT_EQ(b.logprob[q], std::vector<float>(kStride, 777.0f));
      EXPECT_EQ(b.rank[q], std::vector<int32_t>(kStride, 0x5EED));
      EXPECT_NE(a.logprob[q][0], 777.0f);
    }
  }
  EXPECT_GE(outcomes.size(), 2u);  // the dense draft was both accepted and rejected
  for (int32_t slot = 0; slot < 3; ++slot) EXPECT_EQ(all.step(slot), some.step(slot));
}

}  // namespace
