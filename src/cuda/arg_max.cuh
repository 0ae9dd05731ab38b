// (score, token) pairs for Gumbel-max winners, in fp32 (stage 1's fast noise) and in double (the
// exact noise): the larger score wins, then the lower token; token -1 is empty. One rule for every
// kernel, so that the fast path, stage 2 and the exact path break ties the same way.
#pragma once

#include <cstdint>

namespace sonic::cuda {

template <class Score>
struct ArgMaxPair {
  Score score;
  int32_t token;
};
using ArgMaxF = ArgMaxPair<float>;
using ArgMaxD = ArgMaxPair<double>;

template <class Score>
__device__ __forceinline__ ArgMaxPair<Score> better(const ArgMaxPair<Score>& a, const ArgMaxPair<Score>& b) {
  if (a.token < 0) return b;
  if (b.token < 0) return a;
  if (a.score != b.score) return a.score > b.score ? a : b;
  return a.token < b.token ? a : b;
}

// The same rule as a functor for CUB's reductions.
struct BetterOp {
  template <class Score>
  __device__ __forceinline__ ArgMaxPair<Score> operator()(const ArgMaxPair<Score>& a, const ArgMaxPair<Score>& b) const {
    return better(a, b);
  }
};

}  // namespace sonic::cuda
