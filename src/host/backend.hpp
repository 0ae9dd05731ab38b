// The interface every backend implements. Sampler validates arguments, then forwards here: a
// backend trusts what it is given (FlashInfer's split: the outer layer checks, the inner runs).
#pragma once

#include <memory>

#include "sonic/types.hpp"

namespace sonic {

class SamplerBackend {
 public:
  explicit SamplerBackend(const SamplerConfig& config) : config_(config) {}
  virtual ~SamplerBackend() = default;

  const SamplerConfig& config() const { return config_; }
  virtual Backend kind() const = 0;

  virtual void admit(int32_t slot, const RequestParams& params, const int32_t* prompt,
                     int64_t prompt_len, void* stream) = 0;
  virtual void retire(int32_t slot, void* stream) = 0;
  virtual void append_output(int32_t slot, const int32_t* tokens, int64_t count, void* stream) = 0;
  virtual uint64_t step(int32_t slot) const = 0;
  virtual uint64_t exact_path_rows() const { return 0; }
  virtual uint64_t exact_path_list_rows() const { return 0; }
  virtual uint64_t exact_path_band_rows() const { return 0; }
  virtual void sample(const LogitsView& logits, const int32_t* slots, const BitmaskView& bitmask,
                      const SampleOutputs& out, const CallOptions& options) = 0;
  virtual void verify(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask,
                      const VerifyOutputs& out, const CallOptions& options) = 0;
  virtual void top_k(const LogitsView& logits, int32_t k, const TopKOutputs& out, const CallOptions& options) = 0;

 protected:
  SamplerConfig config_;
};

namespace detail {
std::unique_ptr<SamplerBackend> make_cpu_backend(const SamplerConfig& config);
#if defined(SONIC_WITH_CUDA)
std::unique_ptr<SamplerBackend> make_cuda_backend(const SamplerConfig& config);
// sonic::max_final_entries(kCuda, device): the exact sampler's capacity on `device`, which
// make_cuda_backend checks the same way first.
int32_t cuda_max_final_entries(int32_t device);
int cuda_device_count();  // 0 when no driver or device is usable
#endif
}  // namespace detail

}  // namespace sonic
