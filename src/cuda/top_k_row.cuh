// Sampler::top_k in the fast kernel: stage 1 screens the raw logits as for a truncated row (no rules,
// T = 1), and the last block of a row (or row_stage2_kernel, for small batches) merges its tiles,
// gathers the sorted prefix with about k + kTopKSlack keys and writes its first k. A row whose
// prefix holds fewer than k tokens (fewer than k finite logits, a +inf maximum, or candidates too
// spread) is flagged for the exact top-k kernel.
#pragma once

#include "cuda/row_job.cuh"
#include "cuda/row_kind.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/stage2_merge.cuh"
#include "cuda/stage2_prefix.cuh"
#include "cuda/stage2_shared.cuh"

namespace sonic::cuda {

// How stage 1 and stage 2 treat a row of a top-k call of k tokens: truncated, no sums, T = 1.
__device__ __forceinline__ RowKind top_k_row_kind(int32_t k) {
  RowKind kind;
  kind.truncated = true;
  kind.untruncated = false;
  kind.need_sum = false;
  kind.need_raw = false;
  kind.inv_t = 1.0f;
  kind.top_k = k <= kFastThreads ? k : 0;
  kind.lowering = false;  // no penalties
  return kind;
}

// The row "parameters" of a top-k call, for stage 1: nothing but T = 1.
__device__ __forceinline__ RowPrologue top_k_prologue() {
  RowPrologue pro;
  pro.p = SlotParams{};
  pro.p.temperature = 1.0f;
  pro.p.top_p = 1.0f;
  pro.slot = 0;
  pro.mask = nullptr;
  pro.greedy = false;
  pro.penalised = false;
  pro.has_rules = false;
  pro.position = 0;
  pro.prev_drafts = nullptr;
  pro.n_prev = 0;
  return pro;
}

template <int Threads>
__device__ void top_k_row(const RowJob& job, int32_t r, const RowKind& kind, Stage2Shared<Threads>& sh) {
  const int tid = threadIdx.x;
  const TopKJob& out = job.top_k;
  merge_row(job, r, kind, sh);
  const float mx = sh.max_key ? detail::key_value(sh.max_key) : -INFINITY;
  bool ok = mx > -INFINITY && mx < INFINITY;
  if (ok) {
    gather_prefix(job, r, mx, 1.0f, out.k, -INFINITY, false, SampleNoise{}, 0.0, sh);
    ok = sh.n <= kGatherCap && sh.n >= out.k;
  }
  if (!ok) {
    if (tid == 0) {
      job.fast.exact_flags[r] = 1;
      atomicAdd(job.fast.flagged_total, 1ull);
    }
    return;
  }
  for (int i = tid; i < out.k; i += Threads) {
    out.ids[r * out.stride + i] = detail::key_token(sh.sorted[i]);
    if (out.values) out.values[r * out.stride + i] = detail::key_value(sh.sorted[i]);
  }
  if (tid == 0) job.fast.exact_flags[r] = 0;
}

}  // namespace sonic::cuda
