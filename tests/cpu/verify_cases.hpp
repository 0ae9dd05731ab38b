// The statistical cases of verification mode (SPEC.md section 3), shared by the CPU tests
// (tests/cpu/test_verify_distribution.cpp, through sonic::ref::verify_request) and the GPU tests
// (tests/gpu/test_cuda_verify_distribution.cpp, through the CUDA Sampler). A backend supplies only
// the trials (a Runner); the cases, the expected law of each position and the G-tests live here.
//
// With each draft d_j drawn from q_j (std::mt19937_64, independent of the library's Philox
// streams), the token emitted at position j, given that position j is reached (num_accepted >= j),
// must be distributed as p_j, the final kept distribution of target row j, which stats.hpp's
// oracle computes independently. With penalties p_j depends on the earlier drafts and the law is
// the mixture over the reached prefixes; with fixed drafts it follows from the acceptance rule.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ref/reference.hpp"
#include "sonic/types.hpp"
#include "stats.hpp"

namespace verify_cases {

namespace st = sonic_stats;
using sonic::RequestParams;
using sonic::VerifyRule;

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

// Runs `trials` verifications of the case with drafts drawn from a generator seeded by draft_seed.
using Runner = std::function<Tally(const VerifyCase&, int64_t trials, uint64_t draft_seed)>;

inline Tally empty_tally(const VerifyCase& c) {
  const size_t rows = static_cast<size_t>(c.n) + 1;
  Tally t;
  t.counts.assign(rows, std::vector<int64_t>(static_cast<size_t>(c.V), 0));
  t.reached.assign(rows, 0);
  t.num_accepted.assign(rows, 0);
  if (c.track_prefixes) {
    size_t size = 1;
    for (size_t j = 0; j < rows; ++j, size *= static_cast<size_t>(c.V)) t.prefix_reach.emplace_back(size, 0);
  }
  return t;
}

inline void add_into(Tally& all, const Tally& p) {
  for (size_t j = 0; j < all.counts.size(); ++j) {
    for (size_t t = 0; t < all.counts[j].size(); ++t) all.counts[j][t] += p.counts[j][t];
    all.reached[j] += p.reached[j];
    all.num_accepted[j] += p.num_accepted[j];
    for (size_t k = 0; j < all.prefix_reach.size() && k < all.prefix_reach[j].size(); ++k)
      all.prefix_reach[j][k] += p.prefix_reach[j][k];
  }
  if (p.bad > 0 && all.bad == 0) all.first_bad = p.first_bad;
  all.bad += p.bad;
}

// Tallies one trial: drafts[n], the emitted tokens (num_accepted + 1 of them are read) and whether
// every row's status was ok. A result that breaks SPEC.md's shape is counted as bad instead.
inline void record(Tally& tally, const VerifyCase& c, const int32_t* drafts, const int32_t* tokens,
                   int32_t num_accepted, bool statuses_ok, int64_t trial) {
  const int a = num_accepted;
  bool ok = statuses_ok && a >= 0 && a <= c.n;
  for (int j = 0; ok && j < a; ++j) ok = tokens[j] == drafts[j];
  if (ok) ok = tokens[a] >= 0 && tokens[a] < c.V;
  if (!ok) {
    if (tally.bad++ == 0) {
      tally.first_bad = "trial " + std::to_string(trial) + ": num_accepted " + std::to_string(a) +
                        (statuses_ok ? "" : ", a status not ok or a wrong length") + ", tokens";
      for (int j = 0; j <= std::clamp(a, 0, c.n); ++j) tally.first_bad += " " + std::to_string(tokens[j]);
      tally.first_bad += ", drafts";
      for (int j = 0; j < c.n; ++j) tally.first_bad += " " + std::to_string(drafts[j]);
    }
    return;
  }
  ++tally.num_accepted[static_cast<size_t>(a)];
  size_t prefix = 0;
  for (int j = 0; j <= a; ++j) {
    ++tally.counts[static_cast<size_t>(j)][static_cast<size_t>(tokens[j])];
    ++tally.reached[static_cast<size_t>(j)];
    if (c.track_prefixes) ++tally.prefix_reach[static_cast<size_t>(j)][prefix];
    if (j < c.n) prefix = prefix * static_cast<size_t>(c.V) + static_cast<size_t>(drafts[j]);
  }
}

inline std::vector<double> cumulative(const std::vector<double>& w) {
  std::vector<double> c(w.size());
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) c[i] = (s += w[i]);
  return c;
}

inline int32_t draw_from(const std::vector<double>& cum, std::mt19937_64& gen) {
  const double u = std::uniform_real_distribution<double>(0.0, cum.back())(gen);
  auto it = std::upper_bound(cum.begin(), cum.end(), u);
  if (it == cum.end()) {  // u rounded up to the total: take the last cell of positive width
    --it;
    while (it != cum.begin() && *it == *(it - 1)) --it;
  }
  return static_cast<int32_t>(it - cum.begin());
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// Draws a trial's drafts (or copies the fixed ones); cum holds the proposals' cumulative sums.
class DraftSource {
 public:
  explicit DraftSource(const VerifyCase& c) : c_(c) {
    for (int j = 0; j < c.n && c.fixed_drafts.empty(); ++j)
      cum_.push_back(cumulative(c.proposal.empty() ? to_double(c.q[static_cast<size_t>(j)])
                                                   : c.proposal[static_cast<size_t>(j)]));
  }
  void draw(std::mt19937_64& gen, int32_t* drafts) const {
    for (int j = 0; j < c_.n; ++j)
      drafts[j] = c_.fixed_drafts.empty() ? draw_from(cum_[static_cast<size_t>(j)], gen)
                                          : c_.fixed_drafts[static_cast<size_t>(j)];
  }

 private:
  const VerifyCase& c_;
  std::vector<std::vector<double>> cum_;
};

// The sparse form of each q_j: its nonzero entries, most likely first (single-step mode's order).
inline std::vector<sonic::ref::SparseProbs> sparse_lists(const VerifyCase& c) {
  std::vector<sonic::ref::SparseProbs> lists;
  for (const auto& q : c.q) {
    sonic::ref::SparseProbs s;
    for (int32_t t = 0; t < c.V; ++t)
      if (q[static_cast<size_t>(t)] > 0.0f) s.ids.push_back(t);
    std::stable_sort(s.ids.begin(), s.ids.end(), [&](int32_t a, int32_t b) {
      return q[static_cast<size_t>(a)] > q[static_cast<size_t>(b)];
    });
    for (int32_t t : s.ids) s.probs.push_back(q[static_cast<size_t>(t)]);
    lists.push_back(s);
  }
  return lists;
}

// p_j for target row j given the drafts before it (they join the history: penalties see them).
inline st::OracleDist target(const VerifyCase& c, size_t j, const std::vector<int32_t>& drafts_before) {
  std::vector<int32_t> output = c.output;
  output.insert(output.end(), drafts_before.begin(), drafts_before.end());
  const std::vector<float> z = st::oracle_scores(
      c.rows[j].data(), c.V, c.params, c.prompt, output,
      c.masks.empty() || c.masks[j].empty() ? nullptr : c.masks[j].data(), nullptr);
  return st::oracle_kept(z, c.params);
}

// The expected law at each position: p_j, or with track_prefixes the mixture of p_j(d_<j) over
// the trials that reached j.
inline std::vector<std::vector<double>> expected_laws(const VerifyCase& c, const Tally& tally) {
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
      for (size_t t = 0; t < law.size(); ++t) law[t] += static_cast<double>(tally.prefix_reach[j][k]) * d.probs[t];
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
inline Tally check_positions(const Runner& run, const VerifyCase& c, int64_t trials, uint64_t draft_seed,
                             const std::string& name, std::vector<std::vector<double>> laws = {}) {
  for (size_t j = 0; j <= static_cast<size_t>(c.n); ++j)
    EXPECT_GT(target(c, j, {}).margin, 1e-4) << name << ": row " << j << " has a near-tie boundary";
  const auto t0 = std::chrono::steady_clock::now();
  Tally tally = run(c, trials, draft_seed);
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

// ---------------------------------------------------------------------------------------------
// Building blocks of the cases.

inline std::vector<float> spread_logits(int32_t V, uint64_t seed, float lo = -2.0f, float hi = 3.0f) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> x(static_cast<size_t>(V));
  for (float& v : x) v = u(gen);
  return x;
}

// A random dense distribution over V tokens (fp32, normalised), all entries positive.
inline std::vector<float> random_q(int32_t V, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  std::vector<double> w(static_cast<size_t>(V));
  double s = 0.0;
  for (double& v : w) s += (v = u(gen) * u(gen));
  std::vector<float> q(static_cast<size_t>(V));
  for (size_t t = 0; t < q.size(); ++t) q[t] = static_cast<float>(w[t] / s);
  return q;
}

inline std::vector<int32_t> mask_without(int32_t V, std::initializer_list<int32_t> disallowed) {
  std::vector<int32_t> m(static_cast<size_t>((V + 31) / 32), -1);
  for (int32_t t : disallowed) m[static_cast<size_t>(t / 32)] &= ~(1 << (t % 32));
  return m;
}

// Tokens of p ordered by probability ascending (kept ones with p > 0 after the p = 0 ones).
inline std::vector<int32_t> by_prob_ascending(const std::vector<double>& p) {
  std::vector<int32_t> ids(p.size());
  for (size_t t = 0; t < ids.size(); ++t) ids[t] = static_cast<int32_t>(t);
  std::stable_sort(ids.begin(), ids.end(),
                   [&](int32_t a, int32_t b) { return p[static_cast<size_t>(a)] < p[static_cast<size_t>(b)]; });
  return ids;
}

inline std::vector<float> normalised(std::vector<double> w) {
  double s = 0.0;
  for (double v : w) s += v;
  std::vector<float> q(w.size());
  for (size_t t = 0; t < w.size(); ++t) q[t] = static_cast<float>(w[t] / s);
  return q;
}

// Rows for a request: n + 1 rows of spread logits, different per row.
inline void fill_rows(VerifyCase& c, uint64_t seed) {
  c.rows.clear();
  for (int j = 0; j <= c.n; ++j) c.rows.push_back(spread_logits(c.V, seed + 17 * static_cast<uint64_t>(j)));
}

// ---------------------------------------------------------------------------------------------
// The cases. Requests with draft probabilities:

inline VerifyCase dense_q() {
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

// q far from p: most of q's mass on tokens that p_j gives little or nothing.
inline VerifyCase dense_q_far_from_p() {
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
    for (int i = 0; i < 3; ++i) w[static_cast<size_t>(asc[static_cast<size_t>(i)])] = 0.15;  // p = 0
    for (int i = 6; i < 9; ++i) w[static_cast<size_t>(asc[static_cast<size_t>(i)])] = 0.15;  // least likely kept
    w[static_cast<size_t>(asc.back())] = 0.1;                                            // the top token
    c.q.push_back(normalised(w));
  }
  return c;
}

// Sparse q: a few entries per draft, one of them on a token the target truncates.
inline VerifyCase sparse_q() {
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
    EXPECT_EQ(p[static_cast<size_t>(asc[0])], 0.0) << "sparse_q: row " << j << " truncates nothing";
    w[static_cast<size_t>(asc[0])] = 0.1;         // truncated by the target
    w[static_cast<size_t>(asc[c.V - 1])] = 0.35;  // the target's top token
    w[static_cast<size_t>(asc[c.V - 2])] = 0.1;
    w[static_cast<size_t>(asc[c.V - 4])] = 0.3;
    w[static_cast<size_t>(asc[c.V - 6 - j])] = 0.15;
    c.q.push_back(normalised(w));
  }
  c.rule = VerifyRule::kSparseDraftProbs;
  return c;
}

// Penalties on: the history of row j includes d_0..d_{j-1}, so p_j depends on the drafts. The
// expected law at position j is the mixture of p_j(d_<j) over the trials that reached j.
inline VerifyCase dense_q_with_penalties() {
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
  return c;
}

// Fixed drafts: the law of each position follows from the rule. Position j is d_j with
// probability a_j = min(1, p_j(d_j) / q_j(d_j)), else a sample of max(0, p_j - q_j) normalised;
// position j + 1 is reached with probability a_j. Returns the case; laws receives those laws.
inline VerifyCase fixed_drafts_dense_q(std::vector<std::vector<double>>& laws) {
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
    EXPECT_GE(pick, 0) << "fixed_drafts_dense_q: no draft with 0.3 < p / q < 0.8 in row " << j;
    c.fixed_drafts.push_back(std::max(pick, 0));
  }
  laws.clear();
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
  return c;
}

// Requests without draft probabilities (q one-hot at d_j). At fixed drafts: accepted with
// probability p_j(d_j), else a sample of p_j without d_j: the emitted token is distributed as p_j
// at every position.
inline VerifyCase one_hot_fixed_drafts() {
  VerifyCase c;
  c.n = 2;
  c.params.temperature = 0.8f;
  c.params.min_p = 0.05f;
  c.params.seed = 0x0E1;
  fill_rows(c, 800);
  const std::vector<double> p0 = target(c, 0, {}).probs, p1 = target(c, 1, {}).probs;
  const std::vector<int32_t> asc0 = by_prob_ascending(p0), asc1 = by_prob_ascending(p1);
  c.fixed_drafts = {asc0[static_cast<size_t>(c.V - 3)], asc1[static_cast<size_t>(c.V - 1)]};  // third most likely, top
  c.rule = VerifyRule::kOneHot;
  return c;
}

// One-hot rule with drafts drawn from some proposal that is not p.
inline VerifyCase one_hot_drawn_drafts() {
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
  return c;
}

// Strict: the emitted token at position j is the section-2 sample of row j (kind 0 noise at
// position j), whose marginal is p_j when reached, the drafts being drawn independently.
inline VerifyCase strict_drawn_drafts() {
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
  return c;
}

// Negative control: on DenseQ-like draws at position 0 (always reached), the same G-test must
// reject (a) p_0 with its top token's probability times 1.05, renormalised (at 3*10^5 trials a 1%
// change is below the test's power: about 2 sigma), and (b) the law a plausible bug would give:
// the correction drawn from p_0 instead of the residual max(0, p_0 - q_0).
inline VerifyCase negative_control() {
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
  EXPECT_GT(top, 0.25);
  EXPECT_LT(top, 0.75);
  return c;
}

inline void check_negative_control(const Runner& run, int64_t trials, const std::string& name) {
  const VerifyCase c = negative_control();
  const std::vector<double> p0 = target(c, 0, {}).probs;
  const Tally tally = check_positions(run, c, trials, 9, name);
  const st::GTestResult g1 = st::expect_rejects(tally.counts[0], st::perturb_top(p0, 1.05), name + " perturbed 5%");
  std::printf("[ stats    ] perturbed 5%%: G = %.2f, dof = %d, p = %.4g\n", g1.g, g1.dof, g1.p_value);
  // (b): emitted = d_0 w.p. min(p, q)(d_0) summed over d_0, else a sample of p_0.
  const std::vector<float>& q = c.q[0];
  std::vector<double> bug(p0.size());
  double beta = 0.0;
  for (size_t t = 0; t < p0.size(); ++t) beta += std::min(p0[t], static_cast<double>(q[t]));
  for (size_t t = 0; t < p0.size(); ++t) bug[t] = std::min(p0[t], static_cast<double>(q[t])) + (1.0 - beta) * p0[t];
  const st::GTestResult g2 = st::expect_rejects(tally.counts[0], bug, name + " residual bug");
  std::printf("[ stats    ] correction from p instead of the residual: G = %.2f, dof = %d, p = %.4g\n", g2.g,
              g2.dof, g2.p_value);
}

}  // namespace verify_cases

// The G-tests of every case above for one backend's runner, as gtest tests of suite `Suite` (names
// in the output start with `prefix`). Each backend's test file instantiates them once.
#define SONIC_VERIFY_DISTRIBUTION_TESTS(Suite, run, trials, prefix)                                        \
  TEST(Suite, DenseQ) { verify_cases::check_positions(run, verify_cases::dense_q(), trials, 1, prefix "DenseQ"); } \
  TEST(Suite, DenseQFarFromP) {                                                                           \
    verify_cases::check_positions(run, verify_cases::dense_q_far_from_p(), trials, 2, prefix "DenseQFarFromP"); \
  }                                                                                                       \
  TEST(Suite, SparseQ) { verify_cases::check_positions(run, verify_cases::sparse_q(), trials, 3, prefix "SparseQ"); } \
  TEST(Suite, DenseQWithPenalties) {                                                                      \
    verify_cases::check_positions(run, verify_cases::dense_q_with_penalties(), trials, 4,                  \
                                  prefix "DenseQWithPenalties");                                          \
  }                                                                                                       \
  TEST(Suite, FixedDraftsDenseQLaw) {                                                                     \
    std::vector<std::vector<double>> laws;                                                                \
    const verify_cases::VerifyCase c = verify_cases::fixed_drafts_dense_q(laws);                          \
    verify_cases::check_positions(run, c, trials, 5, prefix "FixedDraftsDenseQLaw", laws);                \
  }                                                                                                       \
  TEST(Suite, OneHotFixedDrafts) {                                                                        \
    verify_cases::check_positions(run, verify_cases::one_hot_fixed_drafts(), trials, 6, prefix "OneHotFixedDrafts"); \
  }                                                                                                       \
  TEST(Suite, OneHotDrawnDrafts) {                                                                        \
    verify_cases::check_positions(run, verify_cases::one_hot_drawn_drafts(), trials, 7, prefix "OneHotDrawnDrafts"); \
  }                                                                                                       \
  TEST(Suite, StrictDrawnDrafts) {                                                                        \
    verify_cases::check_positions(run, verify_cases::strict_drawn_drafts(), trials, 8, prefix "StrictDrawnDrafts"); \
  }                                                                                                       \
  TEST(Suite, NegativeControlRejectsPerturbedAndBuggyLaws) {                                              \
    verify_cases::check_negative_control(run, trials, prefix "NegControl");                              \
  }
