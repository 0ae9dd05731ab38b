// Arrays that the demo fills on the host and hands to the sampler where its backend works: host
// memory for the CPU backend, device memory (through the CUDA runtime) for the CUDA backend.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "sonic/error.hpp"

#if defined(SONIC_WITH_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace sonic_tools {

#if defined(SONIC_WITH_CUDA)
inline void cuda_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw sonic::Error(sonic::ErrorCode::kCudaError,
                       std::string("sonic: ") + what + ": " + cudaGetErrorString(err));
}
#endif

// Waits for the device's queued work (a no-op for host memory).
inline void synchronize(bool on_device) {
#if defined(SONIC_WITH_CUDA)
  if (on_device) cuda_check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
#else
  (void)on_device;
#endif
}

template <typename T>
class Array {
 public:
  Array() = default;
  Array(std::size_t n, bool on_device, T fill = T{}) : host_(n, fill), on_device_(on_device) {
    if (!on_device_ || n == 0) return;
#if defined(SONIC_WITH_CUDA)
    cuda_check(cudaMalloc(reinterpret_cast<void**>(&device_), n * sizeof(T)), "cudaMalloc");
#else
    throw sonic::Error(sonic::ErrorCode::kUnsupported,
                       "sonic: device memory requested, but this program was built without CUDA");
#endif
  }
  ~Array() { release(); }
  Array(const Array&) = delete;
  Array& operator=(const Array&) = delete;
  Array(Array&& o) noexcept { *this = std::move(o); }
  Array& operator=(Array&& o) noexcept {
    if (this != &o) {
      release();
      host_ = std::move(o.host_);
      on_device_ = o.on_device_;
      device_ = std::exchange(o.device_, nullptr);
    }
    return *this;
  }

  std::vector<T>& host() { return host_; }
  const std::vector<T>& host() const { return host_; }
  T& operator[](std::size_t i) { return host_[i]; }
  const T& operator[](std::size_t i) const { return host_[i]; }
  std::size_t size() const { return host_.size(); }

  // Where the backend reads and writes the array.
  T* data() { return on_device_ ? device_ : host_.data(); }

  // Host copy -> backend memory, and back (no-ops for host memory).
  void upload() {
#if defined(SONIC_WITH_CUDA)
    if (on_device_ && !host_.empty())
      cuda_check(
          cudaMemcpy(device_, host_.data(), host_.size() * sizeof(T), cudaMemcpyHostToDevice),
          "cudaMemcpy (upload)");
#endif
  }
  void download() {
#if defined(SONIC_WITH_CUDA)
    if (on_device_ && !host_.empty())
      cuda_check(
          cudaMemcpy(host_.data(), device_, host_.size() * sizeof(T), cudaMemcpyDeviceToHost),
          "cudaMemcpy (download)");
#endif
  }

 private:
  void release() noexcept {
#if defined(SONIC_WITH_CUDA)
    if (device_) cudaFree(device_);
#endif
    device_ = nullptr;
  }

  std::vector<T> host_;
  bool on_device_ = false;
  T* device_ = nullptr;
};

}  // namespace sonic_tools
