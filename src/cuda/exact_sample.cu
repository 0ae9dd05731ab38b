// The exact sampler: one block per row, full passes over the row, every rule of SPEC.md section 2.
// It is the device-side exact path: correct for every input, whatever the kept set's size. Sums
// that decide the kept set are fixed-point integers (order-independent); the noise is evaluated in
// double exactly as the CPU reference does, so the two agree token for token.
#include <cub/block/block_reduce.cuh>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/arg_max.cuh"
#include "cuda/block_pass.cuh"
#include "cuda/block_select.cuh"
#include "cuda/commit_rows.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/fixed_mass.cuh"
#include "cuda/gumbel_noise.cuh"
#include "cuda/margin_band.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_outputs.cuh"
#include "cuda/timeline.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {
namespace {

using detail::key_token;
using detail::key_value;
using detail::pack_key;

constexpr int kBlock = 512;

// The cut that keeps every valid token: the smallest key of a score above -inf.
__device__ __forceinline__ unsigned long long every_valid_cut() {
  return (static_cast<unsigned long long>(detail::order_bits(-INFINITY)) + 1) << 32;
}
// The cut that keeps min-p's survivors: the smallest key of a score at or above its threshold.
__device__ __forceinline__ unsigned long long threshold_cut(float z) {
  return static_cast<unsigned long long>(detail::order_bits(z)) << 32;
}

// A token's score as a packed key, 0 for -inf (not a candidate).
__device__ __forceinline__ unsigned long long score_key(float s, int32_t t) {
  return s > -INFINITY ? pack_key(s, t) : 0ull;
}

using ArgMax = ArgMaxD;  // (score, token) in double: arg_max.cuh
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const {
    return a > b ? a : b;
  }
};

// A row's distribution in one logprob mode: score_t, and the softmax normalisation over the
// eligible tokens (score > -inf, and only +inf scores when the maximum is +inf).
struct ModeStats {
  float max;
  double sum;     // sum of exp(score - max) over eligible tokens (finite max)
  int32_t n_inf;  // number of +inf scores (infinite max)
};

__device__ __forceinline__ float logprob_of(float s, const ModeStats& st) {
  if (!(s > -INFINITY)) return -INFINITY;
  if (st.max == INFINITY) return s == INFINITY ? static_cast<float>(-log(static_cast<double>(st.n_inf))) : -INFINITY;
  return static_cast<float>(static_cast<double>(s) - static_cast<double>(st.max) - log(st.sum));
}

union TempStorage {
  typename cub::BlockReduce<unsigned long long, kBlock>::TempStorage u64;
  typename cub::BlockReduce<double, kBlock>::TempStorage f64;
  typename cub::BlockReduce<int, kBlock>::TempStorage i32;
  typename cub::BlockReduce<ArgMax, kBlock>::TempStorage argmax;
};

struct Shared {
  TempStorage reduce;
  BlockSelect<kBlock>::Storage select;
  unsigned long long bcast_u64;
  double bcast_f64;
  int bcast_i32;
  ArgMax bcast_argmax;
  unsigned long long top[kMaxTopLogprobs];
  int top_count;
  int gather_count;
  int split_row;       // split rows: the row a block's work item names
  int split_last;      // split rows: this block is the row's last slice
  int split_bucket;    // split rows: the bucket of the top-p crossing
  int split_back;      // split rows: keys gathered from the back (the buckets above the cut's)
  unsigned long long split_above;  // split rows: the mass of the buckets above it
};

__device__ unsigned long long block_max_u64(unsigned long long v, Shared& sh) {
  const unsigned long long r = cub::BlockReduce<unsigned long long, kBlock>(sh.reduce.u64).Reduce(v, MaxU64());
  if (threadIdx.x == 0) sh.bcast_u64 = r;
  __syncthreads();
  const unsigned long long out = sh.bcast_u64;
  __syncthreads();
  return out;
}
__device__ unsigned long long block_sum_u64(unsigned long long v, Shared& sh) {
  const unsigned long long r = cub::BlockReduce<unsigned long long, kBlock>(sh.reduce.u64).Sum(v);
  if (threadIdx.x == 0) sh.bcast_u64 = r;
  __syncthreads();
  const unsigned long long out = sh.bcast_u64;
  __syncthreads();
  return out;
}
__device__ double block_sum_f64(double v, Shared& sh) {
  const double r = cub::BlockReduce<double, kBlock>(sh.reduce.f64).Sum(v);
  if (threadIdx.x == 0) sh.bcast_f64 = r;
  __syncthreads();
  const double out = sh.bcast_f64;
  __syncthreads();
  return out;
}
__device__ int block_sum_i32(int v, Shared& sh) {
  const int r = cub::BlockReduce<int, kBlock>(sh.reduce.i32).Sum(v);
  if (threadIdx.x == 0) sh.bcast_i32 = r;
  __syncthreads();
  const int out = sh.bcast_i32;
  __syncthreads();
  return out;
}
__device__ ArgMax block_argmax(ArgMax v, Shared& sh) {
  const ArgMax r = cub::BlockReduce<ArgMax, kBlock>(sh.reduce.argmax).Reduce(v, BetterOp());
  if (threadIdx.x == 0) sh.bcast_argmax = r;
  __syncthreads();
  const ArgMax out = sh.bcast_argmax;
  __syncthreads();
  return out;
}

// Normalisation of a score function over [0, V).
template <class ScoreFn>
__device__ ModeStats mode_stats(int32_t V, ScoreFn score, Shared& sh) {
  unsigned long long best = 0;
  int n_inf = 0;
  for (int32_t t = threadIdx.x; t < V; t += kBlock) {
    const float s = score(t);
    best = max(best, score_key(s, t));
    n_inf += s == INFINITY;
  }
  ModeStats st;
  best = block_max_u64(best, sh);
  st.max = best ? key_value(best) : -INFINITY;
  st.n_inf = block_sum_i32(n_inf, sh);
  double sum = 0.0;
  if (st.max > -INFINITY && st.max < INFINITY)
    for (int32_t t = threadIdx.x; t < V; t += kBlock) {
      const float s = score(t);
      if (s > -INFINITY) sum += exp(static_cast<double>(s) - static_cast<double>(st.max));
    }
  st.sum = block_sum_f64(sum, sh);
  return st;
}

// Log-probability, rank and top-N of `token` under a score function (SPEC.md section 2 outputs).
template <class ScoreFn>
__device__ void write_logprobs(const RowJob& job, int32_t r, int32_t token, int32_t top_n,
                               ScoreFn score, Shared& sh) {
  const RowOutputs& out = job.out;
  const int32_t V = job.table.vocab_size;
  const ModeStats st = mode_stats(V, score, sh);
  auto eligible_key = [&](int32_t t) -> unsigned long long {
    const float s = score(t);
    if (st.max == INFINITY && s != INFINITY) return 0ull;
    return score_key(s, t);
  };
  if (out.logprob || out.rank) {
    int rank = 0;
    float tok_score = -INFINITY;
    if (token >= 0) {
      tok_score = score(token);
      for (int32_t t = threadIdx.x; t < V; t += kBlock) rank += score(t) >= tok_score;
    }
    rank = block_sum_i32(rank, sh);
    if (threadIdx.x == 0) {
      if (out.logprob) out.logprob[r] = token >= 0 ? logprob_of(tok_score, st) : -INFINITY;
      if (out.rank) out.rank[r] = token >= 0 ? rank : 0;
    }
  }
  if (!out.top_ids) return;
  int eligible = 0;
  for (int32_t t = threadIdx.x; t < V; t += kBlock) eligible += eligible_key(t) != 0;
  eligible = block_sum_i32(eligible, sh);
  const int n = min(top_n, eligible);
  if (threadIdx.x == 0) sh.top_count = 0;
  __syncthreads();
  if (n > 0) {
    const unsigned long long kth = BlockSelect<kBlock>::select_desc(
        V, static_cast<unsigned long long>(n), eligible_key, [](int32_t) { return 1ull; }, sh.select);
    for (int32_t t = threadIdx.x; t < V; t += kBlock) {
      const unsigned long long k = eligible_key(t);
      if (k && k >= kth) sh.top[atomicAdd(&sh.top_count, 1)] = k;
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int i = 1; i < n; ++i)  // at most 20 keys: insertion sort, largest first
      for (int j = i; j > 0 && sh.top[j] > sh.top[j - 1]; --j) {
        const unsigned long long tmp = sh.top[j];
        sh.top[j] = sh.top[j - 1];
        sh.top[j - 1] = tmp;
      }
    int32_t* ids = out.top_ids + r * out.top_stride;
    float* lps = out.top_logprobs + r * out.top_stride;
    for (int64_t i = 0; i < out.top_stride; ++i) {
      const bool have = i < n;
      const int32_t t = have ? key_token(sh.top[i]) : -1;
      ids[i] = t;
      lps[i] = have ? logprob_of(score(t), st) : -INFINITY;
    }
  }
  __syncthreads();
}

// Steps 1-5 for token t of a row from its logit x: z_t, also stored in the row's workspace z (NaN
// read as -inf and noted in *nan_seen).
__device__ __forceinline__ float store_z_of(const RowJob& job, const RowPrologue& pro, int32_t t, float x, float* z,
                                            int* nan_seen) {
  if (detail::is_nan(x)) {
    *nan_seen = 1;
    x = -INFINITY;
  }
  const float zt = pro.apply(job.table, t, x);
  z[t] = zt;
  return zt;
}
__device__ __forceinline__ float store_z(const RowJob& job, const void* row, const RowPrologue& pro, int32_t t, float* z,
                                         int* nan_seen) {
  return store_z_of(job, pro, t, detail::load_logit(row, job.dtype, t), z, nan_seen);
}

// The Gumbel-max draw over a row's kept set {key >= cut} among keys key_of(i), i in [0, n) (0: none;
// the whole row, or the keys a split row gathered), ties to the lower id; among +inf scores
// (m = +inf) the noise alone. Two passes: the fp32 noise (within kFastNoiseSlack of the double one)
// finds the best screened score; only tokens within twice the slack of it can win or tie, and only
// they get the double-precision noise (on a flat row's nucleus of ~90K tokens, a handful), so the
// token is the one the double noise alone gives. With want_totals (verification, the final
// distribution), also the kept set's size, its +inf count and its sum of exp(z - m) in double
// (three block reductions that a token alone does not need).
struct KeptDraw {
  int32_t token;
  int32_t kept;
  int32_t n_inf;
  double sum;
};

template <class KeyFn>
__device__ KeptDraw draw_kept(int32_t n, KeyFn key_of, unsigned long long cut, float m, bool want_totals, uint64_t seed,
                              uint64_t step, uint32_t purpose, Shared& sh) {
  auto uniform_of = [&](int32_t t) {
    return detail::uniform_from_word(detail::random_word(seed, step, purpose, static_cast<uint32_t>(t)));
  };
  auto base_of = [&](float s) { return m == INFINITY ? 0.0 : static_cast<double>(s); };
  ArgMax screened{0.0, -1};
  double sum = 0.0;
  int n_inf = 0, n_kept = 0;
  for (int32_t i = threadIdx.x; i < n; i += kBlock) {
    const unsigned long long k = key_of(i);
    if (k == 0 || k < cut) continue;
    const float s = key_value(k);
    const int32_t t = key_token(k);
    ++n_kept;
    if (m == INFINITY && s != INFINITY) continue;
    n_inf += s == INFINITY;
    if (want_totals && m < INFINITY) sum += exp(static_cast<double>(s) - static_cast<double>(m));
    screened = better(screened, ArgMax{base_of(s) + static_cast<double>(detail::gumbel_from_uniform_fast(uniform_of(t))), t});
  }
  const double reach = fast_noise_reach(block_argmax(screened, sh).score);
  timeline_mark(kMarkDrawScreened);
  ArgMax local{0.0, -1};
  for (int32_t i = threadIdx.x; i < n; i += kBlock) {
    const unsigned long long k = key_of(i);
    if (k == 0 || k < cut) continue;
    const float s = key_value(k);
    const int32_t t = key_token(k);
    if (m == INFINITY && s != INFINITY) continue;
    const float v = uniform_of(t);
    if (base_of(s) + static_cast<double>(detail::gumbel_from_uniform_fast(v)) < reach) continue;
    local = better(local, ArgMax{base_of(s) + detail::gumbel_from_uniform_exact(v), t});
  }
  KeptDraw d{block_argmax(local, sh).token, 0, 0, 0.0};
  if (want_totals) {  // uniform
    d.sum = block_sum_f64(sum, sh);
    d.n_inf = block_sum_i32(n_inf, sh);
    d.kept = block_sum_i32(n_kept, sh);
  }
  return d;
}

// Row r by the exact path, if the fast path flagged it. Outputs only; the state is committed later.
__device__ __forceinline__ void exact_row(const RowJob& job, int32_t r, Shared& sh, unsigned long long* gathered) {
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;

  // Rows the fast path settled are done; the rest take the exact path.
  if (job.exact_flags && job.exact_flags[r] == 0) return;
  // Device-side input checks: a bad row is flagged and touches nothing else.
  int32_t slot = -1;
  const int32_t* mask = nullptr;
  VerifyRow w;
  const bool verifying = job.verify.num_requests > 0;
  const RowResolution res = resolve_call_row(job, r, &slot, &mask, &w);
  if (res == kRowSkip) return;
  if (res == kRowInvalid || (verifying && !block_request_ok(job, w))) {
    if (!verifying) write_invalid_row(job.out, r, threadIdx.x, kBlock);
    else if (threadIdx.x == 0) write_invalid_verify_row(job, r);
    return;
  }
  const RowPrologue pro = call_row_prologue(job, slot, mask, w);
  const SlotParams& p = pro.p;
  const uint64_t step = tab.step[slot];
  const bool greedy = pro.greedy;
  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  float* z = job.z + static_cast<int64_t>(r) * V;

  // Pass 1, steps 1-5: z (greedy rows keep x, i.e. T = 1), its maximum key, NaN.
  unsigned long long best = 0;
  int nan_seen = 0;
  for (int32_t t = threadIdx.x; t < V; t += kBlock) best = max(best, score_key(store_z(job, row, pro, t, z, &nan_seen), t));
  int32_t status = __syncthreads_or(nan_seen) ? kStatusNaN : 0;
  best = block_max_u64(best, sh);
  const float m = best ? key_value(best) : -INFINITY;
  __syncthreads();

  // Steps 6-8 as one cut: the kept set is {t : key_t >= cut}, a prefix of the total order.
  int32_t token = -1;
  unsigned long long cut = ~0ull;
  double kept_sum = 1.0;  // sum of exp(z - m) over the kept set (finite m)
  int32_t kept_inf = 0;   // number of kept +inf scores (infinite m)
  int32_t kept = 0;
  auto z_key = [&](int32_t t) { return score_key(z[t], t); };
  if (best == 0) {
    status |= kStatusNoValidToken;
  } else if (greedy) {
    token = key_token(best);
    cut = best;
    kept = 1;
  } else {
    const double md = m;
    auto mass = [&](int32_t t) -> unsigned long long {
      const float s = z[t];
      if (m == INFINITY) return s == INFINITY ? static_cast<unsigned long long>(kMassScale) : 0ull;
      if (!(s > -INFINITY)) return 0ull;
      return fixed_mass(s, md);
    };
    const unsigned long long every_valid = every_valid_cut();
    cut = every_valid;
    if (p.min_p > 0.0f) cut = max(cut, threshold_cut(min_p_threshold(m, p.min_p)));
    if (detail::top_k_cuts(p.top_k, V)) {
      int c = 0;
      for (int32_t t = threadIdx.x; t < V; t += kBlock) {
        const unsigned long long key = z_key(t);
        c += key >= cut && key != 0;
      }
      c = block_sum_i32(c, sh);
      if (p.top_k < c)
        cut = max(cut, BlockSelect<kBlock>::select_desc(V, static_cast<unsigned long long>(p.top_k), z_key,
                                                 [](int32_t) { return 1ull; }, sh.select));
    }
    if (p.top_p < 1.0f) {
      const bool joint = p.flags & kSlotTopPJoint;
      auto target_of = [&](unsigned long long w) {
        return top_p_target(p.top_p, static_cast<double>(w));
      };
      if (joint || cut == every_valid) {
        // The mass to reach is a share of every valid token's: the selection's first pass sums it.
        cut = max(cut, BlockSelect<kBlock>::select_desc_of_total(V, target_of, z_key, mass, sh.select));
      } else {
        unsigned long long w = 0;
        for (int32_t t = threadIdx.x; t < V; t += kBlock)
          if (z_key(t) >= cut) w += mass(t);
        const unsigned long long target = target_of(block_sum_u64(w, sh));
        if (target > 0) cut = max(cut, BlockSelect<kBlock>::select_desc(V, target, z_key, mass, sh.select));
      }
    }
    const KeptDraw d = draw_kept(V, z_key, cut, m, verifying || job.out.final_ids,
                                 p.seed, step, detail::purpose(detail::Draw::kSampling, pro.position), sh);
    token = d.token;
    kept_sum = d.sum;
    kept_inf = d.n_inf;
    kept = d.kept;
  }

  // Verification: the row verdict; its logprob outputs are those of the token it emits.
  int32_t stop = 1;
  if (verifying && token >= 0) {
    const VerifyJob& v = job.verify;
    const int32_t j = w.j;
    const int64_t d = w.draft0 + j;
    const int32_t dj = j < w.n ? v.draft_tokens[d] : -1;
    auto prob = [&](int32_t t) -> float {  // p_j(t) in fp32, 0 outside the kept set
      const unsigned long long key = z_key(t);
      if (key == 0 || key < cut) return 0.0f;
      if (m == INFINITY) return z[t] == INFINITY ? 1.0f / static_cast<float>(kept_inf) : 0.0f;
      return static_cast<float>(exp(static_cast<double>(z[t]) - static_cast<double>(m)) / kept_sum);
    };
    // Gumbel-max over the kept set with kind-2 noise at `pos`; base score or -inf to leave out.
    auto correction = [&](uint32_t pos, auto&& score_of) {
      const uint32_t purpose_c = detail::purpose(detail::Draw::kCorrection, pos);
      ArgMax local{0.0, -1};
      for (int32_t t = threadIdx.x; t < V; t += kBlock) {
        const unsigned long long key = z_key(t);
        if (key == 0 || key < cut) continue;
        const double sc = score_of(t);
        if (!(sc > -INFINITY)) continue;
        local = better(local, ArgMax{sc + gumbel_exact(p.seed, step, purpose_c, t), t});
      }
      return block_argmax(local, sh).token;
    };
    auto sample_score = [&](int32_t t) -> double {  // z, or the noise alone among +inf scores
      if (m == INFINITY) return z[t] == INFINITY ? 0.0 : -static_cast<double>(INFINITY);
      return static_cast<double>(z[t]);
    };
    if (greedy || w.rule == static_cast<int32_t>(VerifyRule::kStrict)) {
      stop = j == w.n || dj != token;
    } else if (j == w.n) {
      token = correction(static_cast<uint32_t>(j), sample_score);  // the bonus token
    } else if (accepts(p.seed, step, j, prob(dj), draft_prob(v, w.rule, d, dj, dj))) {
      token = dj;
      stop = 0;
    } else {
      const int32_t c = correction(static_cast<uint32_t>(j), [&](int32_t t) -> double {
        const float rr = detail::sub_rn(prob(t), draft_prob(v, w.rule, d, dj, t));
        return rr > 0.0f ? log(static_cast<double>(rr)) : -static_cast<double>(INFINITY);
      });
      token = c >= 0 ? c : correction(static_cast<uint32_t>(j), sample_score);
    }
  }

  // Logprob outputs in the call's mode.
  const RowOutputs& out = job.out;
  if (out.logprob || out.rank || out.top_ids) {
    if (job.mode == LogprobMode::kRaw) {
      write_logprobs(job, r, token, p.top_n, [&](int32_t t) {
        const float x = detail::load_logit(row, job.dtype, t);
        return detail::is_nan(x) ? -INFINITY : x;
      }, sh);
    } else if (job.mode == LogprobMode::kProcessed) {
      write_logprobs(job, r, token, p.top_n, [&](int32_t t) { return z[t]; }, sh);
    } else if (greedy) {
      write_logprobs(job, r, token, p.top_n, [&](int32_t t) { return t == token ? 0.0f : -INFINITY; }, sh);
    } else {
      write_logprobs(job, r, token, p.top_n, [&](int32_t t) {
        const unsigned long long k = z_key(t);
        return k != 0 && k >= cut ? z[t] : -INFINITY;
      }, sh);
    }
  }

  // The sparse final distribution: the kept set in order, when it fits.
  if (out.final_ids) {
    const bool fits = kept <= out.final_capacity;
    if (threadIdx.x == 0) sh.gather_count = 0;
    __syncthreads();
    if (fits && kept > 0)
      for (int32_t t = threadIdx.x; t < V; t += kBlock) {
        const unsigned long long k = z_key(t);
        if (k != 0 && k >= cut) gathered[atomicAdd(&sh.gather_count, 1)] = k;
      }
    __syncthreads();
    int32_t* ids = out.final_ids + r * out.final_stride;
    float* probs = out.final_probs + r * out.final_stride;
    for (int64_t i = threadIdx.x; i < out.final_stride; i += kBlock) {
      ids[i] = -1;
      probs[i] = 0.0f;
    }
    __syncthreads();
    if (fits)
      for (int i = threadIdx.x; i < kept; i += kBlock) {
        const unsigned long long k = gathered[i];
        int pos = 0;
        for (int j = 0; j < kept; ++j) pos += gathered[j] > k;
        const int32_t t = key_token(k);
        ids[pos] = t;
        float prob = 1.0f;
        if (!greedy)
          prob = m == INFINITY ? (z[t] == INFINITY ? 1.0f / static_cast<float>(kept_inf) : 0.0f)
                               : static_cast<float>(exp(static_cast<double>(z[t]) - static_cast<double>(m)) / kept_sum);
        probs[pos] = prob;
      }
    if (threadIdx.x == 0) out.final_count[r] = kept;
  }

  if (threadIdx.x == 0) {
    if (verifying) job.verify.verdicts[r] = RowVerdict{token, stop};
    else out.tokens[r] = token;
    if (out.status) out.status[r] = status;
  }
}

// A split top-k row's last slice: its gathered keys and cut (defined after split_row).
__device__ __forceinline__ bool split_top_k_gather(const RowJob& job, int32_t r, int32_t f, const SlotParams& p,
                                                   float m, unsigned long long hint, unsigned long long* cut,
                                                   int32_t* n_out, unsigned long long* rest, Shared& sh,
                                                   unsigned long long* gathered);

// Split rows. A flagged row costs one block ~10 passes over the row, FP64-bound (a top-p-only flat
// row: 1.3 ms at V = 151936), and a pass that one block makes alone waits a memory latency per
// load. When the call flagged at most one row per SM, S >= 1 blocks take each (S = blocks / rows):
// every block computes, for a slice of the row, z, the fixed-point masses (the double-precision exp,
// the bulk of the work) and each token's screened Gumbel score (the fp32 noise: the Philox words),
// into the row's SplitScratch by the keys' top 12 bits: mass, count and an upper bound of the
// largest screened score. The row's last slice alone then finds the bucket of the cut (where the
// top-p target falls, or min-p's), and in one pass over z gathers that bucket's keys and, from the
// buckets above whose best screened score can reach fast_noise_reach of the kept set's best
// (usually one bucket), the tokens whose own screened score does: the kept set's winner is
// among them (see split_row). It selects the cut in shared memory and draws over the gathered keys
// alone (draw_kept).
// Top-k rows of k <= kSplitGatherKeys are covered too (the list below means larger k): their kept
// set lies among the row's k largest keys, so their last slice gathers every key of the bucket that
// holds the k-th largest (found by the buckets' counts) and of the buckets above, and selects top-k
// (by count), min-p and top-p (by mass, against the slices' exact total for the joint rule) among
// them (split_top_k_gather); their slices skip the noise and the mass histogram. When stage 2 left a
// hint (FastScratch::exact_hints: its sorted prefix's k-th key, which k of the row's keys reach),
// the slices instead list the keys at or above it (SplitList, usually about k of them) and count no
// buckets, and the last slice decides from that list alone: no pass over the row's z (a one-block
// pass over 152 K floats waits a latency a load: about 40 us of a call that flags one top-k row),
// no bucket search, and over at most kRankDecideKeys keys no radix selects (rank_decide_top_k).
// A joint top-p row that stage 2 left only because its crossing lay within the margin also has a
// band (FastScratch::bands, margin_band.cuh): the last slice then takes the token from it and the
// exact total (split_band_token), without reading the list back, ranking it or drawing over it.
// Rows this does not cover (verification, any logprob, rank, top-N or final-distribution output,
// greedy, top-k past kSplitGatherKeys, untruncated, no valid token, a +inf maximum) take exact_row in their first slice's
// block; rows whose gathered keys would pass kSplitGatherKeys, in their last slice's.
// A call that flags more rows than that (and asks for tokens only) gives each row one slice (S = 1):
// block b takes the flagged rows b, b + blocks, ... one after the other, each in scratch slot b,
// which the row's only slice has reset before the next (exact_sample_kernel). At S = 1 a block
// streams its row in batched loads and, once the cut's bucket is known, one gather pass, where
// exact_row makes about 11 dependent passes; the arithmetic is the same at every S.
constexpr int32_t kSplitGatherKeys = 8192;  // keys the last slice gathers into shared memory
constexpr int kSliceLoads = 4;              // logits a slice's thread has in flight
constexpr size_t kSplitSharedBytes = 4 * kSplitBuckets * sizeof(uint32_t);  // a slice's histogram
// The last slice's: the gathered keys, then a byte a bucket (whether its keys are gathered).
constexpr size_t kSplitGatherBytes = kSplitGatherKeys * sizeof(unsigned long long) + kSplitBuckets;

// Whether a call's rows may be split: split_row covers none of a call that asks for logprobs, ranks,
// top-N or final distributions, or verifies (the same for every row of the call).
__device__ __forceinline__ bool split_call(const RowJob& job) {
  const RowOutputs& out = job.out;
  return job.verify.num_requests == 0 && !out.logprob && !out.rank && !out.top_ids && !out.final_ids;
}

// Slot f of the split scratch back to zero for the next call, by the row's last slice once every
// slice has added to it (the callers' barrier before this ends their reads of it): the slot's total,
// slices done and NaN flag, then its buckets (reset_split_slot) or a list row's list (reset_split_list).
__device__ __forceinline__ void reset_split_sums(const SplitSlot& slot) {
  if (threadIdx.x == 0) {
    *slot.total = 0;
    *slot.done = 0;
    *slot.nan = 0;
  }
}
__device__ __forceinline__ void reset_split_slot(const SplitSlot& slot) {
  for (int b = threadIdx.x; b < kSplitBuckets; b += kBlock) {
    slot.mass[b] = 0;
    slot.count[b] = 0;
    slot.best[b] = 0;
  }
  reset_split_sums(slot);
}
// A list row's (split_top_k_gather): only the list's count and the entries it wrote are not zero,
// and a later row of the slot (S = 1) adds its histogram into those words.
__device__ __forceinline__ void reset_split_list(const SplitSlot& slot, uint32_t listed) {
  const SplitList list = slot.list();
  const int32_t used = static_cast<int32_t>(min(listed, static_cast<uint32_t>(kSplitListKeys)));
  for (int32_t i = threadIdx.x; i < used; i += kBlock) list.keys[i] = 0;
  if (threadIdx.x == 0) *list.count = 0;
  reset_split_sums(slot);
}

// The f-th row (0-based) whose exact flag is set, for the whole block.
__device__ int32_t nth_flagged_row(const RowJob& job, int32_t f, Shared& sh) {
  if (threadIdx.x == 0) sh.split_row = -1;
  int32_t seen = 0;
  for (int32_t base = 0; base < job.rows; base += kBlock) {
    const int32_t r = base + threadIdx.x;
    const unsigned long long flag = r < job.rows && __ldcg(job.exact_flags + r) != 0 ? 1ull : 0ull;
    unsigned long long before, round;
    __syncthreads();
    BlockSelect<kBlock>::Scan(sh.select.scan).ExclusiveSum(flag, before, round);
    if (flag && seen + static_cast<int32_t>(before) == f) sh.split_row = r;
    seen += static_cast<int32_t>(round);
  }
  __syncthreads();
  return sh.split_row;
}

// The last slice of a split top-k row with stage 2's hint: the token from the row's band and the
// slices' exact total (margin_band.cuh), or -1 when the band does not decide it (no band, a list
// that is not exactly the row's k keys, or a kept size outside the band). Where it decides, the
// slot's list and sums are reset as split_top_k_gather resets them. The whole block calls it.
__device__ __forceinline__ int32_t split_band_token(const RowJob& job, int32_t r, int32_t f, const SlotParams& p,
                                                    Shared& sh) {
  const SplitSlot scratch = split_slot(job.split, f);
  const SplitList list = scratch.list();
  const uint32_t listed = __ldcg(list.count);
  const unsigned long long row_total = __ldcg(scratch.total);
  const unsigned long long target = top_p_target(p.top_p, static_cast<double>(row_total));
  const int32_t token = listed == static_cast<uint32_t>(p.top_k) ? band_token(job.fast.bands + r, target, p.top_k) : -1;
  if (token < 0) return -1;
  __syncthreads();  // every thread has read the list's count and the total before the reset
  reset_split_list(scratch, listed);
  if (threadIdx.x == 0) atomicAdd(job.split.band_rows, 1ull);
  return token;
}

// Slice s of S of flagged row r, its sums in scratch slot f (f < split.slots; one row at a time:
// the row's last slice resets the slot); see above. True when this block is to take the row by
// exact_row instead (its first slice for a row this does not cover, its last for a crowded one).
//
// Why the gathered keys hold the winner: let F be the best screened score f_t = z_t + G_fast(u_t)
// over the kept set. The exact score of any token is within kFastNoiseSlack of f_t (and the adds'
// roundings), so a token with f_t < fast_noise_reach(F) can neither win nor tie (the token at F
// scores above it). Every bucket above the cut's is kept whole; its bound hi_b >= max f_t there,
// and lb = the next float below the largest hi_b is <= F. A bucket with hi_b < reach(lb) <=
// reach(F) holds only such tokens, and so does any token with f_t < reach(lb): gathering the cut's
// bucket and the other buckets' tokens at or above reach(lb) leaves out no token that can win, and
// F itself is among them: draw_kept over them draws the kept set's token.
__device__ __forceinline__ bool split_row(const RowJob& job, int32_t r, int32_t f, int32_t s, int32_t S, Shared& sh,
                                          unsigned long long* gathered) {
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const RowOutputs& out = job.out;
  int32_t slot = -1;
  const int32_t* mask = nullptr;
  VerifyRow w;
  bool covered = split_call(job) && resolve_call_row(job, r, &slot, &mask, &w) == kRowOk;
  RowPrologue pro;
  if (covered) {
    pro = call_row_prologue(job, slot, mask, w);
    const SlotParams& p = pro.p;
    const bool top_k_on = detail::top_k_cuts(p.top_k, V);
    covered = !pro.greedy && (top_k_on ? p.top_k <= kSplitGatherKeys : p.top_p < 1.0f || p.min_p > 0.0f);
  }
  // The row's maximum z from stage 1's chunk statistics (keys of x after steps 1-4, the same code
  // as pro.apply's; the temperature keeps their order), so that the masses need no pass of their own.
  unsigned long long max_key = 0;
  if (covered && static_cast<int32_t>(threadIdx.x) < job.fast.chunks)
    max_key = __ldcg(&job.fast.stats[static_cast<int64_t>(r) * job.fast.chunks + threadIdx.x].max_key);
  max_key = block_max_u64(max_key, sh);  // uniform: every block of the row gets the same
  if (!covered || max_key == 0) return s == 0;
  const float m = detail::apply_temperature(detail::key_value(max_key), pro.p.temperature);
  if (!(m > -INFINITY) || m == INFINITY) return s == 0;
  const SlotParams& p = pro.p;
  const double md = m;
  const bool joint = p.flags & kSlotTopPJoint;
  const float min_z = p.min_p > 0.0f ? min_p_threshold(m, p.min_p) : -INFINITY;
  // min-p's cut (every valid token without min-p): tokens below it are never kept.
  unsigned long long cut = every_valid_cut();
  if (p.min_p > 0.0f) cut = max(cut, threshold_cut(min_z));
  auto mass_of = [&](float zt) { return fixed_mass(zt, md); };  // zt > -inf
  // Top-k rows: the last slice selects among the k largest keys (split_top_k_gather); the slices
  // count keys by bucket and sum the exact total only where the joint rule measures against it.
  const bool top_k_row = detail::top_k_cuts(p.top_k, V);
  const bool slice_mass = !top_k_row || (joint && p.top_p < 1.0f);
  // A top-k row's hint from stage 2 (0: none): the slices list the keys at or above it (SplitList),
  // and that list alone decides the row (split_top_k_gather), so they count no buckets.
  const unsigned long long hint = top_k_row && job.fast.exact_hints ? __ldcg(job.fast.exact_hints + r) : 0ull;
  const bool buckets = !hint;
  const uint64_t seed = p.seed, step = tab.step[slot];
  const uint32_t purpose = detail::purpose(detail::Draw::kSampling, pro.position);
  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  float* z = job.z + static_cast<int64_t>(r) * V;
  timeline_mark(kMarkScreening);
  const SplitSlot scratch = split_slot(job.split, f);
  const SplitList list = scratch.list();

  // This slice: z, and by bucket the masses (64-bit, as two 32-bit words), the counts and the
  // largest screened score rounded up (order bits; 0: none), then added to the row's.
  uint32_t* h_lo = reinterpret_cast<uint32_t*>(gathered);
  uint32_t* h_hi = h_lo + kSplitBuckets;
  uint32_t* h_n = h_hi + kSplitBuckets;
  uint32_t* h_best = h_n + kSplitBuckets;
  if (buckets)
    for (int i = threadIdx.x; i < 4 * kSplitBuckets; i += kBlock) h_lo[i] = 0;
  __syncthreads();
  const int32_t per = (V + S - 1) / S;
  const int32_t lo = s * per, hi = min(V, lo + per);
  unsigned long long total = 0;  // the mass top-p measures: every valid token's (joint) or min-p's survivors'
  int nan_seen = 0;
  // kSliceLoads logits a thread in flight: a loop of one load and ~150 instructions a token waits
  // out a memory latency each iteration (at S = 1 a block streams a whole row: 386 us at B = 128).
  const int32_t n_slice = hi - lo;  // <= 0: a slice past the row's end
  block_pass<kBlock, kSliceLoads>(n_slice, 0.0f, [&](int32_t i) { return detail::load_logit(row, job.dtype, lo + i); },
                                  [&](int32_t i, float x) {
    if (i >= n_slice) return;
    const int32_t t = lo + i;
    const float zt = store_z_of(job, pro, t, x, z, &nan_seen);
    if (!(zt > -INFINITY)) return;
    const unsigned long long key = pack_key(zt, t);
    const int b = static_cast<int>(key >> 52);
    if (buckets) atomicAdd(&h_n[b], 1u);
    if (hint && key >= hint) {
      const uint32_t i = atomicAdd(list.count, 1u);
      if (i < kSplitListKeys) list.keys[i] = key;
    }
    const bool survives = zt >= min_z;
    if (slice_mass) {
      const unsigned long long wt = mass_of(zt);
      if (!top_k_row) add_split_u64(h_lo, h_hi, b, wt);
      if (joint || survives) total += wt;
    }
    if (survives && !top_k_row) {  // (only the buckets above the cut's read the bound: all their tokens survive)
      const float g = gumbel_fast(seed, step, purpose, t);
      atomicMax(&h_best[b], detail::order_bits(__fadd_ru(zt, g)));  // >= the double sum draw_kept forms
    }
  });
  // Every thread's z and bucket sums are published by thread 0's count below: the barriers order
  // them before that release, which is cumulative (dependent_launch.cuh, count_release).
  nan_seen = __syncthreads_or(nan_seen);
  for (int b = threadIdx.x; buckets && b < kSplitBuckets; b += kBlock)
    if (h_n[b]) {
      if (!top_k_row) atomicAdd(&scratch.mass[b], static_cast<unsigned long long>(h_hi[b]) << 32 | h_lo[b]);  // (none summed)
      atomicAdd(&scratch.count[b], h_n[b]);
      if (h_best[b]) atomicMax(&scratch.best[b], h_best[b]);
    }
  total = block_sum_u64(total, sh);
  if (threadIdx.x == 0) {
    atomicAdd(scratch.total, total);
    if (nan_seen) atomicOr(scratch.nan, 1);
    // This slice's z and sums before its count; the last slice acquires the others'.
    sh.split_last = count_release_completes(scratch.done, 1, S);
  }
  __syncthreads();
  timeline_mark(kMarkChunkDone);
  if (!sh.split_last) return false;  // the row's last slice goes on alone
  const int32_t row_nan = __ldcg(scratch.nan);
  // The gathered keys: gathered[0, n_front) (the cut's bucket, or a top-k row's buckets) and
  // gathered[kSplitGatherKeys - n_back, kSplitGatherKeys) (near-best tokens above the cut's bucket);
  // rest: top-p's mass to reach within the front keys (0: none).
  int32_t n_front = 0, n_back = 0;
  unsigned long long rest = 0;
  if (top_k_row) {
    // A band is only written for joint top-p rows without min-p (stage2_row), whose kept set is the
    // first c of the k keys.
    if (hint && job.fast.bands && joint && p.top_p < 1.0f && !(p.min_p > 0.0f)) {
      const int32_t token = split_band_token(job, r, f, p, sh);
      if (token >= 0) {
        timeline_mark(kMarkSampled);
        if (threadIdx.x == 0) {
          out.tokens[r] = token;
          if (out.status) out.status[r] = row_nan ? kStatusNaN : 0;
        }
        return false;
      }
    }
    if (split_top_k_gather(job, r, f, p, m, hint, &cut, &n_front, &rest, sh, gathered)) return true;
  } else {
    // The bucket where the cumulative mass reaches top-p's target (-1: none).
    unsigned long long target = 0;
    if (threadIdx.x == 0) sh.split_bucket = -1;
    if (p.top_p < 1.0f) {
      target = top_p_target(p.top_p, static_cast<double>(__ldcg(scratch.total)));
      __syncthreads();
      if (target > 0)
        BlockSelect<kBlock>::crossing_bucket<kSplitBuckets>([&](int b) { return __ldcg(&scratch.mass[b]); }, target,
                                                            sh.select, &sh.split_bucket, &sh.split_above);
    }
    __syncthreads();
    const int b_p = sh.split_bucket;  // -1: no top-p, target 0, or rounding left it above the total
    const int b_c = max(static_cast<int>(cut >> 52), b_p);  // the cut's bucket; those above are kept whole

    // The buckets above b_c to gather: hi_b >= fast_noise_reach(lb) (lb: the next float below the largest).
    uint32_t lb = 0;
    for (int b = b_c + 1 + threadIdx.x; b < kSplitBuckets; b += kBlock) {
      const uint32_t hb = __ldcg(&scratch.best[b]);
      if (hb) lb = max(lb, detail::order_bits(nextafterf(detail::order_bits_to_float(hb), -INFINITY)));
    }
    lb = static_cast<uint32_t>(block_max_u64(lb, sh));
    const double reach = lb ? fast_noise_reach(static_cast<double>(detail::order_bits_to_float(lb)))
                            : static_cast<double>(INFINITY);
    // gathered[0, kSplitGatherKeys) lies over the slice's histogram (flushed); `take` just beyond it.
    uint8_t* take = reinterpret_cast<uint8_t*>(gathered + kSplitGatherKeys);
    for (int b = threadIdx.x; b < kSplitBuckets; b += kBlock) {
      const uint32_t hb = b > b_c ? __ldcg(&scratch.best[b]) : 0u;
      take[b] = hb && static_cast<double>(detail::order_bits_to_float(hb)) >= reach;
    }
    const int32_t n_cut = static_cast<int32_t>(__ldcg(&scratch.count[b_c]));
    rest = b_p == b_c ? target - sh.split_above : 0;  // top-p's mass left in b_c
    const bool fits = n_cut <= kSplitGatherKeys;
    __syncthreads();
    reset_split_slot(scratch);
    timeline_mark(kMarkMerged);
    if (!fits) return true;  // a plateau crowds the gathered buckets: the one-block path

    // One pass over z: b_c's keys (n_cut) from the front of `gathered`; from the back, the taken
    // buckets' tokens whose screened score reaches `reach` (draw_kept's formula), while room is left.
    if (threadIdx.x == 0) sh.gather_count = sh.split_back = 0;
    __syncthreads();
    const int32_t room = kSplitGatherKeys - n_cut;
    block_pass<kBlock, 8>(V, -INFINITY, [&](int32_t t) { return __ldcg(z + t); }, [&](int32_t t, float zt) {
      if (!(zt > -INFINITY)) return;
      const unsigned long long k = pack_key(zt, t);
      const int b = static_cast<int>(k >> 52);
      if (b == b_c) {
        gathered[atomicAdd(&sh.gather_count, 1)] = k;
      } else if (b > b_c && take[b]) {
        const float g = gumbel_fast(seed, step, purpose, t);
        if (static_cast<double>(zt) + static_cast<double>(g) >= reach) {
          const int32_t i = atomicAdd(&sh.split_back, 1);
          if (i < room) gathered[kSplitGatherKeys - 1 - i] = k;
        }
      }
    });
    __syncthreads();
    n_front = sh.gather_count;
    n_back = sh.split_back;
    timeline_mark(kMarkListed);
    if (n_back > room) return true;  // more near-best tokens than room: the one-block path
  }
  // Top-p's cut within b_c: the largest key whose mass at or above it, with the buckets above,
  // reaches the target (a top-k row's: over its gathered keys, which every key above the cut joins).
  if (rest > 0)
    cut = max(cut, BlockSelect<kBlock>::select_desc(
                       n_front, rest, [&](int32_t i) { return gathered[i]; },
                       [&](int32_t i) { return mass_of(detail::key_value(gathered[i])); }, sh.select));
  timeline_mark(kMarkDecided);
  // (A top-k row's keys are all at the front: the draw walks only those.)
  const KeptDraw d = draw_kept(top_k_row ? n_front : kSplitGatherKeys, [&](int32_t i) {
    return i < n_front || i >= kSplitGatherKeys - n_back ? gathered[i] : 0ull;
  }, cut, m, false, seed, step, purpose, sh);
  timeline_mark(kMarkSampled);
  if (threadIdx.x == 0) {
    out.tokens[r] = d.token;
    if (out.status) out.status[r] = row_nan ? kStatusNaN : 0;
  }
  return false;
}

// The cuts of a split top-k row over its n <= kRankDecideKeys gathered keys (an upper set of the
// row's keys that holds its k-th largest, k = 0 when k does not bind), as split_top_k_gather's
// selects and split_row's top-p select make them: c_k the key of rank k - 1, top-p's target against
// the row's total (joint) or the mass at or above the cut, c_p the largest key whose mass at or
// above reaches it. Each thread ranks its keys against all n and sums the masses above them, from
// shared memory (n^2 / kBlock steps), in place of the radix selects' passes, which recompute a
// double exp a key a pass (v3.34 call 5: 15.5 us to decide over about a hundred keys).
constexpr int32_t kRankDecideKeys = 2 * kBlock;
__device__ __forceinline__ void rank_decide_top_k(int32_t n, unsigned long long k, const SlotParams& p, float m,
                                                  unsigned long long row_total, unsigned long long* cut, Shared& sh,
                                                  unsigned long long* gathered) {
  constexpr int kPer = kRankDecideKeys / kBlock;
  unsigned long long* mass = gathered + kSplitGatherKeys / 2;  // past the keys (n <= kSplitGatherKeys / 2)
  for (int32_t i = threadIdx.x; i < n; i += kBlock)
    mass[i] = fixed_mass(detail::key_value(gathered[i]), static_cast<double>(m));
  __syncthreads();
  timeline_mark(kMarkThreshold);
  unsigned long long key[kPer], own[kPer], above[kPer];
  uint32_t rank[kPer];
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int32_t i = static_cast<int32_t>(threadIdx.x) + q * kBlock;
    key[q] = i < n ? gathered[i] : 0ull;  // 0: no key (below every key)
    own[q] = i < n ? mass[i] : 0ull;
    above[q] = 0;
    rank[q] = 0;
  }
  // Only the threads that hold keys rank them (a list is usually about k keys: a few warps), and
  // their second keys only when there are any.
  const bool wide = n > kBlock;
  if (static_cast<int32_t>(threadIdx.x) < n)
    for (int32_t j = 0; j < n; ++j) {
      const unsigned long long kj = gathered[j], wj = mass[j];
#pragma unroll
      for (int q = 0; q < kPer; ++q)
        if ((q == 0 || wide) && kj > key[q]) {
          ++rank[q];
          above[q] += wj;
        }
    }
  timeline_mark(kMarkStaged);
  // Step 7: the key of rank k - 1 (n >= k when k binds: the keys are distinct).
  if (k > 0) {
    unsigned long long c_k = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q)
      if (key[q] && rank[q] == k - 1) c_k = key[q];
    *cut = max(*cut, block_max_u64(c_k, sh));
  }
  timeline_mark(kMarkGathered);
  // Step 8 (exact_row's rules): the target against the row's total (joint) or the survivors' mass.
  if (p.top_p < 1.0f) {
    const bool joint = p.flags & kSlotTopPJoint;
    unsigned long long g = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q)
      if (key[q] && (joint || key[q] >= *cut)) g += own[q];
    g = block_sum_u64(g, sh);
    const double total = static_cast<double>(joint ? row_total : g);
    const unsigned long long target = top_p_target(p.top_p, total);
    // Joint, a target above g: the crossing lies below every gathered key, so under the cut.
    if (target > 0 && target <= g) {
      unsigned long long c_p = 0;
#pragma unroll
      for (int q = 0; q < kPer; ++q)
        if (key[q] && above[q] + own[q] >= target) c_p = max(c_p, key[q]);
      *cut = max(*cut, block_max_u64(c_p, sh));
    }
  }
}

// The last slice of a split top-k row (split_row: every slice has added its bucket counts and, for
// the joint rule, its exact total). exact_row's kept set is {key >= max(c_minp, c_k, c_p)}: c_minp
// min-p's cut (*cut on entry), c_k the k-th largest valid key when the row has more than k (when
// min-p binds harder, c_k < c_minp or {key >= c_k} is min-p's set: the same set), c_p the largest
// key whose fixed mass at or above reaches ceil(top_p x total), the total being every valid
// token's (joint, or nothing else cuts) or the mass of {key >= max(c_minp, c_k)} (sequential). The
// bucket b_k that holds the k-th largest key bounds them all from below, except a c_p below it,
// which then does not cut past c_k. So the keys of b_k and of the buckets above (fewer than k above,
// plus b_k's) are all the cut needs: over them, the mass at or above any of their keys is the whole
// row's. A row of at most k valid keys gathers every valid key. The masses are the same fixed-point
// integers, so the cut is exact_row's, and draw_kept over the gathered keys with it is its draw.
// A row with a hint (split_row) takes its keys from the slices' list (SplitList) instead, which
// then holds every key at or above the k-th largest (below), such an upper set too; its slices
// counted no buckets. Gathers the keys into gathered[0, *n), applies top-k to *cut and sets *rest to
// top-p's target when the crossing lies among them (0: top-p does not cut past *cut). True when
// exact_row is to take the row: a crowded b_k (past kSplitGatherKeys keys) or a list that fails.
__device__ __forceinline__ bool split_top_k_gather(const RowJob& job, int32_t r, int32_t f, const SlotParams& p,
                                                   float m, unsigned long long hint, unsigned long long* cut,
                                                   int32_t* n_out, unsigned long long* rest, Shared& sh,
                                                   unsigned long long* gathered) {
  const unsigned long long k = static_cast<unsigned long long>(p.top_k);
  const SplitSlot scratch = split_slot(job.split, f);
  const unsigned long long row_total = __ldcg(scratch.total);  // every valid token's (joint top-p only)
  bool k_binds = true;
  int32_t n = 0;
  if (hint) {
    // Each slice lists a token once, so the list's count is the row's number of keys at or above the
    // hint. When that is at least k, the k-th largest key reaches the hint, and the list holds it and
    // every key above. Stage 2's hint is its prefix's k-th key (k <= kGatherCap <= kSplitListKeys), so
    // the count is exactly k whenever both paths form the same z, as they follow the same rules: the
    // fallback below only guards against their disagreeing, and no test can reach it.
    const SplitList list = scratch.list();
    const uint32_t listed = __ldcg(list.count);
    const bool from_list = listed >= k && listed <= static_cast<uint32_t>(kSplitListKeys);
    if (from_list) {
      n = static_cast<int32_t>(listed);
      for (int32_t i = threadIdx.x; i < n; i += kBlock) gathered[i] = __ldcg(list.keys + i);
    }
    __syncthreads();  // the list read before its reset
    reset_split_list(scratch, listed);
    timeline_mark(kMarkMerged);
    if (!from_list) return true;
    if (threadIdx.x == 0) atomicAdd(job.split.list_rows, 1ull);
  } else {
    const int32_t V = job.table.vocab_size;
    // The bucket of the k-th largest valid key by the buckets' counts, and the keys above it (none
    // found: at most k - 1 valid keys, all gathered from bucket 0 up).
    if (threadIdx.x == 0) {
      sh.split_bucket = -1;
      sh.split_above = 0;
      sh.gather_count = 0;
    }
    __syncthreads();
    BlockSelect<kBlock>::crossing_bucket<kSplitBuckets>(
        [&](int b) { return static_cast<unsigned long long>(__ldcg(&scratch.count[b])); }, k, sh.select,
        &sh.split_bucket, &sh.split_above);
    __syncthreads();
    k_binds = sh.split_bucket >= 0;
    const int b_k = k_binds ? sh.split_bucket : 0;
    const bool fits =
        !k_binds || sh.split_above + __ldcg(&scratch.count[b_k]) <= static_cast<unsigned long long>(kSplitGatherKeys);
    __syncthreads();  // the counts read before the slot's reset
    reset_split_slot(scratch);
    timeline_mark(kMarkMerged);
    if (!fits) return true;  // a plateau crowds b_k: the one-block path
    // One pass over z: every valid key in b_k and above.
    const float* z = job.z + static_cast<int64_t>(r) * V;
    block_pass<kBlock, 8>(V, -INFINITY, [&](int32_t t) { return __ldcg(z + t); }, [&](int32_t t, float zt) {
      if (!(zt > -INFINITY)) return;
      const unsigned long long key = pack_key(zt, t);
      if (static_cast<int>(key >> 52) >= b_k) {
        const int32_t i = atomicAdd(&sh.gather_count, 1);
        if (i < kSplitGatherKeys) gathered[i] = key;  // (the counts bound i: a guard only)
      }
    });
    __syncthreads();
    n = min(sh.gather_count, kSplitGatherKeys);
  }
  timeline_mark(kMarkListed);
  if (n <= kRankDecideKeys) {
    rank_decide_top_k(n, k_binds ? k : 0ull, p, m, row_total, cut, sh, gathered);
    *rest = 0;
    *n_out = n;
    return false;
  }
  // Step 7: the k-th largest key (n >= k when it binds).
  if (k_binds)
    *cut = max(*cut, BlockSelect<kBlock>::select_desc(n, k, [&](int32_t i) { return gathered[i]; },
                                                      [](int32_t) { return 1ull; }, sh.select));
  // Step 8's target (exact_row's rules): against the row's total (joint) or the survivors' mass.
  *rest = 0;
  if (p.top_p < 1.0f) {
    // The mass of the gathered keys (joint) or of those at or above the cut (sequential: the total).
    const bool joint = p.flags & kSlotTopPJoint;
    unsigned long long g = 0;
    for (int32_t i = threadIdx.x; i < n; i += kBlock)
      if (joint || gathered[i] >= *cut) g += fixed_mass(detail::key_value(gathered[i]), static_cast<double>(m));
    g = block_sum_u64(g, sh);
    const double total = static_cast<double>(joint ? row_total : g);
    const unsigned long long target = top_p_target(p.top_p, total);
    // Joint, a target above g: the crossing lies below every gathered key, so under the cut.
    if (target <= g) *rest = target;
  }
  *n_out = n;
  return false;
}

// Grid-stride over the rows. When the fast kernel flagged no row (the common case), nothing reads the
// request table any more, so every block commits its share at once; otherwise the flagged rows take
// the exact path and the last block to finish commits every row.
__global__ void __launch_bounds__(kBlock) exact_sample_kernel(RowJob job) {
  __shared__ Shared sh;
  __shared__ int last;
  extern __shared__ unsigned long long gathered[];  // final distribution, final_capacity keys
  // The thread's first row to commit when nothing is flagged, resolved while the kernel before runs.
  const int32_t r0 = blockIdx.x * kBlock + threadIdx.x;
  const CommitRow row0 = resolve_commit_row(job, r0);
  // Launched as a programmatic dependent of the kernel before it (fast or row stage 2): wait until
  // that grid has completed and its writes are visible (a no-op for a plain launch).
  wait_for_prerequisite_grid();
  timeline_enter();
  // Its token beside the flag: the commit of a small call waits on one round trip here, not on the
  // flag, then the row's slot and parameters, then the token (v3.8's timeline: 1.4 us a commit). In
  // a call that flagged rows the value is thrown away (the exact path may still rewrite it).
  const int32_t token0 = row0.ok ? load_cg_now(job.out.tokens + r0) : -1;
  if (job.exact_flags && __ldcg(job.fast.flagged) == 0) {
    commit_rows(job, r0, gridDim.x * kBlock, &row0, token0);
    timeline_mark(kMarkExit);
    return;
  }
  const int32_t flagged = job.exact_flags ? __ldcg(job.fast.flagged) : 0;
  const int32_t blocks = static_cast<int32_t>(gridDim.x), b = static_cast<int32_t>(blockIdx.x);
  // Split across blocks (at most split.rows flagged, so S = blocks / flagged >= 1): block b takes
  // slice b % S of the (b / S)-th flagged row, one item, in scratch slot b / S.
  const int32_t spread_S = flagged > 0 ? blocks / flagged : 1;
  const bool spread = spread_S >= 1 && flagged <= job.split.rows;
  // One slice a row (more flagged rows, a call whose rows split_row may cover, a slot a block): block
  // b takes the flagged rows b, b + blocks, ... whole (S = 1), one after the other, in slot b.
  const bool whole = !spread && blocks <= job.split.slots && split_call(job);
  // Otherwise a grid-stride over the rows by exact_row. One call site of exact_row, so that it is
  // inlined once.
  const bool split = spread || whole;
  const int32_t S = spread ? spread_S : 1;  // blocks a flagged row
  const int32_t end = split ? flagged : job.rows, stride = spread ? flagged : blocks;
  for (int32_t i = spread ? b / S : b; i < end; i += stride) {
    const int32_t r = split ? nth_flagged_row(job, i, sh) : i;
    if (r >= 0 && (!split || split_row(job, r, spread ? i : b, b % S, S, sh, gathered)))
      exact_row(job, r, sh, gathered);
    __syncthreads();  // the next row reuses the shared memory (and, whole, the scratch slot)
  }
  if (threadIdx.x == 0) {
    last = count_release_completes(job.fast.rows_done, 1, static_cast<int32_t>(gridDim.x));
    if (last) {
      *job.fast.rows_done = 0;
      *job.fast.flagged = 0;
    }
  }
  __syncthreads();
  if (last) commit_rows(job, threadIdx.x, kBlock);
  timeline_mark(kMarkExit);
}

}  // namespace

#if SONIC_TIMELINE
int read_exact_timeline(unsigned long long* out, int blocks) { return read_timeline_table(out, blocks); }
#endif

namespace {
// The most dynamic shared memory the device gives a block of the exact kernel beside its static share.
int exact_sample_dynamic_bytes(int device) {
  int optin = 0;
  SONIC_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attr{};
  SONIC_CUDA_CHECK(cudaFuncGetAttributes(&attr, exact_sample_kernel));
  return optin - static_cast<int>(attr.sharedSizeBytes);
}
}  // namespace

void prepare_exact_sample(int device) {
  // A cap, not a reservation, so one setting serves every sampler on the device whatever its sizes.
  SONIC_CUDA_CHECK(cudaFuncSetAttribute(exact_sample_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        exact_sample_dynamic_bytes(device)));
}

int64_t exact_sample_final_capacity(int device) { return exact_sample_dynamic_bytes(device) / 8; }

void set_exact_sample_carveout(int percent) {
  SONIC_CUDA_CHECK(cudaFuncSetAttribute(exact_sample_kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

void launch_exact_sample(const RowJob& job, int32_t max_blocks, bool programmatic, cudaStream_t stream) {
  // A verification call whose requests name no rows still writes their outputs (the commit).
  if (job.rows == 0 && job.verify.num_requests == 0) return;
  size_t smem = job.out.final_ids ? static_cast<size_t>(job.out.final_capacity) * 8 : 0;
  if (job.split.rows > 0) smem = std::max(smem, std::max(kSplitSharedBytes, kSplitGatherBytes));
  // At least split.rows blocks (those beyond the rows only commit when nothing is flagged), so that
  // a small batch's flagged rows are split across them; a call that flags more rows gives a block
  // its own scratch slot when max_blocks <= split.slots (the backend sizes them so), else exact_row.
  const int32_t want = std::max(job.rows, job.split.rows);
  const int32_t blocks = want < max_blocks ? want : max_blocks;
  // Programmatic dependent launch: the launch overlaps the last stage-2 blocks of the kernel before.
  launch_dependent(exact_sample_kernel, dim3(blocks), dim3(kBlock), smem, programmatic, stream, job);
}

}  // namespace sonic::cuda
