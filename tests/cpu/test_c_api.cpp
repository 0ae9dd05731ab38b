// The C API (include/sonic/sonic_c.h): a full round trip on the CPU backend gives exactly what the
// C++ API gives on the same inputs; bad calls return the right status with a message from
// sonic_last_error(); nothing throws through it.
#include "sonic/sonic_c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sonic/sonic.hpp"

namespace {

constexpr int32_t kVocab = 70;
constexpr int32_t kCols = 72;
constexpr int32_t kSlots = 4;
constexpr int32_t kRows = 6;
constexpr int32_t kDrafts = 2;
constexpr int32_t kTop = 4;
constexpr int32_t kFinal = 16;

sonic_config c_config() {
  sonic_config c;
  sonic_config_default(&c);
  c.backend = SONIC_BACKEND_CPU;
  c.vocab_size = kVocab;
  c.max_slots = kSlots;
  c.max_rows = kRows;
  c.max_drafts = kDrafts;
  c.max_history = 256;
  c.max_top_logprobs = kTop;
  c.max_final_entries = kFinal;
  return c;
}

sonic::SamplerConfig cpp_config() {
  sonic::SamplerConfig c;
  c.backend = sonic::Backend::kCpu;
  c.vocab_size = kVocab;
  c.max_slots = kSlots;
  c.max_rows = kRows;
  c.max_drafts = kDrafts;
  c.max_history = 256;
  c.max_top_logprobs = kTop;
  c.max_final_entries = kFinal;
  return c;
}

// Per-slot request lists, kept alive for the C structs that point into them.
struct SlotLists {
  std::vector<int32_t> bias_ids;
  std::vector<float> bias_values;
  std::vector<int32_t> banned, allowed, prompt;
};

std::vector<SlotLists> make_lists() {
  std::vector<SlotLists> l(kSlots);
  for (int32_t s = 0; s < kSlots; ++s) l[s].prompt = {3, 5, 8, static_cast<int32_t>(10 + s), 5};
  l[1].bias_ids = {2, 9, 40};
  l[1].bias_values = {1.5f, -0.75f, 2.0f};
  l[1].banned = {0, 1};
  l[2].allowed = {4, 5, 6, 7, 8, 9, 20, 21, 22, 30, 31, 32, 33, 50};
  l[3].banned = {5};
  return l;
}

// The same four requests in both APIs: greedy, penalised random, top-p/min-p, joint top-p.
sonic_request_params c_params(int32_t slot, const SlotLists& l) {
  sonic_request_params p;
  sonic_request_params_default(&p);
  p.seed = 0xABCDEF0123ull + static_cast<uint64_t>(slot);
  p.initial_step = 40 + static_cast<uint64_t>(slot);
  p.top_logprobs = slot == 0 ? 0 : kTop - slot + 1;
  switch (slot) {
    case 0:
      p.temperature = 0.0f;
      p.repetition_penalty = 1.2f;
      break;
    case 1:
      p.temperature = 0.7f;
      p.top_k = 12;
      p.frequency_penalty = 0.4f;
      p.presence_penalty = 0.6f;
      p.penalties_include_prompt = 1;
      p.repetition_penalty = 1.1f;
      p.repetition_output_only = 1;
      break;
    case 2:
      p.temperature = 1.3f;
      p.top_p = 0.85f;
      p.min_p = 0.02f;
      break;
    default:
      p.temperature = 1.0f;
      p.top_p = 0.7f;
      p.top_p_joint = 1;
      p.top_k = 30;
      break;
  }
  p.logit_bias_ids = l.bias_ids.data();
  p.logit_bias_values = l.bias_values.data();
  p.logit_bias_count = static_cast<int64_t>(l.bias_ids.size());
  p.banned_tokens = l.banned.data();
  p.banned_count = static_cast<int64_t>(l.banned.size());
  p.allowed_tokens = l.allowed.data();
  p.allowed_count = static_cast<int64_t>(l.allowed.size());
  return p;
}

sonic::RequestParams cpp_params(int32_t slot, const SlotLists& l) {
  const sonic_request_params c = c_params(slot, l);
  sonic::RequestParams p;
  p.temperature = c.temperature;
  p.top_k = c.top_k;
  p.top_p = c.top_p;
  p.top_p_joint = c.top_p_joint != 0;
  p.min_p = c.min_p;
  p.repetition_penalty = c.repetition_penalty;
  p.repetition_output_only = c.repetition_output_only != 0;
  p.frequency_penalty = c.frequency_penalty;
  p.presence_penalty = c.presence_penalty;
  p.penalties_include_prompt = c.penalties_include_prompt != 0;
  for (size_t i = 0; i < l.bias_ids.size(); ++i)
    p.logit_bias.emplace_back(l.bias_ids[i], l.bias_values[i]);
  p.banned_tokens = l.banned;
  p.allowed_tokens = l.allowed;
  p.seed = c.seed;
  p.initial_step = c.initial_step;
  p.top_logprobs = c.top_logprobs;
  return p;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct SampleBuffers {
  std::vector<int32_t> tokens, status, rank, top_ids, final_ids, final_count;
  std::vector<float> logprob, top_logprobs, final_probs;
  explicit SampleBuffers(int32_t rows)
      : tokens(rows, -7), status(rows, -7), rank(rows, -7), top_ids(rows * kTop, -7),
        final_ids(rows * kFinal, -7), final_count(rows, -7), logprob(rows, 9.0f),
        top_logprobs(rows * kTop, 9.0f), final_probs(rows * kFinal, 9.0f) {}
};

void expect_same(const SampleBuffers& a, const SampleBuffers& b) {
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.status, b.status);
  EXPECT_EQ(a.rank, b.rank);
  EXPECT_EQ(a.top_ids, b.top_ids);
  EXPECT_EQ(a.final_ids, b.final_ids);
  EXPECT_EQ(a.final_count, b.final_count);
  EXPECT_TRUE(same_bits(a.logprob, b.logprob));
  EXPECT_TRUE(same_bits(a.top_logprobs, b.top_logprobs));
  EXPECT_TRUE(same_bits(a.final_probs, b.final_probs));
}

struct VerifyBuffers {
  std::vector<int32_t> tokens, num_accepted, status, rank, top_ids;
  std::vector<float> logprob, top_logprobs;
  VerifyBuffers(int32_t requests, int32_t rows)
      : tokens(requests * (kDrafts + 1), -7), num_accepted(requests, -7), status(rows, -7),
        rank(requests * (kDrafts + 1), -7), top_ids(requests * (kDrafts + 1) * kTop, -7),
        logprob(requests * (kDrafts + 1), 9.0f),
        top_logprobs(requests * (kDrafts + 1) * kTop, 9.0f) {}
};

std::vector<float> random_logits(int32_t rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.5f);
  std::vector<float> v(static_cast<size_t>(rows) * kCols);
  for (float& x : v) x = normal(rng);
  return v;
}

std::string last_error() { return sonic_last_error(); }

TEST(CApi, Version) {
  const std::string v = sonic_version();
  EXPECT_FALSE(v.empty());
  EXPECT_EQ(std::count(v.begin(), v.end(), '.'), 2) << v;
}

TEST(CApi, DefaultsAreNeutral) {
  sonic_request_params p;
  std::memset(&p, 0xFF, sizeof p);
  sonic_request_params_default(&p);
  EXPECT_EQ(p.temperature, 1.0f);
  EXPECT_EQ(p.top_k, 0);
  EXPECT_EQ(p.top_p, 1.0f);
  EXPECT_EQ(p.top_p_joint, 0);
  EXPECT_EQ(p.min_p, 0.0f);
  EXPECT_EQ(p.repetition_penalty, 1.0f);
  EXPECT_EQ(p.repetition_output_only, 0);
  EXPECT_EQ(p.frequency_penalty, 0.0f);
  EXPECT_EQ(p.presence_penalty, 0.0f);
  EXPECT_EQ(p.penalties_include_prompt, 0);
  EXPECT_EQ(p.logit_bias_ids, nullptr);
  EXPECT_EQ(p.logit_bias_values, nullptr);
  EXPECT_EQ(p.logit_bias_count, 0);
  EXPECT_EQ(p.banned_tokens, nullptr);
  EXPECT_EQ(p.banned_count, 0);
  EXPECT_EQ(p.allowed_tokens, nullptr);
  EXPECT_EQ(p.allowed_count, 0);
  EXPECT_EQ(p.seed, 0u);
  EXPECT_EQ(p.initial_step, 0u);
  EXPECT_EQ(p.top_logprobs, 0);

  sonic_config c;
  std::memset(&c, 0xFF, sizeof c);
  sonic_config_default(&c);
  EXPECT_EQ(c.backend, SONIC_BACKEND_AUTO);
  EXPECT_EQ(c.vocab_size, 0);
  EXPECT_EQ(c.max_slots, 0);
  EXPECT_EQ(c.max_rows, 0);
  EXPECT_EQ(c.max_drafts, 0);
  EXPECT_EQ(c.max_history, 32768);
  EXPECT_EQ(c.max_token_list, sonic::SamplerConfig{}.max_token_list);
  EXPECT_EQ(c.max_top_logprobs, 0);
  EXPECT_EQ(c.max_final_entries, 0);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(c.cpu_threads, 1);

  sonic_call_options o;
  std::memset(&o, 0xFF, sizeof o);
  sonic_call_options_default(&o);
  EXPECT_EQ(o.logprob_mode, SONIC_LOGPROB_RAW);
  EXPECT_EQ(o.advance_step, 1);
  EXPECT_EQ(o.append_to_history, 1);
  EXPECT_EQ(o.stream, nullptr);

  sonic_logits l;
  std::memset(&l, 0xFF, sizeof l);
  sonic_logits_default(&l);
  EXPECT_EQ(l.data, nullptr);
  EXPECT_EQ(l.dtype, SONIC_DTYPE_F32);
  EXPECT_EQ(l.rows, 0);

  sonic_bitmask b;
  std::memset(&b, 0xFF, sizeof b);
  sonic_bitmask_default(&b);
  EXPECT_EQ(b.data, nullptr);
  EXPECT_EQ(b.row_index, nullptr);

  sonic_sample_outputs so;
  std::memset(&so, 0xFF, sizeof so);
  sonic_sample_outputs_default(&so);
  EXPECT_EQ(so.tokens, nullptr);
  EXPECT_EQ(so.final_count, nullptr);
  EXPECT_EQ(so.top_stride, 0);

  sonic_verify_inputs vi;
  std::memset(&vi, 0xFF, sizeof vi);
  sonic_verify_inputs_default(&vi);
  EXPECT_EQ(vi.num_requests, 0);
  EXPECT_EQ(vi.cu_rows, nullptr);
  EXPECT_EQ(vi.rules, nullptr);
  EXPECT_EQ(vi.draft_probs.dense, nullptr);
  EXPECT_EQ(vi.draft_probs.sparse_count, nullptr);
  EXPECT_EQ(vi.draft_probs.sparse_stride, 0);

  sonic_verify_outputs vo;
  std::memset(&vo, 0xFF, sizeof vo);
  sonic_verify_outputs_default(&vo);
  EXPECT_EQ(vo.tokens, nullptr);
  EXPECT_EQ(vo.num_accepted, nullptr);
  EXPECT_EQ(vo.out_stride, 0);

  // NULL is ignored.
  sonic_config_default(nullptr);
  sonic_request_params_default(nullptr);
  sonic_call_options_default(nullptr);
  sonic_verify_inputs_default(nullptr);
}

// create, admit, sample, append, verify, retire, destroy: the C API and the C++ API agree bit for
// bit on every output and on the step counters.
TEST(CApi, RoundTripMatchesCpp) {
  const std::vector<SlotLists> lists = make_lists();

  sonic_config cfg = c_config();
  sonic_sampler* s = nullptr;
  ASSERT_EQ(sonic_sampler_create(&cfg, &s), SONIC_OK) << last_error();
  ASSERT_NE(s, nullptr);
  sonic::Sampler cpp(cpp_config());

  sonic_config got;
  ASSERT_EQ(sonic_sampler_get_config(s, &got), SONIC_OK);
  EXPECT_EQ(got.backend, SONIC_BACKEND_CPU);
  EXPECT_EQ(got.vocab_size, kVocab);
  EXPECT_EQ(got.max_final_entries, kFinal);

  for (int32_t slot = 0; slot < kSlots; ++slot) {
    const SlotLists& l = lists[slot];
    const sonic_request_params p = c_params(slot, l);
    ASSERT_EQ(sonic_admit(s, slot, &p, l.prompt.data(), static_cast<int64_t>(l.prompt.size()),
                          nullptr),
              SONIC_OK)
        << last_error();
    cpp.admit(slot, cpp_params(slot, l), l.prompt.data(), static_cast<int64_t>(l.prompt.size()));
    uint64_t step = 0;
    ASSERT_EQ(sonic_get_step(s, slot, &step), SONIC_OK);
    EXPECT_EQ(step, 40u + static_cast<uint64_t>(slot));
  }

  // Output history added by hand, in both.
  const int32_t extra[3] = {9, 9, 2};
  ASSERT_EQ(sonic_append_output(s, 1, extra, 3, nullptr), SONIC_OK) << last_error();
  cpp.append_output(1, extra, 3);

  // A single-step batch: five rows over the four slots (slot 2 twice), with a bitmask on some.
  const int32_t rows = 5;
  const std::vector<float> logits = random_logits(rows, 77);
  const int32_t slots[rows] = {3, 0, 2, 1, 2};
  const int32_t words = (kVocab + 31) / 32;
  std::vector<int32_t> mask(static_cast<size_t>(2) * words, -1);
  mask[1] = 0x0F0F0F0F;  // mask row 1 removes some ids of the second word
  const int32_t mask_index[rows] = {-1, 1, 0, -1, 1};

  for (int mode : {SONIC_LOGPROB_RAW, SONIC_LOGPROB_PROCESSED, SONIC_LOGPROB_FINAL}) {
    SCOPED_TRACE(mode);
    SampleBuffers a(rows), b(rows);

    sonic_logits lv;
    sonic_logits_default(&lv);
    lv.data = logits.data();
    lv.dtype = SONIC_DTYPE_F32;
    lv.rows = rows;
    lv.cols = kCols;
    lv.row_stride = kCols;
    sonic_bitmask bm;
    sonic_bitmask_default(&bm);
    bm.data = mask.data();
    bm.rows = 2;
    bm.words = words;
    bm.row_stride = words;
    bm.row_index = mask_index;
    sonic_sample_outputs out;
    sonic_sample_outputs_default(&out);
    out.tokens = a.tokens.data();
    out.status = a.status.data();
    out.logprob = a.logprob.data();
    out.rank = a.rank.data();
    out.top_ids = a.top_ids.data();
    out.top_logprobs = a.top_logprobs.data();
    out.top_stride = kTop;
    out.final_ids = a.final_ids.data();
    out.final_probs = a.final_probs.data();
    out.final_count = a.final_count.data();
    out.final_stride = kFinal;
    sonic_call_options opt;
    sonic_call_options_default(&opt);
    opt.logprob_mode = mode;
    ASSERT_EQ(sonic_sample(s, &lv, slots, &bm, &out, &opt), SONIC_OK) << last_error();

    sonic::SampleOutputs co;
    co.tokens = b.tokens.data();
    co.status = b.status.data();
    co.logprob = b.logprob.data();
    co.rank = b.rank.data();
    co.top_ids = b.top_ids.data();
    co.top_logprobs = b.top_logprobs.data();
    co.top_stride = kTop;
    co.final_ids = b.final_ids.data();
    co.final_probs = b.final_probs.data();
    co.final_count = b.final_count.data();
    co.final_stride = kFinal;
    sonic::CallOptions copt;
    copt.logprob_mode = static_cast<sonic::LogprobMode>(mode);
    cpp.sample(sonic::LogitsView{logits.data(), sonic::DType::kF32, rows, kCols, kCols}, slots,
               sonic::BitmaskView{mask.data(), 2, words, words, mask_index}, co, copt);

    expect_same(a, b);
    for (int32_t r = 0; r < rows; ++r) {
      EXPECT_GE(a.tokens[r], 0) << "row " << r;
      EXPECT_LT(a.tokens[r], kVocab) << "row " << r;
    }
    // The greedy row (slot 0) keeps to its mask row.
    const int32_t t = a.tokens[1];
    EXPECT_TRUE((static_cast<uint32_t>(mask[words + t / 32]) >> (t % 32)) & 1u) << t;
  }
  for (int32_t slot = 0; slot < kSlots; ++slot) {
    uint64_t step = 0;
    ASSERT_EQ(sonic_get_step(s, slot, &step), SONIC_OK);
    EXPECT_EQ(step, cpp.step(slot)) << "slot " << slot;
  }

  // Null slots / bitmask / options: rows are slots 0..rows-1, no mask, default options; and an
  // opt-out of the state updates.
  {
    SampleBuffers a(kSlots), b(kSlots);
    sonic_logits lv;
    sonic_logits_default(&lv);
    lv.data = logits.data();
    lv.rows = kSlots;
    lv.cols = kCols;
    lv.row_stride = kCols;
    sonic_sample_outputs out;
    sonic_sample_outputs_default(&out);
    out.tokens = a.tokens.data();
    out.logprob = a.logprob.data();
    ASSERT_EQ(sonic_sample(s, &lv, nullptr, nullptr, &out, nullptr), SONIC_OK) << last_error();
    sonic::SampleOutputs co;
    co.tokens = b.tokens.data();
    co.logprob = b.logprob.data();
    cpp.sample(sonic::LogitsView{logits.data(), sonic::DType::kF32, kSlots, kCols, kCols},
               nullptr, sonic::BitmaskView{}, co);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_TRUE(same_bits(a.logprob, b.logprob));

    uint64_t before = 0, after = 0;
    ASSERT_EQ(sonic_get_step(s, 0, &before), SONIC_OK);
    sonic_call_options opt;
    sonic_call_options_default(&opt);
    opt.advance_step = 0;
    opt.append_to_history = 0;
    ASSERT_EQ(sonic_sample(s, &lv, nullptr, nullptr, &out, &opt), SONIC_OK) << last_error();
    ASSERT_EQ(sonic_get_step(s, 0, &after), SONIC_OK);
    EXPECT_EQ(before, after);
  }

  // Verification: request 0 = slot 1 with two drafts (one-hot), request 1 = slot 0 (greedy) with
  // one draft, request 2 = slot 3 with none (strict rule).
  {
    const int32_t requests = 3;
    const int32_t vrows = 3 + 2 + 1;
    const std::vector<float> vlogits = random_logits(vrows, 99);
    const int32_t cu_rows[requests + 1] = {0, 3, 5, 6};
    const int32_t vslots[requests] = {1, 0, 3};
    const int32_t drafts[3] = {4, 33, 17};
    const int32_t rules[requests] = {SONIC_VERIFY_ONE_HOT, SONIC_VERIFY_ONE_HOT,
                                     SONIC_VERIFY_STRICT};
    VerifyBuffers a(requests, vrows), b(requests, vrows);

    sonic_logits lv;
    sonic_logits_default(&lv);
    lv.data = vlogits.data();
    lv.rows = vrows;
    lv.cols = kCols;
    lv.row_stride = kCols;
    sonic_verify_inputs in;
    sonic_verify_inputs_default(&in);
    in.num_requests = requests;
    in.cu_rows = cu_rows;
    in.slots = vslots;
    in.draft_tokens = drafts;
    in.num_drafts_capacity = 3;
    in.rules = rules;
    sonic_verify_outputs out;
    sonic_verify_outputs_default(&out);
    out.tokens = a.tokens.data();
    out.num_accepted = a.num_accepted.data();
    out.out_stride = kDrafts + 1;
    out.status = a.status.data();
    out.logprob = a.logprob.data();
    out.rank = a.rank.data();
    out.top_ids = a.top_ids.data();
    out.top_logprobs = a.top_logprobs.data();
    out.top_stride = kTop;
    sonic_call_options opt;
    sonic_call_options_default(&opt);
    opt.logprob_mode = SONIC_LOGPROB_PROCESSED;
    ASSERT_EQ(sonic_verify(s, &lv, &in, nullptr, &out, &opt), SONIC_OK) << last_error();

    sonic::VerifyInputs ci;
    ci.num_requests = requests;
    ci.cu_rows = cu_rows;
    ci.slots = vslots;
    ci.draft_tokens = drafts;
    ci.num_drafts_capacity = 3;
    ci.rules = rules;
    sonic::VerifyOutputs co;
    co.tokens = b.tokens.data();
    co.num_accepted = b.num_accepted.data();
    co.out_stride = kDrafts + 1;
    co.status = b.status.data();
    co.logprob = b.logprob.data();
    co.rank = b.rank.data();
    co.top_ids = b.top_ids.data();
    co.top_logprobs = b.top_logprobs.data();
    co.top_stride = kTop;
    sonic::CallOptions copt;
    copt.logprob_mode = sonic::LogprobMode::kProcessed;
    cpp.verify(sonic::LogitsView{vlogits.data(), sonic::DType::kF32, vrows, kCols, kCols}, ci,
               sonic::BitmaskView{}, co, copt);

    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.num_accepted, b.num_accepted);
    EXPECT_EQ(a.status, b.status);
    EXPECT_EQ(a.rank, b.rank);
    EXPECT_EQ(a.top_ids, b.top_ids);
    EXPECT_TRUE(same_bits(a.logprob, b.logprob));
    EXPECT_TRUE(same_bits(a.top_logprobs, b.top_logprobs));
    for (int32_t r = 0; r < requests; ++r) {
      const int32_t n = cu_rows[r + 1] - cu_rows[r] - 1;
      EXPECT_GE(a.num_accepted[r], 0);
      EXPECT_LE(a.num_accepted[r], n);
      // Accepted drafts, one emitted token, then -1.
      const int32_t* row = &a.tokens[static_cast<size_t>(r) * (kDrafts + 1)];
      for (int32_t j = 0; j < a.num_accepted[r]; ++j) EXPECT_EQ(row[j], drafts[cu_rows[r] - r + j]);
      EXPECT_GE(row[a.num_accepted[r]], 0);
      for (int32_t j = a.num_accepted[r] + 1; j < kDrafts + 1; ++j) EXPECT_EQ(row[j], -1);
    }
    for (int32_t slot = 0; slot < kSlots; ++slot) {
      uint64_t step = 0;
      ASSERT_EQ(sonic_get_step(s, slot, &step), SONIC_OK);
      EXPECT_EQ(step, cpp.step(slot)) << "slot " << slot;
    }
  }

  // Retire: the slot's rows are flagged afterwards, the same in both.
  ASSERT_EQ(sonic_retire(s, 2, nullptr), SONIC_OK) << last_error();
  cpp.retire(2);
  {
    SampleBuffers a(1), b(1);
    const int32_t slot = 2;
    sonic_logits lv;
    sonic_logits_default(&lv);
    lv.data = logits.data();
    lv.rows = 1;
    lv.cols = kCols;
    lv.row_stride = kCols;
    sonic_sample_outputs out;
    sonic_sample_outputs_default(&out);
    out.tokens = a.tokens.data();
    out.status = a.status.data();
    ASSERT_EQ(sonic_sample(s, &lv, &slot, nullptr, &out, nullptr), SONIC_OK) << last_error();
    EXPECT_EQ(a.tokens[0], -1);
    EXPECT_NE(a.status[0] & SONIC_STATUS_INVALID_INPUT, 0);
    sonic::SampleOutputs co;
    co.tokens = b.tokens.data();
    co.status = b.status.data();
    cpp.sample(sonic::LogitsView{logits.data(), sonic::DType::kF32, 1, kCols, kCols}, &slot,
               sonic::BitmaskView{}, co);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.status, b.status);
  }

  sonic_sampler_destroy(s);
  sonic_sampler_destroy(nullptr);  // a no-op
}

// Each failing call returns the C++ error code, and sonic_last_error() names the argument.
TEST(CApi, ErrorsAndMessages) {
  sonic_sampler* s = reinterpret_cast<sonic_sampler*>(0x1);
  EXPECT_EQ(sonic_sampler_create(nullptr, &s), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(last_error().find("config = null"), std::string::npos) << last_error();

  sonic_config cfg = c_config();
  EXPECT_EQ(sonic_sampler_create(&cfg, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out = null"), std::string::npos) << last_error();

  cfg.vocab_size = 0;
  EXPECT_EQ(sonic_sampler_create(&cfg, &s), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(last_error().find("sonic: invalid argument config.vocab_size = 0"), std::string::npos)
      << last_error();

  cfg = c_config();
  cfg.backend = 7;
  EXPECT_EQ(sonic_sampler_create(&cfg, &s), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("config.backend = 7"), std::string::npos) << last_error();

  cfg = c_config();
  ASSERT_EQ(sonic_sampler_create(&cfg, &s), SONIC_OK) << last_error();

  sonic_request_params p;
  sonic_request_params_default(&p);
  p.top_p = 1.5f;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("sonic: invalid argument params.top_p = 1.5: must be in (0, 1]"),
            std::string::npos)
      << last_error();

  sonic_request_params_default(&p);
  p.logit_bias_count = 2;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("params->logit_bias_ids = null"), std::string::npos)
      << last_error();
  const int32_t ids[2] = {1, 2};
  p.logit_bias_ids = ids;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("params->logit_bias_values = null"), std::string::npos)
      << last_error();
  sonic_request_params_default(&p);
  p.banned_count = -1;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("params->banned_count = -1"), std::string::npos) << last_error();
  sonic_request_params_default(&p);
  p.allowed_count = 3;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("params->allowed_tokens = null"), std::string::npos)
      << last_error();
  // A repeated id in the C lists is the C++ check's error.
  sonic_request_params_default(&p);
  const int32_t rep[2] = {4, 4};
  const float vals[2] = {1.0f, 2.0f};
  p.logit_bias_ids = rep;
  p.logit_bias_values = vals;
  p.logit_bias_count = 2;
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("params.logit_bias[1].token = 4: repeated token id"),
            std::string::npos)
      << last_error();

  sonic_request_params_default(&p);
  EXPECT_EQ(sonic_admit(s, kSlots, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("slot = 4"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_admit(s, 0, &p, nullptr, 2, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("prompt = null"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_admit(s, 0, nullptr, nullptr, 0, nullptr), SONIC_OK) << last_error();  // defaults

  EXPECT_EQ(sonic_retire(s, -1, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("slot = -1"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_append_output(s, 0, nullptr, 1, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("tokens = null"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_get_step(s, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out = null"), std::string::npos) << last_error();
  uint64_t step = 123;
  EXPECT_EQ(sonic_get_step(s, 99, &step), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("slot = 99"), std::string::npos) << last_error();

  // sample(): null structs and a bad field.
  std::vector<float> logits = random_logits(1, 5);
  int32_t token = -5;
  sonic_logits lv;
  sonic_logits_default(&lv);
  lv.data = logits.data();
  lv.rows = 1;
  lv.cols = kCols;
  lv.row_stride = kCols;
  sonic_sample_outputs out;
  sonic_sample_outputs_default(&out);
  out.tokens = &token;
  EXPECT_EQ(sonic_sample(s, nullptr, nullptr, nullptr, &out, nullptr),
            SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("logits = null"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_sample(s, &lv, nullptr, nullptr, nullptr, nullptr),
            SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out = null"), std::string::npos) << last_error();
  lv.dtype = 5;
  EXPECT_EQ(sonic_sample(s, &lv, nullptr, nullptr, &out, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("logits.dtype = 5"), std::string::npos) << last_error();
  lv.dtype = SONIC_DTYPE_F32;
  sonic_call_options opt;
  sonic_call_options_default(&opt);
  opt.logprob_mode = 4;
  EXPECT_EQ(sonic_sample(s, &lv, nullptr, nullptr, &out, &opt), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("options.logprob_mode = 4"), std::string::npos) << last_error();
  EXPECT_EQ(token, -5);  // nothing written
  ASSERT_EQ(sonic_get_step(s, 0, &step), SONIC_OK);
  EXPECT_EQ(step, 0u);  // nothing advanced

  // verify(): null structs and a bad field.
  sonic_verify_inputs in;
  sonic_verify_inputs_default(&in);
  sonic_verify_outputs vout;
  sonic_verify_outputs_default(&vout);
  vout.out_stride = kDrafts + 1;
  EXPECT_EQ(sonic_verify(s, nullptr, &in, nullptr, &vout, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("logits = null"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_verify(s, &lv, nullptr, nullptr, &vout, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("in = null"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_verify(s, &lv, &in, nullptr, nullptr, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("out = null"), std::string::npos) << last_error();
  in.num_requests = 1;
  EXPECT_EQ(sonic_verify(s, &lv, &in, nullptr, &vout, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("in.cu_rows = null"), std::string::npos) << last_error();
  in.num_requests = 0;
  EXPECT_EQ(sonic_verify(s, &lv, &in, nullptr, &vout, nullptr), SONIC_OK) << last_error();

  // A successful call leaves the last message in place (it is the last *failed* call's).
  EXPECT_NE(last_error().find("in.cu_rows = null"), std::string::npos) << last_error();

  sonic_sampler_destroy(s);
}

TEST(CApi, NullHandle) {
  const char* expect = "sonic: invalid argument sampler = null";
  sonic_request_params p;
  sonic_request_params_default(&p);
  EXPECT_EQ(sonic_admit(nullptr, 0, &p, nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  EXPECT_EQ(sonic_retire(nullptr, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  const int32_t tok = 1;
  EXPECT_EQ(sonic_append_output(nullptr, 0, &tok, 1, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  uint64_t step = 0;
  EXPECT_EQ(sonic_get_step(nullptr, 0, &step), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  sonic_config cfg;
  EXPECT_EQ(sonic_sampler_get_config(nullptr, &cfg), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  sonic_logits lv;
  sonic_logits_default(&lv);
  sonic_sample_outputs out;
  sonic_sample_outputs_default(&out);
  EXPECT_EQ(sonic_sample(nullptr, &lv, nullptr, nullptr, &out, nullptr),
            SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  sonic_verify_inputs in;
  sonic_verify_inputs_default(&in);
  sonic_verify_outputs vout;
  sonic_verify_outputs_default(&vout);
  EXPECT_EQ(sonic_verify(nullptr, &lv, &in, nullptr, &vout, nullptr),
            SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find(expect), std::string::npos) << last_error();
  sonic_sampler_destroy(nullptr);
}

// The message is per thread: "" on a thread where nothing has failed, and one thread's failure
// does not show on another.
TEST(CApi, LastErrorIsThreadLocal) {
  std::string fresh = "unset";
  std::thread([&] { fresh = sonic_last_error(); }).join();
  EXPECT_EQ(fresh, "");

  std::string other;
  int32_t status = SONIC_OK;
  std::thread([&] {
    status = sonic_retire(nullptr, 0, nullptr);
    other = sonic_last_error();
  }).join();
  EXPECT_EQ(status, SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(other.find("sampler = null"), std::string::npos) << other;

  sonic_config cfg = c_config();
  cfg.max_rows = -3;
  sonic_sampler* s = nullptr;
  EXPECT_EQ(sonic_sampler_create(&cfg, &s), SONIC_ERROR_INVALID_ARGUMENT);
  const std::string mine = sonic_last_error();
  std::thread([] {
    sonic_config bad;
    sonic_config_default(&bad);
    sonic_sampler* t = nullptr;
    (void)sonic_sampler_create(&bad, &t);
  }).join();
  EXPECT_EQ(mine, last_error());
  EXPECT_NE(mine.find("config.max_rows = -3"), std::string::npos) << mine;
}

// sonic_max_final_entries: the C++ limit, behind a status; a bad call leaves *out as it was.
TEST(CApi, MaxFinalEntries) {
  EXPECT_EQ(sonic_max_final_entries(SONIC_BACKEND_CPU, 0, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("sonic: invalid argument out = null"), std::string::npos) << last_error();
  int32_t limit = 0;
  ASSERT_EQ(sonic_max_final_entries(SONIC_BACKEND_CPU, 0, &limit), SONIC_OK) << last_error();
  EXPECT_EQ(limit, std::numeric_limits<int32_t>::max());
  limit = 5;
  EXPECT_EQ(sonic_max_final_entries(7, 0, &limit), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("backend = 7"), std::string::npos) << last_error();
  EXPECT_EQ(sonic_max_final_entries(SONIC_BACKEND_CPU, -1, &limit), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(last_error().find("device = -1"), std::string::npos) << last_error();
  EXPECT_EQ(limit, 5);
  if (sonic_cuda_available()) {
    ASSERT_EQ(sonic_max_final_entries(SONIC_BACKEND_CUDA, 0, &limit), SONIC_OK) << last_error();
    EXPECT_EQ(limit, sonic::max_final_entries(sonic::Backend::kCuda, 0));
  } else {
    EXPECT_EQ(sonic_max_final_entries(SONIC_BACKEND_CUDA, 0, &limit), SONIC_ERROR_UNSUPPORTED);
    EXPECT_NE(last_error().find("sonic:"), std::string::npos) << last_error();
    EXPECT_EQ(limit, 5);
    ASSERT_EQ(sonic_max_final_entries(SONIC_BACKEND_AUTO, 0, &limit), SONIC_OK) << last_error();
    EXPECT_EQ(limit, std::numeric_limits<int32_t>::max());
  }
}

// CUDA asked for where there is none: a status, not a crash.
TEST(CApi, CudaBackendUnavailable) {
  EXPECT_EQ(sonic_cuda_available(), sonic::cuda_available() ? 1 : 0);
  if (sonic_cuda_available()) GTEST_SKIP() << "a GPU is present";
  sonic_config cfg = c_config();
  cfg.backend = SONIC_BACKEND_CUDA;
  sonic_sampler* s = nullptr;
  const sonic_status st = sonic_sampler_create(&cfg, &s);
  EXPECT_TRUE(st == SONIC_ERROR_UNSUPPORTED || st == SONIC_ERROR_CUDA) << st;
  EXPECT_EQ(s, nullptr);
  EXPECT_NE(last_error().find("sonic:"), std::string::npos) << last_error();
}

}  // namespace
