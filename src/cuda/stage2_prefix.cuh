// Stage 2's prefix: the row's candidates at or above its bound, raised to about the k + kTopKSlack
// largest for top-k rows, divided by T and sorted into the block's Stage2Shared (a true prefix of
// the row's total order: every token left out lies at or below it), with the sampling noise of
// its tokens drawn meanwhile in wide blocks.
#pragma once

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/gumbel_noise.cuh"
#include "cuda/stage2_merge.cuh"
#include "cuda/stage2_shared.cuh"
#include "cuda/timeline.cuh"

namespace sonic::cuda {

// A row's sampling noise: token t's is gumbel_exact(seed, step, purpose, t). Blocks wider than the
// fast kernel's compute it for the whole prefix in their idle warps while others sort it (on = true),
// into sh.early.noise, so that the draw after the decision is a reduction; short prefixes also get
// their masses against zm there (decided_by_warps). The sampling form draws it there as gumbel_fast
// instead (gather_prefix's FastNoise: the screened draw, fast_winner_rivalled).
struct SampleNoise {
  bool on;
  uint64_t seed;
  uint64_t step;
  uint32_t purpose;
  float zm;  // the row's largest z
};
template <int Threads>
constexpr bool kEarlyNoise = Threads > kFastThreads;

// Lanes that rank each key of a prefix of n keys in wide blocks (gather_prefix's rank_in_lanes):
// four where the 4n ranking lanes, the n threads of the noise and the n of the masses (decided_by_warps)
// fit the block (top-k 50: about 66 keys), two where 2n, n and n do (top-k 100: about 117 keys, which
// one thread a key ranked in a chain of 117 shared loads, 2.6 us of the mix's slowest row in
// v3.39's timeline).
template <int Threads>
__device__ __forceinline__ int rank_lanes(int n) {
  if (Threads <= kFastThreads) return 1;
  return 6 * n <= Threads ? 4 : 3 * n <= Threads ? 2 : 1;
}

// Whether stage2_row decides a prefix of n keys in two warps (warp 0 its sums and the decision,
// warp 1 the draw's winners: warp_prefix_mass, write_prefix_winners). Such a prefix also has its
// masses computed while it is sorted, one a thread by the threads between the ranking lanes and the
// noise's, so that warp 0's sums start from shared loads, not from a chain of double exps (four a
// lane, one after another: ptxas does not interleave exp's branches).
template <int Threads>
__device__ __forceinline__ bool decided_by_warps(int n) {
  // rank_lanes leaves (lanes + 2) n <= Threads for every such n: two lanes a key from 6n > Threads.
  static_assert(!kEarlyNoise<Threads> || 4 * kWarpPrefixKeys <= Threads, "a thread a key for the masses");
  return kEarlyNoise<Threads> && kWarpPrefixKeys > 0 && n <= kWarpPrefixKeys;
}

// A z key's mass against the row's maximum zm, exp(z - zm) in double: one expression for the
// prefix's sums (both routes of the decision), its mass check and the kept set's probabilities.
__device__ __forceinline__ double key_mass(unsigned long long zkey, float zm) {
  return exp(static_cast<double>(detail::key_value(zkey)) - static_cast<double>(zm));
}

// A lane's run of Threads / 32 bins (lane * Threads / 32 on, at bin_slot) into c, their total in
// own and the warp's inclusive sum of the totals in incl; returns the lanes whose incl reaches
// target (every lane of the warp calls it).
template <int Threads, class V>
__device__ __forceinline__ unsigned lane_bin_run(const V* bins, V target, int lane, V (&c)[Threads / 32], V& own,
                                                 V& incl) {
  constexpr int kPer = Threads / 32;
  own = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) own += (c[q] = bins[bin_slot<Threads>(lane * kPer + q)]);
  incl = warp_inclusive_sum(own);
  return __ballot_sync(0xFFFFFFFFu, incl >= target);
}

// Warp 0 (the whole block calls it): the first of Threads bins (bin b at bins[bin_slot(b)]) whose
// cumulative sum from bin 0 reaches target, b, gives *tau = mx - (b + 1 + extra) / scale, at least
// xb; with no such bin, *tau = xb. (A lane's total reaches the target where its bins' running sum,
// rounded otherwise, may not: its last bin is the default.)
template <int Threads, class V>
__device__ __forceinline__ void tau_at_bin(const V* bins, V target, int extra, float mx, float xb, float scale,
                                           float* tau) {
  const int lane = threadIdx.x;
  if (lane >= 32) return;
  constexpr int kPer = Threads / 32;
  V c[kPer], own, incl;
  const unsigned reach = lane_bin_run<Threads>(bins, target, lane, c, own, incl);
  if (!reach) {
    if (lane == 0) *tau = xb;
  } else if (lane == __ffs(reach) - 1) {
    V cum = incl - own;
    int b = lane * kPer + kPer - 1;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      cum += c[q];
      if (cum >= target) {
        b = lane * kPer + q;
        break;
      }
    }
    *tau = fmaxf(mx - static_cast<float>(b + 1 + extra) / scale, xb);
  }
}

// f(key, listed) over the row's candidates at or above the bound, whole warps at a time: from
// sh.gathered where they fit (in_smem), else read again out of line (for_each_listed), so f captures
// by copy what it reads.
template <int Threads, class F>
__device__ __forceinline__ void for_each_candidate(const RowJob& job, int32_t r, Stage2Shared<Threads>& sh, bool in_smem,
                                                   int n_bound, const F& f) {
  if (in_smem) {
    const int tid = threadIdx.x;
    for (int i = tid; i - (tid & 31) < n_bound; i += Threads) {
      const bool have = i < n_bound;
      f(have ? sh.gathered[i] : 0ull, have);
    }
  } else {
    for_each_listed(job, r, sh, f);
  }
}

// gather_prefix's histogram: a listed candidate into its bin below the row's maximum mx, counted, or
// weighed by its mass exp((x - mx) / T) (to_base2 = log2(e) / T).
template <int Threads>
__device__ __forceinline__ void bin_candidate(Stage2Shared<Threads>& sh, unsigned long long key, bool by_mass, float mx,
                                              float scale, float to_base2) {
  const float x = detail::key_value(key);
  const int b = bin_slot<Threads>(min(Threads - 1, static_cast<int>((mx - x) * scale)));
  if (by_mass) atomicAdd(&sh.bins.mass[b], exp2f((x - mx) * to_base2));
  else atomicAdd(&sh.bins.count[b], 1);
}

// gather_prefix's staged pass: a candidate's z key into sh.staged where it is listed and its z passes
// zl and cut (whole warps call it: warp_append).
template <int Threads>
__device__ __forceinline__ void stage_candidate(Stage2Shared<Threads>& sh, unsigned long long key, bool listed, float T,
                                                float zl, float cut, bool with_x) {
  const float z = detail::apply_temperature(detail::key_value(key), T);
  const unsigned long long zkey = detail::pack_key(z, detail::key_token(key));
  const bool keep = listed && z > zl && !(z < cut);
  warp_append(sh.staged, &sh.n, kGatherCap, zkey, keep, with_x ? sh.staged_x : nullptr, key);
}

// tau_at_bin's in every warp of a wide block at once (no barrier after it): the same bin, found
// without the reaching lane's loop of branches (its running sums, formed in the same order, never
// fall, so the first to reach the target is the count of those below it), its tau broadcast from
// that lane.
template <int Threads, class V>
__device__ __forceinline__ float warp_tau_at_bin(const V* bins, V target, int extra, float mx, float xb, float scale) {
  const int lane = threadIdx.x & 31;
  constexpr int kPer = Threads / 32;
  V c[kPer], own, incl;
  const unsigned reach = lane_bin_run<Threads>(bins, target, lane, c, own, incl);
  V cum = incl - own;
  int below = 0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    cum += c[q];
    below += cum < target;
  }
  const int b = lane * kPer + min(below, kPer - 1);
  const float t = fmaxf(mx - static_cast<float>(b + 1 + extra) / scale, xb);
  const float at = __shfl_sync(0xFFFFFFFFu, t, reach ? __ffs(reach) - 1 : 0);
  return reach ? at : xb;
}

// The same for mass bins, out of line: top-p-alone rows are rare, and inline its code lay between
// the pass and the count route, which jumped 3 KB over it.
template <int Threads>
__device__ __noinline__ float warp_tau_at_mass_bin(const float* bins, float target, float mx, float xb, float scale) {
  return warp_tau_at_bin<Threads>(bins, target, 1, mx, xb, scale);
}

// The histogram's pass (both block widths): each candidate at or above the bound counted, or its
// mass added, in its bin of distance below mx (Threads bins over [xb, mx], zeroed before), then the
// block's barrier. Returns the bins' scale, for the search that follows.
template <int Threads, class ForEach>
__device__ __forceinline__ float bin_listed_candidates(const ForEach& for_each_candidate, bool by_mass, float mx, float xb,
                                                       float T, Stage2Shared<Threads>& sh) {
  const float scale = static_cast<float>(Threads) / (mx - xb);
  const float to_base2 = 1.4426950408889634f / T;
  for_each_candidate([=, &sh](unsigned long long key, bool listed) {
    if (listed) bin_candidate(sh, key, by_mass, mx, scale, to_base2);
  });
  timeline_warp_arrive(kMarkThreshold);
  __syncthreads();
  return scale;
}

// gather_prefix's tau in wide blocks: a histogram of the candidates at or above the bound, by count
// (top-k rows) or by mass (top-p-alone rows), in bins that merge_row zeroed before the merge's
// barrier; after the pass each warp finds tau itself (warp_tau_at_bin). The narrow blocks' route
// (gather_prefix) zeroes the bins, and warp 0 finds tau for the others: three barriers where this
// has one. The same tau either way.
template <int Threads, class ForEach>
__device__ __forceinline__ float binned_tau(const ForEach& for_each_candidate, bool by_mass, int32_t target_count,
                                            float target_mass, float mx, float xb, float T, Stage2Shared<Threads>& sh) {
  static_assert(kEarlyNoise<Threads>, "wide blocks only: the narrow ones' code stays as validated");
  const float scale = bin_listed_candidates<Threads>(for_each_candidate, by_mass, mx, xb, T, sh);
  const float tau = by_mass ? warp_tau_at_mass_bin<Threads>(sh.bins.mass, target_mass, mx, xb, scale)
                            : warp_tau_at_bin<Threads>(sh.bins.count, target_count, 0, mx, xb, scale);
  timeline_stamp(kValueBinFound);
  return tau;
}

// Whether the histogram's bins, (mx - xb) / threads wide, span several float steps of mx. Narrower
// ones round tau onto or above tokens of the bin it names, which then leave the prefix (even the
// maximum): the row went to the exact path where the bound alone would have settled it.
__device__ __forceinline__ bool bins_resolve(float mx, float xb, int threads) {
  return mx - xb > static_cast<float>(threads) * 4.0f * 1.1920929e-7f * fabsf(mx);
}

// Sorts the staged keys sh.staged[0, n) into sh.sorted by rank (with their x where with_x, and
// each key's place in sh.early.rank in wide blocks). L lanes of one warp rank key i (lanes L i ..
// L i + L - 1, a quarter or a half of the keys each), the counts joined by shuffles, every lane of
// the block taking part in them; L = 1: a thread a key, in rounds.
template <int Threads, int L>
__device__ __forceinline__ void rank_prefix(Stage2Shared<Threads>& sh, int n, bool with_x) {
  const int tid = threadIdx.x;
  auto place = [&](int i, int pos) {
    sh.sorted[pos] = sh.staged[i];
    if (with_x) sh.sorted_x[pos] = sh.staged_x[i];
    if constexpr (kEarlyNoise<Threads>) sh.early.rank[i] = pos;
  };
  if constexpr (L > 1) {
    const int i = tid / L, part = tid % L;
    const unsigned long long key = i < n ? sh.staged[i] : ~0ull;
    int pos = 0;
    if (i < n)
      for (int j = part; j < n; j += L) pos += sh.staged[j] > key;
#pragma unroll
    for (int o = 1; o < L; o <<= 1) pos += __shfl_xor_sync(0xFFFFFFFFu, pos, o);
    if (i < n && part == 0) place(i, pos);
  } else {
    for (int i = tid; i < n; i += Threads) {
      const unsigned long long key = sh.staged[i];
      int pos = 0;
      for (int j = 0; j < n; ++j) pos += sh.staged[j] > key;
      place(i, pos);
    }
  }
}
template <int Threads>
__device__ __noinline__ void rank_prefix_out_of_line(Stage2Shared<Threads>& sh, int n, int lanes, bool with_x) {
  if (lanes == 2) rank_prefix<Threads, 2>(sh, n, with_x);
  else rank_prefix<Threads, 1>(sh, n, with_x);
}

// Whether the staged keys sh.staged[0, n) fall short of the mass need_mass against zm; if so, sets
// sh.n past kGatherCap (the exact path's mark). The whole block calls it; barriers on both sides.
template <int Threads>
__device__ __noinline__ bool staged_short_of_mass(Stage2Shared<Threads>& sh, int n, float zm, double need_mass) {
  const int tid = threadIdx.x;
  if (tid == 0) sh.staged_sum = 0.0;
  __syncthreads();
  double m = 0.0;
  for (int i = tid; i < n; i += Threads)
    m += key_mass(sh.staged[i], zm);
  m = warp_sum(m);
  if ((tid & 31) == 0) atomicAdd(&sh.staged_sum, m);
  __syncthreads();
  const bool short_of_mass = sh.staged_sum < need_mass;
  if (short_of_mass) {
    __syncthreads();  // every thread has read sh.n and sh.staged_sum
    if (tid == 0) sh.n = kGatherCap + 1;
    __syncthreads();
  }
  return short_of_mass;
}

// Wide blocks' staged pass over candidates held in shared memory, at most two a thread (n_bound <=
// 2 Threads: 740 at B = 1 and V = 151936): both of a thread's keys in one step, with one ballot pair
// and one atomic a warp (warp_append_batch), where the general pass took a step a key, about 60
// instructions each, and warps 0-7 two of them (perf-notes v3.66). Lanes past n_bound divide 0, not
// an empty slot's NaN, which div_rn's check sends to its slow path.
template <int Threads>
__device__ __forceinline__ void stage_pair(Stage2Shared<Threads>& sh, int n_bound, float T, float zl, float cut) {
  constexpr int kPer = 2;
  unsigned long long zkey[kPer];
  unsigned keep = 0;
#pragma unroll
  for (int b = 0; b < kPer; ++b) {
    const int i = static_cast<int>(threadIdx.x) + b * Threads;
    const bool have = i < n_bound;
    const unsigned long long key = have ? sh.gathered[i] : 0ull;
    const float z = detail::apply_temperature(have ? detail::key_value(key) : 0.0f, T);
    zkey[b] = detail::pack_key(z, detail::key_token(key));
    keep |= (have && z > zl && !(z < cut) ? 1u : 0u) << b;
  }
  warp_append_batch<kPer, AppendForm::kListing>(sh.staged, &sh.n, kGatherCap, zkey, keep);
}

// The general staged pass of wide blocks (candidates past shared memory, more than two a thread, or
// x keys to keep), out of line: inline, stage_pair's path jumped over it to the barrier. A key at
// or above the bound goes to sh.staged where its z passes zl and cut (gather_prefix's pass).
template <int Threads>
__device__ __noinline__ void stage_each_out_of_line(const RowJob& job, int32_t r, Stage2Shared<Threads>& sh, bool in_smem,
                                                    int n_bound, float T, float zl, float cut, bool with_x) {
  for_each_candidate(job, r, sh, in_smem, n_bound, [=, &sh](unsigned long long key, bool listed) {
    stage_candidate(sh, key, listed, T, zl, cut, with_x);
  });
}

// Gathers the row's sorted prefix into sh.sorted[0, sh.n) as z keys (z = x / T) and returns zl: every
// token outside the prefix has z <= zl < every z inside. Every token outside the candidate list lies
// below the row bound's value xb, so any tau >= xb gives a true prefix: the listed tokens with
// z > z(tau). With want > 0, tau rises so that about want + kTopKSlack keys remain (a histogram of
// the candidates' distances below the maximum mx); with need_mass > 0 (top-p alone) and many
// candidates, so that the keys left hold need_mass, by the same histogram weighted by each key's
// mass (then decide_kept, exact in double, finds the crossing in the prefix or leaves the row to
// the exact path); tokens below `cut` are left out as well. sh.n
// above kGatherCap means the prefix did not fit or, with need_mass > 0 (the least mass of the prefix,
// in units of exp(z - z(mx)), that can hold the kept set), that a long prefix that is not the whole
// row falls short of it: nothing is sorted then. The candidates at or above the bound are read from
// the list once, into shared memory, when they fit (the common case). With with_x, sh.sorted_x[i]
// holds the x key of sh.sorted[i].
// With FastNoise (wide blocks' sampling form) the early noise is gumbel_fast's, for the screened draw
// (fast_winner_rivalled): about a third of the exact noise's instructions, and the noise ends the
// sorted phase (perf-notes v3.46: noise drawn 1.6 us into a phase of 1.6-1.8).
template <int Threads, bool FastNoise = false>
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
  // for_each_candidate bound to this row (f captures by copy what it reads: see there).
  auto for_each_candidate = [&](const auto& f) { sonic::cuda::for_each_candidate(job, r, sh, in_smem, n_bound, f); };
  const float xb = bound ? detail::key_value(bound) : -INFINITY;
  float tau = xb;
  // Top-k rows keep about want + kTopKSlack keys. Top-p-alone rows with many candidates keep the
  // mass need_mass, 0.1 % more and one bin more for the float sums and the bins' edges: the screen's
  // bound leaves about 1100 at V = 151936, past kGatherCap, so such rows took the exact path where
  // their nucleus fits (bench/screen_model.cpp: peaked rows at T 0.7, top-p 0.9, nucleus 223 keys
  // on average, escape 36 of 40 times on main and none with this cut).
  const bool by_count = want > 0 && n_bound > want + kTopKSlack + 64;
  const bool by_mass = !by_count && need_mass > 0.0 && n_bound > kMassCutMin;
  if constexpr (kEarlyNoise<Threads>) {
    if ((by_count || by_mass) && bound && mx < INFINITY && bins_resolve(mx, xb, Threads))
      tau = binned_tau<Threads>(for_each_candidate, by_mass, want + kTopKSlack, static_cast<float>(need_mass) * 1.001f,
                                mx, xb, T, sh);
  } else if ((by_count || by_mass) && bound && mx < INFINITY && bins_resolve(mx, xb, Threads)) {
    if (by_mass) sh.bins.mass[bin_slot<Threads>(tid)] = 0.0f;
    else sh.bins.count[bin_slot<Threads>(tid)] = 0;
    __syncthreads();
    const float scale = bin_listed_candidates<Threads>(for_each_candidate, by_mass, mx, xb, T, sh);
    if (by_mass) tau_at_bin<Threads>(sh.bins.mass, static_cast<float>(need_mass) * 1.001f, 1, mx, xb, scale, &sh.tau);
    else tau_at_bin<Threads>(sh.bins.count, want + kTopKSlack, 0, mx, xb, scale, &sh.tau);
    timeline_stamp(kValueBinFound);
    __syncthreads();
    tau = sh.tau;
  }
  timeline_mark(kMarkThreshold);
  const float zl = tau > -INFINITY ? detail::apply_temperature(tau, T) : -INFINITY;
  if constexpr (kEarlyNoise<Threads>) {
    if (in_smem && !with_x && n_bound <= 2 * Threads) stage_pair(sh, n_bound, T, zl, cut);
    else stage_each_out_of_line(job, r, sh, in_smem, n_bound, T, zl, cut, with_x);
  } else {
    for_each_candidate([=, &sh](unsigned long long key, bool listed) {
      stage_candidate(sh, key, listed, T, zl, cut, with_x);
    });
  }
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
    if (staged_short_of_mass(sh, n, zm, need_mass)) return zl;
  }
  if (n <= kGatherCap) {
    // Sort by rank: keys are distinct, so each key's rank is the number of larger keys. A wide block
    // with a short prefix (the common case: about 70 keys) counts each rank in four lanes and leaves
    // its last n threads to the noise below; its other forms are out of line (stage2_shared.cuh).
    const int lanes = rank_lanes<Threads>(n);
    if (lanes == 4) rank_prefix<Threads, 4>(sh, n, with_x);
    else if constexpr (kEarlyNoise<Threads>) rank_prefix_out_of_line(sh, n, lanes, with_x);
    else rank_prefix<Threads, 1>(sh, n, with_x);  // the fast kernel's blocks: always one lane, inline
    // Meanwhile the block's last n threads (the prefix is short: about 70 keys, so the sort takes
    // the first 4n) draw every prefix token's noise, the draw's long dependent chain, and for prefixes
    // decided by two warps the n threads after the ranking lanes the keys' masses.
    if constexpr (kEarlyNoise<Threads>)
      if (noise.on) {
        for (int i = Threads - 1 - tid; i < n; i += Threads) {
          const int32_t t = detail::key_token(sh.staged[i]);
          if constexpr (FastNoise) sh.early.staged_noise[i] = gumbel_fast(noise.seed, noise.step, noise.purpose, t);
          else sh.early.staged_noise[i] = gumbel_exact(noise.seed, noise.step, noise.purpose, t);
        }
        const int i = tid - lanes * n;
        if (decided_by_warps<Threads>(n) && i >= 0 && i < n) sh.early.staged_mass[i] = key_mass(sh.staged[i], noise.zm);
#if SONIC_TIMELINE
        if (Threads - 32 * (tid / 32 + 1) < n)  // the warp has noise threads: the last to draw
          timeline_warp_point(kPointNoiseDrawn,
                              __ballot_sync(0xFFFFFFFFu, Threads - 1 - tid < n && sh.early.staged_noise[Threads - 1 - tid] > 0.0));
#endif
      }
  }
  timeline_warp_arrive(kMarkGathered);
  __syncthreads();
  return zl;
}

// Wide blocks: the early noise of a sorted prefix of n keys (n <= kGatherCap) into sorted order,
// sh.early.noise, by threads first, first + stride, ... (a barrier or __syncwarp before it is read).
// Rolled, as write_prefix_winners' loops, for the same reason.
template <int Threads>
__device__ __forceinline__ void sort_noise(Stage2Shared<Threads>& sh, int n, int first, int stride) {
#pragma unroll 1
  for (int i = first; i < n; i += stride) sh.early.noise[sh.early.rank[i]] = sh.early.staged_noise[i];
}

// decide_kept's two searches over the sorted prefix sh.sorted[0, n) (z descending) and its sums
// sh.cum: count_at_least(c), the number of keys whose z reaches c; crossing(target, lim), the first
// index below lim (<= n) whose sum reaches target, or lim. ThreadPrefixSearch: one thread, by binary
// search, a chain of dependent shared loads (the fast kernel's stage 2).
template <int Threads>
struct ThreadPrefixSearch {
  const Stage2Shared<Threads>& sh;
  int n;
  __device__ __forceinline__ int count_at_least(float c) const {
    int lo = 0, hi = n;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (detail::key_value(sh.sorted[mid]) >= c) lo = mid + 1; else hi = mid;
    }
    return lo;
  }
  __device__ __forceinline__ int crossing(double target, int lim) const {
    int lo = 0, hi = lim;
    while (lo < hi) {
      const int mid = (lo + hi) >> 1;
      if (sh.cum[mid] >= target) hi = mid; else lo = mid + 1;
    }
    return lo;
  }
};

// The same searches by a whole warp (wide blocks): 32 keys a ballot, in order (about 70 keys: three
// ballots). The count is the binary search's; the crossing is the first index whose sum reaches the
// target, which is the binary search's wherever the sums do not step down (a scan's rounding can,
// by an ulp).
template <int Threads>
struct WarpPrefixSearch {
  const Stage2Shared<Threads>& sh;
  int n;
  __device__ __forceinline__ int count_at_least(float c) const {
    const int lane = threadIdx.x & 31;
    int count = 0;
    for (int i0 = 0; i0 < n; i0 += 32) {
      const int i = i0 + lane;
      const unsigned at_least = __ballot_sync(0xFFFFFFFFu, i < n && detail::key_value(sh.sorted[i]) >= c);
      count += __popc(at_least);
      if (at_least != 0xFFFFFFFFu) break;  // z descends: none further
    }
    return count;
  }
  __device__ __forceinline__ int crossing(double target, int lim) const {
    const int lane = threadIdx.x & 31;
    for (int i0 = 0; i0 < lim; i0 += 32) {
      const int i = i0 + lane;
      const unsigned reach = __ballot_sync(0xFFFFFFFFu, i < lim && sh.cum[i] >= target);
      if (reach) return i0 + __ffs(reach) - 1;
    }
    return lim;
  }
};

// Warp 0, for a prefix of n <= kWarpPrefixKeys keys: sh.cum, its inclusive masses exp(z - zm) in
// double, in four keys a lane and one warp scan, where the block scan took a scan in each warp, a
// barrier and the warps' totals (0.39 us in a 512-thread block, perf-notes v3.20). The masses are
// gather_prefix's (decided_by_warps), moved into sorted order first (into sh.cum, which shares the
// staged keys' storage: they are read no more). A __syncwarp before sh.cum is read.
template <int Threads>
__device__ __forceinline__ void warp_prefix_mass(Stage2Shared<Threads>& sh, int n) {
  static_assert(kEarlyNoise<Threads>, "the early masses");
  constexpr int kPer = kWarpPrefixKeys > 0 ? kWarpPrefixKeys / 32 : 1;
  const int first = (threadIdx.x & 31) * kPer;
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (first + q < n) sh.cum[sh.early.rank[first + q]] = sh.early.staged_mass[first + q];
  __syncwarp();
  double e[kPer];
  double own = 0.0;
#pragma unroll
  for (int q = 0; q < kPer; ++q) {
    const int i = first + q;
    own += i < n ? sh.cum[i] : 0.0;
    e[q] = own;
  }
  const double incl = warp_inclusive_sum(own);
  double before = __shfl_up_sync(0xFFFFFFFFu, incl, 1);
  if (first == 0) before = 0.0;
#pragma unroll
  for (int q = 0; q < kPer; ++q)
    if (first + q < n) sh.cum[first + q] = before + e[q];
  timeline_warp_point(kPointMassesSummed, static_cast<unsigned>(__double2loint(before + e[kPer - 1])));
}

// The draw's score of the sorted prefix's i-th key, z + its Gumbel noise in double (drawn early by
// wide blocks, else now; noise_now draws it now in any block), exactly as the reference draws it,
// with its token (in the screened draw's form the early noise is gumbel_fast's: see
// fast_winner_rivalled). One expression for the draw, the margin band and the winners, so that they
// agree.
template <int Threads>
__device__ __forceinline__ ArgMaxD prefix_draw(const Stage2Shared<Threads>& sh, uint64_t seed, uint64_t step,
                                               uint32_t purpose, int i, bool noise_now = !kEarlyNoise<Threads>) {
  const int32_t t = detail::key_token(sh.sorted[i]);
  const double g = noise_now ? gumbel_exact(seed, step, purpose, t) : sh.early.noise[i];
  return ArgMaxD{static_cast<double>(detail::key_value(sh.sorted[i])) + g, t};
}
// Wide blocks, whose noise is in sh.early.noise: the same without the noise's key.
template <int Threads>
__device__ __forceinline__ ArgMaxD prefix_draw(const Stage2Shared<Threads>& sh, int i) {
  static_assert(kEarlyNoise<Threads>, "the early noise");
  return prefix_draw(sh, 0, 0, 0, i);
}

// Wide blocks, one warp, while warp 0 decides the kept set: sh.early.winner[i] gets the token
// that wins the draw over the sorted prefix's first i + 1 keys (prefix_draw's scores),
// so that the draw after the decision is one shared load whatever the kept size, where a block
// reduction (a barrier and two warp butterflies) ended the row's chain. The winner of a total order
// is the same in any order of comparison. Each lane takes a run of keys: its run's best, a warp scan
// of the runs, then the run again from the lanes before it. Its loops stay rolled: one warp runs
// this code once a row, and such code costs time by its count of instructions (perf-notes v3.47:
// rolled, 456 fewer instructions, the winners were written 0.38 us sooner). In the sampling form
// the early noise is gumbel_fast's, and with Screened the second loop also screens the draw for
// every kept size at once: sh.early.rival is set where some key's fast score
// comes within fast_noise_near of the best fast score before it. Without such a key no kept size
// has a rival (fast_winner_rivalled's sense): a rival j of k's winner w lies after w, so the best
// before j is w's score and j's is within the reach below it, or before w, so w's score is at most
// the reach above the best before w (which holds j's). A row with one draws again with the exact
// noise after the decision; the screen costs the loop a subtraction, a fused multiply-add and a
// compare a key, where a check after the decision cost the sampled phase its fetch (v3.51-v3.52).
template <int Threads, bool Screened = false>
__device__ __forceinline__ void write_prefix_winners(Stage2Shared<Threads>& sh, int n) {
  static_assert(kEarlyNoise<Threads>, "the early noise, in sorted order");
  const int lane = threadIdx.x & 31;
  const int per = (n + 31) >> 5;
  const int begin = min(n, lane * per), end = min(n, begin + per);
  auto draw = [&](int i) { return prefix_draw(sh, i); };
  ArgMaxD run{0.0, -1};
#pragma unroll 1
  for (int i = begin; i < end; ++i) run = better_select(run, draw(i));
#pragma unroll 1
  for (int o = 1; o < 32; o <<= 1) {
    const ArgMaxD up{__shfl_up_sync(0xFFFFFFFFu, run.score, o), __shfl_up_sync(0xFFFFFFFFu, run.token, o)};
    run = better_select(run, up);  // lanes below o get their own pair back: no change
  }
  ArgMaxD best{__shfl_up_sync(0xFFFFFFFFu, run.score, 1), __shfl_up_sync(0xFFFFFFFFu, run.token, 1)};
  if (lane == 0) best.token = -1;
  bool near = false;
#pragma unroll 1
  for (int i = begin; i < end; ++i) {
    const ArgMaxD d = draw(i);
    if constexpr (Screened) near |= (best.token >= 0) & (fabs(d.score - best.score) <= fast_noise_near(best.score));
    best = better_select(best, d);
    sh.early.winner[i] = best.token;
  }
  if constexpr (Screened) {
    const bool any = __any_sync(0xFFFFFFFFu, near);
    if (lane == 0) sh.early.rival = any;
  }
}

// The whole block: the Gumbel-max winner over the sorted prefix's first `kept` keys with the exact
// noise drawn now (prefix_draw's noise_now): narrow blocks' draw, and the screened draw's fallback.
template <int Threads>
__device__ __forceinline__ int32_t kept_winner_noise_now(Stage2Shared<Threads>& sh, uint64_t seed, uint64_t step,
                                                         uint32_t purpose, int kept) {
  ArgMaxD local{0.0, -1};
  for (int i = threadIdx.x; i < kept; i += Threads) local = better(local, prefix_draw(sh, seed, step, purpose, i, true));
  return block_best<Threads>(local, sh.temp.best).token;
}

// The screened draw (wide blocks' sampling form, whose early noise is gumbel_fast's), after the
// decision, in every warp alike: whether the fast noise's winner of the kept set might not be the
// exact noise's, another kept key's fast score coming within fast_noise_reach of the winner's. It
// reads write_prefix_winners' screen, which covers every kept size at once: it may send a row
// without such a rival to the exact noise (a key near the best before it, outside the kept set:
// about a row in a thousand) but never passes one with a rival. Checks of the one kept set after
// the decision cost more than they saved: their code's fetch, and an out-of-line loop for rows of
// more than 32 kept keys (perf-notes v3.51-v3.53; git has those forms in
// docs/experiments/screened-after.patch at d900c23).
template <int Threads>
__device__ __forceinline__ bool fast_winner_rivalled(const Stage2Shared<Threads>& sh) {
  static_assert(kEarlyNoise<Threads>, "the early noise, in sorted order");
  return sh.early.rival != 0;
}

// The screened draw's fallback (wide blocks, the whole block, after the decision): the winner over
// the sorted prefix's first `kept` keys with the exact noise, for a row the screen flags (two of
// its prefix's scores within about 2^-15: a row in a thousand or fewer). Out of line: the common row
// never runs it.
template <int Threads>
__device__ __noinline__ int32_t exact_prefix_winner(Stage2Shared<Threads>& sh, uint64_t seed, uint64_t step,
                                                    uint32_t purpose, int kept) {
  return kept_winner_noise_now<Threads>(sh, seed, step, purpose, kept);
}

}  // namespace sonic::cuda
