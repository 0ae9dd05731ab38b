// Stage 2's shared memory and its appends: the block's workspace for one row (Stage2Shared), sized
// by its thread count (the fast kernel's 128 or row_stage2_kernel's 512), and the warp-wide appends
// that fill its lists.
#pragma once

#include <cub/block/block_scan.cuh>

#include "cuda/arg_max.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/timeline.cuh"

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
// Wide blocks decide prefixes this short in two warps (a multiple of 32; 0: always the block scan,
// stage1_variants.sh passes -DSONIC_WARP_PREFIX_KEYS=0 to time the two routes side by side).
#ifndef SONIC_WARP_PREFIX_KEYS
#define SONIC_WARP_PREFIX_KEYS 128
#endif
constexpr int32_t kWarpPrefixKeys = SONIC_WARP_PREFIX_KEYS;
static_assert(kWarpPrefixKeys % 32 == 0 && kWarpPrefixKeys <= kGatherCap, "whole lanes of keys");
// Stage 2 (row_stage2_kernel's and the fast kernel's) keeps the code that the common row (top-k or
// top-p, tokens only) skips out of line (__noinline__: for_each_listed, staged_short_of_mass, the
// narrow ranks, scan_prefix_mass, write_band, settled_row_outputs): inlined, the common row jumps
// over it, and a jump of a few KB lands on code no warp has fetched yet (a fetch from L2 at least;
// perf-notes v3.48, v3.49). Their arguments are values, or references to shared memory or to a
// kernel parameter: a reference to a local keeps it on the stack. (One helper taking a lambda for
// all of them was tried: the lambda object went on the stack, frames 32 -> 608 bytes; v3.49.)
constexpr int32_t kShortPrefixCheck = 256;  // prefixes longer than this are checked for mass first
constexpr int32_t kMassCutMin = 256;  // top-p-alone rows with more candidates at the bound cut them by mass

// Where bin b of gather_prefix's histogram lies in Stage2Shared::bins. tau_at_bin's lanes each read
// a run of Threads / 32 bins; in wide blocks a run of 16 words put 16 lanes on each bank, so there a
// word of padding follows every run and the lanes' loads hit 32 distinct banks. (The fast kernel's
// runs of 4 conflict 4 ways; its layout is left as it was.)
template <int Threads>
constexpr int kBinPad = Threads > kFastThreads ? 1 : 0;
template <int Threads>
__device__ __forceinline__ int bin_slot(int b) {
  return b + kBinPad<Threads> * static_cast<int>(static_cast<unsigned>(b) / (Threads / 32));  // b >= 0
}

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
      union {
        double staged_noise[kGatherCap];  // of staged[i]
        int32_t winner[kGatherCap];       // once noise is sorted: the draw's token over sorted[0, i]
      };
      double noise[kGatherCap];         // of sorted[i]
      int32_t rank[kGatherCap];         // staged[i] is sorted[rank[i]]
      double staged_mass[kWarpPrefixKeys > 0 ? kWarpPrefixKeys : 1];  // exp(z - z_max) of staged[i] (decided_by_warps)
      int32_t rival;  // the screened draw: a key of the prefix near the best before it (write_prefix_winners)
    } early;
  };
  unsigned long long sorted[kGatherCap];    // z keys, descending
  union {
    unsigned long long staged[kGatherCap];  // z keys of the prefix, unordered
    double cum[kGatherCap];                 // inclusive sums of exp(z - z_max) along `sorted`
  };
  unsigned long long staged_x[kGatherCap];  // raw-mode ranks: the x keys of `staged`
  unsigned long long sorted_x[kGatherCap];  // and of `sorted`
  union {  // where chunk c's candidates lie in the row's list (merge_tiles)
    int32_t cand_count[kMaxChunks];  // wide blocks: the first cand_count[c] keys of its region
    int32_t cand_off[kMaxChunks];    // the fast kernel's block: [cand_off[c], cand_off[c + 1])
  };
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
  int32_t band_lo, band_hi;        // decide_kept's band when only the margin left the row open (lo = 0: none)
  unsigned long long band_below;   // the band's fixed mass below it (stage2_row's write_band)
  int32_t draft_at;  // verification: index of the row's draft token in `sorted` (-1: not kept)
  double kept_sum;
  union {  // gather_prefix's histogram of the candidates below the row's maximum
    int32_t count[Threads + 32 * kBinPad<Threads>];  // top-k rows: keys a bin (at bin_slot)
    float mass[Threads + 32 * kBinPad<Threads>];     // top-p-alone rows: their exp(z - z_max) a bin
  } bins;
  float tau;
  double staged_sum;  // the staged prefix's mass (gather_prefix's short-prefix check)
};

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

// The lane's exclusive prefix of v over the warp's lanes, and their total in *total, for v below
// 2^Bits in every lane: Bits ballots, independent of each other, where a warp scan is a chain of five
// shuffles.
template <int Bits>
__device__ __forceinline__ int warp_exclusive_small(int v, int* total) {
  unsigned below;
  asm("mov.u32 %0, %%lanemask_lt;" : "=r"(below));
  int before = 0, all = 0;
#pragma unroll
  for (int b = 0; b < Bits; ++b) {
    const unsigned vote = __ballot_sync(0xFFFFFFFFu, (v >> b) & 1);
    before += __popc(vote & below) << b;
    all += __popc(vote) << b;
  }
  *total = all;
  return before;
}

// How warp_append_batch places a warp's keys. kListing (wide blocks' listing warps, which end the
// merge phase at small B): the lanes' offsets by warp_exclusive_small and straight-line predicated
// stores. kScan (the fast kernel's block): a warp scan and a branch a key, as validated there: a
// change to its stage 2 re-schedules its stage 1 (perf-notes v3.60).
enum class AppendForm { kScan, kListing };

// Appends the lane's keys key[b] whose bit b of `keep` is set to dst[0, cap) at the shared counter
// *n: one atomic a warp for the whole batch; every lane of the warp calls it together. *n counts
// past cap too (so that an overflow shows). With `stamp` (a listing warp's first batch), the
// timeline build stamps the listing form's steps (nothing in other builds).
template <int N, AppendForm Form = AppendForm::kScan>
__device__ __forceinline__ void warp_append_batch(unsigned long long* dst, int* n, int cap,
                                                  const unsigned long long (&key)[N], unsigned keep,
                                                  bool stamp = false) {
  const int lane = threadIdx.x & 31;
  const int mine = __popc(keep);
  int total, before;
  if constexpr (Form == AppendForm::kListing) {
    constexpr int kBits = N < 2 ? 1 : N < 4 ? 2 : N < 8 ? 3 : N < 16 ? 4 : 5;
    static_assert(N < 32, "a lane's count below 2^5");
    before = warp_exclusive_small<kBits>(mine, &total);
    if (stamp) timeline_warp_point(kPointScanned, static_cast<unsigned>(total) ^ static_cast<unsigned>(before));
  } else {
    const int incl = warp_inclusive_sum(mine);
    total = __shfl_sync(0xFFFFFFFFu, incl, 31);
    before = incl - mine;
  }
  if (!total) return;
  int at = 0;
  if (lane == 0) at = atomicAdd(n, total);
  at = __shfl_sync(0xFFFFFFFFu, at, 0) + before;
  if constexpr (Form == AppendForm::kListing) {
    if (stamp) timeline_warp_point(kPointClaimed, static_cast<unsigned>(at));
    // Straight-line predicated stores: the branch a key below cost each store its own S2R of the
    // shared window's base (ptxas rematerialises it in every branch), six in series at B = 1
    // (perf-notes v3.62).
#pragma unroll
    for (int b = 0; b < N; ++b) {
      const int kept = (keep >> b) & 1u;
      if (kept && at < cap) dst[at] = key[b];
      at += kept;
    }
  } else {
#pragma unroll
    for (int b = 0; b < N; ++b)
      if ((keep >> b) & 1u) {
        if (at < cap) dst[at] = key[b];
        ++at;
      }
  }
}

}  // namespace sonic::cuda
