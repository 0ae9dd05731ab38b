// The C API: converts the C structs to the C++ types field by field, calls sonic::Sampler, and
// turns every exception into a status code plus a thread-local message.
#include "sonic/sonic_c.h"

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "host/validate.hpp"
#include "sonic/sampler.hpp"

#ifndef SONIC_VERSION_STRING
#define SONIC_VERSION_STRING "0.1.0"
#endif

struct sonic_sampler {
  explicit sonic_sampler(const sonic::SamplerConfig& config) : impl(config) {}
  sonic::Sampler impl;
};

namespace {

using sonic::ErrorCode;

// ---- The C constants are the C++ values ---------------------------------------------------------

static_assert(SONIC_OK == static_cast<int32_t>(ErrorCode::kOk));
static_assert(SONIC_ERROR_INVALID_ARGUMENT == static_cast<int32_t>(ErrorCode::kInvalidArgument));
static_assert(SONIC_ERROR_UNSUPPORTED == static_cast<int32_t>(ErrorCode::kUnsupported));
static_assert(SONIC_ERROR_CUDA == static_cast<int32_t>(ErrorCode::kCudaError));
static_assert(SONIC_ERROR_OUT_OF_MEMORY == static_cast<int32_t>(ErrorCode::kOutOfMemory));
static_assert(SONIC_ERROR_INTERNAL == static_cast<int32_t>(ErrorCode::kInternal));

static_assert(SONIC_BACKEND_AUTO == static_cast<int32_t>(sonic::Backend::kAuto));
static_assert(SONIC_BACKEND_CPU == static_cast<int32_t>(sonic::Backend::kCpu));
static_assert(SONIC_BACKEND_CUDA == static_cast<int32_t>(sonic::Backend::kCuda));
static_assert(SONIC_DTYPE_F32 == static_cast<int32_t>(sonic::DType::kF32));
static_assert(SONIC_DTYPE_BF16 == static_cast<int32_t>(sonic::DType::kBF16));
static_assert(SONIC_DTYPE_F16 == static_cast<int32_t>(sonic::DType::kF16));
static_assert(SONIC_LOGPROB_RAW == static_cast<int32_t>(sonic::LogprobMode::kRaw));
static_assert(SONIC_LOGPROB_PROCESSED == static_cast<int32_t>(sonic::LogprobMode::kProcessed));
static_assert(SONIC_LOGPROB_FINAL == static_cast<int32_t>(sonic::LogprobMode::kFinal));
static_assert(SONIC_VERIFY_DENSE_DRAFT_PROBS ==
              static_cast<int32_t>(sonic::VerifyRule::kDenseDraftProbs));
static_assert(SONIC_VERIFY_SPARSE_DRAFT_PROBS ==
              static_cast<int32_t>(sonic::VerifyRule::kSparseDraftProbs));
static_assert(SONIC_VERIFY_ONE_HOT == static_cast<int32_t>(sonic::VerifyRule::kOneHot));
static_assert(SONIC_VERIFY_STRICT == static_cast<int32_t>(sonic::VerifyRule::kStrict));
static_assert(SONIC_STATUS_OK == sonic::kStatusOk);
static_assert(SONIC_STATUS_NAN == sonic::kStatusNaN);
static_assert(SONIC_STATUS_NO_VALID_TOKEN == sonic::kStatusNoValidToken);
static_assert(SONIC_STATUS_INVALID_INPUT == sonic::kStatusInvalidInput);
static_assert(SONIC_STATUS_HISTORY_FULL == sonic::kStatusHistoryFull);
static_assert(SONIC_MAX_TOP_LOGPROBS == sonic::kMaxTopLogprobs);
static_assert(SONIC_MAX_CPU_THREADS == sonic::kMaxCpuThreads);
static_assert(SONIC_MAX_HISTORY == sonic::kMaxHistory);
static_assert(SONIC_MAX_DRAFTS == sonic::kMaxDraftsPerRequest);
static_assert(std::is_same_v<std::underlying_type_t<sonic::Backend>, int32_t>);
static_assert(std::is_same_v<std::underlying_type_t<sonic::DType>, int32_t>);
static_assert(std::is_same_v<std::underlying_type_t<sonic::LogprobMode>, int32_t>);
static_assert(std::is_same_v<std::underlying_type_t<sonic::VerifyRule>, int32_t>);

// ---- The C structs convert field for field ------------------------------------------------------
// Each C++ struct is unpacked with a structured binding that names every field with its type, in
// declaration order: adding, removing, retyping or reordering a field of a C++ type stops this file
// from compiling until its C mirror and converter below follow.

using BiasList = std::vector<std::pair<int32_t, float>>;

#define SONIC_FIELD(n, T) static_assert(std::is_same_v<decltype(n), T>, "field " #n " changed type")

[[maybe_unused]] void shape_config(sonic::SamplerConfig& c) {
  auto& [backend, vocab_size, max_slots, max_rows, max_drafts, max_history, max_token_list,
         max_top_logprobs, max_final_entries, device, cpu_threads] = c;
  SONIC_FIELD(backend, sonic::Backend);
  SONIC_FIELD(vocab_size, int32_t);
  SONIC_FIELD(max_slots, int32_t);
  SONIC_FIELD(max_rows, int32_t);
  SONIC_FIELD(max_drafts, int32_t);
  SONIC_FIELD(max_history, int32_t);
  SONIC_FIELD(max_token_list, int32_t);
  SONIC_FIELD(max_top_logprobs, int32_t);
  SONIC_FIELD(max_final_entries, int32_t);
  SONIC_FIELD(device, int32_t);
  SONIC_FIELD(cpu_threads, int32_t);
}

[[maybe_unused]] void shape_params(sonic::RequestParams& p) {
  auto& [temperature, top_k, top_p, top_p_joint, min_p, repetition_penalty, repetition_output_only,
         frequency_penalty, presence_penalty, penalties_include_prompt, logit_bias, banned_tokens,
         allowed_tokens, seed, initial_step, top_logprobs] = p;
  SONIC_FIELD(temperature, float);
  SONIC_FIELD(top_k, int32_t);
  SONIC_FIELD(top_p, float);
  SONIC_FIELD(top_p_joint, bool);
  SONIC_FIELD(min_p, float);
  SONIC_FIELD(repetition_penalty, float);
  SONIC_FIELD(repetition_output_only, bool);
  SONIC_FIELD(frequency_penalty, float);
  SONIC_FIELD(presence_penalty, float);
  SONIC_FIELD(penalties_include_prompt, bool);
  SONIC_FIELD(logit_bias, BiasList);
  SONIC_FIELD(banned_tokens, std::vector<int32_t>);
  SONIC_FIELD(allowed_tokens, std::vector<int32_t>);
  SONIC_FIELD(seed, uint64_t);
  SONIC_FIELD(initial_step, uint64_t);
  SONIC_FIELD(top_logprobs, int32_t);
}

[[maybe_unused]] void shape_logits(sonic::LogitsView& v) {
  auto& [data, dtype, rows, cols, row_stride] = v;
  SONIC_FIELD(data, const void*);
  SONIC_FIELD(dtype, sonic::DType);
  SONIC_FIELD(rows, int64_t);
  SONIC_FIELD(cols, int64_t);
  SONIC_FIELD(row_stride, int64_t);
}

[[maybe_unused]] void shape_bitmask(sonic::BitmaskView& v) {
  auto& [data, rows, words, row_stride, row_index] = v;
  SONIC_FIELD(data, const int32_t*);
  SONIC_FIELD(rows, int64_t);
  SONIC_FIELD(words, int64_t);
  SONIC_FIELD(row_stride, int64_t);
  SONIC_FIELD(row_index, const int32_t*);
}

[[maybe_unused]] void shape_sample_outputs(sonic::SampleOutputs& o) {
  auto& [tokens, status, logprob, rank, top_ids, top_logprobs, top_stride, final_ids, final_probs,
         final_count, final_stride] = o;
  SONIC_FIELD(tokens, int32_t*);
  SONIC_FIELD(status, int32_t*);
  SONIC_FIELD(logprob, float*);
  SONIC_FIELD(rank, int32_t*);
  SONIC_FIELD(top_ids, int32_t*);
  SONIC_FIELD(top_logprobs, float*);
  SONIC_FIELD(top_stride, int64_t);
  SONIC_FIELD(final_ids, int32_t*);
  SONIC_FIELD(final_probs, float*);
  SONIC_FIELD(final_count, int32_t*);
  SONIC_FIELD(final_stride, int64_t);
}

[[maybe_unused]] void shape_options(sonic::CallOptions& o) {
  auto& [logprob_mode, advance_step, append_to_history, stream] = o;
  SONIC_FIELD(logprob_mode, sonic::LogprobMode);
  SONIC_FIELD(advance_step, bool);
  SONIC_FIELD(append_to_history, bool);
  SONIC_FIELD(stream, void*);
}

[[maybe_unused]] void shape_draft_probs(sonic::DraftProbsView& q) {
  auto& [dense, dense_rows, dense_stride, sparse_ids, sparse_probs, sparse_count, sparse_rows,
         sparse_stride] = q;
  SONIC_FIELD(dense, const float*);
  SONIC_FIELD(dense_rows, int64_t);
  SONIC_FIELD(dense_stride, int64_t);
  SONIC_FIELD(sparse_ids, const int32_t*);
  SONIC_FIELD(sparse_probs, const float*);
  SONIC_FIELD(sparse_count, const int32_t*);
  SONIC_FIELD(sparse_rows, int64_t);
  SONIC_FIELD(sparse_stride, int64_t);
}

[[maybe_unused]] void shape_verify_inputs(sonic::VerifyInputs& in) {
  auto& [num_requests, cu_rows, slots, draft_tokens, num_drafts_capacity, rules, draft_probs] = in;
  SONIC_FIELD(num_requests, int32_t);
  SONIC_FIELD(cu_rows, const int32_t*);
  SONIC_FIELD(slots, const int32_t*);
  SONIC_FIELD(draft_tokens, const int32_t*);
  SONIC_FIELD(num_drafts_capacity, int64_t);
  SONIC_FIELD(rules, const int32_t*);
  SONIC_FIELD(draft_probs, sonic::DraftProbsView);
}

[[maybe_unused]] void shape_verify_outputs(sonic::VerifyOutputs& o) {
  auto& [tokens, num_accepted, out_stride, status, logprob, rank, top_ids, top_logprobs,
         top_stride] = o;
  SONIC_FIELD(tokens, int32_t*);
  SONIC_FIELD(num_accepted, int32_t*);
  SONIC_FIELD(out_stride, int64_t);
  SONIC_FIELD(status, int32_t*);
  SONIC_FIELD(logprob, float*);
  SONIC_FIELD(rank, int32_t*);
  SONIC_FIELD(top_ids, int32_t*);
  SONIC_FIELD(top_logprobs, float*);
  SONIC_FIELD(top_stride, int64_t);
}

#undef SONIC_FIELD

// Where a C struct has the same fields as its C++ type, it also has the same layout (the C++ enums
// are int32_t), so that a foreign caller may treat them alike; checked here.
#define SONIC_SAME_LAYOUT(C, Cpp, f) \
  static_assert(offsetof(C, f) == offsetof(Cpp, f), #C "." #f " is not where " #Cpp "." #f " is")
static_assert(sizeof(sonic_config) == sizeof(sonic::SamplerConfig));
SONIC_SAME_LAYOUT(sonic_config, sonic::SamplerConfig, max_final_entries);
SONIC_SAME_LAYOUT(sonic_config, sonic::SamplerConfig, device);
SONIC_SAME_LAYOUT(sonic_config, sonic::SamplerConfig, cpu_threads);
static_assert(sizeof(sonic_logits) == sizeof(sonic::LogitsView));
SONIC_SAME_LAYOUT(sonic_logits, sonic::LogitsView, dtype);
SONIC_SAME_LAYOUT(sonic_logits, sonic::LogitsView, row_stride);
static_assert(sizeof(sonic_bitmask) == sizeof(sonic::BitmaskView));
SONIC_SAME_LAYOUT(sonic_bitmask, sonic::BitmaskView, row_index);
static_assert(sizeof(sonic_sample_outputs) == sizeof(sonic::SampleOutputs));
SONIC_SAME_LAYOUT(sonic_sample_outputs, sonic::SampleOutputs, final_stride);
static_assert(sizeof(sonic_draft_probs) == sizeof(sonic::DraftProbsView));
SONIC_SAME_LAYOUT(sonic_draft_probs, sonic::DraftProbsView, sparse_stride);
static_assert(sizeof(sonic_verify_inputs) == sizeof(sonic::VerifyInputs));
SONIC_SAME_LAYOUT(sonic_verify_inputs, sonic::VerifyInputs, draft_probs);
static_assert(sizeof(sonic_verify_outputs) == sizeof(sonic::VerifyOutputs));
SONIC_SAME_LAYOUT(sonic_verify_outputs, sonic::VerifyOutputs, top_stride);
#undef SONIC_SAME_LAYOUT

// ---- Conversions --------------------------------------------------------------------------------

[[noreturn]] void null_argument(const char* name, const char* requirement = "must be non-null") {
  sonic::detail::invalid_argument(name, "null", requirement);
}

sonic::SamplerConfig to_cpp(const sonic_config& c) {
  sonic::SamplerConfig r;
  r.backend = static_cast<sonic::Backend>(c.backend);
  r.vocab_size = c.vocab_size;
  r.max_slots = c.max_slots;
  r.max_rows = c.max_rows;
  r.max_drafts = c.max_drafts;
  r.max_history = c.max_history;
  r.max_token_list = c.max_token_list;
  r.max_top_logprobs = c.max_top_logprobs;
  r.max_final_entries = c.max_final_entries;
  r.device = c.device;
  r.cpu_threads = c.cpu_threads;
  return r;
}

sonic_config to_c(const sonic::SamplerConfig& c) {
  sonic_config r;
  r.backend = static_cast<int32_t>(c.backend);
  r.vocab_size = c.vocab_size;
  r.max_slots = c.max_slots;
  r.max_rows = c.max_rows;
  r.max_drafts = c.max_drafts;
  r.max_history = c.max_history;
  r.max_token_list = c.max_token_list;
  r.max_top_logprobs = c.max_top_logprobs;
  r.max_final_entries = c.max_final_entries;
  r.device = c.device;
  r.cpu_threads = c.cpu_threads;
  return r;
}

// A host list given as pointer + count.
void check_list(const void* data, int64_t count, const char* data_name, const char* count_name) {
  if (count < 0) sonic::detail::invalid_argument(count_name, std::to_string(count), "must be >= 0");
  if (count > 0 && data == nullptr)
    sonic::detail::invalid_argument(
        data_name, "null", std::string("must be non-null when ") + count_name + " = " +
                               std::to_string(count) + " > 0");
}

sonic::RequestParams to_cpp(const sonic_request_params& p) {
  check_list(p.logit_bias_ids, p.logit_bias_count, "params->logit_bias_ids",
             "params->logit_bias_count");
  check_list(p.logit_bias_values, p.logit_bias_count, "params->logit_bias_values",
             "params->logit_bias_count");
  check_list(p.banned_tokens, p.banned_count, "params->banned_tokens", "params->banned_count");
  check_list(p.allowed_tokens, p.allowed_count, "params->allowed_tokens", "params->allowed_count");
  sonic::RequestParams r;
  r.temperature = p.temperature;
  r.top_k = p.top_k;
  r.top_p = p.top_p;
  r.top_p_joint = p.top_p_joint != 0;
  r.min_p = p.min_p;
  r.repetition_penalty = p.repetition_penalty;
  r.repetition_output_only = p.repetition_output_only != 0;
  r.frequency_penalty = p.frequency_penalty;
  r.presence_penalty = p.presence_penalty;
  r.penalties_include_prompt = p.penalties_include_prompt != 0;
  r.logit_bias.reserve(static_cast<size_t>(p.logit_bias_count));
  for (int64_t i = 0; i < p.logit_bias_count; ++i)
    r.logit_bias.emplace_back(p.logit_bias_ids[i], p.logit_bias_values[i]);
  if (p.banned_count > 0) r.banned_tokens.assign(p.banned_tokens, p.banned_tokens + p.banned_count);
  if (p.allowed_count > 0)
    r.allowed_tokens.assign(p.allowed_tokens, p.allowed_tokens + p.allowed_count);
  r.seed = p.seed;
  r.initial_step = p.initial_step;
  r.top_logprobs = p.top_logprobs;
  return r;
}

sonic::LogitsView to_cpp(const sonic_logits& v) {
  sonic::LogitsView r;
  r.data = v.data;
  r.dtype = static_cast<sonic::DType>(v.dtype);
  r.rows = v.rows;
  r.cols = v.cols;
  r.row_stride = v.row_stride;
  return r;
}

sonic::BitmaskView to_cpp(const sonic_bitmask& v) {
  sonic::BitmaskView r;
  r.data = v.data;
  r.rows = v.rows;
  r.words = v.words;
  r.row_stride = v.row_stride;
  r.row_index = v.row_index;
  return r;
}

sonic::SampleOutputs to_cpp(const sonic_sample_outputs& o) {
  sonic::SampleOutputs r;
  r.tokens = o.tokens;
  r.status = o.status;
  r.logprob = o.logprob;
  r.rank = o.rank;
  r.top_ids = o.top_ids;
  r.top_logprobs = o.top_logprobs;
  r.top_stride = o.top_stride;
  r.final_ids = o.final_ids;
  r.final_probs = o.final_probs;
  r.final_count = o.final_count;
  r.final_stride = o.final_stride;
  return r;
}

sonic::CallOptions to_cpp(const sonic_call_options& o) {
  sonic::CallOptions r;
  r.logprob_mode = static_cast<sonic::LogprobMode>(o.logprob_mode);
  r.advance_step = o.advance_step != 0;
  r.append_to_history = o.append_to_history != 0;
  r.stream = o.stream;
  return r;
}

sonic::DraftProbsView to_cpp(const sonic_draft_probs& q) {
  sonic::DraftProbsView r;
  r.dense = q.dense;
  r.dense_rows = q.dense_rows;
  r.dense_stride = q.dense_stride;
  r.sparse_ids = q.sparse_ids;
  r.sparse_probs = q.sparse_probs;
  r.sparse_count = q.sparse_count;
  r.sparse_rows = q.sparse_rows;
  r.sparse_stride = q.sparse_stride;
  return r;
}

sonic::VerifyInputs to_cpp(const sonic_verify_inputs& in) {
  sonic::VerifyInputs r;
  r.num_requests = in.num_requests;
  r.cu_rows = in.cu_rows;
  r.slots = in.slots;
  r.draft_tokens = in.draft_tokens;
  r.num_drafts_capacity = in.num_drafts_capacity;
  r.rules = in.rules;
  r.draft_probs = to_cpp(in.draft_probs);
  return r;
}

sonic::VerifyOutputs to_cpp(const sonic_verify_outputs& o) {
  sonic::VerifyOutputs r;
  r.tokens = o.tokens;
  r.num_accepted = o.num_accepted;
  r.out_stride = o.out_stride;
  r.status = o.status;
  r.logprob = o.logprob;
  r.rank = o.rank;
  r.top_ids = o.top_ids;
  r.top_logprobs = o.top_logprobs;
  r.top_stride = o.top_stride;
  return r;
}

// ---- Errors -------------------------------------------------------------------------------------

// A fixed buffer: recording an error never allocates (it may follow std::bad_alloc).
thread_local char g_last_error[1024] = "";

void set_last_error(const char* message) noexcept {
  std::snprintf(g_last_error, sizeof g_last_error, "%s", message != nullptr ? message : "");
}

// Runs f; maps every exception to a status code and records its message for this thread.
template <class F>
sonic_status guarded(F&& f) noexcept {
  try {
    f();
    return SONIC_OK;
  } catch (const sonic::Error& e) {
    set_last_error(e.what());
    const auto code = static_cast<sonic_status>(e.code());
    return code == SONIC_OK ? SONIC_ERROR_INTERNAL : code;
  } catch (const std::bad_alloc&) {
    set_last_error("sonic: out of memory");
    return SONIC_ERROR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    char buf[sizeof g_last_error];
    std::snprintf(buf, sizeof buf, "sonic: internal error: %s", e.what());
    set_last_error(buf);
    return SONIC_ERROR_INTERNAL;
  } catch (...) {
    set_last_error("sonic: internal error: unknown exception");
    return SONIC_ERROR_INTERNAL;
  }
}

sonic::Sampler& sampler_of(sonic_sampler* s) {
  if (s == nullptr) null_argument("sampler", "must be a handle from sonic_sampler_create");
  return s->impl;
}

const sonic::Sampler& sampler_of(const sonic_sampler* s) {
  if (s == nullptr) null_argument("sampler", "must be a handle from sonic_sampler_create");
  return s->impl;
}

}  // namespace

extern "C" {

// ---- Defaults: from the C++ default member initialisers, so that both stay one definition. ------

void sonic_config_default(sonic_config* config) {
  if (config != nullptr) *config = to_c(sonic::SamplerConfig{});
}

void sonic_request_params_default(sonic_request_params* params) {
  if (params == nullptr) return;
  const sonic::RequestParams d;
  std::memset(params, 0, sizeof *params);
  params->temperature = d.temperature;
  params->top_k = d.top_k;
  params->top_p = d.top_p;
  params->top_p_joint = d.top_p_joint ? 1 : 0;
  params->min_p = d.min_p;
  params->repetition_penalty = d.repetition_penalty;
  params->repetition_output_only = d.repetition_output_only ? 1 : 0;
  params->frequency_penalty = d.frequency_penalty;
  params->presence_penalty = d.presence_penalty;
  params->penalties_include_prompt = d.penalties_include_prompt ? 1 : 0;
  params->logit_bias_ids = nullptr;
  params->logit_bias_values = nullptr;
  params->logit_bias_count = 0;
  params->banned_tokens = nullptr;
  params->banned_count = 0;
  params->allowed_tokens = nullptr;
  params->allowed_count = 0;
  params->seed = d.seed;
  params->initial_step = d.initial_step;
  params->top_logprobs = d.top_logprobs;
}

void sonic_logits_default(sonic_logits* logits) {
  if (logits == nullptr) return;
  const sonic::LogitsView d;
  logits->data = d.data;
  logits->dtype = static_cast<int32_t>(d.dtype);
  logits->rows = d.rows;
  logits->cols = d.cols;
  logits->row_stride = d.row_stride;
}

void sonic_bitmask_default(sonic_bitmask* bitmask) {
  if (bitmask == nullptr) return;
  const sonic::BitmaskView d;
  bitmask->data = d.data;
  bitmask->rows = d.rows;
  bitmask->words = d.words;
  bitmask->row_stride = d.row_stride;
  bitmask->row_index = d.row_index;
}

void sonic_sample_outputs_default(sonic_sample_outputs* out) {
  if (out == nullptr) return;
  const sonic::SampleOutputs d;
  out->tokens = d.tokens;
  out->status = d.status;
  out->logprob = d.logprob;
  out->rank = d.rank;
  out->top_ids = d.top_ids;
  out->top_logprobs = d.top_logprobs;
  out->top_stride = d.top_stride;
  out->final_ids = d.final_ids;
  out->final_probs = d.final_probs;
  out->final_count = d.final_count;
  out->final_stride = d.final_stride;
}

void sonic_call_options_default(sonic_call_options* options) {
  if (options == nullptr) return;
  const sonic::CallOptions d;
  options->logprob_mode = static_cast<int32_t>(d.logprob_mode);
  options->advance_step = d.advance_step ? 1 : 0;
  options->append_to_history = d.append_to_history ? 1 : 0;
  options->stream = d.stream;
}

void sonic_draft_probs_default(sonic_draft_probs* q) {
  if (q == nullptr) return;
  const sonic::DraftProbsView d;
  q->dense = d.dense;
  q->dense_rows = d.dense_rows;
  q->dense_stride = d.dense_stride;
  q->sparse_ids = d.sparse_ids;
  q->sparse_probs = d.sparse_probs;
  q->sparse_count = d.sparse_count;
  q->sparse_rows = d.sparse_rows;
  q->sparse_stride = d.sparse_stride;
}

void sonic_verify_inputs_default(sonic_verify_inputs* in) {
  if (in == nullptr) return;
  const sonic::VerifyInputs d;
  in->num_requests = d.num_requests;
  in->cu_rows = d.cu_rows;
  in->slots = d.slots;
  in->draft_tokens = d.draft_tokens;
  in->num_drafts_capacity = d.num_drafts_capacity;
  in->rules = d.rules;
  sonic_draft_probs_default(&in->draft_probs);
}

void sonic_verify_outputs_default(sonic_verify_outputs* out) {
  if (out == nullptr) return;
  const sonic::VerifyOutputs d;
  out->tokens = d.tokens;
  out->num_accepted = d.num_accepted;
  out->out_stride = d.out_stride;
  out->status = d.status;
  out->logprob = d.logprob;
  out->rank = d.rank;
  out->top_ids = d.top_ids;
  out->top_logprobs = d.top_logprobs;
  out->top_stride = d.top_stride;
}

// ---- Library ------------------------------------------------------------------------------------

const char* sonic_last_error(void) { return g_last_error; }

int32_t sonic_cuda_available(void) {
  int32_t available = 0;
  const sonic_status st = guarded([&] { available = sonic::cuda_available() ? 1 : 0; });
  return st == SONIC_OK ? available : 0;
}

sonic_status sonic_max_final_entries(int32_t backend, int32_t device, int32_t* out) {
  return guarded([&] {
    if (out == nullptr) null_argument("out");
    *out = sonic::max_final_entries(static_cast<sonic::Backend>(backend), device);
  });
}

const char* sonic_version(void) { return SONIC_VERSION_STRING; }

// ---- Sampler ------------------------------------------------------------------------------------

sonic_status sonic_sampler_create(const sonic_config* config, sonic_sampler** out) {
  return guarded([&] {
    if (out == nullptr) null_argument("out");
    *out = nullptr;
    if (config == nullptr) null_argument("config");
    *out = new sonic_sampler(to_cpp(*config));
  });
}

void sonic_sampler_destroy(sonic_sampler* sampler) {
  // ~Sampler may release device memory; nothing may escape into C.
  guarded([&] { delete sampler; });
}

sonic_status sonic_sampler_get_config(const sonic_sampler* sampler, sonic_config* out) {
  return guarded([&] {
    const sonic::Sampler& s = sampler_of(sampler);
    if (out == nullptr) null_argument("out");
    sonic::SamplerConfig c = s.config();
    c.backend = s.backend();
    *out = to_c(c);
  });
}

sonic_status sonic_admit(sonic_sampler* sampler, int32_t slot, const sonic_request_params* params,
                         const int32_t* prompt, int64_t prompt_len, void* stream) {
  return guarded([&] {
    sonic::Sampler& s = sampler_of(sampler);
    sonic::RequestParams p;
    if (params != nullptr) p = to_cpp(*params);
    s.admit(slot, p, prompt, prompt_len, stream);
  });
}

sonic_status sonic_retire(sonic_sampler* sampler, int32_t slot, void* stream) {
  return guarded([&] { sampler_of(sampler).retire(slot, stream); });
}

sonic_status sonic_append_output(sonic_sampler* sampler, int32_t slot, const int32_t* tokens,
                                 int64_t count, void* stream) {
  return guarded([&] { sampler_of(sampler).append_output(slot, tokens, count, stream); });
}

sonic_status sonic_get_step(const sonic_sampler* sampler, int32_t slot, uint64_t* out) {
  return guarded([&] {
    const sonic::Sampler& s = sampler_of(sampler);
    if (out == nullptr) null_argument("out");
    *out = s.step(slot);
  });
}

sonic_status sonic_sample(sonic_sampler* sampler, const sonic_logits* logits, const int32_t* slots,
                          const sonic_bitmask* bitmask, const sonic_sample_outputs* out,
                          const sonic_call_options* options) {
  return guarded([&] {
    sonic::Sampler& s = sampler_of(sampler);
    if (logits == nullptr) null_argument("logits");
    if (out == nullptr) null_argument("out");
    const sonic::BitmaskView mask = bitmask != nullptr ? to_cpp(*bitmask) : sonic::BitmaskView{};
    const sonic::CallOptions opts = options != nullptr ? to_cpp(*options) : sonic::CallOptions{};
    s.sample(to_cpp(*logits), slots, mask, to_cpp(*out), opts);
  });
}

sonic_status sonic_top_k(sonic_sampler* sampler, const sonic_logits* logits, int32_t k, int32_t* ids, float* values,
                         int64_t stride, const sonic_call_options* options) {
  static_assert(SONIC_MAX_TOP_K == sonic::kMaxTopK, "C and C++ limits agree");
  return guarded([&] {
    sonic::Sampler& s = sampler_of(sampler);
    if (logits == nullptr) null_argument("logits");
    const sonic::CallOptions opts = options != nullptr ? to_cpp(*options) : sonic::CallOptions{};
    s.top_k(to_cpp(*logits), k, sonic::TopKOutputs{ids, values, stride}, opts);
  });
}

sonic_status sonic_verify(sonic_sampler* sampler, const sonic_logits* logits,
                          const sonic_verify_inputs* in, const sonic_bitmask* bitmask,
                          const sonic_verify_outputs* out, const sonic_call_options* options) {
  return guarded([&] {
    sonic::Sampler& s = sampler_of(sampler);
    if (logits == nullptr) null_argument("logits");
    if (in == nullptr) null_argument("in");
    if (out == nullptr) null_argument("out");
    const sonic::BitmaskView mask = bitmask != nullptr ? to_cpp(*bitmask) : sonic::BitmaskView{};
    const sonic::CallOptions opts = options != nullptr ? to_cpp(*options) : sonic::CallOptions{};
    s.verify(to_cpp(*logits), to_cpp(*in), mask, to_cpp(*out), opts);
  });
}

}  // extern "C"
