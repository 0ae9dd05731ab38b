// Shared pieces of the GPU tests: device buffers, random heterogeneous batches with the nasty cases
// of SPEC.md (ties, -inf, NaN, all-masked rows, bf16 plateaus, +inf, padded vocab), and a runner
// that samples one batch on the CUDA and the CPU backend with identical inputs.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/token_rules.hpp"
#include "sonic/sonic.hpp"

namespace sonic_gpu {

#define SONIC_TEST_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Sets an environment variable (null: unsets it) for the object's lifetime, then puts back what
// was there: the backend's shape switches (README) are read when a sampler is made, so a test makes
// its sampler inside the scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::string(old);
    if (value) EXPECT_EQ(setenv(name, value, 1), 0) << name;
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_.c_str(), old_->c_str(), 1);
    else unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> old_;
};

template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t n) { resize(n); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void resize(size_t n) {
    cudaFree(ptr_);
    ptr_ = nullptr;
    n_ = n;
    if (n) cudaMalloc(&ptr_, n * sizeof(T));
  }
  T* get() const { return ptr_; }
  size_t size() const { return n_; }
  void upload(const std::vector<T>& h) { cudaMemcpy(ptr_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice); }
  std::vector<T> download() const {
    std::vector<T> h(n_);
    cudaMemcpy(h.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_ = 0;
};

inline uint16_t float_to_bf16_rne(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  if ((b & 0x7F800000u) == 0x7F800000u) return static_cast<uint16_t>(b >> 16 | ((b & 0xFFFF) ? 0x40 : 0));
  b += 0x7FFFu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}

inline uint16_t float_to_f16(float f) {  // round to nearest even, via the hardware-independent path
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t man = x & 0x7FFFFFu;
  if (((x >> 23) & 0xFF) == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (man ? 0x200u : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00u);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    man |= 0x800000u;
    const int shift = 14 - exp;
    uint32_t h = man >> shift;
    const uint32_t rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (man >> 13);
  const uint32_t rem = man & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

// x rounded to the nearest value of dtype (fp32: x), as a float.
inline float round_to_dtype(float x, sonic::DType dtype) {
  if (dtype == sonic::DType::kBF16) {
    const uint32_t bits = static_cast<uint32_t>(float_to_bf16_rne(x)) << 16;
    std::memcpy(&x, &bits, 4);
  } else if (dtype == sonic::DType::kF16) {
    x = sonic::detail::fp16_to_float(float_to_f16(x));
  }
  return x;
}

// The lowest finite value of dtype (bf16's is exact in fp32): what engines mask logits with when they
// use finfo.min rather than -inf.
inline float lowest_finite(sonic::DType dtype) {
  return dtype == sonic::DType::kF32    ? -std::numeric_limits<float>::max()
         : dtype == sonic::DType::kBF16 ? -3.38953139e38f
                                        : -65504.0f;
}

enum class RowKind { kPeaked, kFlat, kPlateau, kNegInf, kNaN, kPosInf, kAllMasked };

// One random batch: logits (fp32 master copy, rounded to the dtype so both backends see the same
// values), per-slot parameters, prompts, an optional bitmask.
struct Batch {
  int32_t V = 0, cols = 0, rows = 0;
  sonic::DType dtype = sonic::DType::kF32;
  std::vector<float> logits;          // [rows, cols], values exactly representable in dtype
  std::vector<sonic::RequestParams> params;  // per row (slot = row)
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> bitmask;       // [rows, words] (empty: none)
  std::vector<int32_t> bitmask_index; // [rows]
  int32_t words = 0;
  std::vector<RowKind> kinds;
};

inline sonic::RequestParams random_params(std::mt19937_64& rng, int32_t V, int32_t top_n) {
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  sonic::RequestParams p;
  p.seed = rng();
  p.initial_step = rng() % 1000;
  p.top_logprobs = static_cast<int32_t>(rng() % (top_n + 1));
  const float pick = u(rng);
  if (pick < 0.25f) {
    p.temperature = 0.0f;
  } else {
    p.temperature = 0.3f + 1.2f * u(rng);
    if (u(rng) < 0.6f) p.top_k = 1 + static_cast<int32_t>(rng() % 100);
    if (u(rng) < 0.6f) p.top_p = 0.5f + 0.5f * u(rng);
    if (u(rng) < 0.3f) p.min_p = 0.2f * u(rng);
    p.top_p_joint = u(rng) < 0.3f;
    if (u(rng) < 0.05f) p.top_k = V + 5;
  }
  if (u(rng) < 0.5f) {
    p.repetition_penalty = 0.8f + 0.6f * u(rng);
    p.frequency_penalty = 0.5f * u(rng) - 0.1f;
    p.presence_penalty = 0.5f * u(rng) - 0.1f;
    p.repetition_output_only = u(rng) < 0.3f;
    p.penalties_include_prompt = u(rng) < 0.3f;
  }
  if (u(rng) < 0.4f) {
    std::vector<char> used(V, 0);
    for (int i = 0; i < 20; ++i) {
      const int32_t t = static_cast<int32_t>(rng() % V);
      if (used[t]) continue;
      used[t] = 1;
      p.logit_bias.push_back({t, 10.0f * u(rng) - 5.0f});
    }
  }
  if (u(rng) < 0.2f)
    for (int i = 0; i < 10; ++i) p.banned_tokens.push_back(static_cast<int32_t>(rng() % V));
  if (u(rng) < 0.1f)
    for (int i = 0; i < 200; ++i) p.allowed_tokens.push_back(static_cast<int32_t>(rng() % V));
  return p;
}

inline Batch random_batch(std::mt19937_64& rng, int32_t V, int32_t rows, sonic::DType dtype, int32_t top_n,
                          bool with_bitmask) {
  Batch b;
  b.V = V;
  b.cols = V + (V % 7 == 0 ? 0 : 3);  // padded rows now and then
  b.rows = rows;
  b.dtype = dtype;
  b.words = (V + 31) / 32;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  b.logits.assign(static_cast<size_t>(rows) * b.cols, 0.0f);
  for (int32_t r = 0; r < rows; ++r) {
    const RowKind kind = static_cast<RowKind>(rng() % 7);
    b.kinds.push_back(kind);
    float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
    for (int32_t t = 0; t < b.cols; ++t) {
      float x = kind == RowKind::kFlat ? normal(rng) : 3.0f * normal(rng);
      if (kind == RowKind::kPlateau) x = std::round(x * 2.0f) / 2.0f;  // many exact ties
      if (t >= V) x = 1e30f;                                           // padding must never win
      row[t] = x;
    }
    if (kind == RowKind::kPeaked)
      for (int i = 0; i < 5; ++i) row[rng() % V] += 10.0f;
    if (kind == RowKind::kNegInf)
      for (int32_t t = 0; t < V; ++t)
        if (u(rng) < 0.5f) row[t] = -INFINITY;
    if (kind == RowKind::kNaN)
      for (int i = 0; i < 3; ++i) row[rng() % V] = NAN;
    if (kind == RowKind::kPosInf) {
      row[rng() % V] = INFINITY;
      row[rng() % V] = INFINITY;
    }
    if (kind == RowKind::kAllMasked)
      for (int32_t t = 0; t < V; ++t) row[t] = -INFINITY;
    // Round to the dtype so both backends read identical values (fp16 padding: its largest finite).
    for (int32_t t = 0; t < b.cols; ++t) {
      if (dtype == sonic::DType::kF16 && t >= V) row[t] = 60000.0f;
      row[t] = round_to_dtype(row[t], dtype);
    }
    b.params.push_back(random_params(rng, V, top_n));
    std::vector<int32_t> prompt;
    const int32_t n = static_cast<int32_t>(rng() % 300);
    for (int32_t i = 0; i < n; ++i) prompt.push_back(static_cast<int32_t>(rng() % std::min(V, 2000)));
    b.prompts.push_back(prompt);
  }
  if (with_bitmask) {
    b.bitmask.assign(static_cast<size_t>(rows) * b.words, 0);
    for (int32_t r = 0; r < rows; ++r) {
      const float f = u(rng);
      b.bitmask_index.push_back(f < 0.5f ? -1 : r);
      for (int32_t w = 0; w < b.words; ++w)
        b.bitmask[static_cast<size_t>(r) * b.words + w] = static_cast<int32_t>(rng());
      if (f > 0.95f)  // a grammar that allows nothing
        for (int32_t w = 0; w < b.words; ++w) b.bitmask[static_cast<size_t>(r) * b.words + w] = 0;
    }
  }
  return b;
}

}  // namespace sonic_gpu
