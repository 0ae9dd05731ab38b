// Output writers shared by the sampling kernels.
#pragma once

#include <cstdint>

#include "cuda/row_job.cuh"

namespace sonic::cuda {

// A row with bad device-side input: token -1, kStatusInvalidInput, empty logprob and final outputs.
__device__ inline void write_invalid_row(const RowOutputs& out, int32_t r, int tid, int nthreads) {
  for (int64_t i = tid; i < out.top_stride; i += nthreads)
    if (out.top_ids) {
      out.top_ids[r * out.top_stride + i] = -1;
      out.top_logprobs[r * out.top_stride + i] = -INFINITY;
    }
  for (int64_t i = tid; i < out.final_stride; i += nthreads)
    if (out.final_ids) {
      out.final_ids[r * out.final_stride + i] = -1;
      out.final_probs[r * out.final_stride + i] = 0.0f;
    }
  if (tid == 0) {
    out.tokens[r] = -1;
    if (out.status) out.status[r] = kStatusInvalidInput;
    if (out.logprob) out.logprob[r] = -INFINITY;
    if (out.rank) out.rank[r] = 0;
    if (out.final_count) out.final_count[r] = 0;
  }
}

}  // namespace sonic::cuda
