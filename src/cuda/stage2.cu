// Stage 2 of the fast path: one block per row. Merges the tiles' statistics and candidates, applies
// min-p / top-k / top-p (SPEC.md section 2 steps 6-8) on the candidates, proves from the tiles'
// bounds that the candidates hold the whole kept set, and samples by Gumbel-max with the noise in
// double, as the reference does. A row it cannot settle exactly (kept set beyond the candidates,
// +inf or no valid logits, rank or top-N outputs) is flagged for the exact path and left untouched.
#include <cub/block/block_reduce.cuh>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/block_select.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_outputs.cuh"

namespace sonic::cuda {

void launch_stage1(const RowJob& job, cudaStream_t stream);

namespace {

constexpr int kBlock = 256;
constexpr int kMaxSorted = 512;  // survivors sorted in shared memory; more goes to the exact path

struct ArgMaxD {
  double score;
  int32_t token;
};
struct ArgMaxDOp {
  __device__ ArgMaxD operator()(const ArgMaxD& a, const ArgMaxD& b) const {
    if (a.token < 0) return b;
    if (b.token < 0) return a;
    if (a.score != b.score) return a.score > b.score ? a : b;
    return a.token < b.token ? a : b;
  }
};

constexpr int kMaxTiles = kMaxVocab / kTile;

struct Shared {
  TileStat stats[kMaxTiles];
  int offset[kMaxTiles];
  union {
    cub::BlockReduce<ArgMaxD, kBlock>::TempStorage argmax;
    cub::BlockReduce<double, kBlock>::TempStorage f64;
  } temp;
  BlockSelect<kBlock>::Storage select;
  cub::BlockReduce<int, kBlock>::TempStorage i32;
  unsigned long long sorted[kMaxSorted];
  unsigned long long unsorted[kMaxSorted];
  int n_cand;
  int n_cand_tmp;
  int n_sorted;
  int flag_exact;
  unsigned long long cut;
  unsigned long long bound;
  int32_t token;
  double kept_sum;
  int kept;
};

__device__ int block_sum(int v, Shared& sh);

__device__ __forceinline__ double exp_rel(float z, float m) { return exp(static_cast<double>(z) - static_cast<double>(m)); }

__device__ int block_sum(int v, Shared& sh) {
  const int total = cub::BlockReduce<int, kBlock>(sh.i32).Sum(v);
  if (threadIdx.x == 0) sh.n_cand_tmp = total;
  __syncthreads();
  const int out = sh.n_cand_tmp;
  __syncthreads();
  return out;
}

__global__ void __launch_bounds__(kBlock) stage2_kernel(RowJob job) {
  __shared__ Shared sh;
  extern __shared__ unsigned long long cand[];  // tiles * kCandidateCap
  const int32_t r = blockIdx.x;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const RowOutputs& out = job.out;
  const int32_t tiles = job.fast.tiles;
  int32_t slot;
  const int32_t* mask;
  if (!resolve_row(tab, job.slots, r, job.bitmask, job.bitmask_rows, job.bitmask_stride, job.bitmask_index, &slot,
                   &mask)) {
    write_invalid_row(out, r, threadIdx.x, kBlock);
    if (threadIdx.x == 0) job.fast.exact_flags[r] = 0;
    return;
  }
  RowPrologue pro;
  pro.init(tab, slot, mask);
  const SlotParams& p = pro.p;
  const uint64_t step = tab.step[slot];
  const TileStat* stats = job.fast.stats + static_cast<int64_t>(r) * tiles;
  const bool top_k_on = p.top_k > 0 && p.top_k < V;
  const bool truncated = !pro.greedy && (top_k_on || p.top_p < 1.0f || p.min_p > 0.0f);

  // Merge the tiles: one thread loads each tile's statistics into shared memory, then every
  // thread reads them all from there.
  for (int32_t i = threadIdx.x; i < tiles; i += kBlock) sh.stats[i] = stats[i];
  __syncthreads();
  unsigned long long best = 0, bound = 0;
  int nan_seen = 0, valid = 0;
  float raw_max = -INFINITY;
  for (int32_t i = 0; i < tiles; ++i) {
    best = max(best, sh.stats[i].max_key);
    bound = max(bound, sh.stats[i].bound);
    nan_seen |= sh.stats[i].nan;
    valid += sh.stats[i].valid;
    raw_max = fmaxf(raw_max, sh.stats[i].raw_max);
  }
  const float m = best ? detail::key_value(best) : -INFINITY;
  const bool want_lp = out.logprob != nullptr;
  // What this version leaves to the exact path.
  bool exact = best == 0 || m == INFINITY || out.rank != nullptr || (out.top_ids != nullptr && p.top_n > 0) ||
               (want_lp && job.mode == LogprobMode::kRaw && !(raw_max > -INFINITY && raw_max < INFINITY));
  const bool untruncated = !pro.greedy && !truncated;
  if (untruncated && out.final_ids && valid <= job.out.final_capacity) exact = true;  // would list every token

  double sum_all = 0.0;  // sum of exp(z - m) over every valid token (where stage 1 computed it)
  for (int32_t i = 0; i < tiles; ++i)
    if (sh.stats[i].max_key) sum_all += static_cast<double>(sh.stats[i].sum) * exp_rel(detail::key_value(sh.stats[i].max_key), m);

  if (threadIdx.x == 0) {
    sh.flag_exact = exact;
    sh.token = -1;
    sh.kept = 0;
    sh.kept_sum = 1.0;
    sh.n_cand = 0;
    sh.n_sorted = 0;
  }
  __syncthreads();

  if (!exact && pro.greedy) {
    if (threadIdx.x == 0) {
      sh.token = detail::key_token(best);
      sh.kept = 1;
      sh.sorted[0] = best;
    }
  } else if (!exact && untruncated) {
    // The tiles' winners: largest z + G, ties to the lower id.
    if (threadIdx.x == 0) {
      float s = 0.0f;
      int32_t tok = -1;
      for (int32_t i = 0; i < tiles; ++i) {
        const int32_t t = sh.stats[i].win_token;
        if (t < 0) continue;
        if (tok < 0 || sh.stats[i].win_score > s || (sh.stats[i].win_score == s && t < tok)) {
          s = sh.stats[i].win_score;
          tok = t;
        }
      }
      sh.token = tok;
      sh.kept = valid;
      sh.kept_sum = sum_all;
    }
  } else if (!exact) {
    // Gather the candidates: offsets of each tile's run, then one parallel copy.
    if (threadIdx.x == 0) {
      int off = 0;
      for (int32_t i = 0; i < tiles; ++i) {
        sh.offset[i] = off;
        off += sh.stats[i].count;
      }
      sh.n_cand = off;
    }
    __syncthreads();
    const unsigned long long* src = job.fast.cands + static_cast<int64_t>(r) * tiles * kCandidateCap;
    for (int j = threadIdx.x; j < tiles * kCandidateCap; j += kBlock) {
      const int i = j / kCandidateCap, at = j % kCandidateCap;
      if (at < sh.stats[i].count) cand[sh.offset[i] + at] = src[j];
    }
    __syncthreads();
    const int n_cand = sh.n_cand;
    // Steps 6-7 as cuts on keys: survivors are the keys >= cut, then the top k of them.
    unsigned long long cut = (static_cast<unsigned long long>(detail::order_bits(-INFINITY)) + 1) << 32;
    if (p.min_p > 0.0f) {  // z >= z_max + ln(min_p), in double as the reference
      const float zf = __double2float_ru(static_cast<double>(m) + log(static_cast<double>(p.min_p)));
      cut = max(cut, static_cast<unsigned long long>(detail::order_bits(zf)) << 32);
    }
    int c = 0;
    for (int j = threadIdx.x; j < n_cand; j += kBlock) c += cand[j] >= cut;
    const int n_surv = block_sum(c, sh);
    const int keep = top_k_on ? min(n_surv, p.top_k) : n_surv;
    const int take = min(keep, kMaxSorted);
    // The `take` largest survivors, sorted (their rank among them is their position).
    if (take > 0) {
      const unsigned long long kth = BlockSelect<kBlock>::select_desc(
          n_cand, static_cast<unsigned long long>(take),
          [&](int32_t j) { return cand[j] >= cut ? cand[j] : 0ull; }, [](int32_t) { return 1ull; }, sh.select);
      for (int j = threadIdx.x; j < n_cand; j += kBlock)
        if (cand[j] >= cut && cand[j] >= kth) sh.unsorted[atomicAdd(&sh.n_sorted, 1)] = cand[j];
      __syncthreads();
      for (int j = threadIdx.x; j < take; j += kBlock) {
        const unsigned long long k = sh.unsorted[j];
        int pos = 0;
        for (int i = 0; i < take; ++i) pos += sh.unsorted[i] > k;
        sh.sorted[pos] = k;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // Coverage: every valid token outside the candidates has a key below `bound`.
      const bool survivors_all = !top_k_on && p.min_p <= 0.0f;  // min-p and top-k cut nothing
      bool covered = take > 0;
      if (covered && !survivors_all) {
        if (top_k_on && p.top_k <= n_surv)  // the top k: exact if the k-th is above every dropped key
          covered = take == keep && sh.sorted[keep - 1] >= bound;
        else  // every key >= cut
          covered = cut >= bound;
      }
      int kept = take;
      double kept_sum = 0.0;
      if (covered && p.top_p < 1.0f) {
        // Step 8: the mass of the survivors (sequential rule) or of every token (joint rule).
        double total = 0.0;
        if ((p.flags & kSlotTopPJoint) || survivors_all) {
          total = sum_all;
        } else if (take == keep) {
          for (int i = 0; i < keep; ++i) total += exp_rel(detail::key_value(sh.sorted[i]), m);
        } else {
          covered = false;  // more survivors than we sort
        }
        const double target = static_cast<double>(p.top_p) * total;
        double cum = 0.0;
        int n = 0;
        while (n < take && cum < target) cum += exp_rel(detail::key_value(sh.sorted[n++]), m);
        // Not reached: with every survivor held, top-p keeps them all (joint rule); otherwise the
        // crossing token lies beyond what we hold.
        if (cum < target && !(take == keep && !survivors_all)) covered = false;
        kept = n;
        kept_sum = cum;
      } else {
        if (take < keep) covered = false;
        for (int i = 0; i < kept; ++i) kept_sum += exp_rel(detail::key_value(sh.sorted[i]), m);
      }
      if (covered && sh.sorted[kept - 1] < bound) covered = false;
      sh.flag_exact = !covered;
      sh.kept = kept;
      sh.kept_sum = kept_sum;
    }
    __syncthreads();
    if (!sh.flag_exact) {
      // Gumbel-max over the kept set, noise in double exactly as the reference draws it.
      const uint32_t purpose = detail::purpose(detail::Draw::kSampling, 0);
      ArgMaxD local{0.0, -1};
      for (int i = threadIdx.x; i < sh.kept; i += kBlock) {
        const int32_t t = detail::key_token(sh.sorted[i]);
        const double g = detail::gumbel_from_uniform_exact(
            detail::uniform_from_word(detail::random_word(p.seed, step, purpose, static_cast<uint32_t>(t))));
        local = ArgMaxDOp()(local, ArgMaxD{static_cast<double>(detail::key_value(sh.sorted[i])) + g, t});
      }
      const ArgMaxD w = cub::BlockReduce<ArgMaxD, kBlock>(sh.temp.argmax).Reduce(local, ArgMaxDOp());
      if (threadIdx.x == 0) sh.token = w.token;
    }
  }
  __syncthreads();
  if (sh.flag_exact) {
    if (threadIdx.x == 0) job.fast.exact_flags[r] = 1;
    return;
  }

  // Outputs of a settled row.
  const int32_t token = sh.token;
  const int kept = sh.kept;
  if (out.final_ids) {
    int32_t* ids = out.final_ids + r * out.final_stride;
    float* probs = out.final_probs + r * out.final_stride;
    const bool fits = kept <= out.final_capacity;
    for (int64_t i = threadIdx.x; i < out.final_stride; i += kBlock) {
      const bool have = fits && i < kept;
      ids[i] = have ? detail::key_token(sh.sorted[i]) : -1;
      probs[i] = have ? (pro.greedy ? 1.0f : static_cast<float>(exp_rel(detail::key_value(sh.sorted[i]), m) / sh.kept_sum))
                      : 0.0f;
    }
  }
  if (out.top_ids)  // every row here has top_n == 0: padding only
    for (int64_t i = threadIdx.x; i < out.top_stride; i += kBlock) {
      out.top_ids[r * out.top_stride + i] = -1;
      out.top_logprobs[r * out.top_stride + i] = -INFINITY;
    }
  if (threadIdx.x == 0) {
    int32_t status = nan_seen ? kStatusNaN : 0;
    if (out.logprob) {
      float lp = 0.0f;
      const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
      const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
      if (job.mode == LogprobMode::kRaw) {
        double raw_sum = 0.0;
        for (int32_t i = 0; i < tiles; ++i)
          if (sh.stats[i].raw_max > -INFINITY)
            raw_sum += static_cast<double>(sh.stats[i].raw_sum) * exp_rel(sh.stats[i].raw_max, raw_max);
        const float x = detail::load_logit(row, job.dtype, token);
        lp = static_cast<float>(static_cast<double>(x) - static_cast<double>(raw_max) - log(raw_sum));
      } else if (job.mode == LogprobMode::kFinal && pro.greedy) {
        lp = 0.0f;
      } else {
        float x = detail::load_logit(row, job.dtype, token);
        const float zt = pro.apply(tab, token, detail::is_nan(x) ? -INFINITY : x);
        const double norm = job.mode == LogprobMode::kFinal && truncated ? sh.kept_sum : sum_all;
        lp = static_cast<float>(static_cast<double>(zt) - static_cast<double>(m) - log(norm));
      }
      out.logprob[r] = lp;
    }
    if (out.final_count) out.final_count[r] = kept;
    if (job.append_to_history && token >= 0 && !history_append(tab, slot, token)) status |= kStatusHistoryFull;
    if (job.advance_step) tab.step[slot] = step + 1;
    out.tokens[r] = token;
    if (out.status) out.status[r] = status;
    job.fast.exact_flags[r] = 0;
  }
}

}  // namespace

void launch_fast_sample(const RowJob& job, cudaStream_t stream) {
  if (job.rows == 0) return;
  launch_stage1(job, stream);
  SONIC_CUDA_CHECK(cudaGetLastError());
  const size_t smem = static_cast<size_t>(job.fast.tiles) * kCandidateCap * sizeof(unsigned long long);
  if (smem > 48 * 1024)
    SONIC_CUDA_CHECK(cudaFuncSetAttribute(stage2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  stage2_kernel<<<job.rows, kBlock, smem, stream>>>(job);
  SONIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sonic::cuda
