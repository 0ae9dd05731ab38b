#!/usr/bin/env bash
# Experiment on the GPU machine: the fast kernel built with each stage-1 variant (compile-time
# switches in src/cuda/stage1_tile.cuh and fast_sample.cu), checked by the GPU agreement tests and
# timed by sonic_bench side by side. Prints one table; logs come back in $OUT/logs.tgz.
#   scripts/stage1_variants.sh            (carry .deps)
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
L=/tmp/sonic_variant_logs
rm -rf "$L" && mkdir -p "$L"
trap 'tar czf "$OUT/logs.tgz" -C /tmp sonic_variant_logs' EXIT
# SONIC_VARIANTS (space-separated names) picks some of them.
# A variant is "name:extra CUDA flags"; add a compile-time switch to the kernel and a line here to
# A/B it (docs/perf-notes.md records the ones tried: two top-4 chains, a release atomic).
all_variants=(
  "base:"
  "occ8:-DSONIC_FAST_MIN_BLOCKS=8"
)
variants=()
for v in "${all_variants[@]}"; do
  [[ -z "${SONIC_VARIANTS:-}" || " $SONIC_VARIANTS " == *" ${v%%:*} "* ]] && variants+=("$v")
done
gtest=()
[ -d .deps/googletest ] && gtest=(-DSONIC_GTEST_SOURCE_DIR="$PWD/.deps/googletest")
for v in "${variants[@]}"; do
  name=${v%%:*} flags=${v#*:}
  ( cmake -S . -B "build-var-$name" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_CUDA_FLAGS="$flags" "${gtest[@]}" >"$L/configure_$name.log" 2>&1 &&
    cmake --build "build-var-$name" -j$((16 / ${#variants[@]})) --target sonic_bench sonic_gpu_tests >"$L/build_$name.log" 2>&1 ) &
done
wait
for v in "${variants[@]}"; do
  name=${v%%:*}
  if [ ! -x "build-var-$name/bench/sonic_bench" ]; then echo "$name: build FAILED"; tail -5 "$L/build_$name.log"; continue; fi
  "build-var-$name/tests/sonic_gpu_tests" --gtest_filter='AllShapes/CudaAgreement.*V151936*:AllShapes/CudaAgreement.*V1000*:*CudaTopK*' >"$L/tests_$name.log" 2>&1
  echo "$name: tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/tests_$name.log" | tr '\n' ' ')"
  "build-var-$name/bench/sonic_bench" --out "$L/bench_$name.jsonl" --V 151936 --dtype fp32 \
    --case homog-peaked,hetero-peaked --B 1,32,128,512 >"$L/bench_$name.log" 2>&1
  grep -E "^homog|^hetero" "$L/bench_$name.log" | awk -v n="$name" '{printf "%-14s %-14s B=%-4s graph %9s us eager %9s us %s\n", n, $1, $4, $5, $6, $9}'
done
