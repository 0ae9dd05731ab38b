// Stage 2's first phase: the row's chunk statistics (TileStat) merged into the block's Stage2Shared
// by warp 0, and the reading of the chunks' candidate lists that stage 1 wrote: listed at or above
// the row's bound while the statistics are merged (wide blocks), or batch by batch afterwards.
#pragma once

#include <climits>

#include "cuda/row_job.cuh"
#include "cuda/row_kind.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/stage2_shared.cuh"
#include "cuda/timeline.cuh"
#include "cuda/warp_reduce.cuh"

namespace sonic::cuda {

// A chunk's statistics, read 16 bytes at a time.
__device__ __forceinline__ TileStat load_stat(const TileStat* p) {
  TileStat t;
  const uint4* src = reinterpret_cast<const uint4*>(p);
  uint4* dst = reinterpret_cast<uint4*>(&t);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(TileStat) / 16); ++i) dst[i] = __ldcg(src + i);  // L2: other blocks wrote it
  return t;
}

// s 2^d for an integer d <= 0, exactly (a power of two built from its exponent bits); 0 below the
// doubles' normal range, where a term is under 2^-1022 of the row's largest and counts for nothing.
__device__ __forceinline__ double scaled_by_pow2(float s, int d) {
  return d >= -1022 ? static_cast<double>(s) * __hiloint2double((1023 + d) << 20, 0) : 0.0;
}

// Which of a chunk's sums merged_sum reads: the processed logits' (sum, relative to its maximum
// key) or the raw logits' (raw_sum, relative to raw_max).
enum class ChunkSum { kProcessed, kRaw };

// Warp 0: the row's sum of 2^((x - m) c) = exp((x - m) / T) in double, from its chunks' sums (two a
// lane, t[h] where have[h]), m the row's maximum. Chunk h's sum is of 2^(x c - K_h), K_h =
// sum_scale(its maximum, c) as stage 1 formed it, an integer; the row's K = sum_scale(m, c) is the
// largest K_h. Each chunk's sum is rescaled to K by the exact power of two 2^(K_h - K), and the
// warp's total by 2^(K - m c) once (m c and K - m c exact in double, K - m c in [0, 1)): one double
// exp2 a row on warp 0's chain, where each lane took one a chunk, two in series.
// (Rows with |m c| >= kSumScaleLimit, whose terms may have overflowed or underflowed, take the exact
// path: stage2_row.cuh.) 0 where m is not finite.
template <ChunkSum S>
__device__ __forceinline__ double merged_sum(const TileStat (&t)[2], const bool (&have)[2], float m, float c) {
  int kh[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const bool on = have[h] && (S == ChunkSum::kProcessed ? t[h].max_key != 0 : t[h].raw_max > -INFINITY);
    kh[h] = on ? static_cast<int>(sum_scale(S == ChunkSum::kProcessed ? detail::key_value(t[h].max_key) : t[h].raw_max, c))
               : INT_MIN;
  }
  const int K = warp_max(max(kh[0], kh[1]));
  double part = 0.0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (kh[h] != INT_MIN) part += scaled_by_pow2(S == ChunkSum::kProcessed ? t[h].sum : t[h].raw_sum, kh[h] - K);
  const double scale = exp2(static_cast<double>(K) - static_cast<double>(m) * static_cast<double>(c));
  const double total = warp_sum(part);
  return m > -INFINITY && m < INFINITY ? total * scale : 0.0;
}

// Warp 0 merges the row's chunk statistics into `sh` (at most 64 chunks, two a lane), with where
// each chunk's candidates lie in the row's list. Wide blocks (row_stage2_kernel) take the short
// chain: the chunks' counts as they are (sh.cand_count; a REDUX for their total), which took warp
// 0's end of the merge phase from 2.30 to 1.63 us at B = 1 on homogeneous rows (no sums), and the
// sums of rows that need them by merged_sum (the mix: 2.72 -> 1.92, perf-notes v3.60). The fast
// kernel's block keeps the offsets' warp scan (sh.cand_off) and an exp2 a chunk: the same change
// there moved ptxas's schedule of stage 1's screen, +0.1 to +0.3 us a call at B <= 8, where the
// fast kernel runs no stage 2 at all (v3.60).
template <int Threads>
__device__ __forceinline__ void merge_tiles(const RowJob& job, int32_t r, const RowKind& k, Stage2Shared<Threads>& sh) {
  constexpr bool kWide = Threads > kFastThreads;
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
  // Wide blocks' warps stamp the merge's points (timeline.cuh; nothing outside the timeline build).
  // "Statistics in" waits for a word of each of a chunk's three 16-byte pieces, not only the count's:
  // the reductions need them all. (Under #if: even dead, the loop moved ptxas's allocation.)
#if SONIC_TIMELINE
  if constexpr (kWide) {
    unsigned seen = 0;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (have[h])
        seen ^= static_cast<unsigned>(t[h].max_key >> 32) ^ static_cast<unsigned>(t[h].bound) ^ __float_as_uint(t[h].sum) ^
                __float_as_uint(t[h].raw_sum) ^ static_cast<unsigned>(t[h].count);
    timeline_warp_point(kPointStatsIn, seen);
  }
#endif
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
      if (!kWide || k.untruncated) win = better(win, ArgMaxF{t[h].win_score, t[h].win_token});
      if constexpr (kWide) sh.cand_count[lane + 32 * h] = t[h].count;
    }
  // Only the reductions the row reads (stage2_row.cuh): the merge phase ends with warp 0 (v3.43),
  // and this took 0.3 us off B = 1 and 0.7-1.0 off the mix at B = 512 (v3.44). The winner is read
  // by untruncated rows alone, the raw maximum in the raw logprob mode alone; the sums' lanes hold
  // 0 where the row needs no sum, which is then their total too.
  max_key = warp_max(max_key);
  bound = warp_max(bound);
  valid = warp_sum(valid);
  nan = __any_sync(0xFFFFFFFFu, nan);
  int n_all = 0;
  if constexpr (kWide) n_all = warp_sum(count[0] + count[1]);
  if (job.mode == LogprobMode::kRaw) raw_max = warp_max(raw_max);
  if (k.untruncated) win = warp_best(win);
  if constexpr (kWide)
    timeline_warp_point(kPointMaxima, static_cast<unsigned>(max_key ^ bound) ^ static_cast<unsigned>(valid + nan + win.token) ^
                                          __float_as_uint(raw_max));
  if constexpr (!kWide) {
    const int incl0 = warp_inclusive_sum(count[0]);
    const int total0 = __shfl_sync(0xFFFFFFFFu, incl0, 31);
    const int incl1 = warp_inclusive_sum(count[1]);
    if (have[0]) sh.cand_off[lane] = incl0 - count[0];
    if (have[1]) sh.cand_off[lane + 32] = total0 + incl1 - count[1];
    n_all = total0 + __shfl_sync(0xFFFFFFFFu, incl1, 31);
  }
  if constexpr (kWide) timeline_warp_point(kPointCounted, static_cast<unsigned>(n_all));
  const float m = max_key ? detail::key_value(max_key) : -INFINITY;
  double sum = 0.0, raw_sum = 0.0;
  if constexpr (kWide) {
    sum = k.need_sum ? merged_sum<ChunkSum::kProcessed>(t, have, m, sum_base2(k.inv_t)) : 0.0;
    raw_sum = k.need_raw ? merged_sum<ChunkSum::kRaw>(t, have, raw_max, sum_base2(1.0f)) : 0.0;
  } else {
    // A chunk's sum is of 2^(x c - K), K = sum_scale(its maximum, c) as stage 1 formed it: times
    // 2^(K - m c), in double (m c exact there, the difference within a double rounding), it becomes the sum
    // of exp((x - m) / T) = 2^((x - m) c) over the chunk. (Rows with |m c| >= kSumScaleLimit, whose
    // terms may have overflowed or underflowed, take the exact path: stage2_row.cuh.)
    const float c = sum_base2(k.inv_t), c_raw = sum_base2(1.0f);
#pragma unroll
    for (int h = 0; h < 2; ++h)
      if (have[h]) {
        if (k.need_sum && t[h].max_key && m > -INFINITY && m < INFINITY) {
          const float kh = sum_scale(detail::key_value(t[h].max_key), c);
          sum += static_cast<double>(t[h].sum) * exp2(static_cast<double>(kh) - static_cast<double>(m) * static_cast<double>(c));
        }
        if (k.need_raw && t[h].raw_max > -INFINITY && raw_max < INFINITY) {
          const float kh = sum_scale(t[h].raw_max, c_raw);
          raw_sum += static_cast<double>(t[h].raw_sum) *
                     exp2(static_cast<double>(kh) - static_cast<double>(raw_max) * static_cast<double>(c_raw));
        }
      }
    if (k.need_sum) sum = warp_sum(sum);
    if (k.need_raw) raw_sum = warp_sum(raw_sum);
  }
  if constexpr (kWide)
    timeline_warp_point(kPointSums, static_cast<unsigned>(__double2loint(sum + raw_sum)) ^ static_cast<unsigned>(n_all));
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
    if constexpr (!kWide) sh.n_bound = 0;  // wider blocks list while this merges
    sh.n = 0;
    // Every chunk of the row is done: reset its counter for the next call.
    job.fast.tiles_done[r] = 0;
  }
}

// The larger bound of the lane's two chunks (lanes l and l + 32; 0 past the row's chunks): a listing
// warp's first load, reduced over the warp (warp_max) once its other loads are issued.
__device__ __forceinline__ unsigned long long lane_bound(const TileStat* stats, int32_t chunks, int lane) {
  unsigned long long bound = 0;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    if (lane + 32 * h < chunks) bound = max(bound, __ldcg(&stats[lane + 32 * h].bound));
  return bound;
}

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
  unsigned long long bound = lane_bound(stats, chunks, lane);
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
  timeline_warp_point(kPointRunsIn, static_cast<unsigned>(total) ^ static_cast<unsigned>(bound));
  const unsigned long long* list = job.fast.cands + static_cast<int64_t>(r) * job.fast.cand_stride;
  for (int base = lane; base - lane < total; base += 32 * kBatch) {
    unsigned long long key[kBatch];
    unsigned listed = 0;
    load_run_batch(list, end, at, total, base, key);
    if (base == lane) {
      timeline_warp_point(kPointKeysIn, static_cast<unsigned>(key[0]));
      timeline_warp_point(kPointBatchIn, timeline_fold(key));
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) listed |= (kept_by(key[b], bound) ? 1u : 0u) << b;
    warp_append_batch<kBatch, AppendForm::kListing>(sh.gathered, &sh.n_bound, kBoundCap, key, listed, base == lane);
    if (base == lane) timeline_warp_point(kPointAppended, listed);
  }
}

// A listing warp's keys [from, count) of one chunk at or above the bound, appended to
// sh.gathered in batches (list_chunks_ahead's chunks past its window: rare at B <= 8).
template <int Threads>
__device__ __noinline__ void list_chunk_tail(const unsigned long long* chunk, int from, int count, unsigned long long bound,
                                             Stage2Shared<Threads>& sh) {
  constexpr int kBatch = 4;
  const int lane = threadIdx.x & 31;
  for (int base = from; base < count; base += 32 * kBatch) {
    unsigned long long more[kBatch];
    unsigned keep = 0;
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int j = base + lane + 32 * b;
      more[b] = j < count ? __ldcg(chunk + j) : 0ull;
      keep |= (j < count && kept_by(more[b], bound) ? 1u : 0u) << b;
    }
    warp_append_batch<kBatch, AppendForm::kListing>(sh.gathered, &sh.n_bound, kBoundCap, more, keep);
  }
}

// Wide blocks, rows of more chunks than listing warps (merge_row says which): warp w lists chunks
// w, w + kWarps, ... (Runs of them at most). In the round trip that brings the row's bound and the
// chunks' counts, each lane also loads the first Ahead keys of each of its warp's chunks, 32 Ahead
// a chunk (slots past a chunk's count hold zeros or keys of earlier calls, which the count masks),
// so that a chunk's keys do not wait for its count: that second round trip was 1.1 µs of the merge
// phase at B = 1 (v3.43's timeline). Keys past the window follow in batches. sh.n_bound must be 0
// before.
template <int Threads, int Runs, int Ahead>
__device__ __forceinline__ void list_chunks_ahead(const RowJob& job, int32_t r, Stage2Shared<Threads>& sh) {
  constexpr int kWarps = Threads / 32 - 1;
  constexpr int kWindow = 32 * Ahead;
  const int warp = threadIdx.x / 32 - 1, lane = threadIdx.x & 31;
  const int32_t chunks = job.fast.chunks;
  const TileStat* stats = job.fast.stats + static_cast<int64_t>(r) * chunks;
  const int64_t capacity = job.fast.chunk_capacity;
  const unsigned long long* list = job.fast.cands + static_cast<int64_t>(r) * job.fast.cand_stride;
  unsigned long long bound = lane_bound(stats, chunks, lane);
  int count[Runs];  // the same in every lane (one address a warp)
  unsigned long long key[Runs * Ahead];
#pragma unroll
  for (int q = 0; q < Runs; ++q) {
    const int c = warp + q * kWarps;
    count[q] = c < chunks ? __ldcg(&stats[c].count) : 0;
#pragma unroll
    for (int a = 0; a < Ahead; ++a) {
      const int j = lane + 32 * a;
      key[q * Ahead + a] = c < chunks && j < capacity ? __ldcg(list + c * capacity + j) : 0ull;
    }
  }
  bound = warp_max(bound);
  timeline_warp_point(kPointRunsIn, static_cast<unsigned>(count[0]) ^ static_cast<unsigned>(bound));
  timeline_warp_point(kPointKeysIn, static_cast<unsigned>(key[0]));
  timeline_warp_point(kPointBatchIn, timeline_fold(key));
  unsigned listed = 0;
#pragma unroll
  for (int q = 0; q < Runs; ++q)
#pragma unroll
    for (int a = 0; a < Ahead; ++a)
      listed |= (lane + 32 * a < count[q] && kept_by(key[q * Ahead + a], bound) ? 1u : 0u) << (q * Ahead + a);
  warp_append_batch<Runs * Ahead, AppendForm::kListing>(sh.gathered, &sh.n_bound, kBoundCap, key, listed, true);
  timeline_warp_point(kPointAppended, listed);
  // A chunk of more keys than the window lists the rest out of line: inline, each chunk's tail loop
  // was a taken jump over its body on the common path, three instruction fetches in series after
  // the append (perf-notes v3.62).
#pragma unroll
  for (int q = 0; q < Runs; ++q)
    if (count[q] > kWindow) list_chunk_tail(list + (warp + q * kWarps) * capacity, kWindow, count[q], bound, sh);
}

// Warp 0 merges the row's chunk statistics into `sh`; in wide blocks the other warps list the
// candidates at or above the bound meanwhile (list_chunks_ahead or list_while_merging), in the
// fast kernel's block gather_prefix lists them later. The whole block calls it; it ends with a
// barrier.
template <int Threads>
__device__ __forceinline__ void merge_row(const RowJob& job, int32_t r, const RowKind& k, Stage2Shared<Threads>& sh) {
  if constexpr (Threads > kFastThreads) {
    if (threadIdx.x == 0) sh.n_bound = 0;
    // gather_prefix's histogram (binned_tau), zeroed here so that its pass needs no barrier before it:
    // one store a thread in every row, histogram or not; zero bits are 0.0f for the mass bins too.
    sh.bins.count[bin_slot<Threads>(threadIdx.x)] = 0;
    __syncthreads();
    // Rows of two or three chunks a listing warp (38 at B <= 8, V = 151936) load each chunk's
    // first 64 keys with its count (list_chunks_ahead): -0.4 to -0.7 us there (v3.44). Rows of
    // fewer chunks hold more keys a chunk than the window, and the form lost 0.3 us at B = 32 and
    // 64 (16 and 8 chunks, top-k suite), so they list as the counts come in: the one-run form
    // where a warp takes at most one chunk, whose loads need not compare with other runs' ends.
    constexpr int kWarps = Threads / 32 - 1;
    const int32_t chunks = job.fast.chunks;
    if (threadIdx.x >= 32) {
      if (chunks > 2 * kWarps && chunks <= 3 * kWarps) list_chunks_ahead<Threads, 3, 2>(job, r, sh);
      else if (chunks <= kWarps) list_while_merging<Threads, 1>(job, r, sh);
      else list_while_merging<Threads, (kMaxChunks + kWarps - 1) / kWarps>(job, r, sh);
    } else {
      merge_tiles(job, r, k, sh);
    }
  } else {
    if (threadIdx.x < 32) merge_tiles(job, r, k, sh);
  }
  timeline_warp_arrive(kMarkMerged);
  __syncthreads();
}

// Calls g(key) with key[N] for the row's candidates, in batches of independent loads (0: past the
// end); the lanes of a warp call it together. The row's candidates are its chunks' one after the
// other. In the fast kernel's block a thread's indices grow by 128, about one chunk at B = 1 (about
// 100 candidates a chunk), so it finds their chunks by walking forward over the offsets
// (sh.cand_off). Wider blocks give each warp whole chunks instead (warp w takes
// chunks w, w + Warps, ..., at most kMaxChunks / Warps of them): the warp's candidates are those
// chunks' runs one after the other, and a lane finds its item's run by comparing with the few
// running ends it holds in registers (a block-wide search over the chunks' offsets in shared memory
// cost 4.4 us at B = 1, most of it the search's dependent shared loads).
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
      if (c < chunks) total += sh.cand_count[c];
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
// above the row's bound; the lanes of a warp call it together (four loads in flight a thread). Out
// of line (kept off the common row's path: stage2_shared.cuh), so f captures by copy what it reads:
// its captures are the call's argument.
template <int Threads, class F>
__device__ __noinline__ void for_each_listed(const RowJob& job, int32_t r, const Stage2Shared<Threads>& sh, F f) {
  const unsigned long long bound = sh.bound;
  for_each_listed_batch<4>(job, r, sh, [&](const unsigned long long (&key)[4]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) f(key[b], kept_by(key[b], bound));
  });
}

}  // namespace sonic::cuda
