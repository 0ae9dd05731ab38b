// Host/device qualifiers so that one definition of each per-token rule serves the CPU reference,
// the CUDA kernels and (later) the fused LM-head epilogue.
#pragma once

#if defined(__CUDACC__)
#define SONIC_HD __host__ __device__ __forceinline__
#else
#define SONIC_HD inline
#endif

#if defined(__CUDACC__)
#define SONIC_UNROLL _Pragma("unroll")
#else
#define SONIC_UNROLL
#endif

namespace sonic::detail {

// fp32 arithmetic with one rounding each and no contraction into FMA, so that the host and the
// device round every step of a rule identically.
SONIC_HD float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
SONIC_HD float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SONIC_HD float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SONIC_HD float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

}  // namespace sonic::detail
