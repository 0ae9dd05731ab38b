// Stage 1 of the fast path for one (tile, row): each warp of the block on its own 1024 tokens (32 a
// lane, see LaneLayout). Per warp, with no block barrier:
//   - the logits after SPEC.md section 2 steps 1-4 (x), their largest key, the valid count, NaN;
//   - truncated random rows: each lane's three largest keys and a bound just above its fourth value;
//     the warp's bound is the largest lane bound, so every token that is not among its lane's three
//     lies below it. A row's kept set escapes the candidates only when four of its tokens share a
//     lane (32 tokens): about 2e-6 of rows for top-k 50 on i.i.d. logits, against 1e-3 with two a
//     lane, which the first GPU runs showed as whole calls sent to the exact path. Temperature
//     divides every x by the same T > 0, which keeps their order, so the screen works on x and
//     stage 2 divides only the keys it keeps;
//   - untruncated random rows: the warp's Gumbel-max winner (fast fp32 noise, SPEC.md section 4);
//   - sums of exp for top-p mass and logprobs, only where the row needs them.
// Then the block keeps the lanes' keys at or above the largest warp bound (the tile's bound), appends
// them to the row's candidate list and writes its TileStat; the last tile of a row runs stage 2.
#pragma once

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/arg_max.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/tile_loader.cuh"

namespace sonic::cuda {

// What a row needs from the fast path, fixed before the tokens (uniform over the row).
struct RowKind {
  bool truncated;    // random with min-p, top-k or top-p
  bool untruncated;  // random without any of them
  bool need_sum;     // sum of exp((x - max) / T) over the row: top-p mass on all tokens, logprobs
  bool need_raw;     // raw logprob mode: max and sum of exp over the input logits
  float inv_t;       // 1 / T for the sums (greedy rows: T = 1)
};

__device__ __forceinline__ RowKind row_kind(const RowPrologue& pro, const RowJob& job, int32_t V) {
  const SlotParams& p = pro.p;
  const bool top_k_on = p.top_k > 0 && p.top_k < V;
  RowKind k;
  k.truncated = !pro.greedy && (top_k_on || p.top_p < 1.0f || p.min_p > 0.0f);
  k.untruncated = !pro.greedy && !k.truncated;
  const bool want_lp = job.out.logprob != nullptr;
  k.need_sum = (k.truncated && p.top_p < 1.0f && ((p.flags & kSlotTopPJoint) || (!top_k_on && p.min_p <= 0.0f))) ||
               (want_lp && job.mode != LogprobMode::kRaw);
  k.need_raw = want_lp && job.mode == LogprobMode::kRaw;
  k.inv_t = pro.greedy ? 1.0f : 1.0f / p.temperature;
  return k;
}

__device__ __forceinline__ unsigned long long warp_max_u64(unsigned long long v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warp_max_f32(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
  return v;
}
__device__ __forceinline__ float warp_sum_f32(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ int warp_sum_i32(int v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}
__device__ __forceinline__ ArgMaxF warp_best(ArgMaxF v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const ArgMaxF w{__shfl_xor_sync(0xFFFFFFFFu, v.score, o), __shfl_xor_sync(0xFFFFFFFFu, v.token, o)};
    v = better(v, w);
  }
  return v;
}

// One warp's results, combined by the block into its TileStat.
struct WarpSummary {
  unsigned long long max_key;
  unsigned long long bound;
  float sum;
  float raw_max;
  float raw_sum;
  ArgMaxF win;
  int32_t valid;
  int32_t nan;
};

struct Stage1Shared {
  WarpSummary warp[kFastWarps];
};

// Keys at or above a bound: the 0 key (no token) never is.
__device__ __forceinline__ bool kept_by(unsigned long long key, unsigned long long bound) {
  return key != 0 && key >= bound;
}

// Stage 1 for tile `tile` of row r. Returns true (in every thread) in the row's last block to finish.
// x: the lane's logits as LaneLayout<D> places them, -inf past V.
template <DType D>
__device__ bool stage1_tile(const RowJob& job, int32_t r, int32_t tile, int32_t slot, const RowPrologue& pro,
                            const RowKind& k, float (&x)[kLaneTokens], Stage1Shared& sh, int* last_flag) {
  using L = LaneLayout<D>;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int32_t warp_base = tile * kTile + warp * kWarpTokens;
  // NaN stays in x: every comparison below is false for it (never valid, never a candidate), the
  // rules turn it into -inf, and the sums skip it.
  bool nan = false;
#pragma unroll
  for (int i = 0; i < kLaneTokens; ++i) nan |= detail::is_nan(x[i]);

  WarpSummary s;
  s.raw_max = -INFINITY;
  s.raw_sum = 0.0f;
  if (k.need_raw) {  // the input logits, before any rule
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kLaneTokens; ++i) m = fmaxf(m, x[i]);
    m = warp_max_f32(m);
    float sum = 0.0f;
    if (m > -INFINITY && m < INFINITY) {
#pragma unroll
      for (int i = 0; i < kLaneTokens; ++i) sum += x[i] > -INFINITY ? __expf(x[i] - m) : 0.0f;
    }
    s.raw_max = m;
    s.raw_sum = warp_sum_f32(sum);
  }
  if (pro.has_rules) {
#pragma unroll
    for (int i = 0; i < kLaneTokens; ++i) {
      const int32_t t = L::token(warp_base, lane, i);
      if (t < V) x[i] = pro.rules(tab, t, x[i]);
    }
  }
  int valid = 0;
#pragma unroll
  for (int i = 0; i < kLaneTokens; ++i) valid += x[i] > -INFINITY;

  // The lane's largest key; for truncated rows also its second and third, and a bound above its
  // fourth value: the lane keeps three candidates, and everything else it holds lies below the bound.
  unsigned long long k1 = 0, k2 = 0, k3 = 0, lane_bound = 0;
  {
    float v1 = -INFINITY, v2 = -INFINITY, v3 = -INFINITY, v4 = -INFINITY;
    int i1 = 0, i2 = 0, i3 = 0;
    if (k.truncated) {
      // Registers come in increasing token order, so strict comparisons keep the lower id on ties.
#pragma unroll
      for (int i = 0; i < kLaneTokens; ++i) {
        const float v = x[i];
        const bool p1 = v > v1, p2 = v > v2, p3 = v > v3, p4 = v > v4;
        v4 = p3 ? v3 : (p4 ? v : v4);
        v3 = p2 ? v2 : (p3 ? v : v3);
        i3 = p2 ? i2 : (p3 ? i : i3);
        v2 = p1 ? v1 : (p2 ? v : v2);
        i2 = p1 ? i1 : (p2 ? i : i2);
        v1 = p1 ? v : v1;
        i1 = p1 ? i : i1;
      }
      // The smallest key whose value exceeds v4 (the fourth value and any tie of it lie below).
      if (v4 > -INFINITY) lane_bound = (static_cast<unsigned long long>(detail::order_bits(v4)) + 1ull) << 32;
      if (v3 > -INFINITY) k3 = detail::pack_key(v3, L::token(warp_base, lane, i3));
    } else {
#pragma unroll
      for (int i = 0; i < kLaneTokens; ++i)
        if (x[i] > v1) {
          v1 = x[i];
          i1 = i;
        }
    }
    if (v1 > -INFINITY) k1 = detail::pack_key(v1, L::token(warp_base, lane, i1));
    if (v2 > -INFINITY) k2 = detail::pack_key(v2, L::token(warp_base, lane, i2));
  }
  s.max_key = warp_max_u64(k1);
  s.bound = k.truncated ? warp_max_u64(lane_bound) : 0;
  s.valid = warp_sum_i32(valid);
  s.nan = __any_sync(0xFFFFFFFFu, nan);
  const float wm = s.max_key ? detail::key_value(s.max_key) : -INFINITY;  // warp max of x
  const bool finite_max = wm > -INFINITY && wm < INFINITY;

  s.sum = 0.0f;
  if (k.need_sum && finite_max) {
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < kLaneTokens; ++i) sum += x[i] > -INFINITY ? __expf((x[i] - wm) * k.inv_t) : 0.0f;
    s.sum = warp_sum_f32(sum);
  }

  s.win = ArgMaxF{0.0f, -1};
  if (k.untruncated && finite_max) {
    // Gumbel-max over the warp's tokens within reach of its maximum: one Philox block a group of
    // 4 consecutive ids (counter t / 4). G lies in [-2.812, 22.874], so a token more than 25.7
    // below the maximum never wins.
    const float T = pro.p.temperature;
    const float reach = detail::apply_temperature(wm, T) - 25.7f;
    const uint32_t purpose = detail::purpose(detail::Draw::kSampling, pro.position);
    const uint64_t step = tab.step[slot];
    ArgMaxF win{0.0f, -1};
#pragma unroll
    for (int g = 0; g < kLaneTokens / 4; ++g) {
      float z[4];
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        z[j] = detail::apply_temperature(x[4 * g + j], T);
        any |= z[j] >= reach;
      }
      if (!any) continue;
      const int32_t t0 = L::token(warp_base, lane, 4 * g);
      const detail::Philox4 words = detail::random_block(pro.p.seed, step, purpose, static_cast<uint32_t>(t0) >> 2);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (z[j] >= reach)
          win = better(win, ArgMaxF{z[j] + detail::gumbel_from_uniform_fast(detail::uniform_from_word(words.v[j])), t0 + j});
    }
    s.win = warp_best(win);
  }
  if (lane == 0) sh.warp[warp] = s;
  __syncthreads();

  unsigned long long tile_bound = 0;
  if (k.truncated) {
#pragma unroll
    for (int w = 0; w < kFastWarps; ++w) tile_bound = max(tile_bound, sh.warp[w].bound);
    // Append this warp's keys at or above the tile's bound to the row's list.
    const bool c1 = kept_by(k1, tile_bound), c2 = kept_by(k2, tile_bound), c3 = kept_by(k3, tile_bound);
    const unsigned b1 = __ballot_sync(0xFFFFFFFFu, c1), b2 = __ballot_sync(0xFFFFFFFFu, c2),
                   b3 = __ballot_sync(0xFFFFFFFFu, c3);
    const int n = __popc(b1) + __popc(b2) + __popc(b3);
    if (n > 0) {
      int at = 0;
      if (lane == 0) at = atomicAdd(job.fast.cand_count + r, n);
      at = __shfl_sync(0xFFFFFFFFu, at, 0);
      const unsigned below = (1u << lane) - 1u;
      unsigned long long* list = job.fast.cands + static_cast<int64_t>(r) * job.fast.tiles * kTileCandidates;
      if (c1) list[at + __popc(b1 & below)] = k1;
      if (c2) list[at + __popc(b1) + __popc(b2 & below)] = k2;
      if (c3) list[at + __popc(b1) + __popc(b2) + __popc(b3 & below)] = k3;
    }
  }
  if (threadIdx.x == 0) {
    TileStat t;
    t.max_key = 0;
    t.valid = 0;
    t.nan = 0;
    t.raw_max = -INFINITY;
    ArgMaxF win{0.0f, -1};
#pragma unroll
    for (int w = 0; w < kFastWarps; ++w) {
      t.max_key = max(t.max_key, sh.warp[w].max_key);
      t.valid += sh.warp[w].valid;
      t.nan |= sh.warp[w].nan;
      t.raw_max = fmaxf(t.raw_max, sh.warp[w].raw_max);
      win = better(win, sh.warp[w].win);
    }
    const float tm = t.max_key ? detail::key_value(t.max_key) : -INFINITY;
    t.sum = 0.0f;
    t.raw_sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kFastWarps; ++w) {
      const WarpSummary& ws = sh.warp[w];
      if (k.need_sum && ws.max_key && tm > -INFINITY && tm < INFINITY)
        t.sum += ws.sum * __expf((detail::key_value(ws.max_key) - tm) * k.inv_t);
      if (k.need_raw && ws.raw_max > -INFINITY && t.raw_max < INFINITY)
        t.raw_sum += ws.raw_sum * __expf(ws.raw_max - t.raw_max);
    }
    t.bound = tile_bound;
    t.win_score = win.score;
    t.win_token = win.token;
    t.pad = 0;
    job.fast.stats[static_cast<int64_t>(r) * job.fast.tiles + tile] = t;
  }
  // Publish the candidates and the statistics before counting this tile as done.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) *last_flag = atomicAdd(job.fast.tiles_done + r, 1) == job.fast.tiles - 1;
  __syncthreads();
  return *last_flag != 0;
}

}  // namespace sonic::cuda
