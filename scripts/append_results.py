#!/usr/bin/env python3
"""Appends a device call's sonic_bench lines to bench/results/<gpu>.jsonl (BENCH.md), labelled.

    scripts/append_results.py --commit "3c1d979 + count_release_completes" --note "v3.59 call 3" \
        /work/.device/4/bench_new.jsonl [more files of the same tree ...]

experiment_check.sh and stage1_variants.sh write "commit": "unknown" (a tree on the device has no
git); device_check.sh writes SONIC_COMMIT. Each line's commit becomes "COMMIT (NOTE)", or "COMMIT
(NOTE, run N)" where a cell occurs more than once in the files (rotated rounds: the N-th time it
was measured), and its date --date (default today). The results file follows each line's "gpu"
field, as device_check.sh names it (h100, h200, ...). Lines are only appended (BENCH.md: a later run
never edits earlier ones); a mode other than graph or eager is refused.
"""
import argparse
import collections
import datetime
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
CELL = ("suite", "impl", "case", "dtype", "V", "B", "D", "mode")  # what makes a line the same cell


def results_file(gpu):
    m = re.search(r"h100|h200|b200|a100|l40s", gpu, re.I)
    return ROOT / "bench" / "results" / f"{m.group(0).lower() if m else 'gpu'}.jsonl"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", type=pathlib.Path)
    ap.add_argument("--commit", required=True, help="the tree timed: a commit, and what was applied to it")
    ap.add_argument("--note", required=True, help="where it was measured, e.g. 'v3.59 call 3'")
    ap.add_argument("--date", default=datetime.date.today().isoformat())
    ap.add_argument("--dry-run", action="store_true", help="print the counts, append nothing")
    a = ap.parse_args()

    lines = [json.loads(l) for f in a.files for l in f.read_text().splitlines() if l.strip()]
    for j in lines:
        if j.get("mode") not in ("graph", "eager"):
            sys.exit(f"append_results: mode {j.get('mode')!r} is not graph or eager (BENCH.md)")
    times = collections.Counter(tuple(j.get(k) for k in CELL) for j in lines)
    seen = collections.Counter()
    by_file = collections.defaultdict(list)
    for j in lines:
        cell = tuple(j.get(k) for k in CELL)
        seen[cell] += 1
        run = f", run {seen[cell]}" if times[cell] > 1 else ""
        j["commit"] = f"{a.commit} ({a.note}{run})"
        j["date"] = a.date
        by_file[results_file(j.get("gpu", ""))].append(j)
    for path, js in by_file.items():
        print(f"append_results: {len(js)} lines -> {path.relative_to(ROOT)}")
        if not a.dry_run:
            with path.open("a") as out:
                out.writelines(json.dumps(j) + "\n" for j in js)


if __name__ == "__main__":
    main()
