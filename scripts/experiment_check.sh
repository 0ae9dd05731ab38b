#!/usr/bin/env bash
# One device call for a kernel experiment: the working tree against a reference tree, side by side.
#   git archive main | (mkdir -p .ref && tar x -C .ref)     (a name git does not ignore, so it travels)
#   scripts/experiment_check.sh .ref                        (through the device tool, carry .deps)
# Steps, in order: both trees built at once (stage1_variants.sh, variants "new" and "ref") and timed
# by sonic_bench's sample suite (SONIC_VARIANT_BENCH) and top-k suite; the whole GPU suite and the
# four compute-sanitizer tools on the new tree's build; the new tree's phase timeline
# (SONIC_TIMELINE_ARGS, built in the background meanwhile). Results: $OUT/h200_new.jsonl and
# $OUT/h200_ref.jsonl (commit "unknown": label them when appending to bench/results), logs in
# $OUT/*.tgz. SONIC_EXPERIMENT_STEPS picks steps (default "bench tests sanitize timeline").
set -uo pipefail
ref=${1:?usage: scripts/experiment_check.sh REF_TREE}
steps=${SONIC_EXPERIMENT_STEPS:-bench tests sanitize timeline}
source "$(dirname "$0")/device_env.sh"
device_setup sonic_experiment_logs experiment_logs.tgz
has() { [[ " $steps " == *" $1 "* ]]; }
if has timeline; then
  ( cmake -S . -B build-timeline -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DSONIC_TIMELINE=ON \
      -DSONIC_BUILD_TESTS=OFF -DSONIC_BUILD_TOOLS=OFF && cmake --build build-timeline -j4 --target sonic_bench ) \
    >"$L/timeline_build.log" 2>&1 &
fi
new=build-var-base
old=build-var-$(echo "@$ref" | md5sum | cut -c1-8)  # stage1_variants.sh's name for the tree's build
SONIC_VARIANTS_EXTRA="ref:@$ref:" SONIC_VARIANTS="base ref" scripts/stage1_variants.sh | sed 's/^base /new  /'
for v in new:$new ref:$old; do
  name=${v%%:*} dir=${v#*:}
  [ -x "$dir/bench/sonic_bench" ] || continue
  cp "/tmp/sonic_variant_logs/bench_$([ "$name" == new ] && echo base || echo ref).jsonl" "$OUT/h200_$name.jsonl"
  if has bench; then
    "$dir/bench/sonic_bench" --suite topk --k 128 --V 151936 --dtype fp32,bf16 --out "$OUT/h200_$name.jsonl" \
      >"$L/topk_$name.log" 2>&1
    grep -E "^topk" "$L/topk_$name.log" | sed "s/^/$name /"
  fi
done
rc=0
if has tests; then
  $new/tests/sonic_gpu_tests >"$L/gpu_tests.log" 2>&1; r=$?
  echo "gpu tests rc=$r: $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/gpu_tests.log" | head -2 | tr '\n' ' ')"
  [ $r -ne 0 ] && { grep -E -A6 "Failure" "$L/gpu_tests.log" | head -60; rc=1; }
fi
if has sanitize; then
  filter=${SONIC_SANITIZE_FILTER:-SharedRulesDevice.*:CudaBadRows.*:AllShapes/CudaAgreement.*/V1000_*:CudaChunking.SmallVocabularyForcedChunks:CudaStage2Placement.SmallVocabulary:AllShapes/CudaTopK.*/V1000_*:Shapes/CudaVerify.*/V1000_*:CudaVerifyLogprobs.*}
  for tool in memcheck racecheck initcheck synccheck; do
    compute-sanitizer --tool $tool --error-exitcode 9 $new/tests/sonic_gpu_tests --gtest_filter="$filter" \
      >"$L/sanitize_$tool.log" 2>&1; r=$?
    echo "compute-sanitizer $tool rc=$r: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$L/sanitize_$tool.log" | tail -1)"
    [ $r -ne 0 ] && rc=1
  done
fi
if has timeline; then
  wait
  build-timeline/bench/sonic_bench --out /tmp/timeline.jsonl --timeline 20 \
    ${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32 --case homog-peaked,hetero-peaked --B 1,8,128} | tee "$OUT/timeline.txt" | tail -70
fi
exit $rc
