// Stage 2 of the fast path, run by the last block of a row to finish stage 1. Merges the tiles'
// statistics; for truncated rows gathers the candidates at or above the row's bound (the largest
// tile bound), divides them by T and sorts them. Every token outside that set lies at or below the
// bound's value, so the set's tokens with z above z(bound) are exactly the row's first n tokens in
// the total order (a true prefix). Steps 6-8 (min-p, top-k, both top-p rules) are decided on that
// prefix when it holds the kept set, and the row is sampled by Gumbel-max with the noise in double,
// as the reference does (the sampling form of wide blocks screens with the fast noise first and
// draws the exact noise only where two scores come within its error: the same token). Rows it
// cannot settle (kept set beyond the prefix, +inf or no valid logits, rank or top-N outputs) are
// flagged for the exact path. It writes outputs, never the request table.
// The phases live in stage2_merge.cuh (statistics and candidate lists), stage2_prefix.cuh (the sorted
// prefix) and stage2_outputs.cuh (logprobs, ranks, top N); this file decides and draws.
#pragma once

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "cuda/gumbel_noise.cuh"
#include "cuda/margin_band.cuh"
#include "cuda/row_kind.cuh"
#include "cuda/row_outputs.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/stage2_merge.cuh"
#include "cuda/stage2_outputs.cuh"
#include "cuda/stage2_prefix.cuh"
#include "cuda/stage2_shared.cuh"
#include "cuda/timeline.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {

// Steps 6-8 on the sorted prefix sh.sorted[0, n) of the row's total order (every other valid token
// has z <= zl < every prefix z), with sum_all the row's mass (a reference, so that the fast
// kernel's thread 0 still loads sh.sum_all where it is used) and `search` the prefix's searches
// (ThreadPrefixSearch, or WarpPrefixSearch with the whole warp calling). Returns the size of the
// kept set (a prefix), or -1 when the kept set or a quantity that decides it lies beyond the
// prefix. Where only the top-p margin leaves it open, *band_lo and *band_hi get the sizes at either
// end of the margin (both in the prefix).
template <int Threads, class Search>
__device__ __forceinline__ int decide_kept(const SlotParams& p, int32_t V, float zm, float zl, int n, int valid,
                                           const double& sum_all, const Search& search, const Stage2Shared<Threads>& sh,
                                           int32_t* band_lo, int32_t* band_hi) {
  if (n == 0) return -1;
  const bool complete = n == valid;  // the prefix is the whole row
  const bool top_k_on = detail::top_k_cuts(p.top_k, V);
  auto count_at_least = [&](float c) { return search.count_at_least(c); };
  auto crossing = [&](double target, int lim) { return search.crossing(target, lim); };
  // Step 6: the survivors of min-p, a prefix of `surv` tokens (known when its end is inside the
  // prefix, or when nothing beyond the prefix can reach the cut).
  int surv = valid;
  bool surv_known = true;
  if (p.min_p > 0.0f) {
    const float cut = min_p_threshold(zm, p.min_p);
    const int c = count_at_least(cut);
    if (c < n || complete || cut > zl) surv = c;
    else surv_known = false;  // at least n
  }
  // Step 7.
  int keep = surv;
  bool keep_known = surv_known;
  if (top_k_on) {
    if (surv_known) keep = min(p.top_k, surv);
    else if (p.top_k <= n) keep = p.top_k, keep_known = true;
  }
  if (p.top_p >= 1.0f) return keep_known && keep <= n ? keep : -1;
  // Step 8.
  const bool joint = p.flags & kSlotTopPJoint;
  const bool all_survive = p.min_p <= 0.0f && !top_k_on;
  double total;
  if (joint || all_survive) total = sum_all;
  else if (keep_known && keep <= n) total = sh.cum[keep - 1];
  else return -1;
  if (joint || all_survive) {
    // The kept set for a target mass (or -1).
    auto kept_at = [&](double target) {
      int x = crossing(target, n);
      if (x == n) {
        if (keep_known && keep <= n) return keep;  // min-p / top-k end the kept set first
        if (!complete) return -1;                   // the crossing lies beyond the prefix
        x = n - 1;                                  // rounding: every token
      }
      const int kept = x + 1;
      return keep_known ? min(kept, keep) : kept;  // unknown keep is >= n >= kept
    };
    // A prefix that is the whole row has its exact mass. Otherwise the mass is stage 1's sum_all, of
    // exp((x - x_max) / T) in fp32, where the reference sums exp(z - zm) over z = x / T rounded:
    // each term's exponent differs by up to about d = |z| 2^-24, so the sums by a factor up to
    // e^d, past SPEC's 1e-5 at large |z| (low T; perf-notes v3.31). The row is decided here only
    // when the crossing stays put over that margin (2d: twice the bound); otherwise it is the exact
    // path's.
    if (complete) return kept_at(static_cast<double>(p.top_p) * sh.cum[n - 1]);
    const double target = static_cast<double>(p.top_p) * total;
    const double margin = detail::top_p_sum_margin(zm);
    const int lo = kept_at(target * (1.0 - margin)), hi = kept_at(target * (1.0 + margin));
    if (lo == hi) return lo;
    if (lo > 0 && hi > lo) {
      *band_lo = lo;
      *band_hi = hi;
    }
    return -1;
  }
  const double target = static_cast<double>(p.top_p) * total;
  const int x = crossing(target, keep);
  return x == keep ? keep : x + 1;
}

// The prefix's cumulative masses sh.cum[0, n) against zm by a block scan (and in wide blocks the
// early noise into sorted order first): the route of prefixes longer than decided_by_warps takes.
// The whole block calls it; it ends with a barrier.
template <int Threads>
__device__ __noinline__ void scan_prefix_mass(Stage2Shared<Threads>& sh, int n, float zm) {
  const int tid = threadIdx.x;
  if constexpr (kEarlyNoise<Threads>) sort_noise(sh, n, tid, Threads);
  double e[kScanItems<Threads>];
#pragma unroll
  for (int q = 0; q < kScanItems<Threads>; ++q) {
    const int i = tid * kScanItems<Threads> + q;
    e[q] = i < n ? key_mass(sh.sorted[i], zm) : 0.0;
  }
  PrefixScan<Threads>(sh.temp.scan).InclusiveSum(e, e);
#pragma unroll
  for (int q = 0; q < kScanItems<Threads>; ++q) {
    const int i = tid * kScanItems<Threads> + q;
    if (i < n) sh.cum[i] = e[q];
  }
  timeline_warp_arrive(kMarkDecided);
  __syncthreads();
}

// A flagged row's margin band (margin_band.cuh) from its sorted prefix: for each kept size c in
// [sh.band_lo, sh.band_hi], the fixed mass of the first c keys against zm (the exact path's
// integers) and the token the draw below takes from them (prefix_draw, so the two agree). The
// whole block calls it, after decide_kept's barrier. ExactNoiseFirst (the screened draw's form,
// whose early noise is gumbel_fast's): the first band_hi keys' early noise is drawn again, exactly.
template <int Threads, bool ExactNoiseFirst = false>
__device__ __noinline__ void write_band(MarginBand* band, uint64_t seed, uint64_t step, uint32_t purpose,
                                           float zm, Stage2Shared<Threads>& sh) {
  const int tid = threadIdx.x;
  const int lo = sh.band_lo, hi = sh.band_hi;
  if constexpr (ExactNoiseFirst) {
    for (int i = tid; i < hi; i += Threads) sh.early.noise[i] = gumbel_exact(seed, step, purpose, detail::key_token(sh.sorted[i]));
    __syncthreads();
  }
  const double md = zm;
  unsigned long long below = 0;
  ArgMaxD best{0.0, -1};
  for (int i = tid; i < lo - 1; i += Threads) {
    below += fixed_mass(detail::key_value(sh.sorted[i]), md);
    best = better(best, prefix_draw(sh, seed, step, purpose, i));
  }
  below = warp_sum(below);
  if ((tid & 31) == 0 && below) atomicAdd(&sh.band_below, below);
  best = block_best<Threads>(best, sh.temp.best);  // its barrier orders the adds before the read
  if (tid == 0) {
    unsigned long long mass = sh.band_below;
    band->lo = lo;
    band->hi = hi;
    band->below = mass;
    for (int j = 0; j <= hi - lo; ++j) {
      const int i = lo - 1 + j;
      mass += fixed_mass(detail::key_value(sh.sorted[i]), md);
      best = better(best, prefix_draw(sh, seed, step, purpose, i));
      band->mass[j] = mass;
      band->token[j] = best.token;
    }
  }
}

// A row settled in stage 2 (thread 0): its status, and its exact-path flag cleared.
__device__ __forceinline__ void write_settled_status(const RowJob& job, int32_t r, bool nan) {
  if (job.out.status) job.out.status[r] = nan ? kStatusNaN : 0;
  job.fast.exact_flags[r] = 0;
}

// The verdict of a settled verification row (defined below).
template <int Threads>
__device__ void verdict_row(const RowJob& job, int32_t r, const RowPrologue& pro, const RowKind& k, const VerifyRow& w,
                            int kept, double kept_sum, float zm, int32_t token, bool early_correction,
                            Stage2Shared<Threads>& sh);
// A settled row's outputs other than the common row's token and status (defined below; the whole
// block calls it). Out of line, it takes a RowJob whose address is a kernel parameter's
// (__grid_constant__) and the row's RowPrologue, RowKind and VerifyRow by value: by reference, the
// caller would keep them on the stack.
template <int Threads, Calls C>
__device__ __noinline__ void settled_row_outputs(const RowJob& job, int32_t r, RowPrologue pro, RowKind k, VerifyRow w,
                                                 int kept, double kept_sum, float zm, int32_t token,
                                                 bool correction_only, bool prefix_ranks, Stage2Shared<Threads>& sh);

// Stage 2 for row r (the whole block).
template <int Threads, Calls C = Calls::kAny>
__device__ void stage2_row(const RowJob& job, int32_t r, int32_t slot, const RowPrologue& pro, const RowKind& k,
                           const VerifyRow& w, Stage2Shared<Threads>& sh) {
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const RowOutputs& out = job.out;
  const SlotParams& p = pro.p;
  const int tid = threadIdx.x;
  // The sampling form of wide blocks draws its early noise fast and screens the winner
  // (fast_winner_rivalled); verification's forms keep the exact early noise, which their
  // corrections take as it is (verdict_row).
  constexpr bool kScreened = kEarlyNoise<Threads> && C == Calls::kSampling;
  merge_row(job, r, k, sh);
  timeline_mark(kMarkMerged);
  const bool verifying = verification_call<C>(job);
  if (verifying && !block_request_ok(job, w)) {
    if (tid == 0) {
      write_invalid_verify_row(job, r);
      job.fast.exact_flags[r] = 0;
    }
    return;
  }

  const unsigned long long max_key = sh.max_key;
  const float mx = max_key ? detail::key_value(max_key) : -INFINITY;
  const bool want_lp = out.logprob != nullptr || (out.top_ids != nullptr && p.top_n > 0);
  // Ranks and top-N come from the sorted prefix of truncated rows (prefix_ranks); raw-mode ones only
  // where x is the input logit everywhere (no rules). Other rows take the exact path for them.
  const bool want_ranks = asks_ranks(out, p);
  const bool prefix_ranks = want_ranks && k.truncated && (job.mode != LogprobMode::kRaw || !pro.has_rules);
  bool exact = max_key == 0 || mx == INFINITY || (want_ranks && !prefix_ranks) ||
               (want_lp && job.mode == LogprobMode::kRaw && !(sh.raw_max > -INFINITY && sh.raw_max < INFINITY));
  // Sums whose terms may have overflowed or underflowed (a maximum at or past stage 1's scale limit,
  // |z| past 2.9e6: ExpSum's sum_scale) are the exact path's, which sums in double.
  if ((k.need_sum && !(fabsf(mx * sum_base2(k.inv_t)) < kSumScaleLimit)) ||
      (k.need_raw && !(fabsf(sh.raw_max * sum_base2(1.0f)) < kSumScaleLimit)))
    exact = true;
  // An untruncated row's final distribution is the exact path's where it fits, and also where a
  // valid x may have a z of -inf (T < 1 and x < -FLT_MAX * T), which stage 1's count of valid x
  // includes: the reference's count leaves it out.
  if (k.untruncated && ((out.final_ids && (sh.valid <= out.final_capacity || p.temperature < 1.0f)) ||
                        sh.win.token < 0))
    exact = true;
  // Verification of a random request needs p_j as a list: untruncated rows take the exact path.
  if (verifying && k.untruncated && w.rule != static_cast<int32_t>(VerifyRule::kStrict)) exact = true;
  const float T = p.temperature;
  const float zm = pro.greedy ? mx : detail::apply_temperature(mx, T);
  // z = x / T leaves the floats where x does not (|x| > FLT_MAX * T): a maximum whose z is +inf, or
  // -inf (every valid token then has z = -inf: no valid token), is the exact path's, which orders z.
  if (!(zm > -INFINITY && zm < INFINITY)) exact = true;
  // Stage 1's untruncated winner adds z + G in fp32, which rounds the noise to z's float steps (2^-7
  // at 2^16: a tie's odds move by about a percent); stage 1's sums are of exp((x - x_max) / T), off
  // from the reference's exp(z - zm) by about |z| 2^-24 a term, which processed logprobs divide by.
  // Where |z| makes either matter (T near 1e-5), the exact path, which works in z and double.
  if (!pro.greedy && ((k.untruncated && fabsf(zm) >= 65536.0f) ||
                      (want_lp && job.mode == LogprobMode::kProcessed && fabsf(zm) > 1024.0f)))
    exact = true;
  const bool correction_only = verifying && !pro.greedy && w.rule != static_cast<int32_t>(VerifyRule::kStrict);

  int kept = 0;
  double kept_sum = 1.0;
  int32_t token = -1;
  unsigned long long exact_hint = 0;  // FastScratch::exact_hints
  bool banded = false;                // FastScratch::bands[r] written
  if (!exact && pro.greedy) {
    token = detail::key_token(max_key);
    kept = 1;
    if (tid == 0) sh.sorted[0] = max_key;
  } else if (!exact && k.untruncated) {
    token = sh.win.token;
    kept = sh.valid;
    kept_sum = sh.sum_all;
  } else if (!exact) {
    // Min-p: tokens below the cut never survive, so the prefix stops there too, unless it must hold
    // the top N in the processed or raw mode (which every valid token may enter); top-k rows sort
    // about k keys, or N.
    // The top N the prefix must hold beyond the kept set (processed and raw modes; 0: none).
    const int n_top = prefix_ranks && job.mode != LogprobMode::kFinal ? top_count(out, p) : 0;
    const float cut = p.min_p > 0.0f && n_top == 0 ? min_p_threshold(zm, p.min_p) : -INFINITY;
    const bool top_k_on = detail::top_k_cuts(p.top_k, V);
    const int32_t want = top_k_on ? max(p.top_k, n_top) : 0;
    const bool with_x = prefix_ranks && job.mode == LogprobMode::kRaw;
    // The early noise is the one the row's draw uses: kind 0 at its position, except for random-rule
    // verification rows, which never emit their kind-0 sample (they emit their draft, or a kind-2
    // sample at their position: the bonus token or the residual's), so theirs is kind 2 and their
    // kind-0 draw is skipped.
    const SampleNoise noise{kEarlyNoise<Threads>, p.seed, kEarlyNoise<Threads> ? tab.step[slot] : 0ull,
                            correction_only ? detail::purpose(detail::Draw::kCorrection, static_cast<uint32_t>(w.j))
                                            : detail::purpose(detail::Draw::kSampling, pro.position),
                            zm};
    // Top-p alone (every valid token survives steps 6-7): the kept set lies in the prefix only if its
    // mass reaches decide_kept's target, top_p * sum_all; 1e-9 below it covers the sums' orders.
    const bool top_p_alone = p.top_p < 1.0f && p.min_p <= 0.0f && !top_k_on && n_top == 0;
    const double need_mass =
        top_p_alone ? static_cast<double>(p.top_p) * sh.sum_all * (1.0 - 1e-9) : 0.0;
    const float zl = gather_prefix<Threads, kScreened>(job, r, mx, T, want, cut, with_x, noise, need_mass, sh);
    timeline_mark(kMarkGathered);
    const int n = sh.n;
    // The top N in the processed and raw modes must lie in the prefix (the final mode's are kept).
    if (n > kGatherCap || n < min(n_top, sh.valid)) {
      exact = true;
    } else {
      // A short prefix (the common case) in wide blocks: two warps and one barrier, warp 0 its mass
      // and then the decision, warp 1 its noise in sorted order and the draw's winners
      // (stage2_prefix.cuh). Longer ones: a block scan, a barrier, then the same.
      bool by_warps = false;
      if constexpr (kEarlyNoise<Threads>) {
        by_warps = decided_by_warps<Threads>(n);
        if (by_warps && tid < 64) {
          if (tid < 32) warp_prefix_mass(sh, n);
          else sort_noise(sh, n, tid - 32, 32);
          __syncwarp();
        }
      }
      if (!by_warps) {
        scan_prefix_mass(sh, n, zm);
      }
      // Wide blocks: warp 1 writes the draw's winners while warp 0 decides. Warp 1's code comes
      // first, so that warp 1, which ends the phase, runs on without a jump over warp 0's.
      if constexpr (kEarlyNoise<Threads>)
        if (tid / 32 == 1 && n > 0 && !correction_only) {
          write_prefix_winners<Threads, kScreened>(sh, n);
#if SONIC_TIMELINE
          __syncwarp();
          timeline_warp_point(kPointWinnersWritten, static_cast<unsigned>(sh.early.winner[n - 1]));
#endif
        }
      // A prefix that is the whole row has the reference's mass exactly (stage 1's is of x: see
      // decide_kept); the logprobs divide by it.
      if constexpr (kEarlyNoise<Threads>) {
        // Wide blocks: warp 0 decides, by ballots where one thread searched (WarpPrefixSearch).
        if (tid < 32) {
          const double sum_all = n > 0 && n == sh.valid ? sh.cum[n - 1] : sh.sum_all;
          int32_t lo = 0, hi = 0;
          const int decided = decide_kept(p, V, zm, zl, n, sh.valid, sum_all, WarpPrefixSearch<Threads>{sh, n}, sh,
                                          &lo, &hi);
          __syncwarp();  // every lane has read sh.sum_all
          if (tid == 0) {
            sh.sum_all = sum_all;
            sh.band_lo = lo;
            sh.band_hi = hi;
            sh.band_below = 0;
            sh.kept = decided;
          }
        }
      } else if (tid == 0) {
        if (n > 0 && n == sh.valid) sh.sum_all = sh.cum[n - 1];
        sh.band_lo = sh.band_hi = 0;
        sh.band_below = 0;
        sh.kept = decide_kept(p, V, zm, zl, n, sh.valid, sh.sum_all, ThreadPrefixSearch<Threads>{sh, n}, sh,
                              &sh.band_lo, &sh.band_hi);
      }
      timeline_stamp(kValueDecided);
      __syncthreads();
      timeline_mark(kMarkDecided);
      kept = sh.kept;
      timeline_value(kValueKept, kept);
      if (kept <= 0) {
        exact = true;
        // A top-k row's k-th sorted key: k of the row's keys reach it (the exact path's split), and
        // its list holds them all.
        static_assert(kGatherCap <= kSplitListKeys, "the exact path's list holds a hinted row's k keys");
        if (top_k_on && p.top_k <= n) exact_hint = sh.sorted[p.top_k - 1];
        // Only the margin left a joint top-p row with top-k open: the exact path's split then needs
        // only the exact total (split_band_token). Rows with min-p cut otherwise and are not banded.
        banded = exact_hint && sh.band_lo > 0 && sh.band_hi - sh.band_lo < kBandKeys && job.fast.bands &&
                 !verifying && (p.flags & kSlotTopPJoint) && !(p.min_p > 0.0f);
        if (banded) {
          const uint32_t purpose = detail::purpose(detail::Draw::kSampling, pro.position);
          write_band<Threads, kScreened>(job.fast.bands + r, p.seed, tab.step[slot], purpose, zm, sh);
        }
      } else {
        kept_sum = sh.cum[kept - 1];
      }
      if (kept > 0 && !correction_only) {
        // Gumbel-max over the kept set, noise in double exactly as the reference draws it.
        if constexpr (kEarlyNoise<Threads>) {
          token = sh.early.winner[kept - 1];  // write_prefix_winners, before the decision's barrier
          if constexpr (kScreened)
            if (fast_winner_rivalled<Threads>(sh))  // the same in every warp
              token = exact_prefix_winner<Threads>(sh, p.seed, tab.step[slot],
                                                   detail::purpose(detail::Draw::kSampling, pro.position), kept);
        } else {
          token = kept_winner_noise_now<Threads>(sh, p.seed, tab.step[slot],
                                                 detail::purpose(detail::Draw::kSampling, pro.position), kept);
        }
        timeline_mark(kMarkSampled);
      }
    }
  }
  if (exact) {
    if (tid == 0) {
      job.fast.exact_flags[r] = 1;
      job.fast.exact_hints[r] = exact_hint;
      if (job.fast.bands && !banded) job.fast.bands[r].lo = 0;
      atomicAdd(job.fast.flagged, 1);
      atomicAdd(job.fast.flagged_total, 1ull);
    }
    return;
  }
  // The common row, whose outputs are its token and status: thread 0 stores them and the block
  // leaves, without the barrier in settled_row_outputs (nothing reads shared memory after it: both
  // kernels return) and without the branches of the other outputs, whose code cost about 0.5 us of
  // fetch after the barrier in the timeline (perf-notes v3.47); in wide blocks that code is out of
  // line, so that these stores lie near the exit rather than 31 KB ahead of the branch (v3.48).
  // (A row with ranks or the top N that reaches here has prefix_ranks: tokens_only is false for it.)
  if (!verifying && out.tokens_only()) {
    if (tid == 0) {
      out.tokens[r] = token;
      write_settled_status(job, r, sh.nan);
    }
    timeline_warp_arrive(kMarkExit);
    return;
  }
  settled_row_outputs<Threads, C>(job, r, pro, k, w, kept, kept_sum, zm, token, correction_only, prefix_ranks, sh);
}

// The row verdict of a settled verification row (docs/design-verify.md). The kept set is
// sh.sorted[0, kept) (z keys; greedy rows: the argmax alone) with p_i = exp(z_i - zm) / kept_sum;
// token is the row's kind-0 sample at its position (greedy rows: the argmax; strict rows only: the
// other rules never emit it). With early_correction, sh.early.noise[i] is the kind-2 noise of
// sorted[i] at the row's position, drawn while the prefix was sorted.
template <int Threads>
__device__ void verdict_row(const RowJob& job, int32_t r, const RowPrologue& pro, const RowKind& k, const VerifyRow& w,
                            int kept, double kept_sum, float zm, int32_t token, bool early_correction,
                            Stage2Shared<Threads>& sh) {
  const VerifyJob& v = job.verify;
  const SlotParams& p = pro.p;
  const int tid = threadIdx.x;
  const uint64_t step = job.table.step[w.slot];
  const int32_t j = w.j;
  const int64_t d = w.draft0 + j;
  const int32_t dj = j < w.n ? v.draft_tokens[d] : -1;
  const bool strict = pro.greedy || w.rule == static_cast<int32_t>(VerifyRule::kStrict);
  auto prob = [&](int i) {  // p_j of the i-th kept token, fp32 as the reference casts it
    return static_cast<float>(key_mass(sh.sorted[i], zm) / kept_sum);
  };
  // Gumbel-max over the kept set with kind-2 noise at the row's position j; `score_of` gives the
  // base score of kept token i (or -inf to leave it out).
  auto correction = [&](auto&& score_of) {
    const uint32_t purpose = detail::purpose(detail::Draw::kCorrection, static_cast<uint32_t>(j));
    ArgMaxD local{0.0, -1};
    for (int i = tid; i < kept; i += Threads) {
      const double s = score_of(i);
      if (!(s > -INFINITY)) continue;
      const int32_t t = detail::key_token(sh.sorted[i]);
      const double g = early_correction ? sh.early.noise[i] : gumbel_exact(p.seed, step, purpose, t);
      local = better(local, ArgMaxD{s + g, t});
    }
    const int32_t out = block_best<Threads>(local, sh.temp.best).token;
    __syncthreads();  // the slots may be used again
    return out;
  };
  auto z_score = [&](int i) { return static_cast<double>(detail::key_value(sh.sorted[i])); };

  int32_t emit, stop;
  if (strict) {
    emit = token;
    stop = j == w.n || dj != token;
  } else if (j == w.n) {
    emit = correction(z_score);  // the bonus token: a kind-2 sample of p_n
    stop = 1;
  } else {
    // p_j(d_j): d_j's place in the kept set, if any (tokens are distinct: at most one thread
    // writes; sh.draft_at was reset before stage2_row's last barrier, so one barrier here).
    for (int i = tid; i < kept; i += Threads)
      if (detail::key_token(sh.sorted[i]) == dj) sh.draft_at = i;
    __syncthreads();
    const int at = sh.draft_at;
    const float pd = at >= 0 ? prob(at) : 0.0f;
    const float qd = draft_prob(v, w.rule, d, dj, dj);
    if (accepts(p.seed, step, j, pd, qd)) {
      emit = dj;
      stop = 0;
    } else {
      // The residual max(0, p - q) in fp32, sampled as argmax(log r + G); empty: a sample of p_j.
      emit = correction([&](int i) {
        const float rr = detail::sub_rn(prob(i), draft_prob(v, w.rule, d, dj, detail::key_token(sh.sorted[i])));
        return rr > 0.0f ? log(static_cast<double>(rr)) : -static_cast<double>(INFINITY);
      });
      if (emit < 0) emit = correction(z_score);
      stop = 1;
    }
  }
  // Rows that ask for ranks or the top N reach here only when the prefix decides them (stage2_row).
  if (asks_ranks(job.out, p)) write_prefix_ranks(job, r, pro, emit, kept, kept_sum, zm, sh);
  if (tid == 0) {
    if (job.out.logprob) job.out.logprob[r] = token_logprob(job, r, pro, k, emit, kept_sum, zm, sh);
    v.verdicts[r] = RowVerdict{emit, stop};
    write_settled_status(job, r, sh.nan);
  }
}

template <int Threads, Calls C>
__device__ __noinline__ void settled_row_outputs(const RowJob& job, int32_t r, RowPrologue pro, RowKind k, VerifyRow w,
                                                 int kept, double kept_sum, float zm, int32_t token,
                                                 bool correction_only, bool prefix_ranks, Stage2Shared<Threads>& sh) {
  const RowOutputs& out = job.out;
  const int tid = threadIdx.x;
  const bool verifying = verification_call<C>(job);
  if (tid == 0) sh.draft_at = -1;  // verdict_row's search, ordered before it by this barrier
  timeline_warp_arrive(kMarkSampled);
  __syncthreads();  // sh.sorted[0] of greedy rows
  if (verifying) {
    // A random-rule row settled here is truncated (untruncated ones took the exact path): its prefix
    // was gathered with kind-2 early noise.
    const bool early_correction = kEarlyNoise<Threads> && correction_only && k.truncated;
    verdict_row(job, r, pro, k, w, kept, kept_sum, zm, token, early_correction, sh);
    return;
  }

  // Outputs of a settled row.
  if (out.final_ids) {
    int32_t* ids = out.final_ids + r * out.final_stride;
    float* probs = out.final_probs + r * out.final_stride;
    const bool fits = kept <= out.final_capacity;
    for (int64_t i = tid; i < out.final_stride; i += Threads) {
      const bool have = fits && i < kept;
      ids[i] = have ? detail::key_token(sh.sorted[i]) : -1;
      float prob = 0.0f;
      if (have)
        prob = pro.greedy ? 1.0f : static_cast<float>(key_mass(sh.sorted[i], zm) / kept_sum);
      probs[i] = prob;
    }
  }
  if (prefix_ranks) write_prefix_ranks(job, r, pro, token, kept, kept_sum, zm, sh);
  else if (out.top_ids)  // top_n == 0: padding only
    for (int64_t i = tid; i < out.top_stride; i += Threads) {
      out.top_ids[r * out.top_stride + i] = -1;
      out.top_logprobs[r * out.top_stride + i] = -INFINITY;
    }
  if (tid == 0) {
    if (out.logprob) out.logprob[r] = token_logprob(job, r, pro, k, token, kept_sum, zm, sh);
    if (out.final_count) out.final_count[r] = kept;
    out.tokens[r] = token;
    write_settled_status(job, r, sh.nan);
  }
  timeline_warp_arrive(kMarkExit);  // the warp's outputs issued
}

}  // namespace sonic::cuda
