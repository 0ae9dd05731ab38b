// The fast path's kernel: grid (chunks, rows) of kFastThreads. Every block runs stage 1 on its chunk
// of tiles; the last block of a row to finish runs stage 2 for the row (for small batches
// row_stage2_kernel does instead, row_stage2.cu). Tile size, chunk size and launch shape depend on V,
// the dtype and the grid only; results never depend on them.
//
// Its forms compile in three translation units, each instantiating its own (one file with all 16 took
// nvcc 216 s on two CPUs): fast_sample.cu the sampling forms (Calls::kSampling) and the launch
// dispatch, fast_verify.cu the verification forms (Calls::kAny), fast_top_k.cu Sampler::top_k's
// (Calls::kTopK). The kernel sits in an anonymous
// namespace, internal to the file that includes this header (the library has no relocatable device
// code), so that its names and SASS stay those that docs/validated-sass.txt records.
#pragma once

#include <vector>

#include "cuda/call_forms.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_outputs.cuh"
#include "cuda/stage1_chunk.cuh"
#include "cuda/stage2_row.cuh"
#include "cuda/tile_loader.cuh"
#include "cuda/timeline.cuh"
#include "cuda/top_k_row.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {

// fast_verify.cu's and fast_top_k.cu's parts, for fast_sample.cu: a call's launch, and those kernels
// of a dtype (for their occupancy and carveout).
void launch_fast_verify(const RowJob& job, bool programmatic, cudaStream_t stream);
std::vector<const void*> fast_verify_kernels(DType dtype);
void launch_fast_top_k(const RowJob& job, bool programmatic, cudaStream_t stream);
std::vector<const void*> fast_top_k_kernels(DType dtype);
#if SONIC_TIMELINE
int read_fast_verify_timeline(unsigned long long* out, int blocks);  // fast_verify.cu's table
int read_fast_top_k_timeline(unsigned long long* out, int blocks);   // fast_top_k.cu's
#endif

namespace {

// 4 blocks an SM: as many as the stage-1 slots in shared memory allow.
#ifndef SONIC_FAST_MIN_BLOCKS
#define SONIC_FAST_MIN_BLOCKS 4
#endif
// The stage-1 slots and stage 2's workspace share the block's dynamic shared memory (stage 2 starts
// once every copy has landed).
// Stage 2 must not need more than stage 1's slots, or fewer blocks would fit an SM.
static_assert(sizeof(Stage2Shared<kFastThreads>) <= kStageBytes<DType::kF32, kStepLoads>, "stage 2's shared memory outgrows the stage-1 slots");
// Experiments only: the stage-1 slots this many bytes past the 128-byte aligned start of the dynamic
// shared memory (v3.17 measured 0 against 96; stage1_variants.sh passes -DSONIC_SLOT_OFFSET=N).
#ifndef SONIC_SLOT_OFFSET
#define SONIC_SLOT_OFFSET 0
#endif
constexpr size_t kSlotOffset = SONIC_SLOT_OFFSET;
// Experiments only: 1 leaves row_stage2_kernel's launch to the blocks' exits, so that its blocks
// become resident only as this grid drains (perf-notes v3.18: graph replays' slow stage 2).
#ifndef SONIC_LATE_DEPENDENTS
#define SONIC_LATE_DEPENDENTS 0
#endif
static_assert(kSlotOffset % 16 == 0 && kSlotOffset < 128, "the slots' copies need 16-byte alignment");
template <DType D, int Loads>
constexpr size_t kFastSharedBytes = kSlotOffset + (kStageBytes<D, Loads> > sizeof(Stage2Shared<kFastThreads>)
                                                       ? kStageBytes<D, Loads>
                                                       : sizeof(Stage2Shared<kFastThreads>));
// Short 16-bit steps keep the blocks an SM: the same bytes of slots.
static_assert(kStageBytes<DType::kBF16, kShortStepLoads> == kStageBytes<DType::kBF16, kStepLoads>, "short steps' slots");

// One block's work: its chunk's stage 1, then stage 2 if it is its row's last chunk to finish.
// Tails: a grid of a call with row tails (FastScratch::tail_first). A template argument, so that
// calls without them run the kernel as it was: any change to its code moves ptxas's allocation (the
// tails' logic inlined into one kernel made the 16-bit kernel spill 80 bytes and cost 0.7-1.7 us at
// B <= 128, where no row has a tail; perf-notes v3.23).
// Loads: 16-byte loads a lane a step (FastScratch::step_loads).
template <DType D, bool Tails, int Loads, Calls C>
__device__ __forceinline__ void fast_sample_block(const RowJob& job) {
  // The stage-1 slots at a 128-byte aligned shared address (the static variables left them 96 bytes
  // past one). Measured side by side, H200, V = 151936, graph (docs/perf-notes.md v3.17):
  // homogeneous fp32 B = 512 109.0 -> 101.5 us, bf16 77.6 -> 74.2, the mix fp32 B = 512 212.7 ->
  // 210.6, but homogeneous fp32 B = 128 42.5 -> 44.8. Not profiled yet; aligning stage 2's
  // workspace alone moved nothing, so it is the slots' copies or reads.
  extern __shared__ __align__(128) uint4 dynamic_shared[];
  __shared__ Stage1Shared s1;
  __shared__ int last;
  // A verification row's resolution, made by thread 0 before its warp's copies and handed to the
  // block through shared memory: a VerifyRow live in every thread across the copies made ptxas spill.
  struct EarlyVerifyRow {
    VerifyRow w;
    const int32_t* mask;
    int32_t slot;
    RowResolution res;
  };
  __shared__ EarlyVerifyRow early_verify;
  // (The row tails' grid after the heads' in the timeline's table.)
  timeline_enter(Tails && job.fast.tail_launch ? gridDim.x * gridDim.y : 0);
  StepSlot<D, Loads>* slots = reinterpret_cast<StepSlot<D, Loads>*>(reinterpret_cast<char*>(dynamic_shared) + kSlotOffset);
  Stage2Shared<kFastThreads>& s2 = *reinterpret_cast<Stage2Shared<kFastThreads>*>(dynamic_shared);
  // Grids are (chunks, rows): so (rather than rows along x) the mix is 1.5-3.9 us faster at B = 128-256
  // (perf-notes v3.23). A call with row tails has two grids of (chunks / 2, rows), the heads (the
  // even chunks) and then the tails (the odd ones).
  const int32_t r = blockIdx.y;
  const int32_t chunk = Tails ? 2 * static_cast<int32_t>(blockIdx.x) + job.fast.tail_launch : static_cast<int32_t>(blockIdx.x);
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  // A block resolves its row before its first copies, whose traffic the loads would otherwise queue
  // behind (perf-notes v3.26 items 5 and 7). A tail must anyway, to learn whether it has work: it
  // leaves at once if the row has no tails or this one is empty (its head counted it) or the row is
  // not valid (chunk 0 reports it); a head's first steps are the same either way. (Sampler::top_k's
  // calls have no request, nor tails: launch() gives them none.) Verification rows (their kernels
  // only) resolve in thread 0, whose result the block reads from shared memory after its copies.
  ChunkRange first_steps = Tails ? tails_range(job.fast, chunk, false) : ChunkRange{0, 0};
  int32_t first_slot = 0;
  const int32_t* first_mask = nullptr;
  VerifyRow first_w;
  if (Tails && job.fast.tail_launch) {
    if (resolve_call_row<C>(job, r, &first_slot, &first_mask, &first_w) != kRowOk) return;
    first_steps = tails_range(job.fast, chunk, row_has_tail(job.fast, call_row_prologue<C>(job, first_slot, first_mask, first_w)));
    if (first_steps.first == first_steps.end) return;
  }
  const bool resolved_first = !(Tails && job.fast.tail_launch) && !top_k_call<C>(job) && !verification_call<C>(job);
  RowResolution first_res = kRowOk;
  if (resolved_first) first_res = resolve_call_row<C>(job, r, &first_slot, &first_mask, &first_w);
  // Verification rows: the binary search over cu_rows is a chain of log2(requests) loads.
  const bool verify_first = !(Tails && job.fast.tail_launch) && !top_k_call<C>(job) && verification_call<C>(job);
  if (verify_first && threadIdx.x == 0) {
    EarlyVerifyRow e;
    e.res = resolve_call_row<C>(job, r, &e.slot, &e.mask, &e.w);
    early_verify = e;
  }
  // Start the chunk's first copies: their latency overlaps the row's prologue.
  const void* row = static_cast<const char*>(job.logits) + static_cast<int64_t>(r) * job.row_stride * elem_bytes(D);
  const bool vec_ok = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  start_chunk<D>(job, Tails ? first_steps : chunk_range(job.fast, chunk), row, vec_ok, slots);
  // row_stage2_kernel's blocks may take their SMs at once (small batches leave most SMs idle) and
  // wait there, so that only the grid's completion separates the two kernels; so may the row tails
  // (their grid follows the heads).
  if (!SONIC_LATE_DEPENDENTS && (job.fast.separate_stage2 || (Tails && !job.fast.tail_launch))) allow_dependent_launch();
  if (top_k_call<C>(job)) {  // Sampler::top_k: raw logits, no request
    const RowPrologue pro = top_k_prologue();
    const RowKind kind = top_k_row_kind(job.top_k.k);
    if (stage1_chunk<D, Tails, Loads>(job, r, chunk, 0, pro, kind, row, vec_ok, slots, s1, &last)) {
      allow_dependent_launch();
      if (!job.fast.separate_stage2) top_k_row(job, r, kind, s2);
    }
    timeline_mark(kMarkExit);
    return;
  }
  int32_t slot;
  const int32_t* mask;
  VerifyRow w;
  RowResolution res;
  if (Tails && job.fast.tail_launch) {  // only an ok row has a tail
    slot = first_slot, mask = first_mask, w = first_w;
    res = kRowOk;
  } else if (resolved_first) {
    slot = first_slot, mask = first_mask;  // (w: verification rows only)
    res = first_res;
  } else if (verify_first) {
    __syncthreads();  // early_verify
    slot = early_verify.slot, mask = early_verify.mask, w = early_verify.w;
    res = early_verify.res;
  } else {
    res = resolve_call_row<C>(job, r, &slot, &mask, &w);
  }
  if (res != kRowOk) {
    copy_async_wait<0>();  // nothing may still write the block's shared memory when it exits
    if (chunk == 0) {
      if (res == kRowInvalid) {
        if (verification_call<C>(job)) {
          if (threadIdx.x == 0) write_invalid_verify_row(job, r);
        } else {
          write_invalid_row(job.out, r, threadIdx.x, kFastThreads);
        }
      }
      if (threadIdx.x == 0) job.fast.exact_flags[r] = 0;
    }
    return;
  }
  {
    const RowPrologue pro = call_row_prologue<C>(job, slot, mask, w);
    if (!stage1_chunk<D, Tails, Loads>(job, r, chunk, slot, pro, row_kind(pro, job, V), row, vec_ok, slots, s1, &last)) {
      timeline_mark(kMarkExit);
      return;
    }
  }
  allow_dependent_launch();
  if (job.fast.separate_stage2) {  // row_stage2_kernel, launched next, runs it with more threads
    timeline_mark(kMarkExit);
    return;
  }
  // Stage 2 reads the row's request afresh, so that stage 1 holds none of it in registers.
  resolve_call_row<C>(job, r, &slot, &mask, &w);
  const RowPrologue pro = call_row_prologue<C>(job, slot, mask, w);
  timeline_mark(kMarkStage2);
  timeline_clock(kValueClockStage2);
  stage2_row<kFastThreads, C>(job, r, slot, pro, row_kind(pro, job, V), w, s2);
  timeline_clock(kValueClockExit);
  timeline_mark(kMarkExit);
}

// C: Calls::kSampling for sampling calls, Calls::kTopK for Sampler::top_k's, Calls::kAny for
// verification calls (each of the first two carries no other call's code).
template <DType D, bool Tails, int Loads, Calls C>
__global__ void __launch_bounds__(kFastThreads, SONIC_FAST_MIN_BLOCKS) fast_sample_kernel(const __grid_constant__ RowJob job) {
  fast_sample_block<D, Tails, Loads, C>(job);
  // The row tails' grid must not complete before the heads' grid (the kernels after it wait for it
  // alone): its last block to finish waits for that grid, and only that block. The count orders no
  // data (each chunk published its own with count_release), so it is a relaxed atomic.
  if (Tails && job.fast.tail_launch && threadIdx.x == 0) {
    if (atomicAdd(job.fast.tails_done, 1) == static_cast<int>(gridDim.x * gridDim.y) - 1) {
      wait_for_prerequisite_grid();
      *job.fast.tails_done = 0;
    }
  }
}

template <DType D, Calls C>
void launch_form(const RowJob& job, bool programmatic, cudaStream_t stream) {
  constexpr size_t kShared = kFastSharedBytes<D, kStepLoads>;
  if constexpr (D != DType::kF32) {  // short steps: never with row tails (the backend's scratch())
    if (job.fast.step_loads == kShortStepLoads) {
      fast_sample_kernel<D, false, kShortStepLoads, C>
          <<<dim3(job.fast.chunks, job.rows), kFastThreads, kFastSharedBytes<D, kShortStepLoads>, stream>>>(job);
      return;
    }
  }
  if (C == Calls::kTopK || job.fast.tail_first == 0) {  // (top-k rows have no rules, so no tails)
    fast_sample_kernel<D, false, kStepLoads, C><<<dim3(job.fast.chunks, job.rows), kFastThreads, kShared, stream>>>(job);
    return;
  }
  if constexpr (C != Calls::kTopK) {
    // Row tails: the heads, then the tails as a programmatic dependent (the heads allow it at their
    // start).
    const dim3 grid(job.fast.chunks / 2, job.rows);
    fast_sample_kernel<D, true, kStepLoads, C><<<grid, kFastThreads, kShared, stream>>>(job);
    RowJob tails = job;
    tails.fast.tail_launch = 1;
    launch_dependent(fast_sample_kernel<D, true, kStepLoads, C>, grid, dim3(kFastThreads), kShared, programmatic, stream,
                     tails);
  }
}

// The kernels of a dtype and form: with and without row tails (top-k calls have none), and short
// steps for 16-bit logits.
// fast_sample.cu's occupancy and carveout cover both files' lists.
template <DType D, Calls C>
void add_fast_kernels(std::vector<const void*>& kernels) {
  kernels.push_back(reinterpret_cast<const void*>(fast_sample_kernel<D, false, kStepLoads, C>));
  if constexpr (C != Calls::kTopK)
    kernels.push_back(reinterpret_cast<const void*>(fast_sample_kernel<D, true, kStepLoads, C>));
  if constexpr (D != DType::kF32)
    kernels.push_back(reinterpret_cast<const void*>(fast_sample_kernel<D, false, kShortStepLoads, C>));
}

// A call's launch in form C, by its dtype.
template <Calls C>
void launch_calls(const RowJob& job, bool programmatic, cudaStream_t stream) {
  switch (job.dtype) {
    case DType::kF32: launch_form<DType::kF32, C>(job, programmatic, stream); break;
    case DType::kBF16: launch_form<DType::kBF16, C>(job, programmatic, stream); break;
    case DType::kF16: launch_form<DType::kF16, C>(job, programmatic, stream); break;
  }
}

// The kernels of form C for a dtype.
template <Calls C>
std::vector<const void*> form_kernels(DType dtype) {
  std::vector<const void*> kernels;
  switch (dtype) {
    case DType::kF32: add_fast_kernels<DType::kF32, C>(kernels); break;
    case DType::kBF16: add_fast_kernels<DType::kBF16, C>(kernels); break;
    case DType::kF16: add_fast_kernels<DType::kF16, C>(kernels); break;
  }
  return kernels;
}

}  // namespace
}  // namespace sonic::cuda
