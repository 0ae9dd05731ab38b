// The request table's history and step (SPEC.md sections 1-2 steps 3-4, docs/semantics.md
// "State updates" and the device-side status bits 2 and 3).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sonic/sampler.hpp"

namespace {

using namespace sonic;

constexpr float kInf = std::numeric_limits<float>::infinity();
const double kNegInfD = -std::numeric_limits<double>::infinity();

struct RowOut {
  int32_t token = 0;
  int32_t status = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_lp;
};

std::vector<RowOut> run_sample(Sampler& s, const std::vector<float>& logits, int64_t rows,
                               const int32_t* slots, LogprobMode mode, bool append = true) {
  const SamplerConfig& c = s.config();
  const int64_t vocab = c.vocab_size;
  const int64_t ts = std::max<int64_t>(1, c.max_top_logprobs);
  std::vector<int32_t> tokens(rows, 0x5EED), status(rows, 0x5EED), rank(rows, 0x5EED),
      top_ids(rows * ts, 0x5EED);
  std::vector<float> logprob(rows, 777.0f), top_lp(rows * ts, 777.0f);
  LogitsView lv;
  lv.data = logits.data();
  lv.dtype = DType::kF32;
  lv.rows = rows;
  lv.cols = vocab;
  lv.row_stride = vocab;
  SampleOutputs out;
  out.tokens = tokens.data();
  out.status = status.data();
  out.logprob = logprob.data();
  out.rank = rank.data();
  out.top_ids = top_ids.data();
  out.top_logprobs = top_lp.data();
  out.top_stride = ts;
  CallOptions opt;
  opt.logprob_mode = mode;
  opt.append_to_history = append;
  s.sample(lv, slots, BitmaskView{}, out, opt);
  std::vector<RowOut> res(rows);
  for (int64_t r = 0; r < rows; ++r) {
    res[r].token = tokens[r];
    res[r].status = status[r];
    res[r].logprob = logprob[r];
    res[r].rank = rank[r];
    res[r].top_ids.assign(top_ids.begin() + r * ts, top_ids.begin() + (r + 1) * ts);
    res[r].top_lp.assign(top_lp.begin() + r * ts, top_lp.begin() + (r + 1) * ts);
  }
  return res;
}

const int32_t kDummy = 0;

SamplerConfig config(int32_t vocab, int32_t slots, int32_t rows, int32_t history, int32_t top = 4) {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = vocab;
  c.max_slots = slots;
  c.max_rows = rows;
  c.max_drafts = 1;
  c.max_history = history;
  c.max_top_logprobs = top;
  c.max_final_entries = 4;
  return c;
}

double lse(const std::vector<double>& v) {
  double m = kNegInfD;
  for (double x : v) m = std::max(m, x);
  double s = 0.0;
  for (double x : v) s += std::exp(x - m);
  return m + std::log(s);
}

struct Lcg {
  uint64_t s;
  explicit Lcg(uint64_t seed) : s(seed) {}
  uint32_t next() {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint32_t>(s >> 33);
  }
};

// ---------------------------------------------------------------------------------------------

TEST(History, LongHistoryMatchesBruteForceCounts) {
  // 32768 tokens of history (20000 prompt + 12768 output, with many repeats), V = 512, greedy
  // rows in processed mode (T = 1): the x of every token is checked against counts made here by
  // brute force and SPEC.md steps 3-4 written out. Slot 0: default scopes; slot 1: both flags.
  const int32_t vocab = 512, kPrompt = 20000, kOutput = 12768;
  Sampler s(config(vocab, 2, 2, 32768 + 64, 20));
  Lcg g(12345);
  auto draw = [&]() -> int32_t {
    // Three quarters of the draws in ids 0..63 (heavy repeats), the rest anywhere.
    const uint32_t a = g.next(), b = g.next();
    return static_cast<int32_t>((a & 3u) ? b % 64u : b % static_cast<uint32_t>(vocab));
  };
  std::vector<int32_t> prompt(kPrompt), output(kOutput);
  for (int32_t& t : prompt) t = draw();
  for (int32_t& t : output) t = draw() / 2 + 100;  // a different mix: ids 100..355
  RequestParams p;
  p.temperature = 0.0f;
  p.repetition_penalty = 1.3f;
  p.frequency_penalty = 0.01f;
  p.presence_penalty = 0.2f;
  p.top_logprobs = 20;
  RequestParams q = p;
  q.repetition_output_only = true;
  q.penalties_include_prompt = true;
  s.admit(0, p, prompt.data(), kPrompt);
  s.admit(1, q, prompt.data(), kPrompt);
  // The output in uneven chunks through the API.
  for (int32_t slot = 0; slot < 2; ++slot) {
    int64_t at = 0;
    for (int64_t chunk : {1, 4095, 5000, 3672}) {
      s.append_output(slot, output.data() + at, chunk);
      at += chunk;
    }
    ASSERT_EQ(at, kOutput);
  }

  std::vector<float> row(vocab);
  for (int32_t t = 0; t < vocab; ++t)
    row[t] = static_cast<float>((t * 37) % 101) / 10.0f - 5.0f;  // [-5, 5]
  std::vector<float> logits = row;
  logits.insert(logits.end(), row.begin(), row.end());

  // Brute-force counts.
  std::vector<int32_t> cp(vocab, 0), co(vocab, 0);
  for (int32_t t : prompt) ++cp[t];
  for (int32_t t : output) ++co[t];

  const auto res = run_sample(s, logits, 2, nullptr, LogprobMode::kProcessed);
  for (int32_t slot = 0; slot < 2; ++slot) {
    SCOPED_TRACE("slot " + std::to_string(slot));
    const RequestParams& r = slot == 0 ? p : q;
    std::vector<float> x(vocab);
    for (int32_t t = 0; t < vocab; ++t) {
      float v = row[t];  // no mask, no bias
      const bool in_rep = r.repetition_output_only ? co[t] > 0 : cp[t] + co[t] > 0;
      if (in_rep) v = v > 0.0f ? v / r.repetition_penalty : v * r.repetition_penalty;
      const int32_t c = co[t] + (r.penalties_include_prompt ? cp[t] : 0);
      if (c > 0) {
        v = v - r.frequency_penalty * static_cast<float>(c);
        v = v - r.presence_penalty;
      }
      x[t] = v;
    }
    // The order (x descending, id ascending), its first 20, and the greedy token.
    std::vector<int32_t> order(vocab);
    for (int32_t t = 0; t < vocab; ++t) order[t] = t;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
    const double l = lse(std::vector<double>(x.begin(), x.end()));
    EXPECT_EQ(res[slot].token, order[0]);
    EXPECT_EQ(res[slot].status, kStatusOk);
    EXPECT_NEAR(res[slot].logprob, x[order[0]] - l, 1e-5);
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(res[slot].top_ids[i], order[i]) << i;
      EXPECT_NEAR(res[slot].top_lp[i], x[order[i]] - l, 1e-5) << i;
    }
    EXPECT_EQ(s.step(slot), 1u);
  }
  // The two scopes really differ on this history (else the test would not tell them apart).
  EXPECT_NE(res[0].top_ids, res[1].top_ids);
}

TEST(History, AppendingPastCapacityThrows) {
  Sampler s(config(8, 4, 4, 16));
  RequestParams p;
  const std::vector<int32_t> ten(10, 1), seven(7, 2), six(6, 3), seventeen(17, 4), sixteen(16, 5);
  s.admit(0, p, ten.data(), 10);
  // 10 + 7 = 17 > 16.
  try {
    s.append_output(0, seven.data(), 7);
    ADD_FAILURE() << "appending 7 to 10 with max_history 16 did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  }
  // The failed call changed nothing: 10 + 6 = 16 fits exactly.
  EXPECT_NO_THROW(s.append_output(0, six.data(), 6));
  // Full: one more throws.
  EXPECT_THROW(s.append_output(0, six.data(), 1), Error);
  // A prompt longer than the capacity is refused at admission; exactly the capacity is fine.
  EXPECT_THROW(s.admit(1, p, seventeen.data(), 17), Error);
  EXPECT_NO_THROW(s.admit(1, p, sixteen.data(), 16));
  EXPECT_THROW(s.append_output(1, six.data(), 1), Error);
  // Appending to a slot that was never admitted is a bad call too.
  EXPECT_THROW(s.append_output(2, six.data(), 1), Error);
}

TEST(History, FullHistoryStatusBit) {
  // max_history 16, filled with token 7 (10 prompt + 6 output). x = [4, 0 x6, 3], T = 1,
  // top_k = 1, repetition 2: x7 = 3 / 2 = 1.5, token 0 for sure. The sampler cannot append it:
  // status bit 3, the token itself valid, the step advanced. The next call shows token 0 was
  // not appended: its processed logprob is still 4 - log(e^4 + 6 + e^1.5) (with 0 in the history
  // it would be 2 - log(e^2 + 6 + e^1.5)).
  Sampler s(config(8, 2, 2, 16));
  RequestParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.repetition_penalty = 2.0f;
  p.seed = 5;
  p.top_logprobs = 2;
  const std::vector<int32_t> sevens(10, 7);
  s.admit(0, p, sevens.data(), 10);
  s.append_output(0, sevens.data(), 6);
  const std::vector<float> x = {4, 0, 0, 0, 0, 0, 0, 3};
  const double want = 4.0 - lse({4, 0, 0, 0, 0, 0, 0, 1.5});
  for (int i = 0; i < 3; ++i) {
    const RowOut o = run_sample(s, x, 1, nullptr, LogprobMode::kProcessed)[0];
    EXPECT_EQ(o.token, 0);
    EXPECT_EQ(o.status, kStatusHistoryFull);
    EXPECT_NEAR(o.logprob, want, 1e-5);
    EXPECT_EQ(s.step(0), static_cast<uint64_t>(i + 1));
  }
  // Greedy rows flag it as well; a row that is not full in the same call is not flagged.
  RequestParams gp;
  gp.temperature = 0.0f;
  s.admit(1, gp, sevens.data(), 1);
  const int32_t slots[2] = {1, 0};
  std::vector<float> two = x;
  two.insert(two.end(), x.begin(), x.end());
  const auto res = run_sample(s, two, 2, slots, LogprobMode::kRaw);
  EXPECT_EQ(res[0].token, 0);
  EXPECT_EQ(res[0].status, kStatusOk);
  EXPECT_EQ(res[1].token, 0);
  EXPECT_EQ(res[1].status, kStatusHistoryFull);
}

TEST(History, RetireThenReadmitResetsHistoryAndStep) {
  // x = [2, 1.5, 0 x6], T = 1, top_k = 1, repetition 2, initial_step 5.
  Sampler s(config(8, 4, 4, 64));
  RequestParams p;
  p.temperature = 1.0f;
  p.top_k = 1;
  p.repetition_penalty = 2.0f;
  p.seed = 9;
  p.initial_step = 5;
  p.top_logprobs = 2;
  const std::vector<float> x = {2, 1.5f, 0, 0, 0, 0, 0, 0};
  const int32_t slot = 1;
  s.admit(slot, p, &kDummy, 0);
  const int32_t zero = 0;
  s.append_output(slot, &zero, 1);
  // First life: 0 is in the history: x0 = 1 < 1.5 -> token 1, logprob 1.5 - lse([1, 1.5, 0 x6]).
  RowOut o = run_sample(s, x, 1, &slot, LogprobMode::kProcessed)[0];
  EXPECT_EQ(o.token, 1);
  EXPECT_NEAR(o.logprob, 1.5 - lse({1, 1.5, 0, 0, 0, 0, 0, 0}), 1e-5);
  EXPECT_EQ(s.step(slot), 6u);
  // Retired: the slot is not admitted: status bit 2, token -1.
  s.retire(slot);
  o = run_sample(s, x, 1, &slot, LogprobMode::kProcessed)[0];
  EXPECT_EQ(o.token, -1);
  EXPECT_EQ(o.status, kStatusInvalidInput);
  // Second life: step back at initial_step, empty history: x0 = 2 -> token 0 with
  // 2 - lse([2, 1.5, 0 x6]) (the old history {0, 1} would give x0 = 1, x1 = 0.75).
  s.admit(slot, p, &kDummy, 0);
  EXPECT_EQ(s.step(slot), 5u);
  o = run_sample(s, x, 1, &slot, LogprobMode::kProcessed)[0];
  EXPECT_EQ(o.token, 0);
  EXPECT_EQ(o.status, kStatusOk);
  EXPECT_NEAR(o.logprob, 2.0 - lse({2, 1.5, 0, 0, 0, 0, 0, 0}), 1e-5);
  EXPECT_EQ(s.step(slot), 6u);

  // Noise: a re-admitted request replays its first draw (same seed, same initial step).
  RequestParams r;
  r.temperature = 1.0f;
  r.seed = 77;
  r.initial_step = 5;
  const std::vector<float> flat(8, 0.0f);
  s.admit(2, r, &kDummy, 0);
  const int32_t slot2 = 2;
  const int32_t first = run_sample(s, flat, 1, &slot2, LogprobMode::kRaw)[0].token;
  for (int i = 0; i < 3; ++i) run_sample(s, flat, 1, &slot2, LogprobMode::kRaw);
  s.retire(2);
  s.admit(2, r, &kDummy, 0);
  EXPECT_EQ(run_sample(s, flat, 1, &slot2, LogprobMode::kRaw)[0].token, first);
}

TEST(History, InvalidSlotIdsFlagOnlyTheirRows) {
  // max_slots 4. Slot 0 admitted; slot 1 admitted then retired; 2 and 3 never admitted.
  // Rows: slots {0, 9, 2, -1, 1, 3}: rows 1-5 get status bit 2 and token -1 (semantics.md,
  // "Device-side input problems"); row 0 is what it would be alone.
  Sampler s(config(8, 4, 8, 64));
  RequestParams p;
  p.temperature = 0.9f;
  p.seed = 3;
  p.top_logprobs = 3;
  s.admit(0, p, &kDummy, 0);
  s.admit(1, p, &kDummy, 0);
  s.retire(1);
  const std::vector<float> row = {0.5f, -1.25f, 3.0f, 2.75f, -0.125f, 1.0f, 0.0f, 2.5f};
  std::vector<float> logits;
  for (int r = 0; r < 6; ++r) logits.insert(logits.end(), row.begin(), row.end());
  const int32_t slots[6] = {0, 9, 2, -1, 1, 3};
  const auto res = run_sample(s, logits, 6, slots, LogprobMode::kProcessed);
  for (int r = 1; r < 6; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    EXPECT_EQ(res[r].token, -1);
    EXPECT_EQ(res[r].status, kStatusInvalidInput);
    EXPECT_EQ(res[r].logprob, -kInf);  // semantics.md 4: token -1 -> logprob -inf, rank 0
    EXPECT_EQ(res[r].rank, 0);
  }
  EXPECT_EQ(s.step(0), 1u);

  Sampler alone(config(8, 4, 8, 64));
  alone.admit(0, p, &kDummy, 0);
  const RowOut solo = run_sample(alone, row, 1, nullptr, LogprobMode::kProcessed)[0];
  EXPECT_EQ(res[0].token, solo.token);
  EXPECT_EQ(res[0].status, kStatusOk);
  EXPECT_EQ(res[0].logprob, solo.logprob);
  EXPECT_EQ(res[0].rank, solo.rank);
  EXPECT_EQ(res[0].top_ids, solo.top_ids);
  // The invalid rows changed no state: a second call with slot 0 alone matches the second call
  // of the solo sampler.
  const int32_t zero = 0;
  const RowOut again = run_sample(s, row, 1, &zero, LogprobMode::kProcessed)[0];
  const RowOut solo2 = run_sample(alone, row, 1, nullptr, LogprobMode::kProcessed)[0];
  EXPECT_EQ(again.token, solo2.token);
  EXPECT_EQ(again.logprob, solo2.logprob);
}

}  // namespace
