// What a row of a call needs from the fast path, decided once from its request before its tokens
// (RowKind): stage 1 screens and stage 2 settles the row by it.
#pragma once

#include <cstdint>

#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"

namespace sonic::cuda {

// What a row needs from the fast path, fixed before the tokens (uniform over the row).
struct RowKind {
  bool truncated;    // random with min-p, top-k or top-p
  bool untruncated;  // random without any of them
  bool need_sum;     // sum of exp((x - max) / T) over the row: top-p mass on all tokens, logprobs
  bool need_raw;     // raw logprob mode: max and sum of exp over the input logits
  float inv_t;       // 1 / T for the sums (greedy rows: T = 1)
  int32_t top_k;     // truncated rows with 0 < top_k <= kFastThreads: the bound may rise to the k-th
                     // largest of the chunk's lane maxima (raise_by_top_k); otherwise 0
  bool lowering;     // penalised truncated rows without sums whose penalties can only lower a logit:
                     // their history tokens below the running bound need no lookup (apply_rules)
};

// Penalties that lower every finite logit and keep it finite: repetition >= 1 divides a positive
// logit or multiplies a negative one by it, frequency and presence >= 0 subtract; bounded by 2^20,
// a logit >= -2^100 stays far from -FLT_MAX whatever the count (at most 2^31).
__device__ __forceinline__ bool penalties_only_lower(const SlotParams& p) {
  constexpr float kMax = 0x1p20f;
  return p.repetition >= 1.0f && p.repetition <= kMax && p.frequency >= 0.0f && p.frequency <= kMax &&
         p.presence >= 0.0f && p.presence <= kMax;
}
// A finite logit below this takes the whole rule even in a lowering row (apply_rules).
constexpr float kLoweringFloor = -0x1p100f;

__device__ __forceinline__ RowKind row_kind(const RowPrologue& pro, const RowJob& job, int32_t V) {
  const SlotParams& p = pro.p;
  const bool top_k_on = detail::top_k_cuts(p.top_k, V);
  RowKind k;
  k.truncated = !pro.greedy && (top_k_on || p.top_p < 1.0f || p.min_p > 0.0f);
  k.untruncated = !pro.greedy && !k.truncated;
  // Logprobs of the token or of the top N need the mode's sums.
  const bool want_lp = job.out.logprob != nullptr || (job.out.top_ids != nullptr && p.top_n > 0);
  k.need_sum = (k.truncated && p.top_p < 1.0f && ((p.flags & kSlotTopPJoint) || (!top_k_on && p.min_p <= 0.0f))) ||
               (want_lp && job.mode != LogprobMode::kRaw);
  k.need_raw = want_lp && job.mode == LogprobMode::kRaw;
  k.inv_t = pro.greedy ? 1.0f : 1.0f / p.temperature;
  k.top_k = k.truncated && top_k_on && p.top_k <= kFastThreads ? p.top_k : 0;
  k.lowering = pro.penalised && k.truncated && !k.need_sum && penalties_only_lower(p);
  return k;
}

}  // namespace sonic::cuda
