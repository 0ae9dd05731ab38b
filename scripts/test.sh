#!/usr/bin/env bash
# Configure (Release), build everything (the CUDA sources too when nvcc is present) and run every
# test that needs no GPU. Usage: scripts/test.sh [--sanitize] [build-dir]   (default: build)
# --sanitize: the same tests with the C++ code under AddressSanitizer and UndefinedBehaviorSanitizer
# (out-of-bounds and use-after-free accesses, leaks, signed overflow, misaligned or null accesses,
# bad shifts; any report fails its test), CUDA off (the device code has compute-sanitizer:
# scripts/device_check.sh sanitize), in build-sanitized/ by default. About 8 minutes on 16 cores,
# so CI does not run it; run it after changing host or reference code.
# Environment: JOBS (parallel build and test jobs; default: the number of CPUs); with --sanitize,
# SONIC_SANITIZE (the -fsanitize= list; default address,undefined).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
sanitize=0
if [[ "${1:-}" == "--sanitize" ]]; then
  sanitize=1
  shift
fi
build="${1:-$( ((sanitize)) && echo build-sanitized || echo build)}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Ninja when it is installed, unless the build directory was already configured with a generator.
generator=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

config=(-DCMAKE_BUILD_TYPE=Release)
if ((sanitize)); then
  config=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSONIC_ENABLE_CUDA=OFF
          "-DSONIC_SANITIZE=${SONIC_SANITIZE:-address,undefined}")
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
fi
cmake -S "$root" -B "$build" ${generator[@]+"${generator[@]}"} "${config[@]}"
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -LE gpu --output-on-failure -j "$jobs" --timeout 1800
