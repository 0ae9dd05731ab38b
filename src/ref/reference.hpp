// The CPU reference: SPEC.md made executable, one row at a time. Plain, since it is the oracle the
// GPU tests trust; only the sort of a row is tuned (sort_keys.hpp), to the same order. Sums and
// probabilities are in double; per-token arithmetic comes from the shared headers in src/common so
// that it rounds exactly as the kernels do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sonic/types.hpp"

namespace sonic::ref {

// Occurrences of each token in a request's history, split by where they came from.
struct TokenCounts {
  std::unordered_map<int32_t, int32_t> prompt;
  std::unordered_map<int32_t, int32_t> output;
};

TokenCounts count_tokens(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output);

// One row's inputs besides its logits.
struct RowContext {
  const RequestParams* params = nullptr;
  const TokenCounts* counts = nullptr;
  const int32_t* bitmask_row = nullptr;  // null: no grammar mask for this row
  int32_t vocab_size = 0;
  uint64_t step = 0;
  uint32_t position = 0;  // row position for the sampling noise (0 in single-step mode)
};

// Steps 1-4: x_t for t < vocab_size, -inf where masked; NaN inputs become -inf and set
// kStatusNaN in *status.
std::vector<float> processed_logits(const float* logits, const RowContext& ctx, int32_t* status);

// Step 5 on all tokens (random rows only).
std::vector<float> tempered(const std::vector<float>& x, float temperature);

// A prefix of the total order (score descending, id ascending) with renormalised probabilities.
struct Distribution {
  std::vector<int32_t> ids;    // most likely first
  std::vector<double> probs;   // sums to 1 (empty when no token is valid)
};

// The tokens with score > -inf in the total order (score descending, id ascending): all of them,
// or the first `limit`.
std::vector<int32_t> order_tokens(const std::vector<float>& score, size_t limit = SIZE_MAX);

// softmax over the given tokens' scores, in double; +inf scores share the mass equally.
std::vector<double> softmax_over(const std::vector<float>& score, const std::vector<int32_t>& ids);
// The natural log of softmax_over's probabilities, computed as score - max - log(sum): finite for
// every finite score of a row without +inf (where the probability may underflow to 0).
std::vector<double> log_softmax_over(const std::vector<float>& score, const std::vector<int32_t>& ids);

// Steps 6-8: the kept set of a random row and its renormalised distribution. When the steps needed
// z's whole order_tokens, it is moved to *whole_order (if given); otherwise *whole_order is left empty.
Distribution kept_distribution(const std::vector<float>& z, const RequestParams& params,
                               std::vector<int32_t>* whole_order = nullptr);

// Step 9: argmax of x over tokens with x > -inf, ties to the lower id; -1 if none.
int32_t greedy_token(const std::vector<float>& x);

// Gumbel-max over the kept ids: argmax z_t + G_t (G from (seed, step, purpose)), ties to the lower
// id; among +inf scores, argmax G_t. -1 when ids is empty.
int32_t gumbel_argmax(const std::vector<float>& z, const std::vector<int32_t>& ids, uint64_t seed,
                      uint64_t step, uint32_t purpose_word);

// Everything single-step mode reports for one row.
struct RowResult {
  int32_t token = -1;
  int32_t status = 0;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::vector<int32_t> top_ids;       // N entries, -1 padded
  std::vector<float> top_logprobs;    // N entries, -inf padded
  Distribution final_dist;            // the kept set (greedy rows: the token alone)
};

// The full single-step pipeline for one row (SPEC.md section 2). Without with_logprobs, logprob,
// rank and the top-N are left as constructed (a call that asks for none of them skips their sort).
RowResult sample_row(const float* logits, const RowContext& ctx, LogprobMode mode,
                     bool with_logprobs = true);

// The logprob outputs of the given token under one row's distribution in a mode.
struct LogprobResult {
  float logprob = -__builtin_huge_valf();
  int32_t rank = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};

// What a row's distribution looks like in each logprob mode, kept from one evaluation of the row.
struct RowScores {
  std::vector<float> raw;        // input logits (NaN -> -inf), t < vocab_size
  std::vector<float> processed;  // z (greedy rows: x, i.e. T = 1)
  Distribution final_dist;
  std::vector<int32_t> processed_order;  // order_tokens(processed) when kept_distribution made it
  bool greedy = false;
};

LogprobResult logprobs_for(const RowScores& scores, int32_t token, LogprobMode mode, int32_t top_n);

// Logits of any dtype, one row, to fp32 (first `count` values).
std::vector<float> row_to_float(const void* row, DType dtype, int64_t count);

// The k largest of x[0, n) in the total order (value descending, id ascending), NaN read as -inf.
void top_k_row(const float* x, int32_t n, int32_t k, int32_t* ids, float* values);

// One verification request (SPEC.md section 3). rows[j] are the n + 1 target rows' logits (fp32,
// vocab_size wide), drafts the n draft tokens, q_dense[j] (vocab_size) / q_sparse the draft
// distributions when the rule needs them.
struct SparseProbs {
  std::vector<int32_t> ids;
  std::vector<float> probs;
};

struct VerifyRequest {
  const RequestParams* params = nullptr;
  const std::vector<int32_t>* prompt = nullptr;
  const std::vector<int32_t>* output = nullptr;  // history before this step
  uint64_t step = 0;
  int32_t vocab_size = 0;
  std::vector<const float*> rows;              // n + 1 rows
  std::vector<const int32_t*> bitmask_rows;    // n + 1 entries, null allowed
  std::vector<int32_t> drafts;                 // n
  VerifyRule rule = VerifyRule::kOneHot;
  std::vector<const float*> q_dense;           // n rows when rule is kDenseDraftProbs
  std::vector<SparseProbs> q_sparse;           // n lists when rule is kSparseDraftProbs
  bool with_logprobs = true;                   // false: VerifyResult::logprobs left as constructed
};

struct VerifyResult {
  std::vector<int32_t> tokens;       // accepted drafts then the emitted token (-1 if none)
  int32_t num_accepted = 0;
  std::vector<int32_t> row_status;   // n + 1
  std::vector<LogprobResult> logprobs;  // one per emitted token
};

VerifyResult verify_request(const VerifyRequest& req, LogprobMode mode);

}  // namespace sonic::ref
