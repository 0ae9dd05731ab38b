// The exact top-k of a row (Sampler::top_k rows the fast kernel flagged): one block a row selects the
// k-th largest key of the whole row by radix selection, gathers the k keys at or above it and sorts
// them by rank. Every id below vocab_size takes part, NaN read as -inf.
#include "common/token_rules.hpp"
#include "cuda/block_select.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/row_job.cuh"
#include "sonic/types.hpp"

namespace sonic::cuda {
namespace {

constexpr int kBlock = 512;

__global__ void __launch_bounds__(kBlock) exact_top_k_kernel(RowJob job) {
  __shared__ BlockSelect<kBlock>::Storage select;
  __shared__ unsigned long long picked[kMaxTopK];
  __shared__ int count;
  const int32_t r = blockIdx.x;
  if (job.fast.exact_flags[r] == 0) return;
  const int32_t V = job.table.vocab_size;
  const TopKJob& out = job.top_k;
  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  auto key_of = [&](int32_t t) {
    const float x = detail::load_logit(row, job.dtype, t);
    return static_cast<unsigned long long>(detail::pack_key(detail::is_nan(x) ? -INFINITY : x, t));  // never 0
  };
  const unsigned long long kth = BlockSelect<kBlock>::select_desc(
      V, static_cast<unsigned long long>(out.k), key_of, [](int32_t) { return 1ull; }, select);
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  for (int32_t t = threadIdx.x; t < V; t += kBlock) {
    const unsigned long long key = key_of(t);
    if (key >= kth) picked[atomicAdd(&count, 1)] = key;  // exactly k keys: they are distinct
  }
  __syncthreads();
  for (int i = threadIdx.x; i < out.k; i += kBlock) {
    const unsigned long long key = picked[i];
    int rank = 0;
    for (int j = 0; j < out.k; ++j) rank += picked[j] > key;
    out.ids[r * out.stride + rank] = detail::key_token(key);
    if (out.values) out.values[r * out.stride + rank] = detail::key_value(key);
  }
}

}  // namespace

void launch_exact_top_k(const RowJob& job, cudaStream_t stream) {
  if (job.rows == 0) return;
  exact_top_k_kernel<<<job.rows, kBlock, 0, stream>>>(job);
  SONIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sonic::cuda
