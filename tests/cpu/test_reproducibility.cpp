// SPEC.md section 4's requirement: a row's outputs depend only on its logits, its request's
// parameters, seed and step; not on the batch size, the row's position, the slot it occupies or
// the dtype of values that every dtype represents. Plus the step and history updates of
// docs/semantics.md ("State updates").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "common/random.hpp"
#include "sonic/sampler.hpp"

namespace {

using namespace sonic;

const double kNegInfD = -std::numeric_limits<double>::infinity();

struct RowOut {
  int32_t token = 0;
  int32_t status = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lp;
  int32_t final_count = 0;
  std::vector<int32_t> final_ids;
  std::vector<float> final_probs;
};

// Every output asked for, or (with_logprobs false) all but the logprob, rank and top-N.
std::vector<RowOut> run_sample(Sampler& s, const LogitsView& lv, const int32_t* slots,
                               const CallOptions& opt, bool with_logprobs = true) {
  const SamplerConfig& c = s.config();
  const int64_t rows = lv.rows;
  const int64_t ts = std::max<int64_t>(1, c.max_top_logprobs);
  const int64_t fs = std::max<int64_t>(1, c.max_final_entries);
  std::vector<int32_t> tokens(rows, 0x5EED), status(rows, 0x5EED), rank(rows, 0x5EED),
      top_ids(rows * ts, 0x5EED), final_ids(rows * fs, 0x5EED), final_count(rows, 0x5EED);
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
  if (!with_logprobs) {
    out.logprob = nullptr;
    out.rank = nullptr;
    out.top_ids = nullptr;
    out.top_logprobs = nullptr;
  }
  s.sample(lv, slots, BitmaskView{}, out, opt);
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

LogitsView view(const void* data, DType dt, int64_t rows, int64_t cols) {
  LogitsView lv;
  lv.data = data;
  lv.dtype = dt;
  lv.rows = rows;
  lv.cols = cols;
  lv.row_stride = cols;
  return lv;
}

const int32_t kDummy = 0;

// Small deterministic generator for test data.
struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed * 6364136223846793005ull + 1442695040888963407ull) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
};

// Values k / 64 with |k| <= 255: 8 significant bits at most, so exact in fp32, bf16 and fp16.
std::vector<float> representable_row(Lcg& g, int32_t vocab) {
  std::vector<float> v(vocab);
  for (float& x : v) x = static_cast<float>(static_cast<int32_t>(g.next() % 511) - 255) / 64.0f;
  return v;
}

uint16_t to_bf16_exact(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  EXPECT_EQ(b & 0xFFFFu, 0u) << f << " is not a bf16 value";
  return static_cast<uint16_t>(b >> 16);
}

// Binary16 encoding of a value known to be exact in fp16 and normal or zero (|x| >= 2^-14).
uint16_t to_fp16_exact(float f) {
  if (f == 0.0f) return std::signbit(f) ? 0x8000 : 0x0000;
  const uint16_t sign = f < 0 ? 0x8000 : 0;
  int e = 0;
  const double m = std::frexp(std::fabs(static_cast<double>(f)), &e);  // |f| = m 2^e, m in [.5,1)
  // |f| = (2m) 2^(e-1): biased exponent e - 1 + 15, mantissa (2m - 1) * 1024.
  const int biased = e - 1 + 15;
  EXPECT_GT(biased, 0);
  EXPECT_LT(biased, 31);
  const double man = (2.0 * m - 1.0) * 1024.0;
  EXPECT_EQ(man, std::floor(man)) << f << " is not an fp16 value";
  return static_cast<uint16_t>(sign | (biased << 10) | static_cast<int>(man));
}

SamplerConfig config(int32_t vocab, int32_t slots, int32_t rows) {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = vocab;
  c.max_slots = slots;
  c.max_rows = rows;
  c.max_drafts = 2;
  c.max_history = 512;
  c.max_top_logprobs = 5;
  c.max_final_entries = 24;
  return c;
}

void expect_same(const RowOut& a, const RowOut& b, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.token, b.token);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.logprob, b.logprob);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.top_ids, b.top_ids);
  EXPECT_EQ(a.top_lp, b.top_lp);
  EXPECT_EQ(a.final_count, b.final_count);
  EXPECT_EQ(a.final_ids, b.final_ids);
  EXPECT_EQ(a.final_probs, b.final_probs);
}

// ---------------------------------------------------------------------------------------------

TEST(Reproducibility, IndependentOfBatchPositionSlotAndDtype) {
  const int32_t vocab = 64, kCalls = 5;
  RequestParams target;
  target.temperature = 0.8f;
  target.top_k = 20;
  target.top_p = 0.95f;
  target.min_p = 0.01f;
  target.repetition_penalty = 1.2f;
  target.frequency_penalty = 0.3f;
  target.presence_penalty = 0.2f;
  target.logit_bias = {{7, 0.5f}};
  target.seed = 0xDEADBEEF12345ull;
  target.initial_step = 41;
  target.top_logprobs = 5;
  const std::vector<int32_t> prompt = {3, 5, 5, 9};
  const std::vector<int32_t> output = {5, 12};

  // The target's logits for each call.
  Lcg g(1);
  std::vector<std::vector<float>> target_rows;
  for (int c = 0; c < kCalls; ++c) target_rows.push_back(representable_row(g, vocab));

  struct Layout {
    int32_t batch, row, slot;
    DType dtype;
  };
  const Layout layouts[] = {{1, 0, 0, DType::kF32},    {3, 1, 2, DType::kF32},
                            {3, 2, 0, DType::kF32},    {17, 16, 11, DType::kF32},
                            {17, 0, 19, DType::kF32},  {17, 7, 4, DType::kF32},
                            {1, 0, 0, DType::kBF16},   {1, 0, 0, DType::kF16},
                            {17, 9, 13, DType::kBF16}, {3, 0, 1, DType::kF16}};

  for (LogprobMode mode : {LogprobMode::kRaw, LogprobMode::kProcessed, LogprobMode::kFinal}) {
    std::vector<std::vector<RowOut>> results;  // [layout][call]
    for (const Layout& L : layouts) {
      Sampler s(config(vocab, 20, 20));
      s.admit(L.slot, target, prompt.data(), static_cast<int64_t>(prompt.size()));
      s.append_output(L.slot, output.data(), static_cast<int64_t>(output.size()));
      // Other rows: other requests in other slots, with their own parameters and logits.
      std::vector<int32_t> slots(L.batch);
      int32_t next_slot = 0;
      for (int32_t r = 0; r < L.batch; ++r) {
        if (r == L.row) {
          slots[r] = L.slot;
          continue;
        }
        if (next_slot == L.slot) ++next_slot;
        slots[r] = next_slot++;
        RequestParams f;
        f.temperature = (r % 3 == 0) ? 0.0f : 0.5f + 0.1f * static_cast<float>(r);
        f.top_k = r % 5;
        f.repetition_penalty = 1.0f + 0.05f * static_cast<float>(r % 4);
        f.seed = 1000u + static_cast<uint64_t>(r);
        f.initial_step = static_cast<uint64_t>(r) * 3;
        f.top_logprobs = r % 6;
        const std::vector<int32_t> fp = {r % vocab, (2 * r + 1) % vocab};
        s.admit(slots[r], f, fp.data(), 2);
      }
      Lcg fill(100 + L.batch * 7 + L.row);
      std::vector<RowOut> per_call;
      for (int c = 0; c < kCalls; ++c) {
        std::vector<float> m;
        for (int32_t r = 0; r < L.batch; ++r) {
          const std::vector<float> row =
              r == L.row ? target_rows[c] : representable_row(fill, vocab);
          m.insert(m.end(), row.begin(), row.end());
        }
        std::vector<uint16_t> h;
        for (float v : m)
          h.push_back(L.dtype == DType::kBF16 ? to_bf16_exact(v) : to_fp16_exact(v));
        const void* data = L.dtype == DType::kF32 ? static_cast<const void*>(m.data())
                                                  : static_cast<const void*>(h.data());
        CallOptions opt;
        opt.logprob_mode = mode;
        // The batch-1 slot-0 layout uses the implicit row -> slot map (slots = null).
        const bool implicit = L.batch == 1 && L.slot == 0;
        const auto res = run_sample(s, view(data, L.dtype, L.batch, vocab),
                                    implicit ? nullptr : slots.data(), opt);
        per_call.push_back(res[L.row]);
      }
      EXPECT_EQ(s.step(L.slot), 41u + kCalls);
      results.push_back(per_call);
    }
    for (size_t l = 1; l < results.size(); ++l)
      for (int c = 0; c < kCalls; ++c)
        expect_same(results[0][c], results[l][c],
                    "mode " + std::to_string(static_cast<int>(mode)) + " layout " +
                        std::to_string(l) + " call " + std::to_string(c));
    // The calls' tokens are real tokens.
    for (int c = 0; c < kCalls; ++c) {
      EXPECT_GE(results[0][c].token, 0);
      EXPECT_LT(results[0][c].token, vocab);
    }
  }
}

TEST(Reproducibility, LogprobOutputsChangeNothingElse) {
  // A call that asks for no logprob, rank or top-N skips their computation (and, for top-k rows
  // without the joint rule, orders only the first k tokens): tokens, statuses, final distributions
  // and the next calls' state must be those of a call that asks for everything, and the outputs it
  // did not ask for stay untouched. Rows of every kind; V above the reference's radix cut (256).
  const int32_t vocab = 300, rows = 8, kCalls = 4;
  std::vector<RequestParams> params(rows);
  params[0].temperature = 0.0f;
  params[1].top_k = 20;
  params[2].top_k = 40, params[2].top_p = 0.8f;
  params[3].top_k = 40, params[3].top_p = 0.8f, params[3].top_p_joint = true;
  params[4].top_k = 30, params[4].min_p = 0.05f, params[4].repetition_penalty = 1.3f;
  params[5].top_p = 0.9f;
  params[6].min_p = 0.1f, params[6].frequency_penalty = 0.5f;
  params[7].top_k = 500;  // past V: disabled
  for (int32_t r = 0; r < rows; ++r) {
    params[r].seed = 100 + r;
    params[r].top_logprobs = 5;
  }
  const std::vector<int32_t> prompt = {3, 5, 5, 9, 250};
  Sampler all(config(vocab, rows, rows)), some(config(vocab, rows, rows));
  for (int32_t r = 0; r < rows; ++r) {
    all.admit(r, params[r], prompt.data(), static_cast<int64_t>(prompt.size()));
    some.admit(r, params[r], prompt.data(), static_cast<int64_t>(prompt.size()));
  }
  Lcg g(5);
  for (int c = 0; c < kCalls; ++c) {
    std::vector<float> logits;
    for (int32_t r = 0; r < rows; ++r) {
      const std::vector<float> row = representable_row(g, vocab);
      logits.insert(logits.end(), row.begin(), row.end());
    }
    const LogitsView lv = view(logits.data(), DType::kF32, rows, vocab);
    const std::vector<RowOut> a = run_sample(all, lv, nullptr, {});
    const std::vector<RowOut> b = run_sample(some, lv, nullptr, {}, false);
    for (int32_t r = 0; r < rows; ++r) {
      SCOPED_TRACE("call " + std::to_string(c) + ", row " + std::to_string(r));
      EXPECT_EQ(a[r].token, b[r].token);
      EXPECT_EQ(a[r].status, b[r].status);
      EXPECT_EQ(a[r].final_count, b[r].final_count);
      EXPECT_EQ(a[r].final_ids, b[r].final_ids);
      EXPECT_EQ(a[r].final_probs, b[r].final_probs);
      EXPECT_EQ(b[r].logprob, 777.0f);
      EXPECT_EQ(b[r].rank, 0x5EED);
      EXPECT_EQ(b[r].top_ids, std::vector<int32_t>(b[r].top_ids.size(), 0x5EED));
      EXPECT_EQ(a[r].top_ids.size(), 5u);
    }
  }
  for (int32_t r = 0; r < rows; ++r) EXPECT_EQ(all.step(r), some.step(r));
}

TEST(Reproducibility, StepAdvancingChangesTheNoise) {
  // Uniform logits (all 0), T = 1: the token is argmax_t G(seed, step, kind 0, pos 0, t), a new
  // draw at every step.
  const int32_t vocab = 64;
  const std::vector<float> zeros(vocab, 0.0f);
  RequestParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler s(config(vocab, 2, 2));
  s.admit(0, p, &kDummy, 0);
  std::vector<int32_t> tokens;
  for (int i = 0; i < 24; ++i) {
    EXPECT_EQ(s.step(0), static_cast<uint64_t>(i));
    const RowOut o = run_sample(s, view(zeros.data(), DType::kF32, 1, vocab), nullptr, {})[0];
    tokens.push_back(o.token);
    // By hand: argmax of the noise.
    int32_t best = -1;
    double bg = kNegInfD, second = kNegInfD;
    for (int32_t t = 0; t < vocab; ++t) {
      const double gt = detail::gumbel_from_uniform_exact(detail::uniform_from_word(
          detail::random_word(7, static_cast<uint64_t>(i), 0, static_cast<uint32_t>(t))));
      if (gt > bg) {
        second = bg;
        bg = gt;
        best = t;
      } else if (gt > second) {
        second = gt;
      }
    }
    if (bg - second > 1e-6) {
      EXPECT_EQ(o.token, best) << "step " << i;
    }
  }
  EXPECT_EQ(s.step(0), 24u);
  // 24 uniform draws over 64 ids: all equal with probability 64^-23.
  EXPECT_GT(std::set<int32_t>(tokens.begin(), tokens.end()).size(), 8u);

  // A request admitted at initial_step 7 reproduces the draw made at step 7.
  RequestParams q = p;
  q.initial_step = 7;
  Sampler t(config(vocab, 2, 2));
  t.admit(1, q, &kDummy, 0);
  const int32_t slot1 = 1;
  const RowOut o7 = run_sample(t, view(zeros.data(), DType::kF32, 1, vocab), &slot1, {})[0];
  EXPECT_EQ(o7.token, tokens[7]);
  EXPECT_EQ(t.step(1), 8u);

  // A different seed gives a different sequence.
  RequestParams r = p;
  r.seed = 8;
  Sampler u(config(vocab, 2, 2));
  u.admit(0, r, &kDummy, 0);
  std::vector<int32_t> other;
  for (int i = 0; i < 24; ++i)
    other.push_back(run_sample(u, view(zeros.data(), DType::kF32, 1, vocab), nullptr, {})[0].token);
  EXPECT_NE(other, tokens);
}

TEST(Reproducibility, AdvanceStepFalseKeepsTheStep) {
  const int32_t vocab = 64;
  const std::vector<float> zeros(vocab, 0.0f);
  RequestParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  p.initial_step = 3;
  Sampler s(config(vocab, 2, 2));
  s.admit(0, p, &kDummy, 0);
  CallOptions keep;
  keep.advance_step = false;
  keep.append_to_history = false;
  std::set<int32_t> seen;
  for (int i = 0; i < 10; ++i) {
    seen.insert(run_sample(s, view(zeros.data(), DType::kF32, 1, vocab), nullptr, keep)[0].token);
    EXPECT_EQ(s.step(0), 3u);
  }
  EXPECT_EQ(seen.size(), 1u);  // same seed, same step, same logits: same token every time
  // Advancing resumes from 3.
  run_sample(s, view(zeros.data(), DType::kF32, 1, vocab), nullptr, {});
  EXPECT_EQ(s.step(0), 4u);
}

double lse(const std::vector<double>& v) {
  double m = kNegInfD;
  for (double x : v) m = std::max(m, x);
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

TEST(Reproducibility, AppendToHistoryFeedsNextCallsPenalties) {
  // V = 8, x = [2, 1, 0 x6], T = 1, top_k = 1 (token 0 for sure while x0 > x1),
  // repetition 1.5. Processed logprob of token 0:
  //   no penalty:      2 - log(e^2 + e^1 + 6)
  //   0 in history:    x0 = 2 / 1.5 = 1.3333334: x0 - log(e^x0 + e^1 + 6)
  const std::vector<float> x = {2, 1, 0, 0, 0, 0, 0, 0};
  RequestParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.repetition_penalty = 1.5f;
  p.seed = 3;
  p.top_logprobs = 2;
  const double plain = 2.0 - lse({2, 1, 0, 0, 0, 0, 0, 0});
  const double x0 = 2.0f / 1.5f;
  const double penalised = x0 - lse({x0, 1, 0, 0, 0, 0, 0, 0});
  CallOptions proc;
  proc.logprob_mode = LogprobMode::kProcessed;
  CallOptions no_append = proc;
  no_append.append_to_history = false;
  const LogitsView lv = view(x.data(), DType::kF32, 1, 8);
  {
    // Appending (the default): the second call sees token 0 in the output history.
    Sampler s(config(8, 1, 1));
    s.admit(0, p, &kDummy, 0);
    const RowOut a = run_sample(s, lv, nullptr, proc)[0];
    EXPECT_EQ(a.token, 0);
    EXPECT_NEAR(a.logprob, plain, 1e-5);
    const RowOut b = run_sample(s, lv, nullptr, proc)[0];
    EXPECT_EQ(b.token, 0);
    EXPECT_NEAR(b.logprob, penalised, 1e-5);
  }
  {
    // Not appending: the second call is unpenalised.
    Sampler s(config(8, 1, 1));
    s.admit(0, p, &kDummy, 0);
    EXPECT_EQ(run_sample(s, lv, nullptr, no_append)[0].token, 0);
    const RowOut b = run_sample(s, lv, nullptr, proc)[0];
    EXPECT_NEAR(b.logprob, plain, 1e-5);
    // append_output by hand has the same effect as the sampler's own append.
    const int32_t zero = 0;
    s.append_output(0, &zero, 1);
    // (The call above already appended its own token 0, so x0 is penalised once either way:
    // repetition does not compound.)
    const RowOut c = run_sample(s, lv, nullptr, proc)[0];
    EXPECT_NEAR(c.logprob, penalised, 1e-5);
  }
  {
    // Only append_output: no sampler append, one manual append.
    Sampler s(config(8, 1, 1));
    s.admit(0, p, &kDummy, 0);
    EXPECT_EQ(run_sample(s, lv, nullptr, no_append)[0].token, 0);
    const int32_t zero = 0;
    s.append_output(0, &zero, 1);
    const RowOut c = run_sample(s, lv, nullptr, no_append)[0];
    EXPECT_NEAR(c.logprob, penalised, 1e-5);
  }
  {
    // A frequency penalty accumulates over the calls: phi = 0.5, x0 = 2 - 0.5 c after c
    // appends: 2, 1.5, 1.0 (tied with x1 = 1: top-1 keeps id 0), 0.5 (< 1: token 1).
    RequestParams f;
    f.temperature = 1.0f;
    f.top_k = 1;
    f.frequency_penalty = 0.5f;
    f.seed = 4;
    Sampler s(config(8, 1, 1));
    s.admit(0, f, &kDummy, 0);
    std::vector<int32_t> got;
    for (int i = 0; i < 4; ++i) got.push_back(run_sample(s, lv, nullptr, proc)[0].token);
    EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 0, 1}));
  }
}

TEST(Reproducibility, SlotNamedTwiceReadsTheStartState) {
  // semantics.md: every row of a call reads the state as of the start of the call; a slot
  // named by two rows is advanced and appended once per row. Two rows on slot 0 with the same
  // logits: same step, same history -> same token; then the step is +2 and both tokens are in
  // the history (a frequency penalty of 10 on a uniform row then excludes that token).
  const int32_t vocab = 16;
  const std::vector<float> two(2 * vocab, 0.0f);
  RequestParams p;
  p.temperature = 1.0f;
  p.seed = 11;
  p.frequency_penalty = 10.0f;
  p.top_logprobs = 0;
  Sampler s(config(vocab, 2, 4));
  s.admit(0, p, &kDummy, 0);
  const int32_t slots[2] = {0, 0};
  CallOptions proc;
  proc.logprob_mode = LogprobMode::kProcessed;
  const auto res = run_sample(s, view(two.data(), DType::kF32, 2, vocab), slots, proc);
  EXPECT_EQ(res[0].token, res[1].token);
  EXPECT_EQ(res[0].logprob, res[1].logprob);
  EXPECT_EQ(s.step(0), 2u);
  // The token now has c = 2 in the output: x = 0 - 10 * 2 = -20 while the other 15 stay at 0.
  // The final distribution of the next (untruncated) uniform row lists it last.
  const std::vector<float> one(vocab, 0.0f);
  const auto after = run_sample(s, view(one.data(), DType::kF32, 1, vocab), nullptr, proc)[0];
  ASSERT_EQ(after.final_count, vocab);
  EXPECT_EQ(after.final_ids[vocab - 1], res[0].token);
  // e^-20 / (15 + e^-20): the penalty saw a count of 2 (c = 1 would give e^-10 / (15 + e^-10)).
  EXPECT_NEAR(after.final_probs[vocab - 1], std::exp(-20.0) / (15.0 + std::exp(-20.0)), 1e-12);
}

}  // namespace
