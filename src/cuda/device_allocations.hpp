// Device memory owned by an object through a member: freed when the owner is destroyed, and also
// when the owner's constructor throws part way (an out-of-memory error after some allocations
// leaves nothing behind; a destructor does not run for an object whose constructor threw).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cuda/cuda_check.hpp"

namespace sonic::cuda {

class DeviceAllocations {
 public:
  DeviceAllocations() = default;
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;
  ~DeviceAllocations() {
    for (void* p : owned_) cudaFree(p);
  }

  // `count` elements of T (room for one at least), uninitialised.
  template <class T>
  T* alloc(int64_t count) {
    owned_.reserve(owned_.size() + 1);  // so that recording it cannot throw once it is allocated
    void* p = nullptr;
    SONIC_CUDA_CHECK(cudaMalloc(&p, bytes<T>(count)));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  // The same, zeroed.
  template <class T>
  T* zeroed(int64_t count) {
    T* p = alloc<T>(count);
    SONIC_CUDA_CHECK(cudaMemset(p, 0, bytes<T>(count)));
    return p;
  }

 private:
  template <class T>
  static size_t bytes(int64_t count) {
    return static_cast<size_t>(std::max<int64_t>(count, 1)) * sizeof(T);
  }
  std::vector<void*> owned_;
};

}  // namespace sonic::cuda
