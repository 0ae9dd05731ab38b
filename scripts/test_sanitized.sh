#!/usr/bin/env bash
# The CPU tests with the host code built under AddressSanitizer and UndefinedBehaviorSanitizer
# (out-of-bounds and use-after-free accesses, leaks, signed overflow, misaligned or null accesses,
# bad shifts; any report fails its test). CUDA off: the device code has compute-sanitizer
# (scripts/device_check.sh sanitize). Slower than scripts/test.sh (about 8 minutes on 16 cores),
# so CI does not run it; run it after changing host or reference code.
#   scripts/test_sanitized.sh [build-dir]   (default: build-sanitized)
# Environment: JOBS (parallel build and test jobs; default: the number of CPUs), SONIC_SANITIZE
# (default address,undefined).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build-sanitized}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"
generator=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

cmake -S "$root" -B "$build" ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSONIC_ENABLE_CUDA=OFF -DSONIC_SANITIZE="${SONIC_SANITIZE:-address,undefined}"
cmake --build "$build" -j "$jobs"
ASAN_OPTIONS="detect_leaks=1:abort_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
UBSAN_OPTIONS="print_stacktrace=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}" \
  ctest --test-dir "$build" -LE gpu --output-on-failure -j "$jobs" --timeout 1800
