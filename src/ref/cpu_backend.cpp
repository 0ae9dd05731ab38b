// The CPU backend: the request table in host memory and the reference, row by row (on
// SamplerConfig::cpu_threads threads; rows read the table, and the changes a call makes are applied
// after all of its rows, in row order). All arrays of a call are host arrays. Device-side
// conditions (bad slot ids, draft ids, cu_rows) are checked here exactly as the kernels check them,
// and flagged in the row's status.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "common/request_rows.hpp"
#include "host/backend.hpp"
#include "host/validate.hpp"
#include "ref/parallel_for.hpp"
#include "ref/reference.hpp"
#include "sonic/error.hpp"

namespace sonic {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

struct Slot {
  bool active = false;
  RequestParams params;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
  uint64_t step = 0;
};

// A state change decided by a call, applied after every row has read the state.
struct SlotUpdate {
  int32_t slot = -1;
  std::vector<int32_t> tokens;  // to append to the output history
  int32_t* status = nullptr;    // status[i]: where to flag tokens[i] not fitting the history (its row)
};

// Whether a call's outputs ask for any logprob, rank or top-N (SampleOutputs or VerifyOutputs; top_ids
// and top_logprobs come together): the reference skips them otherwise.
template <class Outputs>
bool asks_logprobs(const Outputs& out) {
  return out.logprob || out.rank || out.top_ids;
}

void write_logprobs(const ref::LogprobResult& lp, int64_t top_stride, float* logprob,
                    int32_t* rank, int32_t* top_ids, float* top_logprobs) {
  if (logprob) *logprob = lp.logprob;
  if (rank) *rank = lp.rank;
  if (top_ids) {
    for (int64_t i = 0; i < top_stride; ++i) {
      const bool have = i < static_cast<int64_t>(lp.top_ids.size());
      top_ids[i] = have ? lp.top_ids[i] : -1;
      top_logprobs[i] = have ? lp.top_logprobs[i] : kNegInf;
    }
  }
}

class CpuBackend final : public SamplerBackend {
 public:
  explicit CpuBackend(const SamplerConfig& config)
      : SamplerBackend(config),
        slots_(static_cast<size_t>(config.max_slots)),
        threads_(ref::resolve_cpu_threads(config.cpu_threads)) {}

  Backend kind() const override { return Backend::kCpu; }

  void admit(int32_t slot, const RequestParams& params, const int32_t* prompt, int64_t prompt_len,
             void*) override {
    Slot s;
    s.active = true;
    s.params = params;
    s.prompt.assign(prompt, prompt + prompt_len);
    s.step = params.initial_step;
    slots_[slot] = std::move(s);
  }

  void retire(int32_t slot, void*) override { slots_[slot] = Slot{}; }

  void append_output(int32_t slot, const int32_t* tokens, int64_t count, void*) override {
    Slot& s = slots_[slot];
    if (!s.active)
      detail::invalid_argument("slot", std::to_string(slot), "must be an admitted slot");
    const int64_t after = static_cast<int64_t>(s.prompt.size() + s.output.size()) + count;
    if (after > config_.max_history)
      detail::invalid_argument("count", std::to_string(count),
                               "the slot's history would hold " + std::to_string(after) +
                                   " tokens, more than config.max_history (" +
                                   std::to_string(config_.max_history) + ")");
    s.output.insert(s.output.end(), tokens, tokens + count);
  }

  uint64_t step(int32_t slot) const override { return slots_[slot].step; }

  void sample(const LogitsView& logits, const int32_t* slot_ids, const BitmaskView& bitmask,
              const SampleOutputs& out, const CallOptions& options) override {
    // Each row writes its own outputs; the slot it updates and the tokens it emits are kept here.
    std::vector<SlotUpdate> row_updates(static_cast<size_t>(logits.rows));
    const bool with_logprobs = asks_logprobs(out);
    ref::parallel_for(logits.rows, threads_, [&](int64_t r) {
      int32_t status = 0;
      const int32_t slot = slot_ids ? slot_ids[r] : static_cast<int32_t>(r);
      const int32_t* mask_row = nullptr;
      bool valid = slot_is_active(slot) && bitmask_row(bitmask, r, &mask_row);
      ref::RowResult res;
      if (valid) {
        const Slot& s = slots_[slot];
        const ref::TokenCounts counts = ref::count_tokens(s.prompt, s.output);
        const std::vector<float> x = logits_row(logits, r);
        const ref::RowContext ctx{&s.params, &counts, mask_row, config_.vocab_size, s.step, 0};
        res = ref::sample_row(x.data(), ctx, options.logprob_mode, with_logprobs);
        status = res.status;
      } else {
        status = kStatusInvalidInput;
        res.logprob = kNegInf;
      }
      out.tokens[r] = res.token;
      if (out.status) out.status[r] = status;
      ref::LogprobResult lp{res.logprob, res.rank, res.top_ids, res.top_logprobs};
      write_logprobs(lp, out.top_stride, out.logprob ? out.logprob + r : nullptr,
                     out.rank ? out.rank + r : nullptr,
                     out.top_ids ? out.top_ids + r * out.top_stride : nullptr,
                     out.top_logprobs ? out.top_logprobs + r * out.top_stride : nullptr);
      if (out.final_ids) write_final(res.final_dist, out, r);
      if (valid) {
        SlotUpdate& u = row_updates[static_cast<size_t>(r)];
        u.slot = slot;
        if (res.token >= 0) u.tokens.push_back(res.token);
        u.status = out.status ? out.status + r : nullptr;
      }
    });
    apply(row_updates, options);
  }

  void top_k(const LogitsView& logits, int32_t k, const TopKOutputs& out, const CallOptions&) override {
    ref::parallel_for(logits.rows, threads_, [&](int64_t r) {
      const std::vector<float> x = logits_row(logits, r);
      ref::top_k_row(x.data(), config_.vocab_size, k, out.ids + r * out.stride,
                     out.values ? out.values + r * out.stride : nullptr);
    });
  }

  void verify(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask,
              const VerifyOutputs& out, const CallOptions& options) override {
    // The requests' verdicts first, on the backend's threads (they only read); then every write in
    // request order, as one thread would make them (bad cu_rows may make requests share rows).
    struct RequestWork {
      int32_t slot = -1, first = 0, last = 0;  // its rows are first .. last - 1
      bool ok = false;
      ref::VerifyResult res;
    };
    std::vector<RequestWork> work(static_cast<size_t>(in.num_requests));
    const bool with_logprobs = asks_logprobs(out);
    ref::parallel_for(in.num_requests, threads_, [&](int64_t b) {
      RequestWork& w = work[static_cast<size_t>(b)];
      w.slot = in.slots ? in.slots[b] : static_cast<int32_t>(b);
      w.first = in.cu_rows[b];
      w.last = in.cu_rows[b + 1];
      // Every row of the range must be the request's (detail::owner_of_row, the CUDA backend's
      // bisection): a cu_rows that steps back gives a row to two ranges.
      const bool rows_ok = w.first >= 0 && w.first < w.last && w.last <= logits.rows &&
                           w.last - w.first - 1 <= config_.max_drafts &&
                           detail::owns_rows(in.cu_rows, in.num_requests, static_cast<int32_t>(b), w.first, w.last);
      ref::VerifyRequest req;
      std::vector<std::vector<float>> rows;  // req.rows point into it
      w.ok = rows_ok && slot_is_active(w.slot) &&
             build_request(logits, in, bitmask, static_cast<int32_t>(b), w.slot, &req, &rows);
      req.with_logprobs = with_logprobs;
      if (w.ok) w.res = ref::verify_request(req, options.logprob_mode);
    });
    std::vector<SlotUpdate> updates;
    for (int32_t b = 0; b < in.num_requests; ++b) {
      int32_t* tokens = out.tokens + b * out.out_stride;
      std::fill(tokens, tokens + out.out_stride, -1);
      out.num_accepted[b] = 0;
      for (int64_t j = 0; j < out.out_stride; ++j) {
        ref::LogprobResult none;
        write_position_logprobs(none, out, b, j);
      }
      const RequestWork& w = work[b];
      if (!w.ok) {
        // Its own rows only: where cu_rows steps back, a row of its range may be another request's.
        if (out.status)
          for (int32_t r = std::max(w.first, 0); r < std::min<int64_t>(w.last, logits.rows); ++r)
            if (detail::owner_of_row(in.cu_rows, in.num_requests, r) == b) out.status[r] = kStatusInvalidInput;
        continue;
      }
      const ref::VerifyResult& res = w.res;
      for (size_t j = 0; j < res.tokens.size(); ++j) {
        tokens[j] = res.tokens[j];
        write_position_logprobs(res.logprobs[j], out, b, static_cast<int64_t>(j));
      }
      out.num_accepted[b] = res.num_accepted;
      if (out.status)
        for (size_t j = 0; j < res.row_status.size(); ++j) out.status[w.first + j] = res.row_status[j];
      SlotUpdate u;
      u.slot = w.slot;
      for (int32_t t : res.tokens)
        if (t >= 0) u.tokens.push_back(t);
      // Emitted token j is row first + j's (a -1 can only end the list, and is not appended).
      u.status = out.status ? out.status + w.first : nullptr;
      updates.push_back(std::move(u));
    }
    apply(updates, options);
  }

 private:
  bool slot_is_active(int32_t slot) const {
    return slot >= 0 && slot < config_.max_slots && slots_[slot].active;
  }

  // The bitmask row of call row r (null when none); false when row_index points outside.
  static bool bitmask_row(const BitmaskView& bitmask, int64_t r, const int32_t** row) {
    *row = nullptr;
    if (!bitmask.data) return true;
    const int64_t idx = bitmask.row_index ? bitmask.row_index[r] : r;
    if (idx == -1) return true;
    if (idx < 0 || idx >= bitmask.rows) return false;
    *row = bitmask.data + idx * bitmask.row_stride;
    return true;
  }

  std::vector<float> logits_row(const LogitsView& logits, int64_t r) const {
    const size_t elem = logits.dtype == DType::kF32 ? 4 : 2;
    const char* row = static_cast<const char*>(logits.data) + r * logits.row_stride * elem;
    return ref::row_to_float(row, logits.dtype, config_.vocab_size);
  }

  void write_final(const ref::Distribution& d, const SampleOutputs& out, int64_t r) const {
    const int64_t n = static_cast<int64_t>(d.ids.size());
    out.final_count[r] = static_cast<int32_t>(n);
    const bool fits = n <= config_.max_final_entries;
    int32_t* ids = out.final_ids + r * out.final_stride;
    float* probs = out.final_probs + r * out.final_stride;
    for (int64_t i = 0; i < out.final_stride; ++i) {
      const bool have = fits && i < n;
      ids[i] = have ? d.ids[i] : -1;
      probs[i] = have ? static_cast<float>(d.probs[i]) : 0.0f;
    }
  }

  static void write_position_logprobs(const ref::LogprobResult& lp, const VerifyOutputs& out,
                                      int64_t b, int64_t j) {
    const int64_t at = b * out.out_stride + j;
    write_logprobs(lp, out.top_stride, out.logprob ? out.logprob + at : nullptr,
                   out.rank ? out.rank + at : nullptr,
                   out.top_ids ? out.top_ids + at * out.top_stride : nullptr,
                   out.top_logprobs ? out.top_logprobs + at * out.top_stride : nullptr);
  }

  // Gathers request b's rows (into *rows, which req->rows point into), drafts and draft
  // distributions; false on bad device-side input.
  bool build_request(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask,
                     int32_t b, int32_t slot, ref::VerifyRequest* req, std::vector<std::vector<float>>* rows) const {
    const Slot& s = slots_[slot];
    const int32_t first = in.cu_rows[b];
    const int32_t n = in.cu_rows[b + 1] - first - 1;
    const int64_t draft0 = static_cast<int64_t>(first) - b;
    const int32_t V = config_.vocab_size;
    req->params = &s.params;
    req->prompt = &s.prompt;
    req->output = &s.output;
    req->step = s.step;
    req->vocab_size = V;
    const int32_t rule = in.rules ? in.rules[b] : static_cast<int32_t>(VerifyRule::kOneHot);
    if (rule < 0 || rule > static_cast<int32_t>(VerifyRule::kStrict)) return false;
    req->rule = static_cast<VerifyRule>(rule);
    if (n > 0 && (draft0 < 0 || draft0 + n > in.num_drafts_capacity)) return false;
    const DraftProbsView& q = in.draft_probs;
    const bool random = s.params.temperature != 0.0f;
    for (int32_t j = 0; j < n; ++j) {
      const int64_t d = draft0 + j;
      const int32_t token = in.draft_tokens[d];
      if (token < 0 || token >= V) return false;
      req->drafts.push_back(token);
      if (!random) continue;
      if (req->rule == VerifyRule::kDenseDraftProbs) {
        if (!q.dense || d >= q.dense_rows) return false;
        req->q_dense.push_back(q.dense + d * q.dense_stride);
      } else if (req->rule == VerifyRule::kSparseDraftProbs) {
        if (!q.sparse_ids || d >= q.sparse_rows) return false;
        const int32_t count = q.sparse_count[d];
        if (count < 0 || count > q.sparse_stride) return false;
        ref::SparseProbs sp;
        for (int32_t i = 0; i < count; ++i) {
          const int32_t id = q.sparse_ids[d * q.sparse_stride + i];
          if (id < 0 || id >= V) return false;
          sp.ids.push_back(id);
          sp.probs.push_back(q.sparse_probs[d * q.sparse_stride + i]);
        }
        req->q_sparse.push_back(std::move(sp));
      }
    }
    rows->assign(n + 1, {});
    for (int32_t j = 0; j <= n; ++j) {
      const int32_t* mask_row = nullptr;
      if (!bitmask_row(bitmask, first + j, &mask_row)) return false;
      (*rows)[j] = logits_row(logits, first + j);
      req->rows.push_back((*rows)[j].data());
      req->bitmask_rows.push_back(mask_row);
    }
    return true;
  }

  // In order; entries with slot -1 (rows or requests that changed nothing) are skipped.
  void apply(const std::vector<SlotUpdate>& updates, const CallOptions& options) {
    for (const SlotUpdate& u : updates) {
      if (u.slot < 0) continue;
      Slot& s = slots_[u.slot];
      if (options.append_to_history) {
        for (size_t i = 0; i < u.tokens.size(); ++i) {
          if (static_cast<int64_t>(s.prompt.size() + s.output.size()) < config_.max_history) {
            s.output.push_back(u.tokens[i]);
          } else if (u.status) {
            u.status[i] |= kStatusHistoryFull;
          }
        }
      }
      if (options.advance_step) ++s.step;
    }
  }

  std::vector<Slot> slots_;
  int threads_;  // SamplerConfig::cpu_threads resolved
};

}  // namespace

namespace detail {
std::unique_ptr<SamplerBackend> make_cpu_backend(const SamplerConfig& config) {
  return std::make_unique<CpuBackend>(config);
}
}  // namespace detail

}  // namespace sonic
