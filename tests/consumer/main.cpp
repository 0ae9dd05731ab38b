// Uses the installed sonic from C++: samples a small batch on the CPU backend and checks that the
// greedy row gets the argmax and the random row a valid token. Exit 0 on success.
#include <sonic/sonic.hpp>

#include <cstdio>
#include <vector>

int main() {
  try {
    sonic::SamplerConfig config;
    config.backend = sonic::Backend::kCpu;
    config.vocab_size = 10;
    config.max_slots = 2;
    config.max_rows = 2;
    sonic::Sampler sampler(config);

    sonic::RequestParams greedy;
    greedy.temperature = 0.0f;
    sonic::RequestParams random;
    random.temperature = 0.8f;
    random.seed = 42;
    sampler.admit(0, greedy, nullptr, 0);
    sampler.admit(1, random, nullptr, 0);

    const std::vector<float> logits = {
        0.1f, 0.5f, -1.0f, 2.5f, 0.0f, 1.0f, 2.4f, -3.0f, 0.2f, 0.3f,  // row 0: argmax 3
        1.0f, 0.0f, 0.5f,  0.2f, 0.1f, 0.9f, 0.3f, 0.4f,  0.6f, 0.7f,
    };
    std::vector<int32_t> tokens(2, -7), status(2, -7);
    sonic::SampleOutputs out;
    out.tokens = tokens.data();
    out.status = status.data();
    sampler.sample(sonic::LogitsView{logits.data(), sonic::DType::kF32, 2, 10, 10}, nullptr,
                   sonic::BitmaskView{}, out);

    std::printf("sonic C++ consumer: tokens %d %d, status %d %d, step %llu\n", tokens[0],
                tokens[1], status[0], status[1],
                static_cast<unsigned long long>(sampler.step(0)));
    if (tokens[0] != 3 || status[0] != sonic::kStatusOk) {
      std::fprintf(stderr, "greedy row: expected token 3 with status 0\n");
      return 1;
    }
    if (tokens[1] < 0 || tokens[1] >= 10 || status[1] != sonic::kStatusOk) {
      std::fprintf(stderr, "random row: expected a token in [0, 10) with status 0\n");
      return 1;
    }
    if (sampler.step(0) != 1) {
      std::fprintf(stderr, "the step counter did not advance\n");
      return 1;
    }
  } catch (const sonic::Error& e) {
    std::fprintf(stderr, "sonic::Error: %s\n", e.what());
    return 1;
  }
  return 0;
}
