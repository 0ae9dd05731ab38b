// Timing shared by the device benchmarks (BENCH.md): inputs rotated through >= 256 MiB, CUDA-graph
// replay of a capture of every rotating buffer (mean per call) and eager launches (median of 100
// after 25 warm-ups), and the one-read floor a figure is printed against.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#define CHECK_CUDA(x)                                                                   \
  do {                                                                                  \
    cudaError_t e_ = (x);                                                               \
    if (e_ != cudaSuccess) {                                                            \
      std::fprintf(stderr, "CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                     \
    }                                                                                   \
  } while (0)

constexpr double kH200ReadBandwidth = 4.33e12;  // H200 read-only reduction, ANCHORS.md

static __global__ void read_bandwidth_kernel(const float4* p, size_t n, float* sink) {
  float s = 0.0f;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float4 v = p[i];
    s += (v.x + v.y) + (v.z + v.w);
  }
  if (s == 1234.5f) *sink = s;  // keeps the loads; the buffer is zeros, so never true
}

// The one-read floor's bandwidth: ANCHORS.md's H200 figure on an H200 (BENCH.md), otherwise this
// GPU's own read-only reduction over 1 GiB (best of five), so that a run on another GPU (the
// device tool may lend an H100) prints its floor against that GPU, not the H200's.
inline double read_bandwidth() {
  static double bw = 0.0;
  if (bw > 0.0) return bw;
  cudaDeviceProp prop{};
  int dev = 0;
  if (cudaGetDevice(&dev) == cudaSuccess && cudaGetDeviceProperties(&prop, dev) == cudaSuccess &&
      std::strstr(prop.name, "H200") != nullptr)
    return bw = kH200ReadBandwidth;
  const size_t bytes = 1ull << 30;
  void* buf = nullptr;
  float* sink = nullptr;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMalloc(&sink, sizeof(float)) != cudaSuccess ||
      cudaMemset(buf, 0, bytes) != cudaSuccess) {
    std::fprintf(stderr, "read_bandwidth: no 1 GiB to measure with; using the H200's\n");
    cudaFree(buf);
    return bw = kH200ReadBandwidth;
  }
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  float best = 1e30f;
  for (int it = 0; it < 7; ++it) {
    cudaEventRecord(e0);
    read_bandwidth_kernel<<<prop.multiProcessorCount * 8, 512>>>(static_cast<const float4*>(buf), bytes / 16, sink);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, e0, e1);
    if (it >= 2) best = std::min(best, ms);  // two warm-ups
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(sink);
  cudaFree(buf);
  bw = static_cast<double>(bytes) / (best * 1e-3);
  std::fprintf(stderr, "read_bandwidth: %s reads at %.2f TB/s (the floors use it)\n", prop.name, bw * 1e-12);
  return bw;
}
constexpr size_t kRotateBytes = 256ull << 20;

// Input buffers of `bytes` a call to rotate through, so that no call finds its input in L2: at least
// two, and 256 MiB in all, or SONIC_BENCH_ROTATE_MIB (experiments: whether lines of a call's logits
// survive in L2 until the buffer's next turn, which the L2's replacement policy decides).
inline int rotating_buffers(size_t bytes) {
  size_t rotate = kRotateBytes;
  if (const char* env = std::getenv("SONIC_BENCH_ROTATE_MIB"))
    rotate = std::max<size_t>(1, std::strtoull(env, nullptr, 10)) << 20;
  return static_cast<int>(std::max<size_t>(2, (rotate + bytes - 1) / bytes));
}
// Reading `bytes` once at the read ceiling, in µs.
inline double read_floor_us(size_t bytes) { return 1e6 * static_cast<double>(bytes) / read_bandwidth(); }

inline double percentile_median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Captures `record()` on `stream` into a graph, replays it once (warm-up), then `replays` times
// between two events. Returns the milliseconds of the timed replays.
template <class Record>
inline float replay_ms(cudaStream_t stream, int replays, Record record) {
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  record();
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphLaunch(exec, stream));  // warm-up
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  CHECK_CUDA(cudaEventRecord(e0, stream));
  for (int r = 0; r < replays; ++r) CHECK_CUDA(cudaGraphLaunch(exec, stream));
  CHECK_CUDA(cudaEventRecord(e1, stream));
  CHECK_CUDA(cudaEventSynchronize(e1));
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return ms;
}

// Times one call `call(i)` on rotating buffer i: graph mean over replays of a capture of every buffer,
// and eager median. Returns {graph_us, eager_us}.
template <class Call>
inline std::pair<double, double> time_calls(cudaStream_t stream, int nbuf, int graph_replays, Call call) {
  const int replays = std::max(2, graph_replays * 64 / nbuf);
  const float graph_ms = replay_ms(stream, replays, [&] {
    for (int i = 0; i < nbuf; ++i) call(i);
  });
  const double graph_us = 1000.0 * graph_ms / (static_cast<double>(replays) * nbuf);
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  float ms = 0;
  std::vector<float> times;
  for (int r = 0; r < 125; ++r) {
    CHECK_CUDA(cudaEventRecord(e0, stream));
    call(r % nbuf);
    CHECK_CUDA(cudaEventRecord(e1, stream));
    CHECK_CUDA(cudaEventSynchronize(e1));
    CHECK_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    if (r >= 25) times.push_back(1000.0f * ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  return {graph_us, percentile_median(times)};
}

// The buffer flush_l2 reads: four times the L2 (at least 64 MiB), allocated at the first use.
// Allocation cannot be captured, so code that captures flushes calls this first.
struct L2FlushBuffer {
  float4* buf = nullptr;
  size_t n = 0;
  float* sink = nullptr;
  int blocks = 0;
};
inline const L2FlushBuffer& l2_flush_buffer() {
  static const L2FlushBuffer f = [] {
    L2FlushBuffer b;
    cudaDeviceProp prop{};
    int dev = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaGetDeviceProperties(&prop, dev));
    const size_t bytes = std::max<size_t>(4 * static_cast<size_t>(prop.l2CacheSize), 64ull << 20);
    CHECK_CUDA(cudaMalloc(&b.buf, bytes));
    CHECK_CUDA(cudaMemset(b.buf, 0, bytes));
    CHECK_CUDA(cudaMalloc(&b.sink, sizeof(float)));
    b.n = bytes / sizeof(float4);
    b.blocks = prop.multiProcessorCount * 8;
    return b;
  }();
  return f;
}

// Evicts the L2 on `stream`: reads l2_flush_buffer with the default policy, as the LM head's weights
// pass through it between two sampling calls in serving.
inline void flush_l2(cudaStream_t stream) {
  const L2FlushBuffer& f = l2_flush_buffer();
  read_bandwidth_kernel<<<f.blocks, 512, 0, stream>>>(f.buf, f.n, f.sink);
}

// Diagnostic, not a BENCH.md figure (sonic_bench --cold-l2 1): the mean of a call `call(i)` that
// finds none of its code, tables or scratch in L2, as in serving; the benchmark's calls find them
// there (the logits are read evict-first). A graph of `pairs` [flush_l2, call] pairs against a
// graph of the flushes alone, each replayed `replays` times. Returns µs.
template <class Call>
inline double time_calls_cold_l2(cudaStream_t stream, int nbuf, Call call) {
  const int pairs = std::min(nbuf, 32), replays = 5;
  l2_flush_buffer();  // before the captures
  auto replay_mean = [&](bool with_calls) {
    const float ms = replay_ms(stream, replays, [&] {
      for (int i = 0; i < pairs; ++i) {
        flush_l2(stream);
        if (with_calls) call(i);
      }
    });
    return 1000.0 * ms / (static_cast<double>(replays) * pairs);
  };
  const double flushes = replay_mean(false), both = replay_mean(true);
  return both - flushes;
}

// One graph a rotating buffer, each a capture of the one call `call(i)`: replaying graph i runs a
// call as the timed graphs run it (programmatic launches overlapping), where an eager call's
// kernels start as late as the host's launches reach them (sonic_bench --timeline-graph).
template <class Call>
inline std::vector<cudaGraphExec_t> capture_each(cudaStream_t stream, int nbuf, Call call) {
  std::vector<cudaGraphExec_t> execs(static_cast<size_t>(nbuf));
  for (int i = 0; i < nbuf; ++i) {
    cudaGraph_t graph;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    call(i);
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&execs[static_cast<size_t>(i)], graph, 0));
    CHECK_CUDA(cudaGraphDestroy(graph));
  }
  return execs;
}
