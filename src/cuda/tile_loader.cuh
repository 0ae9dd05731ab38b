// How stage 1 reads its logits. A warp step is Loads 16-byte loads a lane (kStepLoads = 8: 4 KB a
// warp; kShortStepLoads = 4 for 16-bit logits in small calls): load c of lane l covers the kWidth
// tokens at step_base + c * 32 * kWidth + l * kWidth, so each warp-wide load reads 512 contiguous
// bytes. The lane's tokens split into groups of 32 (one a step for fp32 and short 16-bit steps, two
// for full 16-bit steps); group g is the lane's share of the warp's 1024 consecutive tokens from
// step_base + g * 1024.
//
// Steps go through shared memory by asynchronous copies (cp.async), kFastStages deep, so that the
// next steps are in flight while the lane screens the current one without holding registers for
// them. Each lane copies and later reads back only its own 16-byte pieces (and its own bitmap
// words), so no barrier is needed: cp.async.wait_group orders a thread's copies before its reads.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/row_job.cuh"

namespace sonic::cuda {

#ifndef SONIC_FAST_STAGES
#define SONIC_FAST_STAGES 3
#endif
// Steps a warp has in shared memory (in flight or being read): short steps twice as many, so that
// the bytes in flight and the shared memory stay the same.
template <int Loads>
constexpr int kFastStages = SONIC_FAST_STAGES * kStepLoads / Loads;

// What a group's layout depends on: the element type alone.
template <DType D>
struct StepLayout {
  static constexpr int kElem = elem_bytes(D);
  static constexpr int kWidth = 16 / kElem;                       // tokens a load
  static constexpr int kGroupLoads = kGroupTokens / kWidth;       // loads a group
  static constexpr uint32_t kNegInfBits = D == DType::kF32 ? 0xFF800000u : (D == DType::kBF16 ? 0xFF80u : 0xFC00u);
  // Token of register i (0 <= i < 32) of the group from group_base; registers run in increasing
  // token order.
  __device__ static __forceinline__ int32_t token(int32_t group_base, int lane, int i) {
    return group_base + (i / kWidth) * (32 * kWidth) + lane * kWidth + (i % kWidth);
  }
};

// A step of Loads loads a lane.
template <DType D, int Loads>
struct StepShape {
  static constexpr int kGroups = Loads / StepLayout<D>::kGroupLoads;
  static constexpr int32_t kStepTokens = 32 * Loads * StepLayout<D>::kWidth;  // a warp's step
  static_assert(kGroups >= 1 && kGroups * StepLayout<D>::kGroupLoads == Loads, "a step holds whole groups");
};

// One warp's step in shared memory: the raw logits (load c of lane l at v[c][l]) and the row's
// bitmap words over the step's tokens (lane l holds word l of each group: tokens group_base + 32 l
// .. + 31), shuffled to their owners when screened.
template <DType D, int Loads>
struct StepSlot {
  uint4 v[Loads][32];
  uint32_t mask[StepShape<D, Loads>::kGroups][32];  // grammar bitmask (all ones without one)
  uint32_t seen[StepShape<D, Loads>::kGroups][32];  // history presence bits (zero for rows without penalties)
};
template <DType D, int Loads>
constexpr size_t kStageBytes = sizeof(StepSlot<D, Loads>) * kFastStages<Loads> * kFastWarps;  // a block's slots

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// Copies of logits into shared memory. The logits are read once: their copies carry an L2
// evict-first policy, so that a call's stream of logits (more than the 50 MB L2 from B = 128 fp32
// on) evicts other logits, not what later phases and later calls need from L2: the kernels' code,
// the request table and histories, the chunks' statistics and candidates (perf-notes v3.20: code
// fetched from HBM costs about 8 more cycles an instruction than from L2).
// SONIC_LOGITS_EVICT_FIRST=0 builds the plain copies, for experiments.
#ifndef SONIC_LOGITS_EVICT_FIRST
#define SONIC_LOGITS_EVICT_FIRST 1
#endif
__device__ __forceinline__ uint64_t evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}
__device__ __forceinline__ void copy_logits_16_to(uint32_t dst_shared, const void* src) {
#if SONIC_LOGITS_EVICT_FIRST
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(dst_shared), "l"(src),
               "l"(evict_first_policy())
               : "memory");
#else
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst_shared), "l"(src) : "memory");
#endif
}
__device__ __forceinline__ void copy_logits_16(void* dst, const void* src) { copy_logits_16_to(shared_address(dst), src); }
__device__ __forceinline__ void copy_async_4(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(shared_address(dst)), "l"(src) : "memory");
}
__device__ __forceinline__ void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

template <DType D>
__device__ __forceinline__ uint32_t load_one_bits(const void* row, int32_t t) {
  if constexpr (D == DType::kF32) return __float_as_uint(__ldcs(static_cast<const float*>(row) + t));
  else return __ldcs(static_cast<const unsigned short*>(row) + t);
}

// Starts the copies of a step's logits into `slot`: 16-byte asynchronous copies where the row is
// 16-byte aligned, plain loads and stores otherwise and at the row's end (ids >= V read as -inf).
template <DType D, int Loads>
__device__ __forceinline__ void issue_logits(const void* row, bool vec_ok, int32_t step_base, int32_t V,
                                             StepSlot<D, Loads>& slot) {
  using L = StepLayout<D>;
  const int lane = threadIdx.x & 31;
  if (vec_ok && step_base + StepShape<D, Loads>::kStepTokens <= V) {  // the common case: the whole step, no checks
    const char* src = static_cast<const char*>(row) + (static_cast<int64_t>(step_base) + lane * L::kWidth) * L::kElem;
#pragma unroll
    for (int c = 0; c < Loads; ++c) copy_logits_16(&slot.v[c][lane], src + c * 512);
    return;
  }
#pragma unroll
  for (int c = 0; c < Loads; ++c) {
    const int g = c / L::kGroupLoads;
    const int32_t t0 = L::token(step_base + g * 32 * kGroupTokens, lane, (c % L::kGroupLoads) * L::kWidth);
    if (vec_ok && t0 + L::kWidth <= V) {
      copy_logits_16(&slot.v[c][lane], static_cast<const char*>(row) + static_cast<int64_t>(t0) * L::kElem);
    } else {
      uint32_t w[4] = {0, 0, 0, 0};
#pragma unroll
      for (int j = 0; j < L::kWidth; ++j) {
        const uint32_t b = t0 + j < V ? load_one_bits<D>(row, t0 + j) : L::kNegInfBits;
        if constexpr (D == DType::kF32) w[j] = b;
        else w[j / 2] |= b << (16 * (j % 2));
      }
      slot.v[c][lane] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// A warp's copies of its full steps, addressed from values fixed before the chunk's loop and kept in
// shared memory (Stage1Shared::issue): held in registers, ptxas rebuilt them (the row pointer from
// the block index, the slot from the shared window) every step instead, about 30 instructions a
// step more than one load.
struct alignas(16) StepIssue {
  const char* src;     // lane 0's first piece of the chunk's first step
  uint32_t dst;        // shared address of lane 0's first piece in the warp's slot of stage 0
  int32_t full_steps;  // steps from the chunk's first whose logits are whole and 16-byte aligned
  const void* row;     // the row and its alignment, for the other steps (issue_logits)
  int32_t vec_ok;
  int32_t pad;
};
struct StepIssueTail {
  const void* row;
  int32_t vec_ok;
};

template <DType D, int Loads>
__device__ __forceinline__ StepIssue step_issue(const void* row, bool vec_ok, int32_t base0, int32_t steps, int32_t V,
                                                StepSlot<D, Loads>* slots) {
  StepIssue s;
  s.src = static_cast<const char*>(row) + static_cast<int64_t>(base0) * StepLayout<D>::kElem;
  s.dst = shared_address(&slots[threadIdx.x >> 5].v[0][0]);
  const int32_t room = V - StepShape<D, Loads>::kStepTokens - base0;  // step j is whole when j * tile_tokens <= room
  s.full_steps = vec_ok && room >= 0 ? min(steps, room / tile_tokens(D, Loads) + 1) : 0;
  s.row = row;
  s.vec_ok = vec_ok;
  s.pad = 0;
  return s;
}

// 16 bytes of shared memory by a load the compiler must make (a plain read of a value it stored
// would be replaced by the value's recomputation).
__device__ __forceinline__ uint4 load_shared_volatile(const void* p) {
  uint4 q;
  asm volatile("ld.volatile.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(q.x), "=r"(q.y), "=r"(q.z), "=r"(q.w)
               : "r"(shared_address(p)));
  return q;
}
__device__ __forceinline__ const void* pointer_from(uint32_t lo, uint32_t hi) {
  return reinterpret_cast<const void*>(static_cast<unsigned long long>(lo) | (static_cast<unsigned long long>(hi) << 32));
}
// The full steps' fields of a record, and the others'.
__device__ __forceinline__ StepIssue read_step_issue(const StepIssue& s) {
  const uint4 q = load_shared_volatile(&s.src);
  StepIssue r;
  r.src = static_cast<const char*>(pointer_from(q.x, q.y));
  r.dst = q.z;
  r.full_steps = static_cast<int32_t>(q.w);
  return r;
}
__device__ __forceinline__ StepIssueTail read_step_issue_tail(const StepIssue& s) {
  const uint4 q = load_shared_volatile(&s.row);
  return StepIssueTail{pointer_from(q.x, q.y), static_cast<int32_t>(q.z)};
}

// Step j (< s.full_steps) into stage j % kFastStages: Loads 16-byte copies a lane.
template <DType D, int Loads>
__device__ __forceinline__ void issue_full_step(const StepIssue& s, int32_t j) {
  constexpr int64_t kTileBytes = static_cast<int64_t>(tile_tokens(D, Loads)) * StepLayout<D>::kElem;
  constexpr uint32_t kStageStride = static_cast<uint32_t>(sizeof(StepSlot<D, Loads>)) * kFastWarps;
  const int lane = threadIdx.x & 31;
  const char* src = s.src + j * kTileBytes + lane * 16;
  const uint32_t dst = s.dst + static_cast<uint32_t>(j % kFastStages<Loads>) * kStageStride + lane * 16;
#pragma unroll
  for (int c = 0; c < Loads; ++c) copy_logits_16_to(dst + c * 512, src + c * 512);
}

// Starts the copies of the step's bitmap words (kAsync: into the open commit group; otherwise plain
// loads and stores). A null row: all allowed, none seen.
template <DType D, bool kAsync, int Loads>
__device__ __forceinline__ void issue_bitmaps(int32_t step_base, const uint32_t* mask_row, const uint32_t* seen_row,
                                              int32_t words, StepSlot<D, Loads>& slot) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int g = 0; g < StepShape<D, Loads>::kGroups; ++g) {
    const int32_t word = (step_base + g * 32 * kGroupTokens) / 32 + lane;
    const bool in = word < words;
    if (mask_row && in) {
      if constexpr (kAsync) copy_async_4(&slot.mask[g][lane], mask_row + word);
      else slot.mask[g][lane] = __ldg(mask_row + word);
    } else {
      slot.mask[g][lane] = 0xFFFFFFFFu;
    }
    if (seen_row && in) {
      if constexpr (kAsync) copy_async_4(&slot.seen[g][lane], seen_row + word);
      else slot.seen[g][lane] = __ldg(seen_row + word);
    } else {
      slot.seen[g][lane] = 0u;
    }
  }
}

template <DType D>
__device__ __forceinline__ float decode_half(uint32_t h) {
  if constexpr (D == DType::kBF16) return __uint_as_float(h << 16);
  else return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// The lane's c-th 16-byte piece of group g of a step in shared memory, as its four words (one
// token a word in fp32, two in the 16-bit formats).
template <DType D>
struct GroupPiece {
  uint32_t w[4];
  template <int Loads>
  __device__ __forceinline__ GroupPiece(const StepSlot<D, Loads>& slot, int g, int c) {
    const uint4 q = slot.v[g * StepLayout<D>::kGroupLoads + c][threadIdx.x & 31];
    w[0] = q.x;
    w[1] = q.y;
    w[2] = q.z;
    w[3] = q.w;
  }
};

// The lane's 32 registers of group g of a step in shared memory, decoded to fp32.
template <DType D, int Loads>
__device__ __forceinline__ void read_group(const StepSlot<D, Loads>& slot, int g, float (&x)[kGroupTokens]) {
  using L = StepLayout<D>;
#pragma unroll
  for (int c = 0; c < L::kGroupLoads; ++c) {
    const GroupPiece<D> piece(slot, g, c);
    const uint32_t(&w)[4] = piece.w;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if constexpr (D == DType::kF32) {
        x[c * 4 + j] = __uint_as_float(w[j]);
      } else {
        x[c * 8 + 2 * j] = decode_half<D>(w[j] & 0xFFFFu);
        x[c * 8 + 2 * j + 1] = decode_half<D>(w[j] >> 16);
      }
    }
  }
}

// The bits of a warp-wide bitmap word set (lane l holds word l of a group) that belong to this lane's
// 32 registers: bit i for register i.
template <DType D>
__device__ __forceinline__ uint32_t lane_bits(uint32_t warp_word) {
  using L = StepLayout<D>;
  const int lane = threadIdx.x & 31;
  uint32_t out = 0;
#pragma unroll
  for (int c = 0; c < L::kGroupLoads; ++c) {
    // Load c of the lane covers tokens (c * 32 + lane) * kWidth + [0, kWidth) of the group.
    const uint32_t w = __shfl_sync(0xFFFFFFFFu, warp_word, (c * 32 * L::kWidth + lane * L::kWidth) / 32);
    const uint32_t bits = (w >> ((lane * L::kWidth) % 32)) & ((1u << L::kWidth) - 1u);
    out |= bits << (c * L::kWidth);
  }
  return out;
}

}  // namespace sonic::cuda
