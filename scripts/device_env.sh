# Sourced by the device scripts (device_check.sh, experiment_check.sh, ncu_source.sh,
# stage1_variants.sh, timeline.sh).
#   device_setup NAME ARCHIVE: makes $OUT (the device tool's output folder, or ./out); empties the
#   log folder L=/tmp/NAME and packs it into $OUT/ARCHIVE when the script exits (the device tool
#   returns only a few files); sets gtest to the CMake argument for the carried GoogleTest sources.
#   run_gpu_tests BUILD REPORT, run_sanitizers BUILD REPORT: a build's GPU tests (SONIC_TEST_FILTER)
#   and the four compute-sanitizer tools on its reduced grid (SONIC_SANITIZE_FILTER), each summary
#   line passed to the command REPORT (echo, or a script's log); they return 1 when anything failed.
#   install_carried_wheels: the wheels of .whl/ (scripts/flashinfer_wheels.sh fetched them; carry .whl)
#     into /tmp/carried-site on PYTHONPATH, FlashInfer's JIT set to compile for sm_90 only; a no-op
#     without .whl/. A carried .fi-cache/ (FlashInfer's JIT cache from an earlier call's
#     $OUT/fi-cache.tgz, about 35 MB) is its workspace, touched newer than the fresh install so that
#     ninja keeps the compiled modules (about 100 s of compiling otherwise).
#   flags_build_dir PREFIX DEFAULT FLAGS: the build folder of a variant's flags (DEFAULT for none,
#     else PREFIX-<hash of FLAGS>), so that variants with the same flags share one build and the
#     scripts agree on its name.
#   build_timeline JOBS [DIR [CUDA_FLAGS]]: DIR (default build-timeline), sonic_bench with the
#     kernels' phase timestamps (extra CMake options in SONIC_TIMELINE_CMAKE, e.g.
#     -DSONIC_TIMELINE_WARM_CODE=ON; CUDA_FLAGS for an experiment's -D switches).
device_setup() {
  OUT=${OUT:-$PWD/out}
  mkdir -p "$OUT"
  L=/tmp/$1
  rm -rf "$L" && mkdir -p "$L"
  trap "tar czf '$OUT/$2' -C /tmp '$1'" EXIT
  gtest=()
  [ -d .deps/googletest ] && gtest=(-DSONIC_GTEST_SOURCE_DIR="$PWD/.deps/googletest")
}

run_gpu_tests() {
  local build=$1 report=$2 r
  # Bounded (SONIC_TEST_TIMEOUT seconds, default 300): a hang shows as rc=124 with the test it hung
  # in, and leaves the rest of the call its time.
  timeout "${SONIC_TEST_TIMEOUT:-300}" "$build/tests/sonic_gpu_tests" --gtest_filter="${SONIC_TEST_FILTER:-*}" \
    >"$L/gpu_tests.log" 2>&1; r=$?
  [ $r -eq 124 ] && { $report "gpu tests TIMED OUT in: $(grep -E '^\[ RUN' "$L/gpu_tests.log" | tail -1)"; return 1; }
  $report "gpu tests rc=$r: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/gpu_tests.log" | head -2 | tr '\n' ' ')"
  grep -E "near-tie|disagreements|tokens differ|^\[ (gpu )?stats|sums of rising rows" "$L/gpu_tests.log" | head -80
  [ $r -eq 0 ] || { grep -E -A6 "Failure|error" "$L/gpu_tests.log" | head -80; return 1; }
}

run_sanitizers() {
  local build=$1 report=$2 tool r rc=0
  local filter=${SONIC_SANITIZE_FILTER:-SharedRulesDevice.*:CudaBadRows.*:AllShapes/CudaAgreement.*/V1000_*:CudaChunking.SmallVocabularyForcedChunks:CudaStage2Placement.SmallVocabulary:AllShapes/CudaTopK.*/V1000_*:Shapes/CudaVerify.*/V1000_*:CudaVerifyLogprobs.*:CudaVerifyHistory.*:CudaVerifyTails.SmallVocabulary:CudaVerifyBadInput.*:CudaStepShape.SmallVocabulary:CudaExactPath.WideNucleusSmallVocabulary:CudaExactPath.ManyFlaggedRowsSmallVocabulary:CudaExactPath.TopKRowsSmallVocabulary:CudaExactPath.TopKRowsFromTheList:CudaExactPath.BandMatchesListSmallVocabulary:CudaExactPath.CrowdedTopTokensSmallVocabulary:CudaGrammarMasks.SmallVocabulary:CudaEngineMasks.SmallVocabulary:CudaExtremeLogits.SmallVocabulary:CudaLowTemperature.SmallVocabulary:CudaRowStride.SmallVocabulary:CudaPackedScreen.SmallVocabulary:CudaLoweringPenalties.SmallVocabulary:CudaTokenLists.SmallVocabulary:CudaDeviceCommit.SmallVocabulary:CudaDeviceCommit.SlotNamedTwiceLikeReference:CudaScreenedDraw.SmallVocabulary}
  # The four tools at once, each its own process on the GPU (most of their time is the host's
  # instrumentation and checking): 63 s for all four on the H200 machine (2026-12-02). Run nothing
  # else beside them: the GPU suite started at the same time (on an untested kernel change) was still
  # in CudaGraph 110 s after they ended, for a reason not yet known.
  local pids=()
  for tool in memcheck racecheck initcheck synccheck; do
    ( compute-sanitizer --tool $tool --error-exitcode 9 "$build/tests/sonic_gpu_tests" \
        --gtest_filter="$filter" >"$L/sanitize_$tool.log" 2>&1
      echo $? >"$L/sanitize_$tool.rc" ) &
    pids+=($!)
  done
  wait "${pids[@]}"
  for tool in memcheck racecheck initcheck synccheck; do
    r=$(cat "$L/sanitize_$tool.rc")
    $report "compute-sanitizer $tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/sanitize_$tool.log" | tail -1)"
    [ "$r" -eq 0 ] || rc=1
  done
  return $rc
}

install_carried_wheels() {
  compgen -G ".whl/*.whl" >/dev/null || return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/carried-site \
    .whl/*.whl >"$L/wheels_install.log" 2>&1 || { echo "carried wheels: install FAILED"; tail -5 "$L/wheels_install.log"; return 1; }
  export PYTHONPATH="/tmp/carried-site${PYTHONPATH:+:$PYTHONPATH}" FLASHINFER_CUDA_ARCH_LIST="9.0"
  if [ -d .fi-cache ]; then
    export FLASHINFER_WORKSPACE_BASE="$PWD/.fi-cache"
    find .fi-cache -name "*.o" -exec touch {} +
    sleep 1 && find .fi-cache -name "*.so" -exec touch {} +
  fi
  echo "carried wheels installed: $(ls .whl | tr '\n' ' ')"
}

flags_build_dir() {
  [ -z "$3" ] && echo "$2" || echo "$1-$(echo "$3" | md5sum | cut -c1-8)"
}

build_timeline() {
  local dir=${2:-build-timeline} log
  log=$(basename "$dir")
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSONIC_TIMELINE=ON \
    -DSONIC_BUILD_TESTS=OFF -DSONIC_BUILD_TOOLS=OFF -DCMAKE_CUDA_FLAGS="${3:-}" \
    ${SONIC_TIMELINE_CMAKE:--DSONIC_TIMELINE_WARM_CODE=OFF} >"$L/timeline_configure_$log.log" 2>&1 &&
    cmake --build "$dir" -j"$1" --target sonic_bench >"$L/timeline_build_$log.log" 2>&1
}
