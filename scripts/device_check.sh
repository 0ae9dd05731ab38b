#!/usr/bin/env bash
# One full call on the GPU machine: build (CUDA for sm_90), GPU tests, compute-sanitizer, and the
# benchmark when asked. Run through the device tool from the repo root, with .deps carried:
#   scripts/device_check.sh [tests] [sanitize] [bench] [topk] [verify] [probe] [latency] [pytest] [e2e] [profile] [ncu] [demo] [all]
#                                                          (default: tests sanitize)
# Logs land in $OUT (or ./out when OUT is unset).
set -uo pipefail
# Step logs go to $L and come back packed as $OUT/logs.tgz (the device tool returns at most 8 files).
source "$(dirname "$0")/device_env.sh"
device_setup sonic_logs logs.tgz
steps=${*:-tests sanitize}
log() { echo "== $*" | tee -a "$OUT/summary.txt"; }
install_carried_wheels  # FlashInfer for the baselines, when .whl is carried

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$L/gpu.txt"
# Results go to bench/results/<gpu>.jsonl (BENCH.md): h200, h100, ... from the GPU's name (the device
# tool may lend an H100), "gpu" when the name has no known model.
results=$(head -1 "$L/gpu.txt" | grep -oiE 'h100|h200|b200|a100|l40s' | head -1 | tr 'A-Z' 'a-z')
results=${results:-gpu}
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  "${gtest[@]}" >"$L/configure.log" 2>&1 || { log "configure FAILED"; tail -30 "$L/configure.log"; exit 1; }
targets=(--target sonic_gpu_tests)
[[ " $steps " == *" bench "* || " $steps " == *" topk "* || " $steps " == *" verify "* ]] && targets+=(--target sonic_bench)
[[ " $steps " == *" demo "* ]] && targets+=(--target sonic_cli)
[[ " $steps " == *" probe "* ]] && targets+=(--target sonic_cluster_probe)
[[ " $steps " == *" latency "* ]] && targets+=(--target sonic_latency_probe)
[[ " $steps " == *" all "* ]] && targets=()
cmake --build build-gpu -j16 "${targets[@]}" >"$L/build.log" 2>&1 || { log "build FAILED"; grep -E "error" "$L/build.log" | head -40; exit 1; }
log "build ok"
# Whether this build's kernels are the ones docs/validated-sass.txt records (same nvcc only): a
# validation of different kernels is the time to update that file.
scripts/sass_fingerprint.sh --check build-gpu >"$L/sass.txt" 2>&1
log "sass: $(tail -1 "$L/sass.txt")"

rc=0
[[ " $steps " == *" tests "* ]] && { run_gpu_tests build-gpu log || rc=1; }
[[ " $steps " == *" sanitize "* ]] && { run_sanitizers build-gpu log || rc=1; }
if [[ " $steps " == *" demo "* ]]; then
  build-gpu/tools/sonic demo >"$L/demo.log" 2>&1; r=$?
  log "demo rc=$r: $(tail -1 "$L/demo.log")"
  [ $r -ne 0 ] && { tail -20 "$L/demo.log"; rc=1; }
fi
if [[ " $steps " == *" bench "* ]]; then
  # The device copy has no .git: the caller passes SONIC_COMMIT (git rev-parse --short HEAD).
  commit=${SONIC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  day=$(date -u +%F)
  build-gpu/bench/sonic_bench --out "$OUT/$results.jsonl" --commit "$commit" --date "$day" ${SONIC_BENCH_ARGS:-} \
    2>&1 | tee "$L/bench.log" | tail -200; r=${PIPESTATUS[0]}
  log "sonic_bench rc=$r: $(tail -1 "$L/bench.log")"
  [ $r -ne 0 ] && rc=1
  [ -n "${SONIC_SKIP_BASELINES:-}" ] || PYTHONUNBUFFERED=1 python3 bench/baselines.py --out "$OUT/$results.jsonl" --commit "$commit" --date "$day" \
    ${SONIC_BASELINE_ARGS:-} 2>&1 | tee "$L/baselines.log" | tail -60
  log "baselines rc=${PIPESTATUS[0]}"
  python3 bench/plot.py "$OUT/$results.jsonl" "$OUT/$results.png" --commit "$commit" >>"$OUT/summary.txt" 2>&1
  # FlashInfer's JIT log, when it compiled (or failed to), and its compiled modules for later calls to
  # carry as .fi-cache (README, GPU tests) when this call compiled them.
  find "${FLASHINFER_WORKSPACE_BASE:-$HOME}/.cache/flashinfer" -name flashinfer_jit.log -exec cp {} "$L/" \; 2>/dev/null || true
  [ -d .fi-cache ] || [ ! -d "$HOME/.cache/flashinfer" ] || tar czf "$OUT/fi-cache.tgz" -C "$HOME" .cache/flashinfer
fi
if [[ " $steps " == *" topk "* ]]; then
  # Sampler::top_k (k = 128) against torch.topk (the baselines script times it with the sample suite).
  commit=${SONIC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  build-gpu/bench/sonic_bench --suite topk --k 128 --V 151936 --dtype fp32,bf16 --out "$OUT/$results.jsonl" \
    --commit "$commit" --date "$(date -u +%F)" 2>&1 | tee "$L/bench_topk.log" | tail -20; r=${PIPESTATUS[0]}
  log "sonic_bench topk rc=$r: $(tail -1 "$L/bench_topk.log")"
  [ $r -ne 0 ] && rc=1
fi
if [[ " $steps " == *" verify "* ]]; then
  # Suite verify: sonic, the PyTorch rejection sampler and (when it imports) FlashInfer in the same run.
  commit=${SONIC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  build-gpu/bench/sonic_bench --suite verify --V 151936 --B ${SONIC_VERIFY_B:-1,8,32,64,128,256} \
    --drafts ${SONIC_VERIFY_DRAFTS:-1,3,5,7} --out "$OUT/$results.jsonl" --commit "$commit" --date "$(date -u +%F)" \
    2>&1 | tee "$L/bench_verify.log" | tail -30; r=${PIPESTATUS[0]}
  log "sonic_bench verify rc=$r: $(tail -1 "$L/bench_verify.log")"
  [ $r -ne 0 ] && rc=1
  PYTHONUNBUFFERED=1 python3 bench/baselines.py --suite verify --B ${SONIC_VERIFY_B:-1,8,32,64,128,256} \
    --drafts ${SONIC_VERIFY_DRAFTS:-1,3,5,7} --out "$OUT/$results.jsonl" --commit "$commit" --date "$(date -u +%F)" \
    2>&1 | tee "$L/baselines_verify.log" | tail -30
  log "baselines verify rc=${PIPESTATUS[0]}"
fi
if [[ " $steps " == *" probe "* ]]; then
  # docs/design-small-batch.md's first measurement: a row's argmax merged through global memory
  # against a thread-block cluster (bench/cluster_probe.cu).
  commit=${SONIC_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
  build-gpu/bench/sonic_cluster_probe ${SONIC_PROBE_ARGS:-} --out "$OUT/$results.jsonl" --commit "$commit" \
    --date "$(date -u +%F)" 2>&1 | tee "$L/probe.log" | tail -45; r=${PIPESTATUS[0]}
  log "sonic_cluster_probe rc=$r: $(tail -1 "$L/probe.log")"
  [ $r -ne 0 ] && rc=1
fi
if [[ " $steps " == *" latency "* ]]; then
  # Stage 2's building blocks in SM cycles, idle and beside a streaming kernel (bench/latency_probe.cu).
  build-gpu/bench/sonic_latency_probe ${SONIC_LATENCY_ARGS:-} 2>&1 | tee "$L/latency.log" | tee -a "$OUT/summary.txt" >/dev/null
  r=${PIPESTATUS[0]}
  log "sonic_latency_probe rc=$r"
  [ $r -ne 0 ] && rc=1
fi
# The Python package with its CUDA backend, built here. python3 there is itself a venv
# (/opt/torch/.venv) that holds torch and numpy, and a venv made from it would not see them: install
# into a target folder on PYTHONPATH instead; build requirements come from the carried wheels where
# the image lacks them.
py=${SONIC_PYTHON:-python3}
python_ready=
install_python() {
  [ -n "$python_ready" ] && return 0
  local site=/tmp/sonic-site r
  rm -rf "$site" && mkdir -p "$site"
  for req in scikit_build_core nanobind pytest; do
    "$py" -c "import $req" 2>/dev/null || "$py" -m pip install -q --no-index --find-links .deps/wheels \
      --target "$site" "${req//_/-}" >>"$L/pytest_install.log" 2>&1
  done
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  "$py" -m pip install -q --no-build-isolation --no-deps --target "$site" -C build-dir=build-py-gpu . \
    >>"$L/pytest_install.log" 2>&1; r=$?
  log "pip install (CUDA) rc=$r"
  [ $r -ne 0 ] && { tail -20 "$L/pytest_install.log"; return 1; }
  python_ready=1
}
if [[ " $steps " == *" pytest "* ]]; then
  # The Python tests with torch (custom ops, torch.compile, CUDA-graph capture) and the GPU.
  if install_python; then
    (cd tests/python && SONIC_LIBRARY="$PWD/../../build-gpu/src/libsonic.so" "$py" -m pytest -q -rs \
      -p no:cacheprovider . ) >"$L/pytest.log" 2>&1; r=$?
    log "pytest rc=$r: $(tail -1 "$L/pytest.log")"; grep "^SKIPPED" "$L/pytest.log" | head -5
    [ $r -ne 0 ] && { grep -E "FAILED|Error" "$L/pytest.log" | head -20; rc=1; }
  else
    rc=1
  fi
fi
if [[ " $steps " == *" e2e "* ]]; then
  # End-to-end decoding (examples/python/decode_e2e.py): tokens per second with sonic and with the
  # model library's own sampling.
  if install_python; then
    PYTHONUNBUFFERED=1 "$py" examples/python/decode_e2e.py ${SONIC_E2E_ARGS:-} >"$L/e2e.log" 2>&1; r=$?
    log "e2e rc=$r"
    tail -12 "$L/e2e.log" | tee -a "$OUT/summary.txt"
    [ $r -ne 0 ] && rc=1
  else
    rc=1
  fi
fi
if [[ " $steps " == *" profile "* ]]; then
  # Per-kernel durations (ncu, clocks left alone) of a few configurations.
  for b in ${SONIC_PROFILE_B:-1 512}; do
    # Only the library's kernels: at small B the benchmark first fills hundreds of input buffers.
    ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"fast_sample|exact_sample" -c 6 \
      build-gpu/bench/sonic_bench \
      --out /tmp/ncu_bench.jsonl --B $b --V 151936 --dtype fp32 --case ${SONIC_PROFILE_CASE:-homog-peaked} \
      >"$L/ncu_B$b.log" 2>&1
    echo "-- ncu B=$b" >>"$OUT/summary.txt"
    grep -E "fast_sample_kernel|exact_sample_kernel|gpu__time_duration" "$L/ncu_B$b.log" | head -18 >>"$OUT/summary.txt"
  done
fi
if [[ " $steps " == *" ncu "* ]]; then
  # Why the fast kernel takes what it takes: throughput, occupancy, stall reasons (one launch).
  # SONIC_NCU_B: batch sizes; SONIC_NCU_ENV: environment for the benchmark (a forced chunk size, say).
  for b in ${SONIC_NCU_B:-512}; do
    env ${SONIC_NCU_ENV:-} ncu --clock-control none -k regex:fast_sample -s 2 -c 1 --section SpeedOfLight --section Occupancy \
      --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis \
      --metrics regex:smsp__pcsamp_warps_issue_stalled_.* \
      build-gpu/bench/sonic_bench --out /tmp/ncu_detail.jsonl --B $b --V 151936 --dtype ${SONIC_NCU_DTYPE:-fp32} \
      --case ${SONIC_PROFILE_CASE:-homog-peaked} >"$L/ncu_detail_B$b.log" 2>&1
    echo "-- ncu detail B=$b ${SONIC_NCU_ENV:-}" >>"$OUT/summary.txt"
    grep -E "Duration|DRAM Throughput|Memory Throughput|Registers|Achieved Occupancy|Theoretical Occupancy|Block Limit|Issue Slot|Eligible|Waves|Warp Cycles|No Eligible|Issued Warp" \
      "$L/ncu_detail_B$b.log" | head -30 >>"$OUT/summary.txt"
    # The largest stall reasons (sampled).
    grep -E "smsp__pcsamp_warps_issue_stalled_" "$L/ncu_detail_B$b.log" | awk '{print $NF, $1}' | sort -rn | head -8 >>"$OUT/summary.txt"
  done
fi
cat "$OUT/summary.txt"
exit $rc
