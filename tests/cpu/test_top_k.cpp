// Sampler::top_k, the batched top-k of raw logits: the k largest entries of each row among ids below
// vocab_size, value descending then id ascending, NaN read as -inf. Checked by hand on ties, NaN,
// -inf, bf16 plateaus and padded rows, against an independent sort on random rows of every dtype, and
// on every bad argument (the message names it, nothing is written). The C API gives the same answer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sonic/sonic.hpp"
#include "sonic/sonic_c.h"

namespace {

using sonic::Backend;
using sonic::DType;
using sonic::Error;
using sonic::ErrorCode;
using sonic::LogitsView;
using sonic::Sampler;
using sonic::SamplerConfig;
using sonic::TopKOutputs;

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

Sampler make_sampler(int32_t vocab, int32_t rows) {
  SamplerConfig c;
  c.backend = Backend::kCpu;
  c.vocab_size = vocab;
  c.max_slots = 1;
  c.max_rows = rows;
  return Sampler(c);
}

// The oracle: a full stable sort by value descending (NaN as -inf), ids ascending on ties.
std::vector<int32_t> oracle(const std::vector<float>& x, int32_t k) {
  std::vector<int32_t> ids(x.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto val = [&](int32_t t) { return std::isnan(x[t]) ? -kInf : x[t]; };
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return val(a) > val(b); });
  ids.resize(k);
  return ids;
}

struct Result {
  std::vector<int32_t> ids;
  std::vector<float> values;
};

Result run(Sampler& s, const void* data, DType dtype, int64_t rows, int64_t cols, int32_t k) {
  Result res;
  res.ids.assign(static_cast<size_t>(rows * k), -7);
  res.values.assign(static_cast<size_t>(rows * k), 123.0f);
  s.top_k(LogitsView{data, dtype, rows, cols, cols}, k, TopKOutputs{res.ids.data(), res.values.data(), k});
  return res;
}

uint16_t to_bf16(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);  // the test values are exact in bf16
}

TEST(TopK, TiesGoToTheLowerIdAndNaNCountsAsMinusInfinity) {
  Sampler s = make_sampler(8, 1);
  const std::vector<float> x = {1.0f, 3.0f, kNaN, 3.0f, -kInf, 2.0f, 3.0f, -1.0f};
  const Result r = run(s, x.data(), DType::kF32, 1, 8, 8);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{1, 3, 6, 5, 0, 7, 2, 4}));
  EXPECT_EQ(r.values[0], 3.0f);
  EXPECT_EQ(r.values[3], 2.0f);
  EXPECT_EQ(r.values[6], -kInf);  // the NaN, read as -inf, before the -inf at a higher id
  EXPECT_EQ(r.values[7], -kInf);
}

TEST(TopK, PaddingBeyondTheVocabularyIsNeverReturned) {
  Sampler s = make_sampler(5, 2);
  // cols = 7: ids 5 and 6 are padding and hold the largest values.
  const std::vector<float> x = {0.5f, 0.1f, 0.9f, 0.2f, 0.3f, 99.0f, 98.0f,
                                -1.0f, -2.0f, -3.0f, -4.0f, -5.0f, 50.0f, 60.0f};
  const Result r = run(s, x.data(), DType::kF32, 2, 7, 3);
  EXPECT_EQ(r.ids, (std::vector<int32_t>{2, 0, 4, 0, 1, 2}));
  EXPECT_EQ(r.values[0], 0.9f);
  EXPECT_EQ(r.values[3], -1.0f);
}

TEST(TopK, Bf16PlateauKeepsIdOrderAndKEqualToVocabIsTheWholeOrder) {
  const int32_t V = 64;
  Sampler s = make_sampler(V, 1);
  std::vector<uint16_t> x(V, to_bf16(1.0f));
  x[40] = to_bf16(2.0f);
  const Result r = run(s, x.data(), DType::kBF16, 1, V, V);
  ASSERT_EQ(r.ids.size(), static_cast<size_t>(V));
  EXPECT_EQ(r.ids[0], 40);
  for (int32_t i = 1; i < V; ++i) EXPECT_EQ(r.ids[i], i <= 40 ? i - 1 : i) << "position " << i;
  EXPECT_EQ(r.values[1], 1.0f);
}

TEST(TopK, RandomRowsOfEveryDtypeMatchAFullSort) {
  const int32_t V = 3001, rows = 6;
  Sampler s = make_sampler(V, rows);
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int32_t k : {1, 7, 128, 1024}) {
      std::vector<float> as_float(static_cast<size_t>(rows) * V);
      std::vector<uint16_t> half(as_float.size());
      for (size_t i = 0; i < as_float.size(); ++i) {
        float v = std::round(normal(rng) * 8.0f) / 8.0f;  // many exact ties
        if (i % 97 == 3) v = kNaN;
        if (i % 89 == 5) v = -kInf;
        as_float[i] = v;
        if (dtype == DType::kBF16) {
          half[i] = to_bf16(v);
        } else if (dtype == DType::kF16) {
          // v is a multiple of 1/8 below 64 in magnitude (or NaN / -inf): exact in binary16.
          uint16_t h;
          if (std::isnan(v)) h = 0x7E00;
          else if (std::isinf(v)) h = 0xFC00;
          else if (v == 0.0f) h = std::signbit(v) ? 0x8000 : 0;
          else {
            int e;
            const float m = std::frexp(std::fabs(v), &e);  // |v| = m 2^e, m in [0.5, 1)
            h = static_cast<uint16_t>((v < 0 ? 0x8000 : 0) | ((e + 14) << 10) |
                                      static_cast<uint16_t>(std::lround((m * 2.0f - 1.0f) * 1024.0f)));
          }
          half[i] = h;
        }
      }
      const void* data = dtype == DType::kF32 ? static_cast<const void*>(as_float.data()) : half.data();
      const Result r = run(s, data, dtype, rows, V, k);
      for (int32_t row = 0; row < rows; ++row) {
        const std::vector<float> x(as_float.begin() + row * V, as_float.begin() + (row + 1) * V);
        const std::vector<int32_t> want = oracle(x, k);
        for (int32_t i = 0; i < k; ++i) {
          ASSERT_EQ(r.ids[row * k + i], want[i]) << "dtype " << static_cast<int>(dtype) << " k " << k << " row " << row
                                                 << " position " << i;
          const float v = x[want[i]];
          EXPECT_EQ(r.values[row * k + i], std::isnan(v) ? -kInf : v);
        }
      }
    }
  }
}

TEST(TopK, ValuesAreOptional) {
  Sampler s = make_sampler(4, 1);
  const std::vector<float> x = {0.0f, 2.0f, 1.0f, 3.0f};
  std::vector<int32_t> ids(2);
  s.top_k(LogitsView{x.data(), DType::kF32, 1, 4, 4}, 2, TopKOutputs{ids.data(), nullptr, 2});
  EXPECT_EQ(ids, (std::vector<int32_t>{3, 1}));
}

void expect_invalid(const std::function<void()>& f, const std::string& name, const std::string& value) {
  try {
    f();
    FAIL() << "no error for " << name;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    const std::string msg = e.what();
    EXPECT_NE(msg.find(name + " = " + value), std::string::npos) << msg;
  }
}

TEST(TopK, BadArgumentsNameThemselvesAndWriteNothing) {
  Sampler s = make_sampler(10, 2);
  std::vector<float> x(20, 1.0f);
  std::vector<int32_t> ids(20, -7);
  const LogitsView good{x.data(), DType::kF32, 2, 10, 10};
  expect_invalid([&] { s.top_k(good, 0, TopKOutputs{ids.data(), nullptr, 10}); }, "k", "0");
  expect_invalid([&] { s.top_k(good, 11, TopKOutputs{ids.data(), nullptr, 11}); }, "k", "11");
  expect_invalid([&] { s.top_k(good, 5, TopKOutputs{ids.data(), nullptr, 4}); }, "out.stride", "4");
  expect_invalid([&] { s.top_k(good, 5, TopKOutputs{nullptr, nullptr, 5}); }, "out.ids", "null");
  expect_invalid([&] { s.top_k(LogitsView{x.data(), DType::kF32, 3, 10, 10}, 5, TopKOutputs{ids.data(), nullptr, 5}); },
                 "logits.rows", "3");
  expect_invalid([&] { s.top_k(LogitsView{x.data(), DType::kF32, 2, 9, 9}, 5, TopKOutputs{ids.data(), nullptr, 5}); },
                 "logits.cols", "9");
  for (int32_t v : ids) EXPECT_EQ(v, -7);
}

TEST(TopK, CApiGivesTheSameAnswerAndAnErrorCode) {
  sonic_config c;
  sonic_config_default(&c);
  c.backend = SONIC_BACKEND_CPU;
  c.vocab_size = 6;
  c.max_slots = 1;
  c.max_rows = 1;
  sonic_sampler* s = nullptr;
  ASSERT_EQ(sonic_sampler_create(&c, &s), SONIC_OK);
  const float x[6] = {0.1f, 0.7f, 0.7f, -1.0f, 5.0f, 0.0f};
  sonic_logits lg{x, SONIC_DTYPE_F32, 1, 6, 6};
  int32_t ids[3] = {-1, -1, -1};
  float vals[3] = {0, 0, 0};
  ASSERT_EQ(sonic_top_k(s, &lg, 3, ids, vals, 3, nullptr), SONIC_OK);
  EXPECT_EQ(ids[0], 4);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(ids[2], 2);
  EXPECT_EQ(vals[1], 0.7f);
  EXPECT_EQ(sonic_top_k(s, &lg, 7, ids, vals, 7, nullptr), SONIC_ERROR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sonic_last_error()).find("k = 7"), std::string::npos);
  sonic_sampler_destroy(s);
}

}  // namespace
