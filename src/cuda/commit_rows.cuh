// The request table's updates after a call (the exact kernel's last step, once every row has read
// the table): each row's emitted token joins its slot's history and the slot's step advances;
// verification requests also get their outputs gathered from their rows' verdicts.
#pragma once

#include <cstdint>

#include "cuda/row_job.cuh"
#include "cuda/slot_table.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {

// The state updates of every row of the call, once every row has read the state: the emitted token
// joins the slot's history and the slot's step advances (once per row naming it). Rows first,
// first + stride, ... of this thread; whole warps call it (verification commits a request a warp).
__device__ inline void commit_requests(const RowJob& job, int32_t first_warp, int32_t warps);

// A single-step row's slot for its commit, or ok = false (an invalid row, commits nothing). Slots,
// parameters and bitmask rows are the call's inputs, which no kernel of the call writes, so a
// thread may resolve its first row before waiting for the kernel before it.
struct CommitRow {
  int32_t slot = -1;
  bool ok = false;
};
__device__ inline CommitRow resolve_commit_row(const RowJob& job, int32_t r) {
  CommitRow c;
  const int32_t* mask;
  c.ok = job.verify.num_requests == 0 && r < job.rows &&
         resolve_row(job.table, job.slots, r, job.bitmask, job.bitmask_rows, job.bitmask_stride, job.bitmask_index,
                     &c.slot, &mask);
  return c;
}

// A global load issued where it stands (the compiler would sink a plain one into the branch that
// uses it, after the load that branch waits for).
__device__ __forceinline__ int32_t load_cg_now(const int32_t* p) {
  int32_t v;
  asm volatile("ld.global.cg.b32 %0, [%1];" : "=r"(v) : "l"(p));
  return v;
}

__device__ inline void commit_row(const RowJob& job, int32_t r, int32_t slot, int32_t token) {
  const SlotTableView& tab = job.table;
  if (job.append_to_history && token >= 0 && !history_append(tab, slot, token) && job.out.status)
    job.out.status[r] = __ldcg(job.out.status + r) | kStatusHistoryFull;
  if (job.advance_step) atomicAdd(reinterpret_cast<unsigned long long*>(tab.step + slot), 1ull);
}

// With `first_row` (resolved before the wait) and its token, row `first` is not resolved again.
__device__ inline void commit_rows(const RowJob& job, int32_t first, int32_t stride, const CommitRow* first_row = nullptr,
                            int32_t first_token = -1) {
  if (job.verify.num_requests > 0) return commit_requests(job, first / 32, stride / 32);
  for (int32_t r = first; r < job.rows; r += stride) {
    if (first_row && r == first) {
      if (first_row->ok) commit_row(job, r, first_row->slot, first_token);
      continue;
    }
    int32_t slot;
    const int32_t* mask;
    if (resolve_row(job.table, job.slots, r, job.bitmask, job.bitmask_rows, job.bitmask_stride, job.bitmask_index,
                    &slot, &mask))
      commit_row(job, r, slot, __ldcg(job.out.tokens + r));
  }
}

// Verification: each request's outputs from its rows' verdicts (accepted drafts, then the row that
// stops), its emitted tokens appended to its slot's history and its step advanced once. A warp a
// request (requests first_warp, first_warp + warps, ...), a lane a row: the verdicts are loaded at
// once and the stopping row found by a ballot, where one thread walked them a dependent load each
// (the commit took 3.0 us of a 2-row call against 1.4 for single-step rows: v3.8's timeline).
__device__ inline void commit_requests(const RowJob& job, int32_t first_warp, int32_t warps) {
  const SlotTableView& tab = job.table;
  const VerifyJob& v = job.verify;
  const int lane = threadIdx.x & 31;
  for (int32_t b = first_warp; b < v.num_requests; b += warps) {
    int32_t* tokens = v.tokens + b * v.out_stride;
    float* lps = v.logprob ? v.logprob + b * v.out_stride : nullptr;
    int32_t* ranks = v.rank ? v.rank + b * v.out_stride : nullptr;
    const int32_t first = v.cu_rows[b], last = v.cu_rows[b + 1];
    const VerifyRow w = locate_verify_row(job, first);  // the same in every lane
    // Every row of the range must be the request's (where cu_rows steps back, a row lies in two
    // ranges). Decided here, once a request, not in each row's stage 2, where the check cost the fp32
    // fast kernel's allocation a spill (perf-notes v3.31); the rows stage 2 settled for a request
    // that owns only part of its range get their bit below.
    const bool owns = first < last && detail::owns_rows(v.cu_rows, v.num_requests, b, first, last);
    bool ok = owns && w.request == b && w.shape_ok && request_inputs_ok(job, w, lane, 32);
    const int32_t n = ok ? w.n : -1;  // rows first .. first + n are the request's
    for (int32_t j = lane; j <= n; j += 32)
      ok &= !(job.out.status && (__ldcg(job.out.status + first + j) & kStatusInvalidInput));
    ok = __all_sync(0xFFFFFFFFu, ok);
    if (!owns && job.out.status)
      for (int32_t r = max(first, 0) + lane; r < min(last, job.rows); r += 32)
        if (detail::owner_of_row(v.cu_rows, v.num_requests, r) == b) job.out.status[r] = kStatusInvalidInput;
    // The stopping row: the first whose verdict stops (every request's last row does).
    int32_t stop_at = n + 1;
    for (int32_t j0 = 0; ok && j0 <= n && stop_at > n; j0 += 32) {
      const int32_t j = j0 + lane;
      const bool stops = j <= n && __ldcg(&v.verdicts[first + j].stop) != 0;
      const unsigned stopping = __ballot_sync(0xFFFFFFFFu, stops);
      if (stopping) stop_at = j0 + __ffs(stopping) - 1;
    }
    const int32_t emitted = ok ? min(stop_at, n) + 1 : 0;  // rows 0 .. emitted - 1 emit
    for (int64_t i = lane; i < v.out_stride; i += 32) {
      const bool emits = i < emitted;
      const int32_t row = first + static_cast<int32_t>(i);
      tokens[i] = emits ? __ldcg(&v.verdicts[row].emit) : -1;
      if (lps) lps[i] = emits ? __ldcg(job.out.logprob + row) : -INFINITY;
      if (ranks) ranks[i] = emits ? __ldcg(job.out.rank + row) : 0;
    }
    if (v.top_ids) {
      // Rows with top-N asked for took the exact path, which wrote their top entries (padded).
      const bool copies = ok && tab.params[w.slot].top_n > 0;
      for (int64_t i = lane; i < v.out_stride * v.top_stride; i += 32) {
        const int64_t j = i / v.top_stride, e = i % v.top_stride;
        const bool from_row = copies && j < emitted && e < job.out.top_stride;
        const int64_t at = (first + j) * job.out.top_stride + e;
        v.top_ids[b * v.out_stride * v.top_stride + i] = from_row ? __ldcg(job.out.top_ids + at) : -1;
        v.top_logprobs[b * v.out_stride * v.top_stride + i] = from_row ? __ldcg(job.out.top_logprobs + at) : -INFINITY;
      }
    }
    if (lane == 0) v.num_accepted[b] = ok ? min(stop_at, n + 1) : 0;
    if (!ok) continue;
    __syncwarp();  // tokens[] written before lane 0 reads them back
    if (lane == 0) {
      // In order, as the reference appends them: the history may fill up part way. A token that does
      // not fit flags its own row (emitted token i is row first + i's).
      for (int32_t i = 0; i < emitted; ++i) {
        if (!job.append_to_history || tokens[i] < 0) continue;
        if (!history_append(tab, w.slot, tokens[i]) && job.out.status)
          job.out.status[first + i] = __ldcg(job.out.status + first + i) | kStatusHistoryFull;
      }
      if (job.advance_step) atomicAdd(reinterpret_cast<unsigned long long*>(tab.step + w.slot), 1ull);
    }
  }
}

}  // namespace sonic::cuda
