#!/usr/bin/env bash
# Where a call's time goes, phase by phase: a build with the kernels' phase timestamps
# (-DSONIC_TIMELINE=ON, src/cuda/timeline.cuh), then sonic_bench --timeline on a few shapes. Run
# through the device tool from the repo root:
#   scripts/timeline.sh        SONIC_TIMELINE_ARGS overrides the benchmark's shape arguments
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_timeline_logs timeline_logs.tgz
cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSONIC_TIMELINE=ON \
  -DSONIC_BUILD_TESTS=OFF -DSONIC_BUILD_TOOLS=OFF >"$L/configure.log" 2>&1 || { echo "configure FAILED"; exit 1; }
cmake --build build-timeline -j16 --target sonic_bench >"$L/build.log" 2>&1 ||
  { echo "build FAILED"; grep error "$L/build.log" | head -20; exit 1; }
build-timeline/bench/sonic_bench --out /tmp/timeline.jsonl --timeline 20 \
  ${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32,bf16 --case homog-peaked,hetero-peaked --B 1,8,128,512} | tee "$OUT/timeline.txt"
