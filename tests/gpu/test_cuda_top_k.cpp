// Sampler::top_k on the CUDA backend against the CPU reference, id for id and value for value: every
// V of the agreement tests, every dtype, k from 1 to 1024, on peaked, flat and nasty rows (ties, NaN,
// -inf, +inf, bf16 plateaus, rows with fewer than k finite logits, rows masked with the dtype's lowest
// finite value, padded rows), so that both the fast path and the exact top-k kernel are exercised; and
// one call captured in a graph and replayed.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "gpu_harness.hpp"
#include "sonic/sonic.hpp"

namespace {

using sonic::Backend;
using sonic::DType;
using sonic::LogitsView;
using sonic::Sampler;
using sonic::SamplerConfig;
using sonic::TopKOutputs;
using sonic_gpu::DeviceBuffer;
using sonic_gpu::ScopedEnv;

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

SamplerConfig config(Backend b, int32_t V, int32_t rows) {
  SamplerConfig c;
  c.backend = b;
  c.vocab_size = V;
  c.max_slots = 1;
  c.max_rows = rows;
  c.max_history = 1;
  c.cpu_threads = 0;  // the reference's rows on every core
  return c;
}

// Row kinds: 0 peaked, 1 flat, 2 quantised (many ties), 3 plateau with a few NaN / -inf,
// 4 fewer than k finite logits, 5 a +inf among finite ones, 6 masked by the caller with the dtype's
// lowest finite value (`lowest`) but for runs of ids and a few scattered ones (fewer than k, often).
std::vector<float> make_rows(int32_t rows, int32_t cols, int32_t V, int32_t k, float lowest, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int32_t> any(0, V - 1);
  std::vector<float> x(static_cast<size_t>(rows) * cols);
  for (int32_t r = 0; r < rows; ++r) {
    float* row = x.data() + static_cast<size_t>(r) * cols;
    const int kind = r % 7;
    for (int32_t t = 0; t < cols; ++t) {
      float v = normal(rng);
      if (kind == 0) v *= 3.0f;
      if (kind == 2) v = std::round(v * 4.0f) / 4.0f;
      if (kind == 3) v = 1.0f;
      if (kind == 4) v = -kInf;
      if (kind == 6) v = lowest;
      row[t] = t < V ? v : 1e30f;  // padding must never be returned
    }
    if (kind == 0)
      for (int i = 0; i < 5; ++i) row[any(rng)] += 10.0f;
    if (kind == 3)
      for (int i = 0; i < 50; ++i) row[any(rng)] = i % 2 ? kNaN : -kInf;
    if (kind == 4)
      for (int i = 0; i < k / 2; ++i) row[any(rng)] = normal(rng);
    if (kind == 5) row[any(rng)] = kInf;
    if (kind == 6)
      for (int run = 0; run < 3; ++run) {
        const int32_t start = any(rng), len = 1 + static_cast<int32_t>(rng() % 40);
        for (int32_t t = start; t < std::min(V, start + len); ++t) row[t] = 3.0f * normal(rng);
        row[any(rng)] = normal(rng);
      }
  }
  return x;
}

std::vector<uint16_t> to_half(const std::vector<float>& x, DType dtype) {
  std::vector<uint16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    h[i] = dtype == DType::kBF16 ? sonic_gpu::float_to_bf16_rne(x[i]) : sonic_gpu::float_to_f16(x[i]);
  return h;
}

struct Shape {
  int32_t V;
  DType dtype;
};

class CudaTopK : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaTopK, MatchesReferenceIdForId) {
  const Shape shape = GetParam();
  const int32_t V = shape.V, cols = V + 3, rows = 12;
  std::mt19937_64 rng(V * 31 + static_cast<int>(shape.dtype));
  Sampler cpu(config(Backend::kCpu, V, rows));
  const float lowest = sonic_gpu::lowest_finite(shape.dtype);
  // Stage 2 in each row's last block and in row_stage2_kernel (the default for 12 rows), forced; and
  // chunks of five tiles (several steps, between which top-k rows raise the bound), forced.
  for (const auto& [separate_rows, per_chunk] :
       {std::pair<const char*, const char*>{"0", nullptr}, {"100000", nullptr}, {"0", "5"}})
  for (int32_t k : {1, 50, 128, 1024}) {
    if (k > V) continue;
    SCOPED_TRACE(std::string("separate stage 2 up to ") + separate_rows + " rows, tiles a chunk " +
                 (per_chunk ? per_chunk : "(default)"));
    Sampler gpu = [&] {
      const ScopedEnv env("SONIC_CUDA_SEPARATE_STAGE2_ROWS", separate_rows);
      const ScopedEnv chunks("SONIC_CUDA_TILES_PER_CHUNK", per_chunk);
      return Sampler(config(Backend::kCuda, V, rows));
    }();
    const std::vector<float> x = make_rows(rows, cols, V, k, lowest, rng);
    const size_t elem = shape.dtype == DType::kF32 ? 4 : 2;
    std::vector<uint16_t> half;
    const void* host = x.data();
    if (elem == 2) {
      half = to_half(x, shape.dtype);
      host = half.data();
    }
    DeviceBuffer<char> d_x(x.size() * elem);
    cudaMemcpy(d_x.get(), host, x.size() * elem, cudaMemcpyHostToDevice);
    DeviceBuffer<int32_t> d_ids(static_cast<size_t>(rows) * k);
    DeviceBuffer<float> d_vals(static_cast<size_t>(rows) * k);
    gpu.top_k(LogitsView{d_x.get(), shape.dtype, rows, cols, cols}, k, TopKOutputs{d_ids.get(), d_vals.get(), k});
    SONIC_TEST_CUDA(cudaDeviceSynchronize());
    std::vector<int32_t> want_ids(static_cast<size_t>(rows) * k);
    std::vector<float> want_vals(want_ids.size());
    cpu.top_k(LogitsView{host, shape.dtype, rows, cols, cols}, k, TopKOutputs{want_ids.data(), want_vals.data(), k});
    const std::vector<int32_t> ids = d_ids.download();
    const std::vector<float> vals = d_vals.download();
    int wrong = 0;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool same_val = vals[i] == want_vals[i] || (std::isnan(vals[i]) && std::isnan(want_vals[i]));
      if (ids[i] != want_ids[i] || !same_val) {
        if (++wrong <= 5)
          ADD_FAILURE() << "V=" << V << " dtype=" << static_cast<int>(shape.dtype) << " k=" << k << " row "
                        << i / k << " position " << i % k << ": got " << ids[i] << " (" << vals[i] << "), want "
                        << want_ids[i] << " (" << want_vals[i] << ")";
      }
    }
    EXPECT_EQ(wrong, 0);
  }
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  const char* d = info.param.dtype == DType::kF32 ? "f32" : info.param.dtype == DType::kBF16 ? "bf16" : "f16";
  return "V" + std::to_string(info.param.V) + "_" + d;
}

INSTANTIATE_TEST_SUITE_P(AllShapes, CudaTopK,
                         ::testing::Values(Shape{1000, DType::kF32}, Shape{1000, DType::kBF16}, Shape{32000, DType::kF32},
                                           Shape{32000, DType::kF16}, Shape{151936, DType::kF32},
                                           Shape{151936, DType::kBF16}, Shape{262144, DType::kF32}),
                         shape_name);

TEST(CudaTopKGraph, CapturedCallReplaysWithNewLogits) {
  const int32_t V = 32000, rows = 6, k = 128;
  std::mt19937_64 rng(99);
  Sampler gpu(config(Backend::kCuda, V, rows));
  Sampler cpu(config(Backend::kCpu, V, rows));
  DeviceBuffer<float> d_x(static_cast<size_t>(rows) * V);
  DeviceBuffer<int32_t> d_ids(static_cast<size_t>(rows) * k);
  cudaStream_t stream;
  SONIC_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  sonic::CallOptions opt;
  opt.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SONIC_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  gpu.top_k(LogitsView{d_x.get(), DType::kF32, rows, V, V}, k, TopKOutputs{d_ids.get(), nullptr, k}, opt);
  SONIC_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  SONIC_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  int wrong = 0;
  for (int rep = 0; rep < 50; ++rep) {
    const std::vector<float> x = make_rows(rows, V, V, k, sonic_gpu::lowest_finite(DType::kF32), rng);
    SONIC_TEST_CUDA(cudaMemcpyAsync(d_x.get(), x.data(), x.size() * 4, cudaMemcpyHostToDevice, stream));
    SONIC_TEST_CUDA(cudaGraphLaunch(exec, stream));
    SONIC_TEST_CUDA(cudaStreamSynchronize(stream));
    std::vector<int32_t> want(static_cast<size_t>(rows) * k);
    cpu.top_k(LogitsView{x.data(), DType::kF32, rows, V, V}, k, TopKOutputs{want.data(), nullptr, k});
    const std::vector<int32_t> got = d_ids.download();
    for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != want[i];
  }
  EXPECT_EQ(wrong, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
