// The usable CUDA devices. Host-only runtime queries; the kernels live beside.
#include <cuda_runtime.h>

#include "host/backend.hpp"

namespace sonic::detail {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return count;
}

}  // namespace sonic::detail
