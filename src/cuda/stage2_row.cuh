// Stage 2 of the fast path, run by the last block of a row to finish stage 1. Merges the tiles'
// statistics; for truncated rows gathers the candidates at or above the row's bound (the largest
// tile bound), divides them by T and sorts them. Every token outside that set lies at or below the
// bound's value, so the set's tokens with z above z(bound) are exactly the row's first n tokens in
// the total order (a true prefix). Steps 6-8 (min-p, top-k, both top-p rules) are decided on that
// prefix when it holds the kept set, and the row is sampled by Gumbel-max with the noise in double,
// as the reference does. Rows it cannot settle (kept set beyond the prefix, +inf or no valid logits,
// rank or top-N outputs) are flagged for the exact path. It writes outputs, never the request table.
#pragma once

#include <cub/block/block_scan.cuh>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/row_outputs.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/timeline.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {

constexpr int32_t kGatherCap = 768;     // keys of a row's prefix sorted in shared memory
constexpr int32_t kBoundCap = 2048;     // candidates at or above the row's bound kept in shared memory
                                        // (3 N(0,1) logits at V = 152K have about 900)
template <int Threads>
constexpr int kScanItems = (kGatherCap + Threads - 1) / Threads;  // prefix keys a thread scans
// The prefix's cumulative mass. Warp scans then the warps' totals: CUB's default (raking) has one
// warp add Threads / 32 values a lane one after another, a longer chain in a 512-thread block.
template <int Threads>
using PrefixScan = cub::BlockScan<double, Threads, cub::BLOCK_SCAN_WARP_SCANS>;
constexpr int32_t kTopKSlack = 16;   // top-k rows sort about k + kTopKSlack keys (rounding margin)
constexpr int32_t kShortPrefixCheck = 256;  // prefixes longer than this are checked for mass first

// Stage 2's shared memory for a block of Threads threads.
template <int Threads>
struct Stage2Shared {
  union {
    typename PrefixScan<Threads>::TempStorage scan;
    ArgMaxD best[Threads / 32];  // block_best's slots
  } temp;
  union {
    unsigned long long gathered[kBoundCap];  // x keys at or above the row's bound
    struct {  // once the prefix is staged (gathered is read no more): the draw's noise, early
      double staged_noise[kGatherCap];  // of staged[i]
      double noise[kGatherCap];         // of sorted[i]
      int32_t rank[kGatherCap];         // staged[i] is sorted[rank[i]]
    } early;
  };
  unsigned long long sorted[kGatherCap];    // z keys, descending
  union {
    unsigned long long staged[kGatherCap];  // z keys of the prefix, unordered
    double cum[kGatherCap];                 // inclusive sums of exp(z - z_max) along `sorted`
  };
  unsigned long long staged_x[kGatherCap];  // raw-mode ranks: the x keys of `staged`
  unsigned long long sorted_x[kGatherCap];  // and of `sorted`
  int32_t cand_off[kMaxChunks];             // chunk c's candidates are [cand_off[c], cand_off[c] + count)
  int32_t chunks;
  unsigned long long max_key;             // x keys
  unsigned long long bound;
  double sum_all;  // sum of exp(z - z_max) over every valid token (when stage 1 computed it)
  double raw_sum;
  float raw_max;
  ArgMaxF win;
  int32_t valid;
  int32_t nan;
  int32_t n_all;   // candidates of every chunk
  int32_t n_bound; // of them at or above the row's bound
  int32_t n;       // keys of the sorted prefix
  int32_t at;      // index of the row's token in `sorted`
  int32_t rank;
  int32_t kept;
  int32_t draft_at;  // verification: index of the row's draft token in `sorted` (-1: not kept)
  double kept_sum;
  int32_t hist[Threads];
  float tau;
  double staged_sum;  // the staged prefix's mass (gather_prefix's short-prefix check)
};

__device__ __forceinline__ TileStat load_stat(const TileStat* p) {
  TileStat t;
  const uint4* src = reinterpret_cast<const uint4*>(p);
  uint4* dst = reinterpret_cast<uint4*>(&t);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(TileStat) / 16); ++i) dst[i] = __ldcg(src + i);  // L2: other blocks wrote it
  return t;
}

// Warp 0 merges the row's chunk statistics into `sh` (at most 64 chunks, two a lane), with the
// offsets of each chunk's candidates in the row's list.
template <int Threads>
__device__ __forceinline__ void merge_tiles(const RowJob& job, int32_t r, const RowKind& k, Stage2Shared<Threads>& sh) {
  const int lane = threadIdx.x & 31;
  const int32_t chunks = job.fast.chunks;
  const TileStat* stats = job.fast.stats + static_cast<int64_t>(r) * chunks;
  TileStat t[2];
  bool have[2];
  int count[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    have[h] = lane + 32 * h < chunks;
    if (have[h]) t[h] = load_stat(stats + lane + 32 * h);
    count[h] = have[h] ? t[h].count : 0;
  }
  unsigned long long max_key = 0, bound = 0;
  int valid = 0, nan = 0;
  float raw_max = -INFINITY;
  ArgMaxF win{0.0f, -1};
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (have[h]) {
      max_key = max(max_key, t[h].max_key);
      bound = max(bound, t[h].bound);
      valid += t[h].valid;
      nan |= t[h].nan;
      raw_max = fmaxf(raw_max, t[h].raw_max);
      win = better(win, ArgMaxF{t[h].win_score, t[h].win_token});
    }
  max_key = warp_max(max_key);
  bound = warp_max(bound);
  valid = warp_sum(valid);
  nan = __any_sync(0xFFFFFFFFu, nan);
  raw_max = warp_max(raw_max);
  win = warp_best(win);
  const int incl0 = warp_inclusive_sum(count[0]);
  const int total0 = __shfl_sync(0xFFFFFFFFu, incl0, 31);
  const int incl1 = warp_inclusive_sum(count[1]);
  if (have[0]) sh.cand_off[lane] = incl0 - count[0];
  if (have[1]) sh.cand_off[lane + 32] = total0 + incl1 - count[1];
  const int n_all = total0 + __shfl_sync(0xFFFFFFFFu, incl1, 31);
  const float m = max_key ? detail::key_value(max_key) : -INFINITY;
  double sum = 0.0, raw_sum = 0.0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (have[h]) {
      if (k.need_sum && t[h].max_key && m > -INFINITY && m < INFINITY)
        sum += static_cast<double>(t[h].sum) * exp(static_cast<double>((detail::key_value(t[h].max_key) - m) * k.inv_t));
      if (k.need_raw && t[h].raw_max > -INFINITY && raw_max < INFINITY)
        raw_sum += static_cast<double>(t[h].raw_sum) * exp(static_cast<double>(t[h].raw_max) - static_cast<double>(raw_max));
    }
  sum = warp_sum(sum);
  raw_sum = warp_sum(raw_sum);
  if (lane == 0) {
    sh.max_key = max_key;
    sh.bound = bound;
    sh.valid = valid;
    sh.nan = nan;
    sh.raw_max = raw_max;
    sh.win = win;
    sh.sum_all = sum;
    sh.raw_sum = raw_sum;
    sh.chunks = chunks;
    sh.n_all = n_all;
    if constexpr (Threads <= kFastThreads) sh.n_bound = 0;  // wider blocks list while this merges
    sh.n = 0;
    // Every chunk of the row is done: reset its counter for the next call.
    job.fast.tiles_done[r] = 0;
  }
}

template <int N>
__device__ __forceinline__ void warp_append_batch(unsigned long long* dst, int* n, int cap,
                                                  const unsigned long long (&key)[N], unsigned keep);

// Wide blocks' reading of candidates: a warp's items are some runs of the row's list one after the
// other, item j lying in run q when end[q - 1] <= j < end[q], at list[at[q] + j]. key[b] = the
// warp's item base + 32 b (0 past total): N independent loads.
template <int Runs, int N>
__device__ __forceinline__ void load_run_batch(const unsigned long long* list, const int (&end)[Runs],
                                               const int64_t (&at)[Runs], int total, int base,
                                               unsigned long long (&key)[N]) {
#pragma unroll
  for (int b = 0; b < N; ++b) {
    const int j = base + 32 * b;
    key[b] = 0ull;
    if (j < total) {
      int64_t a = at[0];
#pragma unroll
      for (int e = 0; e + 1 < Runs; ++e)
        if (j >= end[e]) a = at[e + 1];
      key[b] = __ldcg(list + a + j);
    }
  }
}

// Wide blocks (row_stage2_kernel): warps 1 .. Threads / 32 - 1 read the row's candidates at or above
// the row's bound into sh.gathered (sh.n_bound counts them) while warp 0 merges the chunks'
// statistics, so that the two chains of L2 round trips overlap (one after the other they were
// 2.9 + 3.65 us at B = 1). Each warp finds the bound itself, the largest chunk bound (two loads a
// lane), and reads runs w - 1, w - 1 + kWarps, ... of the row's candidates. A run is a chunk's
// candidates (the first `count` keys of its region), or with fewer chunks than warps (4 at
// B = 128, where four warps read the row while the others waited) a part of them, so that every
// warp reads; a warp takes at most Runs runs. sh.n_bound must be 0 before.
template <int Threads, int Runs>
__device__ __forceinline__ void list_while_merging(const RowJob& job, int32_t r, Stage2Shared<Threads>& sh) {
  constexpr int kWarps = Threads / 32 - 1;
  constexpr int kRuns = Runs;  // runs a warp takes
  constexpr int kBatch = 8;    // loads in flight a lane
  static_assert(kRuns <= 32, "a lane holds the extent of one of the warp's runs");
  const int warp = threadIdx.x / 32 - 1, lane = threadIdx.x & 31;
  const int32_t chunks = job.fast.chunks;
  const TileStat* stats = job.fast.stats + static_cast<int64_t>(r) * chunks;
  unsigned long long bound = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (lane + 32 * h < chunks) bound = max(bound, __ldcg(&stats[lane + 32 * h].bound));
  const int64_t capacity = job.fast.chunk_capacity;
  const int parts = chunks < kWarps ? kWarps / chunks : 1;  // runs a chunk is cut into
  const int run = warp + lane * kWarps;  // the lane's run (lanes below kRuns)
  int len = 0;
  int64_t first = 0;
  if (lane < kRuns && run < chunks * parts) {
    const int c = run / parts, part = run - c * parts;
    const int n = __ldcg(&stats[c].count);
    const int lo = part * n / parts;
    len = (part + 1) * n / parts - lo;
    first = c * capacity + lo;
  }
  bound = warp_max(bound);
  int end[kRuns];  // the warp's items [end[q - 1], end[q]) are its run q, at list[at[q] + j]
  int64_t at[kRuns];
  int total = 0;
#pragma unroll
  for (int q = 0; q < kRuns; ++q) {
    at[q] = __shfl_sync(0xFFFFFFFFu, first, q) - total;
    total += __shfl_sync(0xFFFFFFFFu, len, q);
    end[q] = total;
  }
  const unsigned long long* list = job.fast.cands + static_cast<int64_t>(r) * job.fast.cand_stride;
  for (int base = lane; base - lane < total; base += 32 * kBatch) {
    unsigned long long key[kBatch];
    unsigned listed = 0;
    load_run_batch(list, end, at, total, base, key);
#pragma unroll
    for (int b = 0; b < kBatch; ++b) listed |= (kept_by(key[b], bound) ? 1u : 0u) << b;
    warp_append_batch(sh.gathered, &sh.n_bound, kBoundCap, key, listed);
  }
}

// Warp 0 merges the row's chunk statistics into `sh`; in wide blocks the other warps list the
// candidates at or above the bound meanwhile (list_while_merging), in the fast kernel's block
// gather_prefix lists them later. The whole block calls it; it ends with a barrier.
template <int Threads>
__device__ __forceinline__ void merge_row(const RowJob& job, int32_t r, const RowKind& k, Stage2Shared<Threads>& sh) {
  if constexpr (Threads > kFastThreads) {
    if (threadIdx.x == 0) sh.n_bound = 0;
    __syncthreads();
    // Rows of at most a chunk a listing warp (B >= 32 at V = 151936) take the one-run form, whose
    // loads find their run without comparing with the other runs' ends.
    constexpr int kWarps = Threads / 32 - 1;
    if (threadIdx.x < 32) merge_tiles(job, r, k, sh);
    else if (job.fast.chunks <= kWarps) list_while_merging<Threads, 1>(job, r, sh);
    else list_while_merging<Threads, (kMaxChunks + kWarps - 1) / kWarps>(job, r, sh);
  } else {
    if (threadIdx.x < 32) merge_tiles(job, r, k, sh);
  }
  timeline_warp_arrive(kMarkMerged);
  __syncthreads();
}

// Steps 6-8 on the sorted prefix sh.sorted[0, n) of the row's total order (every other valid token
// has z <= zl < every prefix z). Returns the size of the kept set (a prefix), or -1 when the kept set
// or a quantity that decides it lies beyond the prefix.
template <int Threads>
__device__ __forceinline__ int decide_kept(const SlotParams& p, int32_t V, float zm, float zl, int n, int valid,
                                           const Stage2Shared<Threads>& sh) {
  if (n == 0) return -1;
  const bool complete = n == valid;  // the prefix is the whole row
  const bool top_k_on = p.top_k > 0 && p.top_k < V;
  auto z_at = [&](int i) { return detail::key_value(sh.sorted[i]); };
  // First index in [0, n) whose z is below c (the prefix is sorted by z descending).
  auto count_at_least = [&](float c) {
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (z_at(mid) >= c) lo = mid + 1; else hi = mid;
    }
    return lo;
  };
  // First index in [0, lim) whose cumulative mass reaches target, or lim.
  auto crossing = [&](double target, int lim) {
    int lo = 0, hi = lim;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (sh.cum[mid] >= target) hi = mid; else lo = mid + 1;
    }
    return lo;
  };
  // Step 6: the survivors of min-p, a prefix of `surv` tokens (known when its end is inside the
  // prefix, or when nothing beyond the prefix can reach the cut).
  int surv = valid;
  bool surv_known = true;
  if (p.min_p > 0.0f) {
    const float cut = min_p_threshold(zm, p.min_p);
    const int c = count_at_least(cut);
    if (c < n || complete || cut > zl) surv = c;
    else surv_known = false;  // at least n
  }
  // Step 7.
  int keep = surv;
  bool keep_known = surv_known;
  if (top_k_on) {
    if (surv_known) keep = min(p.top_k, surv);
    else if (p.top_k <= n) keep = p.top_k, keep_known = true;
  }
  if (p.top_p >= 1.0f) return keep_known && keep <= n ? keep : -1;
  // Step 8.
  const bool joint = p.flags & kSlotTopPJoint;
  const bool all_survive = p.min_p <= 0.0f && !top_k_on;
  double total;
  if (joint || all_survive) total = sh.sum_all;
  else if (keep_known && keep <= n) total = sh.cum[keep - 1];
  else return -1;
  const double target = static_cast<double>(p.top_p) * total;
  if (joint || all_survive) {
    int x = crossing(target, n);
    if (x == n) {
      if (keep_known && keep <= n) return keep;  // min-p / top-k end the kept set first
      if (!complete) return -1;                   // the crossing lies beyond the prefix
      x = n - 1;                                  // rounding: every token
    }
    const int kept = x + 1;
    return keep_known ? min(kept, keep) : kept;  // unknown keep is >= n >= kept
  }
  const int x = crossing(target, keep);
  return x == keep ? keep : x + 1;
}

// Appends `key` where `keep` to dst[0, cap) at the shared counter *n, one atomic a warp; every lane
// of the warp calls it together. *n counts past cap too (so that an overflow shows). With dst2,
// key2 goes to the same place of dst2.
__device__ __forceinline__ void warp_append(unsigned long long* dst, int* n, int cap, unsigned long long key,
                                            bool keep, unsigned long long* dst2 = nullptr,
                                            unsigned long long key2 = 0ull) {
  const int lane = threadIdx.x & 31;
  const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
  if (!ballot) return;
  int at = 0;
  if (lane == 0) at = atomicAdd(n, __popc(ballot));
  at = __shfl_sync(0xFFFFFFFFu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
  if (keep && at < cap) {
    dst[at] = key;
    if (dst2) dst2[at] = key2;
  }
}

// Appends the lane's keys key[b] whose bit b of `keep` is set to dst[0, cap) at the shared counter
// *n: one atomic a warp for the whole batch; every lane of the warp calls it together. *n counts
// past cap too (so that an overflow shows).
template <int N>
__device__ __forceinline__ void warp_append_batch(unsigned long long* dst, int* n, int cap,
                                                  const unsigned long long (&key)[N], unsigned keep) {
  const int lane = threadIdx.x & 31;
  const int mine = __popc(keep);
  const int incl = warp_inclusive_sum(mine);
  const int total = __shfl_sync(0xFFFFFFFFu, incl, 31);
  if (!total) return;
  int at = 0;
  if (lane == 0) at = atomicAdd(n, total);
  at = __shfl_sync(0xFFFFFFFFu, at, 0) + incl - mine;
#pragma unroll
  for (int b = 0; b < N; ++b)
    if ((keep >> b) & 1u) {
      if (at < cap) dst[at] = key[b];
      ++at;
    }
}

// Calls g(key) with key[N] for the row's candidates, in batches of independent loads (0: past the
// end); the lanes of a warp call it together. Candidate i of the row lies in the chunk c with
// cand_off[c] <= i < cand_off[c + 1]. In the fast kernel's block a thread's indices grow by 128,
// about one chunk at B = 1 (about 100 candidates a chunk), so it finds their chunks by walking
// forward. Wider blocks give each warp whole chunks instead (warp w takes chunks w, w + Warps, ...,
// at most kMaxChunks / Warps of them): the warp's candidates are those chunks' runs one after the
// other, and a lane finds its item's run by comparing with the few running ends it holds in
// registers (a block-wide search over cand_off in shared memory cost 4.4 us at B = 1, most of it
// the search's dependent shared loads).
template <int N, int Threads, class G>
__device__ __forceinline__ void for_each_listed_batch(const RowJob& job, int32_t r, const Stage2Shared<Threads>& sh, G&& g) {
  const int n_all = sh.n_all, chunks = sh.chunks;
  const unsigned long long* list = job.fast.cands + static_cast<int64_t>(r) * job.fast.cand_stride;
  const int64_t capacity = job.fast.chunk_capacity;
  if constexpr (Threads > kFastThreads) {
    constexpr int kWarps = Threads / 32;
    constexpr int kRuns = (kMaxChunks + kWarps - 1) / kWarps;  // chunks a warp takes
    const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
    int end[kRuns];  // the warp's items [end[q - 1], end[q]) are chunk warp + q * kWarps's
    int64_t at[kRuns];
    int total = 0;
#pragma unroll
    for (int q = 0; q < kRuns; ++q) {
      const int c = warp + q * kWarps;
      at[q] = c * capacity - total;
      if (c < chunks) total += (c + 1 < chunks ? sh.cand_off[c + 1] : n_all) - sh.cand_off[c];
      end[q] = total;
    }
    for (int base = lane; base - lane < total; base += 32 * N) {
      unsigned long long key[N];
      load_run_batch(list, end, at, total, base, key);
      g(key);
    }
  } else {
    int c = 0, c_off = 0, next_off = chunks > 1 ? sh.cand_off[1] : 0x7FFFFFFF;
    for (int base = threadIdx.x; base - (threadIdx.x & 31) < n_all; base += N * Threads) {
      unsigned long long key[N];
#pragma unroll
      for (int b = 0; b < N; ++b) {
        const int i = base + b * Threads;
        key[b] = 0ull;
        if (i < n_all) {
          while (i >= next_off) {  // chunk c + 1 starts at or before i
            ++c;
            c_off = next_off;
            next_off = c + 1 < chunks ? sh.cand_off[c + 1] : 0x7FFFFFFF;
          }
          key[b] = __ldcg(list + c * capacity + (i - c_off));
        }
      }
      g(key);
    }
  }
}

// Calls f(key, listed) for each of the row's candidates, `listed` telling whether the key is at or
// above the row's bound; the lanes of a warp call it together (four loads in flight a thread).
template <int Threads, class F>
__device__ __forceinline__ void for_each_listed(const RowJob& job, int32_t r, const Stage2Shared<Threads>& sh, F&& f) {
  const unsigned long long bound = sh.bound;
  for_each_listed_batch<4>(job, r, sh, [&](const unsigned long long (&key)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) f(key[b], kept_by(key[b], bound));
  });
}

// A row's sampling noise: token t's is gumbel_exact(seed, step, purpose, t). Blocks wider than the
// fast kernel's compute it for the whole prefix in their idle warps while others sort it (on = true),
// into sh.early.noise, so that the draw after the decision is a reduction.
struct SampleNoise {
  bool on;
  uint64_t seed;
  uint64_t step;
  uint32_t purpose;
};
template <int Threads>
constexpr bool kEarlyNoise = Threads > kFastThreads;

// Gathers the row's sorted prefix into sh.sorted[0, sh.n) as z keys (z = x / T) and returns zl: every
// token outside the prefix has z <= zl < every z inside. Every token outside the candidate list lies
// below the row bound's value xb, so any tau >= xb gives a true prefix: the listed tokens with
// z > z(tau). With want > 0, tau rises so that about want + kTopKSlack keys remain (a histogram of
// the candidates' distances below the maximum mx); tokens below `cut` are left out as well. sh.n
// above kGatherCap means the prefix did not fit or, with need_mass > 0 (the least mass of the prefix,
// in units of exp(z - z(mx)), that can hold the kept set), that a long prefix that is not the whole
// row falls short of it: nothing is sorted then. The candidates at or above the bound are read from
// the list once, into shared memory, when they fit (the common case). With with_x, sh.sorted_x[i]
// holds the x key of sh.sorted[i].
template <int Threads>
__device__ float gather_prefix(const RowJob& job, int32_t r, float mx, float T, int32_t want, float cut, bool with_x,
                               const SampleNoise& noise, double need_mass, Stage2Shared<Threads>& sh) {
  const int tid = threadIdx.x;
  const unsigned long long bound = sh.bound;
  // The candidates at or above the bound into shared memory, four loads in flight a thread (eight
  // gained 0.8 us more at B = 1 but spilled, +9 % at B = 512), one shared atomic a warp and batch.
  // Wide blocks listed them while the statistics were merged (merge_row).
  if constexpr (Threads <= kFastThreads) {
    constexpr int kBatch = 4;
    for_each_listed_batch<kBatch>(job, r, sh, [&](const unsigned long long (&key)[kBatch]) {
      unsigned listed = 0;
#pragma unroll
      for (int b = 0; b < kBatch; ++b) listed |= (kept_by(key[b], bound) ? 1u : 0u) << b;
      warp_append_batch(sh.gathered, &sh.n_bound, kBoundCap, key, listed);
    });
    __syncthreads();
  }
  timeline_mark(kMarkListed);
  const int n_bound = sh.n_bound;
  timeline_value(kValueCandidates, sh.n_all);
  timeline_value(kValueAtBound, n_bound);
  const bool in_smem = n_bound <= kBoundCap;
  // f(key, listed) over the candidates at or above the bound, whole warps at a time.
  auto for_each_candidate = [&](auto&& f) {
    if (in_smem) {
      for (int i = tid; i - (tid & 31) < n_bound; i += Threads) {
        const bool have = i < n_bound;
        f(have ? sh.gathered[i] : 0ull, have);
      }
    } else {
      for_each_listed(job, r, sh, f);
    }
  };
  const float xb = bound ? detail::key_value(bound) : -INFINITY;
  float tau = xb;
  if (want > 0 && bound && n_bound > want + kTopKSlack + 64 && mx < INFINITY && mx - xb > 0.0f) {
    sh.hist[tid] = 0;
    __syncthreads();
    const float scale = static_cast<float>(Threads) / (mx - xb);
    for_each_candidate([&](unsigned long long key, bool listed) {
      if (!listed) return;
      const float d = (mx - detail::key_value(key)) * scale;
      atomicAdd(&sh.hist[min(Threads - 1, static_cast<int>(d))], 1);
    });
    timeline_warp_arrive(kMarkThreshold);
    __syncthreads();
    if (tid < 32) {  // the first bin b whose cumulative count reaches want + kTopKSlack
      constexpr int kPer = Threads / 32;
      int c[kPer], own = 0;
#pragma unroll
      for (int q = 0; q < kPer; ++q) own += (c[q] = sh.hist[tid * kPer + q]);
      const int incl = warp_inclusive_sum(own);
      const int target = want + kTopKSlack;
      const unsigned reach = __ballot_sync(0xFFFFFFFFu, incl >= target);
      float t = xb;
      if (reach) {
        const int l = __ffs(reach) - 1;
        if (tid == l) {
          int cum = incl - own, b = tid * kPer;
#pragma unroll
          for (int q = 0; q < kPer; ++q) {
            cum += c[q];
            if (cum >= target) {
              b = tid * kPer + q;
              break;
            }
          }
          t = mx - static_cast<float>(b + 1) / scale;
          sh.tau = fmaxf(t, xb);
        }
      } else if (tid == 0) {
        sh.tau = xb;
      }
    }
    timeline_stamp(kValueBinFound);
    __syncthreads();
    tau = sh.tau;
  }
  timeline_mark(kMarkThreshold);
  const float zl = tau > -INFINITY ? detail::apply_temperature(tau, T) : -INFINITY;
  for_each_candidate([&](unsigned long long key, bool listed) {
    const float z = detail::apply_temperature(detail::key_value(key), T);
    const unsigned long long zkey = detail::pack_key(z, detail::key_token(key));
    const bool keep = listed && z > zl && !(z < cut);
    warp_append(sh.staged, &sh.n, kGatherCap, zkey, keep, with_x ? sh.staged_x : nullptr, key);
  });
  timeline_warp_arrive(kMarkStaged);
  __syncthreads();
  timeline_mark(kMarkStaged);
  const int n = sh.n;
  timeline_value(kValuePrefix, n);
  // A long prefix short of the mass to reach (a flat top-p row) leaves the row to the exact path in
  // any order: its mass in any order decides it (the margin in need_mass covers the rounding), so
  // the sort, n^2 / Threads comparisons (77 us for the row done last at B = 128), is skipped.
  if (need_mass > 0.0 && n > kShortPrefixCheck && n <= kGatherCap && n < sh.valid) {
    const float zm = detail::apply_temperature(mx, T);
    if (tid == 0) sh.staged_sum = 0.0;
    __syncthreads();
    double m = 0.0;
    for (int i = tid; i < n; i += Threads)
      m += exp(static_cast<double>(detail::key_value(sh.staged[i])) - static_cast<double>(zm));
    m = warp_sum(m);
    if ((tid & 31) == 0) atomicAdd(&sh.staged_sum, m);
    __syncthreads();
    if (sh.staged_sum < need_mass) {
      __syncthreads();  // every thread has read sh.n and sh.staged_sum
      if (tid == 0) sh.n = kGatherCap + 1;
      __syncthreads();
      return zl;
    }
  }
  if (n <= kGatherCap) {
    // Sort by rank: keys are distinct, so each key's rank is the number of larger keys. A wide block
    // with a short prefix (the common case: about 70 keys) counts each rank in four lanes, a quarter
    // of the keys each, and leaves its last n threads to the noise below.
    auto place = [&](int i, int pos) {
      sh.sorted[pos] = sh.staged[i];
      if (with_x) sh.sorted_x[pos] = sh.staged_x[i];
      if constexpr (kEarlyNoise<Threads>) sh.early.rank[i] = pos;
    };
    if (Threads > kFastThreads && 5 * n <= Threads) {
      const int i = tid >> 2, part = tid & 3;  // lanes 4i .. 4i + 3 of one warp rank key i
      const unsigned long long key = i < n ? sh.staged[i] : ~0ull;
      int pos = 0;
      if (i < n)
        for (int j = part; j < n; j += 4) pos += sh.staged[j] > key;
      pos += __shfl_xor_sync(0xFFFFFFFFu, pos, 1);
      pos += __shfl_xor_sync(0xFFFFFFFFu, pos, 2);
      if (i < n && part == 0) place(i, pos);
    } else {
      for (int i = tid; i < n; i += Threads) {
        const unsigned long long key = sh.staged[i];
        int pos = 0;
        for (int j = 0; j < n; ++j) pos += sh.staged[j] > key;
        place(i, pos);
      }
    }
    // Meanwhile the block's last threads (the prefix is short: about 70 keys, so the sort takes the
    // first 4n) draw every prefix token's noise, the draw's long dependent chain.
    if constexpr (kEarlyNoise<Threads>)
      if (noise.on)
        for (int i = Threads - 1 - tid; i < n; i += Threads)
          sh.early.staged_noise[i] = gumbel_exact(noise.seed, noise.step, noise.purpose, detail::key_token(sh.staged[i]));
  }
  timeline_warp_arrive(kMarkGathered);
  __syncthreads();
  if constexpr (kEarlyNoise<Threads>)
    if (noise.on && n <= kGatherCap) {  // in sorted order (read after the decision's barriers)
      for (int i = tid; i < n; i += Threads) sh.early.noise[sh.early.rank[i]] = sh.early.staged_noise[i];
    }
  return zl;
}

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

// Stage 2 for row r (the whole block).
template <int Threads>
__device__ void verdict_row(const RowJob& job, int32_t r, const RowPrologue& pro, const RowKind& k, const VerifyRow& w,
                            int kept, double kept_sum, float zm, int32_t token, bool early_correction,
                            Stage2Shared<Threads>& sh);

template <int Threads>
__device__ void stage2_row(const RowJob& job, int32_t r, int32_t slot, const RowPrologue& pro, const RowKind& k,
                           const VerifyRow& w, Stage2Shared<Threads>& sh) {
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const RowOutputs& out = job.out;
  const SlotParams& p = pro.p;
  const int tid = threadIdx.x;
  merge_row(job, r, k, sh);
  timeline_mark(kMarkMerged);
  const bool verifying = job.verify.num_requests > 0;
  if (verifying && !block_request_ok(job, w)) {
    if (tid == 0) {
      write_invalid_verify_row(job, r);
      job.fast.exact_flags[r] = 0;
    }
    return;
  }

  const unsigned long long max_key = sh.max_key;
  const float mx = max_key ? detail::key_value(max_key) : -INFINITY;
  const bool want_lp = out.logprob != nullptr || (out.top_ids != nullptr && p.top_n > 0);
  // Ranks and top-N come from the sorted prefix of truncated rows (prefix_ranks); raw-mode ones only
  // where x is the input logit everywhere (no rules). Other rows take the exact path for them.
  const bool want_ranks = asks_ranks(out, p);
  const bool prefix_ranks = want_ranks && k.truncated && (job.mode != LogprobMode::kRaw || !pro.has_rules);
  bool exact = max_key == 0 || mx == INFINITY || (want_ranks && !prefix_ranks) ||
               (want_lp && job.mode == LogprobMode::kRaw && !(sh.raw_max > -INFINITY && sh.raw_max < INFINITY));
  if (k.untruncated && ((out.final_ids && sh.valid <= out.final_capacity) || sh.win.token < 0)) exact = true;
  // Verification of a random request needs p_j as a list: untruncated rows take the exact path.
  if (verifying && k.untruncated && w.rule != static_cast<int32_t>(VerifyRule::kStrict)) exact = true;
  const float T = p.temperature;
  const float zm = pro.greedy ? mx : detail::apply_temperature(mx, T);
  const bool correction_only = verifying && !pro.greedy && w.rule != static_cast<int32_t>(VerifyRule::kStrict);

  int kept = 0;
  double kept_sum = 1.0;
  int32_t token = -1;
  if (!exact && pro.greedy) {
    token = detail::key_token(max_key);
    kept = 1;
    if (tid == 0) sh.sorted[0] = max_key;
  } else if (!exact && k.untruncated) {
    token = sh.win.token;
    kept = sh.valid;
    kept_sum = sh.sum_all;
  } else if (!exact) {
    // Min-p: tokens below the cut never survive, so the prefix stops there too, unless it must hold
    // the top N in the processed or raw mode (which every valid token may enter); top-k rows sort
    // about k keys, or N.
    // The top N the prefix must hold beyond the kept set (processed and raw modes; 0: none).
    const int n_top = prefix_ranks && job.mode != LogprobMode::kFinal ? top_count(out, p) : 0;
    const float cut = p.min_p > 0.0f && n_top == 0 ? min_p_threshold(zm, p.min_p) : -INFINITY;
    const bool top_k_on = p.top_k > 0 && p.top_k < V;
    const int32_t want = top_k_on ? max(p.top_k, n_top) : 0;
    const bool with_x = prefix_ranks && job.mode == LogprobMode::kRaw;
    // The early noise is the one the row's draw uses: kind 0 at its position, except for random-rule
    // verification rows, which never emit their kind-0 sample (they emit their draft, or a kind-2
    // sample at their position: the bonus token or the residual's), so theirs is kind 2 and their
    // kind-0 draw is skipped.
    const SampleNoise noise{kEarlyNoise<Threads>, p.seed, kEarlyNoise<Threads> ? tab.step[slot] : 0ull,
                            correction_only ? detail::purpose(detail::Draw::kCorrection, static_cast<uint32_t>(w.j))
                                            : detail::purpose(detail::Draw::kSampling, pro.position)};
    // Top-p alone (every valid token survives steps 6-7): the kept set lies in the prefix only if its
    // mass reaches decide_kept's target, top_p * sum_all; 1e-9 below it covers the sums' orders.
    const bool top_p_alone = p.top_p < 1.0f && p.min_p <= 0.0f && !top_k_on && n_top == 0;
    const double need_mass =
        top_p_alone ? static_cast<double>(p.top_p) * sh.sum_all * (1.0 - 1e-9) : 0.0;
    const float zl = gather_prefix(job, r, mx, T, want, cut, with_x, noise, need_mass, sh);
    timeline_mark(kMarkGathered);
    const int n = sh.n;
    // The top N in the processed and raw modes must lie in the prefix (the final mode's are kept).
    if (n > kGatherCap || n < min(n_top, sh.valid)) {
      exact = true;
    } else {
      double e[kScanItems<Threads>];
#pragma unroll
      for (int q = 0; q < kScanItems<Threads>; ++q) {
        const int i = tid * kScanItems<Threads> + q;
        e[q] = i < n ? exp(static_cast<double>(detail::key_value(sh.sorted[i])) - static_cast<double>(zm)) : 0.0;
      }
      PrefixScan<Threads>(sh.temp.scan).InclusiveSum(e, e);
#pragma unroll
      for (int q = 0; q < kScanItems<Threads>; ++q) {
        const int i = tid * kScanItems<Threads> + q;
        if (i < n) sh.cum[i] = e[q];
      }
      timeline_warp_arrive(kMarkDecided);
      __syncthreads();
      if (tid == 0) sh.kept = decide_kept(p, V, zm, zl, n, sh.valid, sh);
      timeline_stamp(kValueDecided);
      __syncthreads();
      timeline_mark(kMarkDecided);
      kept = sh.kept;
      timeline_value(kValueKept, kept);
      if (kept <= 0) {
        exact = true;
      } else {
        kept_sum = sh.cum[kept - 1];
      }
      if (kept > 0 && !correction_only) {
        // Gumbel-max over the kept set, noise in double exactly as the reference draws it.
        const uint32_t purpose = detail::purpose(detail::Draw::kSampling, pro.position);
        const uint64_t step = tab.step[slot];
        ArgMaxD local{0.0, -1};
        for (int i = tid; i < kept; i += Threads) {
          const int32_t t = detail::key_token(sh.sorted[i]);
          const double g = kEarlyNoise<Threads> ? sh.early.noise[i] : gumbel_exact(p.seed, step, purpose, t);
          local = better(local, ArgMaxD{static_cast<double>(detail::key_value(sh.sorted[i])) + g, t});
        }
        token = block_best<Threads>(local, sh.temp.best).token;
        timeline_mark(kMarkSampled);
      }
    }
  }
  if (exact) {
    if (tid == 0) {
      job.fast.exact_flags[r] = 1;
      atomicAdd(job.fast.flagged, 1);
      atomicAdd(job.fast.flagged_total, 1ull);
    }
    return;
  }
  if (tid == 0) sh.draft_at = -1;  // verdict_row's search, ordered before it by this barrier
  __syncthreads();  // sh.sorted[0] of greedy rows
  if (verifying) {
    // A random-rule row settled here is truncated (untruncated ones took the exact path): its prefix
    // was gathered with kind-2 early noise.
    const bool early_correction = kEarlyNoise<Threads> && correction_only && k.truncated;
    verdict_row(job, r, pro, k, w, kept, kept_sum, zm, token, early_correction, sh);
    return;
  }

  // Outputs of a settled row.
  if (out.final_ids) {
    int32_t* ids = out.final_ids + r * out.final_stride;
    float* probs = out.final_probs + r * out.final_stride;
    const bool fits = kept <= out.final_capacity;
    for (int64_t i = tid; i < out.final_stride; i += Threads) {
      const bool have = fits && i < kept;
      ids[i] = have ? detail::key_token(sh.sorted[i]) : -1;
      float prob = 0.0f;
      if (have)
        prob = pro.greedy ? 1.0f
                          : static_cast<float>(exp(static_cast<double>(detail::key_value(sh.sorted[i])) - static_cast<double>(zm)) /
                                               kept_sum);
      probs[i] = prob;
    }
  }
  if (prefix_ranks) write_prefix_ranks(job, r, pro, token, kept, kept_sum, zm, sh);
  else if (out.top_ids)  // top_n == 0: padding only
    for (int64_t i = tid; i < out.top_stride; i += Threads) {
      out.top_ids[r * out.top_stride + i] = -1;
      out.top_logprobs[r * out.top_stride + i] = -INFINITY;
    }
  if (tid == 0) {
    if (out.logprob) out.logprob[r] = token_logprob(job, r, pro, k, token, kept_sum, zm, sh);
    if (out.final_count) out.final_count[r] = kept;
    out.tokens[r] = token;
    if (out.status) out.status[r] = sh.nan ? kStatusNaN : 0;
    job.fast.exact_flags[r] = 0;
  }
}

// The row verdict of a settled verification row (docs/design-verify.md). The kept set is
// sh.sorted[0, kept) (z keys; greedy rows: the argmax alone) with p_i = exp(z_i - zm) / kept_sum;
// token is the row's kind-0 sample at its position (greedy rows: the argmax; strict rows only: the
// other rules never emit it). With early_correction, sh.early.noise[i] is the kind-2 noise of
// sorted[i] at the row's position, drawn while the prefix was sorted.
template <int Threads>
__device__ void verdict_row(const RowJob& job, int32_t r, const RowPrologue& pro, const RowKind& k, const VerifyRow& w,
                            int kept, double kept_sum, float zm, int32_t token, bool early_correction,
                            Stage2Shared<Threads>& sh) {
  const VerifyJob& v = job.verify;
  const SlotParams& p = pro.p;
  const int tid = threadIdx.x;
  const uint64_t step = job.table.step[w.slot];
  const int32_t j = w.j;
  const int64_t d = w.draft0 + j;
  const int32_t dj = j < w.n ? v.draft_tokens[d] : -1;
  const bool strict = pro.greedy || w.rule == static_cast<int32_t>(VerifyRule::kStrict);
  auto prob = [&](int i) {  // p_j of the i-th kept token, fp32 as the reference casts it
    return static_cast<float>(exp(static_cast<double>(detail::key_value(sh.sorted[i])) - static_cast<double>(zm)) /
                              kept_sum);
  };
  // Gumbel-max over the kept set with kind-2 noise at the row's position j; `score_of` gives the
  // base score of kept token i (or -inf to leave it out).
  auto correction = [&](auto&& score_of) {
    const uint32_t purpose = detail::purpose(detail::Draw::kCorrection, static_cast<uint32_t>(j));
    ArgMaxD local{0.0, -1};
    for (int i = tid; i < kept; i += Threads) {
      const double s = score_of(i);
      if (!(s > -INFINITY)) continue;
      const int32_t t = detail::key_token(sh.sorted[i]);
      const double g = early_correction ? sh.early.noise[i] : gumbel_exact(p.seed, step, purpose, t);
      local = better(local, ArgMaxD{s + g, t});
    }
    const int32_t out = block_best<Threads>(local, sh.temp.best).token;
    __syncthreads();  // the slots may be used again
    return out;
  };
  auto z_score = [&](int i) { return static_cast<double>(detail::key_value(sh.sorted[i])); };

  int32_t emit, stop;
  if (strict) {
    emit = token;
    stop = j == w.n || dj != token;
  } else if (j == w.n) {
    emit = correction(z_score);  // the bonus token: a kind-2 sample of p_n
    stop = 1;
  } else {
    // p_j(d_j): d_j's place in the kept set, if any (tokens are distinct: at most one thread
    // writes; sh.draft_at was reset before stage2_row's last barrier, so one barrier here).
    for (int i = tid; i < kept; i += Threads)
      if (detail::key_token(sh.sorted[i]) == dj) sh.draft_at = i;
    __syncthreads();
    const int at = sh.draft_at;
    const float pd = at >= 0 ? prob(at) : 0.0f;
    const float qd = draft_prob(v, w.rule, d, dj, dj);
    if (accepts(p.seed, step, j, pd, qd)) {
      emit = dj;
      stop = 0;
    } else {
      // The residual max(0, p - q) in fp32, sampled as argmax(log r + G); empty: a sample of p_j.
      emit = correction([&](int i) {
        const float rr = detail::sub_rn(prob(i), draft_prob(v, w.rule, d, dj, detail::key_token(sh.sorted[i])));
        return rr > 0.0f ? log(static_cast<double>(rr)) : -static_cast<double>(INFINITY);
      });
      if (emit < 0) emit = correction(z_score);
      stop = 1;
    }
  }
  // Rows that ask for ranks or the top N reach here only when the prefix decides them (stage2_row).
  if (asks_ranks(job.out, p)) write_prefix_ranks(job, r, pro, emit, kept, kept_sum, zm, sh);
  if (tid == 0) {
    if (job.out.logprob) job.out.logprob[r] = token_logprob(job, r, pro, k, emit, kept_sum, zm, sh);
    v.verdicts[r] = RowVerdict{emit, stop};
    if (job.out.status) job.out.status[r] = sh.nan ? kStatusNaN : 0;
    job.fast.exact_flags[r] = 0;
  }
}

}  // namespace sonic::cuda
