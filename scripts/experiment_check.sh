#!/usr/bin/env bash
# One device call for a kernel experiment: the working tree against a reference tree, side by side
# (and against more trees, timed only, when named after it).
#   git archive main | (mkdir -p .ref && tar xm -C .ref)    (a name git does not ignore, so it travels)
#   scripts/experiment_check.sh .ref [.other ...]           (through the device tool, carry .deps)
# tar's m gives the files the time of extraction, not the commit's: the device keeps build folders
# between calls, and a tree whose files are older than the objects built there from the last one
# is not rebuilt (v3.48 call 4 timed main against a stale build of main that way; stage1_variants.sh
# now also touches a tree whose sources differ from its build folder's last ones).
# Steps, in order: both trees built at once (stage1_variants.sh, variants "new" and "ref") and timed
# by sonic_bench's sample suite (SONIC_VARIANT_BENCH) and top-k suite; the whole GPU suite and the
# four compute-sanitizer tools on the new tree's build; the new tree's phase timeline
# (SONIC_TIMELINE_ARGS, built in the background meanwhile). Results: $OUT/bench_new.jsonl,
# $OUT/bench_ref.jsonl and one file a further tree, named after it without its dots (commit
# "unknown": scripts/append_results.py labels and appends them to bench/results), logs in $OUT/*.tgz.
# SONIC_EXPERIMENT_STEPS picks steps (default "bench tests sanitize timeline"); SONIC_VARIANT_VERIFY adds
# the verify suite to the bench step; SONIC_EXPERIMENT_ENV adds variants of the new tree's build that
# differ by their environment ("name:VAR=value;name2:VAR=value"), timed beside it (bench only).
# A further tree given as a patch file (docs/experiments/NAME.patch) is the reference tree with that
# patch applied, made here (.pc-NAME, which need not be carried). SONIC_EXPERIMENT_VALIDATE_FIRST=1
# runs the tests and sanitize steps before the timing, for calls whose device time may run out (a
# form timed but not validated cannot merge, perf-notes v3.58). SONIC_VARIANT_BENCH with `--cold-l2 1`
# also times each call with the L2 flushed (lines "CASE-cold", stage1_variants.sh).
# The validated build's fingerprint (scripts/sass_fingerprint.sh) comes back as $OUT/sass_validated.txt.
# SONIC_TIMELINE_REF=1 also builds and runs the reference tree's timeline ($OUT/timeline_ref.txt).
set -uo pipefail
ref=${1:?usage: scripts/experiment_check.sh REF_TREE [TREE ...]}
shift
others=("$@")
steps=${SONIC_EXPERIMENT_STEPS:-bench tests sanitize timeline}
source "$(dirname "$0")/device_env.sh"
device_setup sonic_experiment_logs experiment_logs.tgz
has() { [[ " $steps " == *" $1 "* ]]; }
has timeline && build_timeline 4 &
# SONIC_TIMELINE_REF=1: the reference tree's timeline too ($OUT/timeline_ref.txt), to tell a phase
# that moved from one that only started later (a timeline build's code is not production's).
[ "${SONIC_TIMELINE_REF:-0}" == 1 ] && has timeline && root=$PWD && (cd "$ref" && build_timeline 4 "$root/build-timeline-ref") &
new=build-var-base
tree_build() { flags_build_dir build-var "" "@$1"; }  # stage1_variants.sh's name
trees=("new:$new:base" "ref:$(tree_build "$ref"):ref")
extra="ref:@$ref:" names="base ref"
IFS=";" read -r -a envs <<<"${SONIC_EXPERIMENT_ENV:-}"
for e in "${envs[@]}"; do
  name=${e%%:*}
  trees+=("$name:$new:$name")
  extra+=";$name::${e#*:}" names+=" $name"
done
for t in "${others[@]}"; do
  if [[ $t == *.patch ]]; then  # the reference tree with this patch
    p=$(realpath "$t")
    t=.pc-$(basename "$t" .patch)
    rm -rf "$t" && mkdir "$t" && tar c -C "$ref" . | tar xm -C "$t"
    (cd "$t" && patch -s -p1 <"$p") || { echo "$p: patch FAILED"; exit 1; }
  fi
  name=$(basename "$t" | tr -d .)
  trees+=("$name:$(tree_build "$t"):$name")
  extra+=";$name:@$t:" names+=" $name"
done
rc=0
validate() {
  # The validated build's kernels, one line each, to compare with a local build's before a merge
  # writes them into docs/validated-sass.txt.
  scripts/sass_fingerprint.sh "$new" >"$OUT/sass_validated.txt" 2>"$L/sass_fingerprint.log" || true
  has tests && { run_gpu_tests $new echo || rc=1; }
  has sanitize && { run_sanitizers $new echo || rc=1; }
}
if [ "${SONIC_EXPERIMENT_VALIDATE_FIRST:-0}" == 1 ]; then  # the builds alone (no round), then the checks
  SONIC_VARIANT_ROUNDS=0 SONIC_VARIANTS_EXTRA="$extra" SONIC_VARIANTS="$names" scripts/stage1_variants.sh
  validate
fi
SONIC_VARIANTS_EXTRA="$extra" SONIC_VARIANTS="$names" scripts/stage1_variants.sh | sed 's/^base /new  /'
for v in "${trees[@]}"; do
  IFS=: read -r name dir variant <<<"$v"
  [ -x "$dir/bench/sonic_bench" ] || continue
  cp "/tmp/sonic_variant_logs/bench_$variant.jsonl" "$OUT/bench_$name.jsonl"
  if has bench; then
    "$dir/bench/sonic_bench" --suite topk --k 128 --V 151936 --dtype fp32,bf16 --out "$OUT/bench_$name.jsonl" \
      >"$L/topk_$name.log" 2>&1
    grep -E "^topk" "$L/topk_$name.log" | sed "s/^/$name /"
    # SONIC_VARIANT_VERIFY: sonic_bench's verify suite too, with these arguments (for example
    # "--case all-random --V 151936 --B 1,8,32 --drafts 1,3,7").
    if [ -n "${SONIC_VARIANT_VERIFY:-}" ]; then
      "$dir/bench/sonic_bench" --suite verify $SONIC_VARIANT_VERIFY --out "$OUT/bench_$name.jsonl" >"$L/verify_$name.log" 2>&1
      grep -E "^all-|^mixed" "$L/verify_$name.log" | sed "s/^/$name verify /"
    fi
  fi
done
[ "${SONIC_EXPERIMENT_VALIDATE_FIRST:-0}" == 1 ] || validate
if has timeline; then
  wait
  timeline_args=${SONIC_TIMELINE_ARGS:---V 151936 --dtype fp32 --case homog-peaked,hetero-peaked --B 1,8,128}
  build-timeline/bench/sonic_bench --out /tmp/timeline.jsonl --timeline 20 $timeline_args | tee "$OUT/timeline.txt" | tail -70
  if [ -x build-timeline-ref/bench/sonic_bench ] && [ "${SONIC_TIMELINE_REF:-0}" == 1 ]; then
    build-timeline-ref/bench/sonic_bench --out /tmp/timeline_ref.jsonl --timeline 20 $timeline_args >"$OUT/timeline_ref.txt" 2>&1
    echo "reference tree's timeline: $OUT/timeline_ref.txt"
  fi
fi
exit $rc
