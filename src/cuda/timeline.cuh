// Phase timestamps of the sampling kernels, to see where a call's time goes block by block (the
// profiler's stall samples cannot tell a phase that runs on one SM from one that runs on many).
// Compiled in only with the CMake option SONIC_TIMELINE (scripts/timeline.sh); otherwise every mark
// is empty and the kernels are unchanged. Thread 0 of a block writes %globaltimer (ns, one clock for
// every SM) at each mark it reaches; sonic_bench --timeline reads them back after a call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/cuda_check.hpp"

#ifndef SONIC_TIMELINE
#define SONIC_TIMELINE 0
#endif

namespace sonic::cuda {

// The marks of a fast-kernel block, in the order it reaches them. The exact kernel's blocks mark
// entry and exit, and a split row's slices (exact_sample.cu) reuse some: request (the row's
// parameters read), chunk end (the slice counted), and in the row's last slice merge (the buckets
// to gather chosen), listed (the gather pass), decided (the cut), the draw's screened pass and
// sampled; a list row's ranks (rank_decide_top_k) mark threshold (its keys' masses), staged (the
// ranks) and sorted (the top-k cut).
enum TimelineMark : int {
  kMarkEntry,       // the block starts
  kMarkScreening,   // stage 1: the request is read, the first steps are in flight
  kMarkScreened,    // stage 1: every warp has screened its steps
  kMarkChunkDone,   // stage 1: the chunk's statistics are published and counted
  kMarkStage2,      // stage 2 (the row's last block): the request is read again
  kMarkMerged,      // the chunks' statistics are merged
  kMarkListed,      // the gather: the candidates at or above the row's bound are in shared memory
  kMarkThreshold,   // the gather: the top-k threshold is found (histogram)
  kMarkStaged,      // the gather: the prefix's keys are staged
  kMarkGathered,    // the gather: the prefix is sorted
  kMarkDecided,     // the kept set is decided
  kMarkDrawScreened,  // the exact kernel's draw (draw_kept): the fast-noise pass and its block maximum
  kMarkSampled,     // the token is drawn
  kMarkExit,        // the block leaves
  kTimelineMarks
};
// Their names, for reports.
constexpr const char* kTimelineMarkNames[kTimelineMarks] = {
    "entry", "request", "screen", "chunk end", "request again", "merge", "listed",
    "threshold", "staged", "sorted", "decided", "screened", "sampled", "exit"};
// Values a block records beside its marks (stage 2 of a row; 0 where not reached).
enum TimelineValue : int {
  kValueCandidates,  // the row's candidates in the list
  kValueAtBound,     // of them at or above the row's bound
  kValuePrefix,      // keys of the sorted prefix
  kValueKept,        // the kept set
  kValueClockStage2, // the SM's clock64 at kMarkStage2 and at kMarkExit (with the marks: its clock rate)
  kValueClockExit,
  kValueSm,          // 1 + the SM the block ran on (written at kMarkEntry)
  kValueBinFound,    // stage 2, thread 0's clock (globaltimer) once warp 0 has found the top-k threshold's bin
  kValueDecided,     // and once the kept set is decided (warp 0 in wide blocks; before the barriers that end each phase)
  kTimelineValues
};
constexpr int kTimelineColumns = kTimelineMarks + kTimelineValues;  // a block's row of the table
constexpr int kTimelineBlocks = 8192;  // blocks recorded (the first ones of the grid)

// Wide blocks (row_stage2_kernel's) also keep each warp's arrival at the barriers that end some
// phases, for the blocks of the first kTimelineWarpBlocks rows: whether a slow phase is every warp
// or one that the others wait for.
constexpr int kTimelineWarpBlocks = 256;
constexpr int kTimelineWarps = 16;
// Points inside a phase that each warp of such a block stamps once the value it waits for has come
// (timeline_warp_point), kept after the barrier arrivals: which of the phase's dependent steps a warp
// spends its time on. The merge phase's first, then the sorted and decided phases'.
enum TimelineWarpPoint : int {
  kPointStatsIn,   // warp 0 holds its chunks' statistics
  kPointMaxima,    // warp 0 has reduced the maxima, counts and the winner
  kPointCounted,   // warp 0 has the row's count of candidates (a REDUX of the chunks' counts; two
                   // offset scans before v3.60)
  kPointSums,      // warp 0 has the row's sums too (before lane 0's stores to shared memory)
  kPointRunsIn,    // a listing warp holds the row's bound and its runs' counts
  kPointKeysIn,    // a listing warp holds its first batch of keys
  kPointBatchIn,   // and every key of that batch (list_chunks_ahead: the window of every chunk)
  kPointScanned,   // and its lanes' offsets in the warp's share of that batch (warp_append_batch)
  kPointClaimed,   // and the warp's share of sh.gathered (lane 0's shared atomic, then a shuffle)
  kPointAppended,  // and has appended that batch's keys at or above the bound to sh.gathered
  kPointNoiseDrawn,  // sorted: a warp with noise threads has drawn its keys' noise
  kPointMassesSummed,  // decided: warp 0 has the prefix's sums (two-warp route)
  kPointWinnersWritten,  // decided: warp 1 has written the draw's winners
  kTimelineWarpPoints
};
constexpr const char* kTimelineWarpPointNames[kTimelineWarpPoints] = {
    "statistics in", "maxima", "counted", "sums", "runs known", "first keys in", "first batch in",
    "first batch scanned", "first batch claimed", "first batch appended", "noise drawn",
    "masses summed", "winners written"};
constexpr int kMergePoints = kPointNoiseDrawn;  // the merge phase's points come first
constexpr int kTimelineWarpRows = kTimelineMarks + kTimelineWarpPoints;  // a warp's stamps: marks, then points
constexpr int kTimelineWarpColumns = kTimelineWarpRows * kTimelineWarps;  // a block's row: [mark or point][warp]

#if SONIC_TIMELINE
// One table a translation unit (no relocatable device code): each kernel's file reads its own.
static __device__ unsigned long long timeline_ns[kTimelineBlocks][kTimelineColumns];
static __device__ unsigned long long timeline_warp_ns[kTimelineWarpBlocks][kTimelineWarpRows][kTimelineWarps];

// Copies a table of this translation unit (its first `blocks` rows) into out once the device is
// idle, then clears it; returns the rows copied. (The symbol reaches the runtime by reference, as
// cudaMemcpyFromSymbol takes it.)
template <class Row, size_t Rows>
[[maybe_unused]] static int copy_and_clear(unsigned long long* out, Row (&table)[Rows], int blocks) {
  const int n = blocks < static_cast<int>(Rows) ? blocks : static_cast<int>(Rows);
  SONIC_CUDA_CHECK(cudaDeviceSynchronize());
  SONIC_CUDA_CHECK(cudaMemcpyFromSymbol(out, table, sizeof(Row) * n));
  void* address = nullptr;
  SONIC_CUDA_CHECK(cudaGetSymbolAddress(&address, table));
  SONIC_CUDA_CHECK(cudaMemset(address, 0, sizeof(table)));
  SONIC_CUDA_CHECK(cudaDeviceSynchronize());
  return n;
}
// This translation unit's table ([blocks][kTimelineColumns]).
[[maybe_unused]] static int read_timeline_table(unsigned long long* out, int blocks) {
  return copy_and_clear(out, timeline_ns, blocks);
}
int read_exact_timeline(unsigned long long* out, int blocks);      // exact_sample.cu's table
int read_row_stage2_timeline(unsigned long long* out, int blocks);  // row_stage2.cu's
#endif

#if SONIC_TIMELINE
// The table's row of this block: its index in the grid, after `first` rows that another grid of the
// same kernel in the same call uses (the row tails' grid, fast_sample.cu), set by
// timeline_enter. Thread 0 sets it before any mark; other warps read it only after barriers.
__device__ __forceinline__ unsigned& timeline_first_row() {
  __shared__ unsigned first;
  return first;
}
__device__ __forceinline__ unsigned timeline_block() {
  return timeline_first_row() + blockIdx.y * gridDim.x + blockIdx.x;
}
#endif

__device__ __forceinline__ void timeline_mark(int mark) {
#if SONIC_TIMELINE
  if (threadIdx.x == 0) {
    const unsigned block = timeline_block();
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    if (block < kTimelineBlocks) timeline_ns[block][mark] = t;
    if (mark == kMarkEntry && block < kTimelineBlocks) {
      unsigned sm;
      asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
      timeline_ns[block][kTimelineMarks + kValueSm] = sm + 1ull;
    }
  }
#else
  (void)mark;
#endif
}

// A kernel's first mark (kMarkEntry), its rows in the table starting at `first`.
__device__ __forceinline__ void timeline_enter(unsigned first = 0) {
#if SONIC_TIMELINE
  if (threadIdx.x == 0) timeline_first_row() = first;
  timeline_mark(kMarkEntry);
#else
  (void)first;
#endif
}

#if SONIC_TIMELINE
// Lane 0's clock into row `row` of the block's warp table (a mark, or kTimelineMarks + a point).
// With `wait`, lane 0 first stores `after` to shared memory, so that the clock's read stays behind
// the arrival of the value it is computed from.
__device__ __forceinline__ void timeline_warp_stamp(int row, bool wait, unsigned after) {
  __shared__ volatile unsigned sink[kTimelineWarps];
  const unsigned warp = threadIdx.x >> 5, block = timeline_block();
  if ((threadIdx.x & 31) == 0 && warp < kTimelineWarps && block < kTimelineWarpBlocks) {
    if (wait) sink[warp] = after;
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) :: "memory");
    timeline_warp_ns[block][row][warp] = t;
  }
}
#endif

// The warp's arrival at the barrier that ends phase `mark` (lane 0's clock just before the barrier).
__device__ __forceinline__ void timeline_warp_arrive(int mark) {
#if SONIC_TIMELINE
  timeline_warp_stamp(mark, false, 0u);
#else
  (void)mark;
#endif
}

// A value that depends on every key of a batch, for a point that waits for all of them.
template <int N>
__device__ __forceinline__ unsigned timeline_fold(const unsigned long long (&key)[N]) {
  unsigned v = 0;
#pragma unroll
  for (int b = 0; b < N; ++b) v ^= static_cast<unsigned>(key[b]) ^ static_cast<unsigned>(key[b] >> 32);
  return v;
}

// The warp's clock at `point` of the merge phase, once `after` (a value computed from the loads the
// point waits for) has come.
__device__ __forceinline__ void timeline_warp_point(int point, unsigned after) {
#if SONIC_TIMELINE
  timeline_warp_stamp(kTimelineMarks + point, true, after);
#else
  (void)point;
  (void)after;
#endif
}

__device__ __forceinline__ void timeline_value(int value, unsigned long long v) {
#if SONIC_TIMELINE
  if (threadIdx.x == 0) {
    const unsigned block = timeline_block();
    if (block < kTimelineBlocks) timeline_ns[block][kTimelineMarks + value] = v;
  }
#else
  (void)value;
  (void)v;
#endif
}
// Thread 0's globaltimer as a value (a point inside a phase, between two marks).
__device__ __forceinline__ void timeline_stamp(int value) {
#if SONIC_TIMELINE
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  timeline_value(value, t);
#else
  (void)value;
#endif
}
__device__ __forceinline__ void timeline_clock(int value) {
#if SONIC_TIMELINE
  timeline_value(value, clock64());
#else
  (void)value;
#endif
}

}  // namespace sonic::cuda

#if SONIC_TIMELINE
// Copies a kernel's table (kernel 0: the fast kernel, 1: the exact kernel, 2: row_stage2_kernel) into out
// ([blocks][kTimelineColumns], blocks <= kTimelineBlocks) after the device is idle, then clears it.
extern "C" __attribute__((visibility("default"))) int sonic_timeline_read(int kernel, unsigned long long* out,
                                                                         int blocks);
// Copies row_stage2_kernel's warp arrivals ([blocks][kTimelineWarpColumns], blocks <=
// kTimelineWarpBlocks) the same way.
extern "C" __attribute__((visibility("default"))) int sonic_timeline_read_warps(unsigned long long* out, int blocks);
#endif
