// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled before the kernel ahead of it
// on the stream has finished, once every block of that kernel has allowed it or exited; it must then
// wait for that kernel before it reads anything the kernel writes. Both calls are no-ops on earlier
// architectures and for plain launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cuda/atomic>
#include <utility>

#include "cuda/cuda_check.hpp"

namespace sonic::cuda {

// This block no longer needs the SM room a dependent kernel's early launch would take.
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  cudaTriggerProgrammaticLaunchCompletion();
#endif
}

// Waits until the kernel this one depends on has completed and its writes are visible.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if __CUDA_ARCH__ >= 900
  cudaGridDependencySynchronize();
#endif
}

// The early start of a dependent kernel (SONIC_COUNTED_START, default on): instead of waiting for the
// whole grid before it, a block waits for the one count its work needs (row_stage2_kernel: its
// row's chunks), which the blocks of that grid make as they finish. A programmatic dependent starts only
// once every block of the grid before has allowed it or exited, so every block it waits for is
// already resident: waiting cannot starve them of SMs. Each dependent kernel still calls
// wait_for_prerequisite_grid before it exits, so grids complete in stream order as before.
#ifndef SONIC_COUNTED_START
#define SONIC_COUNTED_START 1
#endif
// Polling longer than this (about 0.5 ms at the H200's clock) falls back to the grid wait, after
// which the count is complete: a slow or preempted grid before costs time, never a hang.
constexpr long long kCountSpinCycles = 1ll << 20;

// The counts' atomics are PTX with the .global space: libcu++'s ::cuda::atomic_ref emits the
// generic-address forms (ATOM and LD in place of ATOMG and LDG: other SASS, not validated; v3.57).
// The fence and the grid-dependency calls are the library's: the same SASS as PTX.

// Adds n to *counter, releasing the block's writes: those of its threads ordered before the caller
// by a barrier (release is cumulative) are visible to any thread that acquires the count (by
// wait_for_count, or acquire_counted_writes after reading it). Returns the count before. One
// MEMBAR.ALL.GPU before the atomic, where __threadfence and a relaxed atomic cost a MEMBAR.SC.GPU:
// -0.1 us a call on average at B = 1 to 128 on an H100, none worse by more than 0.06 (v3.56 call 2).
__device__ __forceinline__ int32_t count_release(int32_t* counter, int32_t n) {
  int32_t before;
  asm volatile("atom.release.gpu.global.add.s32 %0, [%1], %2;" : "=r"(before) : "l"(counter), "r"(n) : "memory");
  return before;
}

// After a read of a count that showed every count_release it waits for: makes the writes those
// released visible to this thread (and, after a barrier, to its block).
__device__ __forceinline__ void acquire_counted_writes() {
  ::cuda::atomic_thread_fence(::cuda::std::memory_order_acquire, ::cuda::thread_scope_device);
}

// Counts n more of total on *counter (count_release); true for the caller whose count completes
// it, which has then acquired every other count's writes. The fast kernel's chunks, the exact
// kernel's slices of a row and its blocks end this way.
__device__ __forceinline__ bool count_release_completes(int32_t* counter, int32_t n, int32_t total) {
  const bool completes = count_release(counter, n) == total - n;
  if (completes) acquire_counted_writes();
  return completes;
}

// Waits until *counter reaches target and every write counted is visible to the block: the grid
// before counts with count_release. Without SONIC_COUNTED_START, waits for the grid before
// instead. The whole block calls it.
__device__ __forceinline__ void wait_for_count(const int32_t* counter, int32_t target) {
#if SONIC_COUNTED_START
  if (threadIdx.x == 0) {
    const long long start = clock64();
    for (;;) {
      int32_t n;
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(n) : "l"(counter) : "memory");
      if (n >= target) break;
      if (clock64() - start > kCountSpinCycles) {
        wait_for_prerequisite_grid();
        break;
      }
    }
  }
  __syncthreads();
#else
  (void)counter;
  (void)target;
  wait_for_prerequisite_grid();
#endif
}

// Launches kernel(args...) on the stream; with programmatic, as a programmatic dependent of the
// kernel launched before it there (the kernel then waits with wait_for_prerequisite_grid before it
// reads anything that one writes).
template <class... Params, class... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, bool programmatic,
                      cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = shared_bytes;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  SONIC_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace sonic::cuda
