// Host-side argument checks, run before anything is launched. Each failure throws sonic::Error
// (kInvalidArgument) whose message names the argument and its value, e.g.
//   sonic: invalid argument params.top_p = 1.5: must be in (0, 1]
#pragma once

#include <string>

#include "sonic/error.hpp"
#include "sonic/types.hpp"

namespace sonic::detail {

[[noreturn]] void invalid_argument(const std::string& name, const std::string& value,
                                   const std::string& requirement);

void validate_config(const SamplerConfig& config);
void validate_slot(int32_t slot, const SamplerConfig& config, const char* name);
void validate_params(const RequestParams& params, const SamplerConfig& config);
void validate_history(const int32_t* tokens, int64_t count, const SamplerConfig& config,
                      const char* name);
void validate_sample(const SamplerConfig& config, const LogitsView& logits,
                     const BitmaskView& bitmask, const SampleOutputs& out,
                     const CallOptions& options);
void validate_top_k(const SamplerConfig& config, const LogitsView& logits, int32_t k, const TopKOutputs& out);
void validate_verify(const SamplerConfig& config, const LogitsView& logits, const VerifyInputs& in,
                     const BitmaskView& bitmask, const VerifyOutputs& out,
                     const CallOptions& options);

}  // namespace sonic::detail
