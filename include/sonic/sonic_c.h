/* sonic C API: the sampler of sonic/sampler.hpp behind an opaque handle, for C programs and foreign
 * function interfaces (ctypes, cffi, Rust, Go, ...). Plain C99.
 *
 * Conventions
 * - Every function that can fail returns a sonic_status (SONIC_OK = 0). On failure,
 *   sonic_last_error() returns the message of the last failed call on the calling thread
 *   (thread-local; a later successful call does not clear it). Nothing throws across this API.
 * - One sampler takes one call at a time: serialise calls on a handle made from several threads.
 * - Each struct mirrors the C++ type of the same name in sonic/types.hpp (SPEC.md gives the meaning
 *   of every field); fill it with its sonic_*_default() function first, then set what you need.
 *   Booleans are int32_t (0 false, anything else true); enums are int32_t with the SONIC_*
 *   constants below.
 * - Array pointers point where the backend works: host memory for the CPU backend, device memory
 *   for the CUDA backend (except sonic_request_params and prompt/token lists: always host).
 * - `stream` is a cudaStream_t for the CUDA backend, ignored by the CPU backend (pass NULL).
 */
#ifndef SONIC_SONIC_C_H_
#define SONIC_SONIC_C_H_

#include <stdint.h>

#if defined(_WIN32)
#define SONIC_C_API
#else
#define SONIC_C_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Status codes (equal to sonic::ErrorCode) ------------------------------------------------ */
typedef int32_t sonic_status;
#define SONIC_OK 0
#define SONIC_ERROR_INVALID_ARGUMENT 1 /* a shape, stride, pointer or parameter out of range */
#define SONIC_ERROR_UNSUPPORTED 2      /* valid, but this build or backend cannot do it */
#define SONIC_ERROR_CUDA 3             /* the CUDA runtime failed */
#define SONIC_ERROR_OUT_OF_MEMORY 4
#define SONIC_ERROR_INTERNAL 5

/* ---- Enums (equal to the C++ enum values) ---------------------------------------------------- */
/* sonic::Backend */
#define SONIC_BACKEND_AUTO 0
#define SONIC_BACKEND_CPU 1
#define SONIC_BACKEND_CUDA 2
/* sonic::DType */
#define SONIC_DTYPE_F32 0
#define SONIC_DTYPE_BF16 1
#define SONIC_DTYPE_F16 2
/* sonic::LogprobMode */
#define SONIC_LOGPROB_RAW 0
#define SONIC_LOGPROB_PROCESSED 1
#define SONIC_LOGPROB_FINAL 2
/* sonic::VerifyRule */
#define SONIC_VERIFY_DENSE_DRAFT_PROBS 0
#define SONIC_VERIFY_SPARSE_DRAFT_PROBS 1
#define SONIC_VERIFY_ONE_HOT 2
#define SONIC_VERIFY_STRICT 3
/* sonic::StatusBits: per-row status flags */
#define SONIC_STATUS_OK 0
#define SONIC_STATUS_NAN 1
#define SONIC_STATUS_NO_VALID_TOKEN 2
#define SONIC_STATUS_INVALID_INPUT 4
#define SONIC_STATUS_HISTORY_FULL 8

#define SONIC_MAX_TOP_LOGPROBS 20
#define SONIC_MAX_CPU_THREADS 1024
#define SONIC_MAX_HISTORY (1 << 28)
#define SONIC_MAX_DRAFTS 65535

/* ---- Types ----------------------------------------------------------------------------------- */
typedef struct sonic_sampler sonic_sampler; /* opaque */

/* sonic::SamplerConfig */
typedef struct sonic_config {
  int32_t backend;           /* SONIC_BACKEND_*; default AUTO */
  int32_t vocab_size;        /* V (required, > 0) */
  int32_t max_slots;         /* request-table capacity (required, > 0) */
  int32_t max_rows;          /* most rows in one call (required, > 0) */
  int32_t max_drafts;        /* most drafts per request in verification; default 0 */
  int32_t max_history;       /* history tokens per slot; default 32768 */
  int32_t max_token_list;    /* logit-bias + banned + allowed entries per request; default 4096 */
  int32_t max_top_logprobs;  /* top-N capacity, 0..20; default 0 */
  int32_t max_final_entries; /* sparse final distribution capacity per row; default 0 (at most
                                sonic_max_final_entries(): CUDA, the exact sampler's shared memory) */
  int32_t device;            /* CUDA device ordinal; default 0 */
  int32_t cpu_threads;       /* CPU backend: threads a call's rows are spread over (0: one a
                                hardware thread); default 1 */
} sonic_config;

/* sonic::RequestParams. The lists are host arrays, copied by sonic_admit. */
typedef struct sonic_request_params {
  float temperature;                /* 0: greedy; otherwise >= 1e-5; default 1 */
  int32_t top_k;                    /* <= 0 or >= V: disabled; default 0 */
  float top_p;                      /* (0, 1]; default 1 */
  int32_t top_p_joint;              /* bool; default 0 */
  float min_p;                      /* [0, 1]; default 0 */
  float repetition_penalty;         /* > 0; default 1 */
  int32_t repetition_output_only;   /* bool; default 0 */
  float frequency_penalty;          /* default 0 */
  float presence_penalty;           /* default 0 */
  int32_t penalties_include_prompt; /* bool; default 0 */
  const int32_t* logit_bias_ids;    /* [logit_bias_count] distinct token ids */
  const float* logit_bias_values;   /* [logit_bias_count] finite biases */
  int64_t logit_bias_count;
  const int32_t* banned_tokens; /* [banned_count] */
  int64_t banned_count;
  const int32_t* allowed_tokens; /* [allowed_count]; 0 entries: all allowed */
  int64_t allowed_count;
  uint64_t seed;         /* default 0 */
  uint64_t initial_step; /* default 0 */
  int32_t top_logprobs;  /* 0..max_top_logprobs; default 0 */
} sonic_request_params;

/* sonic::LogitsView: [rows, cols] with a row stride in elements */
typedef struct sonic_logits {
  const void* data;
  int32_t dtype; /* SONIC_DTYPE_* */
  int64_t rows;
  int64_t cols;
  int64_t row_stride;
} sonic_logits;

/* sonic::BitmaskView (xgrammar layout). data NULL: no mask. */
typedef struct sonic_bitmask {
  const int32_t* data;
  int64_t rows;
  int64_t words;
  int64_t row_stride;
  const int32_t* row_index; /* [rows of the call]; -1 no mask; NULL: row r uses mask row r */
} sonic_bitmask;

/* sonic::SampleOutputs. NULL: output not wanted (tokens is required). */
typedef struct sonic_sample_outputs {
  int32_t* tokens;
  int32_t* status;
  float* logprob;
  int32_t* rank;
  int32_t* top_ids;
  float* top_logprobs;
  int64_t top_stride;
  int32_t* final_ids;
  float* final_probs;
  int32_t* final_count;
  int64_t final_stride;
} sonic_sample_outputs;

/* sonic::CallOptions */
typedef struct sonic_call_options {
  int32_t logprob_mode;      /* SONIC_LOGPROB_*; default RAW */
  int32_t advance_step;      /* bool; default 1 */
  int32_t append_to_history; /* bool; default 1 */
  void* stream;              /* cudaStream_t; default NULL */
} sonic_call_options;

/* sonic::DraftProbsView */
typedef struct sonic_draft_probs {
  const float* dense;
  int64_t dense_rows;
  int64_t dense_stride;
  const int32_t* sparse_ids;
  const float* sparse_probs;
  const int32_t* sparse_count;
  int64_t sparse_rows;
  int64_t sparse_stride;
} sonic_draft_probs;

/* sonic::VerifyInputs */
typedef struct sonic_verify_inputs {
  int32_t num_requests;
  const int32_t* cu_rows;      /* [num_requests + 1] */
  const int32_t* slots;        /* [num_requests]; NULL: request r is slot r */
  const int32_t* draft_tokens; /* [num_drafts_capacity] */
  int64_t num_drafts_capacity;
  const int32_t* rules; /* [num_requests] SONIC_VERIFY_*; NULL: all ONE_HOT */
  sonic_draft_probs draft_probs;
} sonic_verify_inputs;

/* sonic::VerifyOutputs */
typedef struct sonic_verify_outputs {
  int32_t* tokens;       /* [num_requests, out_stride] */
  int32_t* num_accepted; /* [num_requests] */
  int64_t out_stride;    /* >= max_drafts + 1 */
  int32_t* status;       /* [rows] */
  float* logprob;        /* [num_requests, out_stride] */
  int32_t* rank;         /* [num_requests, out_stride] */
  int32_t* top_ids;      /* [num_requests, out_stride, top_stride] */
  float* top_logprobs;   /* [num_requests, out_stride, top_stride] */
  int64_t top_stride;
} sonic_verify_outputs;

/* ---- Defaults: neutral values, as in the C++ default member initialisers. NULL is ignored. --- */
SONIC_C_API void sonic_config_default(sonic_config* config);
SONIC_C_API void sonic_request_params_default(sonic_request_params* params);
SONIC_C_API void sonic_logits_default(sonic_logits* logits);
SONIC_C_API void sonic_bitmask_default(sonic_bitmask* bitmask);
SONIC_C_API void sonic_sample_outputs_default(sonic_sample_outputs* out);
SONIC_C_API void sonic_call_options_default(sonic_call_options* options);
SONIC_C_API void sonic_draft_probs_default(sonic_draft_probs* draft_probs);
SONIC_C_API void sonic_verify_inputs_default(sonic_verify_inputs* in);
SONIC_C_API void sonic_verify_outputs_default(sonic_verify_outputs* out);

/* ---- Library --------------------------------------------------------------------------------- */
/* The message of the last failed call on this thread; "" if none has failed. Valid until the next
 * failed call on this thread. */
SONIC_C_API const char* sonic_last_error(void);
/* 1 when this build has the CUDA backend and a usable GPU is present, else 0. */
SONIC_C_API int32_t sonic_cuda_available(void);
/* The largest sonic_config.max_final_entries that sonic_sampler_create accepts for `backend`
 * (SONIC_BACKEND_*; AUTO resolves as there) and `device`: INT32_MAX for the CPU backend, for CUDA
 * the entries the exact sampler's shared memory holds on that device (about 28000 on an H100 or
 * H200). Fails as sonic_sampler_create would (SONIC_ERROR_UNSUPPORTED: no CUDA backend or GPU). */
SONIC_C_API sonic_status sonic_max_final_entries(int32_t backend, int32_t device, int32_t* out);
/* "MAJOR.MINOR.PATCH" */
SONIC_C_API const char* sonic_version(void);

/* ---- Sampler --------------------------------------------------------------------------------- */
/* Creates a sampler; *out is NULL on failure. */
SONIC_C_API sonic_status sonic_sampler_create(const sonic_config* config, sonic_sampler** out);
/* Destroys a sampler; NULL is a no-op. */
SONIC_C_API void sonic_sampler_destroy(sonic_sampler* sampler);
/* The resolved configuration (backend never AUTO). */
SONIC_C_API sonic_status sonic_sampler_get_config(const sonic_sampler* sampler, sonic_config* out);

/* Request table (Sampler::admit / retire / append_output / step). params NULL: defaults. */
SONIC_C_API sonic_status sonic_admit(sonic_sampler* sampler, int32_t slot,
                                     const sonic_request_params* params, const int32_t* prompt,
                                     int64_t prompt_len, void* stream);
SONIC_C_API sonic_status sonic_retire(sonic_sampler* sampler, int32_t slot, void* stream);
SONIC_C_API sonic_status sonic_append_output(sonic_sampler* sampler, int32_t slot,
                                             const int32_t* tokens, int64_t count, void* stream);
SONIC_C_API sonic_status sonic_get_step(const sonic_sampler* sampler, int32_t slot,
                                        uint64_t* out);

/* Single-step sampling (Sampler::sample). slots NULL: row r is slot r; bitmask NULL: no mask;
 * options NULL: defaults. */
SONIC_C_API sonic_status sonic_sample(sonic_sampler* sampler, const sonic_logits* logits,
                                      const int32_t* slots, const sonic_bitmask* bitmask,
                                      const sonic_sample_outputs* out,
                                      const sonic_call_options* options);

/* Batched top-k of the input logits (Sampler::top_k): row r's k largest entries among ids below
 * vocab_size, value descending then id ascending, NaN read as -inf, into ids[r * stride + i] and,
 * when values is not NULL, values[r * stride + i]. 1 <= k <= min(vocab_size, SONIC_MAX_TOP_K).
 * options NULL: defaults (only the stream is used). */
#define SONIC_MAX_TOP_K 1024
SONIC_C_API sonic_status sonic_top_k(sonic_sampler* sampler, const sonic_logits* logits, int32_t k,
                                     int32_t* ids, float* values, int64_t stride,
                                     const sonic_call_options* options);

/* Verification (Sampler::verify). bitmask NULL: no mask; options NULL: defaults. */
SONIC_C_API sonic_status sonic_verify(sonic_sampler* sampler, const sonic_logits* logits,
                                      const sonic_verify_inputs* in, const sonic_bitmask* bitmask,
                                      const sonic_verify_outputs* out,
                                      const sonic_call_options* options);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SONIC_SONIC_C_H_ */
