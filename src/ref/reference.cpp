// The CPU reference, row by row, in the order of SPEC.md section 2 and section 3.
#include "ref/reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>

#include "common/random.hpp"
#include "common/token_rules.hpp"
#include "ref/sort_keys.hpp"

namespace sonic::ref {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kPosInf = std::numeric_limits<float>::infinity();

}  // namespace

TokenCounts count_tokens(const std::vector<int32_t>& prompt, const std::vector<int32_t>& output) {
  TokenCounts c;
  for (int32_t t : prompt) ++c.prompt[t];
  for (int32_t t : output) ++c.output[t];
  return c;
}

std::vector<float> row_to_float(const void* row, DType dtype, int64_t count) {
  std::vector<float> x(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) x[i] = detail::load_logit(row, dtype, i);
  return x;
}

std::vector<float> processed_logits(const float* logits, const RowContext& ctx, int32_t* status) {
  const RequestParams& p = *ctx.params;
  const int32_t V = ctx.vocab_size;
  std::vector<float> x(logits, logits + V);

  // Step 1: NaN, grammar bitmask, banned, allowed.
  for (int32_t t = 0; t < V; ++t) {
    if (std::isnan(x[t])) {
      x[t] = kNegInf;
      *status |= kStatusNaN;
    }
    if (ctx.bitmask_row && !detail::bitmask_allows(ctx.bitmask_row, t)) x[t] = kNegInf;
  }
  for (int32_t t : p.banned_tokens) x[t] = kNegInf;
  if (!p.allowed_tokens.empty()) {
    std::vector<char> allowed(V, 0);
    for (int32_t t : p.allowed_tokens) allowed[t] = 1;
    for (int32_t t = 0; t < V; ++t)
      if (!allowed[t]) x[t] = kNegInf;
  }

  // Steps 2-4, through the shared per-token rule.
  std::vector<float> bias(V, 0.0f);
  for (const auto& [t, b] : p.logit_bias) bias[t] = b;
  const detail::Penalties pen{p.repetition_penalty, p.frequency_penalty, p.presence_penalty};
  // The counts spread over the vocabulary (a hash lookup a token cost more than the rest of the row);
  // ids outside it count for no token, as in a lookup.
  std::vector<int32_t> prompt_count(V, 0), output_count(V, 0);
  for (const auto& [t, c] : ctx.counts->prompt)
    if (t >= 0 && t < V) prompt_count[t] = c;
  for (const auto& [t, c] : ctx.counts->output)
    if (t >= 0 && t < V) output_count[t] = c;
  for (int32_t t = 0; t < V; ++t) {
    const int32_t in_prompt = prompt_count[t];
    const int32_t in_output = output_count[t];
    const bool rep_scope = p.repetition_output_only ? in_output > 0 : in_prompt + in_output > 0;
    const int32_t count = in_output + (p.penalties_include_prompt ? in_prompt : 0);
    x[t] = detail::adjust_logit(x[t], bias[t], rep_scope, count, pen);
  }
  return x;
}

std::vector<float> tempered(const std::vector<float>& x, float temperature) {
  std::vector<float> z(x.size());
  for (size_t t = 0; t < x.size(); ++t) z[t] = detail::apply_temperature(x[t], temperature);
  return z;
}

std::vector<int32_t> order_tokens(const std::vector<float>& score, size_t limit) {
  // pack_key's order is exactly (score descending, id ascending), -0 and +0 equal: sorting the keys
  // gives the order a comparator sort would.
  std::vector<uint64_t> keys, scratch;
  keys.reserve(score.size());
  for (int32_t t = 0; t < static_cast<int32_t>(score.size()); ++t)
    if (score[t] > kNegInf) keys.push_back(detail::pack_key(score[t], t));
  if (limit < keys.size()) {  // the largest `limit` keys first, then only they are sorted
    std::nth_element(keys.begin(), keys.begin() + static_cast<std::ptrdiff_t>(limit), keys.end(),
                     std::greater<uint64_t>());
    keys.resize(limit);
  }
  sort_keys_descending(keys, scratch);
  std::vector<int32_t> ids(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) ids[i] = detail::key_token(keys[i]);
  return ids;
}

namespace {

// What both forms of the softmax need of the scores over ids: their maximum, how many are +inf (when
// the maximum is), and the sum of exp(score - max) in ids order (when the maximum is finite).
struct SoftmaxNorm {
  double max = kNegInf;
  size_t pos_inf = 0;
  double sum = 0.0;
};

SoftmaxNorm softmax_norm(const std::vector<float>& score, const std::vector<int32_t>& ids) {
  SoftmaxNorm n;
  for (int32_t t : ids) n.max = std::max(n.max, static_cast<double>(score[t]));
  if (n.max == kPosInf) {
    for (int32_t t : ids) n.pos_inf += score[t] == kPosInf;
  } else if (n.max > kNegInf) {
    for (int32_t t : ids) n.sum += std::exp(static_cast<double>(score[t]) - n.max);
  }
  return n;
}

}  // namespace

std::vector<double> softmax_over(const std::vector<float>& score, const std::vector<int32_t>& ids) {
  std::vector<double> p(ids.size(), 0.0);
  const SoftmaxNorm n = softmax_norm(score, ids);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float s = score[ids[i]];
    if (n.max == kPosInf) p[i] = s == kPosInf ? 1.0 / n.pos_inf : 0.0;  // the +inf tokens share the mass
    else if (n.max > kNegInf) p[i] = std::exp(static_cast<double>(s) - n.max) / n.sum;
  }
  return p;
}

std::vector<double> log_softmax_over(const std::vector<float>& score, const std::vector<int32_t>& ids) {
  std::vector<double> lp(ids.size(), kNegInf);
  const SoftmaxNorm n = softmax_norm(score, ids);
  const double log_sum = n.max == kPosInf ? std::log(static_cast<double>(n.pos_inf)) : std::log(n.sum);
  for (size_t i = 0; i < ids.size(); ++i) {
    const float s = score[ids[i]];
    if (n.max == kPosInf) lp[i] = s == kPosInf ? -log_sum : kNegInf;  // the others have no mass
    else if (n.max > kNegInf) lp[i] = (static_cast<double>(s) - n.max) - log_sum;
  }
  return lp;
}

namespace {

// Length of the shortest prefix of `probs` whose mass reaches p (the crossing token included).
size_t top_p_prefix(const std::vector<double>& probs, double p) {
  double cum = 0.0;
  for (size_t i = 0; i < probs.size(); ++i) {
    cum += probs[i];
    if (cum >= p) return i + 1;
  }
  return probs.size();  // rounding left the total just under p: keep everything
}

}  // namespace

Distribution kept_distribution(const std::vector<float>& z, const RequestParams& params,
                               std::vector<int32_t>* whole_order) {
  const int32_t V = static_cast<int32_t>(z.size());
  // Every step keeps a prefix of the order, and top-k keeps at most k; only the joint top-p rule
  // sums over every token (in the order), so the others need the first k alone.
  const bool top_k_on = detail::top_k_cuts(params.top_k, V);
  const bool joint = params.top_p < 1.0f && params.top_p_joint;
  const bool whole = !top_k_on || joint;
  std::vector<int32_t> order = order_tokens(z, whole ? SIZE_MAX : static_cast<size_t>(params.top_k));
  if (whole_order) whole_order->clear();
  Distribution d;
  if (order.empty()) return d;
  size_t keep = order.size();

  // Step 6, min-p: z_t >= z_max + ln(min_p). Every step below keeps a prefix of the order.
  if (params.min_p > 0.0f) {
    const double threshold = static_cast<double>(z[order[0]]) + std::log(double{params.min_p});
    size_t n = 0;
    while (n < keep && static_cast<double>(z[order[n]]) >= threshold) ++n;
    keep = std::max<size_t>(n, 1);
  }
  // Step 7, top-k: the first k of the survivors.
  if (top_k_on) keep = std::min<size_t>(keep, params.top_k);
  // Step 8, top-p.
  if (params.top_p < 1.0f) {
    const double p = params.top_p;
    if (params.top_p_joint) {  // prefix measured on softmax(z) over all tokens
      keep = std::min(keep, top_p_prefix(softmax_over(z, order), p));
    } else {  // prefix of the survivors, renormalised
      std::vector<int32_t> survivors(order.begin(), order.begin() + keep);
      keep = top_p_prefix(softmax_over(z, survivors), p);
    }
  }
  d.ids.assign(order.begin(), order.begin() + keep);
  d.probs = softmax_over(z, d.ids);
  if (whole && whole_order) *whole_order = std::move(order);
  return d;
}

int32_t greedy_token(const std::vector<float>& x) {
  int32_t best = -1;
  for (int32_t t = 0; t < static_cast<int32_t>(x.size()); ++t)
    if (x[t] > kNegInf && (best < 0 || x[t] > x[best])) best = t;
  return best;
}

int32_t gumbel_argmax(const std::vector<float>& z, const std::vector<int32_t>& ids, uint64_t seed,
                      uint64_t step, uint32_t purpose_word) {
  if (ids.empty()) return -1;
  bool any_inf = false;
  for (int32_t t : ids) any_inf |= z[t] == kPosInf;
  int32_t best = -1;
  double best_score = 0.0;
  for (int32_t t : ids) {
    if (any_inf && z[t] != kPosInf) continue;
    const double g = detail::gumbel_from_uniform_exact(
        detail::uniform_from_word(detail::random_word(seed, step, purpose_word, t)));
    const double s = any_inf ? g : static_cast<double>(z[t]) + g;
    if (best < 0 || s > best_score || (s == best_score && t < best)) {
      best = t;
      best_score = s;
    }
  }
  return best;
}

LogprobResult logprobs_for(const RowScores& scores, int32_t token, LogprobMode mode,
                           int32_t top_n) {
  // The mode's distribution as (score used for ordering and rank, its tokens in order, their
  // logprobs). Logprobs are taken in log space (z - max - log sum), so that a token far below the
  // maximum keeps its finite value where its probability underflows in double.
  std::vector<float> score;
  std::vector<int32_t> ids;
  std::vector<double> logp;
  if (mode == LogprobMode::kFinal) {
    score.assign(scores.processed.size(), kNegInf);
    if (scores.greedy) {
      if (!scores.final_dist.ids.empty()) score[scores.final_dist.ids[0]] = 0.0f;
    } else {
      for (int32_t t : scores.final_dist.ids) score[t] = scores.processed[t];
    }
    ids = scores.final_dist.ids;
    logp = scores.greedy ? std::vector<double>(ids.size(), 0.0) : log_softmax_over(scores.processed, ids);
  } else {
    score = mode == LogprobMode::kRaw ? scores.raw : scores.processed;
    const bool ordered = mode == LogprobMode::kProcessed && !scores.processed_order.empty();
    ids = ordered ? scores.processed_order : order_tokens(score);
    logp = log_softmax_over(score, ids);
  }

  LogprobResult r;
  r.top_ids.assign(top_n, -1);
  r.top_logprobs.assign(top_n, kNegInf);
  int32_t filled = 0;
  for (size_t i = 0; i < ids.size() && filled < top_n; ++i) {
    if (logp[i] == kNegInf) continue;  // below an +inf score
    r.top_ids[filled] = ids[i];
    r.top_logprobs[filled] = static_cast<float>(logp[i]);
    ++filled;
  }
  if (token < 0) return r;
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == token) r.logprob = static_cast<float>(logp[i]);
  r.rank = 0;
  for (int32_t t = 0; t < static_cast<int32_t>(score.size()); ++t)
    r.rank += score[t] >= score[token];
  return r;
}

namespace {

struct EvaluatedRow {
  RowScores scores;
  int32_t status = 0;
};

// Steps 1-8 of one row, everything but the draw.
EvaluatedRow evaluate_row(const float* logits, const RowContext& ctx) {
  EvaluatedRow e;
  const RequestParams& p = *ctx.params;
  e.scores.raw.assign(logits, logits + ctx.vocab_size);
  for (float& v : e.scores.raw)
    if (std::isnan(v)) v = kNegInf;
  const std::vector<float> x = processed_logits(logits, ctx, &e.status);
  e.scores.greedy = p.temperature == 0.0f;
  if (e.scores.greedy) {
    e.scores.processed = x;
    const int32_t t = greedy_token(x);
    if (t >= 0) e.scores.final_dist = Distribution{{t}, {1.0}};
  } else {
    e.scores.processed = tempered(x, p.temperature);
    e.scores.final_dist = kept_distribution(e.scores.processed, p, &e.scores.processed_order);
  }
  if (e.scores.final_dist.ids.empty()) e.status |= kStatusNoValidToken;
  return e;
}

// The section-2 draw from an evaluated row (greedy: its argmax).
int32_t draw_row(const EvaluatedRow& e, const RowContext& ctx, detail::Draw kind,
                 uint32_t position) {
  if (e.scores.final_dist.ids.empty()) return -1;
  if (e.scores.greedy) return e.scores.final_dist.ids[0];
  return gumbel_argmax(e.scores.processed, e.scores.final_dist.ids, ctx.params->seed, ctx.step,
                       detail::purpose(kind, position));
}

}  // namespace

RowResult sample_row(const float* logits, const RowContext& ctx, LogprobMode mode,
                     bool with_logprobs) {
  const EvaluatedRow e = evaluate_row(logits, ctx);
  RowResult r;
  r.status = e.status;
  r.token = draw_row(e, ctx, detail::Draw::kSampling, ctx.position);
  r.final_dist = e.scores.final_dist;
  if (!with_logprobs) return r;
  LogprobResult lp = logprobs_for(e.scores, r.token, mode, ctx.params->top_logprobs);
  r.logprob = lp.logprob;
  r.rank = lp.rank;
  r.top_ids = std::move(lp.top_ids);
  r.top_logprobs = std::move(lp.top_logprobs);
  return r;
}

VerifyResult verify_request(const VerifyRequest& req, LogprobMode mode) {
  const RequestParams& p = *req.params;
  const int32_t n = static_cast<int32_t>(req.drafts.size());
  const int32_t V = req.vocab_size;
  VerifyResult out;

  // Row j's history holds the drafts before it.
  std::vector<EvaluatedRow> rows;
  std::vector<RowContext> contexts;
  std::vector<TokenCounts> counts;
  counts.reserve(n + 1);
  std::vector<int32_t> output = *req.output;
  for (int32_t j = 0; j <= n; ++j) {
    counts.push_back(count_tokens(*req.prompt, output));
    if (j < n) output.push_back(req.drafts[j]);
  }
  for (int32_t j = 0; j <= n; ++j) {
    RowContext ctx{&p, &counts[j], req.bitmask_rows[j], V, req.step, static_cast<uint32_t>(j)};
    contexts.push_back(ctx);
    rows.push_back(evaluate_row(req.rows[j], ctx));
    out.row_status.push_back(rows.back().status);
  }

  auto emit = [&](int32_t j, int32_t token) {
    out.tokens.push_back(token);
    out.logprobs.push_back(req.with_logprobs ? logprobs_for(rows[j].scores, token, mode, p.top_logprobs)
                                             : LogprobResult{});
  };

  const bool greedy = p.temperature == 0.0f;
  const bool strict = !greedy && req.rule == VerifyRule::kStrict;
  for (int32_t j = 0; j <= n; ++j) {
    const EvaluatedRow& row = rows[j];
    if (row.scores.final_dist.ids.empty()) {  // nothing to emit from this row
      emit(j, -1);
      return out;
    }
    if (greedy || strict) {
      const int32_t target = draw_row(row, contexts[j], detail::Draw::kSampling, j);
      if (j < n && req.drafts[j] == target) {
        emit(j, target);
        ++out.num_accepted;
        continue;
      }
      emit(j, target);
      return out;
    }
    // Random request: p_j as fp32 over the kept set.
    const Distribution& dist = row.scores.final_dist;
    std::vector<float> pj(V, 0.0f);
    for (size_t i = 0; i < dist.ids.size(); ++i) pj[dist.ids[i]] = static_cast<float>(dist.probs[i]);
    if (j == n) {  // all accepted: the bonus token, sampled here
      emit(j, gumbel_argmax(row.scores.processed, dist.ids, p.seed, req.step,
                            detail::purpose(detail::Draw::kCorrection, j)));
      return out;
    }
    const int32_t d = req.drafts[j];
    std::vector<float> qj(V, 0.0f);
    if (req.rule == VerifyRule::kDenseDraftProbs) {
      std::copy(req.q_dense[j], req.q_dense[j] + V, qj.begin());
    } else if (req.rule == VerifyRule::kSparseDraftProbs) {
      const SparseProbs& s = req.q_sparse[j];
      for (size_t i = 0; i < s.ids.size(); ++i) qj[s.ids[i]] = s.probs[i];
    } else {
      qj[d] = 1.0f;
    }
    for (float& q : qj) q = q > 0.0f ? q : 0.0f;  // below 0 or NaN: 0 (semantics.md)
    const float u = detail::uniform_from_word(
        detail::random_word(p.seed, req.step, detail::purpose(detail::Draw::kAcceptance, j), 0));
    if (pj[d] > 0.0f && detail::mul_rn(u, qj[d]) <= pj[d]) {
      emit(j, d);
      ++out.num_accepted;
      continue;
    }
    // Rejected: sample the residual max(0, p - q), computed in fp32.
    const uint32_t purpose = detail::purpose(detail::Draw::kCorrection, j);
    int32_t best = -1;
    double best_score = 0.0;
    for (int32_t t = 0; t < V; ++t) {
      const float r = detail::sub_rn(pj[t], qj[t]);
      if (!(r > 0.0f)) continue;
      const double s = std::log(static_cast<double>(r)) +
                       detail::gumbel_from_uniform_exact(
                           detail::uniform_from_word(detail::random_word(p.seed, req.step, purpose, t)));
      if (best < 0 || s > best_score) {
        best = t;
        best_score = s;
      }
    }
    if (best < 0) best = gumbel_argmax(row.scores.processed, dist.ids, p.seed, req.step, purpose);
    emit(j, best);
    return out;
  }
  return out;
}

void top_k_row(const float* x, int32_t n, int32_t k, int32_t* ids, float* values) {
  std::vector<uint64_t> keys(static_cast<size_t>(n));
  for (int32_t t = 0; t < n; ++t) keys[t] = detail::pack_key(detail::is_nan(x[t]) ? detail::neg_inf() : x[t], t);
  std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<uint64_t>());
  for (int32_t i = 0; i < k; ++i) {
    ids[i] = detail::key_token(keys[i]);
    if (values) values[i] = detail::key_value(keys[i]);
  }
}

}  // namespace sonic::ref
