// Sampler::verify on the CUDA backend against the CPU reference: random mixed batches (greedy,
// strict, one-hot, dense and sparse draft distributions; truncated and untruncated requests;
// penalties over prompts and drafts; bitmasks; the nasty rows of the harness), every token, the
// accepted counts, per-row statuses and the logprobs of emitted tokens; disagreements are counted
// and shown. Also: state after the call (steps and histories) equals the CPU's, seen through a
// second call.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpu_harness.hpp"
#include "sonic/sonic.hpp"

namespace {

using sonic::Backend;
using sonic::BitmaskView;
using sonic::CallOptions;
using sonic::DType;
using sonic::LogitsView;
using sonic::Sampler;
using sonic::SamplerConfig;
using sonic::VerifyInputs;
using sonic::VerifyOutputs;
using sonic::VerifyRule;
using sonic_gpu::DeviceBuffer;
using sonic_gpu::ScopedEnv;

constexpr int32_t kMaxDrafts = 5;
constexpr int32_t kSparseCap = 16;

struct VerifyCase {
  sonic_gpu::Batch rows;              // the packed target rows (params and prompts per row unused)
  std::vector<sonic::RequestParams> params;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> cu_rows, drafts, rules;
  std::vector<float> dense;           // [drafts, V]
  std::vector<int32_t> sparse_ids, sparse_count;
  std::vector<float> sparse_probs;    // [drafts, kSparseCap]
};

VerifyCase make_case(std::mt19937_64& rng, int32_t V, int32_t B, DType dtype) {
  VerifyCase c;
  std::vector<int32_t> n(B);
  int32_t rows = 0;
  c.cu_rows.push_back(0);
  for (int32_t b = 0; b < B; ++b) {
    n[b] = static_cast<int32_t>(rng() % (kMaxDrafts + 1));
    rows += n[b] + 1;
    c.cu_rows.push_back(rows);
  }
  c.rows = sonic_gpu::random_batch(rng, V, rows, dtype, 0, true);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int32_t b = 0; b < B; ++b) {
    c.params.push_back(sonic_gpu::random_params(rng, V, 0));
    c.prompts.push_back(c.rows.prompts[b]);
    // Now and then an unknown rule (-1 or 7): the request is invalid, greedy or random (the reference's
    // check; the CUDA backend once checked it for random requests only).
    const bool unknown_rule = rng() % 16 == 0;
    c.rules.push_back(unknown_rule ? (rng() % 2 ? -1 : 7) : static_cast<int32_t>(rng() % 4));
    for (int32_t j = 0; j < n[b]; ++j) {
      // Half the drafts are the target row's argmax (often accepted), half random.
      const float* row = c.rows.logits.data() + static_cast<size_t>(c.cu_rows[b] + j) * c.rows.cols;
      int32_t d = static_cast<int32_t>(rng() % V);
      if (u(rng) < 0.5f) d = static_cast<int32_t>(std::max_element(row, row + V) - row);
      c.drafts.push_back(d);
      // q: a few tokens around the draft with random mass, as dense and as sparse lists.
      std::vector<float> q(V, 0.0f);
      std::vector<int32_t> ids = {d};
      for (int i = 0; i < 1 + static_cast<int>(rng() % (kSparseCap - 1)); ++i) ids.push_back(static_cast<int32_t>(rng() % V));
      float total = 0.0f;
      std::vector<float> w(ids.size());
      for (auto& x : w) total += (x = 0.05f + u(rng));
      for (size_t i = 0; i < ids.size(); ++i) q[ids[i]] += w[i] / total;
      c.dense.insert(c.dense.end(), q.begin(), q.end());
      int32_t count = 0;
      for (size_t i = 0; i < ids.size() && count < kSparseCap; ++i) {
        c.sparse_ids.push_back(ids[i]);
        c.sparse_probs.push_back(q[ids[i]]);
        ++count;
      }
      for (int32_t i = count; i < kSparseCap; ++i) {
        c.sparse_ids.push_back(-1);
        c.sparse_probs.push_back(0.0f);
      }
      c.sparse_count.push_back(count);
    }
  }
  return c;
}

SamplerConfig config(Backend backend, int32_t V, int32_t B, int32_t rows) {
  SamplerConfig cfg;
  cfg.backend = backend;
  cfg.vocab_size = V;
  cfg.max_slots = B;
  cfg.max_rows = rows;
  cfg.max_drafts = kMaxDrafts;
  cfg.max_history = 4096;
  cfg.cpu_threads = 0;  // the reference's requests on every core
  return cfg;
}

// Admits every request of the case into both samplers (slot b: request b).
void admit_case(const VerifyCase& c, Sampler& gpu, Sampler& cpu) {
  for (size_t b = 0; b < c.params.size(); ++b) {
    const int32_t slot = static_cast<int32_t>(b);
    gpu.admit(slot, c.params[b], c.prompts[b].data(), static_cast<int64_t>(c.prompts[b].size()));
    cpu.admit(slot, c.params[b], c.prompts[b].data(), static_cast<int64_t>(c.prompts[b].size()));
  }
}

struct Result {
  std::vector<int32_t> tokens, accepted, status, rank, top_ids;
  std::vector<float> logprob, top_logprobs;
};

// One call on either backend; host vectors in and out (uploaded for CUDA).
// top_stride > 0 also asks for ranks and top-N logprobs.
Result run(Sampler& s, const VerifyCase& c, sonic::LogprobMode mode, int32_t top_stride = 0) {
  const int32_t B = static_cast<int32_t>(c.params.size()), rows = c.rows.rows, W = kMaxDrafts + 1;
  const int32_t V = c.rows.V;
  const bool gpu = s.backend() == Backend::kCuda;
  const size_t elem = c.rows.dtype == DType::kF32 ? 4 : 2;
  std::vector<uint16_t> half;
  const void* logits = c.rows.logits.data();
  if (elem == 2) {
    half.resize(c.rows.logits.size());
    for (size_t i = 0; i < half.size(); ++i) {
      uint32_t bits;
      std::memcpy(&bits, &c.rows.logits[i], 4);
      half[i] = c.rows.dtype == DType::kBF16 ? static_cast<uint16_t>(bits >> 16) : sonic_gpu::float_to_f16(c.rows.logits[i]);
    }
    logits = half.data();
  }
  Result res;
  res.tokens.assign(static_cast<size_t>(B) * W, -7);
  res.accepted.assign(B, -7);
  res.status.assign(rows, -7);
  res.logprob.assign(static_cast<size_t>(B) * W, 0.0f);
  res.rank.assign(static_cast<size_t>(B) * W, -7);
  res.top_ids.assign(static_cast<size_t>(B) * W * std::max(top_stride, 1), -7);
  res.top_logprobs.assign(res.top_ids.size(), 0.0f);
  auto dev = [&](const void* host, size_t bytes, std::vector<std::unique_ptr<DeviceBuffer<char>>>& keep) -> void* {
    if (!gpu || host == nullptr) return const_cast<void*>(host);
    keep.push_back(std::make_unique<DeviceBuffer<char>>(bytes));
    cudaMemcpy(keep.back()->get(), host, bytes, cudaMemcpyHostToDevice);
    return keep.back()->get();
  };
  std::vector<std::unique_ptr<DeviceBuffer<char>>> keep;
  VerifyInputs in;
  in.num_requests = B;
  in.cu_rows = static_cast<const int32_t*>(dev(c.cu_rows.data(), c.cu_rows.size() * 4, keep));
  in.draft_tokens = static_cast<const int32_t*>(dev(c.drafts.data(), std::max<size_t>(1, c.drafts.size()) * 4, keep));
  in.num_drafts_capacity = static_cast<int64_t>(c.drafts.size());
  in.rules = static_cast<const int32_t*>(dev(c.rules.data(), c.rules.size() * 4, keep));
  const int64_t D = static_cast<int64_t>(c.drafts.size());
  in.draft_probs.dense = static_cast<const float*>(dev(c.dense.data(), std::max<size_t>(1, c.dense.size()) * 4, keep));
  in.draft_probs.dense_rows = D;
  in.draft_probs.dense_stride = V;
  in.draft_probs.sparse_ids = static_cast<const int32_t*>(dev(c.sparse_ids.data(), std::max<size_t>(1, c.sparse_ids.size()) * 4, keep));
  in.draft_probs.sparse_probs = static_cast<const float*>(dev(c.sparse_probs.data(), std::max<size_t>(1, c.sparse_probs.size()) * 4, keep));
  in.draft_probs.sparse_count = static_cast<const int32_t*>(dev(c.sparse_count.data(), std::max<size_t>(1, c.sparse_count.size()) * 4, keep));
  in.draft_probs.sparse_rows = D;
  in.draft_probs.sparse_stride = kSparseCap;
  const void* x = dev(logits, c.rows.logits.size() * elem, keep);
  BitmaskView bm{static_cast<const int32_t*>(dev(c.rows.bitmask.data(), c.rows.bitmask.size() * 4, keep)), rows,
                 c.rows.words, c.rows.words,
                 static_cast<const int32_t*>(dev(c.rows.bitmask_index.data(), c.rows.bitmask_index.size() * 4, keep))};
  VerifyOutputs out;
  out.out_stride = W;
  out.tokens = static_cast<int32_t*>(dev(res.tokens.data(), res.tokens.size() * 4, keep));
  out.num_accepted = static_cast<int32_t*>(dev(res.accepted.data(), res.accepted.size() * 4, keep));
  out.status = static_cast<int32_t*>(dev(res.status.data(), res.status.size() * 4, keep));
  out.logprob = static_cast<float*>(dev(res.logprob.data(), res.logprob.size() * 4, keep));
  if (top_stride > 0) {
    out.rank = static_cast<int32_t*>(dev(res.rank.data(), res.rank.size() * 4, keep));
    out.top_ids = static_cast<int32_t*>(dev(res.top_ids.data(), res.top_ids.size() * 4, keep));
    out.top_logprobs = static_cast<float*>(dev(res.top_logprobs.data(), res.top_logprobs.size() * 4, keep));
    out.top_stride = top_stride;
  }
  CallOptions opt;
  opt.logprob_mode = mode;
  s.verify(LogitsView{x, c.rows.dtype, rows, c.rows.cols, c.rows.cols}, in, bm, out, opt);
  if (gpu) {
    cudaDeviceSynchronize();
    cudaMemcpy(res.tokens.data(), out.tokens, res.tokens.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(res.accepted.data(), out.num_accepted, res.accepted.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(res.status.data(), out.status, res.status.size() * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(res.logprob.data(), out.logprob, res.logprob.size() * 4, cudaMemcpyDeviceToHost);
    if (top_stride > 0) {
      cudaMemcpy(res.rank.data(), out.rank, res.rank.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(res.top_ids.data(), out.top_ids, res.top_ids.size() * 4, cudaMemcpyDeviceToHost);
      cudaMemcpy(res.top_logprobs.data(), out.top_logprobs, res.top_logprobs.size() * 4, cudaMemcpyDeviceToHost);
    }
  }
  return res;
}

struct Shape {
  int32_t V;
  DType dtype;
};

// The requests of one call on which the GPU's tokens, accepted counts or row statuses differ from the
// reference's (each shown); logprobs of equal tokens must agree within 2e-3 relative.
int count_disagreements(const VerifyCase& c, const Result& g, const Result& want, const std::string& label) {
  const int32_t B = static_cast<int32_t>(c.params.size());
  int disagreements = 0;
  for (int32_t b = 0; b < B; ++b) {
    bool same = g.accepted[b] == want.accepted[b];
    for (int32_t i = 0; i <= kMaxDrafts; ++i) {
      same &= g.tokens[b * (kMaxDrafts + 1) + i] == want.tokens[b * (kMaxDrafts + 1) + i];
      const float a = g.logprob[b * (kMaxDrafts + 1) + i], e = want.logprob[b * (kMaxDrafts + 1) + i];
      if (same && !(a == e || std::fabs(a - e) <= 2e-3f * std::max(1.0f, std::fabs(e))))
        ADD_FAILURE() << label << " request " << b << " position " << i << " logprob " << a << " want " << e;
    }
    for (int32_t r = c.cu_rows[b]; r < c.cu_rows[b + 1]; ++r) same &= g.status[r] == want.status[r];
    if (!same) {
      ++disagreements;
      std::string got, exp, st;
      for (int32_t i = 0; i <= kMaxDrafts; ++i) {
        got += std::to_string(g.tokens[b * (kMaxDrafts + 1) + i]) + " ";
        exp += std::to_string(want.tokens[b * (kMaxDrafts + 1) + i]) + " ";
      }
      for (int32_t r = c.cu_rows[b]; r < c.cu_rows[b + 1]; ++r)
        st += std::to_string(g.status[r]) + "/" + std::to_string(want.status[r]) + " ";
      ADD_FAILURE() << label << " request " << b << " rule " << c.rules[b] << " T=" << c.params[b].temperature
                    << ": got [" << got << "] accepted " << g.accepted[b] << ", want [" << exp << "] accepted "
                    << want.accepted[b] << "; statuses got/want " << st;
    }
  }
  return disagreements;
}

// A verification call whose requests name no rows (logits.rows = 0, cu_rows all 0): every request is
// invalid and its outputs are still written, as the reference writes them (tokens -1, num_accepted
// 0, logprobs -inf). The CUDA backend once launched nothing for a call of no rows.
TEST(CudaVerifyBadInput, NoRowsStillWritesTheOutputs) {
  const int32_t V = 1000, B = 2, W = kMaxDrafts + 1;
  Sampler gpu(config(Backend::kCuda, V, B, 4));
  sonic::RequestParams p;
  p.temperature = 0.8f;
  for (int32_t b = 0; b < B; ++b) gpu.admit(b, p, nullptr, 0);
  DeviceBuffer<float> logits(V);  // a row's room; the call names none
  DeviceBuffer<int32_t> cu_rows(B + 1), drafts(1), tokens(B * W), accepted(B);
  DeviceBuffer<float> logprob(B * W);
  cu_rows.upload(std::vector<int32_t>(B + 1, 0));
  drafts.upload(std::vector<int32_t>(1, 0));
  tokens.upload(std::vector<int32_t>(B * W, 7));
  accepted.upload(std::vector<int32_t>(B, 7));
  logprob.upload(std::vector<float>(B * W, 7.0f));
  VerifyInputs in;
  in.num_requests = B;
  in.cu_rows = cu_rows.get();
  in.draft_tokens = drafts.get();  // required whenever max_drafts > 0, though no request has drafts
  in.num_drafts_capacity = 1;
  VerifyOutputs out;
  out.tokens = tokens.get();
  out.num_accepted = accepted.get();
  out.out_stride = W;
  out.logprob = logprob.get();
  gpu.verify(LogitsView{logits.get(), DType::kF32, 0, V, V}, in, BitmaskView{}, out, CallOptions{});
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  for (const int32_t t : tokens.download()) EXPECT_EQ(t, -1);
  for (const int32_t a : accepted.download()) EXPECT_EQ(a, 0);
  for (const float l : logprob.download()) EXPECT_EQ(l, -INFINITY);
}

// cu_rows that step back (bad input: two ranges share rows, others are empty or reversed): each row
// is the request's that a bisection over cu_rows names (detail::owner_of_row) on both backends, and
// a request that does not own every row of its range is invalid. The CUDA backend once gave such a
// request another request's rows, and the reference took both (perf-notes v3.31).
TEST(CudaVerifyBadInput, CuRowsSteppingBackLikeReference) {
  std::mt19937_64 rng(6061);
  const int32_t V = 1000, B = 8;
  int disagreements = 0;
  for (int round = 0; round < 6; ++round) {
    VerifyCase c = make_case(rng, V, B, DType::kF32);
    const int32_t at = 1 + static_cast<int32_t>(rng() % (B - 1));  // this offset steps back
    c.cu_rows[at] = static_cast<int32_t>(rng() % (c.cu_rows[at] + 1));
    Sampler gpu(config(Backend::kCuda, V, B, c.rows.rows));
    Sampler cpu(config(Backend::kCpu, V, B, c.rows.rows));
    admit_case(c, gpu, cpu);
    for (int call = 0; call < 2; ++call)
      disagreements += count_disagreements(c, run(gpu, c, sonic::LogprobMode::kRaw), run(cpu, c, sonic::LogprobMode::kRaw),
                                            "round " + std::to_string(round) + " call " + std::to_string(call));
  }
  EXPECT_EQ(disagreements, 0);
}

class CudaVerify : public ::testing::TestWithParam<Shape> {};

TEST_P(CudaVerify, MatchesReferenceTokenForToken) {
  const Shape shape = GetParam();
  std::mt19937_64 rng(shape.V * 13 + static_cast<int>(shape.dtype));
  const int32_t B = 24;
  int requests = 0, disagreements = 0;
  for (int round = 0; round < 3; ++round) {
    const VerifyCase c = make_case(rng, shape.V, B, shape.dtype);
    Sampler gpu(config(Backend::kCuda, shape.V, B, c.rows.rows));
    Sampler cpu(config(Backend::kCpu, shape.V, B, c.rows.rows));
    admit_case(c, gpu, cpu);
    const sonic::LogprobMode mode = static_cast<sonic::LogprobMode>(round % 3);
    // Two calls: the second one reads the state the first one committed.
    for (int call = 0; call < 2; ++call) {
      requests += B;
      disagreements += count_disagreements(c, run(gpu, c, mode), run(cpu, c, mode),
                                            "V=" + std::to_string(shape.V) + " round " + std::to_string(round) +
                                                " call " + std::to_string(call));
    }
  }
  std::printf("verify V=%d dtype=%d: %d requests compared, %d disagreements\n", shape.V, static_cast<int>(shape.dtype),
              requests, disagreements);
  EXPECT_EQ(disagreements, 0);
}

// Row tails in verification, forced (SONIC_CUDA_TAILS=P:R; verification has none by default), with
// requests with and without rules (penalties, lists, the bitmask) side by side.
struct TailsCase {
  int32_t V;
  DType dtype;
  int32_t B;
};
void verify_tails_agree(std::initializer_list<TailsCase> cases) {
  for (const TailsCase t : cases) {
    std::mt19937_64 rng(t.V * 7 + t.B + static_cast<int>(t.dtype));
    const VerifyCase c = make_case(rng, t.V, t.B, t.dtype);
    Sampler gpu = [&] {
      const ScopedEnv env("SONIC_CUDA_TAILS", "75:1");  // read when the sampler is made
      return Sampler(config(Backend::kCuda, t.V, t.B, c.rows.rows));
    }();
    Sampler cpu(config(Backend::kCpu, t.V, t.B, c.rows.rows));
    admit_case(c, gpu, cpu);
    int disagreements = 0;
    for (int call = 0; call < 2; ++call) {  // the second call reads the state the first committed
      const sonic::LogprobMode mode = static_cast<sonic::LogprobMode>(call);
      disagreements += count_disagreements(c, run(gpu, c, mode), run(cpu, c, mode),
                                           "tails V=" + std::to_string(t.V) + " call " + std::to_string(call));
    }
    std::printf("verify tails 75:1 V=%d dtype=%d: %d requests, %d rows, %d disagreements\n", t.V,
                static_cast<int>(t.dtype), t.B, c.rows.rows, disagreements);
    EXPECT_EQ(disagreements, 0);
  }
}

// About 315 rows, where a row is a block's work as in the sampling calls that have tails by default;
// a smaller call with several heads a row and stage 2 in row_stage2_kernel.
TEST(CudaVerifyTails, ForcedTailsMatchReference) {
  verify_tails_agree({{151936, DType::kF32, 90}, {151936, DType::kBF16, 90}, {32000, DType::kF32, 24}});
}

// The same at a vocabulary small enough for compute-sanitizer.
TEST(CudaVerifyTails, SmallVocabulary) { verify_tails_agree({{1000, DType::kF32, 8}, {1000, DType::kBF16, 8}}); }

// A history that fills up part way through a request's emitted tokens: the commit appends them in
// order until it is full and flags the row of each token that did not fit, as the reference does; the
// next calls read the same histories (penalised requests' tokens depend on them).
TEST(CudaVerifyHistory, FillsUpLikeReference) {
  for (const int32_t V : {1000, 32000}) {
    std::mt19937_64 rng(V + 77);
    const int32_t B = 16, max_history = 24;
    VerifyCase c = make_case(rng, V, B, DType::kF32);
    for (int32_t b = 0; b < B; ++b) {  // 0 to 7 tokens of room: less than some requests emit
      c.prompts[b].resize(static_cast<size_t>(max_history - b % 8));
      for (int32_t& t : c.prompts[b]) t = static_cast<int32_t>(rng() % 64);  // repeats: counts above 1
    }
    SamplerConfig gcfg = config(Backend::kCuda, V, B, c.rows.rows), ccfg = config(Backend::kCpu, V, B, c.rows.rows);
    gcfg.max_history = ccfg.max_history = max_history;
    Sampler gpu(gcfg), cpu(ccfg);
    admit_case(c, gpu, cpu);
    int disagreements = 0, full = 0;
    for (int call = 0; call < 3; ++call) {
      const Result g = run(gpu, c, sonic::LogprobMode::kRaw), want = run(cpu, c, sonic::LogprobMode::kRaw);
      disagreements += count_disagreements(c, g, want, "V=" + std::to_string(V) + " call " + std::to_string(call));
      for (int32_t s : want.status) full += s >= 0 && (s & sonic::kStatusHistoryFull) != 0;
    }
    std::printf("verify history V=%d: %d rows flagged full by the reference, %d disagreements\n", V, full,
                disagreements);
    EXPECT_GT(full, 0) << "the case must fill some histories";
    EXPECT_EQ(disagreements, 0);
  }
}

// Ranks and top-N logprobs of the emitted tokens (the exact path computes them per target row and
// the commit places them per request): equal to the reference wherever the tokens are.
TEST(CudaVerifyLogprobs, RanksAndTopNMatchReference) {
  std::mt19937_64 rng(515);
  const int32_t V = 3000, B = 12, kTop = 4;
  int compared = 0;
  for (int round = 0; round < 3; ++round) {
    VerifyCase c = make_case(rng, V, B, DType::kF32);
    for (int32_t b = 0; b < B; ++b) c.params[b].top_logprobs = static_cast<int32_t>(rng() % (kTop + 1));
    SamplerConfig gc = config(Backend::kCuda, V, B, c.rows.rows), cc = config(Backend::kCpu, V, B, c.rows.rows);
    gc.max_top_logprobs = cc.max_top_logprobs = kTop;
    Sampler gpu(gc), cpu(cc);
    admit_case(c, gpu, cpu);
    const sonic::LogprobMode mode = static_cast<sonic::LogprobMode>(round % 3);
    const Result g = run(gpu, c, mode, kTop), want = run(cpu, c, mode, kTop);
    const int32_t W = kMaxDrafts + 1;
    for (int32_t b = 0; b < B; ++b) {
      if (g.accepted[b] != want.accepted[b]) continue;  // a near-tie: the verify tests count those
      for (int32_t i = 0; i < W; ++i) {
        const int32_t at = b * W + i;
        if (g.tokens[at] != want.tokens[at]) continue;
        ++compared;
        EXPECT_EQ(g.rank[at], want.rank[at]) << "request " << b << " position " << i;
        for (int32_t k = 0; k < kTop; ++k) {
          EXPECT_EQ(g.top_ids[at * kTop + k], want.top_ids[at * kTop + k]) << "request " << b << " position " << i;
          const float x = g.top_logprobs[at * kTop + k], y = want.top_logprobs[at * kTop + k];
          EXPECT_TRUE(x == y || std::fabs(x - y) <= 2e-3f * std::max(1.0f, std::fabs(y)))
              << "request " << b << " position " << i << " top " << k << ": " << x << " vs " << y;
        }
      }
    }
  }
  std::printf("verify ranks and top-N: %d positions compared\n", compared);
  EXPECT_GT(compared, 3 * 12);
}

// A verification call's device inputs and outputs that outlive the call, as a captured graph needs:
// the case's arrays uploaded once; logits refreshed in place before each replay.
struct DeviceCall {
  DeviceBuffer<float> logits, dense, sparse_probs;
  DeviceBuffer<int32_t> cu, drafts, rules, sparse_ids, sparse_count, mask, mask_index, tokens, accepted, status;
  VerifyInputs in;
  VerifyOutputs out;
  LogitsView view;
  BitmaskView bitmask;

  explicit DeviceCall(const VerifyCase& c)
      : logits(c.rows.logits.size()), dense(std::max<size_t>(1, c.dense.size())),
        sparse_probs(std::max<size_t>(1, c.sparse_probs.size())), cu(c.cu_rows.size()),
        drafts(std::max<size_t>(1, c.drafts.size())), rules(c.rules.size()),
        sparse_ids(std::max<size_t>(1, c.sparse_ids.size())), sparse_count(std::max<size_t>(1, c.sparse_count.size())),
        mask(std::max<size_t>(1, c.rows.bitmask.size())), mask_index(std::max<size_t>(1, c.rows.bitmask_index.size())),
        tokens(c.params.size() * (kMaxDrafts + 1)), accepted(c.params.size()), status(c.rows.rows) {
    logits.upload(c.rows.logits);
    if (!c.dense.empty()) dense.upload(c.dense);
    if (!c.sparse_probs.empty()) sparse_probs.upload(c.sparse_probs);
    cu.upload(c.cu_rows);
    if (!c.drafts.empty()) drafts.upload(c.drafts);
    rules.upload(c.rules);
    if (!c.sparse_ids.empty()) sparse_ids.upload(c.sparse_ids);
    if (!c.sparse_count.empty()) sparse_count.upload(c.sparse_count);
    if (!c.rows.bitmask.empty()) mask.upload(c.rows.bitmask);
    if (!c.rows.bitmask_index.empty()) mask_index.upload(c.rows.bitmask_index);
    const int64_t D = static_cast<int64_t>(c.drafts.size());
    in.num_requests = static_cast<int32_t>(c.params.size());
    in.cu_rows = cu.get();
    in.draft_tokens = drafts.get();
    in.num_drafts_capacity = D;
    in.rules = rules.get();
    in.draft_probs.dense = dense.get();
    in.draft_probs.dense_rows = D;
    in.draft_probs.dense_stride = c.rows.V;
    in.draft_probs.sparse_ids = sparse_ids.get();
    in.draft_probs.sparse_probs = sparse_probs.get();
    in.draft_probs.sparse_count = sparse_count.get();
    in.draft_probs.sparse_rows = D;
    in.draft_probs.sparse_stride = kSparseCap;
    out.tokens = tokens.get();
    out.num_accepted = accepted.get();
    out.out_stride = kMaxDrafts + 1;
    out.status = status.get();
    view = LogitsView{logits.get(), DType::kF32, c.rows.rows, c.rows.cols, c.rows.cols};
    bitmask = BitmaskView{c.rows.bitmask.empty() ? nullptr : mask.get(), c.rows.rows, c.rows.words, c.rows.words,
                          c.rows.bitmask_index.empty() ? nullptr : mask_index.get()};
  }
};

// One verification call captured in a CUDA graph and replayed with fresh logits each time, and now
// and then new parameters for a slot: every replay gives what an eager call on a twin sampler and
// the CPU reference give, and each call's commit (steps, histories) is the next call's state on all
// three.
TEST(CudaVerifyGraph, CapturedCallReplaysLikeEagerAndReference) {
  std::mt19937_64 rng(4242);
  const int32_t V = 4096, B = 8, kReplays = 200;
  VerifyCase c = make_case(rng, V, B, DType::kF32);
  Sampler cpu(config(Backend::kCpu, V, B, c.rows.rows));
  Sampler graph_s(config(Backend::kCuda, V, B, c.rows.rows));
  Sampler eager_s(config(Backend::kCuda, V, B, c.rows.rows));
  auto admit = [&](int32_t b) {
    for (Sampler* s : {&cpu, &graph_s, &eager_s})
      s->admit(b, c.params[b], c.prompts[b].data(), static_cast<int64_t>(c.prompts[b].size()));
  };
  for (int32_t b = 0; b < B; ++b) admit(b);
  DeviceCall g(c), e(c);
  cudaStream_t stream;
  SONIC_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CallOptions opt;
  opt.stream = stream;
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SONIC_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  graph_s.verify(g.view, g.in, g.bitmask, g.out, opt);
  SONIC_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  SONIC_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::normal_distribution<float> normal(0.0f, 1.0f);
  int disagreements = 0;
  const int32_t W = kMaxDrafts + 1;
  for (int i = 0; i < kReplays; ++i) {
    for (float& x : c.rows.logits) x = 3.0f * normal(rng);
    if (i % 50 == 25) {  // new parameters for one slot, between replays
      const int32_t b = i / 50 % B;
      c.params[b] = sonic_gpu::random_params(rng, V, 0);
      admit(b);
    }
    SONIC_TEST_CUDA(cudaMemcpyAsync(g.logits.get(), c.rows.logits.data(), c.rows.logits.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    SONIC_TEST_CUDA(cudaMemcpyAsync(e.logits.get(), c.rows.logits.data(), c.rows.logits.size() * 4,
                                    cudaMemcpyHostToDevice, stream));
    SONIC_TEST_CUDA(cudaGraphLaunch(exec, stream));
    eager_s.verify(e.view, e.in, e.bitmask, e.out, opt);
    SONIC_TEST_CUDA(cudaStreamSynchronize(stream));
    const std::vector<int32_t> gt = g.tokens.download(), ga = g.accepted.download(), gs = g.status.download();
    const std::vector<int32_t> et = e.tokens.download(), ea = e.accepted.download();
    const Result want = run(cpu, c, sonic::LogprobMode::kRaw);
    ASSERT_EQ(gt, et) << "graph and eager differ at replay " << i;
    ASSERT_EQ(ga, ea) << "graph and eager differ at replay " << i;
    for (int32_t b = 0; b < B; ++b) {
      bool same = ga[b] == want.accepted[b];
      for (int32_t k = 0; k < W; ++k) same &= gt[b * W + k] == want.tokens[b * W + k];
      for (int32_t r = c.cu_rows[b]; r < c.cu_rows[b + 1]; ++r) same &= gs[r] == want.status[r];
      if (!same) {
        ++disagreements;
        std::printf("  [near-tie?] replay %d request %d: accepted gpu %d cpu %d\n", i, b, ga[b], want.accepted[b]);
      }
    }
  }
  std::printf("verify graph: %d replays x %d requests: %d disagreements with the reference\n", kReplays, B,
              disagreements);
  EXPECT_EQ(disagreements, 0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

std::string shape_name(const ::testing::TestParamInfo<Shape>& info) {
  const char* d = info.param.dtype == DType::kF32 ? "f32" : info.param.dtype == DType::kBF16 ? "bf16" : "f16";
  return "V" + std::to_string(info.param.V) + "_" + d;
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaVerify,
                         ::testing::Values(Shape{1000, DType::kF32}, Shape{32000, DType::kF32}, Shape{32000, DType::kBF16},
                                           Shape{151936, DType::kF32}),
                         shape_name);

}  // namespace
