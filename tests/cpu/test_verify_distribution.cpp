// Statistical tests of verification mode (SPEC.md section 3) through sonic::ref::verify_request.
// With each draft d_j drawn from q_j (std::mt19937_64 here, independent of the library's Philox
// streams), the token emitted at position j, given that position j is reached
// (num_accepted >= j), must be distributed as p_j, the final kept distribution of target row j,
// which the test computes independently (stats.hpp's oracle). For fixed drafts the law of each
// position follows from the acceptance rule; one test checks that too. Greedy requests are
// deterministic and are checked against hand-worked argmax chains.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "ref/reference.hpp"
#include "sonic/types.hpp"
#include "stats.hpp"

namespace {

namespace ref = sonic::ref;
namespace st = sonic_stats;
using sonic::RequestParams;
using sonic::VerifyRule;

constexpr int64_t kTrials = 300000;
constexpr int kChunks = 16;  // trials are split into fixed chunks: results do not depend on threads

struct VerifyCase {
  int32_t V = 16;
  int n = 2;  // drafts
  RequestParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  std::vector<std::vector<float>> rows;      // n + 1 target rows, V logits each
  std::vector<std::vector<int32_t>> masks;   // n + 1 bitmask rows (empty: none)
  VerifyRule rule = VerifyRule::kDenseDraftProbs;
  std::vector<std::vector<float>> q;         // n draft distributions (dense, V each) for the rule
  std::vector<std::vector<double>> proposal; // n laws the drafts are drawn from (empty: q)
  std::vector<int32_t> fixed_drafts;         // non-empty: these drafts in every trial
  bool track_prefixes = false;               // tally reached positions by draft prefix
};

struct Tally {
  std::vector<std::vector<int64_t>> counts;        // [n + 1][V]: token emitted at position j
  std::vector<int64_t> reached;                    // [n + 1]
  std::vector<std::vector<int64_t>> prefix_reach;  // [n + 1][V^j]
  std::vector<int64_t> num_accepted;               // [n + 1]
  int64_t bad = 0;                                 // malformed results
  std::string first_bad;
};

int num_threads() {
  const unsigned hc = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(hc, 2u, 8u));
}

std::vector<double> cumulative(const std::vector<double>& w) {
  std::vector<double> c(w.size());
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) c[i] = (s += w[i]);
  return c;
}

int32_t draw_from(const std::vector<double>& cum, std::mt19937_64& gen) {
  const double u = std::uniform_real_distribution<double>(0.0, cum.back())(gen);
  auto it = std::upper_bound(cum.begin(), cum.end(), u);
  if (it == cum.end()) {  // u rounded up to the total: take the last cell of positive width
    --it;
    while (it != cum.begin() && *it == *(it - 1)) --it;
  }
  return static_cast<int32_t>(it - cum.begin());
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

Tally run_trials(const VerifyCase& c, int64_t trials, uint64_t draft_seed) {
  const size_t rows = static_cast<size_t>(c.n) + 1;
  std::vector<std::vector<double>> cum;
  for (int j = 0; j < c.n && c.fixed_drafts.empty(); ++j)
    cum.push_back(cumulative(c.proposal.empty() ? to_double(c.q[static_cast<size_t>(j)])
                                                : c.proposal[static_cast<size_t>(j)]));
  std::vector<ref::SparseProbs> sparse;
  if (c.rule == VerifyRule::kSparseDraftProbs) {
    for (const auto& q : c.q) {
      // Most likely first, like single-step mode's sparse final distribution.
      ref::SparseProbs s;
      for (int32_t t = 0; t < c.V; ++t)
        if (q[static_cast<size_t>(t)] > 0.0f) s.ids.push_back(t);
      std::stable_sort(s.ids.begin(), s.ids.end(), [&](int32_t a, int32_t b) {
        return q[static_cast<size_t>(a)] > q[static_cast<size_t>(b)];
      });
      for (int32_t t : s.ids) s.probs.push_back(q[static_cast<size_t>(t)]);
      sparse.push_back(s);
    }
  }

  auto empty_tally = [&]() {
    Tally t;
    t.counts.assign(rows, std::vector<int64_t>(static_cast<size_t>(c.V), 0));
    t.reached.assign(rows, 0);
    t.num_accepted.assign(rows, 0);
    if (c.track_prefixes) {
      size_t size = 1;
      for (size_t j = 0; j < rows; ++j, size *= static_cast<size_t>(c.V))
        t.prefix_reach.emplace_back(size, 0);
    }
    return t;
  };

  const int T = num_threads();
  std::vector<Tally> parts(static_cast<size_t>(T));
  auto work = [&](int ti) {
    Tally& tally = parts[static_cast<size_t>(ti)];
    tally = empty_tally();
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
        for (int j = 0; j < c.n; ++j)
          req.drafts[static_cast<size_t>(j)] =
              c.fixed_drafts.empty() ? draw_from(cum[static_cast<size_t>(j)], gen)
                                     : c.fixed_drafts[static_cast<size_t>(j)];
        req.step = static_cast<uint64_t>(trial);
        const ref::VerifyResult r = ref::verify_request(req, sonic::LogprobMode::kRaw);
        const int a = r.num_accepted;
        bool ok = a >= 0 && a <= c.n && r.tokens.size() >= static_cast<size_t>(a) + 1;
        for (int j = 0; ok && j < a; ++j) ok = r.tokens[static_cast<size_t>(j)] == req.drafts[static_cast<size_t>(j)];
        if (ok) ok = r.tokens[static_cast<size_t>(a)] >= 0 && r.tokens[static_cast<size_t>(a)] < c.V;
        for (int32_t s : r.row_status) ok = ok && s == sonic::kStatusOk;
        if (!ok) {
          if (tally.bad++ == 0) {
            tally.first_bad = "trial " + std::to_string(trial) + ": num_accepted " + std::to_string(a) +
                              ", tokens";
            for (int32_t t : r.tokens) tally.first_bad += " " + std::to_string(t);
            tally.first_bad += ", drafts";
            for (int32_t d : req.drafts) tally.first_bad += " " + std::to_string(d);
          }
          continue;
        }
        ++tally.num_accepted[static_cast<size_t>(a)];
        size_t prefix = 0;
        for (int j = 0; j <= a; ++j) {
          ++tally.counts[static_cast<size_t>(j)][static_cast<size_t>(r.tokens[static_cast<size_t>(j)])];
          ++tally.reached[static_cast<size_t>(j)];
          if (c.track_prefixes) ++tally.prefix_reach[static_cast<size_t>(j)][prefix];
          if (j < c.n) prefix = prefix * static_cast<size_t>(c.V) + static_cast<size_t>(req.drafts[static_cast<size_t>(j)]);
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (int i = 1; i < T; ++i) threads.emplace_back(work, i);
  work(0);
  for (auto& t : threads) t.join();

  Tally all = empty_tally();
  for (const Tally& p : parts) {
    for (size_t j = 0; j < rows; ++j) {
      for (size_t t = 0; t < static_cast<size_t>(c.V); ++t) all.counts[j][t] += p.counts[j][t];
      all.reached[j] += p.reached[j];
      all.num_accepted[j] += p.num_accepted[j];
      if (c.track_prefixes)
        for (size_t k = 0; k < all.prefix_reach[j].size(); ++k) all.prefix_reach[j][k] += p.prefix_reach[j][k];
    }
    if (p.bad > 0 && all.bad == 0) all.first_bad = p.first_bad;
    all.bad += p.bad;
  }
  return all;
}

// p_j for target row j given the drafts before it (they join the history: penalties see them).
st::OracleDist target(const VerifyCase& c, size_t j, const std::vector<int32_t>& drafts_before) {
  std::vector<int32_t> output = c.output;
  output.insert(output.end(), drafts_before.begin(), drafts_before.end());
  const std::vector<float> z = st::oracle_scores(
      c.rows[j].data(), c.V, c.params, c.prompt, output,
      c.masks.empty() || c.masks[j].empty() ? nullptr : c.masks[j].data(), nullptr);
  return st::oracle_kept(z, c.params);
}

// The expected law at each position: p_j, or with track_prefixes the mixture of p_j(d_<j) over
// the trials that reached j.
std::vector<std::vector<double>> expected_laws(const VerifyCase& c, const Tally& tally) {
  std::vector<std::vector<double>> laws;
  for (size_t j = 0; j <= static_cast<size_t>(c.n); ++j) {
    if (!c.track_prefixes) {
      laws.push_back(target(c, j, {}).probs);
      continue;
    }
    std::vector<double> law(static_cast<size_t>(c.V), 0.0);
    for (size_t k = 0; k < tally.prefix_reach[j].size(); ++k) {
      if (tally.prefix_reach[j][k] == 0) continue;
      std::vector<int32_t> prefix(j);
      size_t code = k;
      for (size_t i = j; i-- > 0;) {
        prefix[i] = static_cast<int32_t>(code % static_cast<size_t>(c.V));
        code /= static_cast<size_t>(c.V);
      }
      const st::OracleDist d = target(c, j, prefix);
      for (size_t t = 0; t < law.size(); ++t)
        law[t] += static_cast<double>(tally.prefix_reach[j][k]) * d.probs[t];
    }
    double s = 0.0;
    for (double v : law) s += v;
    if (s > 0.0)
      for (double& v : law) v /= s;
    laws.push_back(law);
  }
  return laws;
}

// Runs the trials and G-tests each position against laws (or p_j when laws is empty).
Tally check_positions(const VerifyCase& c, int64_t trials, uint64_t draft_seed, const std::string& name,
                      std::vector<std::vector<double>> laws = {}) {
  for (size_t j = 0; j <= static_cast<size_t>(c.n); ++j)
    EXPECT_GT(target(c, j, {}).margin, 1e-4) << name << ": row " << j << " has a near-tie boundary";
  const auto t0 = std::chrono::steady_clock::now();
  Tally tally = run_trials(c, trials, draft_seed);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(tally.bad, 0) << name << ": malformed results, first: " << tally.first_bad;
  if (laws.empty()) laws = expected_laws(c, tally);
  std::printf("[ stats    ] %s: %lld trials, %.2f s; num_accepted histogram:", name.c_str(),
              static_cast<long long>(trials), secs);
  for (int64_t v : tally.num_accepted) std::printf(" %lld", static_cast<long long>(v));
  std::printf("\n");
  for (size_t j = 0; j <= static_cast<size_t>(c.n); ++j) {
    const std::string pos = name + " position " + std::to_string(j);
    EXPECT_GT(tally.reached[j], 2000) << pos << ": reached too rarely to test";
    const st::GTestResult g = st::expect_matches(tally.counts[j], laws[j], pos);
    std::printf("[ stats    ]   position %zu: reached %lld, G = %.2f, dof = %d, p = %.4g\n", j,
                static_cast<long long>(tally.reached[j]), g.g, g.dof, g.p_value);
  }
  return tally;
}

std::vector<float> spread_logits(int32_t V, uint64_t seed, float lo = -2.0f, float hi = 3.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(static_cast<size_t>(V));
  for (float& v : x) v = u(gen);
  return x;
}

// A random dense distribution over V tokens (fp32, normalised), all entries positive.
std::vector<float> random_q(int32_t V, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::vector<double> w(static_cast<size_t>(V));
  double s = 0.0;
  for (double& v : w) s += (v = u(gen) * u(gen));
  std::vector<float> q(static_cast<size_t>(V));
  for (size_t t = 0; t < q.size(); ++t) q[t] = static_cast<float>(w[t] / s);
  return q;
}

std::vector<int32_t> mask_without(int32_t V, std::initializer_list<int32_t> disallowed) {
  std::vector<int32_t> m(static_cast<size_t>((V + 31) / 32), -1);
  for (int32_t t : disallowed) m[static_cast<size_t>(t / 32)] &= ~(1 << (t % 32));
  return m;
}

// Tokens of p ordered by probability ascending (kept ones with p > 0 after the p = 0 ones).
std::vector<int32_t> by_prob_ascending(const std::vector<double>& p) {
  std::vector<int32_t> ids(p.size());
  for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>(t);
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return p[static_cast<size_t>(a)] < p[static_cast<size_t>(b)];
  });
  return ids;
}

std::vector<float> normalised(std::vector<double> w) {
  double s = 0.0;
  for (double v : w) s += v;
  std::vector<float> q(w.size());
  for (size_t t = 0; t < w.size(); ++t) q[t] = static_cast<float>(w[t] / s);
  return q;
}

// Rows for a request: n + 1 rows of spread logits, different per row.
void fill_rows(VerifyCase& c, uint64_t seed) {
  c.rows.clear();
  for (int j = 0; j <= c.n; ++j) c.rows.push_back(spread_logits(c.V, seed + 17 * static_cast<uint64_t>(j)));
}

// ---------------------------------------------------------------------------------------------
// Random requests with draft probabilities.

VerifyCase dense_case() {
  VerifyCase c;
  c.n = 3;
  c.params.temperature = 0.9f;
  c.params.top_k = 8;
  c.params.top_p = 0.9f;
  c.params.min_p = 0.02f;
  c.params.seed = 0xD0D0;
  fill_rows(c, 100);
  c.masks = {{}, mask_without(c.V, {2, 7}), {}, mask_without(c.V, {0})};
  for (int j = 0; j < c.n; ++j) c.q.push_back(random_q(c.V, 200 + static_cast<uint64_t>(j)));
  c.rule = VerifyRule::kDenseDraftProbs;
  return c;
}

TEST(VerifyDistribution, DenseQ) {
  const VerifyCase c = dense_case();
  check_positions(c, kTrials, 1, "DenseQ");
}

// q far from p: most of q's mass on tokens that p_j gives little or nothing.
TEST(VerifyDistribution, DenseQFarFromP) {
  VerifyCase c;
  c.n = 2;
  c.params.temperature = 1.0f;
  c.params.top_k = 10;
  c.params.seed = 0xFA8;
  fill_rows(c, 300);
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    const std::vector<int32_t> asc = by_prob_ascending(p);  // 6 truncated (p = 0) first
    std::vector<double> w(static_cast<size_t>(c.V), 0.0);
    for (int i = 0; i < 3; ++i) w[static_cast<size_t>(asc[static_cast<size_t>(i)])] = 0.15;     // p = 0
    for (int i = 6; i < 9; ++i) w[static_cast<size_t>(asc[static_cast<size_t>(i)])] = 0.15;     // least likely kept
    w[static_cast<size_t>(asc.back())] = 0.1;                                               // the top token
    c.q.push_back(normalised(w));
  }
  check_positions(c, kTrials, 2, "DenseQFarFromP");
}

// Sparse q: a few entries per draft, one of them on a token the target truncates.
TEST(VerifyDistribution, SparseQ) {
  VerifyCase c;
  c.n = 3;
  c.params.temperature = 0.8f;
  c.params.top_p = 0.85f;
  c.params.seed = 0x5A5;
  fill_rows(c, 400);
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    const std::vector<int32_t> asc = by_prob_ascending(p);
    std::vector<double> w(static_cast<size_t>(c.V), 0.0);
    ASSERT_EQ(p[static_cast<size_t>(asc[0])], 0.0);
    w[static_cast<size_t>(asc[0])] = 0.1;                     // truncated by the target
    w[static_cast<size_t>(asc[c.V - 1])] = 0.35;              // the target's top token
    w[static_cast<size_t>(asc[c.V - 2])] = 0.1;
    w[static_cast<size_t>(asc[c.V - 4])] = 0.3;
    w[static_cast<size_t>(asc[c.V - 6 - j])] = 0.15;
    c.q.push_back(normalised(w));
  }
  c.rule = VerifyRule::kSparseDraftProbs;
  check_positions(c, kTrials, 3, "SparseQ");
}

// Penalties on: the history of row j includes d_0..d_{j-1}, so p_j depends on the drafts. The
// expected law at position j is the mixture of p_j(d_<j) over the trials that reached j.
TEST(VerifyDistribution, DenseQWithPenalties) {
  VerifyCase c;
  c.n = 2;
  c.params.temperature = 1.0f;
  c.params.top_k = 10;
  c.params.repetition_penalty = 1.6f;
  c.params.frequency_penalty = 0.5f;
  c.params.presence_penalty = 0.7f;
  c.params.seed = 0xBE4;
  c.prompt = {1, 2};
  c.output = {3, 3, 5};
  fill_rows(c, 500);
  // q concentrated on the rows' likely tokens so that drafts repeat and the penalties bite.
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    std::vector<double> w(static_cast<size_t>(c.V));
    for (size_t t = 0; t < w.size(); ++t) w[t] = p[t] + 0.02;
    c.q.push_back(normalised(w));
  }
  c.track_prefixes = true;
  // The case must depend on the drafts: p_1 differs between two values of d_0.
  EXPECT_NE(target(c, 1, {0}).probs, target(c, 1, {1}).probs);
  check_positions(c, kTrials, 4, "DenseQWithPenalties");
}

// Fixed drafts: the law of each position follows from the rule. Position j is d_j with
// probability a_j = min(1, p_j(d_j) / q_j(d_j)), else a sample of max(0, p_j - q_j) normalised;
// position j + 1 is reached with probability a_j.
TEST(VerifyDistribution, FixedDraftsDenseQLaw) {
  VerifyCase c;
  c.n = 2;
  c.params.temperature = 1.0f;
  c.params.top_k = 12;
  c.params.seed = 0xF1D;
  fill_rows(c, 600);
  for (int j = 0; j < c.n; ++j) c.q.push_back(random_q(c.V, 700 + static_cast<uint64_t>(j)));
  // Drafts: a token with q > p > 0 in each row (accepted with probability p / q).
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    int32_t pick = -1;
    double best = 0.0;
    for (int32_t t = 0; t < c.V; ++t) {
      const double pt = p[static_cast<size_t>(t)], qt = c.q[static_cast<size_t>(j)][static_cast<size_t>(t)];
      if (pt > 0.0 && qt > pt && pt / qt > 0.3 && pt / qt < 0.8 && pt > best) {
        best = pt;
        pick = t;
      }
    }
    ASSERT_GE(pick, 0) << "row " << j;
    c.fixed_drafts.push_back(pick);
  }
  std::vector<std::vector<double>> laws;
  for (int j = 0; j <= c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    if (j == c.n) {
      laws.push_back(p);
      break;
    }
    const std::vector<float>& q = c.q[static_cast<size_t>(j)];
    const int32_t d = c.fixed_drafts[static_cast<size_t>(j)];
    const float pd = static_cast<float>(p[static_cast<size_t>(d)]);
    const double a = std::min(1.0, static_cast<double>(pd) / static_cast<double>(q[static_cast<size_t>(d)]));
    std::vector<double> r(static_cast<size_t>(c.V));
    double rs = 0.0;
    for (size_t t = 0; t < r.size(); ++t) {
      r[t] = std::max(0.0f, static_cast<float>(p[t]) - q[t]);
      rs += r[t];
    }
    std::vector<double> law(static_cast<size_t>(c.V));
    for (size_t t = 0; t < law.size(); ++t) law[t] = (1.0 - a) * r[t] / rs;
    law[static_cast<size_t>(d)] += a;
    laws.push_back(law);
  }
  check_positions(c, kTrials, 5, "FixedDraftsDenseQLaw", laws);
}

// ---------------------------------------------------------------------------------------------
// Random requests without draft probabilities (q one-hot at d_j).

// One-hot q at fixed drafts: accepted with probability p_j(d_j), else a sample of p_j without
// d_j: the emitted token is distributed as p_j at every position.
TEST(VerifyDistribution, OneHotFixedDrafts) {
  VerifyCase c;
  c.n = 2;
  c.params.temperature = 0.8f;
  c.params.min_p = 0.05f;
  c.params.seed = 0x0E1;
  fill_rows(c, 800);
  const std::vector<double> p0 = target(c, 0, {}).probs, p1 = target(c, 1, {}).probs;
  const std::vector<int32_t> asc0 = by_prob_ascending(p0), asc1 = by_prob_ascending(p1);
  c.fixed_drafts = {asc0[c.V - 3], asc1[c.V - 1]};  // row 0's third most likely, row 1's top
  c.rule = VerifyRule::kOneHot;
  check_positions(c, kTrials, 6, "OneHotFixedDrafts");
}

// One-hot rule with drafts drawn from some proposal that is not p.
TEST(VerifyDistribution, OneHotDrawnDrafts) {
  VerifyCase c;
  c.n = 3;
  c.params.temperature = 0.45f;
  c.params.top_k = 9;
  c.params.top_p = 0.95f;
  c.params.seed = 0x0E2;
  fill_rows(c, 950);
  c.masks = {mask_without(c.V, {1, 4}), {}, {}, {}};
  // 70% p_j, 30% an unrelated law (so that later positions are still reached often enough).
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    const std::vector<float> other = random_q(c.V, 1000 + static_cast<uint64_t>(j));
    std::vector<double> w(static_cast<size_t>(c.V));
    for (size_t t = 0; t < w.size(); ++t) w[t] = 0.7 * p[t] + 0.3 * other[t];
    c.proposal.push_back(w);
  }
  c.rule = VerifyRule::kOneHot;
  check_positions(c, kTrials, 7, "OneHotDrawnDrafts");
}

// ---------------------------------------------------------------------------------------------
// Strict: the emitted token at position j is the section-2 sample of row j (kind 0 noise at
// position j), whose marginal is p_j when reached, the drafts being drawn independently.
TEST(VerifyDistribution, StrictDrawnDrafts) {
  VerifyCase c;
  c.n = 3;
  c.params.temperature = 0.45f;  // peaked rows: drafts match the samples often enough
  c.params.top_k = 10;
  c.params.min_p = 0.01f;
  c.params.seed = 0x57C;
  fill_rows(c, 1100);
  for (int j = 0; j < c.n; ++j) {
    const std::vector<double> p = target(c, static_cast<size_t>(j), {}).probs;
    std::vector<double> w(static_cast<size_t>(c.V));
    for (size_t t = 0; t < w.size(); ++t) w[t] = 0.7 * p[t] + 0.3 / c.V;
    c.proposal.push_back(w);
  }
  c.rule = VerifyRule::kStrict;
  check_positions(c, kTrials, 8, "StrictDrawnDrafts");
}

// ---------------------------------------------------------------------------------------------
// Negative control: on DenseQ-like draws at position 0 (always reached), the same G-test rejects
// (a) p_0 with its top token's probability times 1.05, renormalised (at 3*10^5 trials a 1%
// change is below the test's power: about 2 sigma), and (b) the law a plausible bug would give:
// the correction drawn from p_0 instead of the residual max(0, p_0 - q_0).
TEST(VerifyDistributionNegativeControl, PerturbedAndBuggyLawsReject) {
  VerifyCase c;
  c.n = 1;
  c.params.temperature = 1.0f;
  c.params.top_k = 8;
  c.params.seed = 0xC0;
  c.rows = {spread_logits(c.V, 1200, -1.0f, 1.5f), spread_logits(c.V, 1201)};
  c.rows[0][5] = 3.2f;  // the top token holds about a third of p_0's mass
  c.q.push_back(random_q(c.V, 1300));
  const std::vector<double> p0 = target(c, 0, {}).probs;
  const double top = *std::max_element(p0.begin(), p0.end());
  ASSERT_GT(top, 0.25);
  ASSERT_LT(top, 0.75);
  const Tally tally = check_positions(c, kTrials, 9, "NegControl");
  const st::GTestResult g1 =
      st::expect_rejects(tally.counts[0], st::perturb_top(p0, 1.05), "NegControl perturbed 5%");
  std::printf("[ stats    ] perturbed 5%%: G = %.2f, dof = %d, p = %.4g\n", g1.g, g1.dof, g1.p_value);
  // (b): emitted = d_0 w.p. min(p, q)(d_0) summed over d_0, else a sample of p_0.
  const std::vector<float>& q = c.q[0];
  std::vector<double> bug(p0.size());
  double beta = 0.0;
  for (size_t t = 0; t < p0.size(); ++t) beta += std::min(p0[t], static_cast<double>(q[t]));
  for (size_t t = 0; t < p0.size(); ++t)
    bug[t] = std::min(p0[t], static_cast<double>(q[t])) + (1.0 - beta) * p0[t];
  const st::GTestResult g2 = st::expect_rejects(tally.counts[0], bug, "NegControl residual bug");
  std::printf("[ stats    ] correction from p instead of the residual: G = %.2f, dof = %d, p = %.4g\n",
              g2.g, g2.dof, g2.p_value);
}

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
