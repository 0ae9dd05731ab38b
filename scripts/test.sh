#!/usr/bin/env bash
# Configure (Release), build everything (the CUDA sources too when nvcc is present) and run every
# test that needs no GPU. Usage: scripts/test.sh [build-dir]   (default: build)
# Environment: JOBS (parallel build and test jobs; default: the number of CPUs).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
case "$build" in /*) ;; *) build="$root/$build" ;; esac
jobs="${JOBS:-$(nproc 2>/dev/null || echo 2)}"

# Ninja when it is installed, unless the build directory was already configured with a generator.
generator=()
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then
  generator=(-G Ninja)
fi

cmake -S "$root" -B "$build" ${generator[@]+"${generator[@]}"} -DCMAKE_BUILD_TYPE=Release
cmake --build "$build" -j "$jobs"
ctest --test-dir "$build" -LE gpu --output-on-failure -j "$jobs"
