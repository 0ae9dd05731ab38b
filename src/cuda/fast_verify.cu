// The verification forms of the fast kernel (fast_sample_kernel.cuh, Calls::kAny): verification calls
// run them, with their rows resolved before the copies; fast_sample.cu dispatches to them. A file of
// their own so that nvcc compiles them beside the sampling forms, not after them.
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/fast_sample_kernel.cuh"
#include "cuda/timeline.cuh"

namespace sonic::cuda {

void launch_fast_verify(const RowJob& job, bool programmatic, cudaStream_t stream) {
  launch_calls<Calls::kAny>(job, programmatic, stream);
}

std::vector<const void*> fast_verify_kernels(DType dtype) { return form_kernels<Calls::kAny>(dtype); }

#if SONIC_TIMELINE
int read_fast_verify_timeline(unsigned long long* out, int blocks) { return read_timeline_table(out, blocks); }
#endif

}  // namespace sonic::cuda
