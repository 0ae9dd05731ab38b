#!/usr/bin/env python3
"""Where a kernel's warps stall, region by region, from ncu's SASS source page (ncu --page source
--csv --print-source sass). A region is the straight run of instructions between two block
barriers (BAR) or exits, so that a phase of a kernel whose phases end at __syncthreads shows as one
row: its share of all stall samples, its top stall reasons and the instructions it executed by
kind. The per-CUDA-line table misses code inlined from headers; the SASS page holds every
instruction. In a block where one warp works while the others wait at a barrier, the waiting
warps' samples land on the barrier that ends the region, so a region's share is its share of time.

    scripts/ncu_regions.py sass.csv [min_share_percent] [window]

A kernel whose main loop has no block barrier (the fast kernel's stage 1) is one long region: a
window of N instructions splits every region into runs of at most N.
"""
import csv
import sys

COUNT_OPS = ("LDG", "STG", "LDS", "STS", "LDGSTS", "ATOMS", "ATOMG", "RED", "SHFL", "BAR", "MUFU",
             "DFMA", "DMUL", "DADD", "REDUX", "CALL")


def load(path):
    header, rows = None, []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if "Warp Stall Sampling (All Samples)" in rec:
                header = rec
            elif header and len(rec) == len(header):
                rows.append(dict(zip(header, rec)))
    return header, rows


def opcode(source):
    words = source.split()
    if not words:
        return ""
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def number(text):
    try:
        return float(text.replace(",", "") or 0)
    except ValueError:
        return 0.0


def main(path, min_share, window):
    header, rows = load(path)
    if not header:
        print(f"{path}: no stall-sampling column")
        return
    samples = "Warp Stall Sampling (All Samples)"
    reasons = [c for c in header if c.startswith("stall_") and "Not Issued" not in c]
    executed = "Instructions Executed"
    total = sum(number(r[samples]) for r in rows) or 1.0
    by_reason = {c: sum(number(r[c]) for r in rows) for c in reasons}
    print(f"-- {path.split('/')[-1]}: {len(rows)} instructions, "
          f"{sum(number(r[executed]) > 0 for r in rows)} executed, {int(total)} samples")
    print("   " + ", ".join(f"{c[6:]} {100 * v / total:.1f}%"
                           for c, v in sorted(by_reason.items(), key=lambda kv: -kv[1])[:8]))
    regions, start = [], 0
    for i, r in enumerate(rows):
        op = opcode(r["Source"])
        if op in ("BAR", "EXIT") or i == len(rows) - 1 or (window and i - start + 1 == window):
            regions.append((start, i))
            start = i + 1
    for first, last in regions:
        part = rows[first:last + 1]
        share = 100 * sum(number(r[samples]) for r in part) / total
        if share < min_share:
            continue
        stalls = {}
        ops = {}
        for r in part:
            for c in reasons:
                stalls[c[6:]] = stalls.get(c[6:], 0) + number(r[c])
            op = opcode(r["Source"])
            if op in COUNT_OPS:
                ops[op] = ops.get(op, 0) + number(r[executed])
        top = ", ".join(f"{k} {int(v)}" for k, v in sorted(stalls.items(), key=lambda kv: -kv[1])[:3] if v)
        mix = " ".join(f"{k}:{int(v)}" for k, v in sorted(ops.items(), key=lambda kv: -kv[1]) if v)
        print(f"{share:5.1f}%  [{first:5d}-{last:5d}] {rows[first]['Address']}  {top}  | {mix}")


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 1.0, int(sys.argv[3]) if len(sys.argv) > 3 else 0)
