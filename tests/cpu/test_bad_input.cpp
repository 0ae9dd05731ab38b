// SPEC.md section 5, host side: every bad shape, stride, pointer, size or parameter is an error
// (sonic::Error, kInvalidArgument) whose message names the argument and its value, and a call that
// fails has launched nothing: poisoned outputs stay as they were, and the slots' steps and
// histories are those of a twin sampler that never saw the bad call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "sonic/sonic.hpp"

namespace {

using sonic::Backend;
using sonic::BitmaskView;
using sonic::CallOptions;
using sonic::DType;
using sonic::Error;
using sonic::ErrorCode;
using sonic::LogitsView;
using sonic::LogprobMode;
using sonic::RequestParams;
using sonic::Sampler;
using sonic::SamplerConfig;
using sonic::SampleOutputs;
using sonic::VerifyInputs;
using sonic::VerifyOutputs;

constexpr int32_t kVocab = 100;
constexpr int32_t kCols = 104;  // padded rows
constexpr int32_t kWords = 4;   // ceil(100 / 32)
constexpr int32_t kSlots = 4;
constexpr int32_t kRows = 4;
constexpr int32_t kDrafts = 2;
constexpr int32_t kTop = 3;
constexpr int32_t kFinal = 5;
constexpr int32_t kHistory = 64;
constexpr int32_t kPoisonI = 0x5EED5EED;
constexpr float kPoisonF = 777.25f;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

SamplerConfig test_config() {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = kVocab;
  c.max_slots = kSlots;
  c.max_rows = kRows;
  c.max_drafts = kDrafts;
  c.max_history = kHistory;
  c.max_top_logprobs = kTop;
  c.max_final_entries = kFinal;
  return c;
}

// Parameters that make every slot's result depend on its history, step and seed.
RequestParams slot_params(int32_t slot) {
  RequestParams p;
  p.seed = 1000 + slot;
  p.initial_step = 7 + slot;
  p.top_logprobs = kTop;
  switch (slot) {
    case 0:
      p.temperature = 0.0f;
      p.repetition_penalty = 1.3f;
      p.presence_penalty = 0.5f;
      break;
    case 1:
      p.temperature = 0.8f;
      p.top_k = 10;
      p.presence_penalty = 2.0f;
      p.frequency_penalty = 0.3f;
      break;
    case 2:
      p.top_p = 0.9f;
      p.min_p = 0.05f;
      p.logit_bias = {{7, 1.5f}, {11, -0.5f}};
      p.banned_tokens = {3};
      p.repetition_penalty = 0.8f;
      break;
    default:
      p.temperature = 1.2f;
      for (int32_t t = 0; t < 40; ++t) p.allowed_tokens.push_back(2 * t);
      p.penalties_include_prompt = true;
      p.frequency_penalty = 1.0f;
      break;
  }
  return p;
}

std::vector<int32_t> slot_prompt(int32_t slot) {
  return {static_cast<int32_t>(5 + slot), 9, 12, static_cast<int32_t>(20 + 3 * slot), 9};
}

void admit_all(Sampler& s) {
  for (int32_t slot = 0; slot < kSlots; ++slot) {
    const std::vector<int32_t> prompt = slot_prompt(slot);
    s.admit(slot, slot_params(slot), prompt.data(), static_cast<int64_t>(prompt.size()));
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// f() must throw kInvalidArgument with "sonic: invalid argument NAME = VALUE: ..." in its message.
void expect_invalid(const std::function<void()>& f, const std::string& name,
                    const std::string& value) {
  SCOPED_TRACE(name + " = " + value);
  try {
    f();
    ADD_FAILURE() << "no error for " << name << " = " << value;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    const std::string msg = e.what();
    EXPECT_NE(msg.find("sonic: invalid argument " + name + " = " + value + ": "), std::string::npos)
        << "message: " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a sonic::Error: " << e.what();
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every output array of both call kinds, filled with a poison value.
struct Buffers {
  std::vector<int32_t> tokens, status, rank, top_ids, final_ids, final_count, num_accepted;
  std::vector<float> logprob, top_logprobs, final_probs;

  Buffers() { poison(); }
  void poison() {
    const size_t big = static_cast<size_t>(kRows) * (kDrafts + 1) * kTop;
    for (auto* v : {&tokens, &status, &rank, &top_ids, &final_ids, &final_count, &num_accepted})
      v->assign(big, kPoisonI);
    for (auto* v : {&logprob, &top_logprobs, &final_probs}) v->assign(big, kPoisonF);
  }
  bool poisoned() const {
    for (const auto* v : {&tokens, &status, &rank, &top_ids, &final_ids, &final_count,
                          &num_accepted})
      if (std::any_of(v->begin(), v->end(), [](int32_t x) { return x != kPoisonI; })) return false;
    for (const auto* v : {&logprob, &top_logprobs, &final_probs})
      if (std::any_of(v->begin(), v->end(), [](float x) { return x != kPoisonF; })) return false;
    return true;
  }
};

// One single-step call's arguments.
struct SampleCall {
  LogitsView logits;
  const int32_t* slots = nullptr;
  BitmaskView bitmask;
  SampleOutputs out;
  CallOptions options;
  void run(Sampler& s) const { s.sample(logits, slots, bitmask, out, options); }
};

// One verification call's arguments.
struct VerifyCall {
  LogitsView logits;
  VerifyInputs in;
  BitmaskView bitmask;
  VerifyOutputs out;
  CallOptions options;
  void run(Sampler& s) const { s.verify(logits, in, bitmask, out, options); }
};

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(1234);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    logits_.resize(static_cast<size_t>(kRows) * kCols);
    for (float& x : logits_) x = normal(rng);
    mask_.assign(static_cast<size_t>(kRows) * kWords, -1);  // every token allowed
    admit_all(sampler_);
    admit_all(twin_);
    for (int32_t slot = 0; slot < kSlots; ++slot) steps_.push_back(sampler_.step(slot));
  }

  // Whatever the test did, both samplers must still agree: same steps, and the same results
  // (which depend on each slot's params, history, seed and step) on a valid call.
  void TearDown() override {
    for (int32_t slot = 0; slot < kSlots; ++slot)
      EXPECT_EQ(sampler_.step(slot), twin_.step(slot)) << "slot " << slot;
    Buffers a, b;
    SampleCall call = valid_sample(a);
    call.options.logprob_mode = LogprobMode::kProcessed;
    call.run(sampler_);
    call.out = valid_sample(b).out;
    call.run(twin_);
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

  // A valid single-step call over all four slots, with every optional output and a bitmask.
  SampleCall valid_sample(Buffers& b) {
    SampleCall c;
    c.logits = LogitsView{logits_.data(), DType::kF32, kRows, kCols, kCols};
    c.slots = slots_;
    c.bitmask = BitmaskView{mask_.data(), kRows, kWords, kWords, nullptr};
    c.out.tokens = b.tokens.data();
    c.out.status = b.status.data();
    c.out.logprob = b.logprob.data();
    c.out.rank = b.rank.data();
    c.out.top_ids = b.top_ids.data();
    c.out.top_logprobs = b.top_logprobs.data();
    c.out.top_stride = kTop;
    c.out.final_ids = b.final_ids.data();
    c.out.final_probs = b.final_probs.data();
    c.out.final_count = b.final_count.data();
    c.out.final_stride = kFinal;
    return c;
  }

  // A valid verification call: request 0 (slot 0) with two drafts on rows 0-2, request 1
  // (slot 1) with none on row 3.
  VerifyCall valid_verify(Buffers& b) {
    VerifyCall c;
    c.logits = LogitsView{logits_.data(), DType::kF32, kRows, kCols, kCols};
    c.in.num_requests = 2;
    c.in.cu_rows = cu_rows_;
    c.in.slots = slots_;
    c.in.draft_tokens = drafts_;
    c.in.num_drafts_capacity = 2;
    c.bitmask = BitmaskView{mask_.data(), kRows, kWords, kWords, nullptr};
    c.out.tokens = b.tokens.data();
    c.out.num_accepted = b.num_accepted.data();
    c.out.out_stride = kDrafts + 1;
    c.out.status = b.status.data();
    c.out.logprob = b.logprob.data();
    c.out.rank = b.rank.data();
    c.out.top_ids = b.top_ids.data();
    c.out.top_logprobs = b.top_logprobs.data();
    c.out.top_stride = kTop;
    return c;
  }

  // The call, with one argument made wrong by `spoil`, fails naming it and changes nothing.
  void expect_sample_rejected(const std::function<void(SampleCall&)>& spoil,
                              const std::string& name, const std::string& value) {
    Buffers b;
    SampleCall c = valid_sample(b);
    spoil(c);
    expect_invalid([&] { c.run(sampler_); }, name, value);
    EXPECT_TRUE(b.poisoned()) << name << ": outputs were written";
    expect_steps_unchanged();
  }

  void expect_verify_rejected(const std::function<void(VerifyCall&)>& spoil,
                              const std::string& name, const std::string& value) {
    Buffers b;
    VerifyCall c = valid_verify(b);
    spoil(c);
    expect_invalid([&] { c.run(sampler_); }, name, value);
    EXPECT_TRUE(b.poisoned()) << name << ": outputs were written";
    expect_steps_unchanged();
  }

  // admit() of slot 0 (already admitted) with one parameter wrong.
  void expect_params_rejected(const std::function<void(RequestParams&)>& spoil,
                              const std::string& name, const std::string& value) {
    RequestParams p = slot_params(0);
    p.initial_step = 999;  // would show in step(0) if anything were stored
    spoil(p);
    const std::vector<int32_t> prompt = {1, 2, 3};
    expect_invalid([&] { sampler_.admit(0, p, prompt.data(), 3); }, name, value);
    expect_steps_unchanged();
  }

  // The parameters are accepted (on a scratch sampler, so that the fixture's state is kept).
  void expect_params_accepted(const std::function<void(RequestParams&)>& change) {
    Sampler scratch(test_config());
    RequestParams p = slot_params(1);
    change(p);
    EXPECT_NO_THROW(scratch.admit(0, p, nullptr, 0));
  }

  void expect_steps_unchanged() {
    for (int32_t slot = 0; slot < kSlots; ++slot)
      EXPECT_EQ(sampler_.step(slot), steps_[static_cast<size_t>(slot)]) << "slot " << slot;
  }

  Sampler sampler_{test_config()};
  Sampler twin_{test_config()};
  std::vector<uint64_t> steps_;
  std::vector<float> logits_;
  std::vector<int32_t> mask_;
  int32_t slots_[kRows] = {0, 1, 2, 3};
  int32_t cu_rows_[3] = {0, 3, 4};
  int32_t drafts_[2] = {14, 15};
};

// The baselines the other tests spoil are valid calls (run on a scratch sampler).
TEST_F(BadInput, BaselineCallsAreValid) {
  Sampler scratch(test_config());
  admit_all(scratch);
  Buffers b;
  EXPECT_NO_THROW(valid_sample(b).run(scratch));
  EXPECT_FALSE(b.poisoned());
  Buffers v;
  EXPECT_NO_THROW(valid_verify(v).run(scratch));
  EXPECT_FALSE(v.poisoned());
}

// ---- SamplerConfig ------------------------------------------------------------------------------

TEST_F(BadInput, Config) {
  struct Case {
    std::function<void(SamplerConfig&)> spoil;
    std::string name, value;
  };
  const std::vector<Case> cases = {
      {[](SamplerConfig& c) { c.vocab_size = 0; }, "config.vocab_size", "0"},
      {[](SamplerConfig& c) { c.vocab_size = -5; }, "config.vocab_size", "-5"},
      {[](SamplerConfig& c) { c.max_slots = 0; }, "config.max_slots", "0"},
      {[](SamplerConfig& c) { c.max_rows = 0; }, "config.max_rows", "0"},
      {[](SamplerConfig& c) { c.max_rows = -1; }, "config.max_rows", "-1"},
      {[](SamplerConfig& c) { c.max_drafts = -1; }, "config.max_drafts", "-1"},
      {[](SamplerConfig& c) { c.max_drafts = sonic::kMaxDraftsPerRequest + 1; }, "config.max_drafts", "65536"},
      {[](SamplerConfig& c) { c.max_history = -1; }, "config.max_history", "-1"},
      {[](SamplerConfig& c) { c.max_history = sonic::kMaxHistory + 1; }, "config.max_history", "268435457"},
      {[](SamplerConfig& c) { c.max_history = 2147483647; }, "config.max_history", "2147483647"},
      {[](SamplerConfig& c) { c.max_token_list = -1; }, "config.max_token_list", "-1"},
      {[](SamplerConfig& c) { c.max_top_logprobs = -1; }, "config.max_top_logprobs", "-1"},
      {[](SamplerConfig& c) { c.max_top_logprobs = 21; }, "config.max_top_logprobs", "21"},
      {[](SamplerConfig& c) { c.max_final_entries = -2; }, "config.max_final_entries", "-2"},
      {[](SamplerConfig& c) { c.backend = static_cast<Backend>(3); }, "config.backend", "3"},
      {[](SamplerConfig& c) { c.backend = static_cast<Backend>(-1); }, "config.backend", "-1"},
      {[](SamplerConfig& c) { c.device = -1; }, "config.device", "-1"},
      {[](SamplerConfig& c) { c.cpu_threads = -1; }, "config.cpu_threads", "-1"},
      {[](SamplerConfig& c) { c.cpu_threads = sonic::kMaxCpuThreads + 1; }, "config.cpu_threads", "1025"},
  };
  for (const Case& k : cases) {
    SamplerConfig c = test_config();
    k.spoil(c);
    expect_invalid([&] { Sampler s(c); }, k.name, k.value);
  }
  // The edges of each range are valid.
  SamplerConfig edge = test_config();
  edge.vocab_size = 1;
  edge.max_slots = 1;
  edge.max_rows = 1;
  edge.max_drafts = 0;
  edge.max_history = 0;
  edge.max_token_list = 0;
  edge.max_top_logprobs = sonic::kMaxTopLogprobs;
  edge.max_final_entries = 0;
  edge.cpu_threads = sonic::kMaxCpuThreads;
  EXPECT_NO_THROW(Sampler{edge});
  edge.cpu_threads = 0;  // one a hardware thread
  edge.max_top_logprobs = 0;
  EXPECT_NO_THROW(Sampler{edge});
}

TEST_F(BadInput, ConfigBackendAutoIsCpuWithoutCuda) {
  if (sonic::cuda_available()) GTEST_SKIP() << "a GPU is present";
  SamplerConfig c = test_config();
  c.backend = Backend::kAuto;
  Sampler s(c);
  EXPECT_EQ(s.backend(), Backend::kCpu);
}

// Asking for the CUDA backend where there is none is a clear error, not a crash or a fallback.
TEST_F(BadInput, CudaBackendUnavailable) {
  if (sonic::cuda_available()) GTEST_SKIP() << "a GPU is present: the CUDA backend is usable";
  SamplerConfig c = test_config();
  c.backend = Backend::kCuda;
  try {
    Sampler s(c);
    ADD_FAILURE() << "Backend::kCuda was accepted without a usable GPU";
  } catch (const Error& e) {
    EXPECT_TRUE(e.code() == ErrorCode::kUnsupported || e.code() == ErrorCode::kCudaError)
        << static_cast<int>(e.code()) << ": " << e.what();
    const std::string msg = lower(e.what());
    EXPECT_EQ(msg.rfind("sonic:", 0), 0u) << e.what();
    EXPECT_NE(msg.find("cuda"), std::string::npos) << e.what();
  }
}

// sonic::max_final_entries: the CPU backend's only limit is memory; a bad backend or device is an
// error naming it, whatever the backend.
TEST_F(BadInput, MaxFinalEntries) {
  EXPECT_EQ(sonic::max_final_entries(Backend::kCpu), std::numeric_limits<int32_t>::max());
  EXPECT_EQ(sonic::max_final_entries(Backend::kCpu, 3), std::numeric_limits<int32_t>::max());
  expect_invalid([] { sonic::max_final_entries(static_cast<Backend>(3)); }, "backend", "3");
  expect_invalid([] { sonic::max_final_entries(Backend::kCpu, -1); }, "device", "-1");
  expect_invalid([] { sonic::max_final_entries(Backend::kCuda, -1); }, "device", "-1");
}

// Its CUDA limit where the CUDA backend is not usable: the error Sampler gives, and kAuto is the CPU.
TEST_F(BadInput, MaxFinalEntriesCudaUnavailable) {
  if (sonic::cuda_available()) GTEST_SKIP() << "a GPU is present: the CUDA backend is usable";
  EXPECT_EQ(sonic::max_final_entries(Backend::kAuto), std::numeric_limits<int32_t>::max());
  SamplerConfig c = test_config();
  c.backend = Backend::kCuda;
  std::string sampler_error;
  try {
    Sampler s(c);
  } catch (const Error& e) {
    sampler_error = e.what();
  }
  try {
    sonic::max_final_entries(Backend::kCuda);
    ADD_FAILURE() << "Backend::kCuda has a limit without a usable GPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported) << e.what();
    EXPECT_EQ(std::string(e.what()), sampler_error);
  }
}

// ---- RequestParams (admit) ----------------------------------------------------------------------

TEST_F(BadInput, ParamsTemperature) {
  expect_params_rejected([](RequestParams& p) { p.temperature = kNaN; }, "params.temperature",
                         "nan");
  expect_params_rejected([](RequestParams& p) { p.temperature = -1.0f; }, "params.temperature",
                         "-1");
  expect_params_rejected([](RequestParams& p) { p.temperature = 1e-6f; }, "params.temperature",
                         "1e-06");
  expect_params_rejected([](RequestParams& p) { p.temperature = 9e-6f; }, "params.temperature",
                         "9e-06");
  expect_params_rejected([](RequestParams& p) { p.temperature = kInf; }, "params.temperature",
                         "inf");
  expect_params_rejected([](RequestParams& p) { p.temperature = -0.5f; }, "params.temperature",
                         "-0.5");
  expect_params_accepted([](RequestParams& p) { p.temperature = 0.0f; });
  expect_params_accepted([](RequestParams& p) { p.temperature = 1e-5f; });
  expect_params_accepted([](RequestParams& p) { p.temperature = 100.0f; });
}

TEST_F(BadInput, ParamsTopP) {
  expect_params_rejected([](RequestParams& p) { p.top_p = 1.5f; }, "params.top_p", "1.5");
  expect_params_rejected([](RequestParams& p) { p.top_p = 0.0f; }, "params.top_p", "0");
  expect_params_rejected([](RequestParams& p) { p.top_p = -0.1f; }, "params.top_p", "-0.1");
  expect_params_rejected([](RequestParams& p) { p.top_p = kNaN; }, "params.top_p", "nan");
  expect_params_accepted([](RequestParams& p) { p.top_p = 1.0f; });
  expect_params_accepted([](RequestParams& p) { p.top_p = 1e-7f; });
}

TEST_F(BadInput, ParamsMinP) {
  expect_params_rejected([](RequestParams& p) { p.min_p = -0.1f; }, "params.min_p", "-0.1");
  expect_params_rejected([](RequestParams& p) { p.min_p = 1.5f; }, "params.min_p", "1.5");
  expect_params_rejected([](RequestParams& p) { p.min_p = kNaN; }, "params.min_p", "nan");
  expect_params_accepted([](RequestParams& p) { p.min_p = 0.0f; });
  expect_params_accepted([](RequestParams& p) { p.min_p = 1.0f; });
}

TEST_F(BadInput, ParamsPenalties) {
  expect_params_rejected([](RequestParams& p) { p.repetition_penalty = 0.0f; },
                         "params.repetition_penalty", "0");
  expect_params_rejected([](RequestParams& p) { p.repetition_penalty = -1.0f; },
                         "params.repetition_penalty", "-1");
  expect_params_rejected([](RequestParams& p) { p.repetition_penalty = kInf; },
                         "params.repetition_penalty", "inf");
  expect_params_rejected([](RequestParams& p) { p.repetition_penalty = kNaN; },
                         "params.repetition_penalty", "nan");
  expect_params_rejected([](RequestParams& p) { p.frequency_penalty = kInf; },
                         "params.frequency_penalty", "inf");
  expect_params_rejected([](RequestParams& p) { p.frequency_penalty = kNaN; },
                         "params.frequency_penalty", "nan");
  expect_params_rejected([](RequestParams& p) { p.presence_penalty = -kInf; },
                         "params.presence_penalty", "-inf");
  expect_params_rejected([](RequestParams& p) { p.presence_penalty = kNaN; },
                         "params.presence_penalty", "nan");
  expect_params_accepted([](RequestParams& p) {
    p.repetition_penalty = 1e-3f;
    p.frequency_penalty = -2.0f;
    p.presence_penalty = -1.5f;
  });
}

TEST_F(BadInput, ParamsLogitBias) {
  expect_params_rejected([](RequestParams& p) { p.logit_bias = {{-1, 1.0f}}; },
                         "params.logit_bias[0].token", "-1");
  expect_params_rejected([](RequestParams& p) { p.logit_bias = {{4, 1.0f}, {kVocab, 1.0f}}; },
                         "params.logit_bias[1].token", "100");
  expect_params_rejected(
      [](RequestParams& p) { p.logit_bias = {{3, 1.0f}, {5, 1.0f}, {7, 0.5f}, {5, 2.0f}}; },
      "params.logit_bias[3].token", "5");
  expect_params_rejected([](RequestParams& p) { p.logit_bias = {{3, 1.0f}, {4, kInf}}; },
                         "params.logit_bias[1].bias", "inf");
  expect_params_rejected([](RequestParams& p) { p.logit_bias = {{3, -kInf}}; },
                         "params.logit_bias[0].bias", "-inf");
  expect_params_rejected([](RequestParams& p) { p.logit_bias = {{3, kNaN}}; },
                         "params.logit_bias[0].bias", "nan");
  expect_params_accepted(
      [](RequestParams& p) { p.logit_bias = {{0, -100.0f}, {kVocab - 1, 50.0f}}; });
}

TEST_F(BadInput, ParamsLogitBiasRepeatedMessage) {
  RequestParams p = slot_params(0);
  p.logit_bias = {{3, 1.0f}, {5, 1.0f}, {7, 0.5f}, {5, 2.0f}};
  try {
    sampler_.admit(0, p, nullptr, 0);
    ADD_FAILURE() << "repeated logit_bias id accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "sonic: invalid argument params.logit_bias[3].token = 5: repeated token id"),
              std::string::npos)
        << e.what();
  }
  expect_steps_unchanged();
}

TEST_F(BadInput, ParamsBannedAndAllowed) {
  expect_params_rejected([](RequestParams& p) { p.banned_tokens = {-1}; },
                         "params.banned_tokens[0]", "-1");
  expect_params_rejected([](RequestParams& p) { p.banned_tokens = {5, kVocab}; },
                         "params.banned_tokens[1]", "100");
  expect_params_rejected([](RequestParams& p) { p.allowed_tokens = {1, 2, -7}; },
                         "params.allowed_tokens[2]", "-7");
  expect_params_rejected([](RequestParams& p) { p.allowed_tokens = {kVocab + 5}; },
                         "params.allowed_tokens[0]", "105");
  // Repeats in these lists are harmless.
  expect_params_accepted([](RequestParams& p) {
    p.banned_tokens = {0, 0, kVocab - 1};
    p.allowed_tokens = {1, 1, 2};
  });
}

// logit_bias + banned + allowed entries together are bounded by config.max_token_list.
TEST_F(BadInput, ParamsTokenListCapacity) {
  SamplerConfig cfg = test_config();
  cfg.max_token_list = 5;
  Sampler s(cfg);
  RequestParams p;
  p.logit_bias = {{1, 1.0f}, {2, 1.0f}};
  p.banned_tokens = {3, 4};
  p.allowed_tokens = {5, 6};
  expect_invalid([&] { s.admit(0, p, nullptr, 0); },
                 "params.logit_bias.size() + params.banned_tokens.size() + "
                 "params.allowed_tokens.size()",
                 "6");
  p.allowed_tokens = {5};
  EXPECT_NO_THROW(s.admit(0, p, nullptr, 0));
  cfg.max_token_list = 0;
  Sampler none(cfg);
  EXPECT_NO_THROW(none.admit(0, RequestParams{}, nullptr, 0));
  p = RequestParams{};
  p.banned_tokens = {0};
  expect_invalid([&] { none.admit(0, p, nullptr, 0); },
                 "params.logit_bias.size() + params.banned_tokens.size() + "
                 "params.allowed_tokens.size()",
                 "1");
}

TEST_F(BadInput, ParamsTopLogprobs) {
  expect_params_rejected([](RequestParams& p) { p.top_logprobs = -1; }, "params.top_logprobs",
                         "-1");
  expect_params_rejected([](RequestParams& p) { p.top_logprobs = kTop + 1; },
                         "params.top_logprobs", "4");
  expect_params_accepted([](RequestParams& p) { p.top_logprobs = 0; });
  expect_params_accepted([](RequestParams& p) { p.top_logprobs = kTop; });
}

TEST_F(BadInput, ParamsTopKAnyValue) {
  for (int32_t k : {std::numeric_limits<int32_t>::min(), -5, 0, 1, kVocab, kVocab + 1,
                    std::numeric_limits<int32_t>::max()})
    expect_params_accepted([k](RequestParams& p) { p.top_k = k; });
}

// ---- Slots and host histories -------------------------------------------------------------------

TEST_F(BadInput, Slot) {
  const RequestParams p = slot_params(0);
  expect_invalid([&] { sampler_.admit(-1, p, nullptr, 0); }, "slot", "-1");
  expect_invalid([&] { sampler_.admit(kSlots, p, nullptr, 0); }, "slot", "4");
  expect_invalid([&] { sampler_.retire(kSlots); }, "slot", "4");
  expect_invalid([&] { sampler_.retire(-3); }, "slot", "-3");
  const int32_t tok = 1;
  expect_invalid([&] { sampler_.append_output(-1, &tok, 1); }, "slot", "-1");
  expect_invalid([&] { sampler_.append_output(kSlots + 10, &tok, 1); }, "slot", "14");
  expect_invalid([&] { (void)sampler_.step(kSlots); }, "slot", "4");
  expect_steps_unchanged();
}

TEST_F(BadInput, Prompt) {
  RequestParams p = slot_params(0);
  p.initial_step = 999;
  const std::vector<int32_t> good(kHistory + 1, 1);
  expect_invalid([&] { sampler_.admit(0, p, nullptr, 3); }, "prompt", "null");
  expect_invalid([&] { sampler_.admit(0, p, good.data(), -1); }, "prompt_len", "-1");
  expect_invalid([&] { sampler_.admit(0, p, good.data(), kHistory + 1); }, "prompt_len", "65");
  const std::vector<int32_t> high = {1, 2, kVocab, 3};
  expect_invalid([&] { sampler_.admit(0, p, high.data(), 4); }, "prompt[2]", "100");
  const std::vector<int32_t> low = {-1};
  expect_invalid([&] { sampler_.admit(0, p, low.data(), 1); }, "prompt[0]", "-1");
  // The edges are valid (on a scratch sampler).
  Sampler scratch(test_config());
  EXPECT_NO_THROW(scratch.admit(0, p, nullptr, 0));
  EXPECT_NO_THROW(scratch.admit(1, p, good.data(), kHistory));
  expect_steps_unchanged();
}

TEST_F(BadInput, AppendOutput) {
  const std::vector<int32_t> good(kHistory + 1, 5);
  expect_invalid([&] { sampler_.append_output(1, nullptr, 2); }, "tokens", "null");
  expect_invalid([&] { sampler_.append_output(1, good.data(), -1); }, "count", "-1");
  expect_invalid([&] { sampler_.append_output(1, good.data(), kHistory + 1); }, "count", "65");
  // A valid token before the bad one must not be appended either (the twin check in TearDown).
  const std::vector<int32_t> bad = {5, kVocab};
  expect_invalid([&] { sampler_.append_output(1, bad.data(), 2); }, "tokens[1]", "100");
  expect_steps_unchanged();
}

// ---- sample(): logits ---------------------------------------------------------------------------

TEST_F(BadInput, SampleLogits) {
  expect_sample_rejected([](SampleCall& c) { c.logits.data = nullptr; }, "logits.data", "null");
  expect_sample_rejected([](SampleCall& c) { c.logits.dtype = static_cast<DType>(7); },
                         "logits.dtype", "7");
  expect_sample_rejected([](SampleCall& c) { c.logits.dtype = static_cast<DType>(-1); },
                         "logits.dtype", "-1");
  expect_sample_rejected([](SampleCall& c) { c.logits.rows = -1; }, "logits.rows", "-1");
  expect_sample_rejected([](SampleCall& c) { c.logits.rows = kRows + 1; }, "logits.rows", "5");
  expect_sample_rejected(
      [](SampleCall& c) {
        c.logits.cols = kVocab - 1;
        c.logits.row_stride = kVocab - 1;
      },
      "logits.cols", "99");
  expect_sample_rejected([](SampleCall& c) { c.logits.row_stride = kCols - 1; },
                         "logits.row_stride", "103");
}

TEST_F(BadInput, SampleLogitsColsMessage) {
  Buffers b;
  SampleCall c = valid_sample(b);
  c.logits.cols = 50;
  try {
    c.run(sampler_);
    ADD_FAILURE() << "cols < vocab_size accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "sonic: invalid argument logits.cols = 50: must be >= vocab_size (100)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(b.poisoned());
}

// ---- sample(): outputs --------------------------------------------------------------------------

TEST_F(BadInput, SampleOutputs) {
  expect_sample_rejected([](SampleCall& c) { c.out.tokens = nullptr; }, "out.tokens", "null");
  expect_sample_rejected([](SampleCall& c) { c.out.top_ids = nullptr; }, "out.top_ids", "null");
  expect_sample_rejected([](SampleCall& c) { c.out.top_logprobs = nullptr; },
                         "out.top_logprobs", "null");
  expect_sample_rejected([](SampleCall& c) { c.out.top_stride = kTop - 1; }, "out.top_stride",
                         "2");
  expect_sample_rejected([](SampleCall& c) { c.out.top_stride = -1; }, "out.top_stride", "-1");
  expect_sample_rejected([](SampleCall& c) { c.out.final_ids = nullptr; }, "out.final_ids",
                         "null");
  expect_sample_rejected([](SampleCall& c) { c.out.final_probs = nullptr; }, "out.final_probs",
                         "null");
  expect_sample_rejected([](SampleCall& c) { c.out.final_count = nullptr; }, "out.final_count",
                         "null");
  expect_sample_rejected([](SampleCall& c) { c.out.final_stride = kFinal - 1; },
                         "out.final_stride", "4");
}

// With max_top_logprobs = 0 a given top-N output still needs room for one entry.
TEST_F(BadInput, SampleTopStrideAtLeastOne) {
  SamplerConfig cfg = test_config();
  cfg.max_top_logprobs = 0;
  Sampler s(cfg);
  RequestParams p;
  s.admit(0, p, nullptr, 0);
  Buffers b;
  SampleCall c = valid_sample(b);
  c.logits.rows = 1;
  c.bitmask = BitmaskView{};
  c.out.top_stride = 0;
  expect_invalid([&] { c.run(s); }, "out.top_stride", "0");
  EXPECT_TRUE(b.poisoned());
  EXPECT_EQ(s.step(0), 0u);
  c.out.top_stride = 1;
  EXPECT_NO_THROW(c.run(s));
}

// Optional outputs may all be left out.
TEST_F(BadInput, SampleOptionalOutputsMayBeNull) {
  Sampler scratch(test_config());
  admit_all(scratch);
  Buffers b;
  SampleCall c = valid_sample(b);
  c.bitmask = BitmaskView{};
  c.out = SampleOutputs{};
  c.out.tokens = b.tokens.data();
  EXPECT_NO_THROW(c.run(scratch));
}

// ---- sample(): bitmask and options --------------------------------------------------------------

TEST_F(BadInput, SampleBitmask) {
  expect_sample_rejected([](SampleCall& c) { c.bitmask.words = kWords - 1; }, "bitmask.words",
                         "3");
  expect_sample_rejected([](SampleCall& c) { c.bitmask.row_stride = kWords - 1; },
                         "bitmask.row_stride", "3");
  expect_sample_rejected([](SampleCall& c) { c.bitmask.rows = 0; }, "bitmask.rows", "0");
  expect_sample_rejected([](SampleCall& c) { c.bitmask.rows = kRows - 1; }, "bitmask.rows", "3");
  // With a row index, fewer mask rows than logits rows are fine; the shape is still checked.
  const int32_t index[kRows] = {0, -1, 0, 0};
  expect_sample_rejected(
      [&](SampleCall& c) {
        c.bitmask.row_index = index;
        c.bitmask.rows = 0;
      },
      "bitmask.rows", "0");
  Sampler scratch(test_config());
  admit_all(scratch);
  Buffers b;
  SampleCall c = valid_sample(b);
  c.bitmask.row_index = index;
  c.bitmask.rows = 1;
  EXPECT_NO_THROW(c.run(scratch));
  // No data: the other fields are ignored.
  c.bitmask = BitmaskView{nullptr, -1, -1, -1, nullptr};
  EXPECT_NO_THROW(c.run(scratch));
}

TEST_F(BadInput, SampleOptions) {
  expect_sample_rejected(
      [](SampleCall& c) { c.options.logprob_mode = static_cast<LogprobMode>(3); },
      "options.logprob_mode", "3");
  expect_sample_rejected(
      [](SampleCall& c) { c.options.logprob_mode = static_cast<LogprobMode>(-1); },
      "options.logprob_mode", "-1");
}

// ---- verify() -----------------------------------------------------------------------------------

TEST_F(BadInput, VerifyInputs) {
  expect_verify_rejected([](VerifyCall& c) { c.in.num_requests = -1; }, "in.num_requests", "-1");
  expect_verify_rejected([](VerifyCall& c) { c.in.num_requests = kRows + 1; }, "in.num_requests",
                         "5");
  expect_verify_rejected([](VerifyCall& c) { c.in.cu_rows = nullptr; }, "in.cu_rows", "null");
  expect_verify_rejected([](VerifyCall& c) { c.in.draft_tokens = nullptr; }, "in.draft_tokens",
                         "null");
  expect_verify_rejected([](VerifyCall& c) { c.in.num_drafts_capacity = -1; },
                         "in.num_drafts_capacity", "-1");
}

TEST_F(BadInput, VerifyLogits) {
  expect_verify_rejected([](VerifyCall& c) { c.logits.data = nullptr; }, "logits.data", "null");
  expect_verify_rejected([](VerifyCall& c) { c.logits.dtype = static_cast<DType>(3); },
                         "logits.dtype", "3");
  expect_verify_rejected([](VerifyCall& c) { c.logits.rows = kRows + 1; }, "logits.rows", "5");
  expect_verify_rejected([](VerifyCall& c) { c.logits.rows = -2; }, "logits.rows", "-2");
  expect_verify_rejected([](VerifyCall& c) { c.logits.cols = 10; }, "logits.cols", "10");
  expect_verify_rejected([](VerifyCall& c) { c.logits.row_stride = 100; }, "logits.row_stride",
                         "100");
}

TEST_F(BadInput, VerifyOutputs) {
  expect_verify_rejected([](VerifyCall& c) { c.out.tokens = nullptr; }, "out.tokens", "null");
  expect_verify_rejected([](VerifyCall& c) { c.out.num_accepted = nullptr; }, "out.num_accepted",
                         "null");
  expect_verify_rejected([](VerifyCall& c) { c.out.out_stride = kDrafts; }, "out.out_stride",
                         "2");
  expect_verify_rejected([](VerifyCall& c) { c.out.top_ids = nullptr; }, "out.top_ids", "null");
  expect_verify_rejected([](VerifyCall& c) { c.out.top_logprobs = nullptr; }, "out.top_logprobs",
                         "null");
  expect_verify_rejected([](VerifyCall& c) { c.out.top_stride = 1; }, "out.top_stride", "1");
}

TEST_F(BadInput, VerifyDraftProbs) {
  std::vector<float> dense(static_cast<size_t>(2) * kCols, 0.01f);
  std::vector<int32_t> ids(4, 0), count(2, 1);
  std::vector<float> probs(4, 1.0f);
  expect_verify_rejected(
      [&](VerifyCall& c) {
        c.in.draft_probs.dense = dense.data();
        c.in.draft_probs.dense_rows = 2;
        c.in.draft_probs.dense_stride = kVocab - 1;
      },
      "in.draft_probs.dense_stride", "99");
  expect_verify_rejected(
      [&](VerifyCall& c) {
        c.in.draft_probs.dense = dense.data();
        c.in.draft_probs.dense_rows = -1;
        c.in.draft_probs.dense_stride = kCols;
      },
      "in.draft_probs.dense_rows", "-1");
  auto sparse = [&](VerifyCall& c) {
    c.in.draft_probs.sparse_ids = ids.data();
    c.in.draft_probs.sparse_probs = probs.data();
    c.in.draft_probs.sparse_count = count.data();
    c.in.draft_probs.sparse_rows = 2;
    c.in.draft_probs.sparse_stride = 2;
  };
  expect_verify_rejected(
      [&](VerifyCall& c) {
        sparse(c);
        c.in.draft_probs.sparse_ids = nullptr;
      },
      "in.draft_probs.sparse_ids", "null");
  expect_verify_rejected(
      [&](VerifyCall& c) {
        sparse(c);
        c.in.draft_probs.sparse_probs = nullptr;
      },
      "in.draft_probs.sparse_probs", "null");
  expect_verify_rejected(
      [&](VerifyCall& c) {
        sparse(c);
        c.in.draft_probs.sparse_count = nullptr;
      },
      "in.draft_probs.sparse_count", "null");
  expect_verify_rejected(
      [&](VerifyCall& c) {
        sparse(c);
        c.in.draft_probs.sparse_stride = 0;
      },
      "in.draft_probs.sparse_stride", "0");
  expect_verify_rejected(
      [&](VerifyCall& c) {
        sparse(c);
        c.in.draft_probs.sparse_rows = -1;
      },
      "in.draft_probs.sparse_rows", "-1");
}

TEST_F(BadInput, VerifyBitmaskAndOptions) {
  expect_verify_rejected([](VerifyCall& c) { c.bitmask.words = 1; }, "bitmask.words", "1");
  expect_verify_rejected([](VerifyCall& c) { c.bitmask.row_stride = 2; }, "bitmask.row_stride",
                         "2");
  expect_verify_rejected([](VerifyCall& c) { c.bitmask.rows = 0; }, "bitmask.rows", "0");
  expect_verify_rejected([](VerifyCall& c) { c.bitmask.rows = 2; }, "bitmask.rows", "2");
  expect_verify_rejected(
      [](VerifyCall& c) { c.options.logprob_mode = static_cast<LogprobMode>(9); },
      "options.logprob_mode", "9");
}

// Without drafts, draft_tokens may be null; with no requests, nothing but the shapes is needed.
TEST_F(BadInput, VerifyNullsAllowedWhereUnused) {
  SamplerConfig cfg = test_config();
  cfg.max_drafts = 0;
  Sampler s(cfg);
  admit_all(s);
  Buffers b;
  VerifyCall c = valid_verify(b);
  const int32_t cu[3] = {0, 1, 2};
  c.in.cu_rows = cu;
  c.in.draft_tokens = nullptr;
  c.in.num_drafts_capacity = 0;
  c.out.out_stride = 1;
  c.logits.rows = 2;
  EXPECT_NO_THROW(c.run(s));
  EXPECT_EQ(b.num_accepted[0], 0);
  EXPECT_EQ(b.num_accepted[1], 0);

  Buffers e;
  VerifyCall empty = valid_verify(e);
  empty.in.num_requests = 0;
  empty.in.cu_rows = nullptr;
  empty.in.draft_tokens = nullptr;
  empty.logits.rows = 0;
  empty.bitmask = BitmaskView{};
  empty.out.tokens = nullptr;
  empty.out.num_accepted = nullptr;
  EXPECT_NO_THROW(empty.run(s));
}

// Device-side values (slot ids, cu_rows contents, draft ids, rules) are not host errors: the row
// or request is flagged instead (docs/semantics.md).
TEST_F(BadInput, DeviceSideValuesAreFlaggedNotThrown) {
  Sampler scratch(test_config());
  admit_all(scratch);
  Buffers b;
  SampleCall c = valid_sample(b);
  const int32_t slots[kRows] = {0, kSlots + 3, -1, 1};
  c.slots = slots;
  EXPECT_NO_THROW(c.run(scratch));
  EXPECT_EQ(b.tokens[1], -1);
  EXPECT_EQ(b.tokens[2], -1);
  EXPECT_NE(b.status[1] & sonic::kStatusInvalidInput, 0);
  EXPECT_NE(b.status[2] & sonic::kStatusInvalidInput, 0);
  EXPECT_EQ(b.status[0] & sonic::kStatusInvalidInput, 0);
  EXPECT_EQ(b.status[3] & sonic::kStatusInvalidInput, 0);

  Buffers v;
  VerifyCall vc = valid_verify(v);
  const int32_t bad_drafts[2] = {kVocab + 1, 3};
  vc.in.draft_tokens = bad_drafts;
  EXPECT_NO_THROW(vc.run(scratch));
  EXPECT_EQ(v.num_accepted[0], 0);
  EXPECT_NE(v.status[0] & sonic::kStatusInvalidInput, 0);
}

}  // namespace
