// `sonic demo`: one heterogeneous batch through the whole pipeline, then a verification call.
#pragma once

#include <cstdint>

#include "sonic/types.hpp"

namespace sonic_tools {

struct DemoOptions {
  int32_t vocab = 32000;
  int32_t rows = 16;
  int32_t steps = 0;  // timed steps; 0: 5 on the CPU backend, 50 on CUDA
  uint64_t seed = 1234;
  sonic::Backend backend = sonic::Backend::kAuto;
  sonic::DType dtype = sonic::DType::kF32;
  sonic::LogprobMode logprob_mode = sonic::LogprobMode::kRaw;
};

// Prints the batch, the verification table and a summary line; returns the exit code.
// Library errors propagate as sonic::Error.
int run_demo(const DemoOptions& options);

}  // namespace sonic_tools
