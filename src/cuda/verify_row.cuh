// Verification on the device (docs/design-verify.md): where a target row sits in its request, the
// request's validity (the CPU backend's checks), the draft distributions q_j, and the row verdict's
// shared arithmetic. Used by the fast kernel, the exact kernel and the commit.
#pragma once

#include <cstdint>

#include "common/random.hpp"
#include "common/request_rows.hpp"
#include "common/token_rules.hpp"
#include "cuda/call_forms.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/slot_table.cuh"

namespace sonic::cuda {

struct VerifyRow {
  int32_t request = -1;  // -1: the row belongs to no request
  int32_t first = 0;     // the request's rows are [first, first + n + 1)
  int32_t n = 0;         // drafts
  int32_t j = 0;         // this row's position
  int64_t draft0 = 0;    // index of d_0 in draft_tokens and q
  int32_t slot = -1;
  int32_t rule = 0;      // VerifyRule
  bool shape_ok = false; // rows, slot and draft indices usable (what stage 1 needs to read safely)
};

// The request owning `row` (the b with cu_rows[b] <= row < cu_rows[b + 1]) and its shape checks.
__device__ inline VerifyRow locate_verify_row(const RowJob& job, int32_t row) {
  const VerifyJob& v = job.verify;
  VerifyRow w;
  const int32_t lo = detail::owner_of_row(v.cu_rows, v.num_requests, row);
  const int32_t first = v.cu_rows[lo], last = v.cu_rows[lo + 1];
  if (!(first <= row && row < last)) return w;
  w.request = lo;
  w.first = first;
  w.n = last - first - 1;
  w.j = row - first;
  w.draft0 = static_cast<int64_t>(first) - lo;
  w.slot = v.slots ? v.slots[lo] : lo;
  w.rule = v.rules ? v.rules[lo] : static_cast<int32_t>(VerifyRule::kOneHot);
  const SlotTableView& tab = job.table;
  w.shape_ok = first >= 0 && last <= job.rows && w.n <= v.max_drafts && w.slot >= 0 && w.slot < tab.max_slots &&
               (tab.params[w.slot].flags & kSlotActive) &&
               (w.n == 0 || (w.draft0 >= 0 && w.draft0 + w.n <= v.num_drafts_capacity));
  return w;
}

// The CPU backend's checks of a whole request beyond its shape: rule, draft ids, q for the rule,
// bitmask rows (whether it owns its rows, the commit decides: commit_requests). Work item i of
// `count` (a thread's share), so that a block can split it.
__device__ inline bool request_inputs_ok(const RowJob& job, const VerifyRow& w, int i0, int stride) {
  const VerifyJob& v = job.verify;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  const bool random = tab.params[w.slot].temperature != 0.0f;
  // An unknown rule makes the request invalid whatever its temperature, as in the reference.
  if (w.rule < 0 || w.rule > static_cast<int32_t>(VerifyRule::kStrict)) return false;
  bool ok = true;
  for (int32_t j = i0; j < w.n; j += stride) {
    const int64_t d = w.draft0 + j;
    const int32_t token = v.draft_tokens[d];
    ok &= token >= 0 && token < V;
    if (!random) continue;
    if (w.rule == static_cast<int32_t>(VerifyRule::kDenseDraftProbs)) {
      ok &= v.q.dense != nullptr && d < v.q.dense_rows;
    } else if (w.rule == static_cast<int32_t>(VerifyRule::kSparseDraftProbs)) {
      if (v.q.sparse_ids == nullptr || d >= v.q.sparse_rows) {
        ok = false;
        continue;
      }
      const int32_t count = v.q.sparse_count[d];
      if (count < 0 || count > v.q.sparse_stride) {
        ok = false;
        continue;
      }
      for (int32_t k = 0; k < count; ++k) {
        const int32_t id = v.q.sparse_ids[d * v.q.sparse_stride + k];
        ok &= id >= 0 && id < V;
      }
    }
  }
  if (job.bitmask && job.bitmask_index)
    for (int32_t j = i0; j <= w.n; j += stride) {
      const int64_t idx = job.bitmask_index[w.first + j];
      ok &= idx >= -1 && idx < job.bitmask_rows;
    }
  else if (job.bitmask)
    ok &= w.first + w.n < job.bitmask_rows;
  return ok;
}

// q_j(t) of draft index d under the request's rule (one-hot: t == d_j); a value below 0 or NaN
// counts as 0, as in the reference (semantics.md).
__device__ inline float draft_prob(const VerifyJob& v, int32_t rule, int64_t d, int32_t dj, int32_t t) {
  float q = t == dj ? 1.0f : 0.0f;
  if (rule == static_cast<int32_t>(VerifyRule::kDenseDraftProbs)) {
    q = v.q.dense[d * v.q.dense_stride + t];
  } else if (rule == static_cast<int32_t>(VerifyRule::kSparseDraftProbs)) {
    const int32_t count = v.q.sparse_count[d];
    q = 0.0f;  // the last entry of an id wins, as in the reference
    for (int32_t k = 0; k < count; ++k)
      if (v.q.sparse_ids[d * v.q.sparse_stride + k] == t) q = v.q.sparse_probs[d * v.q.sparse_stride + k];
  }
  return q > 0.0f ? q : 0.0f;
}

// The acceptance test of SPEC.md section 3 for draft d_j with p = p_j(d_j), q = q_j(d_j).
__device__ inline bool accepts(uint64_t seed, uint64_t step, int32_t j, float p, float q) {
  const float u = detail::uniform_from_word(
      detail::random_word(seed, step, detail::purpose(detail::Draw::kAcceptance, static_cast<uint32_t>(j)), 0));
  return p > 0.0f && detail::mul_rn(u, q) <= p;
}

enum RowResolution { kRowSkip, kRowInvalid, kRowOk };

// Resolves row r of a sampling or a verification call: its slot, its bitmask row and, for
// verification, its place in its request (position and earlier drafts go into the prologue).
template <Calls C = Calls::kAny>
__device__ inline RowResolution resolve_call_row(const RowJob& job, int32_t r, int32_t* slot, const int32_t** mask,
                                                 VerifyRow* w) {
  if (!verification_call<C>(job))
    return resolve_row(job.table, job.slots, r, job.bitmask, job.bitmask_rows, job.bitmask_stride,
                       job.bitmask_index, slot, mask)
               ? kRowOk
               : kRowInvalid;
  *w = locate_verify_row(job, r);
  if (w->request < 0) return kRowSkip;
  if (!w->shape_ok) return kRowInvalid;
  *slot = w->slot;
  *mask = nullptr;
  if (job.bitmask) {
    const int64_t idx = job.bitmask_index ? job.bitmask_index[r] : r;
    if (idx < -1 || idx >= job.bitmask_rows) return kRowInvalid;
    if (idx >= 0) *mask = job.bitmask + idx * job.bitmask_stride;
  }
  return kRowOk;
}

// The prologue of a resolved row of the call: its slot's parameters and bitmask row and, for a
// verification row, its position and the drafts before it (output tokens for the penalties).
template <Calls C = Calls::kAny>
__device__ __forceinline__ RowPrologue call_row_prologue(const RowJob& job, int32_t slot, const int32_t* mask,
                                                         const VerifyRow& w) {
  RowPrologue pro;
  pro.init(job.table, slot, mask);
  if (verification_call<C>(job)) {
    pro.position = static_cast<uint32_t>(w.j);
    pro.prev_drafts = job.verify.draft_tokens + w.draft0;
    pro.n_prev = w.j;
  }
  return pro;
}

// A verification row with bad input: status kStatusInvalidInput, verdict "emit nothing, stop".
__device__ inline void write_invalid_verify_row(const RowJob& job, int32_t r) {
  job.verify.verdicts[r] = RowVerdict{-1, 1};
  if (job.out.status) job.out.status[r] = kStatusInvalidInput;
  if (job.out.logprob) job.out.logprob[r] = -INFINITY;
}

// Whole-request input checks by a block (every thread gets the answer).
__device__ inline bool block_request_ok(const RowJob& job, const VerifyRow& w) {
  return __syncthreads_and(request_inputs_ok(job, w, threadIdx.x, blockDim.x));
}

}  // namespace sonic::cuda
