// A flagged top-k row's margin band: what stage 2 knows of a row it left undecided only because the
// joint top-p crossing lay within its sums' margin, so that the exact path's split decides it from
// the exact total alone, without ranking and drawing over the row's keys again.
//
// Stage 2 has the row's top k keys sorted (the same keys, in the same order, as the exact path's
// list at or above the hint, since both form z by the same rules) and the draw's noise of each.
// decide_kept found the kept set's size within [lo, hi] over the margin. For every size c in that
// band it records the fixed mass of the first c keys (the exact path's integers) and the token the
// draw takes from them. The exact path's slices sum the row's exact total as before; its last
// slice finds the size from the total's target and takes the recorded token (band_token), or falls
// back to the list when the size lies outside the band (which only a wrong margin would cause).
#pragma once

#include <cstdint>

#include "cuda/fixed_mass.cuh"

namespace sonic::cuda {

constexpr int32_t kBandKeys = 8;  // kept sizes a band holds (wider bands take the list)

// FastScratch::bands[r]: written by stage 2 for every row it flags (lo = 0: no band).
struct MarginBand {
  int32_t lo;                           // the kept set has between lo and hi keys (1 <= lo < hi <= k)
  int32_t hi;
  unsigned long long below;             // fixed mass of the sorted keys [0, lo - 1)
  unsigned long long mass[kBandKeys];   // mass[j]: of the keys [0, lo + j)
  int32_t token[kBandKeys];             // token[j]: the draw's token over the keys [0, lo + j)
};

// The token of a band's row (-1: decide it otherwise), given top-k's k and top-p's target against the
// row's exact total, ceil(top_p x total) in fixed mass. The kept set is the first c keys, c the
// smallest size whose mass reaches the target, or k when none of the k keys' does (or the target is
// 0): the exact path's rule (rank_decide_top_k). Reads the band through L2 (stage 2 of another
// block wrote it); every thread that calls it gets the same token. One exit after the search: a
// form that returned from inside its loop made ptxas give the whole exact kernel 40 registers and
// 4.5 KB of spills (v3.41), where it has 128 and none.
__device__ __forceinline__ int32_t band_token(const MarginBand* band, unsigned long long target, int32_t k) {
  const int32_t lo = __ldcg(&band->lo), hi = __ldcg(&band->hi);
  if (lo <= 0 || hi < lo || hi - lo >= kBandKeys) return -1;
  // The first size in the band whose mass reaches the target (kBandKeys: none), then its token.
  int32_t at = kBandKeys;
  if (target > 0) {
    if (__ldcg(&band->below) >= target) return -1;  // the crossing lies before the band
#pragma unroll 1
    for (int32_t j = hi - lo; j >= 0; --j)
      if (__ldcg(&band->mass[j]) >= target) at = j;
  }
  // No size in the band reaches the target: the kept set is the k keys if the band ends at k.
  if (at == kBandKeys) at = hi == k ? hi - lo : -1;
  return at >= 0 ? __ldcg(&band->token[at]) : -1;
}

}  // namespace sonic::cuda
