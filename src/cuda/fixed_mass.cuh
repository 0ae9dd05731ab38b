// The exact path's probability masses as fixed-point integers, whose sums do not depend on their
// order: every slice, block and stage that adds them gets the same total, so a kept set decided from
// them is the same at every batch size and split.
#pragma once

#include <cmath>
#include <cstdint>

namespace sonic::cuda {

constexpr double kMassScale = 1099511627776.0;  // 2^40: fixed-point unit of probability mass

// A score's fixed-point probability mass against the maximum md (s > -inf, md finite).
__device__ __forceinline__ unsigned long long fixed_mass(float s, double md) {
  return static_cast<unsigned long long>(llrint(exp(static_cast<double>(s) - md) * kMassScale));
}

// Top-p's target against a fixed-point total: the kept set is the fewest largest keys whose mass
// reaches ceil(top_p x total).
__device__ __forceinline__ unsigned long long top_p_target(float top_p, double total) {
  return static_cast<unsigned long long>(ceil(static_cast<double>(top_p) * total));
}

}  // namespace sonic::cuda
