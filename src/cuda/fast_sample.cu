// The fast path's launch: the sampling forms of the kernel (fast_sample_kernel.cuh) and the dispatch
// to fast_verify.cu's verification forms and fast_top_k.cu's top-k forms, their occupancy and their
// shared-memory carveout.
#include <algorithm>
#include <vector>

#include "cuda/cuda_check.hpp"
#include "cuda/fast_sample_kernel.cuh"
#include "cuda/timeline.cuh"

namespace sonic::cuda {
namespace {

// Every fast kernel of a dtype, both files' forms. The occupancy and the carveout cover this list.
template <DType D>
std::vector<const void*> fast_kernels() {
  std::vector<const void*> kernels = form_kernels<Calls::kSampling>(D);
  for (const auto& other : {fast_top_k_kernels(D), fast_verify_kernels(D)}) kernels.insert(kernels.end(), other.begin(), other.end());
  return kernels;
}

// Also allows the kernel its dynamic shared memory (over 48 KB must be asked for) on the current
// device: the backend calls it once, when it is created.
template <DType D>
int resident_blocks() {
  // (Short steps' slots take the same bytes: fast_sample_kernel.cuh's static_assert.)
  constexpr size_t kShared = kFastSharedBytes<D, kStepLoads>;
  int fewest = 0;
  for (const void* kernel : fast_kernels<D>()) {
    SONIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kShared)));
    int blocks = 0;
    SONIC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kFastThreads, kShared));
    if (fewest == 0 || blocks < fewest) fewest = blocks;
  }
  return fewest;
}

}  // namespace

int fast_sample_blocks_per_sm(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return resident_blocks<DType::kBF16>();
    case DType::kF16: return resident_blocks<DType::kF16>();
    case DType::kF32:
    default: return resident_blocks<DType::kF32>();
  }
}

#if SONIC_TIMELINE
extern "C" int sonic_timeline_read(int kernel, unsigned long long* out, int blocks) {
  switch (kernel) {
    case 1: return read_exact_timeline(out, blocks);
    case 2: return read_row_stage2_timeline(out, blocks);
    default: {
      // The fast kernel's marks are in this file's table (sampling calls), fast_top_k.cu's (top-k
      // calls) or fast_verify.cu's (verification calls). A call runs one form, and each read clears
      // every table, so all but one are zero and the largest of each entry is the call's.
      const int n = read_timeline_table(out, blocks);
      std::vector<unsigned long long> other(static_cast<size_t>(n) * kTimelineColumns);
      for (auto read : {read_fast_top_k_timeline, read_fast_verify_timeline}) {
        read(other.data(), n);
        for (size_t i = 0; i < other.size(); ++i) out[i] = std::max(out[i], other[i]);
      }
      return n;
    }
  }
}
#endif

void set_fast_sample_carveout(int percent) {
  for (const auto& kernels : {fast_kernels<DType::kF32>(), fast_kernels<DType::kBF16>(), fast_kernels<DType::kF16>()})
    for (const void* kernel : kernels)
      SONIC_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

void launch_fast_sample(const RowJob& job, bool programmatic, cudaStream_t stream) {
  if (job.rows == 0) return;
  switch (calls_of(job)) {
    case Calls::kAny: launch_fast_verify(job, programmatic, stream); break;
    case Calls::kTopK: launch_fast_top_k(job, programmatic, stream); break;
    case Calls::kSampling: launch_calls<Calls::kSampling>(job, programmatic, stream); break;
  }
  SONIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sonic::cuda
