#!/usr/bin/env bash
# Where a call's time goes, phase by phase: builds with the kernels' phase timestamps
# (-DSONIC_TIMELINE=1 and 2, src/cuda/timeline.cuh), then sonic_bench --timeline on a few shapes. Run
# through the device tool from the repo root:
#   scripts/timeline.sh        SONIC_TIMELINE_ARGS overrides the benchmark's shape arguments
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_timeline_logs timeline_logs.tgz
# Level 1: the marks; level 2: also a first, discarded gather in stage 2 (cold against warm).
for level in 1 2; do
  ( cmake -S . -B build-timeline$level -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DSONIC_TIMELINE=$level -DSONIC_BUILD_TESTS=OFF -DSONIC_BUILD_TOOLS=OFF >"$L/configure$level.log" 2>&1 &&
    cmake --build build-timeline$level -j8 --target sonic_bench >"$L/build$level.log" 2>&1 ) &
done
wait
for level in 1 2; do
  [ -x build-timeline$level/bench/sonic_bench ] || { echo "level $level: build FAILED"; grep error "$L/build$level.log" | head -20; continue; }
  echo "== timeline level $level"
  build-timeline$level/bench/sonic_bench --out /tmp/timeline.jsonl --timeline 20 \
    ${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32,bf16 --case homog-peaked,hetero-peaked --B 1,8,128,512} | tee "$OUT/timeline$level.txt"
done
