#!/usr/bin/env bash
# Where the fast kernel's time goes, line by line: a -lineinfo build, then per batch size ncu's
# kernel durations (fast and exact kernels), its throughput/occupancy/stall sections and the sampled
# warp stalls per CUDA source line (SourceCounters), summed and the top lines printed. Run through
# the device tool from the repo root with .deps carried:
#   scripts/ncu_source.sh        SONIC_NCU_B (default "1 512"), SONIC_PROFILE_CASE, SONIC_NCU_DTYPE,
#                                SONIC_NCU_KERNEL (the kernel sampled line by line: default fast_sample;
#                                row_stage2 for small batches' stage 2, which then runs alone on its SMs),
#                                SONIC_NCU_INTERVAL (ncu's --warp-sampling-interval: auto, or 0-31 for 2^(5+n)
#                                cycles; a one-block kernel needs a short one to gather enough samples),
#                                SONIC_NCU_MEMORY=1 (also the memory workload section, and the warp-state
#                                and memory lines printed: is a stream held by the memory system or by
#                                the SM's load pipeline?), SONIC_NCU_CUDA_FLAGS (more CUDA flags for the
#                                build: an experiment's -D switch), SONIC_NCU_ENV (environment for the
#                                benchmark, e.g. SONIC_CUDA_HELPERS=0), SONIC_NCU_CACHE (all: the caches
#                                flushed before the sampled pass, below)
# Caches are not flushed between replays (--cache-control none): a kernel after the fast one finds
# the candidates in L2, as it does outside the profiler. SONIC_NCU_CACHE=all flushes them before each
# profiled pass instead: the kernel's code and tables come from memory, as in serving, where the LM
# head streams through L2 between calls (perf-notes lever 8).
# The per-line tables come back in $OUT/source_tables.tgz; scripts/sass_lines.py maps the SASS table to
# source lines and scoreboards with a local disassembly of the same build.
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_source source_tables.tgz
cmake -S . -B build-gpu-lineinfo -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_CUDA_FLAGS="-lineinfo ${SONIC_NCU_CUDA_FLAGS:-}" "${gtest[@]}" >"$L/configure.log" 2>&1 || { echo "configure FAILED"; exit 1; }
cmake --build build-gpu-lineinfo -j16 --target sonic_bench >"$L/build.log" 2>&1 ||
  { echo "build FAILED"; grep error "$L/build.log" | head -20; exit 1; }
bench=build-gpu-lineinfo/bench/sonic_bench
case_=${SONIC_PROFILE_CASE:-homog-peaked}
dtype=${SONIC_NCU_DTYPE:-fp32}
for b in ${SONIC_NCU_B:-1 512}; do
  args=(--out /tmp/ncu_src.jsonl --B "$b" --V 151936 --dtype "$dtype" --case "$case_")
  echo "== B=$b $case_ $dtype: kernel durations (us)"
  env ${SONIC_NCU_ENV:-} ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"fast_sample|row_stage2|exact_sample" -s 6 -c 9 \
    "$bench" "${args[@]}" >"$L/durations_B$b.log" 2>&1
  grep -E "sample_kernel|gpu__time_duration" "$L/durations_B$b.log" | paste - - |
    sed -E 's/.*(fast_sample_kernel|row_stage2_kernel|exact_sample_kernel).*gpu__time_duration.sum +([a-z]+) +([0-9.,]+).*/\1 \3 \2/' | head -9
  env ${SONIC_NCU_ENV:-} ncu --clock-control none --cache-control "${SONIC_NCU_CACHE:-none}" --warp-sampling-interval "${SONIC_NCU_INTERVAL:-auto}" \
    -k regex:"${SONIC_NCU_KERNEL:-fast_sample}" -s 2 -c 1 --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section SourceCounters --import-source yes \
    ${SONIC_NCU_MEMORY:+--section MemoryWorkloadAnalysis} \
    -f -o "$L/rep_B$b" "$bench" "${args[@]}" >"$L/ncu_B$b.log" 2>&1
  ncu -i "$L/rep_B$b.ncu-rep" --page details >"$L/details_B$b.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Achieved Occupancy|Issued Warp|No Eligible|Warp Cycles Per Issued" "$L/details_B$b.txt" | head -10
  [ -n "${SONIC_NCU_MEMORY:-}" ] &&
    grep -E "Stall|Memory Throughput|Mem Busy|Max Bandwidth|L1/TEX Hit|L2 Hit|Mem Pipes Busy|Shared Memory" "$L/details_B$b.txt" | head -40
  ncu -i "$L/rep_B$b.ncu-rep" --page source --csv --print-source cuda >"$L/cuda_lines_B$b.csv" 2>&1
  ncu -i "$L/rep_B$b.ncu-rep" --page source --csv --print-source sass >"$L/sass_B$b.csv" 2>&1
  rm -f "$L/rep_B$b.ncu-rep"
  python3 scripts/ncu_lines.py "$L/cuda_lines_B$b.csv" 45
  # Every instruction's samples (the line table above holds only the kernel's own file), by region
  # between barriers, long regions in windows of 64 instructions.
  python3 scripts/ncu_regions.py "$L/sass_B$b.csv" 1.5 64
done
