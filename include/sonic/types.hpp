// Public value types of the sonic sampler: parameters, array views, outputs and status codes.
// SPEC.md (the project's contract) defines what every field means; the comments here say only
// where a value lives and which value is neutral.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace sonic {

// Which implementation runs a Sampler's calls. kAuto picks CUDA when a GPU is usable, else CPU.
enum class Backend : int32_t { kAuto = 0, kCpu = 1, kCuda = 2 };

enum class DType : int32_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// Log-probabilities reported for the sampled token and the top-N (SPEC.md section 2).
enum class LogprobMode : int32_t {
  kRaw = 0,        // log_softmax of the input logits (vLLM's default)
  kProcessed = 1,  // log_softmax(z) before truncation (SGLang's default); greedy rows use T = 1
  kFinal = 2,      // the renormalised kept set
};

// How a random verification request accepts its drafts (SPEC.md section 3). Greedy requests
// (temperature 0) always use the greedy rule, whatever is asked here.
enum class VerifyRule : int32_t {
  kDenseDraftProbs = 0,   // q_j given as dense rows
  kSparseDraftProbs = 1,  // q_j given as sparse lists (single-step mode's final distribution)
  kOneHot = 2,            // no q: n-gram or argmax drafters
  kStrict = 3,            // accept while the draft equals the token sampled from the row
};

// Per-row status bit flags (SPEC.md section 5, plus two device-side input conditions).
enum StatusBits : int32_t {
  kStatusOk = 0,
  kStatusNaN = 1 << 0,            // a NaN logit was seen (treated as -inf); the token is valid
  kStatusNoValidToken = 1 << 1,   // every token masked or -inf; token -1
  kStatusInvalidInput = 1 << 2,   // bad device-side input for this row (slot id, draft id, cu_rows);
                                  // token -1, nothing else of the row is read
  kStatusHistoryFull = 1 << 3,    // the emitted token could not be appended to the slot's history
};

constexpr int32_t kMaxTopLogprobs = 20;
constexpr int32_t kMaxCpuThreads = 1024;  // SamplerConfig::cpu_threads
constexpr int32_t kMaxDraftsPerRequest = 65535;  // SamplerConfig::max_drafts (16-bit positions)
constexpr int32_t kMaxHistory = 1 << 28;   // SamplerConfig::max_history (the CUDA table hashes twice as many)

// Everything an engine states about one request when it admits it into a slot. Host values,
// validated by Sampler::admit; SPEC.md section 1 gives the ranges.
struct RequestParams {
  float temperature = 1.0f;         // 0: greedy; otherwise >= 1e-5
  int32_t top_k = 0;                // <= 0 or >= vocab_size: disabled
  float top_p = 1.0f;               // (0, 1]; 1: disabled
  bool top_p_joint = false;         // SGLang's joint rule (SPEC.md section 2 step 8)
  float min_p = 0.0f;               // [0, 1]; 0: disabled
  float repetition_penalty = 1.0f;  // > 0; 1: disabled
  bool repetition_output_only = false;  // scope: output only (SGLang) instead of prompt + output
  float frequency_penalty = 0.0f;   // 0: disabled
  float presence_penalty = 0.0f;    // 0: disabled
  bool penalties_include_prompt = false;  // frequency/presence count the prompt too (TensorRT-LLM)
  std::vector<std::pair<int32_t, float>> logit_bias;  // (token, bias); ids distinct, bias finite
  std::vector<int32_t> banned_tokens;
  std::vector<int32_t> allowed_tokens;  // empty: all allowed
  uint64_t seed = 0;
  uint64_t initial_step = 0;        // the step counter's value at admission
  int32_t top_logprobs = 0;         // N of the top-N output, 0 .. SamplerConfig::max_top_logprobs
};

// Sizes fixed at creation: every buffer of the sampler is allocated once, here.
struct SamplerConfig {
  Backend backend = Backend::kAuto;
  int32_t vocab_size = 0;          // V: ids >= V in a padded logits row are masked (CUDA: <= 262144)
  int32_t max_slots = 0;           // request-table capacity
  int32_t max_rows = 0;            // most rows in one call (single-step or verification; CUDA: <= 65535)
  int32_t max_drafts = 0;          // most drafts per request in verification mode
  int32_t max_history = 32768;     // tokens of history (prompt + output) per slot
  int32_t max_token_list = 4096;   // logit-bias + banned + allowed entries per request
  int32_t max_top_logprobs = 0;    // top-N capacity, <= 20
  int32_t max_final_entries = 0;   // capacity of the sparse final distribution per row, at most
                                   // sonic::max_final_entries() (CUDA: the exact sampler's shared
                                   // memory, about 28000 on an H100 or H200)
  int32_t device = 0;              // CUDA device ordinal (CUDA backend)
  int32_t cpu_threads = 1;         // CPU backend: threads a call's rows are spread over (0: one a
                                   // hardware thread); the outputs never depend on it
};

// A [rows, cols] matrix of logits with a row stride in elements. cols >= vocab_size; columns past
// vocab_size are padding and are masked. The library never writes it.
struct LogitsView {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

// Optional grammar bitmask, xgrammar's layout: int32 words, bit j of word w allows token 32*w + j.
// Row r of the call uses bitmask row row_index[r] (-1: no mask), or row r when row_index is null.
struct BitmaskView {
  const int32_t* data = nullptr;   // null: no bitmask in this call
  int64_t rows = 0;
  int64_t words = 0;               // >= ceil(vocab_size / 32)
  int64_t row_stride = 0;          // in words
  const int32_t* row_index = nullptr;
};

// Caller-allocated outputs of a single-step call. Null pointers are outputs not wanted.
struct SampleOutputs {
  int32_t* tokens = nullptr;        // [rows], required
  int32_t* status = nullptr;        // [rows], StatusBits
  float* logprob = nullptr;         // [rows] log-probability of the sampled token
  int32_t* rank = nullptr;          // [rows] its rank (tokens with logprob >= its own)
  int32_t* top_ids = nullptr;       // [rows, top_stride], first N of each row, -1 padded
  float* top_logprobs = nullptr;    // [rows, top_stride], -inf padded
  int64_t top_stride = 0;           // >= SamplerConfig::max_top_logprobs when top_ids is given
  int32_t* final_ids = nullptr;     // [rows, final_stride] kept set, most likely first
  float* final_probs = nullptr;     // [rows, final_stride]
  int32_t* final_count = nullptr;   // [rows] size of the kept set; entries written when it fits
  int64_t final_stride = 0;         // >= SamplerConfig::max_final_entries when final_ids is given
};

// Caller-allocated outputs of Sampler::top_k: row r's k entries at [r * stride, r * stride + k).
struct TopKOutputs {
  int32_t* ids = nullptr;     // [rows, stride], required
  float* values = nullptr;    // [rows, stride], optional: the logits as fp32
  int64_t stride = 0;         // >= k
};

// The largest k Sampler::top_k accepts.
constexpr int32_t kMaxTopK = 1024;

struct CallOptions {
  LogprobMode logprob_mode = LogprobMode::kRaw;
  bool advance_step = true;         // step counters += 1 after the call, on the device
  bool append_to_history = true;    // emitted tokens join their slot's output history
  void* stream = nullptr;           // cudaStream_t for the CUDA backend
};

// Draft distributions for verification, indexed by draft: the drafts of request r are
// d = cu_rows[r] - r + j for j < n_r (vLLM's packing of draft_probs). Either form may be null.
struct DraftProbsView {
  const float* dense = nullptr;     // [num_drafts, dense_stride], dense_stride >= vocab_size
  int64_t dense_rows = 0;
  int64_t dense_stride = 0;
  const int32_t* sparse_ids = nullptr;    // [num_drafts, sparse_stride]
  const float* sparse_probs = nullptr;    // [num_drafts, sparse_stride]
  const int32_t* sparse_count = nullptr;  // [num_drafts]; entries past count are ignored
  int64_t sparse_rows = 0;
  int64_t sparse_stride = 0;
};

// One verification call over B requests whose target rows are packed in logits.
struct VerifyInputs {
  int32_t num_requests = 0;          // B
  const int32_t* cu_rows = nullptr;  // [B + 1] exclusive offsets of each request's rows
  const int32_t* slots = nullptr;    // [B] slot of each request; null: request r is slot r
  const int32_t* draft_tokens = nullptr;  // [num_drafts] packed like draft probabilities
  int64_t num_drafts_capacity = 0;   // length of draft_tokens
  const int32_t* rules = nullptr;    // [B] VerifyRule; null: every request kOneHot
  DraftProbsView draft_probs;
};

struct VerifyOutputs {
  int32_t* tokens = nullptr;         // [B, out_stride]: accepted drafts, one more token, then -1
  int32_t* num_accepted = nullptr;   // [B] accepted drafts (the emitted count is this + 1)
  int64_t out_stride = 0;            // >= max_drafts + 1
  int32_t* status = nullptr;         // [rows] StatusBits of each target row
  float* logprob = nullptr;          // [B, out_stride] of each emitted token under its row
  int32_t* rank = nullptr;           // [B, out_stride]
  int32_t* top_ids = nullptr;        // [B, out_stride, top_stride]
  float* top_logprobs = nullptr;     // [B, out_stride, top_stride]
  int64_t top_stride = 0;
};

}  // namespace sonic
