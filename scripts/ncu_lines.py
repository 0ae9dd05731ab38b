#!/usr/bin/env python3
"""Prints the rows of an ncu source-page CSV (ncu --page source --csv) with the most sampled warp
stalls: the top N rows, their share of all samples, and the total per file."""
import csv
import sys


def main(path: str, top: int) -> None:
    with open(path, newline="") as f:
        text = f.read()
    # ncu may print several files' tables one after another, each with its own header.
    rows, header = [], None
    for rec in csv.reader(text.splitlines()):
        if not rec:
            continue
        if any("Warp Stall Sampling (All" in c for c in rec):
            header = rec
            continue
        if header and len(rec) == len(header):
            rows.append(dict(zip(header, rec)))
        elif rec[0].startswith("File") or rec[0].startswith("#"):
            rows.append({"__file__": ",".join(rec)})
    if not header:
        print(f"{path}: no stall-sampling column; first lines:\n" + "\n".join(text.splitlines()[:8]))
        return
    col = next(c for c in header if "Warp Stall Sampling (All" in c)
    line_col = next((c for c in header if c in ("#", "Line", "Address")), header[0])
    src_col = next((c for c in header if c == "Source"), header[-1])
    current, per_file, ranked = "?", {}, []
    for r in rows:
        if "__file__" in r:
            current = r["__file__"]
            continue
        try:
            n = float(r[col].replace(",", "") or 0)
        except ValueError:
            continue
        per_file[current] = per_file.get(current, 0) + n
        ranked.append((n, current.split("/")[-1][:40], r.get(line_col, ""), r.get(src_col, "").strip()[:110]))
    total = sum(n for n, *_ in ranked) or 1
    print(f"-- {path.split('/')[-1]}: {int(total)} samples")
    for name, n in sorted(per_file.items(), key=lambda kv: -kv[1])[:8]:
        print(f"   {100 * n / total:5.1f}%  {name[-70:]}")
    for n, fname, line, src in sorted(ranked, reverse=True)[:top]:
        print(f"{100 * n / total:5.1f}% {fname}:{line} {src}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40)
