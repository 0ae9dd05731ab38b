// Stage 2 as a kernel of its own, for small batches: a block of kRowStage2Threads a row. The fast
// kernel's block is sized for stage 1 (128 threads, four blocks an SM); with a few rows, stage 2 of a
// row in one such block is most of the call (B = 1: 26 of 36 us, four warps working through about
// 3500 candidates and a chain of barriers), while every other SM idles. The same stage2_row code runs
// here with four times the warps. A block starts once its row's chunks are counted (programmatic
// dependent launch and wait_for_count, so its start overlaps the fast kernel's last blocks) and
// lets the exact kernel's launch overlap in turn.
#include "cuda/call_forms.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/dependent_launch.cuh"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/stage2_row.cuh"
#include "cuda/timeline.cuh"
#include "cuda/top_k_row.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {
namespace {

// A block that started on its row's count waits for the fast kernel before it leaves, so that this
// grid still completes after it (dependent_launch.cuh); without SONIC_COUNTED_START it waited for
// that grid at its start already (a second wait there is never needed).
__device__ __forceinline__ void leave_after_fast_kernel() {
#if SONIC_COUNTED_START
  wait_for_prerequisite_grid();
#endif
}

// C: Calls::kSampling for sampling calls, Calls::kTopK for Sampler::top_k's, Calls::kAny for
// verification calls (as the fast kernel's).
template <Calls C>
__global__ void __launch_bounds__(kRowStage2Threads, C == Calls::kAny ? 0 : 1) row_stage2_kernel(const __grid_constant__ RowJob job) {
  __shared__ Stage2Shared<kRowStage2Threads> sh;
  timeline_enter();  // resident (with programmatic launch, possibly long before its row is done)
  const int32_t r = blockIdx.x;
  if (top_k_call<C>(job)) {  // Sampler::top_k: no request
    const RowKind kind = top_k_row_kind(job.top_k.k);
    wait_for_count(job.fast.tiles_done + r, job.fast.chunks);  // the row's chunks are done and visible
    allow_dependent_launch();
    timeline_mark(kMarkStage2);
    top_k_row(job, r, kind, sh);
    timeline_mark(kMarkExit);
    leave_after_fast_kernel();
    return;
  }
  int32_t slot;
  const int32_t* mask;
  VerifyRow w;
  // The request is read before the wait: the fast kernel writes none of it (it reads the request
  // table only), and every kernel before the fast one has completed, so its latency overlaps the
  // fast kernel's last blocks. Rows that are not kRowOk were settled by the fast kernel's chunk 0
  // (and counted no chunks); their blocks still wait, so that this grid never completes before the
  // fast one (the exact kernel after it waits for this grid only, and a call of invalid rows alone
  // would otherwise let it and the next call's kernels run beside the fast kernel's last blocks).
  if (resolve_call_row<C>(job, r, &slot, &mask, &w) != kRowOk) {
    wait_for_prerequisite_grid();
    allow_dependent_launch();
    return;
  }
  const RowPrologue pro = call_row_prologue<C>(job, slot, mask, w);
  wait_for_count(job.fast.tiles_done + r, job.fast.chunks);  // the row's chunks are done and visible
  allow_dependent_launch();
#if SONIC_TIMELINE && SONIC_TIMELINE_WARM_CODE
  // Diagnostic build only: stage 2 runs twice (same outputs written twice), the first run untimed,
  // so that the timed one finds the code in the SM's instruction caches; its data comes from L2
  // either way. A loop, not two calls: ptxas inlines each call site, and the second copy of the
  // code would be as cold as the first.
  constexpr int kRuns = 2;
#else
  constexpr int kRuns = 1;
#endif
#pragma unroll 1
  for (int run = 0; run < kRuns; ++run) {
    if (run + 1 == kRuns) {
      timeline_mark(kMarkStage2);
      timeline_clock(kValueClockStage2);
    }
    stage2_row<kRowStage2Threads, C>(job, r, slot, pro, row_kind(pro, job, job.table.vocab_size), w, sh);
    if (run + 1 < kRuns) __syncthreads();
  }
  timeline_clock(kValueClockExit);
  timeline_mark(kMarkExit);
  leave_after_fast_kernel();
}

}  // namespace

#if SONIC_TIMELINE
int read_row_stage2_timeline(unsigned long long* out, int blocks) { return read_timeline_table(out, blocks); }

static_assert(kRowStage2Threads / 32 <= kTimelineWarps, "the warp stamps keep every warp of a row_stage2 block");
extern "C" int sonic_timeline_read_warps(unsigned long long* out, int blocks) {
  return copy_and_clear(out, timeline_warp_ns, blocks);
}
#endif

void set_row_stage2_carveout(int percent) {
  for (const void* kernel : {reinterpret_cast<const void*>(row_stage2_kernel<Calls::kSampling>),
                             reinterpret_cast<const void*>(row_stage2_kernel<Calls::kTopK>),
                             reinterpret_cast<const void*>(row_stage2_kernel<Calls::kAny>)})
    SONIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

void launch_row_stage2(const RowJob& job, bool programmatic, cudaStream_t stream) {
  if (job.rows == 0) return;
  const dim3 grid(job.rows), block(kRowStage2Threads);
  switch (calls_of(job)) {
    case Calls::kAny: launch_dependent(row_stage2_kernel<Calls::kAny>, grid, block, 0, programmatic, stream, job); break;
    case Calls::kTopK: launch_dependent(row_stage2_kernel<Calls::kTopK>, grid, block, 0, programmatic, stream, job); break;
    case Calls::kSampling:
      launch_dependent(row_stage2_kernel<Calls::kSampling>, grid, block, 0, programmatic, stream, job);
      break;
  }
}

}  // namespace sonic::cuda
