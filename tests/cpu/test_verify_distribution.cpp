// Statistical tests of verification mode (SPEC.md section 3) through sonic::ref::verify_request.
// The cases and their expected laws are in verify_cases.hpp (the GPU tests run the same cases
// through the CUDA backend); this file supplies the CPU trials. Greedy requests are deterministic
// and are checked against hand-worked argmax chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ref/reference.hpp"
#include "sonic/types.hpp"
#include "stats.hpp"
#include "verify_cases.hpp"

namespace {

namespace ref = sonic::ref;
namespace st = sonic_stats;
using sonic::RequestParams;
using sonic::VerifyRule;
using namespace verify_cases;

constexpr int64_t kTrials = 300000;
constexpr int kChunks = 16;  // trials are split into fixed chunks: results do not depend on threads

int num_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hc, 2u, 8u));
}

// The CPU runner: one ref::verify_request per trial, step = trial, on a few threads.
Tally run_trials(const VerifyCase& c, int64_t trials, uint64_t draft_seed) {
  const size_t rows = static_cast<size_t>(c.n) + 1;
  const DraftSource source(c);
  const std::vector<ref::SparseProbs> sparse =
      c.rule == VerifyRule::kSparseDraftProbs ? sparse_lists(c) : std::vector<ref::SparseProbs>{};
  const int T = num_threads();
  std::vector<Tally> parts(static_cast<size_t>(T));
  auto work = [&](int ti) {
    Tally& tally = parts[static_cast<size_t>(ti)];
    tally = empty_tally(c);
    ref::VerifyRequest req;
    req.params = &c.params;
    req.prompt = &c.prompt;
    req.output = &c.output;
    req.vocab_size = c.V;
    req.rule = c.rule;
    for (size_t j = 0; j < rows; ++j) {
      req.rows.push_back(c.rows[j].data());
      req.bitmask_rows.push_back(c.masks.empty() || c.masks[j].empty() ? nullptr : c.masks[j].data());
    }
    if (c.rule == VerifyRule::kDenseDraftProbs)
      for (const auto& q : c.q) req.q_dense.push_back(q.data());
    if (c.rule == VerifyRule::kSparseDraftProbs) req.q_sparse = sparse;
    req.drafts.assign(static_cast<size_t>(c.n), 0);
    for (int chunk = ti; chunk < kChunks; chunk += T) {
      std::mt19937_64 gen(draft_seed * 1000003ull + static_cast<uint64_t>(chunk));
      const int64_t t0 = trials * chunk / kChunks, t1 = trials * (chunk + 1) / kChunks;
      for (int64_t trial = t0; trial < t1; ++trial) {
        source.draw(gen, req.drafts.data());
        req.step = static_cast<uint64_t>(trial);
        const ref::VerifyResult r = ref::verify_request(req, sonic::LogprobMode::kRaw);
        bool ok = r.tokens.size() == static_cast<size_t>(r.num_accepted) + 1;
        for (int32_t s : r.row_status) ok = ok && s == sonic::kStatusOk;
        std::vector<int32_t> padded(rows, -1);  // record() reads up to n + 1 tokens
        std::copy_n(r.tokens.begin(), std::min(r.tokens.size(), rows), padded.begin());
        record(tally, c, req.drafts.data(), padded.data(), r.num_accepted, ok, trial);
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < T; ++i) threads.emplace_back(work, i);
  work(0);
  for (auto& t : threads) t.join();
  Tally all = empty_tally(c);
  for (const Tally& p : parts) add_into(all, p);
  return all;
}

SONIC_VERIFY_DISTRIBUTION_TESTS(VerifyDistribution, run_trials, kTrials, "")

// ---------------------------------------------------------------------------------------------
// Greedy requests: deterministic argmax chains, whatever rule is asked for.

struct GreedyFixture {
  int32_t V = 16;
  RequestParams params;
  std::vector<int32_t> prompt, output;
  std::vector<std::vector<float>> rows;
  std::vector<std::vector<int32_t>> masks;

  ref::VerifyResult run(std::vector<int32_t> drafts, VerifyRule rule, uint64_t step,
                        const std::vector<std::vector<float>>* q = nullptr) const {
    ref::VerifyRequest req;
    req.params = &params;
    req.prompt = &prompt;
    req.output = &output;
    req.step = step;
    req.vocab_size = V;
    for (size_t j = 0; j < rows.size(); ++j) {
      req.rows.push_back(rows[j].data());
      req.bitmask_rows.push_back(masks.empty() || masks[j].empty() ? nullptr : masks[j].data());
    }
    req.drafts = std::move(drafts);
    req.rule = rule;
    if (q != nullptr) {
      for (const auto& row : *q) req.q_dense.push_back(row.data());
      for (const auto& row : *q) {
        ref::SparseProbs s;
        for (int32_t t = 0; t < V; ++t) {
          s.ids.push_back(t);
          s.probs.push_back(row[static_cast<size_t>(t)]);
        }
        req.q_sparse.push_back(s);
      }
    }
    return ref::verify_request(req, sonic::LogprobMode::kRaw);
  }
};

void expect_chain(const GreedyFixture& f, const std::vector<int32_t>& drafts,
                  const std::vector<int32_t>& expected_tokens, const std::string& what) {
  std::vector<std::vector<float>> q(drafts.size(), std::vector<float>(static_cast<size_t>(f.V), 1.0f / f.V));
  for (VerifyRule rule : {VerifyRule::kOneHot, VerifyRule::kDenseDraftProbs,
                          VerifyRule::kSparseDraftProbs, VerifyRule::kStrict}) {
    for (uint64_t step : {0ull, 1ull, 12345ull}) {
      const ref::VerifyResult r = f.run(drafts, rule, step, &q);
      std::vector<int32_t> got = r.tokens;
      while (!got.empty() && got.back() == -1) got.pop_back();
      EXPECT_EQ(got, expected_tokens) << what << ", rule " << static_cast<int>(rule) << ", step " << step;
      EXPECT_EQ(r.num_accepted, static_cast<int32_t>(expected_tokens.size()) - 1)
          << what << ", rule " << static_cast<int>(rule) << ", step " << step;
    }
  }
}

TEST(VerifyDistributionGreedy, ArgmaxChains) {
  GreedyFixture f;
  f.params.temperature = 0.0f;
  f.params.top_k = 3;      // ignored by greedy rows
  f.params.top_p = 0.5f;
  f.params.seed = 11;
  f.rows.assign(3, std::vector<float>(static_cast<size_t>(f.V), 0.0f));
  for (auto& row : f.rows)
    for (int32_t t = 0; t < f.V; ++t) row[static_cast<size_t>(t)] = -0.1f * static_cast<float>(t % 5);
  f.rows[0][5] = 2.0f;
  f.rows[0][9] = 1.9f;
  f.rows[1][2] = 1.5f;
  f.rows[1][3] = 1.4f;
  f.rows[2][11] = 3.0f;  // a tie at the top: the lower id wins
  f.rows[2][7] = 3.0f;
  expect_chain(f, {5, 2}, {5, 2, 7}, "all accepted, bonus by the id tie-break");
  expect_chain(f, {5, 3}, {5, 2}, "second draft rejected");
  expect_chain(f, {9, 2}, {5}, "first draft rejected");
  expect_chain(f, {5, 11}, {5, 2}, "wrong second draft");
  // A grammar mask on row 0 that forbids 5: the argmax there is 9.
  f.masks = {mask_without(f.V, {5}), {}, {}};
  expect_chain(f, {9, 2}, {9, 2, 7}, "masked argmax");
  expect_chain(f, {5, 2}, {9}, "draft on a masked token");
}

// The history of row j includes d_0..d_{j-1}: a repetition penalty on an accepted draft moves the
// argmax of the next rows.
TEST(VerifyDistributionGreedy, PenaltiesSeeTheDrafts) {
  GreedyFixture f;
  f.params.temperature = 0.0f;
  f.params.repetition_penalty = 1.5f;
  f.params.seed = 12;
  f.rows.assign(3, std::vector<float>(static_cast<size_t>(f.V), -1.0f));
  f.rows[0][5] = 3.0f;   // 2.0 once 5 is in the history
  f.rows[0][9] = 2.5f;
  f.rows[1][5] = 3.0f;   // 3.0 / 1.5 = 2.0 once 5 is in the history
  f.rows[1][9] = 2.9f;
  f.rows[2][5] = 2.8f;   // 1.87 with 5 in the history
  f.rows[2][9] = 2.5f;   // 1.67 with 9 in the history
  f.rows[2][1] = 2.6f;
  expect_chain(f, {5, 9}, {5, 9, 1}, "penalties see d_0 and d_1");
  expect_chain(f, {5, 5}, {5, 9}, "row 1's argmax moved by d_0");
  // Without 5 drafted the rows keep their own argmax: row 0 rejects 9 and emits 5.
  expect_chain(f, {9, 5}, {5}, "first draft rejected");
  // A token of the output history is penalised in row 0 as well.
  f.output = {5};
  expect_chain(f, {9, 5}, {9, 5, 1}, "history before the step");
}

}  // namespace
