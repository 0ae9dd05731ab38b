#!/usr/bin/env bash
# Where a call's time goes, phase by phase: a build with the kernels' phase timestamps
# (-DSONIC_TIMELINE=ON, src/cuda/timeline.cuh), then sonic_bench --timeline on a few shapes. Run
# through the device tool from the repo root:
#   scripts/timeline.sh        SONIC_TIMELINE_ARGS overrides the benchmark's shape arguments; add
#                              "--timeline-graph 1" to them for calls replayed from graphs (eager by default)
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_timeline_logs timeline_logs.tgz
build_timeline 16 || { echo "timeline build FAILED"; grep -h error "$L"/timeline_*.log | head -20; exit 1; }
build-timeline/bench/sonic_bench --out /tmp/timeline.jsonl --timeline 20 \
  ${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32,bf16 --case homog-peaked,hetero-peaked --B 1,8,128,512} | tee "$OUT/timeline.txt"
