// Statistical test utilities for the distribution tests: a G-test of observed counts against
// expected probabilities (with its chi-square p-value, computed here from the regularized upper
// incomplete gamma function), and an independent oracle of SPEC.md section 2 that gives the exact
// distribution a random row must be sampled from.
//
// The oracle is written from SPEC.md's text, not from the reference: steps 1-5 in fp32 (one rounding
// per operation, as the spec says), steps 6-8 and the softmax in double.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sonic/types.hpp"

namespace sonic_stats {

// ---------------------------------------------------------------------------------------------
// Chi-square survival function.

// Q(a, x) = Gamma(a, x) / Gamma(a), the regularized upper incomplete gamma function, a > 0.
// Series for P = 1 - Q when x < a + 1, continued fraction (modified Lentz) for Q otherwise.
inline double regularized_gamma_q(double a, double x) {
  if (!(a > 0.0)) return std::numeric_limits<double>::quiet_NaN();
  if (!(x > 0.0)) return 1.0;
  if (std::isinf(x)) return 0.0;
  const double log_prefactor = -x + a * std::log(x) - std::lgamma(a);
  constexpr double kEps = 1e-16;
  constexpr int kMaxIter = 100000;
  if (x < a + 1.0) {
    // P(a, x) = e^-x x^a / Gamma(a) * sum_{n>=0} x^n / (a (a+1) ... (a+n))
    double term = 1.0 / a;
    double sum = term;
    double denom = a;
    for (int n = 1; n < kMaxIter; ++n) {
      denom += 1.0;
      term *= x / denom;
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * kEps) break;
    }
    const double p = sum * std::exp(log_prefactor);
    return std::max(0.0, 1.0 - p);
  }
  // Q(a, x) = e^-x x^a / Gamma(a) * 1 / (x + 1 - a - 1(1-a) / (x + 3 - a - 2(2-a) / (x + 5 - a - ...)))
  constexpr double kTiny = 1e-300;
  double b = x + 1.0 - a;
  double c = 1.0 / kTiny;
  double d = 1.0 / b;
  double h = d;
  for (int i = 1; i < kMaxIter; ++i) {
    const double an = -static_cast<double>(i) * (static_cast<double>(i) - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < kTiny) d = kTiny;
    c = b + an / c;
    if (std::fabs(c) < kTiny) c = kTiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < kEps) break;
  }
  return std::exp(log_prefactor) * h;
}

// P(X >= x) for X ~ chi-square with dof degrees of freedom.
inline double chi2_sf(double x, int dof) {
  if (dof <= 0) return 1.0;
  return regularized_gamma_q(0.5 * dof, 0.5 * x);
}

// ---------------------------------------------------------------------------------------------
// G-test.

struct GTestResult {
  double g = 0.0;
  int dof = 0;
  double p_value = 1.0;
  int64_t total = 0;
  int cells = 0;                 // after pooling
  int64_t zero_prob_hits = 0;    // draws that landed on a token of expected probability 0
  int32_t first_zero_prob_token = -1;
  std::string table;             // the largest per-token deviations, for failure messages
};

// G = 2 sum O ln(O / E) over cells; cells with expected count < 5 are pooled into one cell (and
// that pool, if its expected count is still < 5, joins the smallest remaining cell);
// dof = cells - 1. counts[t] and probs[t] are indexed by token.
inline GTestResult g_test(const std::vector<int64_t>& counts, const std::vector<double>& probs) {
  GTestResult r;
  const size_t n = std::min(counts.size(), probs.size());
  r.total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  double psum = 0.0;
  for (double p : probs) psum += p;
  for (size_t t = 0; t < counts.size(); ++t) {
    const bool zero = t >= probs.size() || !(probs[t] > 0.0);
    if (zero && counts[t] > 0) {
      r.zero_prob_hits += counts[t];
      if (r.first_zero_prob_token < 0) r.first_zero_prob_token = static_cast<int32_t>(t);
    }
  }
  const double N = static_cast<double>(r.total);
  std::vector<std::pair<double, double>> cells;  // (observed, expected)
  double pool_o = 0.0, pool_e = 0.0;
  for (size_t t = 0; t < n; ++t) {
    const double e = N * probs[t] / psum;
    const double o = static_cast<double>(counts[t]);
    if (e < 5.0) {
      pool_o += o;
      pool_e += e;
    } else {
      cells.emplace_back(o, e);
    }
  }
  if (pool_e > 0.0 || pool_o > 0.0) {
    if (pool_e >= 5.0 || cells.empty()) {
      cells.emplace_back(pool_o, pool_e);
    } else {
      auto smallest = std::min_element(cells.begin(), cells.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
      smallest->first += pool_o;
      smallest->second += pool_e;
    }
  }
  double g = 0.0;
  for (const auto& [o, e] : cells) {
    if (o > 0.0) g += o * std::log(o / e);
  }
  r.g = 2.0 * g;
  r.cells = static_cast<int>(cells.size());
  r.dof = r.cells - 1;
  r.p_value = r.dof > 0 ? chi2_sf(r.g, r.dof) : 1.0;

  // The tokens whose counts deviate most (in standard deviations), for the failure message.
  std::vector<std::pair<double, size_t>> dev;
  for (size_t t = 0; t < counts.size(); ++t) {
    const double p = t < probs.size() ? probs[t] / psum : 0.0;
    const double e = N * p;
    const double o = static_cast<double>(counts[t]);
    if (e == 0.0 && o == 0.0) continue;
    const double sd = std::sqrt(std::max(e * (1.0 - p), 1e-12));
    dev.emplace_back(std::fabs(o - e) / sd, t);
  }
  std::sort(dev.begin(), dev.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::ostringstream os;
  os << "  token  observed  expected  (obs-exp)/sd\n";
  for (size_t i = 0; i < dev.size() && i < 12; ++i) {
    const size_t t = dev[i].second;
    const double p = t < probs.size() ? probs[t] / psum : 0.0;
    os << "  " << t << "  " << counts[t] << "  " << N * p << "  "
       << (static_cast<double>(counts[t]) - N * p) / std::sqrt(std::max(N * p * (1.0 - p), 1e-12))
       << "\n";
  }
  r.table = os.str();
  return r;
}

inline std::string describe(const GTestResult& r) {
  std::ostringstream os;
  os << "G = " << r.g << ", dof = " << r.dof << ", p = " << r.p_value << ", draws = " << r.total
     << ", zero-probability hits = " << r.zero_prob_hits;
  if (r.first_zero_prob_token >= 0) os << " (first at token " << r.first_zero_prob_token << ")";
  os << "\n" << r.table;
  return os.str();
}

// The threshold for a false alarm: with dozens of tests, p < 1e-6 by chance is negligible.
constexpr double kRejectP = 1e-6;

// Passes when the counts are consistent with probs (p > 1e-6) and no draw landed on a token
// whose expected probability is 0.
inline GTestResult expect_matches(const std::vector<int64_t>& counts,
                                  const std::vector<double>& expected_probs,
                                  const std::string& name) {
  const GTestResult r = g_test(counts, expected_probs);
  EXPECT_EQ(r.zero_prob_hits, 0) << name << ": draws landed on tokens of probability 0\n"
                                 << describe(r);
  EXPECT_GT(r.p_value, kRejectP) << name << ": counts do not match the expected distribution\n"
                                 << describe(r);
  return r;
}

// The negative control: the same test must reject (p < 1e-6) a wrong expectation.
inline GTestResult expect_rejects(const std::vector<int64_t>& counts,
                                  const std::vector<double>& wrong_probs, const std::string& name) {
  const GTestResult r = g_test(counts, wrong_probs);
  EXPECT_LT(r.p_value, kRejectP) << name << ": the G-test failed to reject a wrong expectation\n"
                                 << describe(r);
  return r;
}

// probs with the most likely token's probability multiplied by factor, renormalised.
inline std::vector<double> perturb_top(std::vector<double> probs, double factor) {
  const size_t top = static_cast<size_t>(std::max_element(probs.begin(), probs.end()) - probs.begin());
  probs[top] *= factor;
  double s = 0.0;
  for (double p : probs) s += p;
  for (double& p : probs) p /= s;
  return probs;
}

// ---------------------------------------------------------------------------------------------
// The oracle: SPEC.md section 2, written from the text.

inline float f32_neg_inf() { return -std::numeric_limits<float>::infinity(); }

// Steps 1-5 for one row, fp32 per token, one rounding per operation. Returns z (x for greedy
// rows, i.e. temperature 0: step 5 skipped); -inf where masked. *nan_seen: any input NaN.
inline std::vector<float> oracle_scores(const float* logits, int32_t V, const sonic::RequestParams& p,
                                        const std::vector<int32_t>& prompt,
                                        const std::vector<int32_t>& output,
                                        const int32_t* bitmask_row, bool* nan_seen) {
  std::unordered_set<int32_t> banned(p.banned_tokens.begin(), p.banned_tokens.end());
  std::unordered_set<int32_t> allowed(p.allowed_tokens.begin(), p.allowed_tokens.end());
  std::unordered_map<int32_t, float> bias;
  for (const auto& [t, b] : p.logit_bias) bias[t] = b;
  std::unordered_set<int32_t> rep_scope(output.begin(), output.end());
  if (!p.repetition_output_only) rep_scope.insert(prompt.begin(), prompt.end());
  std::unordered_map<int32_t, int32_t> count;
  for (int32_t t : output) ++count[t];
  if (p.penalties_include_prompt)
    for (int32_t t : prompt) ++count[t];

  bool nan = false;
  std::vector<float> z(static_cast<size_t>(V));
  for (int32_t t = 0; t < V; ++t) {
    float x = logits[t];  // fp32 throughout (the test target builds with -ffp-contract=off)
    if (std::isnan(x)) {
      nan = true;
      x = f32_neg_inf();
    }
    // 1. mask
    bool masked = false;
    if (bitmask_row != nullptr &&
        ((static_cast<uint32_t>(bitmask_row[t / 32]) >> (t % 32)) & 1u) == 0)
      masked = true;
    if (banned.count(t)) masked = true;
    if (!allowed.empty() && !allowed.count(t)) masked = true;
    if (masked) x = f32_neg_inf();
    // 2. logit bias
    if (auto it = bias.find(t); it != bias.end()) x = x + it->second;
    // 3. repetition penalty
    if (p.repetition_penalty != 1.0f && rep_scope.count(t))
      x = x > 0.0f ? x / p.repetition_penalty : x * p.repetition_penalty;
    // 4. frequency and presence
    if (auto it = count.find(t); it != count.end() && it->second > 0) {
      const float c = static_cast<float>(it->second);
      const float fc = p.frequency_penalty * c;
      x = x - fc;
      x = x - p.presence_penalty;
    }
    // 5. temperature
    if (p.temperature != 0.0f) x = x / p.temperature;
    z[static_cast<size_t>(t)] = x;
  }
  if (nan_seen != nullptr) *nan_seen = nan;
  return z;
}

// Tokens with z > -inf, z descending, id ascending.
inline std::vector<int32_t> oracle_order(const std::vector<float>& z) {
  std::vector<int32_t> ids;
  for (size_t t = 0; t < z.size(); ++t)
    if (z[t] > f32_neg_inf()) ids.push_back(static_cast<int32_t>(t));
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    if (z[static_cast<size_t>(a)] != z[static_cast<size_t>(b)])
      return z[static_cast<size_t>(a)] > z[static_cast<size_t>(b)];
    return a < b;
  });
  return ids;
}

// softmax over z[ids[0..m)] in double; +inf scores share the mass equally.
inline std::vector<double> oracle_softmax(const std::vector<float>& z, const std::vector<int32_t>& ids,
                                          size_t m) {
  std::vector<double> out(m, 0.0);
  if (m == 0) return out;
  size_t n_inf = 0;
  for (size_t i = 0; i < m; ++i) n_inf += std::isinf(z[static_cast<size_t>(ids[i])]) &&
                                          z[static_cast<size_t>(ids[i])] > 0;
  if (n_inf > 0) {
    for (size_t i = 0; i < m; ++i)
      if (std::isinf(z[static_cast<size_t>(ids[i])]) && z[static_cast<size_t>(ids[i])] > 0)
        out[i] = 1.0 / static_cast<double>(n_inf);
    return out;
  }
  double zmax = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < m; ++i) zmax = std::max(zmax, static_cast<double>(z[static_cast<size_t>(ids[i])]));
  double s = 0.0;
  for (size_t i = 0; i < m; ++i) {
    out[i] = std::exp(static_cast<double>(z[static_cast<size_t>(ids[i])]) - zmax);
    s += out[i];
  }
  for (double& v : out) v /= s;
  return out;
}

struct OracleDist {
  std::vector<double> probs;   // [V], 0 outside the kept set
  std::vector<int32_t> kept;   // most likely first
  size_t valid = 0;            // tokens with z > -inf
  size_t after_min_p = 0;      // kept-set size after each rule alone (SIZE_MAX: rule off)
  size_t after_top_k = 0;
  size_t after_top_p = 0;
  // Smallest relative distance of a min-p score or a top-p cumulative mass from its threshold:
  // a case is only a fair test when this is well above fp32 rounding (SPEC.md section 4).
  double margin = std::numeric_limits<double>::infinity();
};

// Steps 6-8 on z (a random row), in double.
inline OracleDist oracle_kept(const std::vector<float>& z, const sonic::RequestParams& p) {
  OracleDist d;
  const int32_t V = static_cast<int32_t>(z.size());
  d.probs.assign(z.size(), 0.0);
  const std::vector<int32_t> order = oracle_order(z);
  d.valid = order.size();
  if (order.empty()) return d;
  const size_t n = order.size();

  // 6. min-p: z_t >= z_max + ln(min_p); the survivors are a prefix of the order.
  size_t keep_minp = n;
  if (p.min_p > 0.0f) {
    const double zmax = z[static_cast<size_t>(order[0])];
    const double thr = zmax + std::log(static_cast<double>(p.min_p));
    keep_minp = 0;
    for (size_t i = 0; i < n; ++i) {
      const double zi = z[static_cast<size_t>(order[i])];
      if (zi >= thr) keep_minp = i + 1;
      if (std::isfinite(zi) && std::isfinite(thr) && zi != zmax)
        d.margin = std::min(d.margin, std::fabs(zi - thr) / std::max(1.0, std::fabs(thr)));
    }
    d.after_min_p = keep_minp;
  } else {
    d.after_min_p = SIZE_MAX;
  }
  // 7. top-k: the first k of the min-p survivors.
  size_t keep_k = keep_minp;
  if (p.top_k > 0 && p.top_k < V) {
    keep_k = std::min(keep_minp, static_cast<size_t>(p.top_k));
    d.after_top_k = std::min(n, static_cast<size_t>(p.top_k));
  } else {
    d.after_top_k = SIZE_MAX;
  }
  // 8. top-p: the shortest prefix whose mass reaches p, of the survivors renormalised (default)
  // or of softmax over all tokens (joint rule, then intersected with the other two).
  size_t keep = keep_k;
  if (p.top_p < 1.0f) {
    const size_t base = p.top_p_joint ? n : keep_k;
    const std::vector<double> pr = oracle_softmax(z, order, base);
    const double target = static_cast<double>(p.top_p);
    size_t m = base;
    double cum = 0.0;
    for (size_t i = 0; i < base; ++i) {
      cum += pr[i];
      d.margin = std::min(d.margin, std::fabs(cum - target) / target);
      if (cum >= target) {
        m = i + 1;
        break;
      }
    }
    d.after_top_p = m;
    keep = std::min(keep_k, m);
  } else {
    d.after_top_p = SIZE_MAX;
  }
  keep = std::max<size_t>(keep, 1);  // the most likely token always survives
  d.kept.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
  const std::vector<double> fin = oracle_softmax(z, order, keep);
  for (size_t i = 0; i < keep; ++i) d.probs[static_cast<size_t>(order[i])] = fin[i];
  return d;
}

// Step 9: argmax of x over unmasked tokens, ties to the lower id; -1 if none.
inline int32_t oracle_greedy(const std::vector<float>& x) {
  int32_t best = -1;
  for (size_t t = 0; t < x.size(); ++t)
    if (x[t] > f32_neg_inf() && (best < 0 || x[t] > x[static_cast<size_t>(best)]))
      best = static_cast<int32_t>(t);
  return best;
}

}  // namespace sonic_stats
