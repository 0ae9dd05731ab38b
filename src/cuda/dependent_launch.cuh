// Programmatic dependent launch (compute capability 9.0 and later): a kernel launched with
// cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled before the kernel ahead of it
// on the stream has finished, once every block of that kernel has allowed it or exited; it must then
// wait for that kernel before it reads anything the kernel writes. Both calls are no-ops on earlier
// architectures and for plain launches.
#pragma once

namespace sonic::cuda {

// This block no longer needs the SM room a dependent kernel's early launch would take.
__device__ __forceinline__ void allow_dependent_launch() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Waits until the kernel this one depends on has completed and its writes are visible.
__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace sonic::cuda
