#!/usr/bin/env python3
"""Where the fast kernel's blocks end, SM by SM, from scripts/timeline.sh's raw dumps
($OUT/timeline_raw_NAME.tsv.gz: label, call, block, SM, then each mark of src/cuda/timeline.cuh in ns
after the call's first block started, -1 where not reached).

For each label: the blocks' chunk-end spread (p10 / p50 / p90 / last), how much of it is the SM a
block ran on (each SM's latest chunk end minus the call's median, averaged over the calls, and the
correlation of that between even and odd calls: near 1 when some SMs are slower at every call), the
SMs that end first and last, and the chunk ends by a block's arrival rank on its SM.

  scripts/timeline_by_sm.py timeline_raw_main.tsv.gz [--label homog-peaked] [--by-id]
"""
import argparse
import collections
import gzip
import statistics

MARK_ENTRY, MARK_CHUNK_DONE = 0, 3  # timeline.cuh's kMarkEntry, kMarkChunkDone
FIRST_MARK = 4                      # the marks' first column


def read(path):
    calls = collections.defaultdict(list)  # (label, call) -> [(block, sm, marks)]
    with gzip.open(path, "rt") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            marks = [int(x) for x in cols[FIRST_MARK:]]
            calls[(cols[0], int(cols[1]))].append((int(cols[2]), int(cols[3]), marks))
    return calls


def correlation(a, b):
    ma, mb = statistics.mean(a), statistics.mean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    va = sum((x - ma) ** 2 for x in a)
    vb = sum((y - mb) ** 2 for y in b)
    return cov / (va * vb) ** 0.5 if va > 0 and vb > 0 else float("nan")


def report(label, calls, by_id):
    late = collections.defaultdict(dict)   # sm -> call -> its latest chunk end minus the call's median
    by_rank = collections.defaultdict(list)  # (blocks on the SM, arrival rank) -> chunk ends
    spreads = []
    for call, blocks in sorted(calls.items()):
        done = [(b, sm, m) for b, sm, m in blocks if m[MARK_CHUNK_DONE] >= 0 and sm >= 0]
        if not done:
            continue
        ends = sorted(m[MARK_CHUNK_DONE] / 1e3 for _, _, m in done)
        med = ends[len(ends) // 2]
        spreads.append((ends[len(ends) // 10], med, ends[len(ends) * 9 // 10], ends[-1]))
        per_sm = collections.defaultdict(list)
        for _, sm, m in done:
            per_sm[sm].append((m[MARK_ENTRY], m[MARK_CHUNK_DONE] / 1e3))
        for sm, lst in per_sm.items():
            late[sm][call] = max(e for _, e in lst) - med
            for rank, (_, e) in enumerate(sorted(lst)):
                by_rank[(len(lst), rank)].append(e)
    if not spreads:
        return
    print(f"{label}: {len(spreads)} calls")
    p = [statistics.median(s[i] for s in spreads) for i in range(4)]
    print(f"  chunk ends (median over the calls): p10 +{p[0]:.1f}, p50 +{p[1]:.1f}, p90 +{p[2]:.1f}, last +{p[3]:.1f} us")
    sms = sorted(late)
    calls_all = sorted({c for v in late.values() for c in v})
    even = [statistics.mean(late[s][c] for c in calls_all if c % 2 == 0 and c in late[s]) for s in sms]
    odd = [statistics.mean(late[s][c] for c in calls_all if c % 2 == 1 and c in late[s]) for s in sms]
    print(f"  an SM's latest end minus the median, correlation between even and odd calls: {correlation(even, odd):.2f}")
    mean_late = sorted((statistics.mean(late[s].values()), s) for s in sms)
    print("  first SMs:", ", ".join(f"{s} {m:+.1f}" for m, s in mean_late[:8]))
    print("  last SMs: ", ", ".join(f"{s} {m:+.1f}" for m, s in mean_late[-8:]))
    if by_id:
        print("  by SM id:", " ".join(f"{s}:{m:+.0f}" for m, s in sorted(mean_late, key=lambda x: x[1])))
    for (n, rank), ends in sorted(by_rank.items()):
        print(f"  SMs with {n} blocks, arrival rank {rank}: chunk end mean +{statistics.mean(ends):.1f} us ({len(ends)} blocks)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("raw", help="a timeline_raw_*.tsv.gz")
    ap.add_argument("--label", default="", help="only labels containing this")
    ap.add_argument("--by-id", action="store_true", help="print every SM's mean offset")
    a = ap.parse_args()
    by_label = collections.defaultdict(dict)
    for (label, call), blocks in read(a.raw).items():
        if a.label in label:
            by_label[label][call] = blocks
    for label in sorted(by_label):
        report(label, by_label[label], a.by_id)


if __name__ == "__main__":
    main()
