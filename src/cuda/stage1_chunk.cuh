// Stage 1 of the fast path for one (chunk, row): the block streams the chunk's tiles, each warp its
// own steps (tile_loader.cuh), with the next steps in flight into shared memory while it screens the
// current one.
// Per group of 32 tokens of a lane, with no block barrier:
//   - the logits after SPEC.md section 2 steps 1-4 (x): the bitmask and the row's bans as bit tests,
//     and the whole rule (token_rules.hpp through RowPrologue::rules) only for the few tokens that a
//     list names, that the history holds or that an earlier draft of the step is ("special" tokens);
//   - truncated random rows: each lane's three largest keys of the group, and a bound for the
//     warp's group of 1024 ids at the r-th largest of those keys (r from screen_rank); the warp
//     appends the tokens at or above its running bound (the largest bound any group of the chunk
//     has reached so far) to the chunk's candidates, all of them, so every token left out lies
//     below the bound the chunk reports. A row's kept set escapes the candidates only when r of
//     its tokens share a warp's group: about 5e-13 of rows for top-k 50 on i.i.d. logits at
//     r = 12. Temperature divides every x by the same T > 0, which keeps their order, so the
//     screen works on x and stage 2 divides only the keys it keeps. Once the warp has a bound, a
//     group whose lanes each hold at most three tokens at or above it takes just those (for
//     16-bit rows without rules or sums on the packed pairs, without decoding:
//     screen_packed_by_bound); a sparse group (few valid tokens in few lanes: a grammar's mask)
//     lists them all and leaves the bound; top-k rows raise the bound between steps to what k of
//     the chunk's lane maxima reach (raise_by_top_k);
//   - untruncated random rows: the Gumbel-max winner (fast fp32 noise, SPEC.md section 4);
//   - the largest key, the valid count, NaN, and sums of exp where the row needs them.
// Then the block writes the chunk's TileStat; the last chunk of a row to finish runs stage 2.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/arg_max.cuh"
#include "cuda/dependent_launch.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_kind.cuh"
#include "cuda/tile_loader.cuh"
#include "cuda/timeline.cuh"
#include "cuda/warp_reduce.cuh"

namespace sonic::cuda {

// 2^v with results below 2^-126 flushed to zero: one MUFU.EX2, where __expf's non-flushing form adds
// a range fix-up of four instructions. A term that small is lost anyway in a sum that holds its
// maximum's term, 1.
__device__ __forceinline__ float exp2_flush(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}

// The base-2 factor of a row's sums: exp((x - m) / T) = 2^((x - m) c). Stage 2 forms it the same
// way to read the chunks' sums (stage2_merge.cuh).
__device__ __forceinline__ float sum_base2(float inv_t) { return inv_t * 1.4426950408889634f; }
// The power of two a sum is kept relative to, for a maximum m: ceil(m c), an integer, so that the
// maximum's term 2^(m c - k) lies in [1/2, 1.19] (|m c| < 2^22: m c rounds by at most 1/4) and a
// change of scale is exact. Clamped to +-kSumScaleLimit (finite, and where m c still rounds to a
// quarter): a lane or chunk clamped from below beside a larger maximum keeps an exact
// representation (its terms underflow only where their share does), but a row whose own maximum
// lies beyond the limit (|z| past 2.9e6: x near the float range at small T, or every token at the
// lowest float) may have overflowed or underflowed every term, and stage 2 sends it to the exact
// path.
constexpr float kSumScaleLimit = 0x1p22f;
__device__ __forceinline__ float sum_scale(float m, float c) {
  return ceilf(fminf(fmaxf(m * c, -kSumScaleLimit), kSumScaleLimit));
}
// 2^d for an integer d in [-126, 127], exactly; 0 below (the flushed terms' range).
__device__ __forceinline__ float exact_pow2(float d) {
  const int e = static_cast<int>(fminf(fmaxf(d, -127.0f), 127.0f)) + 127;
  return __int_as_float(e << 23);
}

// A running sum of exp((x - max) * inv_t), kept as the sum of 2^(x c - k) over the terms, k =
// sum_scale(max, c) (formed again where needed, not held: ptxas spilled the fp32 kernel's extra
// registers): a growing maximum changes k, and the sum is rescaled by 2^(k_old - k_new), exactly.
// (Rescaled by __expf((max_old - max) / T), every earlier term of the lane took an ex2 error and a
// rounding at each new maximum; on rows whose lanes' maxima rise at every tile those compound past
// decide_kept's margin under ex2.approx's documented 2 ulp: perf-notes v3.37,
// bench/sum_error_model.cpp's rising rows.) A term is one FFMA's rounding of x c - k, whose size is
// that of (x - max) c, and one ex2.approx. Only finite maxima carry a sum (a row with a +inf or no
// finite maximum never uses it). A lane's sum is compensated (Fast2Sum a group, the rounding error
// kept in comp): its up to 64 additions would otherwise round the same way on an adversarial row
// (perf-notes v3.32).
struct ExpSum {
  float max = -INFINITY;
  float sum = 0.0f;
  float comp = 0.0f;  // what the additions to sum rounded away
  __device__ __forceinline__ bool rebase(float m, float inv_t) {  // true when the sum may be added to
    if (m > max) {
      if (max > -INFINITY && max < INFINITY) {
        const float c = sum_base2(inv_t);
        const float f = exact_pow2(sum_scale(max, c) - sum_scale(m, c));
        sum *= f;
        comp *= f;
      }
      max = m;
    }
    return max > -INFINITY && max < INFINITY;
  }
  // Adds 2^(x_i c - k) over a group's registers, after rebase(the group's maximum) said yes: -inf
  // and NaN add 0 (fmaxf takes -inf over NaN, and 2^-inf is 0). Four instructions a token in four
  // partial sums (five with the subtraction before).
  __device__ __forceinline__ void add_group(const float (&x)[kGroupTokens], float inv_t) {
    const float c = sum_base2(inv_t), k = sum_scale(max, c);
    float part[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < kGroupTokens; ++i) part[i % 4] += exp2_flush(fmaxf(fmaf(x[i], c, -k), -INFINITY));
    const float g = (part[0] + part[1]) + (part[2] + part[3]);
    const float a = fmaxf(sum, g), b = fminf(sum, g);  // both >= 0: Fast2Sum's order
    const float t = __fadd_rn(a, b);
    comp += __fsub_rn(b, __fsub_rn(t, a));  // (not contracted: no product)
    sum = t;
  }
  // Combines the 32 lanes' sums into a warp's, at the scale of the warp's maximum (every lane gets
  // it).
  __device__ __forceinline__ ExpSum warp_combine(float inv_t) const {
    ExpSum w;
    w.max = warp_max(max);
    const float c = sum_base2(inv_t);
    const float part = (max > -INFINITY && w.max < INFINITY) ? (sum + comp) * exact_pow2(sum_scale(max, c) - sum_scale(w.max, c)) : 0.0f;
    w.sum = warp_sum(part);
    return w;
  }
};

// A lane's running state over the groups of its chunk.
struct LaneScreen {
  unsigned long long max_key = 0;  // largest key of x (0: no valid token yet)
  float max_x = -INFINITY;         // its value
  uint32_t bound_hi = 0;           // truncated rows: the warp's running bound (high word of the key)
  int valid = 0;
  bool nan = false;
  ExpSum sum;                      // need_sum, over x
  ExpSum raw;                      // need_raw, over the input logits
  ArgMaxF win{0.0f, -1};           // untruncated rows
  uint32_t published = 0;          // top-k rows: the lane maximum last written to Stage1Shared::lane_max
};

// One warp's results, combined by the block into its TileStat.
struct WarpSummary {
  unsigned long long max_key;
  unsigned long long bound;
  float sum_max, sum;  // sum of 2^(x c - sum_scale(sum_max, c)) (ExpSum)
  float raw_max, raw_sum;
  ArgMaxF win;
  int32_t valid;
  int32_t nan;
};

struct Stage1Shared {
  WarpSummary warp[kFastWarps];
  int32_t count;      // candidates appended by the chunk
  uint32_t bound_hi;  // the largest warp bound so far (high word), which every warp may use
  int32_t rank;       // truncated rows: the rank of the warps' bounds (screen_rank; read by chunk_rank)
  uint32_t lane_max[kFastThreads];  // top-k rows: each lane's largest key so far (high word; 0: none)
  StepIssue issue[kFastWarps];
};

// Keys at or above a bound: the 0 key (no token) never is.
__device__ __forceinline__ bool kept_by(unsigned long long key, unsigned long long bound) {
  return key != 0 && key >= bound;
}

// The tokens of a warp's groups that need the whole rule (listed, or drafted earlier in a
// verification step), found by walking the slot's sorted token list with a warp-uniform cursor as
// the warp's groups advance through the vocabulary.
struct SpecialTokens {
  const int32_t* list = nullptr;  // the slot's sorted list, or null
  int32_t count = 0;
  int32_t at = 0;                 // first entry not yet behind the current group
  int32_t next = 0x7FFFFFFF;      // list[at], or INT_MAX past the end
  const int32_t* drafts = nullptr;
  int32_t n_drafts = 0;

  __device__ void init(const SlotTableView& tab, const RowPrologue& pro, int32_t first_token) {
    if (pro.p.list_count > 0) {
      list = tab.list_token + static_cast<int64_t>(pro.slot) * tab.list_capacity;
      count = pro.p.list_count;
      int32_t lo = 0, hi = count;  // first entry >= first_token
      while (lo < hi) {
        const int32_t mid = (lo + hi) >> 1;
        if (list[mid] < first_token) lo = mid + 1; else hi = mid;
      }
      at = lo;
      next = at < count ? list[at] : 0x7FFFFFFF;
    }
    if (pro.penalised && pro.n_prev > 0) {
      drafts = pro.prev_drafts;
      n_drafts = pro.n_prev;
    }
  }

  // This lane's special registers (bit i: register i) in the group of 32 * 32 tokens from `base`;
  // `listed` (the same in every lane) tells whether the token list names any token of the group.
  template <DType D>
  __device__ __forceinline__ uint32_t mark(int32_t base, int32_t V, bool& listed) {
    using L = StepLayout<D>;
    const int lane = threadIdx.x & 31;
    const int32_t end = base + 32 * kGroupTokens;
    uint32_t bits = 0;
    auto own = [&](int32_t t) {
      const int32_t rel = t - base;
      const int32_t owner = (rel % (32 * L::kWidth)) / L::kWidth;
      const int reg = (rel / (32 * L::kWidth)) * L::kWidth + rel % L::kWidth;
      if (lane == owner) bits |= 1u << reg;
    };
    listed = false;
    while (next < end) {  // entries below `base` belong to other warps' groups
      if (next >= base) {
        own(next);
        listed = true;
      }
      ++at;
      next = at < count ? __ldg(list + at) : 0x7FFFFFFF;
    }
    for (int32_t i = 0; i < n_drafts; ++i) {
      const int32_t t = __ldg(drafts + i);
      if (t >= base && t < end && t < V) own(t);  // drafts are checked in stage 2: skip bad ids
    }
    return bits;
  }
};

// Everything about the row that the screen of every group reads.
struct ScreenContext {
  const RowJob* job;
  const RowPrologue* pro;
  const RowKind* kind;
  unsigned long long* list;  // the chunk's candidate region
  int32_t* count;            // shared: candidates appended so far
  uint32_t* bound_hi;        // shared: the chunk's running bound
  uint32_t* lane_max;        // shared: Stage1Shared::lane_max
};

// Register i of x, by a tree of selects on the bits of i (31 selects, no local memory).
__device__ __forceinline__ float pick_register(const float (&x)[kGroupTokens], int i) {
  float a[16];
#pragma unroll
  for (int k = 0; k < 16; ++k) a[k] = (i & 1) ? x[2 * k + 1] : x[2 * k];
#pragma unroll
  for (int k = 0; k < 8; ++k) a[k] = (i & 2) ? a[2 * k + 1] : a[2 * k];
#pragma unroll
  for (int k = 0; k < 4; ++k) a[k] = (i & 4) ? a[2 * k + 1] : a[2 * k];
#pragma unroll
  for (int k = 0; k < 2; ++k) a[k] = (i & 8) ? a[2 * k + 1] : a[2 * k];
  return (i & 16) ? a[1] : a[0];
}

// Where register i of group g of the lane sits in the step's slot (a dynamic index into shared
// memory, where the registers could only be indexed by a tree of selects).
// (Slot: StepSlot<D, Loads> or a const one; the element has the slot's constness.)
template <DType D, class Slot>
__device__ __forceinline__ auto* slot_element(Slot& slot, int g, int i) {
  using L = StepLayout<D>;
  using Byte = typename std::conditional<std::is_const<Slot>::value, const char, char>::type;
  return reinterpret_cast<Byte*>(&slot.v[g * L::kGroupLoads + i / L::kWidth][threadIdx.x & 31]) +
         (i % L::kWidth) * L::kElem;
}
// Its value: the input logit, or in fp32 the rules' value for a special token once apply_rules has
// stored it there (set_slot_value; only the lane reads its own pieces).
template <DType D, int Loads>
__device__ __forceinline__ float slot_value(const StepSlot<D, Loads>& slot, int g, int i) {
  if constexpr (D == DType::kF32) return *reinterpret_cast<const float*>(slot_element<D>(slot, g, i));
  else return decode_half<D>(*reinterpret_cast<const unsigned short*>(slot_element<D>(slot, g, i)));
}
__device__ __forceinline__ void set_slot_value(StepSlot<DType::kF32, kStepLoads>& slot, int g, int i, float v) {
  *reinterpret_cast<float*>(slot_element<DType::kF32>(slot, g, i)) = v;
}

// Steps 1-4 on one group g of a lane (x: the input logits of its 32 registers, as in the slot; the
// lane's words of the group's bitmaps are in the slot too). Tokens that no list names and that are
// neither in the history nor drafted only need the bitmask and the allowed-list test; the others
// ("special") take the whole rule, one at a time, their input logit read from the slot and the
// parameters read afresh (a rare path that should hold no registers across the screen). In fp32 the
// rules' values go back to the slot and the group is read again once, where a select of the
// register and a write back to it took about 125 instructions a special token; 16-bit slots cannot
// hold them, so there the value is written back to its register.
// In a lowering row (RowKind::lowering; bound_hi: the warp's running bound, else 0) a history token
// that no list names and no draft is, with an input logit x below the key bound_hi - 1, keeps x and
// takes only the bitmask test: its penalised value lies at or below x, so it is no candidate, and x
// stays below every key the chunk's maximum may hold (the bound is at most one above some lane's
// maximum), so no lane maximum it may become is the chunk's; its validity is x's (x >= -2^100:
// finite stays finite; -inf and NaN become -inf either way). Most history tokens lie there, and
// each lookup is a memory round trip that the screen waits on.
// Returns the lane's special registers (bit i: register i), the only ones whose x may differ from
// the input logit among those at or above the bound; `valid_if_clean` counts the valid tokens the
// rules leave when every input logit was valid (the caller knows whether it was).
template <DType D, int Loads>
__device__ __forceinline__ uint32_t apply_rules(const ScreenContext& c, StepSlot<D, Loads>& slot, int g, int32_t base,
                                                uint32_t bound_hi, SpecialTokens& special_tokens,
                                                float (&x)[kGroupTokens], int& valid_if_clean) {
  const RowPrologue& pro = *c.pro;
  const SlotTableView& tab = c.job->table;
  const int lane = threadIdx.x & 31;
  uint32_t allow = pro.mask ? lane_bits<D>(slot.mask[g][lane]) : 0xFFFFFFFFu;
  if (pro.p.flags & kSlotHasAllowed) allow = 0;  // the allowed tokens are all listed, hence special
  uint32_t seen = pro.penalised ? lane_bits<D>(slot.seen[g][lane]) : 0u;
  // Keys up to 0x00800000 are -inf or NaN patterns: no bound that low lets a token through. (Listed
  // and drafted tokens are marked below, whatever their value.)
  if (c.kind->lowering && bound_hi > 0x00800000u) {
    const float below = detail::order_bits_to_float(bound_hi - 1u);
    for (uint32_t rest = seen; rest;) {
      const int i = __ffs(rest) - 1;
      rest &= rest - 1;
      const float xi = slot_value<D>(slot, g, i);
      if (!(xi >= below) && !(xi < kLoweringFloor && xi > -INFINITY)) seen &= ~(1u << i);
    }
  }
  bool listed;
  const uint32_t special = seen | special_tokens.template mark<D>(base, tab.vocab_size, listed);
  int special_valid = 0;
  for (uint32_t rest = special; rest;) {
    const int i = __ffs(rest) - 1;
    rest &= rest - 1;
    const int32_t t = StepLayout<D>::token(base, lane, i);
    // The history's loads first, beside the parameters' (penalised rows: most special tokens are
    // history tokens).
    HistoryProbe probe{};
    if (pro.penalised) probe = history_probe(tab, pro.slot, t);
    const SlotParams p = load_params(tab.params + pro.slot);
    // The list is searched only in groups where it names a token (about 20 groups in 1200 for a
    // 20-token bias list): for a history token that search was the longest chain of dependent loads
    // on this path. (The bitmask and presence bits are loaded again rather than kept from the words
    // above: more live registers made ptxas spill in the fp16 kernel.)
    const float xi = RowPrologue::token_rules(tab, p, pro.slot, pro.mask, special_tokens.drafts,
                                              special_tokens.n_drafts, t, slot_value<D>(slot, g, i), listed, &probe);
    special_valid += xi > -INFINITY;
    if constexpr (D == DType::kF32) {
      set_slot_value(slot, g, i, xi);
    } else {
#pragma unroll
      for (int j = 0; j < kGroupTokens; ++j) x[j] = j == i ? xi : x[j];
    }
  }
  if constexpr (D == DType::kF32) {
    if (__any_sync(0xFFFFFFFFu, special != 0)) read_group<D>(slot, g, x);
  }
#pragma unroll
  for (int i = 0; i < kGroupTokens; ++i)
    if (!((special >> i) & 1u) && !((allow >> i) & 1u)) x[i] = -INFINITY;
  valid_if_clean = __popc(allow & ~special) + special_valid;
  return special;
}

// Appends the warp's keys at or above its running bound to the chunk's candidates.
__device__ __forceinline__ void append_candidates(const ScreenContext& c, uint32_t bound_hi, unsigned long long k1,
                                                  unsigned long long k2, unsigned long long k3) {
  const int lane = threadIdx.x & 31;
  const unsigned long long bound = static_cast<unsigned long long>(bound_hi) << 32;
  const bool c1 = kept_by(k1, bound), c2 = kept_by(k2, bound), c3 = kept_by(k3, bound);
  const unsigned b1 = __ballot_sync(0xFFFFFFFFu, c1), b2 = __ballot_sync(0xFFFFFFFFu, c2),
                 b3 = __ballot_sync(0xFFFFFFFFu, c3);
  const int n = __popc(b1) + __popc(b2) + __popc(b3);
  if (n == 0) return;
  int at = 0;
  if (lane == 0) at = atomicAdd(c.count, n);
  at = __shfl_sync(0xFFFFFFFFu, at, 0);
  const unsigned below = (1u << lane) - 1u;
  if (c1) c.list[at + __popc(b1 & below)] = k1;
  if (c2) c.list[at + __popc(b1) + __popc(b2 & below)] = k2;
  if (c3) c.list[at + __popc(b1) + __popc(b2) + __popc(b3 & below)] = k3;
}

// Places the warp's hits of a by-bound screen (n a lane, at most 3) with one shared atomic, two
// ballots giving each lane its offset: false when the warp has none, else `at` is where the lane
// writes its own.
__device__ __forceinline__ bool place_hits(const ScreenContext& c, int n, int& at) {
  const int lane = threadIdx.x & 31;
  const unsigned b0 = __ballot_sync(0xFFFFFFFFu, n & 1), b1 = __ballot_sync(0xFFFFFFFFu, n & 2);
  const int total = __popc(b0) + 2 * __popc(b1);
  if (total == 0) return false;
  at = 0;
  if (lane == 0) at = atomicAdd(c.count, total);
  const unsigned below = (1u << lane) - 1u;
  at = __shfl_sync(0xFFFFFFFFu, at, 0) + __popc(b0 & below) + 2 * __popc(b1 & below);
  return true;
}

// Raises the warp's bound to what the chunk's other warps have reached (warp-uniform).
__device__ __forceinline__ void take_chunk_bound(const ScreenContext& c, LaneScreen& acc) {
  uint32_t shared_bound = 0;
  if ((threadIdx.x & 31) == 0) shared_bound = *static_cast<volatile uint32_t*>(c.bound_hi);
  acc.bound_hi = max(acc.bound_hi, __shfl_sync(0xFFFFFFFFu, shared_bound, 0));
}

// The lane's tokens at or above the warp's bound (bit i: register i), found by one compare a token
// on x (key >= bound <=> x >= the bound's value; NaN: never). bound_hi != 0.
__device__ __forceinline__ uint32_t hits_at(const float (&x)[kGroupTokens], uint32_t bound_hi) {
  const float bv = detail::order_bits_to_float(bound_hi);
  uint32_t hit = 0;
#pragma unroll
  for (int i = 0; i < kGroupTokens; ++i) hit |= (x[i] >= bv ? 1u : 0u) << i;
  return hit;
}
// Whether a group is sparse (group_valid: the lane's valid tokens): it holds at most
// kGroupCandidates valid tokens, which fit its room in the chunk's list, and its lanes would keep
// fewer than kSparseKept values (at most three a lane). That is a grammar's mask: few valid
// tokens, often runs of neighbouring ids in a few lanes, which a row may need all of, where the
// rank screen would leave a crowded lane's fourth id out (or, keeping fewer than its rank, bound
// the group above the lanes' fourth values) and send such a row to the exact path. A mask that
// spreads its valid tokens over most lanes is left to the rank screen: listing every group of at
// most 96 sent 9 of 40 rows of a random 8 % mask with top-k 50 to the exact path at V = 32000,
// against 0 (bench/screen_model.cpp, where rows with runs of 4-40 allowed ids escape 0 of 40 times
// at V = 151936 with this rule and 39 on main).
constexpr int kSparseKept = 36;
__device__ __forceinline__ bool sparse_group(int group_valid) {
  const int both = warp_sum((group_valid << 16) | min(group_valid, 3));  // 32 lanes: no carry
  return (both >> 16) <= kGroupCandidates && (both & 0xFFFF) < kSparseKept;
}
// The lane's valid tokens (above -inf; NaN: never).
__device__ __forceinline__ uint32_t valid_hits(const float (&x)[kGroupTokens]) {
  uint32_t hit = 0;
#pragma unroll
  for (int i = 0; i < kGroupTokens; ++i) hit |= (x[i] > -INFINITY ? 1u : 0u) << i;
  return hit;
}

// Appends each lane's tokens `hit` of group g to the chunk's candidates, their values read back
// from the slot (x differs from the input logit only in special registers, which a rare branch
// picks from x). Groups whose lanes hold at most three hits each (the common case: the group
// screened by the running bound) are placed by two ballots, others (a lane crowded by a run of
// neighbouring ids) by a warp scan. One copy of this code serves both (perf-notes v3.29: a
// separate, rarely run listing cost 10-25 us an event at B = 512).
template <DType D, int Loads>
__device__ __forceinline__ void list_hits(const ScreenContext& c, const StepSlot<D, Loads>& slot, int g,
                                          const float (&x)[kGroupTokens], uint32_t special, int32_t base,
                                          uint32_t hit, LaneScreen& acc) {
  const int lane = threadIdx.x & 31;
  const int n = __popc(hit);
  int at = 0;
  if (__any_sync(0xFFFFFFFFu, n > 3)) {
    const int incl = warp_inclusive_sum(n);
    if (lane == 31) at = atomicAdd(c.count, incl);
    at = __shfl_sync(0xFFFFFFFFu, at, 31) + incl - n;
  } else if (!place_hits(c, n, at)) {
    return;
  }
  auto write_hits = [&](auto value_of) {
    while (hit) {
      const int i = __ffs(hit) - 1;
      hit &= hit - 1;
      const unsigned long long key = detail::pack_key(value_of(i), StepLayout<D>::token(base, lane, i));
      acc.max_key = max(acc.max_key, key);
      c.list[at++] = key;
    }
  };
  // In fp32 the slot holds the rules' values (apply_rules); in 16-bit slots a special token's x is
  // not the input (rare).
  if (D != DType::kF32 && __any_sync(0xFFFFFFFFu, (hit & special) != 0))
    write_hits([&](int i) { return (special >> i) & 1u ? pick_register(x, i) : slot_value<D>(slot, g, i); });
  else
    write_hits([&](int i) { return slot_value<D>(slot, g, i); });
}

// The by-bound screen of a 16-bit group of a row without rules or sums, on the packed pairs as they
// sit in the slot (two tokens a compare, no decoding): the same candidates as screen_group's
// by-bound screen, and the group counts 32 valid tokens a lane. Since every logit is a 16-bit
// value, x >= bv holds exactly when x >= bv rounded up to the format. Returns false, having done
// nothing, when some lane holds -inf or NaN or four tokens at or above the bound: the full screen
// takes the group then.
template <DType D, int Loads>
__device__ __forceinline__ bool screen_packed_by_bound(const ScreenContext& c, const StepSlot<D, Loads>& slot, int g,
                                                       int32_t base, LaneScreen& acc) {
  using L = StepLayout<D>;
  using Pair = typename std::conditional<D == DType::kBF16, __nv_bfloat162, __half2>::type;
  const int lane = threadIdx.x & 31;
  const float bv = detail::order_bits_to_float(acc.bound_hi);
  Pair b2, ninf2;
  if constexpr (D == DType::kBF16) {
    b2 = __bfloat162bfloat162(__float2bfloat16_ru(bv));
    ninf2 = __bfloat162bfloat162(__ushort_as_bfloat16(static_cast<unsigned short>(L::kNegInfBits)));
  } else {
    b2 = __half2half2(__float2half_ru(bv));
    ninf2 = __half2half2(__ushort_as_half(static_cast<unsigned short>(L::kNegInfBits)));
  }
  // Bit j: the low token of pair j (register 2j); bit 16 + j: its high token (register 2j + 1).
  uint32_t hit = 0;
  bool clean = true;
#pragma unroll
  for (int q = 0; q < L::kGroupLoads; ++q) {
    const GroupPiece<D> piece(slot, g, q);
    const uint32_t(&w)[4] = piece.w;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      Pair x2;
      memcpy(&x2, &w[k], 4);
      clean &= __hbgt2(x2, ninf2);
      hit |= __hge2_mask(x2, b2) & (0x00010001u << (4 * q + k));
    }
  }
  const int n = __popc(hit);
  if (!__all_sync(0xFFFFFFFFu, clean) || __any_sync(0xFFFFFFFFu, n > 3)) return false;
  acc.valid += kGroupTokens;
  int at;
  if (place_hits(c, n, at)) {
    while (hit) {
      const int bit = __ffs(hit) - 1;
      hit &= hit - 1;
      const int i = bit < 16 ? 2 * bit : 2 * (bit - 16) + 1;
      const unsigned long long key = detail::pack_key(slot_value<D>(slot, g, i), L::token(base, lane, i));
      acc.max_key = max(acc.max_key, key);
      c.list[at++] = key;
    }
  }
  take_chunk_bound(c, acc);
  return true;
}

// Bisection probes a raise: each narrows the bound's interval by half, and the next raise starts
// from the bound reached, so a few probes a call suffice (measured on the H200 at B = 512: 3 probes
// -1.3 % against 7 in fp32, 2 probes lose again).
constexpr int kRaiseProbes = 3;
// Top-k rows: the bound may rise to any value that at least k tokens of the row reach, since the
// kept set lies inside the row's top k and so above it. The lanes' maxima are distinct tokens of
// the row: each lane publishes its own to shared memory, and the warp raises its bound to the
// largest value that k of the chunk's published maxima reach, found by bisection on the key's high
// word, a warp reduction a probe (a stale maximum read from another warp is still one of that
// lane's tokens).
__device__ __forceinline__ void raise_by_top_k(const ScreenContext& c, int32_t top_k, LaneScreen& acc) {
  const int lane = threadIdx.x & 31;
  const uint32_t mine = static_cast<uint32_t>(acc.max_key >> 32);
  // Only a maximum that rose to the bound or above can raise it: the k-th largest of the maxima
  // moves only when one of them passes it. Other warps' new maxima are theirs to count.
  const bool rose = mine != acc.published && mine >= acc.bound_hi;
  if (mine != acc.published) {  // it only grows; an atomic, as other warps read it meanwhile
    atomicMax(c.lane_max + threadIdx.x, mine);
    acc.published = mine;
  }
  if (!__any_sync(0xFFFFFFFFu, rose)) return;
  __syncwarp();
  uint32_t v[kFastWarps];
#pragma unroll
  for (int w = 0; w < kFastWarps; ++w) v[w] = static_cast<volatile uint32_t*>(c.lane_max)[w * 32 + lane];
  auto reach = [&](uint32_t u) {  // published maxima at or above u (one warp reduction)
    unsigned n = 0;
#pragma unroll
    for (int w = 0; w < kFastWarps; ++w) n += v[w] >= u;
    return static_cast<int>(warp_sum(n));
  };
  // The bisection's floor: a published maximum is 0 (none) or a valid key, so reach(lo) counts them
  // all. Starting it at 1 let a few probes end on a high word below every finite value's, whose
  // value is a NaN (or -inf): the by-bound screen then listed nothing while the chunk reported that
  // bound, which dropped valid tokens of later steps (a row masked by the engine with the dtype's
  // lowest finite value, under top-k).
  uint32_t lo = max(acc.bound_hi, detail::kLeastFiniteOrderBits);
  if (reach(lo) < top_k) return;
  uint32_t top = v[0];
#pragma unroll
  for (int w = 1; w < kFastWarps; ++w) top = max(top, v[w]);
  uint32_t hi = warp_max(top) + 1u;  // reach(hi) = 0
#pragma unroll 1
  for (int it = 0; it < kRaiseProbes && hi - lo > 1u; ++it) {  // reach(lo) >= k > reach(hi)
    const uint32_t mid = lo + ((hi - lo) >> 1);
    if (reach(mid) >= top_k) lo = mid;
    else hi = mid;
  }
  if (lo > acc.bound_hi) {
    acc.bound_hi = lo;
    if (lane == 0) atomicMax(c.bound_hi, lo);
  }
}

// The rank of the warps' bounds in top-k rows and in other truncated rows (screen_rank). At rank r
// the r-th largest of the lanes' kept keys bounds the group, so about r candidates a group remain
// (the bound above every lane's fourth value, this screen's before, listed 2.6 times more at
// V = 151936 and B = 1: bench/screen_model.cpp), and a row's needed tokens escape only when r of
// them share a warp's group of 1024 ids. Top-k rows need their top k (decide_kept; k <= 128): at
// r = 12 about 5e-13 of rows for top-k 50 and 2e-8 for 128 on i.i.d. logits at V = 151936
// (Poisson; 2e-8 and 5e-5 at r = 9), and a run of ten neighbouring ids on top of the row (digits,
// say) stays on the fast path, where r = 9 let 17 of 40 such rows escape at V = 128256 (perf-notes
// v3.30). Other truncated rows need their nucleus, unbounded: 16 keeps a nucleus of up to about
// 500 tokens on the fast path.
constexpr int kTopKRank = 12;
constexpr int kRowRank = 16;
static_assert(kTopKRank <= kGroupCandidates && kRowRank <= kGroupCandidates, "a rank among the lanes' kept keys");

// The Rank-th largest of the warp's kept values (a >= b >= c a lane: their keys' high words, 0 for
// none), by popping the warp's largest Rank times; 0 when the warp keeps fewer.
template <int Rank>
__device__ __forceinline__ uint32_t warp_rank_value(uint32_t a, uint32_t b, uint32_t c) {
  const int lane = threadIdx.x & 31;
  uint32_t m = 0;
#pragma unroll 1
  for (int i = 0; i < Rank; ++i) {
    m = __reduce_max_sync(0xFFFFFFFFu, a);
    if (lane == __ffs(__ballot_sync(0xFFFFFFFFu, a == m)) - 1) {
      a = b;
      b = c;
      c = 0;
    }
  }
  return m;
}
// The smallest key above every lane's fourth value (v4: the lane's): no lane holds four at or above it.
__device__ __forceinline__ uint32_t above_fourth_values(float v4) {
  return warp_max(v4 > -INFINITY ? detail::order_bits(v4) + 1u : 0u);
}
// The warp's bound at rank `rank` (warp-uniform: 0, kTopKRank or kRowRank; 0: above every lane's
// fourth value). Compile-time ranks: a loop count held in a register spilled at B = 128. A warp that
// keeps fewer than `rank` values (more than kGroupCandidates valid tokens in a few lanes) takes the
// bound above the fourth values too: at 0 a lane with four valid tokens would be crowded while
// hits_at finds nothing at 0, whose value is a NaN (v2's wrB and wrH forms dropped valid tokens so).
__device__ __forceinline__ uint32_t warp_bound(int rank, float v1, float v2, float v3, float v4) {
  auto hi = [](float v) { return v > -INFINITY ? detail::order_bits(v) : 0u; };
  uint32_t bound = 0;
  if (rank == kTopKRank) bound = warp_rank_value<kTopKRank>(hi(v1), hi(v2), hi(v3));
  else if (rank == kRowRank) bound = warp_rank_value<kRowRank>(hi(v1), hi(v2), hi(v3));
  return bound != 0 ? bound : above_fourth_values(v4);
}
// A row's rank. Its needed tokens fall at about need * 1024 / V a warp's group (i.i.d.). Top-k rows
// need k, counted here with stage 2's slack as a margin, k + kTopKSlack: kTopKRank where that mean
// is at most 0.75 (the rank then escapes less often than four tokens in a lane's 32 ids, the
// criterion of the fourth values), kRowRank up to a mean of 4, and rank 0 above that (small
// vocabularies: V = 32000 with top-k 100 escaped 37 rows of 100 at rank 9, v3.29). Other truncated
// rows need their nucleus, unknown here: kRowRank from 32 groups on.
__device__ __forceinline__ int screen_rank(int32_t top_k, uint32_t V) {
  if (top_k > 0) {
    const uint32_t spread = static_cast<uint32_t>(top_k + kTopKSlack) * 1024u;  // top_k <= kFastThreads
    if (spread + spread / 3u <= V) return kTopKRank;
    return spread / 4u <= V ? kRowRank : 0;
  }
  return V >= 32u * 1024u ? kRowRank : 0;
}
// The chunk's rank, from shared memory beside the bound (held in a register across the step loop it
// spilled at B = 128).
__device__ __forceinline__ int chunk_rank(const ScreenContext& c) {
  static_assert(offsetof(Stage1Shared, rank) == offsetof(Stage1Shared, bound_hi) + sizeof(uint32_t), "rank follows bound_hi");
  return reinterpret_cast<const int32_t*>(c.bound_hi)[1];
}

// Screens group g of a step (its slot in shared memory, where apply_rules leaves the rules' values
// of an fp32 group's special tokens): the rules, then what the row kind needs, into the lane's state.
template <DType D, int Loads>
__device__ __forceinline__ void screen_group(const ScreenContext& c, StepSlot<D, Loads>& slot, int g, int32_t base,
                                             SpecialTokens& special_tokens, LaneScreen& acc) {
  using L = StepLayout<D>;
  const RowPrologue& pro = *c.pro;
  const RowKind& k = *c.kind;
  const int lane = threadIdx.x & 31;
  auto token = [&](int i) { return L::token(base, lane, i); };
  if constexpr (D != DType::kF32) {
    if (!pro.has_rules && k.truncated && !k.need_sum && !k.need_raw && acc.bound_hi != 0 &&
        screen_packed_by_bound<D>(c, slot, g, base, acc))
      return;
  }
  float x[kGroupTokens];
  read_group<D>(slot, g, x);
  // NaN stays in x: every comparison below is false for it (never valid, never a candidate), the
  // rules turn it into -inf, and the sums skip it.
  bool clean = true;  // no NaN, no -inf: the common case needs no count
#pragma unroll
  for (int i = 0; i < kGroupTokens; ++i) clean &= x[i] > -INFINITY;
  uint32_t special = 0;
  int group_valid = kGroupTokens;
  // What only some groups need, in one block behind one branch: ptxas lays each `if` out inline, so
  // the common group (clean, no raw sums, no rules) jumped over three blocks, each jump's target an
  // instruction fetch when the code is cold (perf-notes v3.57 call 7, v3.58).
  if (!clean || k.need_raw || pro.has_rules) {
    if (!clean) {
      bool nan = false;
#pragma unroll
      for (int i = 0; i < kGroupTokens; ++i) nan |= detail::is_nan(x[i]);
      acc.nan |= nan;
    }
    if (k.need_raw) {  // the input logits, before any rule
      float m = -INFINITY;
#pragma unroll
      for (int i = 0; i < kGroupTokens; ++i) m = fmaxf(m, x[i]);
      if (acc.raw.rebase(m, 1.0f)) acc.raw.add_group(x, 1.0f);
    }
    if (pro.has_rules)  // group_valid: the rules' count, without a pass over the registers
      special = apply_rules<D>(c, slot, g, base, acc.bound_hi, special_tokens, x, group_valid);
    if (!clean) {
      group_valid = 0;
#pragma unroll
      for (int i = 0; i < kGroupTokens; ++i) group_valid += x[i] > -INFINITY;
    }
  }
  acc.valid += group_valid;

  // The group's largest value. Truncated rows: by the running bound when it settles the group, all
  // valid tokens when the group holds few; otherwise by rank: each lane's three largest values and
  // its fourth, from which the warp's bound follows (warp_bound), and everything else of the group
  // lies below that bound.
  float v1 = -INFINITY, v2 = -INFINITY, v3 = -INFINITY, v4 = -INFINITY;
  int i1 = 0, i2 = 0, i3 = 0;
  // Screened by the running bound when no lane holds four or more tokens at or above it: each
  // lane's fourth value lies below the bound already, so the bound stays valid and the hits are
  // exactly the lane's largest keys at or above it (v1 is then only the group's maximum, for the
  // sums). Otherwise the rank screen sets the bound.
  uint32_t hit = k.truncated && acc.bound_hi != 0 ? hits_at(x, acc.bound_hi) : 0u;
  const bool by_bound = k.truncated && acc.bound_hi != 0 && !__any_sync(0xFFFFFFFFu, __popc(hit) > 3);
  // Otherwise, in rows with a rank, a sparse group lists every valid token and leaves the bound as
  // it is (sparse_group).
  bool sparse = false;
  if (k.truncated && !by_bound && chunk_rank(c) != 0 && sparse_group(group_valid)) {
    hit = valid_hits(x);
    sparse = warp_sum(__popc(hit)) <= kGroupCandidates;  // the hits decide: the listing must fit
  }
  bool list_all = by_bound || sparse;  // the group's candidates are its hits (listed below)
  if (list_all && k.need_sum)
#pragma unroll
    for (int i = 0; i < kGroupTokens; ++i) v1 = fmaxf(v1, x[i]);
  if (list_all) {
    // done: candidates, largest key and bound
  } else if (k.truncated) {
    // Registers come in increasing token order, so strict comparisons keep the lower id on ties.
    auto insert = [&](float v, int i) {
      const bool p1 = v > v1, p2 = v > v2, p3 = v > v3, p4 = v > v4;
      v4 = p3 ? v3 : (p4 ? v : v4);
      v3 = p2 ? v2 : (p3 ? v : v3);
      i3 = p2 ? i2 : (p3 ? i : i3);
      v2 = p1 ? v1 : (p2 ? v : v2);
      i2 = p1 ? i1 : (p2 ? i : i2);
      v1 = p1 ? v : v1;
      i1 = p1 ? i : i1;
    };
    // A loop over the registers four at a time, rotating x by four each turn (back in place after
    // the last): a few dozen instructions to fetch instead of several hundred straight-line ones
    // (measured on the H200: -3 % at B = 512 fp32).
#pragma unroll 1
    for (int q = 0; q < kGroupTokens / 4; ++q) {
#pragma unroll
      for (int j = 0; j < 4; ++j) insert(x[j], 4 * q + j);
      const float r0 = x[0], r1 = x[1], r2 = x[2], r3 = x[3];
#pragma unroll
      for (int i = 0; i + 4 < kGroupTokens; ++i) x[i] = x[i + 4];
      x[kGroupTokens - 4] = r0;
      x[kGroupTokens - 3] = r1;
      x[kGroupTokens - 2] = r2;
      x[kGroupTokens - 1] = r3;
    }
  } else {
#pragma unroll
    for (int i = 0; i < kGroupTokens; ++i)
      if (x[i] > v1) {
        v1 = x[i];
        i1 = i;
      }
  }
  if (!list_all) {
    const unsigned long long k1 = v1 > -INFINITY ? detail::pack_key(v1, token(i1)) : 0ull;
    if (k1 > acc.max_key) {
      acc.max_key = k1;
      acc.max_x = v1;
    }
    if (k.truncated) {
      // The warp's bound at the chunk's rank. A bound above the warp's own is valid too (the chunk
      // reports the largest it used) and keeps fewer candidates: take the largest any warp of the
      // chunk has reached.
      const uint32_t own = max(acc.bound_hi, warp_bound(chunk_rank(c), v1, v2, v3, v4));
      uint32_t shared_bound = 0;
      if (lane == 0)
        shared_bound = own > acc.bound_hi ? atomicMax(c.bound_hi, own) : *static_cast<volatile uint32_t*>(c.bound_hi);
      acc.bound_hi = max(own, __shfl_sync(0xFFFFFFFFu, shared_bound, 0));
      // A lane whose fourth value reaches the bound holds more tokens at or above it than its three
      // keys: the group lists all its hits when they fit its room in the chunk's list, and
      // otherwise the bound rises above every lane's fourth value.
      if (__any_sync(0xFFFFFFFFu, v4 > -INFINITY && detail::order_bits(v4) >= acc.bound_hi)) {
        hit = hits_at(x, acc.bound_hi);
        if (warp_sum(__popc(hit)) <= kGroupCandidates) {
          list_all = true;
        } else {
          acc.bound_hi = max(acc.bound_hi, above_fourth_values(v4));
          if (lane == 0) atomicMax(c.bound_hi, acc.bound_hi);
        }
      }
      if (!list_all) {
        const unsigned long long k2 = v2 > -INFINITY ? detail::pack_key(v2, token(i2)) : 0ull;
        const unsigned long long k3 = v3 > -INFINITY ? detail::pack_key(v3, token(i3)) : 0ull;
        append_candidates(c, acc.bound_hi, k1, k2, k3);
      }
    }
  }
  if (list_all) {
    list_hits<D>(c, slot, g, x, special, base, hit, acc);
    if (by_bound) take_chunk_bound(c, acc);
  }

  if (k.need_sum && acc.sum.rebase(v1, k.inv_t)) acc.sum.add_group(x, k.inv_t);

  if (k.untruncated && acc.max_x > -INFINITY && acc.max_x < INFINITY) {
    // Gumbel-max over the tokens within reach of the lane's maximum so far: one Philox block a group
    // of 4 consecutive ids (counter t / 4). G lies in [-2.812, 22.874], so a token more than 25.7
    // below a token already seen never wins.
    // The noise's parameters through the read-only path: reloaded here rather than held in registers.
    const SlotTableView& tab = c.job->table;
    const float T = __ldg(&tab.params[pro.slot].temperature);
    const uint64_t seed = __ldg(reinterpret_cast<const unsigned long long*>(&tab.params[pro.slot].seed));
    const uint64_t step = __ldg(reinterpret_cast<const unsigned long long*>(tab.step + pro.slot));
    const float reach = detail::apply_temperature(acc.max_x, T) - 25.7f;
    const uint32_t purpose = detail::purpose(detail::Draw::kSampling, pro.position);
    // Not unrolled (Philox per block of 4 would otherwise be interleaved eightfold, in registers the
    // screen needs): the block's values rotate into x[0..3], which the loop consumes.
#pragma unroll 1
    for (int q = 0; q < kGroupTokens / 4; ++q) {
      float z[4];
      bool any = false;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        z[j] = detail::apply_temperature(x[j], T);
        any |= z[j] >= reach;
      }
#pragma unroll
      for (int i = 0; i + 4 < kGroupTokens; ++i) x[i] = x[i + 4];
      if (!any) continue;
      const int32_t t0 = token(4 * q);
      const detail::Philox4 words = detail::random_block(seed, step, purpose, static_cast<uint32_t>(t0) >> 2);
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (z[j] >= reach)
          acc.win = better(acc.win, ArgMaxF{z[j] + detail::gumbel_from_uniform_fast(detail::uniform_from_word(words.v[j])), t0 + j});
    }
  }
}

// The warp's state at the end of its chunk, reduced over its lanes (every lane gets it).
__device__ __forceinline__ WarpSummary summarise_warp(const RowKind& k, const LaneScreen& acc) {
  WarpSummary s;
  s.max_key = warp_max(acc.max_key);
  s.bound = static_cast<unsigned long long>(acc.bound_hi) << 32;
  s.valid = warp_sum(acc.valid);
  s.nan = __any_sync(0xFFFFFFFFu, acc.nan);
  const ExpSum sum = k.need_sum ? acc.sum.warp_combine(k.inv_t) : ExpSum{};
  const ExpSum raw = k.need_raw ? acc.raw.warp_combine(1.0f) : ExpSum{};
  s.sum_max = sum.max;
  s.sum = sum.sum;
  s.raw_max = raw.max;
  s.raw_sum = raw.sum;
  s.win = k.untruncated ? warp_best(acc.win) : ArgMaxF{0.0f, -1};
  return s;
}

// The chunk's TileStat from its warps' summaries, formed by every warp of the block alike (whole in
// each warp's lane 0, which adds the sums; thread 0 publishes it): lane l holds warp l % kFastWarps's
// summary. The maxima, counts and winner reduce by shuffles within each group of kFastWarps lanes,
// in any order; the sums are each lane's term, which lane 0 adds in warp order, the sums of a loop
// over the warps bit for bit (a term left out adds +0). Thread 0 alone looping over the warps ran
// about 260 instructions with a branch around each warp's winner and term; the same combine in warp
// 0's lanes was 0.1-0.4 µs faster warm and 0.5-1.3 cold at small B (perf-notes v3.58). Every warp,
// not warp 0 alone: behind a warp-uniform branch ptxas gave each shuffle a divergent fallback (+900
// instructions in the kAny forms) and moved the 16-bit forms' registers into a spill inside the
// screen's loop.
__device__ __forceinline__ TileStat combine_warp_summaries(float inv_t, const WarpSummary* warps) {
  static_assert((kFastWarps & (kFastWarps - 1)) == 0 && kFastWarps <= 32, "xor shuffles span a summary group");
  const WarpSummary& ws = warps[threadIdx.x & (kFastWarps - 1)];
  auto across = [](auto v, auto op) {
#pragma unroll
    for (int o = 1; o < kFastWarps; o <<= 1) v = op(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
    return v;
  };
  auto max_of = [](auto a, auto b) { return max(a, b); };
  TileStat t;
  t.max_key = across(ws.max_key, max_of);
  t.bound = across(ws.bound, max_of);
  t.valid = across(ws.valid, [](int32_t a, int32_t b) { return a + b; });
  t.nan = across(ws.nan, [](int32_t a, int32_t b) { return a | b; });
  t.raw_max = across(ws.raw_max, [](float a, float b) { return fmaxf(a, b); });
  ArgMaxF win = ws.win;
#pragma unroll
  for (int o = 1; o < kFastWarps; o <<= 1)
    win = better_select(win, ArgMaxF{__shfl_xor_sync(0xFFFFFFFFu, win.score, o), __shfl_xor_sync(0xFFFFFFFFu, win.token, o)});
  t.win_score = win.score;
  t.win_token = win.token;
  // Sums of 2^(x c - K), K = sum_scale of the chunk's maximum (x, or the raw logit), which stage
  // 2 forms again from TileStat's maxima: exact rescales (ExpSum). A term is formed in every lane
  // whatever its conditions (finite: exact_pow2 clamps) and kept by a select, not a branch. A sum
  // the row does not need has no maximum (summarise_warp leaves ExpSum{}), so no term.
  const float tm = t.max_key ? detail::key_value(t.max_key) : -INFINITY;
  const float c = sum_base2(inv_t), c_raw = sum_base2(1.0f);
  const float sum_term = ws.sum * exact_pow2(sum_scale(ws.sum_max, c) - sum_scale(tm, c));
  const float raw_term = ws.raw_sum * exact_pow2(sum_scale(ws.raw_max, c_raw) - sum_scale(t.raw_max, c_raw));
  const float own_sum = ws.sum_max > -INFINITY && tm < INFINITY ? sum_term : 0.0f;
  const float own_raw = ws.raw_max > -INFINITY && t.raw_max < INFINITY ? raw_term : 0.0f;
  t.sum = 0.0f;
  t.raw_sum = 0.0f;
#pragma unroll
  for (int w = 0; w < kFastWarps; ++w) {
    t.sum += __shfl_sync(0xFFFFFFFFu, own_sum, w);
    t.raw_sum += __shfl_sync(0xFFFFFFFFu, own_raw, w);
  }
  return t;
}

// The chunk's tiles [first, end) of a row for this kernel's shape.
struct ChunkRange {
  int32_t first, end;
};
__device__ __forceinline__ ChunkRange chunk_range(const FastScratch& f, int32_t chunk) {
  const int32_t first = chunk * f.tiles_per_chunk;
  return ChunkRange{first, min(first + f.tiles_per_chunk, f.tiles)};
}
// Whether the row gives tails to other blocks (FastScratch::tail_first): its heads and its tails
// decide it alike from the row's request.
__device__ __forceinline__ bool row_has_tail(const FastScratch& f, const RowPrologue& pro) {
  return f.tail_first > 0 && pro.has_rules;
}
// A call with row tails: chunk 2c is head c of the row, which starts at tiles_per_chunk * c whether the
// row has tails or not (so its first copies go out before the request is read); chunk 2c + 1 is its
// tail, the rest of those tiles past tail_first of them in a row with tails, and empty otherwise.
__device__ __forceinline__ ChunkRange tails_range(const FastScratch& f, int32_t chunk, bool has_tail) {
  const int32_t first = (chunk >> 1) * f.tiles_per_chunk;
  const int32_t end = min(first + f.tiles_per_chunk, f.tiles);
  const int32_t split = has_tail ? min(first + f.tail_first, end) : end;
  return (chunk & 1) ? ChunkRange{split, end} : ChunkRange{first, split};
}
template <DType D, int Loads>
__device__ __forceinline__ int32_t warp_step_base(int32_t tile) {
  return tile * tile_tokens(D, Loads) + (threadIdx.x >> 5) * StepShape<D, Loads>::kStepTokens;
}
// The warp's shared-memory slot for its step i (of kFastStages, reused in turn).
template <DType D, int Loads>
__device__ __forceinline__ StepSlot<D, Loads>& warp_slot(StepSlot<D, Loads>* slots, int32_t i) {
  return slots[(i % kFastStages<Loads>) * kFastWarps + (threadIdx.x >> 5)];
}

// Starts the copies of the first kFastStages - 1 steps of logits of the chunk's tiles cr (one commit
// group each, empty past the chunk), before the row's request is read where it may be.
template <DType D, int Loads>
__device__ __forceinline__ void start_chunk(const RowJob& job, ChunkRange cr, const void* row, bool vec_ok,
                                            StepSlot<D, Loads>* slots) {
#pragma unroll
  for (int i = 0; i < kFastStages<Loads> - 1; ++i) {
    if (cr.first + i < cr.end)
      issue_logits<D>(row, vec_ok, warp_step_base<D, Loads>(cr.first + i), job.table.vocab_size, warp_slot(slots, i));
    copy_async_commit();
  }
}

// Stage 1 for chunk `chunk` of row r, whose first steps start_chunk issued. Returns true (in every
// thread) in the row's last block to finish (never with fast.separate_stage2).
template <DType D, bool Tails, int Loads>
__device__ bool stage1_chunk(const RowJob& job, int32_t r, int32_t chunk, int32_t slot, const RowPrologue& pro,
                             const RowKind& k, const void* row, bool vec_ok, StepSlot<D, Loads>* slots, Stage1Shared& sh,
                             int* last_flag) {
  constexpr int kAhead = kFastStages<Loads> - 1;  // steps in flight while one is screened
  const FastScratch& f = job.fast;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const int warp = threadIdx.x >> 5;
  const ChunkRange cr = Tails ? tails_range(f, chunk, row_has_tail(f, pro)) : chunk_range(f, chunk);
  const int32_t steps = cr.end - cr.first;
  const uint32_t* mask_row = reinterpret_cast<const uint32_t*>(pro.mask);
  const uint32_t* seen_row = pro.penalised ? tab.hist_bits + static_cast<int64_t>(slot) * tab.words : nullptr;
  if (threadIdx.x == 0) {
    sh.count = 0;
    sh.bound_hi = 0;
    sh.rank = screen_rank(k.top_k, static_cast<uint32_t>(V));
  }
  sh.lane_max[threadIdx.x] = 0;
  // The first steps' logits are in flight; their bitmap words follow now that the request is known
  // (plain loads: they belong to no commit group).
  const bool bitmaps = mask_row || seen_row;
  if (bitmaps) {
    for (int32_t i = 0; i < kAhead && i < steps; ++i)
      issue_bitmaps<D, false>(warp_step_base<D, Loads>(cr.first + i), mask_row, seen_row, tab.words, warp_slot(slots, i));
  } else {  // every slot keeps the defaults
#pragma unroll
    for (int i = 0; i < kFastStages<Loads>; ++i) issue_bitmaps<D, false>(0, nullptr, nullptr, 0, warp_slot(slots, i));
  }
  ScreenContext c;
  c.job = &job;
  c.pro = &pro;
  c.kind = &k;
  c.list = f.cands + static_cast<int64_t>(r) * f.cand_stride + static_cast<int64_t>(chunk) * f.chunk_capacity;
  c.count = &sh.count;
  c.bound_hi = &sh.bound_hi;
  c.lane_max = sh.lane_max;
  SpecialTokens special;
  if (pro.has_rules) special.init(tab, pro, warp_step_base<D, Loads>(cr.first));
  if ((threadIdx.x & 31) == 0) sh.issue[warp] = step_issue<D>(row, vec_ok, warp_step_base<D, Loads>(cr.first), steps, V, slots);
  __syncwarp();
  LaneScreen acc;
  __syncthreads();  // sh.count
  timeline_mark(kMarkScreening);
  for (int32_t i = 0; i < steps; ++i) {
    copy_async_wait<kAhead - 1>();  // step i has landed (kAhead + i groups committed so far)
    const int32_t ahead = i + kAhead;
    if (ahead < steps) {  // into the slot that step i - 1 used
      StepSlot<D, Loads>& next = warp_slot(slots, ahead);
      const StepIssue is = read_step_issue(sh.issue[warp]);
      if (ahead < is.full_steps) {
        issue_full_step<D, Loads>(is, ahead);
      } else {  // the row's end or an unaligned row
        const StepIssueTail t = read_step_issue_tail(sh.issue[warp]);
        issue_logits<D>(t.row, t.vec_ok, warp_step_base<D, Loads>(cr.first + ahead), V, next);
      }
      if (bitmaps) issue_bitmaps<D, true>(warp_step_base<D, Loads>(cr.first + ahead), mask_row, seen_row, tab.words, next);
    }
    copy_async_commit();
    StepSlot<D, Loads>& cur = warp_slot(slots, i);
    // Not unrolled: one copy of the screen's code for the two groups of a 16-bit step (the 16-bit
    // kernel shrank from 31 K to 25 K instructions; measured on the H200: bf16 -17 % at B = 512,
    // -14 % at B = 128, -2 us at B = 1).
#pragma unroll 1
    for (int g = 0; g < StepShape<D, Loads>::kGroups; ++g)
      screen_group<D>(c, cur, g, warp_step_base<D, Loads>(cr.first + i) + g * 32 * kGroupTokens, special, acc);
    // A bound for the steps to come: after each of the first four steps, then every second one
    // (later steps move it less, and the bisection costs about as much as a group's screen). By
    // steps, not tokens: short 16-bit steps raise it twice as often a token (perf-notes v3.25).
    // (i % 2, not i & 1: with the latter ptxas spills in the 16-bit kernels.)
    if (k.top_k && i + 1 < steps && (i < 4 || (i % 2) == 1)) raise_by_top_k(c, k.top_k, acc);
  }

  const WarpSummary s = summarise_warp(k, acc);
  if ((threadIdx.x & 31) == 0) sh.warp[warp] = s;
  __syncthreads();
  timeline_mark(kMarkScreened);
  // Every warp combines the summaries alike (no branch around the shuffles); thread 0 publishes.
  TileStat t = combine_warp_summaries(k.inv_t, sh.warp);
  if (threadIdx.x == 0) {
    t.count = sh.count;
    job.fast.stats[static_cast<int64_t>(r) * f.chunks + chunk] = t;
    // A head whose tail is empty (a row without tails, or a last chunk no longer than tail_first)
    // counts it too, with its statistics (that block leaves without touching either): nothing in
    // it, no raw maximum, no winner.
    int done = 1;
    if (Tails && !(chunk & 1) && cr.end == min(cr.first + f.tiles_per_chunk, f.tiles)) {
      done = 2;
      TileStat e;  // (field by field: `TileStat e{}` changed the fp16 kernel's allocation)
      e.max_key = 0;
      e.bound = 0;
      e.sum = 0.0f;
      e.raw_max = -INFINITY;
      e.raw_sum = 0.0f;
      e.win_score = 0.0f;
      e.win_token = -1;
      e.valid = 0;
      e.nan = 0;
      e.count = 0;
      job.fast.stats[static_cast<int64_t>(r) * f.chunks + chunk + 1] = e;
    }
    // Publish the chunk's candidates (every warp's, ordered before this by the barrier) and its
    // statistics before counting it as done; the last chunk acquires the others', or
    // row_stage2_kernel's block of the row waits for the count (wait_for_count).
    if (!f.separate_stage2) {
      *last_flag = count_release_completes(f.tiles_done + r, done, f.chunks);
    } else if (SONIC_COUNTED_START) {
      count_release(f.tiles_done + r, done);
    }
  }
  timeline_mark(kMarkChunkDone);
  // With stage 2 in row_stage2_kernel no chunk is the last. Without SONIC_COUNTED_START that kernel
  // waits for this grid to complete (and so sees every chunk's writes): the counting release atomic
  // (with __threadfence before v3.56, about 1 us of each block's end at B = 1, the timeline's "chunk
  // end") is left out.
  if (f.separate_stage2) return false;
  __syncthreads();
  return *last_flag != 0;
}

}  // namespace sonic::cuda
