// The statistical cases of verification mode (tests/cpu/verify_cases.hpp) on the CUDA backend:
// per-position G-tests of the emitted tokens against the exact target law for every rule (dense q,
// q far from p, sparse q, penalties that see the drafts, fixed drafts, one-hot, strict), with the
// negative control showing the test's power. Each call verifies kRequests copies of the case, one
// slot each (same parameters, different seeds), with drafts drawn on the host; the step counters
// advance on the device between calls.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/verify_cases.hpp"
#include "gpu/gpu_harness.hpp"
#include "sonic/sonic.hpp"

namespace {

using namespace verify_cases;
using sonic_gpu::DeviceBuffer;

constexpr int32_t kRequests = 512;
constexpr int64_t kTrials = 1000000;  // more than the CPU tests' 3 * 10^5: draws are cheap here

Tally run_on_gpu(const VerifyCase& c, int64_t trials, uint64_t draft_seed) {
  const int32_t R = kRequests, n = c.n, W = n + 1, V = c.V;
  const int32_t rows = R * W, words = (V + 31) / 32;
  sonic::SamplerConfig cfg;
  cfg.backend = sonic::Backend::kCuda;
  cfg.vocab_size = V;
  cfg.max_slots = R;
  cfg.max_rows = rows;
  cfg.max_drafts = n;
  sonic::Sampler s(cfg);
  for (int32_t r = 0; r < R; ++r) {
    sonic::RequestParams p = c.params;
    p.seed = c.params.seed * 1000003ull + static_cast<uint64_t>(r);
    s.admit(r, p, c.prompt.data(), static_cast<int64_t>(c.prompt.size()));
    if (!c.output.empty()) s.append_output(r, c.output.data(), static_cast<int64_t>(c.output.size()));
  }

  // Inputs that stay the same across calls: rows, masks, rules, q (dense and sparse), cu_rows.
  std::vector<float> logits(static_cast<size_t>(rows) * V);
  std::vector<int32_t> mask(static_cast<size_t>(rows) * words, -1);
  for (int32_t r = 0; r < R; ++r)
    for (int32_t j = 0; j < W; ++j) {
      std::copy(c.rows[j].begin(), c.rows[j].end(), logits.begin() + static_cast<size_t>(r * W + j) * V);
      if (!c.masks.empty() && !c.masks[j].empty())
        std::copy(c.masks[j].begin(), c.masks[j].end(), mask.begin() + static_cast<size_t>(r * W + j) * words);
    }
  std::vector<int32_t> cu_rows(R + 1), rules(R, static_cast<int32_t>(c.rule));
  for (int32_t r = 0; r <= R; ++r) cu_rows[r] = r * W;
  const std::vector<sonic::ref::SparseProbs> lists = sparse_lists(c);
  int32_t cap = 1;
  for (const auto& l : lists) cap = std::max(cap, static_cast<int32_t>(l.ids.size()));
  const int64_t D = static_cast<int64_t>(R) * n;
  std::vector<float> dense(static_cast<size_t>(std::max<int64_t>(D, 1)) * V, 0.0f);
  std::vector<int32_t> sparse_ids(static_cast<size_t>(std::max<int64_t>(D, 1)) * cap, -1), sparse_count(std::max<int64_t>(D, 1), 0);
  std::vector<float> sparse_probs(sparse_ids.size(), 0.0f);
  for (int64_t d = 0; d < D && !c.q.empty(); ++d) {
    const size_t j = static_cast<size_t>(d % n);
    std::copy(c.q[j].begin(), c.q[j].end(), dense.begin() + d * V);
    std::copy(lists[j].ids.begin(), lists[j].ids.end(), sparse_ids.begin() + d * cap);
    std::copy(lists[j].probs.begin(), lists[j].probs.end(), sparse_probs.begin() + d * cap);
    sparse_count[static_cast<size_t>(d)] = static_cast<int32_t>(lists[j].ids.size());
  }
  DeviceBuffer<float> d_logits(logits.size()), d_dense(dense.size()), d_sparse_probs(sparse_probs.size());
  DeviceBuffer<int32_t> d_mask(mask.size()), d_cu(cu_rows.size()), d_rules(rules.size()),
      d_sparse_ids(sparse_ids.size()), d_sparse_count(sparse_count.size()), d_drafts(std::max<int64_t>(D, 1)),
      d_tokens(static_cast<size_t>(R) * W), d_accepted(R), d_status(rows);
  d_logits.upload(logits);
  d_mask.upload(mask);
  d_cu.upload(cu_rows);
  d_rules.upload(rules);
  d_dense.upload(dense);
  d_sparse_ids.upload(sparse_ids);
  d_sparse_probs.upload(sparse_probs);
  d_sparse_count.upload(sparse_count);

  sonic::VerifyInputs in;
  in.num_requests = R;
  in.cu_rows = d_cu.get();
  in.draft_tokens = d_drafts.get();
  in.num_drafts_capacity = D;
  in.rules = d_rules.get();
  in.draft_probs.dense = d_dense.get();
  in.draft_probs.dense_rows = D;
  in.draft_probs.dense_stride = V;
  in.draft_probs.sparse_ids = d_sparse_ids.get();
  in.draft_probs.sparse_probs = d_sparse_probs.get();
  in.draft_probs.sparse_count = d_sparse_count.get();
  in.draft_probs.sparse_rows = D;
  in.draft_probs.sparse_stride = cap;
  sonic::VerifyOutputs out;
  out.tokens = d_tokens.get();
  out.num_accepted = d_accepted.get();
  out.out_stride = W;
  out.status = d_status.get();
  sonic::CallOptions opt;
  opt.append_to_history = false;  // every trial sees the same history; the step still advances
  const sonic::LogitsView view{d_logits.get(), sonic::DType::kF32, rows, V, V};
  const sonic::BitmaskView bitmask{d_mask.get(), rows, words, words, nullptr};

  const DraftSource source(c);
  std::mt19937_64 gen(draft_seed);
  std::vector<int32_t> drafts(static_cast<size_t>(std::max<int64_t>(D, 1)));
  Tally tally = empty_tally(c);
  for (int64_t done = 0; done < trials; done += R) {
    for (int32_t r = 0; r < R; ++r) source.draw(gen, drafts.data() + static_cast<size_t>(r) * n);
    d_drafts.upload(drafts);
    s.verify(view, in, bitmask, out, opt);
    const std::vector<int32_t> tokens = d_tokens.download(), accepted = d_accepted.download(),
                               status = d_status.download();
    for (int32_t r = 0; r < R && done + r < trials; ++r) {
      bool ok = true;
      for (int32_t j = 0; j < W; ++j) ok = ok && status[static_cast<size_t>(r * W + j)] == sonic::kStatusOk;
      const int32_t* t = tokens.data() + static_cast<size_t>(r) * W;
      // Past the emitted token the row is padded with -1.
      for (int32_t j = std::clamp(accepted[r] + 1, 1, W); j < W; ++j) ok = ok && t[j] == -1;
      record(tally, c, drafts.data() + static_cast<size_t>(r) * n, t, accepted[r], ok, done + r);
    }
  }
  return tally;
}

SONIC_VERIFY_DISTRIBUTION_TESTS(CudaVerifyDistribution, run_on_gpu, kTrials, "gpu ")

}  // namespace
