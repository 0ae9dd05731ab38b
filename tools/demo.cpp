// `sonic demo`: a heterogeneous batch (greedy and random rows, every parameter in use somewhere,
// synthetic but realistic logits) sampled in one call, a speculative-verification call with every
// acceptance rule, and the mean time of a step.
#include "demo.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "buffers.hpp"
#include "sonic/sonic.hpp"

namespace sonic_tools {
namespace {

using sonic::Backend;
using sonic::DType;
using sonic::LogprobMode;
using sonic::RequestParams;
using sonic::VerifyRule;

constexpr int32_t kTopCapacity = 5;     // SamplerConfig::max_top_logprobs
constexpr int32_t kFinalCapacity = 64;  // SamplerConfig::max_final_entries
constexpr int32_t kMaxDrafts = 4;
constexpr int32_t kSparseDraftEntries = 16;
constexpr int32_t kRecipes = 12;  // row r of the batch follows recipe r % kRecipes

// ---------------------------------------------------------------------------------------------
// Synthetic data

// splitmix64 with Box-Muller normals: small, and the same numbers on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }  // [0, 1)
  int32_t below(int32_t n) { return int32_t(next() % uint64_t(n)); }
  double normal() {
    const double u1 = std::max(uniform(), 0x1.0p-53);
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  uint64_t state_;
};

std::vector<int32_t> distinct_tokens(Rng& rng, int32_t count, int32_t vocab,
                                     const std::vector<int32_t>& avoid = {}) {
  std::vector<int32_t> out;
  while (int32_t(out.size()) < count) {
    const int32_t t = rng.below(vocab);
    if (std::find(out.begin(), out.end(), t) == out.end() &&
        std::find(avoid.begin(), avoid.end(), t) == avoid.end())
      out.push_back(t);
  }
  return out;
}

// A confident LM-head row: 2*N(0,1) background, a few "hot" tokens well above it. The hottest
// token holds about two thirds of the mass at V = 32000.
std::vector<float> peaked_logits(Rng& rng, int32_t vocab, const std::vector<int32_t>& hot) {
  static const float kHot[] = {14.0f, 12.5f, 11.0f, 10.0f};
  std::vector<float> x(vocab);
  for (float& v : x) v = float(2.0 * rng.normal());
  for (size_t i = 0; i < hot.size(); ++i) x[hot[i]] = kHot[i % 4];
  return x;
}

// An uncertain row: N(0,1) everywhere, no token stands out.
std::vector<float> flat_logits(Rng& rng, int32_t vocab) {
  std::vector<float> x(vocab);
  for (float& v : x) v = float(rng.normal());
  return x;
}

// A draft model's distribution for a target row: the row blurred by noise, at temperature T.
std::vector<double> draft_distribution(Rng& rng, const std::vector<float>& target, float t) {
  std::vector<double> q(target.size());
  double m = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = (double(target[i]) + 1.5 * rng.normal()) / t;
    m = std::max(m, q[i]);
  }
  double sum = 0.0;
  for (double& v : q) sum += (v = std::exp(v - m));
  for (double& v : q) v /= sum;
  return q;
}

int32_t draw(Rng& rng, const std::vector<double>& probs) {
  double u = rng.uniform();
  for (size_t i = 0; i < probs.size(); ++i) {
    if (u < probs[i]) return int32_t(i);
    u -= probs[i];
  }
  return int32_t(probs.size()) - 1;
}

// fp32 -> bf16 / fp16, round to nearest even; NaN stays NaN.
uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

uint16_t to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (ax >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: inf
  if (ax < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    float a;
    std::memcpy(&a, &ax, 4);
    return uint16_t(sign | uint32_t(std::lrint(a * 16777216.0f)));  // a * 2^24 is exact
  }
  uint32_t r = ax - (112u << 23);  // rebias the exponent from 127 to 15
  r += 0xfffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}

size_t dtype_size(DType d) { return d == DType::kF32 ? 4 : 2; }

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kF32:
      return "f32";
    case DType::kBF16:
      return "bf16";
    case DType::kF16:
      return "f16";
  }
  return "?";
}

const char* mode_name(LogprobMode m) {
  switch (m) {
    case LogprobMode::kRaw:
      return "raw";
    case LogprobMode::kProcessed:
      return "processed";
    case LogprobMode::kFinal:
      return "final";
  }
  return "?";
}

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kAuto:
      return "auto";
    case Backend::kCpu:
      return "cpu";
    case Backend::kCuda:
      return "cuda";
  }
  return "?";
}

// A [rows, stride] logits matrix in the chosen dtype. Columns from vocab to cols are the padding
// of an LM head rounded up to 128 ids: they hold large values, and the sampler must mask them.
struct LogitsMatrix {
  Array<uint8_t> bytes;
  sonic::LogitsView view;
};

LogitsMatrix pack_logits(const std::vector<const std::vector<float>*>& rows, int32_t vocab,
                         DType dtype, bool on_device) {
  const int64_t cols = (int64_t(vocab) + 127) / 128 * 128;
  const size_t elem = dtype_size(dtype);
  LogitsMatrix m{Array<uint8_t>(rows.size() * size_t(cols) * elem, on_device), {}};
  for (size_t r = 0; r < rows.size(); ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const float v = c < vocab ? (*rows[r])[size_t(c)] : 30.0f;
      uint8_t* dst = m.bytes.host().data() + (r * size_t(cols) + size_t(c)) * elem;
      if (dtype == DType::kF32) {
        std::memcpy(dst, &v, 4);
      } else {
        const uint16_t h = dtype == DType::kBF16 ? to_bf16(v) : to_f16(v);
        std::memcpy(dst, &h, 2);
      }
    }
  }
  m.bytes.upload();
  m.view.data = m.bytes.data();
  m.view.dtype = dtype;
  m.view.rows = int64_t(rows.size());
  m.view.cols = cols;
  m.view.row_stride = cols;
  return m;
}

// ---------------------------------------------------------------------------------------------
// The batch

struct RowPlan {
  const char* logits_kind = "peaked";
  RequestParams params;
  std::vector<float> logits;  // vocab values
  std::vector<int32_t> prompt;
  bool grammar = false;                  // this row uses a grammar-bitmask row
  std::vector<int32_t> grammar_forbids;  // tokens its mask must clear
};

RowPlan make_row(int32_t r, int32_t vocab, uint64_t seed, Rng& rng) {
  RowPlan p;
  const int32_t recipe = r % kRecipes;
  const bool flat = recipe == 3 || recipe == 7 || recipe == 11;
  const std::vector<int32_t> hot = distinct_tokens(rng, 4, vocab);
  p.logits = flat ? flat_logits(rng, vocab) : peaked_logits(rng, vocab, hot);
  p.logits_kind = flat ? "flat" : "peaked";
  // The prompt repeats the two hottest tokens, so that penalties have something to act on.
  p.prompt = distinct_tokens(rng, 12, vocab, hot);
  p.prompt.insert(p.prompt.end(), {hot[0], hot[1], hot[0]});

  RequestParams& q = p.params;
  q.seed = seed * 1000003ull + uint64_t(r);
  switch (recipe) {
    case 0:  // plain greedy
      q.temperature = 0.0f;
      break;
    case 1:  // greedy after a grammar mask, a repetition penalty and a logit bias
      q.temperature = 0.0f;
      q.repetition_penalty = 1.3f;
      q.logit_bias = {{hot[3], 3.5f}, {rng.below(vocab), -2.0f}, {rng.below(vocab), 1.0f}};
      q.top_logprobs = 3;
      p.grammar = true;
      break;
    case 2:
      q.temperature = 0.7f;
      q.top_k = 50;
      q.top_p = 0.9f;
      break;
    case 3:
      q.temperature = 1.0f;
      q.min_p = 0.05f;
      break;
    case 4:  // SGLang's joint top-p together with top-k and min-p
      q.temperature = 0.8f;
      q.top_k = 40;
      q.top_p = 0.95f;
      q.top_p_joint = true;
      q.min_p = 0.02f;
      break;
    case 5:  // all three penalties, both scope flags flipped from their defaults
      q.temperature = 1.0f;
      q.repetition_penalty = 1.1f;
      q.repetition_output_only = true;
      q.frequency_penalty = 0.2f;
      q.presence_penalty = 0.1f;
      q.penalties_include_prompt = true;
      q.top_logprobs = 5;
      break;
    case 6:  // the two hottest tokens banned, the third pushed up
      q.temperature = 1.2f;
      q.banned_tokens = {hot[0], hot[1], rng.below(vocab)};
      q.logit_bias = {{hot[2], 2.0f}};
      break;
    case 7:  // a 256-token allowed list
      q.temperature = 0.9f;
      q.top_p = 0.8f;
      q.allowed_tokens = distinct_tokens(rng, std::min(256, vocab / 4), vocab);
      q.top_logprobs = 3;
      break;
    case 8:
      q.temperature = 0.6f;
      q.top_k = 10;
      q.top_logprobs = 5;
      p.grammar = true;
      break;
    case 9:  // NaN in the input: reported in the status, the row is still sampled
      q.temperature = 1.0f;
      q.top_p = 0.95f;
      for (int32_t t : distinct_tokens(rng, 3, vocab, hot))
        p.logits[size_t(t)] = std::numeric_limits<float>::quiet_NaN();
      p.logits_kind = "nan";
      break;
    case 10:  // the allowed list and the grammar mask leave nothing: token -1
      q.temperature = 1.0f;
      q.allowed_tokens = distinct_tokens(rng, 3, vocab);
      p.grammar = true;
      p.grammar_forbids = q.allowed_tokens;
      break;
    default:  // untruncated sampling of the whole vocabulary
      q.temperature = 1.0f;
      q.top_logprobs = 2;
      break;
  }
  return p;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The parameters in short form; the legend under the table spells them out.
std::string describe(const RequestParams& q, bool grammar) {
  std::string s;
  auto add = [&s](const std::string& item) { s += (s.empty() ? "" : " ") + item; };
  add(q.temperature == 0.0f ? "greedy" : "T=" + num(q.temperature));
  if (q.top_k > 0) add("k=" + std::to_string(q.top_k));
  if (q.top_p < 1.0f) add((q.top_p_joint ? "jp=" : "p=") + num(q.top_p));
  if (q.min_p > 0.0f) add("minp=" + num(q.min_p));
  if (q.repetition_penalty != 1.0f)
    add("rep=" + num(q.repetition_penalty) + (q.repetition_output_only ? "(out)" : ""));
  if (q.frequency_penalty != 0.0f) add("freq=" + num(q.frequency_penalty));
  if (q.presence_penalty != 0.0f) add("pres=" + num(q.presence_penalty));
  if ((q.frequency_penalty != 0.0f || q.presence_penalty != 0.0f) && q.penalties_include_prompt)
    add("(+prompt)");
  if (!q.logit_bias.empty()) add("bias=" + std::to_string(q.logit_bias.size()));
  if (!q.banned_tokens.empty()) add("ban=" + std::to_string(q.banned_tokens.size()));
  if (!q.allowed_tokens.empty()) add("allow=" + std::to_string(q.allowed_tokens.size()));
  if (grammar) add("mask");
  if (q.top_logprobs > 0) add("top=" + std::to_string(q.top_logprobs));
  return s;
}

std::string status_text(int32_t status) {
  if (status == sonic::kStatusOk) return "ok";
  std::string s;
  auto add = [&s](const char* word) { s += (s.empty() ? "" : "+") + std::string(word); };
  if (status & sonic::kStatusNaN) add("nan");
  if (status & sonic::kStatusNoValidToken) add("no-valid");
  if (status & sonic::kStatusInvalidInput) add("invalid-input");
  if (status & sonic::kStatusHistoryFull) add("history-full");
  const int32_t known = sonic::kStatusNaN | sonic::kStatusNoValidToken |
                        sonic::kStatusInvalidInput | sonic::kStatusHistoryFull;
  if (status & ~known) add(("0x" + std::to_string(status & ~known)).c_str());
  return s;
}

std::string logprob_text(float lp) {
  if (std::isinf(lp)) return lp < 0 ? "-inf" : "inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", double(lp));
  return buf;
}

std::string tokens_text(const int32_t* tokens, int32_t count) {
  std::string s;
  for (int32_t i = 0; i < count; ++i) s += (i ? " " : "") + std::to_string(tokens[i]);
  return s.empty() ? "-" : s;
}

// ---------------------------------------------------------------------------------------------
// Verification requests

struct VerifyPlan {
  const char* rule_name = "";
  VerifyRule rule = VerifyRule::kOneHot;
  RequestParams params;
  std::vector<int32_t> prompt;
  std::vector<std::vector<float>> rows;     // n + 1 target rows
  std::vector<int32_t> drafts;              // n
  std::vector<std::vector<float>> q_dense;  // n rows (dense rule)
  std::vector<std::vector<int32_t>> q_ids;  // n lists (sparse rule)
  std::vector<std::vector<float>> q_probs;
};

std::vector<VerifyPlan> make_verify_requests(int32_t vocab, uint64_t seed, Rng& rng) {
  struct Shape {
    const char* name;
    VerifyRule rule;
    int32_t drafts;
  };
  const Shape shapes[] = {{"greedy", VerifyRule::kOneHot, 3},
                          {"dense-q", VerifyRule::kDenseDraftProbs, 4},
                          {"one-hot", VerifyRule::kOneHot, 2},
                          {"strict", VerifyRule::kStrict, 3},
                          {"sparse-q", VerifyRule::kSparseDraftProbs, 3}};
  std::vector<VerifyPlan> plans;
  for (const Shape& shape : shapes) {
    VerifyPlan v;
    v.rule_name = shape.name;
    v.rule = shape.rule;
    v.params.seed = seed * 7919ull + plans.size();
    v.prompt = distinct_tokens(rng, 8, vocab);
    std::vector<std::vector<int32_t>> hot;
    for (int32_t j = 0; j <= shape.drafts; ++j) {
      hot.push_back(distinct_tokens(rng, 4, vocab));
      v.rows.push_back(peaked_logits(rng, vocab, hot.back()));
    }
    switch (plans.size()) {
      case 0:  // greedy: two drafts match the argmax, the third does not
        v.params.temperature = 0.0f;
        v.drafts = {hot[0][0], hot[1][0], hot[2][1]};
        break;
      case 1:  // drafts drawn from a dense draft distribution q
        v.params.temperature = 0.8f;
        v.params.top_p = 0.95f;
        for (int32_t j = 0; j < shape.drafts; ++j) {
          const std::vector<double> q = draft_distribution(rng, v.rows[size_t(j)], 0.8f);
          v.drafts.push_back(draw(rng, q));
          v.q_dense.emplace_back(q.begin(), q.end());
        }
        break;
      case 2:  // n-gram drafter: no q; the first draft is likely, the second is not
        v.params.temperature = 1.0f;
        v.params.top_k = 50;
        v.drafts = {hot[0][0], distinct_tokens(rng, 1, vocab, hot[1])[0]};
        break;
      case 3:  // strict: accept while the draft equals the row's own sample
        v.params.temperature = 1.0f;
        v.params.top_k = 20;
        for (int32_t j = 0; j < shape.drafts; ++j) v.drafts.push_back(hot[size_t(j)][0]);
        break;
      default: {  // a draft model's sparse final distribution (its top 16, renormalised)
        v.params.temperature = 0.9f;
        v.params.min_p = 0.05f;
        for (int32_t j = 0; j < shape.drafts; ++j) {
          const std::vector<double> q = draft_distribution(rng, v.rows[size_t(j)], 0.9f);
          std::vector<int32_t> ids(q.size());
          for (size_t t = 0; t < ids.size(); ++t) ids[t] = int32_t(t);
          std::partial_sort(
              ids.begin(), ids.begin() + kSparseDraftEntries, ids.end(),
              [&q](int32_t a, int32_t b) { return q[a] > q[b] || (q[a] == q[b] && a < b); });
          ids.resize(kSparseDraftEntries);
          std::vector<double> kept;
          double sum = 0.0;
          for (int32_t t : ids) sum += q[size_t(t)];
          for (int32_t t : ids) kept.push_back(q[size_t(t)] / sum);
          v.drafts.push_back(ids[size_t(draw(rng, kept))]);
          v.q_ids.push_back(ids);
          v.q_probs.emplace_back(kept.begin(), kept.end());
        }
        break;
      }
    }
    plans.push_back(std::move(v));
  }
  return plans;
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

int run_demo(const DemoOptions& o) {
  const int32_t V = o.vocab;
  const int32_t R = o.rows;
  Rng rng(o.seed);

  std::vector<RowPlan> rows;
  for (int32_t r = 0; r < R; ++r) rows.push_back(make_row(r, V, o.seed, rng));
  std::vector<VerifyPlan> vplans = make_verify_requests(V, o.seed, rng);
  const int32_t B = int32_t(vplans.size());
  int32_t verify_rows = 0, num_drafts = 0;
  for (const VerifyPlan& v : vplans) {
    verify_rows += int32_t(v.rows.size());
    num_drafts += int32_t(v.drafts.size());
  }

  sonic::SamplerConfig config;
  config.backend = o.backend;
  config.vocab_size = V;
  config.max_slots = R + B;
  config.max_rows = std::max(R, verify_rows);
  config.max_drafts = kMaxDrafts;
  config.max_top_logprobs = kTopCapacity;
  config.max_final_entries = kFinalCapacity;
  sonic::Sampler sampler(config);
  const Backend backend = sampler.backend();
  // The CPU backend works on host memory; the CUDA backend on device memory. Every array below
  // is an Array<T>, which keeps a host copy and, for CUDA, a device copy that the sampler sees.
  const bool dev = backend == Backend::kCuda;

  std::printf("sonic demo: backend=%s V=%d rows=%d dtype=%s logprobs=%s seed=%llu\n\n",
              backend_name(backend), V, R, dtype_name(o.dtype), mode_name(o.logprob_mode),
              static_cast<unsigned long long>(o.seed));

  // Requests: row r of the batch is slot r; the verification requests take the slots after them.
  for (int32_t r = 0; r < R; ++r)
    sampler.admit(r, rows[size_t(r)].params, rows[size_t(r)].prompt.data(),
                  int64_t(rows[size_t(r)].prompt.size()));
  for (int32_t b = 0; b < B; ++b)
    sampler.admit(R + b, vplans[size_t(b)].params, vplans[size_t(b)].prompt.data(),
                  int64_t(vplans[size_t(b)].prompt.size()));

  // ---- single-step inputs
  std::vector<const std::vector<float>*> row_logits;
  for (const RowPlan& p : rows) row_logits.push_back(&p.logits);
  LogitsMatrix logits = pack_logits(row_logits, V, o.dtype, dev);

  Array<int32_t> slots(size_t(R), dev);
  for (int32_t r = 0; r < R; ++r) slots[size_t(r)] = r;
  slots.upload();

  // Grammar bitmask (xgrammar's layout), one row per masked request, found through row_index.
  const int64_t words = (int64_t(V) + 31) / 32;
  int32_t masked = 0;
  for (const RowPlan& p : rows) masked += p.grammar ? 1 : 0;
  Array<int32_t> mask(size_t(std::max(masked, 1)) * size_t(words), dev);
  Array<int32_t> mask_index(size_t(R), dev, -1);
  for (int32_t r = 0, m = 0; r < R; ++r) {
    const RowPlan& p = rows[size_t(r)];
    if (!p.grammar) continue;
    int32_t* w = mask.host().data() + size_t(m) * size_t(words);
    for (int32_t t = 0; t < V; ++t)
      if (rng.uniform() < 0.5) w[t / 32] |= int32_t(1u << (t % 32));
    for (int32_t t : p.grammar_forbids) w[t / 32] &= ~int32_t(1u << (t % 32));
    mask_index[size_t(r)] = m++;
  }
  mask.upload();
  mask_index.upload();
  sonic::BitmaskView bitmask;
  bitmask.data = mask.data();
  bitmask.rows = std::max(masked, 1);
  bitmask.words = words;
  bitmask.row_stride = words;
  bitmask.row_index = mask_index.data();

  // ---- single-step outputs
  Array<int32_t> tokens(size_t(R), dev), status(size_t(R), dev), rank(size_t(R), dev);
  Array<float> logprob(size_t(R), dev);
  Array<int32_t> top_ids(size_t(R) * kTopCapacity, dev);
  Array<float> top_lp(size_t(R) * kTopCapacity, dev);
  Array<int32_t> final_ids(size_t(R) * kFinalCapacity, dev), final_count(size_t(R), dev);
  Array<float> final_probs(size_t(R) * kFinalCapacity, dev);
  sonic::SampleOutputs out;
  out.tokens = tokens.data();
  out.status = status.data();
  out.logprob = logprob.data();
  out.rank = rank.data();
  out.top_ids = top_ids.data();
  out.top_logprobs = top_lp.data();
  out.top_stride = kTopCapacity;
  out.final_ids = final_ids.data();
  out.final_probs = final_probs.data();
  out.final_count = final_count.data();
  out.final_stride = kFinalCapacity;

  sonic::CallOptions options;
  options.logprob_mode = o.logprob_mode;

  // ---- the first step, printed
  sampler.sample(logits.view, slots.data(), bitmask, out, options);
  synchronize(dev);
  for (auto* a : {&tokens, &status, &rank, &top_ids, &final_ids, &final_count}) a->download();
  for (auto* a : {&logprob, &top_lp, &final_probs}) a->download();

  std::vector<std::string> params_text;
  size_t params_width = 6;
  for (const RowPlan& p : rows) {
    params_text.push_back(describe(p.params, p.grammar));
    params_width = std::max(params_width, params_text.back().size());
  }
  std::printf("step 0 (%d rows, one call; logprob, rank and top-N in %s mode):\n", R,
              mode_name(o.logprob_mode));
  std::printf("%4s %4s  %-6s  %-*s %7s %10s %6s %5s  %-8s  %s\n", "row", "slot", "logits",
              int(params_width), "params", "token", "logprob", "rank", "kept", "status",
              "top-N (id:logprob)");
  bool sane = true;
  for (int32_t r = 0; r < R; ++r) {
    const size_t i = size_t(r);
    std::string top;
    for (int32_t k = 0; k < std::min(rows[i].params.top_logprobs, 3); ++k) {
      const int32_t id = top_ids[i * kTopCapacity + size_t(k)];
      if (id < 0) break;
      top += (k ? " " : "") + std::to_string(id) + ":" +
             logprob_text(top_lp[i * kTopCapacity + size_t(k)]);
    }
    if (rows[i].params.top_logprobs > 3) top += " ...";
    std::printf("%4d %4d  %-6s  %-*s %7d %10s %6d %5d  %-8s  %s\n", r, r, rows[i].logits_kind,
                int(params_width), params_text[i].c_str(), tokens[i],
                logprob_text(logprob[i]).c_str(), rank[i], final_count[i],
                status_text(status[i]).c_str(), top.c_str());
    if (tokens[i] < -1 || tokens[i] >= V) sane = false;
  }
  std::printf(
      "  params: T temperature, k top-k, p top-p, jp joint top-p, minp min-p, rep repetition\n"
      "  ((out): output only), freq/pres frequency/presence ((+prompt): counting the prompt),\n"
      "  bias/ban/allow entries, mask grammar bitmask, top top-N logprobs; kept: size of the\n"
      "  sparse final distribution (written when <= %d)\n\n",
      kFinalCapacity);

  // ---- verification: packed target rows, drafts and draft probabilities
  std::vector<const std::vector<float>*> target_rows;
  for (const VerifyPlan& v : vplans)
    for (const std::vector<float>& row : v.rows) target_rows.push_back(&row);
  LogitsMatrix vlogits = pack_logits(target_rows, V, o.dtype, dev);
  Array<int32_t> cu_rows(size_t(B) + 1, dev), vslots(size_t(B), dev), rules(size_t(B), dev);
  Array<int32_t> drafts(size_t(num_drafts), dev);
  Array<float> q_dense(size_t(num_drafts) * size_t(V), dev);
  Array<int32_t> q_ids(size_t(num_drafts) * kSparseDraftEntries, dev, -1);
  Array<float> q_probs(size_t(num_drafts) * kSparseDraftEntries, dev);
  Array<int32_t> q_count(size_t(num_drafts), dev);
  for (int32_t b = 0, row = 0, d = 0; b < B; ++b) {
    const VerifyPlan& v = vplans[size_t(b)];
    cu_rows[size_t(b)] = row;
    vslots[size_t(b)] = R + b;
    rules[size_t(b)] = int32_t(v.rule);
    for (size_t j = 0; j < v.drafts.size(); ++j, ++d) {  // draft d = cu_rows[b] - b + j
      drafts[size_t(d)] = v.drafts[j];
      if (!v.q_dense.empty())
        std::copy(v.q_dense[j].begin(), v.q_dense[j].end(),
                  q_dense.host().begin() + std::ptrdiff_t(size_t(d) * size_t(V)));
      if (!v.q_ids.empty()) {
        std::copy(v.q_ids[j].begin(), v.q_ids[j].end(),
                  q_ids.host().begin() + std::ptrdiff_t(size_t(d) * kSparseDraftEntries));
        std::copy(v.q_probs[j].begin(), v.q_probs[j].end(),
                  q_probs.host().begin() + std::ptrdiff_t(size_t(d) * kSparseDraftEntries));
        q_count[size_t(d)] = int32_t(v.q_ids[j].size());
      }
    }
    row += int32_t(v.rows.size());
    cu_rows[size_t(b) + 1] = row;
  }
  for (auto* a : {&cu_rows, &vslots, &rules, &drafts, &q_ids, &q_count}) a->upload();
  for (auto* a : {&q_dense, &q_probs}) a->upload();

  sonic::VerifyInputs vin;
  vin.num_requests = B;
  vin.cu_rows = cu_rows.data();
  vin.slots = vslots.data();
  vin.draft_tokens = drafts.data();
  vin.num_drafts_capacity = num_drafts;
  vin.rules = rules.data();
  vin.draft_probs.dense = q_dense.data();
  vin.draft_probs.dense_rows = num_drafts;
  vin.draft_probs.dense_stride = V;
  vin.draft_probs.sparse_ids = q_ids.data();
  vin.draft_probs.sparse_probs = q_probs.data();
  vin.draft_probs.sparse_count = q_count.data();
  vin.draft_probs.sparse_rows = num_drafts;
  vin.draft_probs.sparse_stride = kSparseDraftEntries;

  const int64_t out_stride = kMaxDrafts + 1;
  Array<int32_t> vtokens(size_t(B) * size_t(out_stride), dev), accepted(size_t(B), dev);
  Array<int32_t> vstatus(size_t(verify_rows), dev), vrank(size_t(B) * size_t(out_stride), dev);
  Array<float> vlogprob(size_t(B) * size_t(out_stride), dev);
  sonic::VerifyOutputs vout;
  vout.tokens = vtokens.data();
  vout.num_accepted = accepted.data();
  vout.out_stride = out_stride;
  vout.status = vstatus.data();
  vout.logprob = vlogprob.data();
  vout.rank = vrank.data();

  // A backend that cannot verify yet says so (kUnsupported, before anything runs); the demo
  // reports it and goes on.
  std::string verify_skipped;
  double verify_ms = 0.0;
  try {
    const auto verify_start = std::chrono::steady_clock::now();
    sampler.verify(vlogits.view, vin, sonic::BitmaskView{}, vout, options);
    synchronize(dev);
    verify_ms = ms_since(verify_start);
  } catch (const sonic::Error& e) {
    if (e.code() != sonic::ErrorCode::kUnsupported) throw;
    verify_skipped = e.what();
  }
  if (!verify_skipped.empty()) {
    std::printf("verification skipped: %s\n\n", verify_skipped.c_str());
  } else {
    for (auto* a : {&vtokens, &accepted, &vstatus, &vrank}) a->download();
    vlogprob.download();
    std::printf("verification (%d requests, %d target rows, %d drafts, one call):\n", B,
                verify_rows, num_drafts);
    std::printf("%4s %4s  %-9s %-16s %-28s %-28s %8s  %s\n", "req", "slot", "rule", "params",
                "drafts", "emitted", "accepted", "status");
    for (int32_t b = 0; b < B; ++b) {
      const VerifyPlan& v = vplans[size_t(b)];
      const int32_t* emitted = vtokens.host().data() + size_t(b) * size_t(out_stride);
      int32_t n_emitted = 0;
      while (n_emitted < out_stride && emitted[n_emitted] != -1) ++n_emitted;
      int32_t st = 0;
      for (int32_t row = cu_rows[size_t(b)]; row < cu_rows[size_t(b) + 1]; ++row)
        st |= vstatus[size_t(row)];
      const std::string acc =
          std::to_string(accepted[size_t(b)]) + "/" + std::to_string(v.drafts.size());
      std::printf("%4d %4d  %-9s %-16s %-28s %-28s %8s  %s\n", b, R + b, v.rule_name,
                  describe(v.params, false).c_str(),
                  tokens_text(v.drafts.data(), int32_t(v.drafts.size())).c_str(),
                  tokens_text(emitted, n_emitted).c_str(), acc.c_str(), status_text(st).c_str());
      if (accepted[size_t(b)] < 0 || accepted[size_t(b)] > int32_t(v.drafts.size())) sane = false;
    }
    std::printf("  emitted: the accepted drafts, then one correction or bonus token\n\n");
  }

  // ---- timed steps: the same batch again; histories grow and step counters advance
  const int32_t steps = o.steps > 0 ? o.steps : (dev ? 50 : 5);
  const auto start = std::chrono::steady_clock::now();
  for (int32_t s = 0; s < steps; ++s)
    sampler.sample(logits.view, slots.data(), bitmask, out, options);
  synchronize(dev);
  const double step_ms = ms_since(start) / steps;

  char verify_text[32] = "skipped";
  if (verify_skipped.empty()) std::snprintf(verify_text, sizeof verify_text, "%.2f ms", verify_ms);
  std::printf(
      "sonic demo: backend=%s rows=%d V=%d verify_requests=%d mean %.2f ms/step over %d "
      "step%s (verify %s)\n",
      backend_name(backend), R, V, B, step_ms, steps, steps == 1 ? "" : "s", verify_text);
  if (!sane) {
    std::fprintf(stderr, "sonic demo: a token or an accepted count is out of range\n");
    return 1;
  }
  return 0;
}

}  // namespace sonic_tools
