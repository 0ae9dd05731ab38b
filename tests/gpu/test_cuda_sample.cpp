// The CUDA backend against the CPU reference: token for token on random heterogeneous batches
// (every disagreement must be a near-tie, and is printed), CUDA-graph replay, and bad rows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <tuple>
#include <random>
#include <vector>

#include "gpu/gpu_harness.hpp"
#include "common/random.hpp"
#include "ref/reference.hpp"

namespace sonic_gpu {
namespace {

constexpr int32_t kTopN = 5;
constexpr int32_t kFinalCap = 64;

struct HostOutputs {
  std::vector<int32_t> tokens, status, rank, top_ids, final_ids, final_count;
  std::vector<float> logprob, top_logprobs, final_probs;
};

sonic::SamplerConfig make_config(sonic::Backend backend, int32_t V, int32_t rows) {
  sonic::SamplerConfig c;
  c.backend = backend;
  c.vocab_size = V;
  c.max_slots = rows + 8;
  c.max_rows = rows + 8;
  c.max_history = 4096;
  c.max_top_logprobs = kTopN;
  c.max_final_entries = kFinalCap;
  c.cpu_threads = 0;  // the reference's rows on every core (the suite's time is mostly the reference)
  return c;
}

// Which outputs a call asks for. Rank and top-N of truncated rows come from stage 2's sorted prefix
// (raw-mode ones only for rows without rules); other rows asking for them take the exact path.
// kLogprobOnly: tokens, status and the token's logprob (no final distribution, which sends
// untruncated rows to the exact path).
enum class Outputs { kAll, kNoRankTop, kTokensOnly, kLogprobOnly };

void restrict_outputs(sonic::SampleOutputs& o, Outputs what) {
  if (what == Outputs::kAll) return;
  o.rank = nullptr;
  o.top_ids = nullptr;
  o.top_logprobs = nullptr;
  if (what == Outputs::kNoRankTop) return;
  if (what != Outputs::kLogprobOnly) o.logprob = nullptr;
  o.final_ids = nullptr;
  o.final_probs = nullptr;
  o.final_count = nullptr;
}

// Runs one batch on a sampler; host arrays for the CPU backend, device arrays for CUDA. With
// row_pad > 0 the rows lie row_pad elements apart beyond V (row_stride = V + row_pad), the gaps
// holding +100, which would win every row that read them.
HostOutputs run(sonic::Sampler& s, const Batch& b, const std::vector<int32_t>& slots, sonic::LogprobMode mode,
                const sonic::CallOptions& base = {}, Outputs what = Outputs::kAll, int64_t row_pad = 0) {
  const int32_t R = b.rows;
  HostOutputs h;
  h.tokens.assign(R, -7);
  h.status.assign(R, -7);
  h.rank.assign(R, -7);
  h.logprob.assign(R, NAN);
  h.top_ids.assign(R * kTopN, -7);
  h.top_logprobs.assign(R * kTopN, NAN);
  h.final_ids.assign(R * kFinalCap, -7);
  h.final_probs.assign(R * kFinalCap, NAN);
  h.final_count.assign(R, -7);
  sonic::CallOptions opt = base;
  opt.logprob_mode = mode;
  // Logits in their dtype.
  std::vector<uint16_t> half(b.logits.size());
  for (size_t i = 0; i < b.logits.size(); ++i)
    half[i] = b.dtype == sonic::DType::kBF16 ? static_cast<uint16_t>([&] {
      uint32_t bits;
      std::memcpy(&bits, &b.logits[i], 4);
      return bits >> 16;
    }())
                                             : float_to_f16(b.logits[i]);
  const void* host_logits = b.dtype == sonic::DType::kF32 ? static_cast<const void*>(b.logits.data())
                                                          : static_cast<const void*>(half.data());
  const size_t elem = b.dtype == sonic::DType::kF32 ? 4 : 2;
  const int64_t stride = b.cols + row_pad;
  std::vector<char> padded;
  if (row_pad > 0) {
    const float big = 100.0f;
    uint32_t big_bits;
    std::memcpy(&big_bits, &big, 4);
    const uint16_t big_half = b.dtype == sonic::DType::kBF16 ? static_cast<uint16_t>(big_bits >> 16) : float_to_f16(big);
    padded.resize(static_cast<size_t>(R) * stride * elem);
    for (int64_t i = 0; i < static_cast<int64_t>(R) * stride; ++i) {
      if (elem == 4) std::memcpy(padded.data() + i * 4, &big, 4);
      else std::memcpy(padded.data() + i * 2, &big_half, 2);
    }
    for (int32_t r = 0; r < R; ++r)
      std::memcpy(padded.data() + static_cast<size_t>(r) * stride * elem,
                  static_cast<const char*>(host_logits) + static_cast<size_t>(r) * b.cols * elem, b.cols * elem);
    host_logits = padded.data();
  }
  const size_t total = static_cast<size_t>(R) * stride * elem;
  sonic::LogitsView lv{host_logits, b.dtype, R, b.cols, stride};
  sonic::BitmaskView bm;
  if (!b.bitmask.empty()) bm = sonic::BitmaskView{b.bitmask.data(), R, b.words, b.words, b.bitmask_index.data()};
  if (s.backend() == sonic::Backend::kCpu) {
    sonic::SampleOutputs o;
    o.tokens = h.tokens.data();
    o.status = h.status.data();
    o.logprob = h.logprob.data();
    o.rank = h.rank.data();
    o.top_ids = h.top_ids.data();
    o.top_logprobs = h.top_logprobs.data();
    o.top_stride = kTopN;
    o.final_ids = h.final_ids.data();
    o.final_probs = h.final_probs.data();
    o.final_count = h.final_count.data();
    o.final_stride = kFinalCap;
    restrict_outputs(o, what);
    s.sample(lv, slots.data(), bm, o, opt);
    return h;
  }
  DeviceBuffer<char> d_logits(total);
  cudaMemcpy(d_logits.get(), host_logits, total, cudaMemcpyHostToDevice);
  DeviceBuffer<int32_t> d_slots(R), d_mask(b.bitmask.size()), d_mask_index(b.bitmask_index.size());
  d_slots.upload(slots);
  if (!b.bitmask.empty()) {
    d_mask.upload(b.bitmask);
    d_mask_index.upload(b.bitmask_index);
    bm.data = d_mask.get();
    bm.row_index = d_mask_index.get();
  }
  lv.data = d_logits.get();
  DeviceBuffer<int32_t> tokens(R), status(R), rank(R), top_ids(R * kTopN), final_ids(R * kFinalCap), final_count(R);
  DeviceBuffer<float> logprob(R), top_lp(R * kTopN), final_probs(R * kFinalCap);
  // Poison every output, so that an output the library should write but does not shows up, and
  // outputs not asked for are never read uninitialised.
  tokens.upload(h.tokens);
  status.upload(h.status);
  rank.upload(h.rank);
  logprob.upload(h.logprob);
  top_ids.upload(h.top_ids);
  top_lp.upload(h.top_logprobs);
  final_ids.upload(h.final_ids);
  final_probs.upload(h.final_probs);
  final_count.upload(h.final_count);
  sonic::SampleOutputs o;
  o.tokens = tokens.get();
  o.status = status.get();
  o.logprob = logprob.get();
  o.rank = rank.get();
  o.top_ids = top_ids.get();
  o.top_logprobs = top_lp.get();
  o.top_stride = kTopN;
  o.final_ids = final_ids.get();
  o.final_probs = final_probs.get();
  o.final_count = final_count.get();
  o.final_stride = kFinalCap;
  restrict_outputs(o, what);
  s.sample(lv, d_slots.get(), bm, o, opt);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  h.tokens = tokens.download();
  h.status = status.download();
  h.rank = rank.download();
  h.logprob = logprob.download();
  h.top_ids = top_ids.download();
  h.top_logprobs = top_lp.download();
  h.final_ids = final_ids.download();
  h.final_probs = final_probs.download();
  h.final_count = final_count.download();
  return h;
}

bool close(float a, float b, float tol) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::fabs(a - b) <= tol * std::max(1.0f, std::fabs(a));
}

// What the test knows about each row's request when it compares: the state both samplers shared
// before the call (histories are kept identical by appending the CPU's tokens to both).
struct RowState {
  const sonic::RequestParams* params;
  std::vector<int32_t> prompt, output;
  uint64_t step;
};

// True when the reference shows a near-tie between the two tokens (SPEC.md section 4): both kept
// and their perturbed scores within 2^-17, or one on a kept-set boundary within 1e-5 of its threshold.
bool near_tie(const Batch& b, int32_t r, const RowState& st, int32_t cpu_tok, int32_t gpu_tok, std::string* why) {
  const sonic::RequestParams& p = *st.params;
  if (p.temperature == 0.0f || cpu_tok < 0 || gpu_tok < 0) {
    *why = "greedy or invalid rows must agree exactly";
    return false;
  }
  const sonic::ref::TokenCounts counts = sonic::ref::count_tokens(st.prompt, st.output);
  const int32_t* mask = nullptr;
  if (!b.bitmask.empty() && b.bitmask_index[r] >= 0) mask = b.bitmask.data() + static_cast<size_t>(b.bitmask_index[r]) * b.words;
  const sonic::ref::RowContext ctx{&p, &counts, mask, b.V, st.step, 0};
  int32_t status = 0;
  const std::vector<float> z = sonic::ref::tempered(
      sonic::ref::processed_logits(b.logits.data() + static_cast<size_t>(r) * b.cols, ctx, &status), p.temperature);
  const sonic::ref::Distribution kept = sonic::ref::kept_distribution(z, p);
  auto in_kept = [&](int32_t t) { return std::find(kept.ids.begin(), kept.ids.end(), t) != kept.ids.end(); };
  auto score = [&](int32_t t) {
    const uint32_t w = sonic::detail::random_word(p.seed, st.step, sonic::detail::purpose(sonic::detail::Draw::kSampling, 0), t);
    return static_cast<double>(z[t]) + sonic::detail::gumbel_from_uniform_exact(sonic::detail::uniform_from_word(w));
  };
  // Whether a token sits on a kept-set boundary: its z within 1e-5 of min-p's threshold, or the
  // mass before it (renormalised over the first min(k, ...) survivors unless joint) within 1e-5 of
  // top-p's, so that one side may keep it and the other not.
  const std::vector<int32_t> order = sonic::ref::order_tokens(z);
  const std::vector<double> probs = sonic::ref::softmax_over(z, order);
  const double thr = p.min_p > 0.0f ? z[order[0]] + std::log(static_cast<double>(p.min_p)) : -INFINITY;
  double surv = 0.0;
  const size_t k = p.top_k > 0 && p.top_k < b.V ? static_cast<size_t>(p.top_k) : order.size();
  for (size_t i = 0; i < std::min(k, order.size()); ++i)
    if (!(p.min_p > 0.0f) || z[order[i]] >= thr) surv += probs[i];
  char buf[256];
  auto at_boundary = [&](int32_t t, const char* who) {
    double cum = 0.0;
    size_t pos = 0;
    while (pos < order.size() && order[pos] != t) cum += probs[pos++];
    const bool minp_edge = p.min_p > 0.0f && std::fabs(z[t] - thr) <= 1e-5 * std::max(1.0, std::fabs(thr));
    const double rel = p.top_p_joint ? cum : cum / surv;
    const bool topp_edge = p.top_p < 1.0f && std::fabs(rel - p.top_p) <= 1e-5;
    std::snprintf(buf, sizeof buf, "%s token at order position %zu, kept %zu; mass before it %.8f (p %.8f), min-p edge %d",
                  who, pos, kept.ids.size(), rel, p.top_p, minp_edge);
    *why = buf;
    return minp_edge || topp_edge;
  };
  if (in_kept(gpu_tok)) {
    const double d = std::fabs(score(cpu_tok) - score(gpu_tok));
    if (d <= std::ldexp(1.0, -17) * std::max(1.0, std::fabs(score(cpu_tok)))) {
      std::snprintf(buf, sizeof buf, "both kept, perturbed scores differ by %.3g", d);
      *why = buf;
      return true;
    }
    // The GPU's kept set ended before the reference's token (the GPU's token is the winner of a
    // shorter prefix): that token must sit right at a boundary.
    char head[96];
    std::snprintf(head, sizeof head, "both kept, perturbed scores differ by %.3g; the reference's", d);
    return at_boundary(cpu_tok, head);
  }
  // The GPU kept a token the reference did not: it must sit right at a boundary.
  return at_boundary(gpu_tok, "gpu");
}

// Compares the two backends' outputs row by row. Token disagreements are allowed only where the
// reference shows a near-tie (two perturbed scores within 2^-19, or a kept-set boundary within 1e-5
// of its threshold); returns the number of such rows and fails on anything else.
int compare(const Batch& b, const HostOutputs& cpu, const HostOutputs& gpu, const char* what, Outputs asked,
            const std::vector<RowState>& states) {
  int near_ties = 0;
  for (int32_t r = 0; r < b.rows; ++r) {
    SCOPED_TRACE(std::string(what) + " row " + std::to_string(r) + " kind " + std::to_string(static_cast<int>(b.kinds[r])));
    EXPECT_EQ(cpu.status[r], gpu.status[r]);
    if (cpu.tokens[r] != gpu.tokens[r] || (asked != Outputs::kTokensOnly && cpu.final_count[r] != gpu.final_count[r])) {
      ++near_ties;
      std::string why;
      const bool ok = cpu.tokens[r] == gpu.tokens[r] || near_tie(b, r, states[r], cpu.tokens[r], gpu.tokens[r], &why);
      std::printf("  [near-tie] %s row %d: cpu token %d (kept %d) gpu token %d (kept %d): %s\n", what, r,
                  cpu.tokens[r], cpu.final_count[r], gpu.tokens[r], gpu.final_count[r], why.c_str());
      EXPECT_TRUE(ok) << "not a near-tie: " << why;
      if (cpu.tokens[r] == gpu.tokens[r]) {  // same token, kept sets differ at the boundary
        EXPECT_LE(std::abs(cpu.final_count[r] - gpu.final_count[r]), 1);
      }
      continue;
    }
    if (asked == Outputs::kTokensOnly) continue;
    EXPECT_TRUE(close(cpu.logprob[r], gpu.logprob[r], 2e-4f)) << cpu.logprob[r] << " vs " << gpu.logprob[r];
    for (int i = 0; i < kFinalCap; ++i) {
      EXPECT_EQ(cpu.final_ids[r * kFinalCap + i], gpu.final_ids[r * kFinalCap + i]) << "final " << i;
      EXPECT_NEAR(cpu.final_probs[r * kFinalCap + i], gpu.final_probs[r * kFinalCap + i], 1e-5f) << "final " << i;
    }
    if (asked == Outputs::kNoRankTop) continue;
    EXPECT_EQ(cpu.rank[r], gpu.rank[r]);
    for (int i = 0; i < kTopN; ++i) {
      EXPECT_EQ(cpu.top_ids[r * kTopN + i], gpu.top_ids[r * kTopN + i]) << "top " << i;
      EXPECT_TRUE(close(cpu.top_logprobs[r * kTopN + i], gpu.top_logprobs[r * kTopN + i], 2e-4f)) << "top " << i;
    }
  }
  return near_ties;
}

struct AgreementCase {
  int32_t V;
  sonic::DType dtype;
};

std::string case_name(const ::testing::TestParamInfo<AgreementCase>& info) {
  static const char* const kDtype[] = {"f32", "bf16", "f16"};
  return "V" + std::to_string(info.param.V) + "_" + kDtype[static_cast<int>(info.param.dtype)];
}

struct AgreementCount {
  int compared = 0;
  int near_ties = 0;
  uint64_t exact_rows = 0;  // rows the GPU sent to the exact kernel
  uint64_t list_rows = 0;   // of those, top-k rows decided from the split's list (exact_path_list_rows)
  uint64_t band_rows = 0;   // and from stage 2's margin band (exact_path_band_rows)
};

// Rows mapped to scattered slots of a table of R + 8, by a multiplier prime to the table's size so
// that no two rows share a slot (5 alone made rows share slots whenever 5 divided R + 8, as at
// R = 12, where a row was then checked against another row's parameters).
std::vector<int32_t> scattered_slots(int32_t R) {
  int32_t m = 5;
  while (std::gcd(m, R + 8) != 1) m += 2;
  std::vector<int32_t> slots(R);
  for (int32_t r = 0; r < R; ++r) slots[r] = static_cast<int32_t>((static_cast<int64_t>(r) * m + 3) % (R + 8));
  return slots;
}

// Samples `steps` calls of batch b on both backends and compares them; the emitted tokens feed the
// next call's penalties. row_pad: see run. flagged: if given, gets the rows each call flagged for the
// exact path.
AgreementCount agreement_on(const Batch& b, int steps, int64_t row_pad = 0, std::vector<uint64_t>* flagged = nullptr) {
  const int32_t R = b.rows;
  sonic::Sampler cpu(make_config(sonic::Backend::kCpu, b.V, R));
  sonic::Sampler gpu(make_config(sonic::Backend::kCuda, b.V, R));
  const std::vector<int32_t> slots = scattered_slots(R);
  for (int32_t r = 0; r < R; ++r) {
    cpu.admit(slots[r], b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
    gpu.admit(slots[r], b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
  }
  int near_ties = 0, compared = 0;
  const sonic::LogprobMode modes[] = {sonic::LogprobMode::kRaw, sonic::LogprobMode::kProcessed,
                                      sonic::LogprobMode::kFinal};
  const Outputs asked[] = {Outputs::kAll, Outputs::kNoRankTop, Outputs::kTokensOnly};
  std::vector<RowState> states(R);
  for (int32_t r = 0; r < R; ++r) states[r] = RowState{&b.params[r], b.prompts[r], {}, 0};
  sonic::CallOptions no_append;
  no_append.append_to_history = false;  // both take the CPU's tokens, so histories stay equal
  for (int step = 0; step < steps; ++step) {
    const Outputs what = asked[step * 3 / steps];
    for (int32_t r = 0; r < R; ++r) states[r].step = cpu.step(slots[r]);
    const HostOutputs hc = run(cpu, b, slots, modes[step % 3], no_append, what, row_pad);
    const uint64_t flagged_before = flagged ? gpu.exact_path_rows() : 0;
    const HostOutputs hg = run(gpu, b, slots, modes[step % 3], no_append, what, row_pad);
    if (flagged) flagged->push_back(gpu.exact_path_rows() - flagged_before);
    near_ties += compare(b, hc, hg, "step", what, states);
    for (int32_t r = 0; r < R; ++r)
      if (hc.tokens[r] >= 0) {
        cpu.append_output(slots[r], &hc.tokens[r], 1);
        gpu.append_output(slots[r], &hc.tokens[r], 1);
        states[r].output.push_back(hc.tokens[r]);
      }
    compared += R;
    for (int32_t r = 0; r < R; ++r) EXPECT_EQ(cpu.step(slots[r]), gpu.step(slots[r]));
  }
  return {compared, near_ties, gpu.exact_path_rows(), gpu.exact_path_list_rows(), gpu.exact_path_band_rows()};
}

// One random batch of R rows (every row kind, random parameters, a bitmask) through agreement_on.
std::pair<int, int> agreement_run(const AgreementCase& c, int32_t R, int steps, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const AgreementCount n = agreement_on(random_batch(rng, c.V, R, c.dtype, kTopN, /*with_bitmask=*/true), steps);
  return {n.compared, n.near_ties};
}

// Rows that do not start on 16 bytes or end at a step's end take stage 1's per-lane copies, the
// others its whole-step copies: every dtype, row strides that align all rows, some or none, a
// vocabulary that ends inside a step, and padding after each row that must never be read.
void row_stride_agreement(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16, sonic::DType::kF16})
    for (const int64_t pad : {1, 3, 8}) {
      SCOPED_TRACE("V " + std::to_string(V) + " dtype " + std::to_string(static_cast<int>(dtype)) + " pad " +
                   std::to_string(pad));
      std::mt19937_64 rng(77 + V + 13 * static_cast<int>(dtype) + pad);
      const AgreementCount n = agreement_on(random_batch(rng, V, 8, dtype, kTopN, /*with_bitmask=*/true), 3, pad);
      std::printf("row stride V + %lld, V=%d dtype=%d: %d rows compared, %d near-tie disagreements\n",
                  static_cast<long long>(pad), V, static_cast<int>(dtype), n.compared, n.near_ties);
      EXPECT_LE(n.near_ties, n.compared / 10);
    }
}

TEST(CudaRowStride, EveryAlignmentMatchesReference) {
  row_stride_agreement(151936);
  row_stride_agreement(30001);
}

// The same on a vocabulary of a few steps (full steps and a partial one in one tile), small enough
// for the sanitizers.
TEST(CudaRowStride, SmallVocabulary) { row_stride_agreement(3001); }

class CudaAgreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(CudaAgreement, MatchesReferenceTokenForToken) {
  const AgreementCase c = GetParam();
  const auto [compared, near_ties] = agreement_run(c, 16, 9, 1234 + c.V + 7 * static_cast<int>(c.dtype));
  std::printf("V=%d dtype=%d: %d rows compared, %d near-tie disagreements\n", c.V, static_cast<int>(c.dtype),
              compared, near_ties);
  EXPECT_LE(near_ties, compared / 20);
}

// agreement_on for `steps` calls, its counts printed under `what`; at most one row in 20 may
// disagree, each one checked to be a near-tie by compare().
AgreementCount agreement_within_near_ties(const Batch& b, int steps, const char* what) {
  const AgreementCount n = agreement_on(b, steps);
  std::printf("%s V=%d dtype=%d: %d rows compared, %d near-tie disagreements, exact rows %llu\n", what, b.V,
              static_cast<int>(b.dtype), n.compared, n.near_ties, static_cast<unsigned long long>(n.exact_rows));
  EXPECT_LE(n.near_ties, n.compared / 20);
  return n;
}

// 16-bit rows without rules whose call asks only for tokens (the last third of the steps) take
// stage 1's packed screen (bf16x2 / half2 compares straight from the slot) once a warp has a bound;
// -inf, NaN and plateau rows (four or more hits a lane) send groups back to the full screen. Every
// row kind, truncated random parameters only (top-k with or without top-p, min-p with top-k), a
// vocabulary of whole steps and one that ends inside a step.
void packed_screen_agrees(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kBF16, sonic::DType::kF16}) {
    std::mt19937_64 rng(9090 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/false);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (sonic::RequestParams& p : b.params) {
      sonic::RequestParams q;
      q.seed = p.seed;
      q.initial_step = p.initial_step;
      q.temperature = 0.3f + 1.2f * u(rng);
      q.top_k = 1 + static_cast<int32_t>(rng() % 128);
      if (u(rng) < 0.5f) q.top_p = 0.5f + 0.5f * u(rng);
      else if (u(rng) < 0.5f) q.min_p = 0.2f * u(rng);
      p = q;
    }
    agreement_within_near_ties(b, 9, "packed screen");
  }
}

TEST(CudaPackedScreen, PlainSixteenBitRowsMatchReference) { packed_screen_agrees(151936); }
// The same on a vocabulary that ends inside a step, small enough for the sanitizers.
TEST(CudaPackedScreen, SmallVocabulary) { packed_screen_agrees(3001); }

// Truncated rows without sums whose penalties only lower a logit (repetition >= 1, frequency and
// presence >= 0) skip the history lookups of tokens below the warp's running bound in stage 1: rows
// whose prompts hold many of their own top tokens (so the penalties reorder the kept set), plateau
// rows (ties at the bound), rows with other penalties (every lookup taken), the history growing with
// the sampled tokens. Some history tokens are in the bias list too, most of them far below the bound:
// the skip passes over them by value, then the list makes them special again, and their penalty
// must still apply. Row 0 holds only history tokens, at -1e35 with repetition 2^20: the penalty
// overflows them to -inf, so the row has no valid token, which a lookup skipped by value would miss.
void lowering_penalties_agree(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16, sonic::DType::kF16}) {
    std::mt19937_64 rng(6060 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/true);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int32_t r = 0; r < b.rows; ++r) {
      sonic::RequestParams& p = b.params[r];
      if (p.temperature == 0.0f) p.temperature = 0.3f + 1.2f * u(rng);
      if (p.top_k <= 0 || p.top_k > V) p.top_k = 1 + static_cast<int32_t>(rng() % 128);
      if (u(rng) < 0.8f) p.top_p_joint = false;
      if (u(rng) < 0.8f) {
        p.repetition_penalty = 1.0f + 0.5f * u(rng);
        p.frequency_penalty = 0.5f * u(rng);
        p.presence_penalty = 0.5f * u(rng);
      } else {
        p.repetition_penalty = 0.8f;
        p.presence_penalty = -0.2f;
      }
      const float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      std::vector<int32_t> order(V);
      for (int32_t t = 0; t < V; ++t) order[t] = t;
      const int32_t top = std::min<int32_t>(200, V);
      std::partial_sort(order.begin(), order.begin() + top, order.end(), [&](int32_t a, int32_t c) {
        const float xa = std::isnan(row[a]) ? -INFINITY : row[a], xc = std::isnan(row[c]) ? -INFINITY : row[c];
        return xa > xc || (xa == xc && a < c);
      });
      std::vector<int32_t>& prompt = b.prompts[r];
      prompt.clear();
      for (int i = 0; i < 40; ++i) prompt.push_back(order[rng() % top]);
      for (int i = 0; i < 300; ++i) prompt.push_back(static_cast<int32_t>(rng() % V));
      // Listed history tokens: four of the top ones, twelve of the random ones.
      std::vector<char> listed(V, 0);
      for (const auto& e : p.logit_bias) listed[e.first] = 1;
      for (int i = 0; i < 16; ++i) {
        const int32_t t = prompt[i < 4 ? i : 40 + static_cast<int>(rng() % 300)];
        if (listed[t]) continue;
        listed[t] = 1;
        p.logit_bias.push_back({t, 6.0f * u(rng) - 3.0f});
      }
    }
    if (dtype != sonic::DType::kF16) {  // fp16 has no -1e35
      float* row = b.logits.data();
      for (int32_t t = 0; t < V; ++t) row[t] = -INFINITY;
      for (const int32_t t : b.prompts[0]) row[t] = dtype == sonic::DType::kBF16 ? -0x1.2p116f : -1e35f;
      b.params[0].repetition_penalty = 0x1p20f;
      b.params[0].frequency_penalty = 0.0f;
      b.params[0].presence_penalty = 0.0f;
      b.params[0].repetition_output_only = false;
      b.params[0].logit_bias.clear();
      b.params[0].allowed_tokens.clear();
      b.bitmask_index[0] = -1;
    }
    agreement_within_near_ties(b, 9, "lowering penalties");
  }
}

TEST(CudaLoweringPenalties, HistoryTopTokensMatchReference) { lowering_penalties_agree(151936); }
// The same at a vocabulary small enough for the sanitizers.
TEST(CudaLoweringPenalties, SmallVocabulary) { lowering_penalties_agree(3001); }

// Token lists of every length, the rules of the listed tokens applied by stage 1's cursor over the
// slot's sorted list (its start at each warp's first token, its walk group by group): lists of up
// to 32 entries, lists that name the first and the last token of every group of 1024 tokens (the
// cursor's boundaries), a few hundred entries, and a few thousand of every kind (bias, banned,
// allowed) at once. Every dtype; a vocabulary of whole steps and one that ends inside a step.
void token_lists_agree(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16, sonic::DType::kF16}) {
    std::mt19937_64 rng(7070 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/true);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int32_t r = 0; r < b.rows; ++r) {
      sonic::RequestParams& p = b.params[r];
      p.logit_bias.clear();
      p.banned_tokens.clear();
      p.allowed_tokens.clear();
      std::vector<char> biased(V, 0), banned(V, 0), allowed(V, 0);
      auto bias = [&](int32_t t) {
        if (t < 0 || t >= V || biased[t]) return;
        biased[t] = 1;
        p.logit_bias.push_back({t, 8.0f * u(rng) - 4.0f});
      };
      auto random_tokens = [&](int32_t n, std::vector<char>& used, std::vector<int32_t>* out) {
        for (int32_t i = 0; i < n; ++i) {
          const int32_t t = static_cast<int32_t>(rng() % V);
          if (!used[t]) used[t] = 1, out->push_back(t);
        }
      };
      switch (r % 4) {
        case 0:
          for (int32_t i = 1 + static_cast<int32_t>(rng() % 32); i > 0; --i) bias(static_cast<int32_t>(rng() % V));
          break;
        case 1:
          for (int32_t base = 0; base < V; base += 1024) bias(base), bias(base - 1);
          bias(V - 1);
          break;
        case 2:
          for (int32_t i = std::min(V / 8, 300 + static_cast<int32_t>(rng() % 300)); i > 0; --i)
            bias(static_cast<int32_t>(rng() % V));
          random_tokens(10, banned, &p.banned_tokens);
          break;
        default:
          for (int32_t i = std::min(V / 4, 1500); i > 0; --i) bias(static_cast<int32_t>(rng() % V));
          random_tokens(std::min(V / 8, 500), banned, &p.banned_tokens);
          if (u(rng) < 0.5f) random_tokens(std::min(V / 4, 1500), allowed, &p.allowed_tokens);
          break;
      }
    }
    agreement_within_near_ties(b, 6, "token lists");
  }
}

TEST(CudaTokenLists, ListsOfEveryLengthMatchReference) { token_lists_agree(151936); }
// The same on a vocabulary that ends inside a step, small enough for the sanitizers.
TEST(CudaTokenLists, SmallVocabulary) { token_lists_agree(3001); }

// The commit of single-step calls on the device (the exact kernel's last step; agreement_on appends
// the reference's tokens itself): each emitted token joins its slot's history until the history is
// full, where the row gets kStatusHistoryFull, and the step advances, call after call, as the
// reference does. Penalties make every row's next token depend on the history; rows of top-p alone
// on flat logits take the exact path, so that both commits run (the blocks' own, and the last
// block's after flagged rows). Slots are distinct: the GPU appends a shared slot's tokens in no
// fixed order (docs/semantics.md).
// An fp32 batch of R rows of V tokens, no bitmask, default parameters, logits to be filled.
Batch plain_batch(int32_t V, int32_t R) {
  Batch b;
  b.V = b.cols = V;
  b.rows = R;
  b.logits.resize(static_cast<size_t>(R) * V);
  b.params.resize(R);
  b.prompts.resize(R);
  b.bitmask_index.assign(R, -1);
  return b;
}

// One call of batch b on both backends with the default options (so the device commits), tokens and
// statuses compared row by row; returns the reference's outputs.
HostOutputs commit_call_agrees(sonic::Sampler& cpu, sonic::Sampler& gpu, const Batch& b,
                               const std::vector<int32_t>& slots, const std::string& where) {
  const HostOutputs hc = run(cpu, b, slots, sonic::LogprobMode::kRaw, {}, Outputs::kTokensOnly);
  const HostOutputs hg = run(gpu, b, slots, sonic::LogprobMode::kRaw, {}, Outputs::kTokensOnly);
  for (int32_t r = 0; r < b.rows; ++r) {
    SCOPED_TRACE(where + " row " + std::to_string(r));
    EXPECT_EQ(hg.tokens[r], hc.tokens[r]);
    EXPECT_EQ(hg.status[r], hc.status[r]);
  }
  return hc;
}

void device_commit_agrees(int32_t V) {
  std::mt19937_64 rng(4242 + V);
  const int32_t R = 16, max_history = 24, calls = 8;
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  Batch b = plain_batch(V, R);
  for (int32_t r = 0; r < R; ++r) {
    const bool flat = r % 4 == 3;
    for (int32_t t = 0; t < V; ++t) b.logits[static_cast<size_t>(r) * V + t] = (flat ? 0.05f : 3.0f) * normal(rng);
    sonic::RequestParams& p = b.params[r];
    p.seed = rng();
    // Greedy; top-k and top-p; top-k and min-p; top-p alone on flat logits (the exact path). No
    // fast-path row decides by fp32 sums, whose rounding may move a top-p boundary (SPEC.md section
    // 4's near-ties): this test wants every token equal.
    p.temperature = r % 4 == 0 ? 0.0f : 0.5f + u(rng);
    if (r % 4 == 1 || r % 4 == 2) p.top_k = 1 + static_cast<int32_t>(rng() % 64);
    if (r % 4 == 1) p.top_p = 0.7f + 0.3f * u(rng);
    if (r % 4 == 2) p.min_p = 0.05f;
    if (flat) p.top_p = 0.6f;
    p.repetition_penalty = 1.5f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.5f;
    p.penalties_include_prompt = r % 2 == 0;
    // 0 to 7 tokens of room; the prompt repeats the row's top tokens, so that the penalties move it.
    b.prompts[r].resize(static_cast<size_t>(max_history - r % 8));
    for (int32_t& t : b.prompts[r]) t = static_cast<int32_t>(rng() % 16);
  }
  sonic::SamplerConfig ccfg = make_config(sonic::Backend::kCpu, V, R), gcfg = make_config(sonic::Backend::kCuda, V, R);
  ccfg.max_history = gcfg.max_history = max_history;
  sonic::Sampler cpu(ccfg), gpu(gcfg);
  const std::vector<int32_t> slots = scattered_slots(R);
  for (int32_t r = 0; r < R; ++r) {
    cpu.admit(slots[r], b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
    gpu.admit(slots[r], b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
  }
  int full = 0;
  for (int call = 0; call < calls; ++call) {
    // New logits each call for the peaked rows: a penalised token can then win again later.
    if (call > 0)
      for (int32_t r = 0; r < R; ++r)
        if (r % 4 != 3)
          for (int32_t t = 0; t < V; ++t) b.logits[static_cast<size_t>(r) * V + t] = 3.0f * normal(rng);
    const HostOutputs hc =
        commit_call_agrees(cpu, gpu, b, slots, "V " + std::to_string(V) + " call " + std::to_string(call));
    for (int32_t r = 0; r < R; ++r) {
      EXPECT_EQ(gpu.step(slots[r]), cpu.step(slots[r])) << "call " << call << " row " << r;
      full += (hc.status[r] & sonic::kStatusHistoryFull) != 0;
    }
  }
  std::printf("device commit V=%d: %d rows x %d calls, %d rows flagged full by the reference, exact rows %llu\n", V,
              R, calls, full, static_cast<unsigned long long>(gpu.exact_path_rows()));
  EXPECT_GT(full, 0) << "the case must fill some histories";
  EXPECT_GT(gpu.exact_path_rows(), 0u) << "the case must flag rows for the exact path";
  // A retired slot's step reads 0 on both backends.
  cpu.retire(slots[0]);
  gpu.retire(slots[0]);
  EXPECT_EQ(gpu.step(slots[0]), cpu.step(slots[0]));
}

TEST(CudaDeviceCommit, HistoryAndStepsLikeReference) { device_commit_agrees(32000); }
// The same at a vocabulary small enough for compute-sanitizer.
TEST(CudaDeviceCommit, SmallVocabulary) { device_commit_agrees(3001); }

// A slot named by two rows of a call (docs/semantics.md): both rows read the slot as it was at the
// call's start, both tokens join its history and its step advances twice, so the next call's
// penalties count both. Histories with room to spare (the order of a shared slot's appends on the
// GPU is not fixed, which matters only when it fills up). Rows r and r + 6 share slot r; slot 5's
// rows are top-p alone on flat logits (the exact path and the last block's commit).
TEST(CudaDeviceCommit, SlotNamedTwiceLikeReference) {
  constexpr int32_t V = 3001, R = 12, kSlots = 6, calls = 6;
  std::mt19937_64 rng(9090);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b = plain_batch(V, R);
  std::vector<int32_t> slots(R);
  for (int32_t r = 0; r < R; ++r) slots[r] = r % kSlots;
  for (int32_t s = 0; s < kSlots; ++s) {
    sonic::RequestParams& p = b.params[s];
    p.seed = rng();
    p.temperature = s % 2 == 0 ? 0.0f : 0.8f;
    if (s % 2 == 1 && s != 5) p.top_k = 20;
    if (s == 5) p.top_p = 0.6f;
    p.presence_penalty = 4.0f;  // a token emitted once seldom wins again
    p.frequency_penalty = 1.0f;
    b.prompts[s] = {static_cast<int32_t>(rng() % V), static_cast<int32_t>(rng() % V)};
  }
  for (int32_t r = kSlots; r < R; ++r) b.params[r] = b.params[r - kSlots], b.prompts[r] = b.prompts[r - kSlots];
  sonic::SamplerConfig ccfg = make_config(sonic::Backend::kCpu, V, R), gcfg = make_config(sonic::Backend::kCuda, V, R);
  sonic::Sampler cpu(ccfg), gpu(gcfg);
  for (int32_t s = 0; s < kSlots; ++s) {
    cpu.admit(s, b.params[s], b.prompts[s].data(), static_cast<int64_t>(b.prompts[s].size()));
    gpu.admit(s, b.params[s], b.prompts[s].data(), static_cast<int64_t>(b.prompts[s].size()));
  }
  for (int call = 0; call < calls; ++call) {
    for (int32_t r = 0; r < R; ++r)
      for (int32_t t = 0; t < V; ++t) b.logits[static_cast<size_t>(r) * V + t] = (r % kSlots == 5 ? 0.05f : 2.0f) * normal(rng);
    commit_call_agrees(cpu, gpu, b, slots, "call " + std::to_string(call));
    for (int32_t s = 0; s < kSlots; ++s) EXPECT_EQ(gpu.step(s), cpu.step(s)) << "slot " << s;
  }
  EXPECT_EQ(cpu.step(0), b.params[0].initial_step + 2 * calls);
  EXPECT_GT(gpu.exact_path_rows(), 0u) << "slot 5's rows must take the exact path";
}

// Top-p or a small min-p on flat, plateau or masked rows keeps most of the vocabulary: the fast path
// cannot settle those rows and the exact kernel takes them, split across blocks when the call asks
// for tokens only (the last third of the steps) and by one block otherwise; plateau rows crowd the
// split's gathered buckets and fall back to one block. Tokens, logprobs, ranks and final
// distributions must still be the reference's, call after call (the split rows' scratch is reset
// by each call). 12 rows take ~11 slices each on an H200 (132 SMs); 100 rows one slice each.
void wide_nucleus_agrees(int32_t V, std::initializer_list<std::pair<int32_t, int>> batches) {
  for (const auto& [rows, steps] : batches)
    for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
      std::mt19937_64 rng(4242 + V + rows + static_cast<int>(dtype));
      Batch b = random_batch(rng, V, rows, dtype, kTopN, /*with_bitmask=*/false);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (sonic::RequestParams& p : b.params) {
        p.temperature = 0.7f + 0.8f * u(rng);
        p.top_k = 0;
        p.top_p = u(rng) < 0.8f ? 0.8f + 0.19f * u(rng) : 1.0f;
        p.top_p_joint = u(rng) < 0.3f;
        p.min_p = p.top_p == 1.0f || u(rng) < 0.3f ? 0.001f + 0.02f * u(rng) : 0.0f;  // min-p alone, or with top-p
      }
      const AgreementCount n = agreement_on(b, steps);
      std::printf("wide nucleus V=%d, %d rows, dtype=%d: %d rows compared, %d near-tie disagreements, exact rows %llu\n",
                  V, rows, static_cast<int>(dtype), n.compared, n.near_ties,
                  static_cast<unsigned long long>(n.exact_rows));
      EXPECT_LE(n.near_ties, n.compared / 20);  // each one checked to be a near-tie by compare()
      EXPECT_GE(n.exact_rows, static_cast<uint64_t>(n.compared / 4));  // the exact kernel did run
    }
}

TEST(CudaExactPath, WideNucleusMatchesReference) { wide_nucleus_agrees(151936, {{12, 9}, {100, 3}}); }

// The same at vocabularies small enough for compute-sanitizer: more slices than a slice has tokens.
TEST(CudaExactPath, WideNucleusSmallVocabulary) { wide_nucleus_agrees(1000, {{3, 6}, {12, 3}}); }

// Calls that flag more rows than the exact kernel splits across blocks (one an SM): a call that asks
// for tokens only (the last third of the steps) then gives each flagged row one block (S = 1), and
// each block its rows one after the other in its own slot of the split scratch, which every row
// leaves at zero for the next; the other calls take exact_row for every flagged row. The rows
// split_row covers (top-p alone or joint, top-p with min-p, min-p alone, on wide rows: rules on many
// of them, every row kind of random_batch) are mixed in one call with rows it leaves to exact_row in
// the same block: top-k over a large share of the vocabulary, greedy, +inf, no valid token, random
// parameters and, at V >= 16384, rows where a third of the tokens tie at the top and the top-p cut
// falls among them (more keys than the gather holds: exact_row after the slot's reset). R =
// rows_per_sm rows an SM; each tokens-only call must flag more than min_flagged_per_sm rows an SM
// (2: more rows than the kernel's 2 * SMs blocks, so that blocks take two rows or more). Tokens (and,
// in the other calls, logprobs, ranks and final distributions) must be the reference's.
void many_flagged_rows_agree(int32_t V, int32_t rows_per_sm, int32_t min_flagged_per_sm,
                             std::initializer_list<std::pair<sonic::DType, int>> runs) {
  int sms = 0;
  SONIC_TEST_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int32_t R = rows_per_sm * sms + 7;
  for (const auto& [dtype, steps] : runs) {
    std::mt19937_64 rng(5353 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, R, dtype, kTopN, /*with_bitmask=*/true);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int32_t r = 0; r < R; ++r) {
      sonic::RequestParams& p = b.params[r];
      const int what = r % 10;
      if (what == 8) continue;  // random_params's own: greedy, or small top-k, top-p, min-p
      p.top_k = 0;
      p.top_p = 1.0f;
      p.min_p = 0.0f;
      p.top_p_joint = u(rng) < 0.3f;
      // z's spread 0.5 to 1 (random_batch's logits: N(0, 1) in flat rows, N(0, 9) in the others):
      // a top-p nucleus or min-p's survivors of most of the valid tokens. A bitmask on a quarter of
      // the rows (it leaves half the tokens).
      p.temperature = (b.kinds[r] == RowKind::kFlat ? 1.0f : 3.0f) / (0.5f + 0.5f * u(rng));
      if (u(rng) < 0.75f) b.bitmask_index[r] = -1;
      const float wide_p = 0.95f + 0.049f * u(rng);
      if (what <= 2) {
        p.top_p = wide_p;
      } else if (what == 3) {
        p.top_p = wide_p;
        p.min_p = 0.0005f + 0.005f * u(rng);
      } else if (what <= 5) {
        p.min_p = 0.0005f + 0.005f * u(rng);
      } else if (what == 6) {  // top-k: exact_row (split_row takes no top-k row)
        p.top_k = V / 4 + static_cast<int32_t>(rng() % (V / 2));
        if (u(rng) < 0.5f) p.top_p = wide_p;
      } else if (what == 7) {
        p.temperature = 0.0f;
      } else if (V >= 16384) {  // what == 9: ties at the top (a third of the ids), the rest 3 below
        float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
        for (int32_t t = 0; t < V; ++t) row[t] = t % 3 == 0 ? 1.0f : round_to_dtype(normal(rng) - 2.0f, dtype);
        b.kinds[r] = RowKind::kPlateau;
        p.temperature = 0.7f + 0.8f * u(rng);
        p.top_p = 0.3f + 0.4f * u(rng);  // the ties hold 75 % of the mass or more
        p.allowed_tokens.clear();
      } else {
        p.top_p = wide_p;
      }
    }
    std::vector<uint64_t> flagged;
    const AgreementCount n = agreement_on(b, steps, 0, &flagged);
    std::printf("many flagged rows V=%d, %d rows, dtype=%d, %d SMs: %d rows compared, %d near-tie disagreements, "
                "rows flagged by call:", V, R, static_cast<int>(dtype), sms, n.compared, n.near_ties);
    for (const uint64_t f : flagged) std::printf(" %llu", static_cast<unsigned long long>(f));
    std::printf("\n");
    EXPECT_LE(n.near_ties, n.compared / 20);  // each one checked to be a near-tie by compare()
    for (int step = steps - steps / 3; step < steps; ++step)  // the tokens-only calls
      EXPECT_GT(flagged[step], static_cast<uint64_t>(min_flagged_per_sm) * sms) << "call " << step;
  }
}

TEST(CudaExactPath, ManyFlaggedRowsMatchReference) {
  many_flagged_rows_agree(32000, 4, 2, {{sonic::DType::kF32, 6}, {sonic::DType::kBF16, 3}});
}
// The same at a vocabulary small enough for compute-sanitizer (fewer rows flagged: a bitmask, -inf
// rows and the fast path's gather take more of them).
TEST(CudaExactPath, ManyFlaggedRowsSmallVocabulary) { many_flagged_rows_agree(1000, 5, 1, {{sonic::DType::kF32, 3}}); }

// Top-p alone (no top-k, no min-p), the rows' other parameters random (penalties, bias, lists, top
// N), every row kind, temperatures 0.3-1.2 and top-p 0.5-0.99: at V = 151936 stage 1 leaves about
// 1100 candidates at a peaked row's bound, more than stage 2 sorts, while the nucleus is often far
// smaller (docs/experiments/topp-mass-cut.patch cuts such prefixes by mass). Whichever path takes a
// row, it agrees with the reference within near-ties.
void top_p_alone_agrees(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    std::mt19937_64 rng(6161 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/true);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (sonic::RequestParams& p : b.params) {
      p.temperature = 0.3f + 0.9f * u(rng);
      p.top_k = 0;
      p.min_p = 0.0f;
      p.top_p = 0.5f + 0.49f * u(rng);
    }
    agreement_within_near_ties(b, 6, "top-p alone");
  }
}

TEST(CudaTopPAlone, NucleusMatchesReference) { top_p_alone_agrees(151936); }
// The same at a vocabulary small enough for the sanitizers.
TEST(CudaTopPAlone, SmallVocabulary) { top_p_alone_agrees(3001); }

// Truncated rows whose top tokens crowd one warp's group of 1024 ids (stage 1 screens a group of a
// warp at a time, 32 ids a lane: a 16-byte load's ids, then the next load's 128 or 256 ids on):
// consecutive ids, four or eight a lane; one id a lane, the whole crowd in one warp's group; the
// whole group at one value (every lane with 32 ties at the top: more than a group's room in the
// candidate list); or random ids, the control. The crowd lies above the rest of the row and the
// row's top-k reaches past it (into it, for the level group), so a stage-1 bound above part of the
// kept set must send the row to the exact path rather than drop a kept token: every layout agrees
// with the reference, and some row does take the exact path (consecutive ids defeat the lanes'
// bound: a lane keeps three of its four or eight).
void crowded_top_agrees(int32_t V) {
  enum Layout { kConsecutive, kOneALane, kLevelGroup, kRandom, kLayouts };
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    std::mt19937_64 rng(909 + V + static_cast<int>(dtype));
    const int32_t R = 24;
    Batch b = random_batch(rng, V, R, dtype, kTopN, /*with_bitmask=*/false);
    const int32_t width = dtype == sonic::DType::kF32 ? 4 : 8;  // ids a lane's 16-byte load holds
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (int32_t r = 0; r < R; ++r) {
      float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      for (int32_t t = 0; t < V; ++t) row[t] = normal(rng);
      const Layout layout = static_cast<Layout>(r % kLayouts);
      const int32_t crowd = layout == kLevelGroup ? 1024 : 9 + static_cast<int32_t>(rng() % 16);
      const int32_t window = static_cast<int32_t>(rng() % (V / 1024)) * 1024;
      for (int32_t j = 0; j < crowd; ++j) {
        const int32_t t = layout == kConsecutive || layout == kLevelGroup ? window + j
                          : layout == kOneALane                         ? window + j * width
                                                                        : static_cast<int32_t>(rng() % V);
        row[t] = layout == kLevelGroup ? 6.0f : 6.0f + 0.5f * normal(rng);  // above the rest of the row
      }
      for (int32_t t = 0; t < V; ++t) row[t] = round_to_dtype(row[t], dtype);
      b.kinds[r] = layout == kLevelGroup ? RowKind::kPlateau : RowKind::kFlat;
      sonic::RequestParams p;
      p.seed = rng();
      p.initial_step = rng() % 1000;
      p.temperature = 0.8f + 0.4f * u(rng);
      const int32_t past = 1 + static_cast<int32_t>(rng() % 40);  // kept tokens past the crowd
      p.top_k = layout == kLevelGroup ? past : crowd + past;
      p.top_p = u(rng) < 0.5f ? 1.0f : 0.99f;
      p.top_p_joint = u(rng) < 0.3f;
      p.top_logprobs = static_cast<int32_t>(rng() % (kTopN + 1));
      b.params[r] = p;
    }
    const AgreementCount n = agreement_on(b, 3);
    std::printf("crowded top V=%d dtype=%d: %d rows compared, %d near-tie disagreements, exact rows %llu\n", V,
                static_cast<int>(dtype), n.compared, n.near_ties, static_cast<unsigned long long>(n.exact_rows));
    EXPECT_LE(n.near_ties, n.compared / 20);
    EXPECT_GT(n.exact_rows, 0u);
  }
}

TEST(CudaExactPath, CrowdedTopTokensMatchReference) { crowded_top_agrees(151936); }
TEST(CudaExactPath, CrowdedTopTokensSmallVocabulary) { crowded_top_agrees(3001); }

// Draws the fast noise cannot settle. row_stage2's sampling form draws its prefix's noise with
// gumbel_fast and takes the exact noise only where another key's score comes within the fast noise's
// error of the winner's (fast_noise_reach); the fast kernel's stage 2 (B > 132) draws the exact noise
// throughout. Rows of two or three leaders far above N(0, 1) logits (T 1) whose exact perturbed
// scores z + G agree to within a float step of z (z = 40 + G_0 - G_j rounded: within 2^-19 of each
// other), and control rows whose leaders' scores lie 2^-12 apart, a row in four; top-k 20, 50 or 130
// by row, so that write_prefix_winners' screen runs over prefixes of one to several keys a lane.
// Every token must be the reference's, with no near-tie allowance: the screen is exact. Tokens-only
// calls and calls with every output, 64 rows (row_stage2_kernel) and 160 (the fast kernel).
void near_tied_leaders_agree(int32_t V, int32_t R, int calls) {
  std::mt19937_64 rng(5151 + V + R);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch b = plain_batch(V, R);
  for (int32_t r = 0; r < R; ++r) {
    sonic::RequestParams& p = b.params[r];
    p.seed = rng();
    p.initial_step = rng() % 1000;
    p.temperature = 1.0f;
    // Prefixes of one to several keys a lane in write_prefix_winners' screen.
    p.top_k = r % 3 == 0 ? 20 : r % 3 == 1 ? 50 : 130;
  }
  sonic::Sampler cpu(make_config(sonic::Backend::kCpu, V, R)), gpu(make_config(sonic::Backend::kCuda, V, R));
  const std::vector<int32_t> slots = scattered_slots(R);
  for (int32_t r = 0; r < R; ++r) {
    cpu.admit(slots[r], b.params[r], nullptr, 0);
    gpu.admit(slots[r], b.params[r], nullptr, 0);
  }
  int tied = 0, apart = 0;
  for (int call = 0; call < calls; ++call) {
    for (int32_t r = 0; r < R; ++r) {
      float* row = b.logits.data() + static_cast<size_t>(r) * V;
      for (int32_t t = 0; t < V; ++t) row[t] = normal(rng);
      const sonic::RequestParams& p = b.params[r];
      const uint64_t step = cpu.step(slots[r]);
      auto noise = [&](int32_t t) {
        const uint32_t w = sonic::detail::random_word(p.seed, step, sonic::detail::purpose(sonic::detail::Draw::kSampling, 0), t);
        return sonic::detail::gumbel_from_uniform_exact(sonic::detail::uniform_from_word(w));
      };
      const int leaders = 2 + static_cast<int>(rng() % 2);
      const bool control = r % 4 == 3;
      int32_t ids[3];
      for (int j = 0; j < leaders; ++j) {
        bool fresh;
        do {
          ids[j] = static_cast<int32_t>(rng() % V);
          fresh = true;
          for (int i = 0; i < j; ++i) fresh &= ids[i] != ids[j];
        } while (!fresh);
        // z_j = 40 + G_0 - G_j (+ j 2^-12 for the controls), in [14, 66]: far above the rest.
        row[ids[j]] = static_cast<float>(40.0 + noise(ids[0]) - noise(ids[j]) + (control ? j * 0x1p-12 : 0.0));
      }
      double hi = -INFINITY, second = -INFINITY;
      for (int j = 0; j < leaders; ++j) {
        const double sc = static_cast<double>(row[ids[j]]) + noise(ids[j]);
        second = std::max(second, std::min(hi, sc));
        hi = std::max(hi, sc);
      }
      tied += hi - second < 0x1p-16;
      apart += hi - second > 0x1p-14;
    }
    const Outputs what = call % 2 == 0 ? Outputs::kTokensOnly : Outputs::kAll;
    const HostOutputs hc = run(cpu, b, slots, sonic::LogprobMode::kProcessed, {}, what);
    const HostOutputs hg = run(gpu, b, slots, sonic::LogprobMode::kProcessed, {}, what);
    for (int32_t r = 0; r < R; ++r) {
      EXPECT_EQ(hg.tokens[r], hc.tokens[r]) << "V " << V << " R " << R << " call " << call << " row " << r;
      EXPECT_EQ(hg.status[r], hc.status[r]) << "V " << V << " R " << R << " call " << call << " row " << r;
    }
  }
  std::printf("near-tied leaders V=%d R=%d: %d rows, %d with the top two exact scores within 2^-16, %d apart, "
              "exact rows %llu\n", V, R, R * calls, tied, apart, static_cast<unsigned long long>(gpu.exact_path_rows()));
  // The rows must test both sides of the screen: rivals within its reach (2^-15) and winners outside.
  EXPECT_GE(tied, R * calls / 2);
  EXPECT_GE(apart, R * calls / 8);
}

TEST(CudaScreenedDraw, NearTiedLeadersMatchReferenceExactly) {
  near_tied_leaders_agree(151936, 64, 4);
  near_tied_leaders_agree(151936, 160, 2);
}
TEST(CudaScreenedDraw, SmallVocabulary) { near_tied_leaders_agree(3001, 16, 2); }

// Rows of two leaders far above the rest (the exact path's top-k tests): N(0, 1) logits, one token
// at 40.25 and another at 40.0, at T = 1.
void place_two_leaders(float* row, int32_t V, std::mt19937_64& rng, std::normal_distribution<float>& normal) {
  for (int32_t t = 0; t < V; ++t) row[t] = normal(rng);
  const int32_t first = static_cast<int32_t>(rng() % V);
  row[first] = 40.25f;
  row[(first + 1 + static_cast<int32_t>(rng() % (V - 1))) % V] = 40.0f;
}
// Their top-k. Stage 2 sorts about k + 16 keys from the tiles' candidates: at V = 1000, one tile
// of at most three a lane, about 40 lie above its bound.
int32_t leaders_top_k(std::mt19937_64& rng, bool small) {
  return small ? 5 + static_cast<int32_t>(rng() % 20) : 50 + static_cast<int32_t>(rng() % 150);
}
// Their joint top-p: the first leader's share of the mass, 1 / (1 + e^-0.25) (the rest's is e^-40
// of it), 4e-6 above or below it by the coin in [0, 1): inside stage 2's margin (1.0e-5 at |z| =
// 40), far outside the double and fixed-point sums' differences (about 1e-13). Kept: one leader,
// or both.
float leaders_top_p(float coin) {
  const double lead = 1.0 / (1.0 + std::exp(-0.25));
  return static_cast<float>(lead * (coin < 0.5f ? 1.0 - 4e-6 : 1.0 + 4e-6));
}

// Top-k rows on the exact path (exact_sample.cu: split_row covers top-k up to kSplitGatherKeys and
// selects among the keys of the k-th key's bucket and above, tokens-only calls; exact_row takes them
// otherwise). The rows are made to be flagged, four families by r % 4, random penalties, lists, bias,
// a bitmask and NaN logits beside:
//  0, 3: top-k 800-4000 on flat rows, past the 768 keys stage 2 sorts, with top-p (joint or
//        sequential) and min-p or neither;
//  1: plateaus: a level group of tokens above the rest (itself in steps of 0.5), top-k inside the
//     group (the k-th key ties with others by value, split by id) or just past it, every rule;
//  2: top-k 50-500 with joint top-p at |z| near 10^4 (fp32: x = 100 + 0.03 N(0, 1), T 0.01), where
//     stage 1's fp32 total leaves a margin of about 1e-3 (the bench's "kind 3" rows, undecided now
//     and then at ordinary |z|); in rows r % 8 = 6, and every such row at the small vocabulary, two
//     leaders (x = 40.25 and 40) far above the rest under a top-k and a joint top-p within 4e-6 of
//     the first leader's share: stage 2 cannot decide them (its margin) and leaves its k-th key as
//     the hint, so their tokens-only calls take the split's list (the test checks that some do).
// At V = 32000 also a row of top-k 9000 (past the split's gather: exact_row from the first slice)
// and a plateau of 9000 tied tokens at the top with top-k 100 (the k-th key's bucket crowds the
// gather: exact_row from the last slice), and a row of 2000 allowed tokens under top-k 4000 (fewer
// valid keys than k: every valid key gathered). Agreement token for token (near-ties only), over 9 calls,
// the last three tokens-only; the rows must have taken the exact path.
// band: whether the exact path may decide rows from stage 2's margin band (SONIC_CUDA_SPLIT_BAND);
// without it, the leaders' rows are decided from the split's list.
void top_k_exact_agrees(int32_t V, std::initializer_list<std::pair<int32_t, int>> batches, bool band = true) {
  const ScopedEnv env("SONIC_CUDA_SPLIT_BAND", band ? "1" : "0");  // read when the samplers are made
  for (const auto& [rows, steps] : batches)
    for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
      std::mt19937_64 rng(5151 + V + rows + static_cast<int>(dtype));
      Batch b = random_batch(rng, V, rows, dtype, kTopN, /*with_bitmask=*/true);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      const bool small = V < 4096;
      for (int32_t r = 0; r < rows; ++r) {
        float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
        sonic::RequestParams& p = b.params[r];
        p.temperature = 0.7f + 0.6f * u(rng);
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        p.top_p_joint = u(rng) < 0.5f;
        const float rule = u(rng);
        const int family = r % 4;
        if (family == 1) {  // a plateau group above the rest, the k-th key inside it or just past it
          const int32_t group =
              small ? 60 + static_cast<int32_t>(rng() % 240) : 300 + static_cast<int32_t>(rng() % 1200);
          for (int32_t t = 0; t < V; ++t) row[t] = std::round(normal(rng) * 2.0f) / 2.0f;
          for (int32_t j = 0; j < group; ++j) row[rng() % V] = 5.5f;
          p.top_k = u(rng) < 0.7f ? 20 + static_cast<int32_t>(rng() % (group - 20))
                                  : group + 1 + static_cast<int32_t>(rng() % 100);
          if (rule < 0.4f) p.top_p = 0.5f + 0.49f * u(rng);
          else if (rule < 0.7f) p.min_p = 0.01f + 0.3f * u(rng);
          b.kinds[r] = RowKind::kPlateau;
        } else if (family == 2 && (small || r % 8 == 6)) {  // two leaders far above the rest
          place_two_leaders(row, V, rng, normal);
          p.temperature = 1.0f;
          p.top_k = leaders_top_k(rng, small);
          p.top_p = leaders_top_p(u(rng));
          p.top_p_joint = true;
          p.min_p = 0.0f;
          p.repetition_penalty = 1.0f;  // nothing moves a leader
          p.frequency_penalty = p.presence_penalty = 0.0f;
          p.logit_bias.clear();
          p.banned_tokens.clear();
          p.allowed_tokens.clear();
          b.bitmask_index[r] = -1;
          b.kinds[r] = RowKind::kPeaked;
        } else if (family == 2) {  // top-k 50-500, joint top-p at large |z|
          const bool wide = dtype == sonic::DType::kF32;  // bf16 cannot hold x = 100 + 0.03 N(0, 1)
          for (int32_t t = 0; t < V; ++t) row[t] = wide ? 100.0f + 0.03f * normal(rng) : 3.0f * normal(rng);
          p.temperature = wide ? 0.01f : 0.8f;
          p.top_k = small ? 50 + static_cast<int32_t>(rng() % 150) : 50 + static_cast<int32_t>(rng() % 451);
          p.top_p = 0.2f + 0.5f * u(rng);
          p.top_p_joint = true;
          if (rule < 0.3f) p.min_p = 0.001f * u(rng);
          p.repetition_penalty = 1.0f;  // x / rho would move x = 100 by 10^4 / T: no truncation left
          p.logit_bias.clear();
          b.kinds[r] = wide ? RowKind::kFlat : RowKind::kPeaked;
        } else {  // top-k past stage 2's sorted prefix
          for (int32_t t = 0; t < V; ++t) row[t] = normal(rng);
          p.top_k = small ? 200 + static_cast<int32_t>(rng() % 700) : 800 + static_cast<int32_t>(rng() % 3201);
          if (rule < 0.6f) p.top_p = 0.5f + 0.49f * u(rng);
          if (rule > 0.4f && u(rng) < 0.6f) p.min_p = 0.001f + 0.02f * u(rng);
          b.kinds[r] = RowKind::kFlat;
        }
        if (!small && r == 0) {  // top-k past the split's gather: exact_row
          p.top_k = 9000;
          p.top_p = 0.95f;
        }
        if (!small && r == 2) {  // fewer valid tokens (2000) than k, more than stage 2 sorts
          p.allowed_tokens.clear();
          for (int32_t t = 0; t < 2000; ++t) p.allowed_tokens.push_back((t * 13) % V);
          p.top_k = 4000;
          p.top_p = 0.9f;
        }
        if (!small && r == 5) {  // 9000 tied tokens at the top: the k-th key's bucket crowds the gather
          for (int32_t t = 0; t < V; ++t) row[t] = std::round(normal(rng) * 2.0f) / 2.0f;
          for (int32_t t = 0; t < 9000; ++t) row[(static_cast<int64_t>(t) * 7919 + 11) % V] = 6.0f;
          p.top_k = 100;
          p.top_p = 0.9f;
          p.min_p = 0.0f;
          p.repetition_penalty = 1.0f;  // nothing moves a tied token out of the tie
          p.frequency_penalty = p.presence_penalty = 0.0f;
          p.logit_bias.clear();
          p.banned_tokens.clear();
          p.allowed_tokens.clear();
          b.bitmask_index[r] = -1;
        }
        if (r % 5 == 4)
          for (int i = 0; i < 3; ++i) row[rng() % V] = NAN;
        for (int32_t t = 0; t < V; ++t) row[t] = round_to_dtype(row[t], dtype);
      }
      std::vector<uint64_t> flagged;
      const AgreementCount n = agreement_on(b, steps, 0, &flagged);
      std::printf(
          "top-k exact V=%d, %d rows, dtype=%d: %d rows compared, %d near-tie disagreements, exact rows %llu, "
          "from the list %llu, from the band %llu\n",
          V, rows, static_cast<int>(dtype), n.compared, n.near_ties, static_cast<unsigned long long>(n.exact_rows),
          static_cast<unsigned long long>(n.list_rows), static_cast<unsigned long long>(n.band_rows));
      EXPECT_LE(n.near_ties, n.compared / 20);  // each one checked to be a near-tie by compare()
      if (!small) {
        EXPECT_GE(n.exact_rows, static_cast<uint64_t>(n.compared / 4));  // the exact kernel did run
      }
      // The leaders' rows: stage 2 sorts their top k and leaves them undecided only by its margin
      // (keep one leader or both), so it hints and bands them, and the tokens-only calls split them
      // and decide them from the band (from the list without it). The joint rows at large |z| take
      // either, by their band's width.
      if (band) {
        EXPECT_GT(n.band_rows, 0u) << "no row was decided from stage 2's band";
      } else {
        EXPECT_GT(n.list_rows, 0u) << "no row was decided from the split's list";
        EXPECT_EQ(n.band_rows, 0u) << "SONIC_CUDA_SPLIT_BAND=0 must leave the bands unread";
      }
      // Only the tokens-only calls (the last third) split: each must have flagged rows.
      for (int step = steps - steps / 3; step < steps; ++step)
        EXPECT_GT(flagged[step], 0u) << "tokens-only call " << step << " flagged no row";
    }
}

// 12 rows: about 11 slices a row on an H100 (132 SMs); 48 rows: two or three; 160: more flagged rows
// than SMs (one slice a row, grid-stride) in some calls.
TEST(CudaExactPath, TopKRowsMatchReference) { top_k_exact_agrees(32000, {{12, 9}, {48, 9}, {160, 3}}); }
// The same at a vocabulary small enough for compute-sanitizer.
TEST(CudaExactPath, TopKRowsSmallVocabulary) { top_k_exact_agrees(1000, {{3, 9}, {12, 9}}); }
// The same rows decided from the split's list alone (the route of rows whose band is wider).
TEST(CudaExactPath, TopKRowsFromTheList) { top_k_exact_agrees(1000, {{3, 9}, {12, 9}}, /*band=*/false); }

// Stage 2's margin band against the split's list: the exact path decides a banded row from the band
// and the slices' exact total, or with SONIC_CUDA_SPLIT_BAND=0 from the list, ranked and drawn over.
// Both take the same fixed-point masses and the same noise, so every token must be the same (no
// near-tie allowance, unlike the agreement with the reference, which excuses a wrong kept size
// within 1e-5 of the boundary: most bands lie there). Rows of two leaders whose top-p lies 4e-6
// from the first one's share (one leader kept, or both: a band of sizes 1 and 2), and in fp32 rows
// at T = 0.01, whose margin (about 1e-3 at |z| = 10^4) spans a few keys of the top k.
void band_matches_list(int32_t V, int32_t rows, int steps) {
  const bool small = V < 4096;
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)));
    std::mt19937_64 rng(7717 + V + rows + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, rows, dtype, kTopN, /*with_bitmask=*/false);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int32_t r = 0; r < rows; ++r) {
      float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      sonic::RequestParams p;
      p.seed = rng();
      p.initial_step = rng() % 1000;
      p.top_p_joint = true;
      p.top_k = leaders_top_k(rng, small);
      if (dtype == sonic::DType::kF32 && r % 2 == 1) {  // wide: bf16 cannot hold x = 100 + 0.03 N(0, 1)
        for (int32_t t = 0; t < V; ++t) row[t] = 100.0f + 0.03f * normal(rng);
        p.temperature = 0.01f;
        p.top_p = 0.2f + 0.5f * u(rng);
      } else {
        place_two_leaders(row, V, rng, normal);
        p.temperature = 1.0f;
        p.top_p = leaders_top_p(u(rng));
      }
      for (int32_t t = 0; t < V; ++t) row[t] = round_to_dtype(row[t], dtype);
      b.params[r] = p;
      b.prompts[r].clear();
    }
    sonic::Sampler with_band(make_config(sonic::Backend::kCuda, V, rows));
    const ScopedEnv env("SONIC_CUDA_SPLIT_BAND", "0");  // read when the sampler is made
    sonic::Sampler from_list(make_config(sonic::Backend::kCuda, V, rows));
    const std::vector<int32_t> slots = scattered_slots(rows);
    for (int32_t r = 0; r < rows; ++r) {
      with_band.admit(slots[r], b.params[r], nullptr, 0);
      from_list.admit(slots[r], b.params[r], nullptr, 0);
    }
    int differ = 0;
    for (int step = 0; step < steps; ++step) {
      const HostOutputs hb = run(with_band, b, slots, sonic::LogprobMode::kRaw, {}, Outputs::kTokensOnly);
      const HostOutputs hl = run(from_list, b, slots, sonic::LogprobMode::kRaw, {}, Outputs::kTokensOnly);
      for (int32_t r = 0; r < rows; ++r) {
        EXPECT_EQ(hb.tokens[r], hl.tokens[r]) << "step " << step << " row " << r;
        EXPECT_GE(hb.tokens[r], 0) << "step " << step << " row " << r;
        differ += hb.tokens[r] != hl.tokens[r];
      }
    }
    std::printf("band against list V=%d, %d rows, dtype=%d: %d of %d tokens differ; exact rows %llu, from the band %llu "
                "(list route: exact rows %llu, from the list %llu)\n",
                V, rows, static_cast<int>(dtype), differ, rows * steps,
                static_cast<unsigned long long>(with_band.exact_path_rows()),
                static_cast<unsigned long long>(with_band.exact_path_band_rows()),
                static_cast<unsigned long long>(from_list.exact_path_rows()),
                static_cast<unsigned long long>(from_list.exact_path_list_rows()));
    EXPECT_GT(with_band.exact_path_band_rows(), 0u) << "no row was decided from stage 2's band";
    EXPECT_GT(from_list.exact_path_list_rows(), 0u) << "no row was decided from the split's list";
    EXPECT_EQ(from_list.exact_path_band_rows(), 0u) << "SONIC_CUDA_SPLIT_BAND=0 must leave the bands unread";
  }
}

TEST(CudaExactPath, BandMatchesList) { band_matches_list(32000, 24, 8); }
TEST(CudaExactPath, BandMatchesListSmallVocabulary) { band_matches_list(1000, 12, 8); }

// Grammar-like masks: a bitmask (or, in every third row, an allowed list) that allows only a few runs
// of neighbouring ids, 1 to 40 long, and a few scattered ids. Most of stage 1's groups then hold no
// valid token, and a run's group holds valid tokens in a few lanes only, four a lane where the run
// is long: a warp keeps fewer of its lanes' largest values than a rank bound needs, while a lane
// holds four valid tokens. Random parameters (top-k, top-p, min-p, greedy, penalties, bias); rows
// often hold fewer valid tokens than their top-k. Every kept token must survive the screen: the
// GPU agrees with the reference within near-ties.
void grammar_masks_agree(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    std::mt19937_64 rng(5150 + V + static_cast<int>(dtype));
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/true);
    for (int32_t r = 0; r < b.rows; ++r) {
      std::vector<int32_t> allowed;
      const int32_t runs = 1 + static_cast<int32_t>(rng() % 3);
      for (int32_t k = 0; k < runs; ++k) {
        const int32_t len = 1 + static_cast<int32_t>(rng() % 40);
        const int32_t start = static_cast<int32_t>(rng() % (V - len));
        for (int32_t t = start; t < start + len; ++t) allowed.push_back(t);
      }
      for (int32_t k = static_cast<int32_t>(rng() % 6); k > 0; --k) allowed.push_back(static_cast<int32_t>(rng() % V));
      std::sort(allowed.begin(), allowed.end());
      allowed.erase(std::unique(allowed.begin(), allowed.end()), allowed.end());
      sonic::RequestParams& p = b.params[r];
      p.allowed_tokens.clear();
      int32_t* words = b.bitmask.data() + static_cast<size_t>(r) * b.words;
      std::fill(words, words + b.words, 0);
      if (r % 3 == 2) {  // through the allowed list, no bitmask
        p.allowed_tokens = allowed;
        b.bitmask_index[r] = -1;
      } else {
        for (const int32_t t : allowed) words[t / 32] |= static_cast<int32_t>(1u << (t % 32));
        b.bitmask_index[r] = r;
      }
    }
    agreement_within_near_ties(b, 6, "grammar masks");
  }
}

TEST(CudaGrammarMasks, RunsOfAllowedIdsMatchReference) { grammar_masks_agree(151936); }
// The same at a vocabulary small enough for the sanitizers (where the screen's rank follows V, a
// build with fixed ranks takes the rank path here: perf-notes v3.30).
TEST(CudaGrammarMasks, SmallVocabulary) { grammar_masks_agree(3001); }

// Rows masked by the engine itself, as Hugging Face's logits processors do: the disallowed logits
// set to the dtype's lowest finite value (in fp32 also -1e30, every other row) instead of -inf, so
// every token is valid and the allowed ones (runs and scattered ids, as above) stand far above the
// rest; top-k 1-128 in most rows. A chunk's lanes then publish maxima at that lowest value, and a
// top-k raise of the chunk's bound must not end below every finite key: from 1 it did, on a bound
// whose value is a NaN, under which the by-bound screen listed nothing of later steps while the
// chunk reported it (perf-notes v3.31). The raise runs between steps, so chunks of several steps
// are forced too. It starts from the chunk's bound, which a lane holding four finite values of a
// group already sets above the lowest value; so every third row is -inf around a sparse scatter
// of lowest values (every 37th id: at most three in a lane's group, whose bound stays 0) and the
// allowed tokens, with top-k 1-32 (fewer than the lanes holding a lowest value).
void engine_masks_agree(int32_t V, const char* tiles_per_chunk) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    SCOPED_TRACE("V = " + std::to_string(V) + ", dtype " + std::to_string(static_cast<int>(dtype)) +
                 ", tiles a chunk " + (tiles_per_chunk ? tiles_per_chunk : "(default)"));
    std::mt19937_64 rng(6160 + V + static_cast<int>(dtype));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/false);
    const float lowest = lowest_finite(dtype);
    for (int32_t r = 0; r < b.rows; ++r) {
      std::vector<char> allowed(V, 0);
      for (int32_t k = 1 + static_cast<int32_t>(rng() % 3); k > 0; --k) {
        const int32_t len = 1 + static_cast<int32_t>(rng() % 40);
        const int32_t start = static_cast<int32_t>(rng() % (V - len));
        std::fill(allowed.begin() + start, allowed.begin() + start + len, 1);
      }
      for (int32_t k = static_cast<int32_t>(rng() % 6); k > 0; --k) allowed[rng() % V] = 1;
      const float masked = dtype == sonic::DType::kF32 && r % 2 == 1 ? -1e30f : lowest;
      const bool sparse = r % 3 == 2;
      float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      for (int32_t t = 0; t < V; ++t)
        if (!allowed[t]) row[t] = !sparse ? masked : t % 37 == 0 ? lowest : -INFINITY;
      sonic::RequestParams& p = b.params[r];
      p.allowed_tokens.clear();
      if (sparse) {
        p.temperature = 0.5f + 0.8f * u(rng);
        p.top_k = 1 + static_cast<int32_t>(rng() % 32);
      } else if (r % 4 != 3) {  // truncated random rows with a top-k; the fourth keeps random_params' choice
        p.temperature = 0.5f + 0.8f * u(rng);
        p.top_k = 1 + static_cast<int32_t>(rng() % 128);
      }
    }
    const ScopedEnv env("SONIC_CUDA_TILES_PER_CHUNK", tiles_per_chunk);
    agreement_within_near_ties(b, 4, "engine masks");
  }
}

TEST(CudaEngineMasks, LowestFiniteMaskMatchesReference) {
  engine_masks_agree(151936, nullptr);
  engine_masks_agree(151936, "7");
}
// Chunks of three tiles at a vocabulary small enough for the sanitizers.
TEST(CudaEngineMasks, SmallVocabulary) { engine_masks_agree(30001, "3"); }

// Logits whose z = x / T leaves the floats where x does not (T < 1, |x| > FLT_MAX * T): rows with
// a maximum whose z overflows to +inf (two tokens near FLT_MAX), rows whose every valid token
// underflows to z = -inf (the reference: no valid token), rows masked with the dtype's lowest
// finite value around 100 ordinary tokens (asked for their final distribution), and rows of
// logits scaled by 1e37; T 0.2-0.9, every parameter kind. The fast path once sampled the lowest id
// of the +inf maxima on every seed, settled the underflowing rows with a token, and counted the
// masked rows' final distribution as V (perf-notes v3.31).
void extreme_logits_agree(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    std::mt19937_64 rng(7170 + V + static_cast<int>(dtype));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/false);
    const float lowest = lowest_finite(dtype);
    const float highest = -lowest;
    for (int32_t r = 0; r < b.rows; ++r) {
      float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      switch (r % 4) {
        case 0:  // two maxima whose z overflows
          for (int32_t t = 0; t < V; ++t) row[t] = normal(rng);
          row[rng() % V] = 0.6f * highest;
          row[rng() % V] = highest;
          break;
        case 1:  // every token at the lowest value, a few -inf
          for (int32_t t = 0; t < V; ++t) row[t] = u(rng) < 0.1f ? -INFINITY : lowest;
          break;
        case 2:  // masked by the engine around ordinary tokens
          for (int32_t t = 0; t < V; ++t) row[t] = lowest;
          for (int i = 0; i < 100; ++i) row[rng() % V] = 3.0f * normal(rng);
          break;
        default:  // every logit extreme
          for (int32_t t = 0; t < V; ++t) row[t] = 1e37f * normal(rng);
      }
      for (int32_t t = 0; t < V; ++t) row[t] = round_to_dtype(row[t], dtype);
      sonic::RequestParams& p = b.params[r];
      if (p.temperature != 0.0f) p.temperature = 0.2f + 0.7f * u(rng);
      p.logit_bias.clear();  // a bias would lift the lowest values back into the floats
    }
    agreement_within_near_ties(b, 6, "extreme logits");
  }
}

TEST(CudaExtremeLogits, TemperatureLeavesTheFloats) { extreme_logits_agree(151936); }
TEST(CudaExtremeLogits, SmallVocabulary) { extreme_logits_agree(3001); }

// Top-p at low temperatures, where |z| is large: stage 1's sum of exp((x - x_max) / T) differs from
// the reference's sum over rounded z = x / T by about |z| 2^-24 a term, past SPEC's 1e-5. A row of
// two valid tokens (20 and 19.998455, T 0.001, top-p 0.824322701) whose kept set is the first alone
// by 1.4e-4 of mass took both on the fast path; and random peaked rows at T 0.05-0.2 with top-p
// alone or joint. Every token must agree (within near-ties).
void low_temperature_top_p_agrees(int32_t V) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) {
    std::mt19937_64 rng(8180 + V + static_cast<int>(dtype));
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    Batch b = random_batch(rng, V, 24, dtype, kTopN, /*with_bitmask=*/false);
    for (int32_t r = 0; r < b.rows; ++r) {
      float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
      sonic::RequestParams p;
      p.seed = rng();
      p.initial_step = rng() % 1000;
      p.top_logprobs = static_cast<int32_t>(rng() % (kTopN + 1));
      if (r % 3 == 0) {  // the two-token row (fp32 values; in bf16 the second rounds to 20)
        for (int32_t t = 0; t < V; ++t) row[t] = -INFINITY;
        float second;
        const uint32_t bits = 0x419ffcd6u;  // 19.998455
        std::memcpy(&second, &bits, 4);
        row[rng() % (V / 2)] = 20.0f;
        row[V / 2 + rng() % (V / 2)] = second;
        p.temperature = 0.001f;
        p.top_p = 0.824322701f;
      } else {
        for (int32_t t = 0; t < V; ++t) row[t] = 3.0f * normal(rng);
        for (int i = 0; i < 5; ++i) row[rng() % V] += 8.0f + 4.0f * u(rng);
        p.temperature = 0.05f + 0.15f * u(rng);
        p.top_p = 0.5f + 0.49f * u(rng);
        p.top_p_joint = r % 3 == 2;
      }
      for (int32_t t = 0; t < V; ++t) row[t] = round_to_dtype(row[t], dtype);
      b.kinds[r] = RowKind::kPeaked;
      b.params[r] = p;
    }
    agreement_within_near_ties(b, 6, "low-temperature top-p");
  }
}

TEST(CudaLowTemperature, TopPMassMatchesReference) { low_temperature_top_p_agrees(151936); }
TEST(CudaLowTemperature, SmallVocabulary) { low_temperature_top_p_agrees(3001); }

// decide_kept settles a truncated row's top-p from stage 1's total only where the crossing stays put
// over detail::top_p_sum_margin(zm), so the total's relative error must stay inside that margin.
// The rows are bench/sum_error_model.cpp's rising families, whose lanes' maxima rise at every tile
// (each lane's sum rescaled at every tile; exactly, by powers of two, since perf-notes v3.38): "band" (tile t at
// -(tiles - 1 - t) delta), "lane" (the first token of each tile so, the rest between -48 and -40,
// no mass) and "bulk" (the band from -3 below one token at 0), the band's tokens a little apart
// within a tile; T 1 and 0.7; the whole row one chunk (the most tiles a lane) and the default
// chunking. Untruncated rows asking for the token's logprob alone, so that every row stays on the
// fast path, whose sums are the ones tested (a top-k row's 50 largest keys in one warp's group of
// the band's last tile took every row to the exact path on an H100, v3.37). The processed logprob of the sampled token is z - zm - log(total),
// so its distance from the reference's is the total's relative error: it must stay within the
// margin and the two outputs' roundings. With __expf rescales the model found up to 1.3 margins
// where ex2.approx errs by its documented 2 ulp the same way at every rescale, and an H100 measured
// 0.46; with the exact ones the model gives 0.10 and the H100 0.15-0.17, the outputs' rounding
// (v3.38). The worst is printed in units of 2^-24.
void sum_error_within_margin(int32_t V) {
  constexpr int32_t kTile = 4096;  // an fp32 tile's tokens
  const int32_t tiles = (V + kTile - 1) / kTile;
  struct RowSpec {
    int family;  // 0 band, 1 lane, 2 bulk
    float delta, T;
  };
  std::vector<RowSpec> specs;
  for (const float T : {1.0f, 0.7f})
    for (const float delta : {2e-7f, 1e-6f, 8e-6f, 6e-5f, 3e-4f, 2e-3f, 2e-2f})
      for (const int family : {0, 1, 2}) specs.push_back({family, delta, T});
  const int32_t R = static_cast<int32_t>(specs.size());
  Batch b;
  b.V = b.cols = V;
  b.rows = R;
  b.logits.assign(static_cast<size_t>(R) * V, 0.0f);
  b.params.resize(R);
  b.prompts.assign(R, {});
  b.kinds.assign(R, RowKind::kPeaked);
  std::mt19937_64 rng(5150 + V);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int32_t r = 0; r < R; ++r) {
    const RowSpec& sp = specs[r];
    float* row = b.logits.data() + static_cast<size_t>(r) * V;
    for (int32_t t = 0; t < V; ++t) {
      const float rise = -static_cast<float>(tiles - 1 - t / kTile) * sp.delta;
      const float spread = -static_cast<float>(t % kTile) * (sp.delta / 8192.0f);
      if (sp.family == 0) row[t] = rise + spread;
      else if (sp.family == 1) row[t] = t % kTile == 0 ? rise : -40.0f - 8.0f * u(rng);
      else if (sp.family == 2) row[t] = -3.0f + rise + spread;
    }
    if (sp.family == 2) row[static_cast<size_t>(tiles - 1) * kTile] = 0.0f;
    sonic::RequestParams& p = b.params[r];
    p.temperature = sp.T;
    p.seed = rng();
    p.initial_step = rng() % 1000;
  }
  const std::string whole = std::to_string(tiles);
  for (const char* per_chunk : {whole.c_str(), static_cast<const char*>(nullptr)}) {
    SCOPED_TRACE(std::string("SONIC_CUDA_TILES_PER_CHUNK=") + (per_chunk ? per_chunk : "(unset)"));
    const ScopedEnv env("SONIC_CUDA_TILES_PER_CHUNK", per_chunk);
    sonic::Sampler cpu(make_config(sonic::Backend::kCpu, V, R));
    sonic::Sampler gpu(make_config(sonic::Backend::kCuda, V, R));
    const std::vector<int32_t> slots = scattered_slots(R);
    for (int32_t r = 0; r < R; ++r) {
      cpu.admit(slots[r], b.params[r], nullptr, 0);
      gpu.admit(slots[r], b.params[r], nullptr, 0);
    }
    std::vector<RowState> states(R);
    for (int32_t r = 0; r < R; ++r) states[r] = RowState{&b.params[r], {}, {}, cpu.step(slots[r])};
    const HostOutputs hc = run(cpu, b, slots, sonic::LogprobMode::kProcessed, {}, Outputs::kLogprobOnly);
    const HostOutputs hg = run(gpu, b, slots, sonic::LogprobMode::kProcessed, {}, Outputs::kLogprobOnly);
    double worst = 0.0, worst_units = 0.0;
    int worst_row = -1;
    for (int32_t r = 0; r < R; ++r) {
      SCOPED_TRACE("row " + std::to_string(r) + " family " + std::to_string(specs[r].family) + " delta " +
                   std::to_string(specs[r].delta) + " T " + std::to_string(specs[r].T));
      if (hc.tokens[r] != hg.tokens[r]) {  // two tokens' logprobs: only a near-tie may differ
        std::string why;
        EXPECT_TRUE(near_tie(b, r, states[r], hc.tokens[r], hg.tokens[r], &why)) << why;
        continue;
      }
      const float* row = b.logits.data() + static_cast<size_t>(r) * V;
      const float zm = sonic::detail::apply_temperature(*std::max_element(row, row + V), specs[r].T);
      const double margin = sonic::detail::top_p_sum_margin(zm);
      const double rounding = 2.0 * std::ldexp(1.0, std::ilogb(std::max(1.0f, std::fabs(hc.logprob[r]))) - 23);
      const double d = std::fabs(static_cast<double>(hg.logprob[r]) - static_cast<double>(hc.logprob[r]));
      EXPECT_LE(d, margin + rounding) << "cpu " << hc.logprob[r] << " gpu " << hg.logprob[r];
      if (d / margin > worst) worst = d / margin, worst_units = d * 0x1p24, worst_row = r;
    }
    std::printf("sums of rising rows, V=%d, tiles a chunk %s: %d rows (%llu on the exact path), the worst logprob "
                "error %.1f units of 2^-24 = %.3f margins (row %d)\n",
                V, per_chunk ? per_chunk : "(default)", R, static_cast<unsigned long long>(gpu.exact_path_rows()),
                worst_units, worst, worst_row);
    EXPECT_EQ(gpu.exact_path_rows(), 0u) << "the rows must stay on the fast path, whose sums this tests";
  }
}

TEST(CudaSumError, RisingLanesStayWithinTheMargin) { sum_error_within_margin(262144); }

// agreement_run with the environment variable `var` set to `value` while the samplers are made
// (null: unset), for the backend's shape switches (read when a sampler is created): prints the
// count and expects near-ties only.
void expect_agreement_with(const char* var, const char* value, const AgreementCase& c, int32_t R, int steps,
                           uint64_t seed) {
  SCOPED_TRACE(std::string(var) + "=" + (value ? value : "(unset)") + ", V = " + std::to_string(c.V) +
               ", dtype " + std::to_string(static_cast<int>(c.dtype)) + ", R = " + std::to_string(R));
  int compared = 0, near_ties = 0;
  {
    const ScopedEnv env(var, value);
    std::tie(compared, near_ties) = agreement_run(c, R, steps, seed);
  }
  std::printf("%s=%s, V=%d dtype=%d R=%d: %d rows compared, %d near-tie disagreements\n", var, value ? value : "(unset)",
              c.V, static_cast<int>(c.dtype), R, compared, near_ties);
  EXPECT_LE(near_ties, compared / 20);
}

// Every dtype and batch with `var` forced to each of `values`.
void switch_agrees(const char* var, std::initializer_list<const char*> values, std::initializer_list<sonic::DType> dtypes,
                   int32_t V, std::initializer_list<int32_t> batches, int steps, uint64_t seed) {
  for (const sonic::DType dtype : dtypes)
    for (const char* value : values)
      for (const int32_t R : batches) expect_agreement_with(var, value, AgreementCase{V, dtype}, R, steps, seed + R + V);
}

// The fast kernel streams chunks of tiles whose size depends on the grid (and can be forced for
// experiments): tokens must not. Small batches use a tile a chunk, so force larger chunks here, and
// run one batch large enough to get them by default.
TEST(CudaChunking, AgreesAtEveryChunkSize) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16})
    for (const int per_chunk : {2, 7, 16, 38})  // 38: a whole row a chunk (fp32, 38 tiles)
      expect_agreement_with("SONIC_CUDA_TILES_PER_CHUNK", std::to_string(per_chunk).c_str(), AgreementCase{151936, dtype},
                            16, 3, 77 + per_chunk);
  const auto [compared, near_ties] = agreement_run(AgreementCase{151936, sonic::DType::kF32}, 200, 2, 4242);
  std::printf("200 rows, default chunking: %d rows compared, %d near-tie disagreements\n", compared, near_ties);
  EXPECT_LE(near_ties, compared / 20);
}

// Row tails (FastScratch::tail_first): each chunk of a row with rules gives its last tiles to a
// block of its own, the others leave those empty, so a call mixes rows of H and 2H chunks. By
// default at a chunk a row (300 rows); forced ("P:R", SONIC_CUDA_TAILS) at three and two chunks a
// row (150 and 200 rows) and in a small batch (many heads a row, the last one's tail empty where the
// last chunk is short), whose stage 2 runs in row_stage2_kernel and counts the empty chunks, with
// heads of 40-75 %.
TEST(CudaChunking, AgreesWithRowTails) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16, sonic::DType::kF16})
    for (const auto& [tails, rows] : {std::pair<const char*, int>{nullptr, 300}, {"75:1", 150}, {"75:1", 200}, {"60:1", 300},
                                      {"75:1", 16}, {"40:1", 16}})
      expect_agreement_with("SONIC_CUDA_TAILS", tails, AgreementCase{151936, dtype}, rows, 2, 91 + rows);
}

// The same at a vocabulary small enough for compute-sanitizer: chunks of several tiles, a partial
// last tile and chunk, every dtype.
TEST(CudaChunking, SmallVocabularyForcedChunks) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16, sonic::DType::kF16}) {
    expect_agreement_with("SONIC_CUDA_TILES_PER_CHUNK", "3", AgreementCase{30001, dtype}, 8, 3, 31 + static_cast<int>(dtype));
    // Row tails, forced: fp32 (8 tiles) three heads of 3, 3 and 2 tiles, of which rows with rules keep
    // 2 (the last tail empty); 16-bit (4 tiles) one head keeping 2; the last tile partial.
    expect_agreement_with("SONIC_CUDA_TAILS", "50:1", AgreementCase{30001, dtype}, 8, 3, 37 + static_cast<int>(dtype));
  }
}

// 16-bit logits take short steps (four loads a lane, tiles of 4096 tokens) in calls of at most 32
// rows and full steps (eight loads, 8192 tokens) above (FastScratch::step_loads); both, forced
// either way (SONIC_CUDA_SHORT_STEP_ROWS), give the reference's tokens, at batches on both sides of
// the rule.
constexpr auto kSixteenBit = {sonic::DType::kBF16, sonic::DType::kF16};
TEST(CudaStepShape, BothShapesMatchReference) {
  switch_agrees("SONIC_CUDA_SHORT_STEP_ROWS", {"0", "100000"}, kSixteenBit, 151936, {16, 200}, 2, 700);
}

// The same at a vocabulary small enough for compute-sanitizer, whose last tile is partial.
TEST(CudaStepShape, SmallVocabulary) {
  switch_agrees("SONIC_CUDA_SHORT_STEP_ROWS", {"0", "100000"}, kSixteenBit, 30001, {8}, 2, 700);
}

// Stage 2 runs in the last block of a row or, for small batches (at most a row an SM), in
// row_stage2_kernel (512 threads a row): both placements, forced, give the reference's tokens. A
// small vocabulary for compute-sanitizer, the benchmark's for the real shapes.
constexpr auto kFp32AndBf16 = {sonic::DType::kF32, sonic::DType::kBF16};
TEST(CudaStage2Placement, LastBlockAndRowKernelAgree) {
  switch_agrees("SONIC_CUDA_SEPARATE_STAGE2_ROWS", {"0", "100000"}, kFp32AndBf16, 151936, {4, 16}, 3, 500);
}
TEST(CudaStage2Placement, SmallVocabulary) {
  switch_agrees("SONIC_CUDA_SEPARATE_STAGE2_ROWS", {"0", "100000"}, kFp32AndBf16, 30001, {6}, 2, 500);
}

// The launch switches for experiments (README) change no token: plain launches in place of
// programmatic ones, and the kernels' preferred shared-memory carveouts (kernel attributes, so the
// test puts them back to no preference).
TEST(CudaLaunchSwitches, PlainLaunchesAndCarveoutsAgree) {
  struct Switch {
    const char* name;
    const char* value;
  };
  for (const Switch w : {Switch{"SONIC_CUDA_PROGRAMMATIC", "0"}, Switch{"SONIC_CUDA_CARVEOUT", "100,100,100"},
                         Switch{"SONIC_CUDA_CARVEOUT", "-1,25,0"}})
    for (const int32_t R : {4, 200})  // stage 2 in row_stage2_kernel, then in a row's last block
      expect_agreement_with(w.name, w.value, AgreementCase{30001, sonic::DType::kF32}, R, 2, 900 + R);
  {
    const ScopedEnv env("SONIC_CUDA_CARVEOUT", "-1,-1,-1");
    sonic::Sampler reset(make_config(sonic::Backend::kCuda, 1000, 1));
  }
}

// An allocation that fails part way through a sampler's construction is kOutOfMemory and frees
// what was allocated before it (cuda/device_allocations.hpp): the device's free memory is as before,
// and the next sampler is made as usual. The backend's first large allocation is its logits scratch
// (4 V bytes a row, 60 GB here); a ballast leaves room for it and 1 GiB more, which its candidate
// lists (8 bytes for each of 384 candidates a tile of 4096 tokens, 11 GB here) then exceed.
TEST(CudaAllocation, OutOfMemoryFreesWhatWasAllocated) {
  { sonic::Sampler warm(make_config(sonic::Backend::kCuda, 1000, 4)); }  // the kernels' modules loaded before
  sonic::SamplerConfig c = make_config(sonic::Backend::kCuda, 229376, 1);
  c.max_rows = 65535;
  c.max_slots = 1;
  c.max_history = 0;
  const size_t scratch = static_cast<size_t>(c.max_rows) * static_cast<size_t>(c.vocab_size) * sizeof(float);
  size_t free0 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  ASSERT_GT(free0, scratch + (2ull << 30)) << "the device has too little memory for this test";
  void* ballast = nullptr;
  ASSERT_EQ(cudaMalloc(&ballast, free0 - scratch - (1ull << 30)), cudaSuccess);
  size_t free1 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  try {
    sonic::Sampler s(c);
    ADD_FAILURE() << "no error";
  } catch (const sonic::Error& e) {
    EXPECT_EQ(e.code(), sonic::ErrorCode::kOutOfMemory) << e.what();
  }
  size_t free2 = 0;
  ASSERT_EQ(cudaMemGetInfo(&free2, &total), cudaSuccess);
  ASSERT_EQ(cudaFree(ballast), cudaSuccess);
  EXPECT_GE(free2 + (64u << 20), free1) << (free1 - free2) / (1 << 20) << " MiB not freed";
  sonic::Sampler next(make_config(sonic::Backend::kCuda, 1000, 4));
}

// The CUDA backend's limits are errors naming the argument when the sampler is made: at most
// 65535 rows a call (the fast kernel's grid), 262144 tokens, a device that is present.
TEST(CudaConfig, LimitsAreErrors) {
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  struct Bad {
    int32_t V, rows, device, final_entries;
    const char* name;
  };
  // A final distribution of 2^20 entries (8 MB) exceeds any block's shared memory.
  for (const Bad b : {Bad{1000, 65536, 0, 0, "config.max_rows"}, Bad{262145, 4, 0, 0, "config.vocab_size"},
                      Bad{1000, 4, devices, 0, "config.device"}, Bad{1000, 4, 0, 1 << 20, "config.max_final_entries"}}) {
    sonic::SamplerConfig c = make_config(sonic::Backend::kCuda, b.V, 1);
    c.max_rows = b.rows;
    c.max_slots = 1;
    c.device = b.device;
    c.max_final_entries = b.final_entries;
    SCOPED_TRACE(b.name);
    try {
      sonic::Sampler s(c);
      ADD_FAILURE() << "no error";
    } catch (const sonic::Error& e) {
      EXPECT_EQ(e.code(), sonic::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(b.name), std::string::npos) << e.what();
    }
  }
  sonic::SamplerConfig c = make_config(sonic::Backend::kCuda, 1000, 1);
  c.max_rows = 65535;
  c.max_final_entries = sonic::max_final_entries(sonic::Backend::kCuda, 0);
  sonic::Sampler largest(c);
}

// sonic::max_final_entries is the limit Sampler applies: a sampler at it is made, one past it is
// refused with the same number. kAuto is CUDA here; the query names a device that is not present
// and leaves the calling thread's current device as it was.
TEST(CudaConfig, MaxFinalEntriesIsTheLimit) {
  const int32_t limit = sonic::max_final_entries(sonic::Backend::kCuda, 0);
  EXPECT_GE(limit, 16384);  // 128 KB: compute capability 9.0 gives a block 227 KB
  EXPECT_LT(limit, std::numeric_limits<int32_t>::max());
  EXPECT_EQ(sonic::max_final_entries(sonic::Backend::kAuto, 0), limit);
  sonic::SamplerConfig c = make_config(sonic::Backend::kCuda, 1000, 1);
  c.max_final_entries = limit;
  EXPECT_NO_THROW(sonic::Sampler{c});
  c.max_final_entries = limit + 1;
  try {
    sonic::Sampler s(c);
    ADD_FAILURE() << "no error";
  } catch (const sonic::Error& e) {
    EXPECT_EQ(e.code(), sonic::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("at most " + std::to_string(limit) + " entries"), std::string::npos)
        << e.what();
  }
  int devices = 0;
  SONIC_TEST_CUDA(cudaGetDeviceCount(&devices));
  try {
    (void)sonic::max_final_entries(sonic::Backend::kCuda, devices);
    ADD_FAILURE() << "no error";
  } catch (const sonic::Error& e) {
    EXPECT_EQ(e.code(), sonic::ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("device = " + std::to_string(devices)), std::string::npos) << e.what();
  }
  if (devices > 1) {
    SONIC_TEST_CUDA(cudaSetDevice(1));
    EXPECT_EQ(sonic::max_final_entries(sonic::Backend::kCuda, 0), limit);
    int current = -1;
    SONIC_TEST_CUDA(cudaGetDevice(&current));
    EXPECT_EQ(current, 1);
    SONIC_TEST_CUDA(cudaSetDevice(0));
  }
}

// Every switch of the README rejects a malformed value when the sampler is made, naming it
// (tests/cpu/test_env_switches.cpp tests the parser itself).
TEST(CudaLaunchSwitches, MalformedValuesAreErrors) {
  struct Bad {
    const char* name;
    const char* value;
  };
  for (const Bad b : {Bad{"SONIC_CUDA_CARVEOUT", "100"}, Bad{"SONIC_CUDA_CARVEOUT", "50,50,abc"},
                      Bad{"SONIC_CUDA_CARVEOUT", "101,0,0"}, Bad{"SONIC_CUDA_TAILS", "75x"},
                      Bad{"SONIC_CUDA_TAILS", "75:-1"}, Bad{"SONIC_CUDA_TILES_PER_CHUNK", "-3"},
                      Bad{"SONIC_CUDA_SEPARATE_STAGE2_ROWS", "many"}, Bad{"SONIC_CUDA_SHORT_STEP_ROWS", "32 "},
                      Bad{"SONIC_CUDA_PROGRAMMATIC", "2"}, Bad{"SONIC_CUDA_SPLIT_LIST", "on"},
                      Bad{"SONIC_CUDA_SPLIT_BAND", "-1"}}) {
    SCOPED_TRACE(std::string(b.name) + "=" + b.value);
    const ScopedEnv env(b.name, b.value);
    try {
      sonic::Sampler s(make_config(sonic::Backend::kCuda, 1000, 1));
      ADD_FAILURE() << "no error";
    } catch (const sonic::Error& e) {
      EXPECT_EQ(e.code(), sonic::ErrorCode::kInvalidArgument);
      EXPECT_NE(std::string(e.what()).find(std::string(b.name) + " = '" + b.value + "'"), std::string::npos) << e.what();
    }
  }
}

// SPEC.md section 4: a row's token depends on its logits, its request, seed and step only; not on
// the batch size, the row's position or slot, nor on what the batch size makes of the launch (how
// many chunks a row is split into, where its stage 2 runs). The same twelve requests, each given the
// same logits call after call, are sampled alone and inside batches of 40, 200 and 300 rows (fp32
// at V = 151936: 38 chunks of a tile, then 13 of three tiles, both with stage 2 in
// row_stage2_kernel; two chunks of 19 tiles with stage 2 in a row's last block; a whole row a
// block), at shuffled positions and scattered
// slots, three calls in the three logprob modes, every output asked for. Tokens, statuses, ranks,
// top-N ids and final ids must be identical; log-probabilities and final probabilities within 1e-5
// (the chunks' fp32 sums are combined in an order that depends on the chunking, so their last bits
// may differ; a joint top-p row whose mass lands within that rounding of its threshold could in
// principle change its token, with a chance far below one in a million a row).
void batch_invariance(sonic::DType dtype) {
  constexpr int32_t V = 151936, kTargets = 12, kCalls = 3;
  std::mt19937_64 rng(2026 + static_cast<int>(dtype));
  const Batch targets = random_batch(rng, V, kTargets, dtype, kTopN, /*with_bitmask=*/true);
  const Batch fillers = random_batch(rng, V, 300, dtype, kTopN, /*with_bitmask=*/true);
  const sonic::LogprobMode modes[kCalls] = {sonic::LogprobMode::kProcessed, sonic::LogprobMode::kRaw,
                                            sonic::LogprobMode::kFinal};
  std::vector<std::vector<HostOutputs>> layouts;  // [layout][call]: the targets' outputs, in target order
  for (const int32_t B : {kTargets, 40, 200, 300}) {
    std::vector<int32_t> order(B);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(B));
    std::vector<int32_t> source(B, -1);  // the target a row holds, or -1 for a filler
    for (int32_t i = 0; i < kTargets; ++i) source[order[i]] = i;
    Batch b;
    b.V = V;
    b.cols = targets.cols;
    b.rows = B;
    b.dtype = dtype;
    b.words = targets.words;
    b.logits.resize(static_cast<size_t>(B) * b.cols);
    b.bitmask.resize(static_cast<size_t>(B) * b.words);
    for (int32_t r = 0, filler = 0; r < B; ++r) {
      const bool target = source[r] >= 0;
      const Batch& from = target ? targets : fillers;
      const int32_t j = target ? source[r] : filler++;
      std::copy_n(from.logits.begin() + static_cast<size_t>(j) * b.cols, b.cols, b.logits.begin() + static_cast<size_t>(r) * b.cols);
      std::copy_n(from.bitmask.begin() + static_cast<size_t>(j) * b.words, b.words, b.bitmask.begin() + static_cast<size_t>(r) * b.words);
      b.bitmask_index.push_back(from.bitmask_index[j] >= 0 ? r : -1);
      b.params.push_back(from.params[j]);
      b.prompts.push_back(from.prompts[j]);
      b.kinds.push_back(from.kinds[j]);
    }
    sonic::Sampler gpu(make_config(sonic::Backend::kCuda, V, B));
    const std::vector<int32_t> slots = scattered_slots(B);
    for (int32_t r = 0; r < B; ++r)
      gpu.admit(slots[r], b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
    std::vector<HostOutputs> calls;
    for (int c = 0; c < kCalls; ++c) {
      const HostOutputs h = run(gpu, b, slots, modes[c]);  // each row's token joins its history
      // The targets' rows of each output, in target order (`width` entries a row).
      auto targets_of = [&](const auto& v, int width) {
        std::remove_cv_t<std::remove_reference_t<decltype(v)>> t;
        for (int32_t i = 0; i < kTargets; ++i) t.insert(t.end(), v.begin() + order[i] * width, v.begin() + (order[i] + 1) * width);
        return t;
      };
      HostOutputs t;
      t.tokens = targets_of(h.tokens, 1);
      t.status = targets_of(h.status, 1);
      t.rank = targets_of(h.rank, 1);
      t.logprob = targets_of(h.logprob, 1);
      t.final_count = targets_of(h.final_count, 1);
      t.top_ids = targets_of(h.top_ids, kTopN);
      t.top_logprobs = targets_of(h.top_logprobs, kTopN);
      t.final_ids = targets_of(h.final_ids, kFinalCap);
      t.final_probs = targets_of(h.final_probs, kFinalCap);
      calls.push_back(std::move(t));
    }
    layouts.push_back(std::move(calls));
  }
  int differences = 0;
  for (size_t l = 1; l < layouts.size(); ++l)
    for (int c = 0; c < kCalls; ++c)
      for (int32_t i = 0; i < kTargets; ++i) {
        SCOPED_TRACE("layout " + std::to_string(l) + " call " + std::to_string(c) + " target " + std::to_string(i) +
                     " kind " + std::to_string(static_cast<int>(targets.kinds[i])));
        const HostOutputs &a = layouts[0][c], &x = layouts[l][c];
        const bool same = a.tokens[i] == x.tokens[i] && a.status[i] == x.status[i] && a.rank[i] == x.rank[i] &&
                          a.final_count[i] == x.final_count[i];
        differences += !same;
        EXPECT_EQ(a.tokens[i], x.tokens[i]);
        EXPECT_EQ(a.status[i], x.status[i]);
        EXPECT_EQ(a.rank[i], x.rank[i]);
        EXPECT_EQ(a.final_count[i], x.final_count[i]);
        EXPECT_TRUE(close(a.logprob[i], x.logprob[i], 1e-5f)) << a.logprob[i] << " vs " << x.logprob[i];
        for (int n = 0; n < kTopN; ++n) {
          EXPECT_EQ(a.top_ids[i * kTopN + n], x.top_ids[i * kTopN + n]) << "top " << n;
          EXPECT_TRUE(close(a.top_logprobs[i * kTopN + n], x.top_logprobs[i * kTopN + n], 1e-5f)) << "top " << n;
        }
        for (int n = 0; n < kFinalCap; ++n) {
          EXPECT_EQ(a.final_ids[i * kFinalCap + n], x.final_ids[i * kFinalCap + n]) << "final " << n;
          EXPECT_NEAR(a.final_probs[i * kFinalCap + n], x.final_probs[i * kFinalCap + n], 1e-5f) << "final " << n;
        }
      }
  std::printf("batch invariance dtype=%d: %d targets x %d calls in batches of 12 / 40 / 200 / 300: %d rows differ\n",
              static_cast<int>(dtype), kTargets, kCalls, differences);
}

TEST(CudaBatchInvariance, TokensIndependentOfBatchSizePositionAndSlot) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16}) batch_invariance(dtype);
}

INSTANTIATE_TEST_SUITE_P(
    AllShapes, CudaAgreement,
    ::testing::Values(AgreementCase{1000, sonic::DType::kF32}, AgreementCase{1000, sonic::DType::kBF16},
                      AgreementCase{1000, sonic::DType::kF16}, AgreementCase{32000, sonic::DType::kF32},
                      AgreementCase{32000, sonic::DType::kBF16}, AgreementCase{32000, sonic::DType::kF16},
                      AgreementCase{128256, sonic::DType::kF32}, AgreementCase{128256, sonic::DType::kBF16},
                      AgreementCase{151936, sonic::DType::kF32}, AgreementCase{151936, sonic::DType::kBF16},
                      AgreementCase{151936, sonic::DType::kF16}, AgreementCase{262144, sonic::DType::kF32},
                      AgreementCase{262144, sonic::DType::kBF16}),
    case_name);

// Truncated rows asking for rank and top-N in every mode: stage 2 settles them from its sorted
// prefix (no row reaches the exact path), with the reference's ranks, top-N ids and logprobs,
// including rows of many exact ties (plateaus, where ranks count ties) and rows with penalties and
// biases (processed and final modes; raw-mode ranks of rows with rules need the whole row).
TEST(CudaRanks, TruncatedRowsStayOnTheFastPath) {
  for (const sonic::DType dtype : {sonic::DType::kF32, sonic::DType::kBF16})
    for (const bool rules : {false, true}) {
      SCOPED_TRACE(std::string("dtype ") + std::to_string(static_cast<int>(dtype)) + (rules ? " with rules" : ""));
      std::mt19937_64 rng(515 + static_cast<int>(dtype) + (rules ? 100 : 0));
      const int32_t V = 151936, R = 24;
      Batch b = random_batch(rng, V, R, dtype, kTopN, /*with_bitmask=*/false);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int32_t r = 0; r < R; ++r) {
        const RowKind kind = static_cast<RowKind>(r % 3);  // peaked, flat, plateau
        b.kinds[r] = kind;
        float* row = b.logits.data() + static_cast<size_t>(r) * b.cols;
        for (int32_t t = 0; t < V; ++t) {
          float x = kind == RowKind::kFlat ? normal(rng) : 3.0f * normal(rng);
          if (kind == RowKind::kPlateau) x = std::round(x * 2.0f) / 2.0f;
          row[t] = round_to_dtype(x, dtype);
        }
        if (kind == RowKind::kPeaked)
          for (int i = 0; i < 5; ++i) row[rng() % V] += 10.0f;
        sonic::RequestParams p = rules ? b.params[r] : sonic::RequestParams{};
        p.seed = rng();
        p.temperature = 0.4f + u(rng);
        // A top-k bounds every kept set (a wide top-p nucleus alone would take the exact path).
        p.top_k = 1 + static_cast<int32_t>(rng() % 100);
        p.top_p = r % 4 < 2 ? 0.6f + 0.4f * u(rng) : 1.0f;
        p.min_p = r % 5 == 0 ? 0.1f * u(rng) : 0.0f;
        p.top_p_joint = r % 7 == 0;
        p.top_logprobs = 1 + static_cast<int32_t>(rng() % kTopN);
        p.allowed_tokens.clear();  // every row keeps enough tokens for its top N
        b.params[r] = p;
      }
      sonic::Sampler cpu(make_config(sonic::Backend::kCpu, V, R));
      sonic::Sampler gpu(make_config(sonic::Backend::kCuda, V, R));
      std::vector<int32_t> slots(R);
      std::vector<RowState> states(R);
      for (int32_t r = 0; r < R; ++r) {
        slots[r] = r;
        cpu.admit(r, b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
        gpu.admit(r, b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
        states[r] = RowState{&b.params[r], b.prompts[r], {}, 0};
      }
      int near_ties = 0;
      for (const sonic::LogprobMode mode :
           {sonic::LogprobMode::kProcessed, sonic::LogprobMode::kFinal, sonic::LogprobMode::kRaw}) {
        for (int32_t r = 0; r < R; ++r) states[r].step = cpu.step(slots[r]);
        const uint64_t before = gpu.exact_path_rows();
        const HostOutputs hc = run(cpu, b, slots, mode);
        const HostOutputs hg = run(gpu, b, slots, mode);
        near_ties += compare(b, hc, hg, "ranks", Outputs::kAll, states);
        if (!(rules && mode == sonic::LogprobMode::kRaw)) {
          EXPECT_EQ(gpu.exact_path_rows(), before) << "mode " << static_cast<int>(mode);
        }
      }
      std::printf("ranks dtype=%d rules=%d: %d rows x 3 modes, %d near-tie disagreements, exact rows %llu\n",
                  static_cast<int>(dtype), rules, R, near_ties,
                  static_cast<unsigned long long>(gpu.exact_path_rows()));
      EXPECT_LE(near_ties, 3 * R / 20);
    }
}

TEST(CudaBadRows, FlaggedWithoutDisturbingOtherRows) {
  std::mt19937_64 rng(99);
  const int32_t V = 5000, R = 12;
  const Batch b = random_batch(rng, V, R, sonic::DType::kF32, kTopN, false);
  sonic::Sampler gpu(make_config(sonic::Backend::kCuda, V, R));
  std::vector<int32_t> slots(R);
  for (int32_t r = 0; r < R; ++r) {
    slots[r] = r;
    gpu.admit(r, b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
  }
  sonic::CallOptions keep;
  keep.advance_step = false;
  keep.append_to_history = false;
  const HostOutputs good = run(gpu, b, slots, sonic::LogprobMode::kRaw, keep);
  gpu.retire(7);
  std::vector<int32_t> bad = slots;
  bad[2] = -1;
  bad[5] = 1 << 30;
  bad[7] = 7;  // retired
  const HostOutputs out = run(gpu, b, bad, sonic::LogprobMode::kRaw, keep);
  for (int32_t r = 0; r < R; ++r) {
    if (r == 2 || r == 5 || r == 7) {
      EXPECT_EQ(out.tokens[r], -1);
      EXPECT_EQ(out.status[r], sonic::kStatusInvalidInput);
      EXPECT_EQ(out.final_count[r], 0);
    } else {
      EXPECT_EQ(out.tokens[r], good.tokens[r]) << r;
      EXPECT_EQ(out.status[r], good.status[r]) << r;
    }
  }
}

TEST(CudaGraph, CapturedStepReplaysLikeEagerAndReference) {
  std::mt19937_64 rng(2024);
  const int32_t V = 32000, R = 8, kReplays = 1000;
  Batch b = random_batch(rng, V, R, sonic::DType::kF32, kTopN, false);
  sonic::Sampler cpu(make_config(sonic::Backend::kCpu, V, R));
  sonic::Sampler graph_s(make_config(sonic::Backend::kCuda, V, R));
  sonic::Sampler eager_s(make_config(sonic::Backend::kCuda, V, R));
  std::vector<int32_t> slots(R);
  auto admit = [&](int32_t r) {
    for (sonic::Sampler* s : {&cpu, &graph_s, &eager_s})
      s->admit(r, b.params[r], b.prompts[r].data(), static_cast<int64_t>(b.prompts[r].size()));
  };
  for (int32_t r = 0; r < R; ++r) {
    slots[r] = r;
    admit(r);
  }
  cudaStream_t stream;
  SONIC_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer<float> d_logits(b.logits.size());
  DeviceBuffer<int32_t> d_slots(R), d_tokens(R), d_status(R), e_tokens(R), e_status(R);
  d_slots.upload(slots);
  sonic::LogitsView lv{d_logits.get(), sonic::DType::kF32, R, b.cols, b.cols};
  sonic::SampleOutputs go, eo;
  go.tokens = d_tokens.get();
  go.status = d_status.get();
  eo.tokens = e_tokens.get();
  eo.status = e_status.get();
  sonic::CallOptions opt;
  opt.stream = stream;

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  SONIC_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  graph_s.sample(lv, d_slots.get(), {}, go, opt);
  SONIC_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  SONIC_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));

  std::normal_distribution<float> normal(0.0f, 1.0f);
  int mismatches = 0;
  for (int i = 0; i < kReplays; ++i) {
    for (int32_t r = 0; r < R; ++r)  // fresh logits every replay
      for (int32_t t = 0; t < V; ++t) b.logits[static_cast<size_t>(r) * b.cols + t] = 3.0f * normal(rng);
    if (i % 100 == 50) {  // new parameters for one slot, between replays
      const int32_t r = i / 100 % R;
      b.params[r] = random_params(rng, V, kTopN);
      admit(r);
    }
    SONIC_TEST_CUDA(cudaMemcpyAsync(d_logits.get(), b.logits.data(), b.logits.size() * 4, cudaMemcpyHostToDevice, stream));
    SONIC_TEST_CUDA(cudaGraphLaunch(exec, stream));
    eager_s.sample(lv, d_slots.get(), {}, eo, opt);
    SONIC_TEST_CUDA(cudaStreamSynchronize(stream));
    const std::vector<int32_t> gt = d_tokens.download(), et = e_tokens.download();
    std::vector<int32_t> ct(R), cs(R);
    sonic::SampleOutputs co;
    co.tokens = ct.data();
    co.status = cs.data();
    cpu.sample(sonic::LogitsView{b.logits.data(), sonic::DType::kF32, R, b.cols, b.cols}, slots.data(), {}, co);
    for (int32_t r = 0; r < R; ++r) {
      ASSERT_EQ(gt[r], et[r]) << "graph and eager differ at replay " << i << " row " << r;
      if (gt[r] != ct[r]) {
        ++mismatches;
        std::printf("  [near-tie?] replay %d row %d: gpu %d cpu %d\n", i, r, gt[r], ct[r]);
      }
    }
  }
  std::printf("%d replays x %d rows: %d disagreements with the reference\n", kReplays, R, mismatches);
  EXPECT_LE(mismatches, kReplays * R / 200);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace sonic_gpu
