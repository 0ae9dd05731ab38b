// Block-wide exact selection: the k-th largest packed key (by count), or the largest key at which
// the cumulative weight in key order reaches a target (by mass). Most significant digit first, 8
// bits a pass, histogram in shared memory, the bucket found by a block scan. Integer atomics only,
// so the answer never depends on the order in which threads add.
#pragma once

#include <cub/block/block_scan.cuh>

#include <cstdint>

#include "cuda/block_pass.cuh"

namespace sonic::cuda {

// Adds w to a 64-bit counter kept as two 32-bit words in shared memory (lo[i], hi[i]) with native
// atomics: sm_90 has no native 64-bit shared-memory atomicAdd (it compiles to a compare-and-swap
// loop). The low word, then its carry (one wrap of the low word is exactly one carry, whatever the
// order of the adds) and the high word, when nonzero.
__device__ __forceinline__ void add_split_u64(uint32_t* lo, uint32_t* hi, int i, unsigned long long w) {
  const uint32_t w_lo = static_cast<uint32_t>(w), old = atomicAdd(&lo[i], w_lo);
  const uint32_t up = static_cast<uint32_t>(w >> 32) + (old + w_lo < old ? 1u : 0u);
  if (up) atomicAdd(&hi[i], up);
}

template <int BLOCK>
struct BlockSelect {
  static_assert(BLOCK >= 256, "one thread per histogram bin");
  static constexpr int kBins = 256;
  using Scan = cub::BlockScan<unsigned long long, BLOCK>;
  static constexpr int kKeysInFlight = 8;  // BatchKeys: key_of's loads a thread has in flight

  struct Storage {
    typename Scan::TempStorage scan;
    // Each bin's 64-bit weight as two 32-bit words (add_split_u64): the compare-and-swap loop of a
    // 64-bit atomicAdd held 53 % of the exact kernel's stall samples on a top-p-only flat row (ncu).
    uint32_t hist_lo[kBins];
    uint32_t hist_hi[kBins];
    unsigned long long prefix;
    unsigned long long remaining;
  };

  static __device__ __forceinline__ void add_weight(Storage& s, int bin, unsigned long long w) {
    add_split_u64(s.hist_lo, s.hist_hi, bin, w);
  }

  // The crossing of a histogram of Buckets buckets (a multiple of BLOCK) read from the top: the
  // bucket b whose weight, with the weights of the buckets above it, first reaches target >= 1, and
  // the weight of those above it, written to *bucket and *above by the one thread that finds it
  // (nothing when the total falls short). Thread i holds buckets Buckets - 1 - (i * kPer + q),
  // highest first, so that one block scan serves. The whole block calls it; the caller passes a
  // barrier before it reads the results.
  template <int Buckets, class WeightFn, class Above>
  static __device__ __forceinline__ void crossing_bucket(WeightFn weight_of, unsigned long long target, Storage& s,
                                                         int* bucket, Above* above) {
    constexpr int kPer = Buckets / BLOCK;
    static_assert(Buckets % BLOCK == 0, "whole buckets a thread");
    unsigned long long c[kPer], own = 0;
#pragma unroll
    for (int q = 0; q < kPer; ++q) own += (c[q] = weight_of(Buckets - 1 - (static_cast<int>(threadIdx.x) * kPer + q)));
    unsigned long long incl;
    Scan(s.scan).InclusiveSum(own, incl);
    unsigned long long cum = incl - own;
    if (cum < target && incl >= target) {
#pragma unroll
      for (int q = 0; q < kPer; ++q) {
        if (cum < target && cum + c[q] >= target) {
          *bucket = Buckets - 1 - (static_cast<int>(threadIdx.x) * kPer + q);
          *above = static_cast<Above>(cum);
        }
        cum += c[q];
      }
    }
  }

  // Over t in [0, n): key_of(t) (0 excludes t; nonzero keys are distinct) weighted by weight_of(t).
  // Returns the largest key c with sum_{key >= c} weight >= k; requires 1 <= k <= total weight.
  // BatchKeys (counts, cheap keys): each pass evaluates kKeysInFlight keys a thread at once, so that
  // key_of's loads overlap. Otherwise (masses: double-precision exp a key) a plain loop, which the
  // compiler interleaves itself.
  template <bool BatchKeys = false, class KeyFn, class WeightFn>
  static __device__ unsigned long long select_desc(int32_t n, unsigned long long k, KeyFn key_of,
                                                   WeightFn weight_of, Storage& s) {
    return select_desc_of_total<BatchKeys>(n, [k](unsigned long long) { return k; }, key_of, weight_of, s);
  }

  // The same with k = k_of_total(total weight), known after the first pass (whose histogram holds
  // every weight): a top-p target costs no pass of its own. Returns 0 when k_of_total gives 0.
  template <bool BatchKeys = false, class KFn, class KeyFn, class WeightFn>
  static __device__ unsigned long long select_desc_of_total(int32_t n, KFn k_of_total, KeyFn key_of,
                                                            WeightFn weight_of, Storage& s) {
    if (threadIdx.x == 0) {
      s.prefix = 0;
      s.remaining = 0;  // the first pass takes k_of_total's
    }
    unsigned long long mask = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < kBins; b += BLOCK) s.hist_lo[b] = s.hist_hi[b] = 0;
      __syncthreads();
      const unsigned long long prefix = s.prefix, carried = s.remaining;
      // A thread's consecutive keys mostly share a digit: add runs, not single weights, so that a
      // row whose keys crowd into one bucket does not serialise on one shared-memory address.
      int run_bin = -1;
      unsigned long long run = 0;
      auto add = [&](int32_t t, unsigned long long key) {
        if (key == 0 || (key & mask) != prefix) return;  // ids at or past n come as key 0
        const unsigned long long w = weight_of(t);
        const int bin = static_cast<int>((key >> shift) & 0xFF);
        if (bin != run_bin) {
          if (run) add_weight(s, run_bin, run);
          run_bin = bin;
          run = 0;
        }
        run += w;
      };
      if constexpr (BatchKeys)
        block_pass<BLOCK, kKeysInFlight>(n, 0ull, key_of, add);
      else
        for (int32_t t = threadIdx.x; t < n; t += BLOCK) add(t, key_of(t));
      if (run) add_weight(s, run_bin, run);
      __syncthreads();
      // Thread i looks at bucket 255 - i: an inclusive scan gives the weight at or above it.
      const int i = threadIdx.x;
      const int b = kBins - 1 - i;
      const unsigned long long v =
          i < kBins ? static_cast<unsigned long long>(s.hist_hi[b]) << 32 | s.hist_lo[b] : 0ull;
      unsigned long long incl, total;
      Scan(s.scan).InclusiveSum(v, incl, total);
      const unsigned long long remaining = shift == 56 ? k_of_total(total) : carried;
      if (remaining == 0) {  // uniform: every thread has the same total
        __syncthreads();
        return 0ull;
      }
      const unsigned long long excl = incl - v;
      const bool last = i == kBins - 1;
      if (i < kBins && excl < remaining && (incl >= remaining || last)) {
        s.prefix = prefix | (static_cast<unsigned long long>(kBins - 1 - i) << shift);
        s.remaining = remaining - excl;
      }
      mask |= 0xFFull << shift;
      __syncthreads();
    }
    const unsigned long long result = s.prefix;
    __syncthreads();
    return result;
  }
};

}  // namespace sonic::cuda
