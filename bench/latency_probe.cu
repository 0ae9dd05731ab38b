// What stage 2's building blocks cost on this GPU, in SM cycles, on an idle device and while a
// streaming kernel keeps HBM busy on the other SMs (perf-notes v3.20: stage 2's phases run 2-3x
// slower than their instruction counts say, and about twice as slow again at B = 64-128 when the
// fast grid still streams). One block of T threads runs each probe as a dependent chain of R
// operations between two clock64 reads of thread 0; a line per (T, load, probe) on stdout:
//   probe=<name> T=<threads> load=<idle|stream> cycles_per_op=<c> ns_per_op=<n>
//   sonic_latency_probe [--reps 64] [--stream-ms 30]
#include <cub/block/block_scan.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/random.hpp"
#include "graph_timing.hpp"

namespace {

enum Probe : int {
  kEmpty,          // the two clock reads alone
  kBarrier,        // __syncthreads, the whole block
  kL2Chase,        // thread 0: a dependent chain of ld.global.cg hits in L2 (64 KB ring)
  kDramChase,      // thread 0: a dependent chain of misses (1 GiB ring, 4 KB strides)
  kL2ChaseAll,     // every thread its own L2 chain (a listing's round trips)
  kWarpMaxU64,     // a dependent warp max of a 64-bit key (five shuffle pairs)
  kSharedAtomic,   // every thread: atomicAdd to a shared histogram bin (bins spread)
  kSharedAtomicHot,// every thread: atomicAdd to one of 8 bins
  kGumbelDouble,   // thread 0: Philox + the double-precision Gumbel, dependent
  kGumbelFast,     // thread 0: Philox + the fp32 fast Gumbel, dependent
  kExpDouble,      // thread 0: exp in double, dependent
  kBlockScanDouble,// the block: cub::BlockScan<double> (warp scans) inclusive sum, dependent
  kFenceAtomic,    // thread 0: __threadfence + atomicAdd on a global counter (a chunk's count)
  kAcquireLoad,    // thread 0: ld.acquire.gpu of a global word (a poll's read)
  kStore,          // thread 0: a global store to a new line each time
  kGlobalTimer,    // thread 0: a %globaltimer read
  kProbes
};
constexpr const char* kNames[kProbes] = {"empty",        "barrier",       "l2_chase",     "dram_chase",
                                         "l2_chase_all", "warp_max_u64",  "smem_atomic",  "smem_atomic_hot",
                                         "gumbel_double", "gumbel_fast",  "exp_double",   "block_scan_double",
                                         "fence_atomic", "acquire_load",  "store",        "globaltimer"};

struct Buffers {
  const uint32_t* l2_ring;    // next index, 64 KB
  const uint32_t* dram_ring;  // next index, 1 GiB
  unsigned long long* sink;   // results kept alive
  int32_t* counter;
  uint32_t* stores;           // [reps * 32]
};

template <int T>
__global__ void __launch_bounds__(T) probe_kernel(Buffers b, int probe, int reps, uint32_t start, long long* cycles) {
  using Scan = cub::BlockScan<double, T, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage scan;
  __shared__ int hist[512];
  const int tid = threadIdx.x;
  for (int i = tid; i < 512; i += T) hist[i] = 0;
  unsigned long long acc = tid;
  double dacc = 0.25 + tid * 1e-3;
  uint32_t at = probe == kDramChase ? start : tid;  // the DRAM ring from a new line each run
  __syncthreads();
  long long t0 = clock64();
  switch (probe) {
    case kEmpty: break;
    case kBarrier:
      for (int i = 0; i < reps; ++i) __syncthreads();
      break;
    case kL2Chase:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) at = __ldcg(b.l2_ring + at);
      __syncthreads();
      break;
    case kDramChase:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) at = __ldcg(b.dram_ring + at);
      __syncthreads();
      break;
    case kL2ChaseAll:
      for (int i = 0; i < reps; ++i) at = __ldcg(b.l2_ring + at);
      __syncthreads();
      break;
    case kWarpMaxU64:
      for (int i = 0; i < reps; ++i) {
        unsigned long long v = acc + i;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xFFFFFFFFu, v, o));
        acc = v;
      }
      __syncthreads();
      break;
    case kSharedAtomic:
      for (int i = 0; i < reps; ++i) acc += atomicAdd(&hist[(tid * 7 + i * 13 + static_cast<int>(acc & 1)) & 511], 1);
      __syncthreads();
      break;
    case kSharedAtomicHot:
      for (int i = 0; i < reps; ++i) acc += atomicAdd(&hist[(i + static_cast<int>(acc & 1)) & 7], 1);
      __syncthreads();
      break;
    case kGumbelDouble:
    case kGumbelFast:  // a draw's Philox word, then the noise in double or in fp32
      if (tid == 0)
        for (int i = 0; i < reps; ++i) {
          const float v = sonic::detail::uniform_from_word(sonic::detail::random_word(acc, 7, 0, static_cast<uint32_t>(i)));
          dacc += probe == kGumbelDouble ? sonic::detail::gumbel_from_uniform_exact(v)
                                         : static_cast<double>(sonic::detail::gumbel_from_uniform_fast(v));
          acc += static_cast<unsigned long long>(dacc);
        }
      __syncthreads();
      break;
    case kExpDouble:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) dacc = exp(-dacc) + 0.5;
      __syncthreads();
      break;
    case kBlockScanDouble:
      for (int i = 0; i < reps; ++i) {
        double v = dacc;
        Scan(scan).InclusiveSum(v, v);
        dacc = v * 1e-3;
        __syncthreads();
      }
      break;
    case kFenceAtomic:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) {
          __threadfence();
          acc += atomicAdd(b.counter, 1);
        }
      __syncthreads();
      break;
    case kAcquireLoad:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) {
          int32_t n;
          asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(n) : "l"(b.counter + (acc & 1)) : "memory");
          acc += static_cast<uint32_t>(n);
        }
      __syncthreads();
      break;
    case kStore:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) b.stores[i * 32] = static_cast<uint32_t>(acc + i);
      __syncthreads();
      break;
    case kGlobalTimer:
      if (tid == 0)
        for (int i = 0; i < reps; ++i) {
          unsigned long long t;
          asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
          acc += t;
        }
      __syncthreads();
      break;
  }
  const long long t1 = clock64();
  if (tid == 0) *cycles = t1 - t0;
  if (acc == 0x123456789ull || at == 0xFFFFFFFFu || dacc == -1.0) b.sink[tid] = acc + at;  // keep the chains
}

// Streams a large buffer for about `ns` nanoseconds: one block an SM on all but `free_sms` SMs, the
// rest of the device left to the probe (each block asks for most of an SM's shared memory).
__global__ void __launch_bounds__(1024) stream_kernel(const uint4* data, size_t n, unsigned long long ns,
                                                      unsigned long long* sink) {
  extern __shared__ uint4 pad[];
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  uint4 acc{0, 0, 0, 0};
  size_t i = blockIdx.x * blockDim.x + threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (int round = 0;; ++round) {
#pragma unroll 8
    for (int k = 0; k < 8; ++k) {
      const uint4 v = __ldcs(data + (i % n));
      acc.x ^= v.x;
      acc.y ^= v.y;
      i += stride;
    }
    if ((round & 63) == 0) {
      unsigned long long now;
      asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
      if (now - start > ns) break;
    }
  }
  if (acc.x == 0x12345 && acc.y == 0x6789) sink[0] = acc.x, pad[0] = acc;
}

// Straight-line code of about N instructions (eight independent chains, so that the warp could issue
// one a cycle): what an instruction fetch costs when the code is in the SM's instruction cache, only
// in L2, or only in HBM. Salt gives two copies different constants (different code).
template <int N, uint32_t Salt>
__global__ void code_kernel(uint32_t seed, unsigned long long* sink, long long* cycles) {
  uint32_t a[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] = seed + j;
#pragma unroll
  for (int j = 0; j < 8; ++j) asm volatile("" ::"r"(a[j]));
  const long long t0 = clock64();
#pragma unroll
  for (int i = 0; i < N; ++i) a[i & 7] = (a[i & 7] ^ (a[i & 7] >> 15)) * (2654435761u + Salt + 2u * i) + (Salt ^ static_cast<uint32_t>(i));
  uint32_t x = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) x ^= a[j];
  asm volatile("" ::"r"(x));  // the chains end before the second clock read
  const long long t1 = clock64();
  if (threadIdx.x == 0 && blockIdx.x == 0 && cycles) *cycles = t1 - t0;
  if (x == 0x9E3779B9u) sink[0] = x;
}
constexpr int kCodeOps = 8192;  // about 4 instructions an op: 512 KB of code

template <int T>
long long run_probe(const Buffers& b, int probe, int reps, long long* d_cycles, cudaStream_t s) {
  static uint32_t start = 0;
  start = (start + 4099u * 1024u) % ((1u << 28) / 1024u * 1024u);
  probe_kernel<T><<<1, T, 0, s>>>(b, probe, reps, start, d_cycles);
  CHECK_CUDA(cudaGetLastError());
  long long c = 0;
  CHECK_CUDA(cudaMemcpyAsync(&c, d_cycles, sizeof c, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 64;
  double stream_ms = 30.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--stream-ms")) stream_ms = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: sonic_latency_probe [--reps N] [--stream-ms MS]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  int clock_khz = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  const double ghz = clock_khz / 1e6;

  // Rings: random cyclic permutations, one index a 128-byte line (L2) or a 4 KB stride (DRAM).
  auto ring = [](size_t words, size_t stride_words, uint32_t seed) {
    const size_t n = words / stride_words;
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    std::shuffle(order.begin(), order.end(), std::mt19937(seed));
    std::vector<uint32_t> next(words, 0u);
    for (size_t k = 0; k < n; ++k)
      next[order[k] * stride_words] = static_cast<uint32_t>(order[(k + 1) % n] * stride_words);
    for (size_t w = 0; w < words; ++w)  // every thread's start index lands on a line of the ring
      if (w % stride_words) next[w] = static_cast<uint32_t>((w / stride_words) * stride_words);
    return next;
  };
  const size_t l2_words = 64 * 1024 / 4, dram_words = (size_t{1} << 30) / 4;
  const std::vector<uint32_t> l2 = ring(l2_words, 32, 1), dram = ring(dram_words, 1024, 2);
  Buffers b{};
  uint32_t *d_l2, *d_dram, *d_stores;
  CHECK_CUDA(cudaMalloc(&d_l2, l2_words * 4));
  CHECK_CUDA(cudaMalloc(&d_dram, dram_words * 4));
  CHECK_CUDA(cudaMalloc(&d_stores, static_cast<size_t>(reps) * 32 * 4 + 4096));
  CHECK_CUDA(cudaMemcpy(d_l2, l2.data(), l2_words * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_dram, dram.data(), dram_words * 4, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMalloc(&b.sink, 4096 * 8));
  CHECK_CUDA(cudaMalloc(&b.counter, 64));
  CHECK_CUDA(cudaMemset(b.counter, 0, 64));
  b.l2_ring = d_l2;
  b.dram_ring = d_dram;
  b.stores = d_stores;
  long long* d_cycles;
  CHECK_CUDA(cudaMalloc(&d_cycles, sizeof(long long)));
  const size_t stream_bytes = size_t{2} << 30;
  uint4* d_stream;
  CHECK_CUDA(cudaMalloc(&d_stream, stream_bytes));
  CHECK_CUDA(cudaMemset(d_stream, 1, stream_bytes));
  const int stream_smem = 150 * 1024;  // one streaming block an SM
  CHECK_CUDA(cudaFuncSetAttribute(stream_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, stream_smem));
  cudaStream_t probe_stream, load_stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&probe_stream, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&load_stream, cudaStreamNonBlocking));
  std::printf("device=%s sms=%d clock_ghz=%.3f reps=%d\n", prop.name, prop.multiProcessorCount, ghz, reps);

  for (int loaded = 0; loaded < 2; ++loaded) {
    cudaEvent_t done;
    CHECK_CUDA(cudaEventCreate(&done));
    if (loaded) {  // the stream kernel on all SMs but 4, running for stream_ms while the probes run
      stream_kernel<<<prop.multiProcessorCount - 4, 1024, stream_smem, load_stream>>>(
          d_stream, stream_bytes / sizeof(uint4), static_cast<unsigned long long>(stream_ms * 1e6), b.sink);
      CHECK_CUDA(cudaGetLastError());
      CHECK_CUDA(cudaEventRecord(done, load_stream));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (int t = 0; t < 2; ++t)
      for (int p = 0; p < kProbes; ++p) {
        long long best = -1;
        for (int k = 0; k < 5; ++k) {  // the first runs warm code and rings; keep the median-ish last
          const long long c = t == 0 ? run_probe<128>(b, p, reps, d_cycles, probe_stream)
                                     : run_probe<512>(b, p, reps, d_cycles, probe_stream);
          if (k >= 2 && (best < 0 || c < best)) best = c;
        }
        const double per = static_cast<double>(best) / reps;
        std::printf("probe=%s T=%d load=%s cycles_per_op=%.1f ns_per_op=%.1f\n", kNames[p], t == 0 ? 128 : 512,
                    loaded ? "stream" : "idle", per, per / ghz);
      }
    if (loaded) {
      const cudaError_t q = cudaEventQuery(done);
      std::printf("stream kernel still running after the loaded probes: %s\n", q == cudaErrorNotReady ? "yes" : "no");
      CHECK_CUDA(cudaEventSynchronize(done));
    }
    CHECK_CUDA(cudaEventDestroy(done));
  }
  // Instruction fetch: the same code run again (its instruction caches warm), after another code
  // ran on every SM (the SM's caches cold, the code in L2), and after 256 MiB streamed too (HBM).
  for (int mode = 0; mode < 3; ++mode) {
    long long c = 0;
    for (int k = 0; k < 3; ++k) {
      code_kernel<kCodeOps, 1><<<1, 32, 0, probe_stream>>>(7u + k, b.sink, nullptr);  // warm
      if (mode >= 1) code_kernel<kCodeOps, 2><<<4 * prop.multiProcessorCount, 128, 0, probe_stream>>>(3u, b.sink, nullptr);
      if (mode == 2) CHECK_CUDA(cudaMemsetAsync(d_stream, k, size_t{256} << 20, probe_stream));
      code_kernel<kCodeOps, 1><<<1, 32, 0, probe_stream>>>(11u + k, b.sink, d_cycles);
      CHECK_CUDA(cudaGetLastError());
      long long v = 0;
      CHECK_CUDA(cudaMemcpyAsync(&v, d_cycles, sizeof v, cudaMemcpyDeviceToHost, probe_stream));
      CHECK_CUDA(cudaStreamSynchronize(probe_stream));
      if (k == 0 || v < c) c = v;
    }
    const char* where[3] = {"warm", "l2", "hbm"};
    std::printf("probe=code_%s ops=%d cycles=%lld cycles_per_op=%.2f (about 4 instructions an op)\n", where[mode],
                kCodeOps, c, static_cast<double>(c) / kCodeOps);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  return 0;
}
