// Sampler: validates every call on the host, then hands it to the backend chosen at creation.
#include "sonic/sampler.hpp"

#include <cstdint>
#include <string>

#include "host/backend.hpp"
#include "host/validate.hpp"

namespace sonic {

bool cuda_available() {
#if defined(SONIC_WITH_CUDA)
  return detail::cuda_device_count() > 0;
#else
  return false;
#endif
}

namespace {

// kAuto: CUDA when it is usable, else the CPU.
Backend resolve(Backend backend) {
  if (backend != Backend::kAuto) return backend;
  return cuda_available() ? Backend::kCuda : Backend::kCpu;
}

#if !defined(SONIC_WITH_CUDA)
// A sampler or a limit asked of the CUDA backend in a build without it.
[[noreturn]] void no_cuda_backend() {
  throw Error(ErrorCode::kUnsupported,
              "sonic: config.backend = cuda: this build has no CUDA backend (built without nvcc or with SONIC_ENABLE_CUDA=OFF)");
}
#endif

std::unique_ptr<SamplerBackend> make_backend(const SamplerConfig& config) {
  SamplerConfig resolved = config;
  resolved.backend = resolve(config.backend);
  if (resolved.backend == Backend::kCuda) {
#if defined(SONIC_WITH_CUDA)
    return detail::make_cuda_backend(resolved);
#else
    no_cuda_backend();
#endif
  }
  return detail::make_cpu_backend(resolved);
}

}  // namespace

int32_t max_final_entries(Backend backend, int32_t device) {
  if (backend != Backend::kAuto && backend != Backend::kCpu && backend != Backend::kCuda)
    detail::invalid_argument("backend", std::to_string(static_cast<int32_t>(backend)),
                             "must be one of auto (0), cpu (1), cuda (2)");
  if (device < 0) detail::invalid_argument("device", std::to_string(device), "must be >= 0");
  if (resolve(backend) == Backend::kCuda) {
#if defined(SONIC_WITH_CUDA)
    return detail::cuda_max_final_entries(device);
#else
    no_cuda_backend();
#endif
  }
  return INT32_MAX;  // the CPU backend: memory is the only limit
}

Sampler::Sampler(const SamplerConfig& config) {
  detail::validate_config(config);
  impl_ = make_backend(config);
}

Sampler::~Sampler() = default;
Sampler::Sampler(Sampler&&) noexcept = default;
Sampler& Sampler::operator=(Sampler&&) noexcept = default;

const SamplerConfig& Sampler::config() const { return impl_->config(); }
Backend Sampler::backend() const { return impl_->kind(); }

void Sampler::admit(int32_t slot, const RequestParams& params, const int32_t* prompt,
                    int64_t prompt_len, void* stream) {
  const SamplerConfig& c = impl_->config();
  detail::validate_slot(slot, c, "slot");
  detail::validate_params(params, c);
  detail::validate_history(prompt, prompt_len, c, "prompt");
  impl_->admit(slot, params, prompt, prompt_len, stream);
}

void Sampler::retire(int32_t slot, void* stream) {
  detail::validate_slot(slot, impl_->config(), "slot");
  impl_->retire(slot, stream);
}

void Sampler::append_output(int32_t slot, const int32_t* tokens, int64_t count, void* stream) {
  const SamplerConfig& c = impl_->config();
  detail::validate_slot(slot, c, "slot");
  detail::validate_history(tokens, count, c, "tokens");
  impl_->append_output(slot, tokens, count, stream);
}

uint64_t Sampler::exact_path_rows() const { return impl_->exact_path_rows(); }
uint64_t Sampler::exact_path_list_rows() const { return impl_->exact_path_list_rows(); }
uint64_t Sampler::exact_path_band_rows() const { return impl_->exact_path_band_rows(); }

uint64_t Sampler::step(int32_t slot) const {
  detail::validate_slot(slot, impl_->config(), "slot");
  return impl_->step(slot);
}

void Sampler::sample(const LogitsView& logits, const int32_t* slots, const BitmaskView& bitmask,
                     const SampleOutputs& out, const CallOptions& options) {
  detail::validate_sample(impl_->config(), logits, bitmask, out, options);
  impl_->sample(logits, slots, bitmask, out, options);
}

void Sampler::top_k(const LogitsView& logits, int32_t k, const TopKOutputs& out, const CallOptions& options) {
  detail::validate_top_k(impl_->config(), logits, k, out);
  impl_->top_k(logits, k, out, options);
}

void Sampler::verify(const LogitsView& logits, const VerifyInputs& in, const BitmaskView& bitmask,
                     const VerifyOutputs& out, const CallOptions& options) {
  detail::validate_verify(impl_->config(), logits, in, bitmask, out, options);
  impl_->verify(logits, in, bitmask, out, options);
}

}  // namespace sonic
