// Quick start: two requests, one sampling step on the CPU backend.
#include <sonic/sonic.hpp>

#include <algorithm>
#include <cstdio>
#include <random>
#include <vector>

int main() {
  constexpr int32_t V = 1000;  // vocabulary size
  sonic::SamplerConfig config;
  config.backend = sonic::Backend::kCpu;
  config.vocab_size = V;
  config.max_slots = 2;  // requests held at once
  config.max_rows = 2;   // rows per call
  sonic::Sampler sampler(config);

  // Slot 0: greedy. Slot 1: temperature, top-k, top-p and a repetition penalty.
  sonic::RequestParams greedy;
  greedy.temperature = 0.0f;
  sonic::RequestParams creative;
  creative.temperature = 0.8f;
  creative.top_k = 50;
  creative.top_p = 0.9f;
  creative.repetition_penalty = 1.2f;
  creative.seed = 42;
  const std::vector<int32_t> prompt = {17, 99, 512};
  sampler.admit(0, greedy, prompt.data(), int64_t(prompt.size()));
  sampler.admit(1, creative, prompt.data(), int64_t(prompt.size()));

  // One step: a [2, V] fp32 logits matrix in host memory; row r belongs to slot r.
  std::mt19937 gen(0);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(2 * V);
  for (float& x : logits) x = normal(gen);
  const sonic::LogitsView view{logits.data(), sonic::DType::kF32, 2, V, V};

  std::vector<int32_t> tokens(2), status(2);
  std::vector<float> logprobs(2);
  sonic::SampleOutputs out;
  out.tokens = tokens.data();
  out.status = status.data();
  out.logprob = logprobs.data();
  sampler.sample(view, /*slots=*/nullptr, /*bitmask=*/{}, out);

  for (int r = 0; r < 2; ++r)
    std::printf("row %d: token %d, logprob %.4f, status %d\n", r, tokens[r], logprobs[r],
                status[r]);

  // The greedy row must pick the argmax of its logits.
  const auto argmax = std::max_element(logits.begin(), logits.begin() + V) - logits.begin();
  const bool ok = tokens[0] == argmax && tokens[1] >= 0 && tokens[1] < V && status[0] == 0;
  return ok ? 0 : 1;
}
