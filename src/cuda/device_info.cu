// Whether a usable CUDA device is present. Host-only runtime queries; the kernels live beside.
#include <cuda_runtime.h>

#include "host/backend.hpp"

namespace sonic::detail {

bool cuda_device_present() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return count > 0;
}

}  // namespace sonic::detail
