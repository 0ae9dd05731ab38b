// The exact top-k of a row (Sampler::top_k rows the fast kernel flagged): one block a row selects the
// k-th largest key of the whole row, gathers the k keys at or above it and sorts them by rank. Every
// id below vocab_size takes part, NaN read as -inf.
#include "common/token_rules.hpp"
#include "cuda/block_pass.cuh"
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

constexpr int kLoadsInFlight = 16;  // a thread's loads a round of a pass over the row (block_pass.cuh)

struct Shared {
  union {
    uint32_t hist[kBuckets];
    unsigned long long gathered[kGatherKeys];
  } s;
  BlockSelect<kBlock>::Storage select;
  unsigned long long picked[kMaxTopK];
  int count;
  int bucket;  // of the k-th largest key
  int above;   // keys in the buckets above it
};

// A logit's packed key, NaN read as -inf: never 0 (0 marks "no key" in the passes below).
__device__ __forceinline__ unsigned long long logit_key(float x, int32_t t) {
  return static_cast<unsigned long long>(detail::pack_key(detail::is_nan(x) ? -INFINITY : x, t));
}

// Two passes over the row in the common case: a histogram of the keys' top 12 bits finds the bucket
// of the k-th largest key, then the keys in that bucket and above (when they fit, kGatherKeys) go to
// shared memory, where the radix selection and the gather run without touching the row again. Rows
// whose keys crowd one bucket beyond that (plateaus) take the radix selection over the whole row,
// eight passes of eight bits. Every pass over the row keeps kLoadsInFlight loads a thread in flight.
template <DType D>
__device__ void exact_top_k_row(const RowJob& job, int32_t r, Shared& sh) {
  const int32_t V = job.table.vocab_size;
  const TopKJob& out = job.top_k;
  const int lane = threadIdx.x & 31;
  const void* row = static_cast<const char*>(job.logits) + r * job.row_stride * elem_bytes(D);
  auto load = [&](int32_t t) { return detail::load_logit(row, D, t); };
  auto key_of = [&](int32_t t) { return logit_key(load(t), t); };
  // Pass 1: the histogram, one shared atomic for each bucket a warp's keys fall in (a plateau row
  // would otherwise serialise on one address).
  for (int i = threadIdx.x; i < kBuckets; i += kBlock) sh.s.hist[i] = 0;
  __syncthreads();
  block_pass<kBlock, kLoadsInFlight>(V, 0.0f, load, [&](int32_t t, float x) {
    const int b = t < V ? static_cast<int>(logit_key(x, t) >> kBucketShift) : -1;
    const unsigned peers = __match_any_sync(0xFFFFFFFFu, b);
    if (b >= 0 && lane == __ffs(peers) - 1) atomicAdd(&sh.s.hist[b], static_cast<uint32_t>(__popc(peers)));
  });
  __syncthreads();
  // The bucket of the k-th key, and the keys above it.
  BlockSelect<kBlock>::crossing_bucket<kBuckets>([&](int b) { return static_cast<unsigned long long>(sh.s.hist[b]); },
                                                 static_cast<unsigned long long>(out.k), sh.select, &sh.bucket,
                                                 &sh.above);
  __syncthreads();
  const int b_k = sh.bucket;
  const int n_gather = sh.above + static_cast<int>(sh.s.hist[b_k]);
  __syncthreads();  // hist is read no more: gathered may take its place
  unsigned long long kth;
  const bool in_smem = n_gather <= kGatherKeys;
  if (in_smem) {
    // Pass 2: the keys of bucket b_k and above into shared memory (exactly n_gather of them).
    if (threadIdx.x == 0) sh.count = 0;
    __syncthreads();
    block_pass<kBlock, kLoadsInFlight>(V, 0.0f, load, [&](int32_t t, float x) {
      const unsigned long long key = t < V ? logit_key(x, t) : 0ull;
      const bool keep = key != 0 && static_cast<int>(key >> kBucketShift) >= b_k;
      const unsigned ballot = __ballot_sync(0xFFFFFFFFu, keep);
      if (ballot == 0) return;  // most warps' rounds: no shared atomic, no shuffle
      int at = 0;
      if (lane == 0) at = atomicAdd(&sh.count, __popc(ballot));
      at = __shfl_sync(0xFFFFFFFFu, at, 0) + __popc(ballot & ((1u << lane) - 1u));
      if (keep) sh.s.gathered[at] = key;
    });
    __syncthreads();
    kth = BlockSelect<kBlock>::select_desc</*BatchKeys=*/true>(
        n_gather, static_cast<unsigned long long>(out.k), [&](int32_t i) { return sh.s.gathered[i]; },
        [](int32_t) { return 1ull; }, sh.select);
  } else {
    kth = BlockSelect<kBlock>::select_desc</*BatchKeys=*/true>(
        V, static_cast<unsigned long long>(out.k), key_of, [](int32_t) { return 1ull; }, sh.select);
  }
  if (threadIdx.x == 0) sh.count = 0;
  __syncthreads();
  auto pick = [&](unsigned long long key) {
    if (key >= kth) sh.picked[atomicAdd(&sh.count, 1)] = key;  // exactly k keys: they are distinct
  };
  if (in_smem) {
    for (int32_t i = threadIdx.x; i < n_gather; i += kBlock) pick(sh.s.gathered[i]);
  } else {
    block_pass<kBlock, kLoadsInFlight>(V, 0.0f, load, [&](int32_t t, float x) {
      if (t < V) pick(logit_key(x, t));
    });
  }
  __syncthreads();
  for (int i = threadIdx.x; i < out.k; i += kBlock) {
    const unsigned long long key = sh.picked[i];
    int rank = 0;
    for (int j = 0; j < out.k; ++j) rank += sh.picked[j] > key;
    out.ids[r * out.stride + rank] = detail::key_token(key);
    if (out.values) out.values[r * out.stride + rank] = detail::key_value(key);
  }
}

__global__ void __launch_bounds__(kBlock, 1) exact_top_k_kernel(RowJob job) {
  __shared__ Shared sh;
  const int32_t r = blockIdx.x;
  if (job.fast.exact_flags[r] == 0) return;
  switch (job.dtype) {  // one copy of the passes a dtype, so that their loads carry no dtype branch
    case DType::kF32: return exact_top_k_row<DType::kF32>(job, r, sh);
    case DType::kBF16: return exact_top_k_row<DType::kBF16>(job, r, sh);
    case DType::kF16: return exact_top_k_row<DType::kF16>(job, r, sh);
  }
}

}  // namespace

void launch_exact_top_k(const RowJob& job, cudaStream_t stream) {
  if (job.rows == 0) return;
  exact_top_k_kernel<<<job.rows, kBlock, 0, stream>>>(job);
  SONIC_CUDA_CHECK(cudaGetLastError());
}

}  // namespace sonic::cuda
