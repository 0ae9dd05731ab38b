#!/usr/bin/env bash
# One device call for kernel patches beside main: the working tree (main) and a copy of it per patch,
# built at once; sonic_bench alone in rotated runs (each round runs every tree once, in an order that
# turns each round), then the whole GPU suite and the four compute-sanitizer tools on one patched
# tree. The shape of v3.56-v3.58's calls (perf-notes), for a patch to merge or to compare:
#   scripts/patch_check.sh docs/experiments/A.patch [B.patch ...]   (through the device tool, carry .deps)
# Each patch's tree is named after its file (A); the first is validated unless SONIC_VALIDATE names
# another (or "none"). Environment:
#   SONIC_CALL_LIMIT   seconds the script may take (default 560); runs stop SONIC_RESERVE (default 270)
#                      before it, so that the suite and the sanitizers fit
#   SONIC_ROUNDS       rounds of runs at most (default 8)
#   SONIC_CASES, SONIC_B, SONIC_DTYPES   the sample suite's warm runs (default homog-peaked,hetero-peaked;
#                      1,8,64,256; fp32,bf16), V = 151936
#   SONIC_COLD_B       batch sizes of a homog-peaked run with --cold-l2 1 (default 1,8; empty: none)
#   SONIC_SUITES       more suites a round: "verify" (3 drafts, B 8 and 64) and/or "topk" (B 1, 64, 512)
#   SONIC_VALIDATE_FIRST=1  the suite and the sanitizers before the runs, which then take what is left
#                      of SONIC_CALL_LIMIT (when device time is scarce: a form timed but not validated
#                      cannot merge)
# Results in $OUT: runs.txt ("run TREE case dtype B us", case homog-cold for the cold diagnostic,
# verify-CASE, topk-kK), each tree's sample jsonl (r_TREE.jsonl), check.txt, logs.tgz; printed: each
# tree's mean difference from main by kind of cell.
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: scripts/patch_check.sh PATCH [PATCH ...]"; exit 2; }
source "$(dirname "$0")/device_env.sh"
device_setup patch_check_logs logs.tgz
t0=$SECONDS
limit=${SONIC_CALL_LIMIT:-560}
reserve=${SONIC_RESERVE:-270}
names=()
for p in "$@"; do
  n=$(basename "$p" .patch)
  names+=("$n")
  rm -rf ".pc-$n" && mkdir ".pc-$n"
  tar c --exclude=./.git --exclude='./.pc-*' --exclude='./build*' --exclude=./bench/results --exclude=./.deps --exclude=./.whl . |
    tar xm -C ".pc-$n"
  pa=$(realpath "$p")
  (cd ".pc-$n" && patch -s -p1 <"$pa") || { echo "$p: patch FAILED"; exit 1; }
done
validate=${SONIC_VALIDATE:-${names[0]}}
cfg() { cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 "${gtest[@]}" \
  -DSONIC_BUILD_TESTS="$3" -DSONIC_BUILD_TOOLS=OFF -DSONIC_BUILD_PYTHON=OFF >"$L/cfg_$(basename "$2").log" 2>&1; }
bld() {  # NAME SOURCE TESTS JOBS
  local t=(--target sonic_bench)
  [ "$3" == ON ] && t+=(sonic_gpu_tests)
  cfg "$2" "build-pc-$1" "$3" && cmake --build "build-pc-$1" -j"$4" "${t[@]}" >"$L/build_$1.log" 2>&1
  echo "$1 build rc=$?"
}
jobs=$((16 / (${#names[@]} + 2)))
bld main . OFF "$jobs" &
for n in "${names[@]}"; do
  if [ "$n" == "$validate" ]; then bld "$n" ".pc-$n" ON $((jobs * 2)) & else bld "$n" ".pc-$n" OFF "$jobs" & fi
done
wait
echo "builds done at $((SECONDS - t0)) s"
validate_tree() {  # the suite and the sanitizers on the tree named by SONIC_VALIDATE
  [ "$validate" == none ] && return 0
  run_gpu_tests "build-pc-$validate" echo >"$OUT/check.txt" 2>&1
  head -6 "$OUT/check.txt"
  echo "tests done at $((SECONDS - t0)) s"
  if [ "${SONIC_VALIDATE_FIRST:-0}" == 1 ] || [ $((SECONDS - t0)) -lt $((limit - 130)) ]; then
    run_sanitizers "build-pc-$validate" echo >>"$OUT/check.txt" 2>&1
    grep compute-sanitizer "$OUT/check.txt"
  else
    echo "sanitizers skipped: $((SECONDS - t0)) s of $limit"
  fi
}
[ "${SONIC_VALIDATE_FIRST:-0}" == 1 ] && { validate_tree; reserve=25; }
order=(main "${names[@]}")
for v in "${order[@]}"; do
  [ -x "build-pc-$v/bench/sonic_bench" ] || { echo "$v: no sonic_bench"; tail -30 "$L/build_$v.log"; exit 1; }
done
warm="--suite sample --V 151936 --dtype ${SONIC_DTYPES:-fp32,bf16} --case ${SONIC_CASES:-homog-peaked,hetero-peaked} --B ${SONIC_B:-1,8,64,256}"
cold_b=${SONIC_COLD_B-1,8}
runs=$OUT/runs.txt
: >"$runs"
n_trees=${#order[@]}
for round in $(seq 0 $((${SONIC_ROUNDS:-8} - 1))); do
  [ $((SECONDS - t0)) -gt $((limit - reserve - 35)) ] && { echo "runs stopped after $round rounds at $((SECONDS - t0)) s"; break; }
  for i in $(seq 0 $((n_trees - 1))); do
    v=${order[$(((i + round) % n_trees))]}
    b=build-pc-$v/bench/sonic_bench
    log=$L/${v}_$round
    $b $warm --out "$OUT/r_$v.jsonl" >"$log.warm" 2>&1
    grep -E "^(homog|hetero|topp)" "$log.warm" | awk -v v="$v" '{print "run", v, $1, $2, $4, $5}' >>"$runs"
    if [ -n "$cold_b" ]; then
      $b --suite sample --V 151936 --dtype "${SONIC_DTYPES:-fp32,bf16}" --case homog-peaked --B "$cold_b" --cold-l2 1 \
        --out "/tmp/cold_$v.jsonl" >"$log.cold" 2>&1
      awk -v v="$v" '/^homog/ {d=$2; b=$4} /cold L2 \(diagnostic\)/ {print "run", v, "homog-cold", d, b, $4}' "$log.cold" >>"$runs"
    fi
    if [[ " ${SONIC_SUITES:-} " == *" verify "* ]]; then
      $b --suite verify --V 151936 --dtype "${SONIC_DTYPES:-fp32,bf16}" --drafts 3 --B 8,64 --out "/tmp/verify_$v.jsonl" >"$log.verify" 2>&1
      awk -v v="$v" '$3 ~ /^n=/ {print "run", v, "verify-" $1, $2, $5, $6}' "$log.verify" >>"$runs"
    fi
    if [[ " ${SONIC_SUITES:-} " == *" topk "* ]]; then
      $b --suite topk --V 151936 --dtype "${SONIC_DTYPES:-fp32,bf16}" --B 1,64,512 --out "/tmp/topk_$v.jsonl" >"$log.topk" 2>&1
      awk -v v="$v" '/^topk-k/ {print "run", v, $1, $2, $4, $5}' "$log.topk" >>"$runs"
    fi
  done
done
echo "runs done at $((SECONDS - t0)) s: $(grep -c . "$runs") lines"
for n in "${names[@]}"; do
  awk -v v="$n" '$1 == "run" {k=$3" "$4" "$5; s[k" "$2]+=$6; c[k" "$2]++; keys[k]=1}
    END {for (k in keys) if (c[k" main"] && c[k" "v]) {d=s[k" "v]/c[k" "v]-s[k" main"]/c[k" main"]; split(k, a, " ");
      g=a[1]=="homog-cold" ? "cold" : a[1] ~ /^verify/ ? "verify" : a[1] ~ /^topk/ ? "topk" : "warm"; t[g]+=d; m[g]++}
      for (g in t) printf "mean %s - main, %s: %+.3f us over %d cells\n", v, g, t[g]/m[g], m[g]}' "$runs"
done
[ "${SONIC_VALIDATE_FIRST:-0}" != 1 ] && validate_tree
echo "done at $((SECONDS - t0)) s"
