// The exact top-k of a row (Sampler::top_k rows the fast kernel flagged): one block a row selects the
// k-th largest key of the whole row, gathers the k keys at or above it and sorts them by rank. Every
// id below vocab_size takes part, NaN read as -inf.
#include "common/token_rules.hpp"
#include "cuda/block_select.cuh"
#include "cuda/cuda_check.hpp"
#include "cuda/row_job.cuh"
#include "sonic/types.hpp"

namespace sonic::cuda {
namespace {

constexpr int kBlock = 512;
constexpr int kBuckets = 4096;       // buckets of the keys' top 12 bits (sign, exponent, 3 mantissa bits)
constexpr int kBucketShift = 52;
constexpr int kGatherKeys = 3072;    // keys at or above the k-th key's bucket held in shared memory
constexpr int kBucketsPerThread = kBuckets / kBlock;

// Two passes over the row in the common case: a histogram of the keys' top 12 bits finds the bucket
// of the k-th largest key, then the keys in that bucket and above (when they fit, kGatherKeys) go to
// shared memory, where the radix selection and the gather run without touching the row again. Rows
// whose keys crowd one bucket beyond that (plateaus) take the radix selection over the whole row,
// eight passes of eight bits (it was the only path before: nine passes over the row by one block).
__global__ void __launch_bounds__(kBlock) exact_top_k_kernel(RowJob job) {
  __shared__ union {
    uint32_t hist[kBuckets];
    unsigned long long gathered[kGatherKeys];
  } s;
  __shared__ BlockSelect<kBlock>::Storage select;
  __shared__ unsigned long long picked[kMaxTopK];
  __shared__ int count;
  __shared__ int bucket;  // of the k-th largest key
  __shared__ int above;   // keys in the buckets above it
  const int32_t r = blockIdx.x;
  if (job.fast.exact_flags[r] == 0) return;
  const int32_t V = job.table.vocab_size;
  const TopKJob& out = job.top_k;
  const int lane = threadIdx.x & 31;
  const size_t elem = job.dtype == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem;
  auto key_of = [&](int32_t t) {
    const float x = detail::load_logit(row, job.dtype, t);
    return static_cast<unsigned long long>(detail::pack_key(detail::is_nan(x) ? -INFINITY : x, t));  // never 0
  };
  // Pass 1: the histogram, one shared atomic for each bucket a warp's keys fall in (a plateau row
  // would otherwise serialise on one address).
  for (int i = threadIdx.x; i < kBuckets; i += kBlock) s.hist[i] = 0;
  __syncthreads();
  for (int32_t base = threadIdx.x - lane; base < V; base += kBlock) {
    const int32_t t = base + lane;
    const int b = t < V ? static_cast<int>(key_of(t) >> kBucketShift) : -1;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, b);
    if (b >= 0 && lane == __ffs(peers) - 1) atomicAdd(&s.hist[b], static_cast<uint32_t>(__popc(peers)));
  }
  __syncthreads();
  // The bucket of the k-th key: thread i holds buckets kBuckets - 1 - (i * kBucketsPerThread + q),
  // so that an inclusive scan counts the keys at or above each thread's lowest bucket.
  {
    const int i = threadIdx.x;
    uint32_t c[kBucketsPerThread];
    unsigned long long own = 0;
#pragma unroll
    for (int q = 0; q < kBucketsPerThread; ++q) own += (c[q] = s.hist[kBuckets - 1 - (i * kBucketsPerThread + q)]);
    unsigned long long incl;
    BlockSelect<kBlock>::Scan(select.scan).InclusiveSum(own, incl);
    const unsigned long long k = static_cast<unsigned long long>(out.k);
    unsigned long long cum = incl - own;
    if (cum < k && incl >= k) {
#pragma unroll
      for (int q = 0; q < kBucketsPerThread; ++q) {
        if (cum + c[q] >= k && cum < k) {
          bucket = kBuckets - 1 - (i * kBucketsPerThread + q);
          above = static_cast<int>(cum);
        }
        cum += c[q];
      }
    }
  }
  __syncthreads();
  const int b_k = bucket;
  const int n_gather = above + static_cast<int>(s.hist[b_k]);
  __syncthreads();  // s.hist is read no more: s.gathered may take its place
  unsigned long long kth;
  const bool in_smem = n_gather <= kGatherKeys;
  if (in_smem) {
    // Pass 2: the keys of bucket b_k and above into shared memory (exactly n_gather of them).
    if (threadIdx.x == 0) count = 0;
    __syncthreads();
    for (int32_t base = threadIdx.x - lane; base < V; base += kBlock) {
      const int32_t t = base + lane;
      const unsigned long long key = t < V ? key_of(t) : 0ull;
      const bool keep = key != 0 && static_cast<int>(key >> kBucketShift) >= b_k;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
      int at = 0;
      if (lane == 0 && ballot) at = atomicAdd(&count, __popc(ballot));
      at = __shfl_sync(0xFFFFFFFFu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
      if (keep) s.gathered[at] = key;
    }
    __syncthreads();
    kth = BlockSelect<kBlock>::select_desc(
        n_gather, static_cast<unsigned long long>(out.k), [&](int32_t i) { return s.gathered[i]; },
        [](int32_t) { return 1ull; }, select);
  } else {
    kth = BlockSelect<kBlock>::select_desc(
        V, static_cast<unsigned long long>(out.k), key_of, [](int32_t) { return 1ull; }, select);
  }
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const int32_t n = in_smem ? n_gather : V;
  for (int32_t i = threadIdx.x; i < n; i += kBlock) {
    const unsigned long long key = in_smem ? s.gathered[i] : key_of(i);
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
