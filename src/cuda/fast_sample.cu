// The fast path as one kernel: grid (tiles, rows) of kFastThreads. Every block runs stage 1 on its
// tile; the last block of a row to finish runs stage 2 for the row. Tile size and launch shape depend
// on V and the batch only; results never depend on them.
#include "cuda/cuda_check.hpp"
#include "cuda/prologue.cuh"
#include "cuda/row_job.cuh"
#include "cuda/row_outputs.cuh"
#include "cuda/stage1_tile.cuh"
#include "cuda/stage2_row.cuh"
#include "cuda/tile_loader.cuh"
#include "cuda/top_k_row.cuh"
#include "cuda/verify_row.cuh"

namespace sonic::cuda {
namespace {

// 5 blocks an SM: the most that keeps the 32 logits of a lane and the screen in registers unspilled.
#ifndef SONIC_FAST_MIN_BLOCKS
#define SONIC_FAST_MIN_BLOCKS 5
#endif
template <DType D>
__global__ void __launch_bounds__(kFastThreads, SONIC_FAST_MIN_BLOCKS) fast_sample_kernel(RowJob job) {
  using L = LaneLayout<D>;
  __shared__ union Shared {
    Stage1Shared s1;
    Stage2Shared s2;
  } sh;
  __shared__ int last;
  const int32_t r = blockIdx.y, tile = blockIdx.x;
  const SlotTableView& tab = job.table;
  const int32_t V = tab.vocab_size;
  // Issue the tile's loads first: their latency overlaps the row's prologue.
  const void* row = static_cast<const char*>(job.logits) + static_cast<int64_t>(r) * job.row_stride * L::kElem;
  float x[kLaneTokens];
  load_lane<D>(row, tile * kTile + (threadIdx.x >> 5) * kWarpTokens, V, x);
  if (job.top_k.k > 0) {  // Sampler::top_k: raw logits, no request
    RowPrologue pro;
    RowKind kind;
    top_k_prologue(&pro, &kind);
    if (stage1_tile<D>(job, r, tile, 0, pro, kind, x, sh.s1, &last)) top_k_row(job, r, kind, sh.s2);
    return;
  }
  int32_t slot;
  const int32_t* mask;
  VerifyRow w;
  const RowResolution res = resolve_call_row(job, r, &slot, &mask, &w);
  if (res != kRowOk) {
    if (tile == 0) {
      if (res == kRowInvalid) {
        if (job.verify.num_requests) {
          if (threadIdx.x == 0) write_invalid_verify_row(job, r);
        } else {
          write_invalid_row(job.out, r, threadIdx.x, kFastThreads);
        }
      }
      if (threadIdx.x == 0) job.fast.exact_flags[r] = 0;
    }
    return;
  }
  RowPrologue pro;
  pro.init(tab, slot, mask);
  if (job.verify.num_requests) {
    pro.position = static_cast<uint32_t>(w.j);
    pro.prev_drafts = job.verify.draft_tokens + w.draft0;
    pro.n_prev = w.j;
  }
  const RowKind kind = row_kind(pro, job, V);
  if (!stage1_tile<D>(job, r, tile, slot, pro, kind, x, sh.s1, &last)) return;
  stage2_row(job, r, slot, pro, kind, w, sh.s2);
}

}  // namespace

void launch_fast_sample(const RowJob& job, cudaStream_t stream) {
  if (job.rows == 0) return;
  const dim3 grid(job.fast.tiles, job.rows);
  switch (job.dtype) {
    case DType::kF32: fast_sample_kernel<DType::kF32><<<grid, kFastThreads, 0, stream>>>(job); break;
    case DType::kBF16: fast_sample_kernel<DType::kBF16><<<grid, kFastThreads, 0, stream>>>(job); break;
    case DType::kF16: fast_sample_kernel<DType::kF16><<<grid, kFastThreads, 0, stream>>>(job); break;
  }
  SONIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sonic::cuda
