// Host-side argument checks (SPEC.md section 5): every shape, stride, pointer and parameter range a
// call depends on is checked here, before the backend sees the call. Values that live in caller
// arrays on the device (slot ids, cu_rows, draft ids, rules) are flagged per row by the backend
// instead (docs/semantics.md).
#include "host/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unordered_map>

namespace sonic::detail {

namespace {

// Shortest decimal that reads back as the same float ("1.5", "1e-06", "nan", "inf").
std::string fmt(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[48];
  for (int precision = 1; precision <= 9; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, static_cast<double>(v));
    if (std::strtof(buf, nullptr) == v) break;
  }
  return buf;
}

std::string fmt(int64_t v) { return std::to_string(v); }
std::string fmt(int32_t v) { return std::to_string(v); }

std::string at(const std::string& name, size_t i) { return name + "[" + std::to_string(i) + "]"; }

// Requirement text for a vocabulary id.
std::string id_range(const SamplerConfig& config) {
  return "must be a token id in [0, vocab_size) = [0, " + fmt(config.vocab_size) + ")";
}

bool valid_id(int32_t t, const SamplerConfig& config) { return t >= 0 && t < config.vocab_size; }

void require_non_null(const void* p, const std::string& name, const std::string& when = "") {
  if (p == nullptr) invalid_argument(name, "null", "must be non-null" + when);
}

void check_logits(const SamplerConfig& config, const LogitsView& logits) {
  if (logits.rows < 0 || logits.rows > config.max_rows)
    invalid_argument("logits.rows", fmt(logits.rows),
                     "must be in [0, max_rows] = [0, " + fmt(config.max_rows) + "]");
  if (logits.rows > 0)
    require_non_null(logits.data, "logits.data",
                     " when logits.rows = " + fmt(logits.rows) + " > 0");
  const auto dtype = static_cast<int32_t>(logits.dtype);
  if (logits.dtype != DType::kF32 && logits.dtype != DType::kBF16 && logits.dtype != DType::kF16)
    invalid_argument("logits.dtype", fmt(dtype), "must be one of f32 (0), bf16 (1), f16 (2)");
  if (logits.cols < config.vocab_size)
    invalid_argument("logits.cols", fmt(logits.cols),
                     "must be >= vocab_size (" + fmt(config.vocab_size) + ")");
  if (logits.row_stride < logits.cols)
    invalid_argument("logits.row_stride", fmt(logits.row_stride),
                     "must be >= logits.cols (" + fmt(logits.cols) + ")");
}

void check_bitmask(const SamplerConfig& config, const LogitsView& logits,
                   const BitmaskView& bitmask) {
  if (bitmask.data == nullptr) return;  // no grammar mask in this call
  const int64_t need_words = (static_cast<int64_t>(config.vocab_size) + 31) / 32;
  if (bitmask.words < need_words)
    invalid_argument("bitmask.words", fmt(bitmask.words),
                     "must be >= ceil(vocab_size / 32) (" + fmt(need_words) + ")");
  if (bitmask.row_stride < bitmask.words)
    invalid_argument("bitmask.row_stride", fmt(bitmask.row_stride),
                     "must be >= bitmask.words (" + fmt(bitmask.words) + ")");
  if (bitmask.rows < 1)
    invalid_argument("bitmask.rows", fmt(bitmask.rows), "must be >= 1 when bitmask.data is given");
  if (bitmask.row_index == nullptr && bitmask.rows < logits.rows)
    invalid_argument("bitmask.rows", fmt(bitmask.rows),
                     "must be >= logits.rows (" + fmt(logits.rows) +
                         ") when bitmask.row_index is null");
}

void check_options(const CallOptions& options) {
  const auto mode = static_cast<int32_t>(options.logprob_mode);
  if (options.logprob_mode != LogprobMode::kRaw &&
      options.logprob_mode != LogprobMode::kProcessed &&
      options.logprob_mode != LogprobMode::kFinal)
    invalid_argument("options.logprob_mode", fmt(mode),
                     "must be one of raw (0), processed (1), final (2)");
}

// top_ids / top_logprobs: both or neither; the stride holds max_top_logprobs entries (and >= 1).
void check_top(const SamplerConfig& config, const int32_t* ids, const float* logprobs,
               int64_t stride) {
  if ((ids == nullptr) != (logprobs == nullptr)) {
    if (ids == nullptr)
      invalid_argument("out.top_ids", "null", "must be given together with out.top_logprobs");
    invalid_argument("out.top_logprobs", "null", "must be given together with out.top_ids");
  }
  if (ids == nullptr) return;
  const int64_t need = config.max_top_logprobs > 1 ? config.max_top_logprobs : 1;
  if (stride < need)
    invalid_argument("out.top_stride", fmt(stride),
                     "must be >= max(1, max_top_logprobs) (" + fmt(need) +
                         ") when out.top_ids is given");
}

}  // namespace

void invalid_argument(const std::string& name, const std::string& value,
                      const std::string& requirement) {
  throw Error(ErrorCode::kInvalidArgument,
              "sonic: invalid argument " + name + " = " + value + ": " + requirement);
}

void validate_config(const SamplerConfig& config) {
  const auto backend = static_cast<int32_t>(config.backend);
  if (config.backend != Backend::kAuto && config.backend != Backend::kCpu &&
      config.backend != Backend::kCuda)
    invalid_argument("config.backend", fmt(backend), "must be one of auto (0), cpu (1), cuda (2)");
  if (config.vocab_size <= 0)
    invalid_argument("config.vocab_size", fmt(config.vocab_size), "must be > 0");
  if (config.max_slots <= 0)
    invalid_argument("config.max_slots", fmt(config.max_slots), "must be > 0");
  if (config.max_rows <= 0)
    invalid_argument("config.max_rows", fmt(config.max_rows), "must be > 0");
  // A draft position j is the low 16 bits of the Philox counter's purpose (SPEC.md section 4).
  if (config.max_drafts < 0 || config.max_drafts > kMaxDraftsPerRequest)
    invalid_argument("config.max_drafts", fmt(config.max_drafts),
                     "must be in [0, " + fmt(kMaxDraftsPerRequest) + "]");
  if (config.max_history < 0 || config.max_history > kMaxHistory)
    invalid_argument("config.max_history", fmt(config.max_history),
                     "must be in [0, " + fmt(kMaxHistory) + "]");
  if (config.max_token_list < 0)
    invalid_argument("config.max_token_list", fmt(config.max_token_list), "must be >= 0");
  if (config.max_top_logprobs < 0 || config.max_top_logprobs > kMaxTopLogprobs)
    invalid_argument("config.max_top_logprobs", fmt(config.max_top_logprobs),
                     "must be in [0, " + fmt(kMaxTopLogprobs) + "]");
  if (config.max_final_entries < 0)
    invalid_argument("config.max_final_entries", fmt(config.max_final_entries), "must be >= 0");
  if (config.device < 0) invalid_argument("config.device", fmt(config.device), "must be >= 0");
  if (config.cpu_threads < 0 || config.cpu_threads > kMaxCpuThreads)
    invalid_argument("config.cpu_threads", fmt(config.cpu_threads),
                     "must be in [0, " + fmt(kMaxCpuThreads) + "] (0: one a hardware thread)");
}

void validate_slot(int32_t slot, const SamplerConfig& config, const char* name) {
  if (slot < 0 || slot >= config.max_slots)
    invalid_argument(name, fmt(slot),
                     "must be in [0, max_slots) = [0, " + fmt(config.max_slots) + ")");
}

void validate_params(const RequestParams& p, const SamplerConfig& config) {
  // temperature: 0 (greedy) or finite >= 1e-5. NaN fails every comparison below.
  if (!(p.temperature == 0.0f || (p.temperature >= 1e-5f && std::isfinite(p.temperature))))
    invalid_argument("params.temperature", fmt(p.temperature),
                     "must be 0 (greedy) or finite and >= 1e-05");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f))
    invalid_argument("params.top_p", fmt(p.top_p), "must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f))
    invalid_argument("params.min_p", fmt(p.min_p), "must be in [0, 1]");
  if (!(p.repetition_penalty > 0.0f && std::isfinite(p.repetition_penalty)))
    invalid_argument("params.repetition_penalty", fmt(p.repetition_penalty),
                     "must be finite and > 0");
  if (!std::isfinite(p.frequency_penalty))
    invalid_argument("params.frequency_penalty", fmt(p.frequency_penalty), "must be finite");
  if (!std::isfinite(p.presence_penalty))
    invalid_argument("params.presence_penalty", fmt(p.presence_penalty), "must be finite");

  const size_t list_entries =
      p.logit_bias.size() + p.banned_tokens.size() + p.allowed_tokens.size();
  if (list_entries > static_cast<size_t>(config.max_token_list))
    invalid_argument(
        "params.logit_bias.size() + params.banned_tokens.size() + params.allowed_tokens.size()",
        std::to_string(list_entries),
        "must be <= max_token_list (" + fmt(config.max_token_list) + ")");

  std::unordered_map<int32_t, size_t> seen;
  seen.reserve(p.logit_bias.size());
  for (size_t i = 0; i < p.logit_bias.size(); ++i) {
    const int32_t t = p.logit_bias[i].first;
    const std::string name = at("params.logit_bias", i);
    if (!valid_id(t, config)) invalid_argument(name + ".token", fmt(t), id_range(config));
    if (!seen.emplace(t, i).second)
      invalid_argument(name + ".token", fmt(t),
                       "repeated token id (also at params.logit_bias[" +
                           std::to_string(seen[t]) + "])");
    if (!std::isfinite(p.logit_bias[i].second))
      invalid_argument(name + ".bias", fmt(p.logit_bias[i].second),
                       "must be finite (use params.banned_tokens to forbid a token)");
  }
  for (size_t i = 0; i < p.banned_tokens.size(); ++i)
    if (!valid_id(p.banned_tokens[i], config))
      invalid_argument(at("params.banned_tokens", i), fmt(p.banned_tokens[i]), id_range(config));
  for (size_t i = 0; i < p.allowed_tokens.size(); ++i)
    if (!valid_id(p.allowed_tokens[i], config))
      invalid_argument(at("params.allowed_tokens", i), fmt(p.allowed_tokens[i]), id_range(config));

  if (p.top_logprobs < 0 || p.top_logprobs > config.max_top_logprobs)
    invalid_argument("params.top_logprobs", fmt(p.top_logprobs),
                     "must be in [0, max_top_logprobs] = [0, " + fmt(config.max_top_logprobs) +
                         "]");
}

void validate_history(const int32_t* tokens, int64_t count, const SamplerConfig& config,
                      const char* name) {
  // The count's own name: Sampler::admit calls it prompt_len, append_output count.
  const std::string base(name);
  const std::string count_name = base == "prompt" ? "prompt_len" : "count";
  if (count < 0) invalid_argument(count_name, fmt(count), "must be >= 0");
  if (count > config.max_history)
    invalid_argument(count_name, fmt(count),
                     "must be <= max_history (" + fmt(config.max_history) + ")");
  if (count > 0)
    require_non_null(tokens, base, " when " + count_name + " = " + fmt(count) + " > 0");
  for (int64_t i = 0; i < count; ++i)
    if (!valid_id(tokens[i], config))
      invalid_argument(at(base, static_cast<size_t>(i)), fmt(tokens[i]), id_range(config));
}

void validate_sample(const SamplerConfig& config, const LogitsView& logits,
                     const BitmaskView& bitmask, const SampleOutputs& out,
                     const CallOptions& options) {
  check_logits(config, logits);
  if (logits.rows > 0)
    require_non_null(out.tokens, "out.tokens",
                     " when logits.rows = " + fmt(logits.rows) + " > 0");
  check_top(config, out.top_ids, out.top_logprobs, out.top_stride);

  const int given = (out.final_ids != nullptr) + (out.final_probs != nullptr) +
                    (out.final_count != nullptr);
  if (given != 0 && given != 3) {
    const char* missing = out.final_ids == nullptr     ? "out.final_ids"
                          : out.final_probs == nullptr ? "out.final_probs"
                                                       : "out.final_count";
    invalid_argument(missing, "null",
                     "out.final_ids, out.final_probs and out.final_count must be given together");
  }
  if (given == 3 && out.final_stride < config.max_final_entries)
    invalid_argument("out.final_stride", fmt(out.final_stride),
                     "must be >= max_final_entries (" + fmt(config.max_final_entries) +
                         ") when out.final_ids is given");

  check_bitmask(config, logits, bitmask);
  check_options(options);
}

void validate_top_k(const SamplerConfig& config, const LogitsView& logits, int32_t k, const TopKOutputs& out) {
  check_logits(config, logits);
  const int32_t most = std::min(config.vocab_size, kMaxTopK);
  if (k < 1 || k > most)
    invalid_argument("k", fmt(k), "must be in [1, min(vocab_size, " + fmt(kMaxTopK) + ")] = [1, " + fmt(most) + "]");
  if (logits.rows > 0)
    require_non_null(out.ids, "out.ids", " when logits.rows = " + fmt(logits.rows) + " > 0");
  if (out.stride < k) invalid_argument("out.stride", fmt(out.stride), "must be >= k (" + fmt(k) + ")");
}

void validate_verify(const SamplerConfig& config, const LogitsView& logits, const VerifyInputs& in,
                     const BitmaskView& bitmask, const VerifyOutputs& out,
                     const CallOptions& options) {
  if (in.num_requests < 0 || in.num_requests > config.max_rows)
    invalid_argument("in.num_requests", fmt(in.num_requests),
                     "must be in [0, max_rows] = [0, " + fmt(config.max_rows) + "]");
  const std::string when_requests =
      " when in.num_requests = " + fmt(in.num_requests) + " > 0";
  if (in.num_requests > 0) require_non_null(in.cu_rows, "in.cu_rows", when_requests);
  if (in.num_drafts_capacity < 0)
    invalid_argument("in.num_drafts_capacity", fmt(in.num_drafts_capacity), "must be >= 0");
  if (in.num_requests > 0 && config.max_drafts > 0)
    require_non_null(in.draft_tokens, "in.draft_tokens",
                     " when in.num_requests = " + fmt(in.num_requests) +
                         " > 0 and max_drafts = " + fmt(config.max_drafts) + " > 0");

  const DraftProbsView& q = in.draft_probs;
  if (q.dense != nullptr) {
    if (q.dense_rows < 0)
      invalid_argument("in.draft_probs.dense_rows", fmt(q.dense_rows), "must be >= 0");
    if (q.dense_stride < config.vocab_size)
      invalid_argument("in.draft_probs.dense_stride", fmt(q.dense_stride),
                       "must be >= vocab_size (" + fmt(config.vocab_size) +
                           ") when in.draft_probs.dense is given");
  }
  const int sparse_given = (q.sparse_ids != nullptr) + (q.sparse_probs != nullptr) +
                           (q.sparse_count != nullptr);
  if (sparse_given != 0 && sparse_given != 3) {
    const char* missing = q.sparse_ids == nullptr     ? "in.draft_probs.sparse_ids"
                          : q.sparse_probs == nullptr ? "in.draft_probs.sparse_probs"
                                                      : "in.draft_probs.sparse_count";
    invalid_argument(missing, "null",
                     "in.draft_probs.sparse_ids, sparse_probs and sparse_count must be given "
                     "together");
  }
  if (sparse_given == 3) {
    if (q.sparse_rows < 0)
      invalid_argument("in.draft_probs.sparse_rows", fmt(q.sparse_rows), "must be >= 0");
    if (q.sparse_stride < 1)
      invalid_argument("in.draft_probs.sparse_stride", fmt(q.sparse_stride),
                       "must be >= 1 when in.draft_probs.sparse_ids is given");
  }

  check_logits(config, logits);

  if (in.num_requests > 0) {
    require_non_null(out.tokens, "out.tokens", when_requests);
    require_non_null(out.num_accepted, "out.num_accepted", when_requests);
  }
  const int64_t need_stride = static_cast<int64_t>(config.max_drafts) + 1;
  if (out.out_stride < need_stride)
    invalid_argument("out.out_stride", fmt(out.out_stride),
                     "must be >= max_drafts + 1 (" + fmt(need_stride) + ")");
  check_top(config, out.top_ids, out.top_logprobs, out.top_stride);

  check_bitmask(config, logits, bitmask);
  check_options(options);
}

}  // namespace sonic::detail
