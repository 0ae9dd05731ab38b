// Stage 1 of the fast path: one block per (vocabulary tile, row). Loads the tile once, applies the
// prologue (SPEC.md section 2 steps 1-5), and leaves per-tile statistics and a small candidate set:
//   - the tile's largest key (greedy rows need nothing else);
//   - truncated random rows: the tokens within a distance of the tile maximum chosen from an
//     8-level histogram of (max - z) so that about kCandidateAim survive, plus the exact bound below
//     which every other valid token lies (stage 2 uses it to prove coverage);
//   - untruncated random rows: the tile's Gumbel-max winner (fast fp32 noise, SPEC.md section 4);
//   - sums of exp for top-p mass and logprobs, only where the row needs them.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"

namespace sonic::cuda {
namespace {

constexpr int kBlock = kStage1Threads;
constexpr int kGroups = kTokensPerThread / 4;  // groups of 4 consecutive tokens per thread
// A token more than this below the tile maximum never wins a Gumbel-max: G lies in [-2.812, 22.874].
constexpr float kGumbelReach = 25.7f;

struct ArgMaxF {
  float score;
  int32_t token;
};
struct ArgMaxFOp {
  __device__ ArgMaxF operator()(const ArgMaxF& a, const ArgMaxF& b) const {
    if (a.token < 0) return b;
    if (b.token < 0) return a;
    if (a.score != b.score) return a.score > b.score ? a : b;
    return a.token < b.token ? a : b;
  }
};
struct MaxU64 {
  __device__ unsigned long long operator()(unsigned long long a, unsigned long long b) const { return a > b ? a : b; }
};
struct MaxF {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
union Temp {
  cub::BlockReduce<unsigned long long, kBlock>::TempStorage u64;
  cub::BlockReduce<float, kBlock>::TempStorage f32;
  cub::BlockReduce<int, kBlock>::TempStorage i32;
  cub::BlockReduce<ArgMaxF, kBlock>::TempStorage argmax;
  cub::BlockScan<int, kBlock>::TempStorage scan;
};

struct Shared {
  Temp temp;
  int hist[kBlock / 32][16];
  unsigned long long u64;
  float f32;
  int i32;
};

__device__ __forceinline__ unsigned long long bcast_u64(unsigned long long v, Shared& sh) {
  if (threadIdx.x == 0) sh.u64 = v;
  __syncthreads();
  const unsigned long long out = sh.u64;
  __syncthreads();
  return out;
}

// Loads 4 consecutive logits (zero-filled past V): one 16- or 8-byte load when aligned.
__device__ __forceinline__ void load4(const void* row, DType dtype, int32_t t0, int32_t V, bool aligned, float x[4]) {
  if (aligned && t0 + 3 < V) {
    if (dtype == DType::kF32) {
      const float4 v = *reinterpret_cast<const float4*>(static_cast<const float*>(row) + t0);
      x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
    } else {
      const uint2 v = *reinterpret_cast<const uint2*>(static_cast<const uint16_t*>(row) + t0);
      const uint16_t h[4] = {static_cast<uint16_t>(v.x), static_cast<uint16_t>(v.x >> 16),
                             static_cast<uint16_t>(v.y), static_cast<uint16_t>(v.y >> 16)};
#pragma unroll
      for (int j = 0; j < 4; ++j)
        x[j] = dtype == DType::kBF16 ? detail::bf16_to_float(h[j]) : detail::fp16_to_float(h[j]);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) x[j] = t0 + j < V ? detail::load_logit(row, dtype, t0 + j) : 0.0f;
}

// Level of a token's distance d below the tile maximum, in steps of sqrt(2): 0 for d < 1/4, then
// level i for d in [2^((i-1)/2) / 4, 2^(i/2) / 4), and kLevels - 1 from d = 32 on. Any monotone
// function would do: the bound written for stage 2 is the exact largest key left out.
constexpr int kLevels = 16;
__device__ __forceinline__ int distance_level(float d) {
  if (!(d < 32.0f)) return kLevels - 1;
  if (d < 0.25f) return 0;
  return min(1 + static_cast<int>(2.0f * __log2f(4.0f * d)), kLevels - 2);
}

__global__ void __launch_bounds__(kBlock) stage1_kernel(RowJob job) {
  __shared__ Shared sh;
  const int32_t r = blockIdx.y, tile = blockIdx.x;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  int32_t slot;
  const int32_t* mask;
  if (!resolve_row(tab, job.slots, r, job.bitmask, job.bitmask_rows, job.bitmask_stride, job.bitmask_index, &slot,
                   &mask))
    return;  // stage 2 reports the row
  RowPrologue pro;
  pro.init(tab, slot, mask);
  const SlotParams& p = pro.p;
  const bool top_k_on = p.top_k > 0 && p.top_k < V;
  const bool truncated = !pro.greedy && (top_k_on || p.top_p < 1.0f || p.min_p > 0.0f);
  const bool untruncated = !pro.greedy && !truncated;
  const bool want_lp = job.out.logprob != nullptr;
  const bool need_sum = (truncated && p.top_p < 1.0f && ((p.flags & kSlotTopPJoint) || !top_k_on)) ||
                        (want_lp && job.mode != LogprobMode::kRaw);
  const bool need_raw = want_lp && job.mode == LogprobMode::kRaw;

  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  const bool aligned = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  const int32_t tile_start = tile * kTile;

  // Load and process 16 tokens a thread: groups of 4 consecutive ids, 4 groups strided by the block.
  float z[kTokensPerThread];
  float raw_max = -INFINITY;
  int nan_seen = 0;
  unsigned long long best = 0;
#pragma unroll
  for (int g = 0; g < kGroups; ++g) {
    const int32_t t0 = tile_start + 4 * (g * kBlock + threadIdx.x);
    float x[4];
    load4(row, job.dtype, t0, V, aligned, x);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int32_t t = t0 + j;
      float v = x[j];
      if (detail::is_nan(v)) {
        nan_seen |= t < V;
        v = -INFINITY;
      }
      if (need_raw && t < V) raw_max = fmaxf(raw_max, v);
      const float zt = t < V ? pro.apply(tab, t, v) : -INFINITY;
      z[4 * g + j] = zt;
      if (zt > -INFINITY) best = max(best, static_cast<unsigned long long>(detail::pack_key(zt, t)));
    }
  }
  nan_seen = __syncthreads_or(nan_seen);
  best = bcast_u64(cub::BlockReduce<unsigned long long, kBlock>(sh.temp.u64).Reduce(best, MaxU64()), sh);
  const float m = best ? detail::key_value(best) : -INFINITY;
  // +inf maxima and empty tiles carry no candidates: stage 2 sends such rows to the exact path.
  const bool finite_max = best != 0 && m < INFINITY;

  int valid = 0;
#pragma unroll
  for (int i = 0; i < kTokensPerThread; ++i) valid += z[i] > -INFINITY;
  {
    const int total = cub::BlockReduce<int, kBlock>(sh.temp.i32).Sum(valid);
    if (threadIdx.x == 0) sh.i32 = total;
    __syncthreads();
    valid = sh.i32;
    __syncthreads();
  }

  float sum = 0.0f;
  if (need_sum && finite_max) {
#pragma unroll
    for (int i = 0; i < kTokensPerThread; ++i)
      if (z[i] > -INFINITY) sum += __expf(z[i] - m);
    sum = cub::BlockReduce<float, kBlock>(sh.temp.f32).Sum(sum);
    __syncthreads();
  }
  float raw_sum = 0.0f;
  if (need_raw) {
    raw_max = cub::BlockReduce<float, kBlock>(sh.temp.f32).Reduce(raw_max, MaxF());
    if (threadIdx.x == 0) sh.f32 = raw_max;
    __syncthreads();
    raw_max = sh.f32;
    __syncthreads();
    if (raw_max > -INFINITY && raw_max < INFINITY) {
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
        const int32_t t0 = tile_start + 4 * (g * kBlock + threadIdx.x);
        float x[4];
        load4(row, job.dtype, t0, V, aligned, x);  // second read of the tile, L1/L2-resident
#pragma unroll
        for (int j = 0; j < 4; ++j)
          if (t0 + j < V && x[j] > -INFINITY) raw_sum += __expf(x[j] - raw_max);
      }
    }
    raw_sum = cub::BlockReduce<float, kBlock>(sh.temp.f32).Sum(raw_sum);
    __syncthreads();
  }

  TileStat* stat = job.fast.stats + static_cast<int64_t>(r) * job.fast.tiles + tile;
  unsigned long long bound = 0;
  int count = 0;
  if (truncated && finite_max) {
    // Histogram of distance levels (one per warp, then summed), then the smallest level that holds
    // kCandidateAim tokens without passing kCandidateCap.
    const int warp = threadIdx.x / 32;
    for (int i = threadIdx.x; i < kBlock / 32 * kLevels; i += kBlock) sh.hist[i / kLevels][i % kLevels] = 0;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kTokensPerThread; ++i)
      if (z[i] > -INFINITY) {
        const int lvl = distance_level(m - z[i]);
        if (lvl < kLevels - 1) atomicAdd(&sh.hist[warp][lvl], 1);
      }
    __syncthreads();
    if (threadIdx.x == 0) {
      int chosen = -1, cum = 0;
      for (int lvl = 0; lvl < kLevels; ++lvl) {
        int n = 0;
        if (lvl < kLevels - 1)
          for (int w = 0; w < kBlock / 32; ++w) n += sh.hist[w][lvl];
        else
          n = valid - cum;  // everything else
        cum += n;
        if (cum > kCandidateCap) break;
        chosen = lvl;
        if (cum >= kCandidateAim) break;
      }
      sh.i32 = chosen;  // -1: even the first level overflows (a plateau); no candidates
    }
    __syncthreads();
    const int chosen = sh.i32;
    __syncthreads();
    // Candidates: level <= chosen. The bound is the largest key left out, plus one.
    unsigned long long dropped = 0;
    int mine = 0;
#pragma unroll
    for (int i = 0; i < kTokensPerThread; ++i) {
      if (!(z[i] > -INFINITY)) continue;
      const int32_t t = tile_start + 4 * ((i / 4) * kBlock + threadIdx.x) + (i & 3);
      if (distance_level(m - z[i]) <= chosen) ++mine;
      else dropped = max(dropped, static_cast<unsigned long long>(detail::pack_key(z[i], t)));
    }
    dropped = bcast_u64(cub::BlockReduce<unsigned long long, kBlock>(sh.temp.u64).Reduce(dropped, MaxU64()), sh);
    bound = dropped ? dropped + 1 : 0;
    int offset = 0;
    cub::BlockScan<int, kBlock>(sh.temp.scan).ExclusiveSum(mine, offset, count);
    unsigned long long* out = job.fast.cands + (static_cast<int64_t>(r) * job.fast.tiles + tile) * kCandidateCap;
#pragma unroll
    for (int i = 0; i < kTokensPerThread; ++i) {
      if (!(z[i] > -INFINITY)) continue;
      const int32_t t = tile_start + 4 * ((i / 4) * kBlock + threadIdx.x) + (i & 3);
      if (distance_level(m - z[i]) <= chosen) out[offset++] = detail::pack_key(z[i], t);
    }
  }

  ArgMaxF win{0.0f, -1};
  if (untruncated && finite_max) {
    // Gumbel-max over the tile: one Philox block serves a group of 4 tokens (counter t / 4).
    const uint32_t purpose = detail::purpose(detail::Draw::kSampling, 0);
    const uint64_t step = tab.step[slot];
#pragma unroll
    for (int g = 0; g < kGroups; ++g) {
      const int32_t t0 = tile_start + 4 * (g * kBlock + threadIdx.x);
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) any |= z[4 * g + j] >= m - kGumbelReach;
      if (!any) continue;
      const detail::Philox4 words = detail::random_block(p.seed, step, purpose, static_cast<uint32_t>(t0) >> 2);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float zt = z[4 * g + j];
        if (!(zt >= m - kGumbelReach)) continue;
        const float gn = detail::gumbel_from_uniform_fast(detail::uniform_from_word(words.v[j]));
        win = ArgMaxFOp()(win, ArgMaxF{zt + gn, t0 + j});
      }
    }
    win = cub::BlockReduce<ArgMaxF, kBlock>(sh.temp.argmax).Reduce(win, ArgMaxFOp());
  }

  if (threadIdx.x == 0) {
    TileStat s;
    s.max_key = best;
    s.bound = truncated && finite_max ? bound : 0;
    s.sum = sum;
    s.raw_max = raw_max;
    s.raw_sum = raw_sum;
    s.win_score = win.score;
    s.win_token = win.token;
    s.count = count;
    s.valid = valid;
    s.nan = nan_seen;
    *stat = s;
  }
}

}  // namespace

void launch_stage1(const RowJob& job, cudaStream_t stream) {
  const dim3 grid(job.fast.tiles, job.rows);
  stage1_kernel<<<grid, kBlock, 0, stream>>>(job);
}

}  // namespace sonic::cuda
