// Stage 2's logprob outputs of a settled row: the token's log-probability from the merged sums,
// and its rank and the top N from the sorted prefix.
#pragma once

#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_kind.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/stage2_shared.cuh"

namespace sonic::cuda {

// The top-N entries a row asks for (at most the outputs' stride).
__device__ __forceinline__ int top_count(const RowOutputs& out, const SlotParams& p) {
  return out.top_ids ? static_cast<int>(min(static_cast<int64_t>(p.top_n), out.top_stride)) : 0;
}
// Whether the call asks the row for the rank of its token or for its top N.
__device__ __forceinline__ bool asks_ranks(const RowOutputs& out, const SlotParams& p) {
  return out.rank != nullptr || (out.top_ids != nullptr && p.top_n > 0);
}

// The rank and top-N of `token` in the call's mode from the sorted prefix sh.sorted[0, sh.n) of a
// truncated row (SPEC.md section 2 outputs; the exact path's write_logprobs computes the same from
// the whole row). Every token outside the prefix scores below every token inside it in the
// processed mode, and in the raw mode when x is the input logit (sh.sorted_x then holds the x
// keys), so counts and orders over the prefix are the row's: a token t with score >= the kept
// token's lies inside it. The caller checked that the prefix holds the top N (or the whole row).
// The whole block calls it.
template <int Threads>
__device__ void write_prefix_ranks(const RowJob& job, int32_t r, const RowPrologue& pro, int32_t token, int kept,
                                   double kept_sum, float zm, Stage2Shared<Threads>& sh) {
  const RowOutputs& out = job.out;
  const int tid = threadIdx.x;
  const int n = sh.n;
  const bool raw = job.mode == LogprobMode::kRaw, final_mode = job.mode == LogprobMode::kFinal;
  // The mode's score of prefix entry i, and its logprob.
  auto score = [&](int i) { return detail::key_value(raw ? sh.sorted_x[i] : sh.sorted[i]); };
  auto logprob = [&](int i) {
    if (raw) return static_cast<float>(static_cast<double>(score(i)) - static_cast<double>(sh.raw_max) - log(sh.raw_sum));
    const double norm = final_mode ? kept_sum : sh.sum_all;
    return static_cast<float>(static_cast<double>(score(i)) - static_cast<double>(zm) - log(norm));
  };
  const int scope = final_mode ? kept : n;  // entries with a finite score in the mode
  if (tid == 0) {
    sh.at = -1;
    sh.rank = 0;
  }
  __syncthreads();
  for (int i = tid; i < kept; i += Threads)
    if (detail::key_token(sh.sorted[i]) == token) sh.at = i;
  __syncthreads();
  if (out.rank) {  // vLLM's rule: the tokens whose logprob is >= the token's
    const float s = sh.at >= 0 ? score(sh.at) : INFINITY;  // the token is always kept
    int c = 0;
    for (int i = tid; i < scope; i += Threads) c += score(i) >= s;
    c = warp_sum(c);
    if ((tid & 31) == 0 && c) atomicAdd(&sh.rank, c);
    __syncthreads();
    if (tid == 0) out.rank[r] = sh.rank;
  }
  if (!out.top_ids) return;
  const int m = min(top_count(out, pro.p), final_mode ? kept : min(n, sh.valid));
  int32_t* ids = out.top_ids + r * out.top_stride;
  float* lps = out.top_logprobs + r * out.top_stride;
  if (raw) {  // the prefix is in z order: place the entries by their x order
    for (int i = tid; i < n; i += Threads) {
      const unsigned long long key = sh.sorted_x[i];
      int pos = 0;
      for (int j = 0; j < n && pos < m; ++j) pos += sh.sorted_x[j] > key;
      if (pos < m) {
        ids[pos] = detail::key_token(key);
        lps[pos] = logprob(i);
      }
    }
  } else {
    for (int i = tid; i < m; i += Threads) {
      ids[i] = detail::key_token(sh.sorted[i]);
      lps[i] = logprob(i);
    }
  }
  for (int64_t i = m + tid; i < out.top_stride; i += Threads) {
    ids[i] = -1;
    lps[i] = -INFINITY;
  }
}

// The log-probability of `token` in the call's mode, from the row's merged sums: raw (the input
// logits' max and sum), processed (z over every valid token) or final (z over the kept set; 0 for
// greedy rows, whose kept set is the argmax alone).
template <int Threads>
__device__ __forceinline__ float token_logprob(const RowJob& job, int32_t r, const RowPrologue& pro, const RowKind& k,
                                               int32_t token, double kept_sum, float zm, const Stage2Shared<Threads>& sh) {
  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  const float x = detail::load_logit(row, job.dtype, token);
  if (job.mode == LogprobMode::kRaw)
    return static_cast<float>(static_cast<double>(x) - static_cast<double>(sh.raw_max) - log(sh.raw_sum));
  if (job.mode == LogprobMode::kFinal && pro.greedy) return 0.0f;
  const float zt = pro.apply(job.table, token, detail::is_nan(x) ? -INFINITY : x);
  const double norm = job.mode == LogprobMode::kFinal && k.truncated ? kept_sum : sh.sum_all;
  return static_cast<float>(static_cast<double>(zt) - static_cast<double>(zm) - log(norm));
}

}  // namespace sonic::cuda
