// The sampler: a slot-based request table plus the two calls of SPEC.md, single-step sampling and
// speculative-draft verification, on the backend chosen at creation. One sampler takes one call at
// a time: calls from several threads must be serialised by the caller (a call reads the histories
// that admit, retire and append_output replace; the Python binding holds a lock a sampler).
#pragma once

#include <cstdint>
#include <memory>

#include "error.hpp"
#include "types.hpp"

namespace sonic {

class SamplerBackend;  // implemented per backend, internal

class Sampler {
 public:
  // Allocates every buffer the sampler will use; throws sonic::Error on a bad config.
  explicit Sampler(const SamplerConfig& config);
  ~Sampler();
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  const SamplerConfig& config() const;
  Backend backend() const;  // the backend actually in use (never kAuto)

  // Request table. admit() validates params and stores them with the prompt as history;
  // retire() frees the slot. Both are host calls, ordered on the given stream for CUDA.
  void admit(int32_t slot, const RequestParams& params, const int32_t* prompt,
             int64_t prompt_len, void* stream = nullptr);
  void retire(int32_t slot, void* stream = nullptr);
  // Adds host tokens to a slot's output history (the sample/verify calls do it themselves unless
  // CallOptions::append_to_history is false).
  void append_output(int32_t slot, const int32_t* tokens, int64_t count, void* stream = nullptr);
  // The slot's current step counter (copied back for CUDA: a synchronising call, not for steps).
  uint64_t step(int32_t slot) const;
  // Rows this sampler's calls have sent to the backend's exact path since it was created (CUDA: the
  // rows whose kept set the fast path's candidates could not be shown to hold; the CPU backend has
  // one path and counts none). A diagnostic that synchronises, not for steps.
  uint64_t exact_path_rows() const;
  // Of those, the top-k rows that the exact path decided from the few keys at or above a bound the
  // fast path found (CUDA; the rest take passes over the row). A diagnostic that synchronises.
  uint64_t exact_path_list_rows() const;
  // Of the others, the joint top-p rows with top-k that the exact path decided from the fast path's
  // sorted keys and its own exact total, their crossing having lain within the fast path's margin
  // (CUDA). A diagnostic that synchronises.
  uint64_t exact_path_band_rows() const;

  // Single-step mode: row r of logits belongs to slot slots[r] (row r itself when slots is null).
  // Arrays live where the backend works (host for CPU, device for CUDA).
  void sample(const LogitsView& logits, const int32_t* slots, const BitmaskView& bitmask,
              const SampleOutputs& out, const CallOptions& options = {});

  // Batched top-k of the input logits, on its own (no request state, no rules): row r's k largest
  // entries among ids < vocab_size, in the total order of SPEC.md (value descending, id ascending;
  // NaN read as -inf). Rows need no slot. Only options.stream is used.
  void top_k(const LogitsView& logits, int32_t k, const TopKOutputs& out, const CallOptions& options = {});

  // Verification mode (SPEC.md section 3); logits holds the packed target rows.
  void verify(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask,
              const VerifyOutputs& out, const CallOptions& options = {});

 private:
  std::unique_ptr<SamplerBackend> impl_;
};

// True when this build has the CUDA backend and a usable GPU is present.
bool cuda_available();

// The largest SamplerConfig::max_final_entries this build accepts for that backend and device: the
// CPU backend INT32_MAX (memory is the only limit), the CUDA backend the entries the exact sampler's
// shared memory holds on `device` (about 28000 on an H100 or H200); kAuto resolves as Sampler does.
// Throws sonic::Error as Sampler would for that backend and device (kUnsupported where the build or
// the machine has no CUDA backend, kInvalidArgument for a device that is not present).
int32_t max_final_entries(Backend backend, int32_t device = 0);

}  // namespace sonic
