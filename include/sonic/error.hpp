// Errors raised by the host API. Every check runs before any launch, so a call that throws has
// changed nothing and launched nothing.
#pragma once

#include <stdexcept>
#include <string>

namespace sonic {

enum class ErrorCode : int32_t {
  kOk = 0,
  kInvalidArgument = 1,  // a shape, stride, pointer or parameter out of its range
  kUnsupported = 2,      // valid, but this build or backend cannot do it
  kCudaError = 3,        // the CUDA runtime failed
  kOutOfMemory = 4,
  kInternal = 5,
};

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace sonic
