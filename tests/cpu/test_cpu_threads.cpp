// SamplerConfig::cpu_threads: the CPU backend spreads a call's rows (verification: its requests)
// over threads, and nothing it writes or keeps may depend on how many. Samplers of 1, 3 and "one a
// hardware thread" threads run the same calls (rows with every rule, a slot named twice, bad slot
// and bitmask rows, verification requests with bad and overlapping cu_rows) and must agree on
// every output and on the state the next call reads.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "sonic/sampler.hpp"

namespace {

using namespace sonic;

constexpr int32_t kVocab = 300, kCols = 304, kWords = 10;  // ceil(300 / 32) = 10
constexpr int32_t kSlots = 6, kRows = 14, kDrafts = 3, kTop = 4, kFinal = 40;

SamplerConfig config(int32_t threads) {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = kVocab;
  c.max_slots = kSlots;
  c.max_rows = kRows;
  c.max_drafts = kDrafts;
  c.max_history = 20;  // small: slot 0 fills its history in the fifth call, mid-call
  c.max_top_logprobs = kTop;
  c.max_final_entries = kFinal;
  c.cpu_threads = threads;
  return c;
}

// A different rule set a slot.
RequestParams params(int32_t slot) {
  RequestParams p;
  p.seed = 100 + slot;
  p.top_logprobs = kTop;
  switch (slot) {
    case 0: p.temperature = 0.8f; p.top_k = 20; p.top_p = 0.9f; break;
    case 1: p.temperature = 0.0f; p.repetition_penalty = 1.3f; break;
    case 2: p.temperature = 1.1f; p.min_p = 0.05f; p.frequency_penalty = 0.4f; p.presence_penalty = 0.3f; break;
    case 3: p.temperature = 0.7f; p.top_p = 0.8f; p.top_p_joint = true; break;
    case 4: p.temperature = 1.0f; break;  // untruncated
    default: p.temperature = 0.9f; p.top_k = 5; p.penalties_include_prompt = true; p.repetition_penalty = 0.8f; break;
  }
  return p;
}

struct Outputs {
  std::vector<int32_t> i32;
  std::vector<float> f32;
  bool operator==(const Outputs& o) const {
    // Bitwise, so that NaN and -0 compare too.
    return i32 == o.i32 && f32.size() == o.f32.size() &&
           std::memcmp(f32.data(), o.f32.data(), f32.size() * sizeof(float)) == 0;
  }
};

class Twin {
 public:
  explicit Twin(int32_t threads) : s_(config(threads)) {
    const std::vector<int32_t> prompt = {3, 7, 7, 11, 250, 299};
    for (int32_t slot = 0; slot < kSlots - 1; ++slot)  // the last slot stays empty: a bad row
      s_.admit(slot, params(slot), prompt.data(), static_cast<int64_t>(prompt.size()));
  }

  Outputs sample(const std::vector<float>& logits, const std::vector<int32_t>& slots,
                 const std::vector<int32_t>& mask, const std::vector<int32_t>& mask_index, LogprobMode mode) {
    const int64_t rows = static_cast<int64_t>(slots.size());
    Outputs o;
    o.i32.assign(rows * (3 + kTop + kFinal + 1), 0x5EED);
    o.f32.assign(rows * (1 + kTop + kFinal), 777.0f);
    SampleOutputs out;
    int32_t* i = o.i32.data();
    float* f = o.f32.data();
    out.tokens = i; i += rows;
    out.status = i; i += rows;
    out.rank = i; i += rows;
    out.top_ids = i; i += rows * kTop;
    out.final_ids = i; i += rows * kFinal;
    out.final_count = i;
    out.logprob = f; f += rows;
    out.top_logprobs = f; f += rows * kTop;
    out.final_probs = f;
    out.top_stride = kTop;
    out.final_stride = kFinal;
    BitmaskView bm;
    bm.data = mask.data();
    bm.rows = static_cast<int64_t>(mask.size()) / kWords;
    bm.words = kWords;
    bm.row_stride = kWords;
    bm.row_index = mask_index.data();
    CallOptions opt;
    opt.logprob_mode = mode;
    s_.sample(LogitsView{logits.data(), DType::kF32, rows, kCols, kCols}, slots.data(), bm, out, opt);
    return o;
  }

  Outputs top_k(const std::vector<float>& logits, int64_t rows, int32_t k) {
    Outputs o;
    o.i32.assign(rows * k, 0x5EED);
    o.f32.assign(rows * k, 777.0f);
    s_.top_k(LogitsView{logits.data(), DType::kF32, rows, kCols, kCols}, k, TopKOutputs{o.i32.data(), o.f32.data(), k});
    return o;
  }

  Outputs verify(const std::vector<float>& logits, int64_t rows, const std::vector<int32_t>& cu_rows,
                 const std::vector<int32_t>& slots, const std::vector<int32_t>& drafts) {
    const int32_t B = static_cast<int32_t>(slots.size());
    const int64_t stride = kDrafts + 1;
    Outputs o;
    o.i32.assign(B * stride * (2 + kTop) + B + rows, 0x5EED);
    o.f32.assign(B * stride * (1 + kTop), 777.0f);
    VerifyInputs in;
    in.num_requests = B;
    in.cu_rows = cu_rows.data();
    in.slots = slots.data();
    in.draft_tokens = drafts.data();
    in.num_drafts_capacity = static_cast<int64_t>(drafts.size());
    VerifyOutputs out;
    int32_t* i = o.i32.data();
    out.tokens = i; i += B * stride;
    out.rank = i; i += B * stride;
    out.top_ids = i; i += B * stride * kTop;
    out.num_accepted = i; i += B;
    out.status = i;
    out.logprob = o.f32.data();
    out.top_logprobs = o.f32.data() + B * stride;
    out.out_stride = stride;
    out.top_stride = kTop;
    s_.verify(LogitsView{logits.data(), DType::kF32, rows, kCols, kCols}, in, BitmaskView{}, out);
    return o;
  }

  std::vector<uint64_t> steps() const {
    std::vector<uint64_t> v;
    for (int32_t slot = 0; slot < kSlots - 1; ++slot) v.push_back(s_.step(slot));
    return v;
  }

 private:
  Sampler s_;
};

std::vector<float> random_logits(uint64_t seed, int64_t rows) {
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> x(rows * kCols, 0.0f);
  for (int64_t i = 0; i < rows * kCols; ++i) {
    x[i] = u(g);
    if (i % 97 == 5) x[i] = x[i - 1];  // ties
  }
  return x;
}

TEST(CpuThreads, OutputsAndStateIndependentOfThreadCount) {
  std::vector<std::unique_ptr<Twin>> runs;
  for (int32_t threads : {1, 3, 0}) runs.push_back(std::make_unique<Twin>(threads));
  // Grammar masks: row 0 allows the even ids, row 1 the first 40.
  std::vector<int32_t> mask(2 * kWords, 0);
  for (int32_t w = 0; w < kWords; ++w) mask[w] = 0x55555555;
  mask[kWords + 0] = -1;
  mask[kWords + 1] = 0xFF;
  const std::vector<int32_t> slots = {0, 1, 2, 3, 4, 0, 5, 2, 1, 3, -1, 4, 0, 2};   // 0 and 2 twice or more; 5 empty; -1 bad
  const std::vector<int32_t> mask_index = {0, -1, 1, -1, -1, 1, -1, 0, 7, -1, -1, 0, -1, -1};  // 7: outside
  const LogprobMode modes[] = {LogprobMode::kProcessed, LogprobMode::kRaw, LogprobMode::kFinal};
  for (int call = 0; call < 6; ++call) {
    SCOPED_TRACE(call);
    const std::vector<float> x = random_logits(call, kRows);
    const Outputs want = runs[0]->sample(x, slots, mask, mask_index, modes[call % 3]);
    for (size_t t = 1; t < runs.size(); ++t)
      EXPECT_TRUE(runs[t]->sample(x, slots, mask, mask_index, modes[call % 3]) == want) << "threads run " << t;
    for (size_t t = 1; t < runs.size(); ++t) EXPECT_EQ(runs[t]->steps(), runs[0]->steps());
  }
  const std::vector<float> x = random_logits(99, kRows);
  const Outputs top = runs[0]->top_k(x, kRows, 17);
  for (size_t t = 1; t < runs.size(); ++t) EXPECT_TRUE(runs[t]->top_k(x, kRows, 17) == top);
  // Verification: requests of 1 to 4 rows, one on the empty slot, one whose cu_rows step back into
  // the request before (its rows are flagged invalid, over rows another request wrote).
  const std::vector<int32_t> cu_rows = {0, 3, 4, 8, 6, 10, 12};
  const std::vector<int32_t> vslots = {0, 1, 2, 3, 5, 4};
  std::vector<int32_t> drafts(8);
  for (size_t i = 0; i < drafts.size(); ++i) drafts[i] = static_cast<int32_t>(37 * i % kVocab);
  for (int call = 0; call < 3; ++call) {
    SCOPED_TRACE(call);
    const std::vector<float> v = random_logits(50 + call, 12);
    const Outputs want = runs[0]->verify(v, 12, cu_rows, vslots, drafts);
    for (size_t t = 1; t < runs.size(); ++t) EXPECT_TRUE(runs[t]->verify(v, 12, cu_rows, vslots, drafts) == want);
    for (size_t t = 1; t < runs.size(); ++t) EXPECT_EQ(runs[t]->steps(), runs[0]->steps());
  }
  // The last calls read the histories every call before appended (penalties): still equal.
  const std::vector<float> last = random_logits(123, kRows);
  const Outputs want = runs[0]->sample(last, slots, mask, mask_index, LogprobMode::kProcessed);
  for (size_t t = 1; t < runs.size(); ++t)
    EXPECT_TRUE(runs[t]->sample(last, slots, mask, mask_index, LogprobMode::kProcessed) == want);
}

}  // namespace
