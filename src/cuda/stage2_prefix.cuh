// Stage 2's prefix: the row's candidates at or above its bound, raised to about the k + kTopKSlack
// largest for top-k rows, divided by T and sorted into the block's Stage2Shared (a true prefix of
// the row's total order: every token left out lies at or below it), with the sampling noise of
// its tokens drawn meanwhile in wide blocks.
#pragma once

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/stage2_merge.cuh"
#include "cuda/stage2_shared.cuh"
#include "cuda/timeline.cuh"
#include "cuda/verify_row.cuh"  // gumbel_exact

namespace sonic::cuda {

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

}  // namespace sonic::cuda
