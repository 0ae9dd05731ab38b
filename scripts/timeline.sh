#!/usr/bin/env bash
# Where a call's time goes, phase by phase: a build with the kernels' phase timestamps
# (-DSONIC_TIMELINE=ON, src/cuda/timeline.cuh), then sonic_bench --timeline on a few shapes. Run
# through the device tool from the repo root:
#   scripts/timeline.sh        SONIC_TIMELINE_ARGS overrides the benchmark's shape arguments; add
#                              "--timeline-graph 1" to them for calls replayed from graphs (eager by
#                              default); SONIC_TIMELINE_VARIANTS ("name:CUDA flags:environment", several
#                              separated by ";") times builds side by side, e.g.
#                              "main::;grid:-DSONIC_COUNTED_START=0:;plain::SONIC_CUDA_PROGRAMMATIC=0".
#                              Each variant's blocks, call by call, land in $OUT/timeline_raw_NAME.tsv.gz
#                              (columns: label, call, block, SM, then each mark of timeline.cuh in ns).
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_timeline_logs timeline_logs.tgz
args=${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32,bf16 --case homog-peaked,hetero-peaked --B 1,8,128,512}
# Variants ("name:CUDA flags:environment"); those with the same flags share a build.
IFS=";" read -r -a variants <<<"${SONIC_TIMELINE_VARIANTS:-main::}"
declare -A builds=()
dir_of() { flags_build_dir build-timeline build-timeline "$1"; }
for v in "${variants[@]}"; do
  IFS=: read -r name flags env <<<"$v"
  builds[$(dir_of "$flags")]=$flags
done
jobs=$((16 / ${#builds[@]}))
for dir in "${!builds[@]}"; do build_timeline "$((jobs > 0 ? jobs : 1))" "$dir" "${builds[$dir]}" & done
wait
for v in "${variants[@]}"; do
  IFS=: read -r name flags env <<<"$v"
  dir=$(dir_of "$flags")
  [ -x "$dir/bench/sonic_bench" ] || { echo "$name: timeline build FAILED"; grep -h error "$L"/timeline_*"$dir".log | head -20; continue; }
  echo "#### $name (${flags:-no extra flags}${env:+, $env})" | tee -a "$OUT/timeline.txt"
  # Every block of every call too (bench/timeline_report.hpp's dump_raw), for block-level questions.
  rm -f "$OUT/timeline_raw_$name.tsv"
  env SONIC_TIMELINE_RAW="$OUT/timeline_raw_$name.tsv" $env "$dir/bench/sonic_bench" --out /tmp/timeline.jsonl \
    --timeline 20 $args | tee -a "$OUT/timeline.txt"
  [ -f "$OUT/timeline_raw_$name.tsv" ] && gzip -f "$OUT/timeline_raw_$name.tsv"
done
