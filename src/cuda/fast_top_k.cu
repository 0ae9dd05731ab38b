// Sampler::top_k's forms of the fast kernel (fast_sample_kernel.cuh, Calls::kTopK: raw logits, no
// request, no row tails); fast_sample.cu dispatches to them. A file of their own so that nvcc
// compiles them beside the other forms, not after them.
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/fast_sample_kernel.cuh"
#include "cuda/timeline.cuh"

namespace sonic::cuda {

void launch_fast_top_k(const RowJob& job, bool programmatic, cudaStream_t stream) {
  launch_calls<Calls::kTopK>(job, programmatic, stream);
}

std::vector<const void*> fast_top_k_kernels(DType dtype) { return form_kernels<Calls::kTopK>(dtype); }

#if SONIC_TIMELINE
int read_fast_top_k_timeline(unsigned long long* out, int blocks) { return read_timeline_table(out, blocks); }
#endif

}  // namespace sonic::cuda
