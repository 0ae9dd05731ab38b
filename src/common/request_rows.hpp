// Which verification request owns a target row (SPEC.md section 3's packing: request b owns rows
// cu_rows[b] .. cu_rows[b + 1] - 1). One definition for both backends, so that a cu_rows that is not
// non-decreasing (bad input) gives both the same requests: one is valid only if it owns every row of
// its range, so no two valid requests share a row.
#pragma once

#include <cstdint>

#include "common/hd.hpp"

namespace sonic::detail {

// The last b in [0, num_requests) with cu_rows[b] <= row, found by bisection (on a non-decreasing
// cu_rows; on any other, the bisection's answer, which owns_rows checks).
SONIC_HD int32_t owner_of_row(const int32_t* cu_rows, int32_t num_requests, int32_t row) {
  int32_t lo = 0, hi = num_requests;
  while (hi - lo > 1) {
    const int32_t mid = (lo + hi) >> 1;
    if (cu_rows[mid] <= row) lo = mid;
    else hi = mid;
  }
  return lo;
}

// Whether request b owns every row of its range [first, last), first < last. The bisection's answer
// never decreases as the row grows (each probe's test cu_rows[mid] <= row can only turn true, which
// sends the search right), so the two ends decide it.
SONIC_HD bool owns_rows(const int32_t* cu_rows, int32_t num_requests, int32_t b, int32_t first, int32_t last) {
  return owner_of_row(cu_rows, num_requests, first) == b && owner_of_row(cu_rows, num_requests, last - 1) == b;
}

}  // namespace sonic::detail
