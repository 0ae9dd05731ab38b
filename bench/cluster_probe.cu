// The floor of a small-batch pipeline two ways (docs/design-small-batch.md's first measurement):
// the argmax of each of B rows of V fp32 logits, where every block reads its part of a row and the
// parts are merged
//   global:     as the fast kernel does now: grid (tiles of 4096, rows), each block's maximum to
//               global memory, a counter a row, and the row's last block merges them;
//   cluster C:  a thread-block cluster of C blocks a row: each block reads V / C tokens, then
//               `rounds` exchanges of the blocks' maxima through distributed shared memory (one
//               cluster barrier each; every block merges all C);
// and the same launches reading nothing ("empty"), for the cost of the launch and the barriers.
// Timed as BENCH.md says (graph mean and eager median over buffers rotated through >= 256 MiB),
// every result checked against the host's argmax first. One line a configuration on stdout, and
// with --out one JSON object a line (suite "probe").
//   sonic_cluster_probe [--B 1,2,4,8,16] [--V 151936] [--rounds 2] [--out FILE --commit C --date D]
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "graph_timing.hpp"

namespace cg = cooperative_groups;

namespace {

constexpr int kTile = 4096;  // the fast kernel's fp32 tile

// (value, token) as one key whose unsigned order is the value's, then the lower token: the
// library's packing in spirit (finite values only here).
__device__ __forceinline__ unsigned long long pack(float x, int32_t t) {
  uint32_t b = __float_as_uint(x);
  b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (static_cast<unsigned long long>(b) << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(t));
}

__device__ __forceinline__ unsigned long long warp_max_key(unsigned long long k) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long v = __shfl_xor_sync(0xFFFFFFFFu, k, o);
    k = v > k ? v : k;
  }
  return k;
}

// The block's largest key over tokens [t0, t1) of row x (t0 and t1 multiples of 4, rows 16-byte
// aligned), in every thread; `slots` holds Threads / 32 keys.
template <int Threads>
__device__ __forceinline__ unsigned long long block_max(const float* x, int32_t t0, int32_t t1, unsigned long long* slots) {
  unsigned long long best = 0;
  const float4* v = reinterpret_cast<const float4*>(x);
  for (int32_t i = t0 / 4 + threadIdx.x; i < t1 / 4; i += Threads) {
    const float4 f = __ldcs(v + i);
    const int32_t t = 4 * i;
    unsigned long long k = pack(f.x, t);
    k = max(k, pack(f.y, t + 1));
    k = max(k, pack(f.z, t + 2));
    k = max(k, pack(f.w, t + 3));
    best = max(best, k);
  }
  best = warp_max_key(best);
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x / 32] = best;
  __syncthreads();
  best = 0;
#pragma unroll
  for (int w = 0; w < Threads / 32; ++w) best = max(best, slots[w]);
  return best;
}

template <int Threads>
__global__ void __launch_bounds__(Threads) global_argmax(const float* logits, int32_t V, int32_t read, unsigned long long* partial,
                                                         unsigned* counters, int32_t* out) {
  __shared__ unsigned long long slots[Threads / 32];
  __shared__ bool last;
  const int32_t r = blockIdx.y, tiles = gridDim.x;
  const int32_t t0 = min(read, blockIdx.x * kTile), t1 = min(read, t0 + kTile);
  const unsigned long long k = block_max<Threads>(logits + static_cast<int64_t>(r) * V, t0, t1, slots);
  if (threadIdx.x == 0) {
    partial[r * tiles + blockIdx.x] = k;
    __threadfence();
    last = atomicAdd(counters + r, 1u) == static_cast<unsigned>(tiles - 1);
    if (last) __threadfence();
  }
  __syncthreads();  // also: every thread has read `slots` in block_max before they are written again
  if (!last) return;
  unsigned long long best = 0;
  for (int i = threadIdx.x; i < tiles; i += Threads) best = max(best, __ldcg(partial + r * tiles + i));
  best = warp_max_key(best);
  if ((threadIdx.x & 31) == 0) slots[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 0; w < Threads / 32; ++w) best = max(best, slots[w]);
    out[r] = best ? static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(best)) : -1;
    counters[r] = 0;
  }
}

// Launched with cluster dimensions (C, 1, 1): cluster y is row y.
template <int Threads>
__global__ void __launch_bounds__(Threads) cluster_argmax(const float* logits, int32_t V, int32_t read, int rounds, int32_t* out) {
  __shared__ unsigned long long slots[Threads / 32];
  __shared__ unsigned long long mine;
  cg::cluster_group cluster = cg::this_cluster();
  const int C = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int32_t r = blockIdx.y;
  const int32_t part = ((V + C - 1) / C + 3) / 4 * 4;
  const int32_t t0 = min(read, rank * part), t1 = min(read, t0 + part);
  unsigned long long best = block_max<Threads>(logits + static_cast<int64_t>(r) * V, t0, t1, slots);
  for (int round = 0; round < rounds; ++round) {
    if (threadIdx.x == 0) mine = best;
    cluster.sync();  // every block's key is written
    unsigned long long other = 0;
    if (threadIdx.x < static_cast<unsigned>(C)) other = *cluster.map_shared_rank(&mine, static_cast<int>(threadIdx.x));
    best = max(best, warp_max_key(other));  // in warp 0: the cluster's maximum (thread 0 uses it)
    cluster.sync();  // nobody still reads `mine` when the next round writes it, or after exit
  }
  if (rank == 0 && threadIdx.x == 0) out[r] = best ? static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(best)) : -1;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  size_t a = 0;
  while (a < s.size()) {
    const size_t b = s.find(',', a);
    v.push_back(std::atoi(s.substr(a, b - a).c_str()));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches = {1, 2, 4, 8, 16};
  int32_t V = 151936;
  int rounds = 2;
  std::string out_path, commit = "unknown", date = "unknown";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--B") batches = parse_list(v);
    else if (k == "--V") V = std::atoi(v.c_str());
    else if (k == "--rounds") rounds = std::atoi(v.c_str());
    else if (k == "--out") out_path = v;
    else if (k == "--commit") commit = v;
    else if (k == "--date") date = v;
    else {
      std::fprintf(stderr, "unknown argument %s\n", k.c_str());
      return 2;
    }
  }
  if (V % 4 != 0 || V <= 0) {
    std::fprintf(stderr, "--V must be a positive multiple of 4 (got %d)\n", V);
    return 2;
  }
  FILE* out = out_path.empty() ? nullptr : std::fopen(out_path.c_str(), "a");
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  CHECK_CUDA(cudaFuncSetAttribute(cluster_argmax<512>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failures = 0;
  std::printf("%-22s %4s %7s %9s %9s  check\n", "probe", "B", "V", "graph_us", "eager_us");
  for (const int B : batches) {
    const size_t row_bytes = static_cast<size_t>(V) * 4, call_bytes = row_bytes * B;
    const int nbuf = rotating_buffers(call_bytes);
    std::vector<float> host(static_cast<size_t>(nbuf) * B * V);
    std::mt19937_64 rng(7 + B);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    for (float& x : host) x = normal(rng);
    float* d_logits = nullptr;
    int32_t* d_out = nullptr;
    unsigned long long* d_partial = nullptr;
    unsigned* d_counters = nullptr;
    const int tiles = (V + kTile - 1) / kTile;
    CHECK_CUDA(cudaMalloc(&d_logits, host.size() * 4));
    CHECK_CUDA(cudaMemcpy(d_logits, host.data(), host.size() * 4, cudaMemcpyHostToDevice));
    CHECK_CUDA(cudaMalloc(&d_out, static_cast<size_t>(nbuf) * B * 4));
    CHECK_CUDA(cudaMalloc(&d_partial, static_cast<size_t>(B) * tiles * 8));
    CHECK_CUDA(cudaMalloc(&d_counters, static_cast<size_t>(B) * 4));
    CHECK_CUDA(cudaMemset(d_counters, 0, static_cast<size_t>(B) * 4));
    std::vector<int32_t> expect(B);
    for (int r = 0; r < B; ++r) {
      const float* row = host.data() + static_cast<size_t>(r) * V;
      expect[r] = static_cast<int32_t>(std::max_element(row, row + V) - row);  // first of equal maxima
    }
    struct Probe {
      std::string name;
      int cluster;  // 0: global
      int threads;
    };
    const Probe probes[] = {{"global/128", 0, 128}, {"cluster8/512", 8, 512}, {"cluster16/512", 16, 512},
                            {"cluster16/128", 16, 128}};
    for (const Probe& pr : probes)
      for (const bool empty : {false, true}) {
        const int32_t read = empty ? 0 : V;
        // Returns the launch's error: a cluster shape the device cannot place fails here, not later.
        auto launch = [&](int i) -> cudaError_t {
          const float* x = d_logits + static_cast<size_t>(i) * B * V;
          int32_t* o = d_out + static_cast<size_t>(i) * B;
          if (pr.cluster == 0) {
            global_argmax<128><<<dim3(tiles, B), 128, 0, stream>>>(x, V, read, d_partial, d_counters, o);
            return cudaGetLastError();
          }
          cudaLaunchConfig_t cfg{};
          cfg.gridDim = dim3(pr.cluster, B);
          cfg.blockDim = dim3(pr.threads);
          cfg.stream = stream;
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeClusterDimension;
          attr[0].val.clusterDim.x = pr.cluster;
          attr[0].val.clusterDim.y = 1;
          attr[0].val.clusterDim.z = 1;
          cfg.attrs = attr;
          cfg.numAttrs = 1;
          return pr.threads == 512 ? cudaLaunchKernelEx(&cfg, cluster_argmax<512>, x, V, read, rounds, o)
                                   : cudaLaunchKernelEx(&cfg, cluster_argmax<128>, x, V, read, rounds, o);
        };
        if (pr.threads == 128 && pr.cluster == 16)
          CHECK_CUDA(cudaFuncSetAttribute(cluster_argmax<128>, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        const std::string name = pr.name + (empty ? " empty" : "");
        cudaError_t e = launch(0);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
        if (e != cudaSuccess) {
          ++failures;
          std::printf("%-22s %4d %7d  FAILED to run: %s\n", name.c_str(), B, V, cudaGetErrorString(e));
          continue;
        }
        std::vector<int32_t> got(B);
        CHECK_CUDA(cudaMemcpy(got.data(), d_out, static_cast<size_t>(B) * 4, cudaMemcpyDeviceToHost));
        bool ok = true;
        for (int r = 0; r < B; ++r) ok = ok && (empty ? got[r] == -1 : got[r] == expect[r]);
        if (!ok) {
          ++failures;
          std::printf("%-22s %4d %7d  FAILED its check (row 0: %d, expected %d)\n", name.c_str(), B, V, got[0],
                      empty ? -1 : expect[0]);
          continue;
        }
        const auto [graph_us, eager_us] = time_calls(stream, nbuf, 20, [&](int i) { CHECK_CUDA(launch(i)); });
        std::printf("%-22s %4d %7d %9.2f %9.2f  ok\n", name.c_str(), B, V, graph_us, eager_us);
        if (out)
          for (const auto& [mode, us] : {std::pair<const char*, double>{"graph", graph_us}, {"eager", eager_us}})
            std::fprintf(out,
                         "{\"suite\": \"probe\", \"impl\": \"%s\", \"case\": \"argmax%s\", \"B\": %d, \"V\": %d, \"dtype\": "
                         "\"fp32\", \"mode\": \"%s\", \"us\": %.2f, \"floor_us\": %.2f, \"gpu\": \"%s\", \"rounds\": %d, "
                         "\"commit\": \"%s\", \"date\": \"%s\"}\n",
                         pr.name.c_str(), empty ? "-empty" : "", B, V, mode, us, empty ? 0.0 : read_floor_us(call_bytes),
                         prop.name, pr.cluster ? rounds : 0, commit.c_str(), date.c_str());
      }
    cudaFree(d_logits);
    cudaFree(d_out);
    cudaFree(d_partial);
    cudaFree(d_counters);
  }
  if (out) std::fclose(out);
  std::printf("sonic_cluster_probe: %d configuration(s) failed their check\n", failures);
  return failures ? 1 : 0;
}
