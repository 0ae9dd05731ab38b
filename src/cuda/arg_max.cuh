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

// The same rule as one select, without branches: `better`'s early returns compile to a branch and a
// convergence barrier a comparison, which a single warp's chain of comparisons pays at every step
// (write_prefix_winners: about 1 us of stage 2's decision phase, perf-notes v3.46). NaN scores
// compare as in `better`. (`better` itself is left as it is: the select there took the exact kernel
// from 128 registers to 64 with 1.4 KB of spills, perf-notes v3.44.)
template <class Score>
__device__ __forceinline__ ArgMaxPair<Score> better_select(const ArgMaxPair<Score>& a, const ArgMaxPair<Score>& b) {
  const bool b_first = a.score != b.score ? !(a.score > b.score) : !(a.token < b.token);
  const bool b_wins = (a.token < 0) | ((b.token >= 0) & b_first);  // no short circuit: no branch
  return b_wins ? b : a;
}

// The same rule as a functor for CUB's reductions.
struct BetterOp {
  template <class Score>
  __device__ __forceinline__ ArgMaxPair<Score> operator()(const ArgMaxPair<Score>& a, const ArgMaxPair<Score>& b) const {
    return better(a, b);
  }
};

// The best pair of a warp, in every lane.
template <class Score>
__device__ __forceinline__ ArgMaxPair<Score> warp_best(ArgMaxPair<Score> v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const ArgMaxPair<Score> w{__shfl_xor_sync(0xFFFFFFFFu, v.score, o), __shfl_xor_sync(0xFFFFFFFFu, v.token, o)};
    v = better(v, w);
  }
  return v;
}

// The best pair of a block of Threads threads, in every thread: one barrier, then every warp
// reduces the warps' bests itself (no broadcast through a second barrier). CUB's BlockReduce has
// thread 0 fold the warps' results one after another, a chain of Threads / 32 - 1 dependent steps
// that in a 512-thread block cost about as much as the draw it ends. `slots` holds Threads / 32
// pairs in shared memory; the whole block calls it, and must pass a barrier before it calls it
// again with the same slots.
template <int Threads, class Score>
__device__ __forceinline__ ArgMaxPair<Score> block_best(ArgMaxPair<Score> v, ArgMaxPair<Score>* slots) {
  constexpr int kWarps = Threads / 32;
  static_assert(Threads % 32 == 0 && kWarps <= 32, "block_best: whole warps, at most 32");
  const int lane = threadIdx.x & 31;
  v = warp_best(v);
  if (lane == 0) slots[threadIdx.x / 32] = v;
  __syncthreads();
  return warp_best(lane < kWarps ? slots[lane] : ArgMaxPair<Score>{Score(0), -1});
}

}  // namespace sonic::cuda
