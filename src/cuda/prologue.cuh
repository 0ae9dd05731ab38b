// Steps 1-5 of SPEC.md section 2 for one token of one row, on the device: the per-token rules of
// src/common applied with the row's slot state (token list, sparse history). Shared by the exact
// path and stage 1 so that both compute the same z bit for bit.
#pragma once

#include "common/token_rules.hpp"
#include "cuda/slot_table.cuh"

namespace sonic::cuda {

// What a block knows about its row before touching tokens.
struct RowPrologue {
  SlotParams p;
  int32_t slot;
  const int32_t* mask;  // grammar bitmask row, or null
  bool greedy;
  bool penalised;
  bool has_rules;  // any of steps 1-4 can change a logit
  // Verification: the row's position (the sampling noise's) and the drafts before it, which count
  // as output tokens for the penalties. Single-step rows: position 0, no drafts.
  uint32_t position;
  const int32_t* prev_drafts;
  int32_t n_prev;

  __device__ void init(const SlotTableView& tab, int32_t slot_id, const int32_t* mask_row) {
    position = 0;
    prev_drafts = nullptr;
    n_prev = 0;
    slot = slot_id;
    p = tab.params[slot_id];
    mask = mask_row;
    greedy = p.temperature == 0.0f;
    penalised = p.repetition != 1.0f || p.frequency != 0.0f || p.presence != 0.0f;
    has_rules = mask != nullptr || p.list_count > 0 || penalised;
  }

  // x_t (input logit, NaN already turned into -inf) -> z_t (greedy rows: x_t after steps 1-4).
  __device__ __forceinline__ float apply(const SlotTableView& tab, int32_t t, float x) const {
    x = rules(tab, t, x);
    return greedy ? x : detail::apply_temperature(x, p.temperature);
  }

  // Steps 1-4 only: x_t -> x_t after the bitmask, the token lists and the penalties.
  __device__ __forceinline__ float rules(const SlotTableView& tab, int32_t t, float x) const {
    return token_rules(tab, p, slot, mask, prev_drafts, n_prev, t, x);
  }

  // Steps 1-4 for token t of a row of slot `slot` with parameters p, bitmask row `mask` (or null)
  // and drafts d_0..d_{n_prev-1} before it that count as output tokens (verification). A caller that
  // knows the token list does not name t passes maybe_listed = false: the list's binary search (a
  // chain of about five dependent loads) is then skipped.
  // A caller that loaded the token's history probe already (history_probe, issued beside its other
  // loads) passes it, so that the lookup waits on those loads only.
  __device__ static __forceinline__ float token_rules(const SlotTableView& tab, const SlotParams& p, int32_t slot,
                                                      const int32_t* mask, const int32_t* prev_drafts,
                                                      int32_t n_prev, int32_t t, float x, bool maybe_listed = true,
                                                      const HistoryProbe* probe = nullptr) {
    if (mask && !detail::bitmask_allows(mask, t)) return -INFINITY;
    float bias = 0.0f;
    if (p.list_count > 0) {
      const int32_t i = maybe_listed ? list_find(tab, slot, p.list_count, t) : -1;
      const int64_t at = static_cast<int64_t>(slot) * tab.list_capacity + i;
      const uint8_t kind = i >= 0 ? tab.list_kind[at] : 0;
      if (kind & kListBanned) return -INFINITY;
      if ((p.flags & kSlotHasAllowed) && !(kind & kListAllowed)) return -INFINITY;
      if (kind & kListBias) bias = tab.list_bias[at];
    }
    if (!(x > -INFINITY)) return -INFINITY;
    bool in_scope = false;
    int32_t count = 0;
    if (p.repetition != 1.0f || p.frequency != 0.0f || p.presence != 0.0f) {
      TokenHistory h = probe ? history_lookup(tab, slot, t, *probe) : history_lookup(tab, slot, t);
      for (int32_t i = 0; i < n_prev; ++i) h.output += prev_drafts[i] == t;
      in_scope = (p.flags & kSlotRepetitionOutputOnly) ? h.output > 0 : h.prompt + h.output > 0;
      count = h.output + ((p.flags & kSlotPenaltiesIncludePrompt) ? h.prompt : 0);
    }
    return detail::adjust_logit(x, bias, in_scope, count, detail::Penalties{p.repetition, p.frequency, p.presence});
  }
};

// A slot's parameters through the read-only path (the compiler may then reload rather than keep them).
__device__ __forceinline__ SlotParams load_params(const SlotParams* p) {
  SlotParams q;
  q.temperature = __ldg(&p->temperature);
  q.top_p = __ldg(&p->top_p);
  q.min_p = __ldg(&p->min_p);
  q.repetition = __ldg(&p->repetition);
  q.frequency = __ldg(&p->frequency);
  q.presence = __ldg(&p->presence);
  q.top_k = __ldg(&p->top_k);
  q.top_n = __ldg(&p->top_n);
  q.flags = __ldg(&p->flags);
  q.list_count = __ldg(&p->list_count);
  q.seed = __ldg(reinterpret_cast<const unsigned long long*>(&p->seed));
  return q;
}

// Resolves a row's slot and bitmask row; false when either is invalid (the row is then flagged).
__device__ __forceinline__ bool resolve_row(const SlotTableView& tab, const int32_t* slots, int32_t r,
                                            const int32_t* bitmask, int64_t bitmask_rows,
                                            int64_t bitmask_stride, const int32_t* bitmask_index,
                                            int32_t* slot_out, const int32_t** mask_out) {
  const int32_t slot = slots ? slots[r] : r;
  if (slot < 0 || slot >= tab.max_slots || !(tab.params[slot].flags & kSlotActive)) return false;
  *slot_out = slot;
  *mask_out = nullptr;
  if (bitmask) {
    const int64_t idx = bitmask_index ? bitmask_index[r] : r;
    if (idx < -1 || idx >= bitmask_rows) return false;
    if (idx >= 0) *mask_out = bitmask + idx * bitmask_stride;
  }
  return true;
}

// Step 6's threshold on z: min-p keeps z >= z_max + ln(min_p), which the reference evaluates in
// double; for a float z that is z >= this value (the threshold rounded up to a float).
__device__ __forceinline__ float min_p_threshold(float z_max, float min_p) {
  return __double2float_ru(static_cast<double>(z_max) + log(static_cast<double>(min_p)));
}

}  // namespace sonic::cuda
