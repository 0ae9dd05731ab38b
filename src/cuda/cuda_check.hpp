// CUDA runtime errors become sonic::Error (kCudaError / kOutOfMemory) naming the call that failed.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sonic/error.hpp"

namespace sonic::detail {

inline void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  const ErrorCode code = e == cudaErrorMemoryAllocation ? ErrorCode::kOutOfMemory : ErrorCode::kCudaError;
  throw Error(code, std::string("sonic: CUDA error in ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace sonic::detail

#define SONIC_CUDA_CHECK(expr) ::sonic::detail::cuda_check((expr), #expr)
