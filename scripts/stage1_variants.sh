#!/usr/bin/env bash
# Experiment on the GPU machine: the fast kernel in several variants, each checked by a few GPU
# agreement tests and timed by sonic_bench side by side. A variant is "name:CUDA flags:environment";
# variants with the same flags share one build (environment-only variants, such as a forced chunk
# size, reuse it). Prints one table; logs come back in $OUT/variant_logs.tgz.
#   scripts/stage1_variants.sh            (carry .deps)
# SONIC_VARIANTS (space-separated names) picks some of them; SONIC_VARIANT_BENCH overrides the
# benchmark's arguments; SONIC_VARIANT_ROUNDS=N times them all N times in rotated orders and prints
# the means; SONIC_VARIANT_TESTS (a gtest filter) runs those tests on each variant;
# SONIC_BASE_BUILD names an existing build of the plain flags to reuse (device_check.sh's build-gpu).
# A variant whose flags are "@DIR" builds the source tree in DIR instead (an earlier commit, say:
#   git archive HEAD~1 | (mkdir -p .base && tar xm -C .base), then carry .base), so that old and new
# kernels are timed side by side in one run ("@DIR flags" adds CUDA flags to that tree's build);
# SONIC_VARIANTS_EXTRA adds variants to the list, separated by ";" (flags may hold spaces), e.g.
# "old:@.base:;fast:-DA=1 -DB=2:;exp16:@.exp -DRANK=16:".
set -uo pipefail
source "$(dirname "$0")/device_env.sh"
device_setup sonic_variant_logs variant_logs.tgz
all_variants=(
  "base::"
  "stages2:-DSONIC_FAST_STAGES=2:"
  "chunk2::SONIC_CUDA_TILES_PER_CHUNK=2"
  "chunk4::SONIC_CUDA_TILES_PER_CHUNK=4"
  "chunk8::SONIC_CUDA_TILES_PER_CHUNK=8"
  "chunk16::SONIC_CUDA_TILES_PER_CHUNK=16"
  "slot32:-DSONIC_SLOT_OFFSET=32:"  # the stage-1 slots 32 / 64 / 96 bytes past a 128-byte row (v3.17)
  "slot64:-DSONIC_SLOT_OFFSET=64:"
  "slot96:-DSONIC_SLOT_OFFSET=96:"
  # row_stage2_kernel's start (v3.18): after the whole fast grid, plain launches, its launch left to
  # the fast blocks' exits
  "grid:-DSONIC_COUNTED_START=0:"
  "plain::SONIC_CUDA_PROGRAMMATIC=0"
  "latedep:-DSONIC_LATE_DEPENDENTS=1:"
  # the carveouts (percent): row_stage2 at the fast kernel's (all shared memory) or at its own needs,
  # or every kernel at the same (a change of preference between launches may cost a device-side
  # synchronisation, the driver API says)
  "carve100::SONIC_CUDA_CARVEOUT=-1,100,-1"  # -1: no preference
  "carve25::SONIC_CUDA_CARVEOUT=-1,25,-1"
  "carveall::SONIC_CUDA_CARVEOUT=100,100,100"
  "noevict:-DSONIC_LOGITS_EVICT_FIRST=0:"  # plain logits copies, no L2 evict-first policy (v3.20)
)
variants=()
IFS=";" read -r -a extra <<<"${SONIC_VARIANTS_EXTRA:-}"
all_variants+=("${extra[@]}")
for v in "${all_variants[@]}"; do
  [[ -z "${SONIC_VARIANTS:-}" || " $SONIC_VARIANTS " == *" ${v%%:*} "* ]] && variants+=("$v")
done
build_dir() { flags_build_dir build-var "${SONIC_BASE_BUILD:-build-var-base}" "$1"; }
# "@DIR" may be followed by CUDA flags for that tree ("@.wr -DX=1").
source_dir() { [[ $1 == @* ]] && { read -r d _ <<<"$1"; echo "${d#@}"; } || echo .; }
cuda_flags() { [[ $1 == @* ]] && { read -r _ f <<<"$1"; echo "$f"; } || echo "$1"; }
declare -A builds=()
for v in "${variants[@]}"; do
  IFS=: read -r name flags env <<<"$v"
  builds[$(build_dir "$flags")]=$flags
done
# The device keeps build folders between calls, and ninja rebuilds by file times: an "@DIR" tree
# extracted with its commit's times (tar x) may be older than the objects left there by another
# tree, which would then be timed in its place (perf-notes v3.48 call 4). So a tree whose sources
# differ from those its folder was last built from has its files touched first.
tree_id() { (cd "$1" && find CMakeLists.txt src include bench tests -type f -print0 2>/dev/null | sort -z | xargs -0 cat | md5sum | cut -c1-16); }
for dir in "${!builds[@]}"; do
  flags=${builds[$dir]}
  [ -x "$dir/bench/sonic_bench" ] && [ "$dir" == "${SONIC_BASE_BUILD:-}" ] && continue  # reused as it is
  src=$(source_dir "$flags")
  if [ "$src" != . ]; then
    id=$(tree_id "$src")
    [ "$(cat "$dir/.sonic_tree_id" 2>/dev/null)" == "$id" ] || find "$src" -type f -exec touch {} +
    mkdir -p "$dir" && echo "$id" >"$dir/.sonic_tree_id"
  fi
  ( cmake -S "$(source_dir "$flags")" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DCMAKE_CUDA_FLAGS="$(cuda_flags "$flags")" "${gtest[@]}" >"$L/configure_${dir}.log" 2>&1 &&
    cmake --build "$dir" -j$((16 / ${#builds[@]})) --target sonic_bench sonic_gpu_tests >"$L/build_${dir}.log" 2>&1 ) &
done
wait
bench_args=${SONIC_VARIANT_BENCH:---V 151936 --dtype fp32,bf16 --case homog-peaked,hetero-peaked --B 1,32,128,512}
# SONIC_VARIANT_ROUNDS=N times every variant N times, round r starting r places further down the
# list, so that no variant is always the one timed first, straight after the builds (the working
# tree's "base" was, in every call before v3.52); and one run's spread (about 0.1-0.2 µs at small
# B) is the size of the effects timed here. The means over the rounds follow the rounds' lines.
rounds=${SONIC_VARIANT_ROUNDS:-1}
for ((round = 0; round < rounds; ++round)); do
  for ((i = 0; i < ${#variants[@]}; ++i)); do
    v=${variants[$(((i + round) % ${#variants[@]}))]}
    IFS=: read -r name flags env <<<"$v"
    dir=$(build_dir "$flags")
    if [ ! -x "$dir/bench/sonic_bench" ]; then
      ((round == 0)) && { echo "$name: build FAILED"; tail -5 "$L/build_${dir}.log"; }
      continue
    fi
    if [ -n "${SONIC_VARIANT_TESTS:-}" ] && ((round == 0)); then
      env $env "$dir/tests/sonic_gpu_tests" --gtest_filter="$SONIC_VARIANT_TESTS" >"$L/tests_$name.log" 2>&1
      echo "$name: tests rc=$? $(grep -E '^\[  (PASSED|FAILED)  \]' "$L/tests_$name.log" | tr '\n' ' ')"
    fi
    log="$L/bench_$name.log"
    ((round > 0)) && log="$L/bench_${name}_round$round.log"
    env $env "$dir/bench/sonic_bench" --out "$L/bench_$name.jsonl" $bench_args >"$log" 2>&1
    # With `--cold-l2 1` in the benchmark's arguments, each case's "cold L2 (diagnostic)" line follows
    # it: a line of its own, case "CASE-cold", the flushed call's µs as its graph figure.
    # A case line: its name, then dtype, V and B (any suite's case: topp-sharp-peaked too).
    awk -v n="$name" 'function line(cs, g, e, check, rows) {
        printf "%-9s %-13s %-5s B=%-4s graph %8s us eager %8s us %s exact rows %s\n", n, cs, d, b, g, e, check, rows
      }
      $2 ~ /^(fp32|bf16|fp16)$/ && $3 ~ /^[0-9]+$/ && $4 ~ /^[0-9]+$/ {
        c = $1; d = $2; b = $4; rows = $0; sub(/.*exact rows /, "", rows); sub(/ .*/, "", rows)
        line(c, $5, $6, $9, rows)
      }
      /cold L2 \(diagnostic\)/ {line(c "-cold", $4, "-", "-", "-")}' "$log" |
      tee -a "$L/rounds.txt"
  done
done
if ((rounds > 1)); then
  # Fields of the lines above: 1 name, 2 case, 3 dtype, 4 B=, 6 graph µs, 9 eager µs.
  awk '{k = sprintf("%-9s %-13s %-5s %-6s", $1, $2, $3, $4); order[k] = order[k] ? order[k] : ++n; g[k] += $6; e[k] += $9; c[k]++}
    END {for (k in g) printf "%d\tmean of %d: %s graph %8.2f us eager %8.2f us\n", order[k], c[k], k, g[k] / c[k], e[k] / c[k]}' \
    "$L/rounds.txt" | sort -n | cut -f2-
fi
