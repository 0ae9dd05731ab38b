// The shared host/device headers give bit-identical results on the GPU and the CPU: Philox words,
// uniforms, the per-token rules and the packed keys. Everything exact in the contract rests on it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "common/random.hpp"
#include "common/token_rules.hpp"

namespace {

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

struct RuleCase {
  float x, bias, rep, freq, pres, temperature;
  int32_t count;
  int32_t rep_hit;
};

__global__ void draw_kernel(int n, uint64_t seed, uint64_t step, uint32_t* words, float* uniforms) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= n) return;
  const uint32_t purpose = sonic::detail::purpose(sonic::detail::Draw::kCorrection, 3);
  words[t] = sonic::detail::random_word(seed, step, purpose, static_cast<uint32_t>(t));
  uniforms[t] = sonic::detail::uniform_from_word(words[t]);
}

__global__ void rules_kernel(int n, const RuleCase* cases, float* z, unsigned long long* keys) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const RuleCase c = cases[i];
  const sonic::detail::Penalties pen{c.rep, c.freq, c.pres};
  const float x = sonic::detail::adjust_logit(c.x, c.bias, c.rep_hit != 0, c.count, pen);
  z[i] = sonic::detail::apply_temperature(x, c.temperature);
  keys[i] = sonic::detail::pack_key(z[i], i);
}

// Every distinct uniform: w runs over the integers that fp32 represents exactly (float(w) takes no
// other values), 2^23 per binade.
__global__ void gumbel_error_kernel(unsigned int* max_err_bits, unsigned long long* worst) {
  const uint32_t binade = blockIdx.y;  // w in [2^(binade-1), 2^binade), binade 0: w = 0
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (1u << 23); i += gridDim.x * blockDim.x) {
    uint32_t w;
    if (binade == 0) {
      if (i > 0) return;
      w = 0;
    } else if (binade <= 24) {
      const uint32_t lo = 1u << (binade - 1);
      if (i >= lo) break;
      w = lo + i;
    } else {
      w = (1u << (binade - 1)) + (i << (binade - 24));
    }
    const float v = sonic::detail::uniform_from_word(w);
    const double exact = sonic::detail::gumbel_from_uniform_exact(v);
    const float fast = sonic::detail::gumbel_from_uniform_fast(v);
    // Error beyond the fp32 rounding of G itself: no fp32 value is nearer than ulp(G) / 2, which
    // for G >= 16 is already 2^-20.
    const float half_ulp = 0.5f * (nextafterf(fabsf(static_cast<float>(exact)), INFINITY) - fabsf(static_cast<float>(exact)));
    const float err = static_cast<float>(fmax(fabs(static_cast<double>(fast) - exact) - half_ulp, 0.0));
    const unsigned int e = __float_as_uint(err);
    if (e > atomicMax(max_err_bits, e)) atomicExch(worst, static_cast<unsigned long long>(w));
  }
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(SharedRulesDevice, PhiloxWordsAndUniformsMatchHost) {
  const int n = 1 << 16;
  const uint64_t seed = 0x0123456789ABCDEFull, step = 0xFEDCBA9876543210ull;
  uint32_t* d_words;
  float* d_uniforms;
  CUDA_OK(cudaMalloc(&d_words, n * sizeof(uint32_t)));
  CUDA_OK(cudaMalloc(&d_uniforms, n * sizeof(float)));
  draw_kernel<<<(n + 255) / 256, 256>>>(n, seed, step, d_words, d_uniforms);
  CUDA_OK(cudaGetLastError());
  std::vector<uint32_t> words(n);
  std::vector<float> uniforms(n);
  CUDA_OK(cudaMemcpy(words.data(), d_words, n * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(uniforms.data(), d_uniforms, n * 4, cudaMemcpyDeviceToHost));
  const uint32_t purpose = sonic::detail::purpose(sonic::detail::Draw::kCorrection, 3);
  for (int t = 0; t < n; ++t) {
    ASSERT_EQ(words[t], sonic::detail::random_word(seed, step, purpose, t)) << "t=" << t;
    ASSERT_EQ(bits(uniforms[t]), bits(sonic::detail::uniform_from_word(words[t]))) << "t=" << t;
  }
  cudaFree(d_words);
  cudaFree(d_uniforms);
}

TEST(SharedRulesDevice, PerTokenRulesAndKeysMatchHostBitForBit) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 8.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::vector<RuleCase> cases;
  const float specials[] = {0.0f, -0.0f, INFINITY, -INFINITY, 1e-30f, -1e-30f, 3e38f, -3e38f};
  for (int i = 0; i < 200000; ++i) {
    RuleCase c;
    c.x = i < 8 ? specials[i] : normal(rng);
    c.bias = unit(rng) < 0.3f ? normal(rng) : 0.0f;
    c.rep = unit(rng) < 0.5f ? 0.5f + 1.5f * unit(rng) : 1.0f;
    c.freq = unit(rng) < 0.5f ? normal(rng) * 0.1f : 0.0f;
    c.pres = unit(rng) < 0.5f ? normal(rng) * 0.1f : 0.0f;
    c.temperature = 1e-5f + 2.0f * unit(rng);
    c.count = static_cast<int32_t>(unit(rng) * 5);
    c.rep_hit = unit(rng) < 0.5f;
    cases.push_back(c);
  }
  const int n = static_cast<int>(cases.size());
  RuleCase* d_cases;
  float* d_z;
  unsigned long long* d_keys;
  CUDA_OK(cudaMalloc(&d_cases, n * sizeof(RuleCase)));
  CUDA_OK(cudaMalloc(&d_z, n * sizeof(float)));
  CUDA_OK(cudaMalloc(&d_keys, n * sizeof(unsigned long long)));
  CUDA_OK(cudaMemcpy(d_cases, cases.data(), n * sizeof(RuleCase), cudaMemcpyHostToDevice));
  rules_kernel<<<(n + 255) / 256, 256>>>(n, d_cases, d_z, d_keys);
  CUDA_OK(cudaGetLastError());
  std::vector<float> z(n);
  std::vector<unsigned long long> keys(n);
  CUDA_OK(cudaMemcpy(z.data(), d_z, n * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(keys.data(), d_keys, n * 8, cudaMemcpyDeviceToHost));
  for (int i = 0; i < n; ++i) {
    const RuleCase& c = cases[i];
    const sonic::detail::Penalties pen{c.rep, c.freq, c.pres};
    const float x = sonic::detail::adjust_logit(c.x, c.bias, c.rep_hit != 0, c.count, pen);
    const float host_z = sonic::detail::apply_temperature(x, c.temperature);
    ASSERT_EQ(bits(z[i]), bits(host_z)) << "case " << i << " x=" << c.x;
    ASSERT_EQ(keys[i], sonic::detail::pack_key(host_z, i)) << "case " << i;
  }
  cudaFree(d_cases);
  cudaFree(d_z);
  cudaFree(d_keys);
}

TEST(SharedRulesDevice, FastGumbelWithinSpecTolerance) {
  unsigned int* d_err;
  unsigned long long* d_worst;
  CUDA_OK(cudaMalloc(&d_err, 4));
  CUDA_OK(cudaMalloc(&d_worst, 8));
  CUDA_OK(cudaMemset(d_err, 0, 4));
  CUDA_OK(cudaMemset(d_worst, 0, 8));
  gumbel_error_kernel<<<dim3(1024, 33), 256>>>(d_err, d_worst);
  CUDA_OK(cudaGetLastError());
  unsigned int err_bits = 0;
  unsigned long long worst = 0;
  CUDA_OK(cudaMemcpy(&err_bits, d_err, 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(&worst, d_worst, 8, cudaMemcpyDeviceToHost));
  float err;
  std::memcpy(&err, &err_bits, 4);
  const float v = sonic::detail::uniform_from_word(static_cast<uint32_t>(worst));
  std::printf("fast Gumbel: max |G_fast - G| - ulp(G)/2 = %.3g = 2^%.2f over every distinct uniform (worst v = %.9g, G = %.6f)\n",
              err, std::log2(err), v, sonic::detail::gumbel_from_uniform_exact(v));
  // SPEC.md section 4 asks for 2^-20; an fp32 G cannot beat its own rounding (ulp(G) / 2, which is
  // 2^-20 itself for G >= 16), so the bound applies beyond that rounding.
  EXPECT_LE(err, std::ldexp(1.0f, -20));
  cudaFree(d_err);
  cudaFree(d_worst);
}

}  // namespace
