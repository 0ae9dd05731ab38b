// The forms of the fast kernel and row_stage2_kernel by kind of call (docs/perf-notes.md v3.36: the
// sampling form without verification's code took 0.5-2.5 us off homogeneous calls on an H100).
#pragma once

#include "cuda/row_job.cuh"

namespace sonic::cuda {

// The calls a kernel instantiation serves: sampling calls only, Sampler::top_k's calls only (each
// with the other calls' code compiled out, so that it neither takes registers nor moves the path's
// code), or any call but Sampler::top_k's, told apart at run time by job.verify.num_requests (the
// fast kernel's and row_stage2_kernel's kAny forms run verification calls, calls_of). Kernels
// without forms (the exact kernels) serve every call through kAny's helpers; none of them asks
// top_k_call.
enum class Calls { kSampling, kTopK, kAny };
template <Calls C>
__device__ __forceinline__ bool verification_call(const RowJob& job) {
  return C == Calls::kAny && job.verify.num_requests != 0;
}
template <Calls C>
__device__ __forceinline__ constexpr bool top_k_call(const RowJob&) {
  return C == Calls::kTopK;
}
// The form of the kernels that a call runs (top-k calls have no requests).
inline Calls calls_of(const RowJob& job) {
  return job.verify.num_requests > 0 ? Calls::kAny : job.top_k.k > 0 ? Calls::kTopK : Calls::kSampling;
}
}  // namespace sonic::cuda
