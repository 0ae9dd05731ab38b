#!/usr/bin/env python3
"""Maps an ncu SASS table (scripts/ncu_source.sh's sass_B*.csv) to CUDA source lines, with the
scoreboards each instruction sets and waits on, from a disassembly of the same build.

The device's ncu report names instructions by address only; `nvdisasm -g -hex` of a cubin compiled
here with the same flags (the CMake compile line plus -cubin -lineinfo) gives each address its
source line and its encoding, whose control bits hold the scoreboards (bits 105-125 of the 128-bit
instruction: stall 4, yield 1, write scoreboard 3, read scoreboard 3, wait mask 6). A cubin's
kernels appear one after another; --kernel picks one by a substring of its mangled name.

  nvdisasm -g -hex -c fast_sample.cubin > fast.sass
  scripts/sass_lines.py fast.sass sass_B512.csv --kernel DTypeE0 [--top 30] [--range 3200:3240]

--top prints the source lines with the most stall samples (and their executed warp instructions);
--range prints instructions lo:hi with samples, executed count, scoreboards and text;
--footprint prints what the profiled launch fetched: its distinct instructions executed, the
128-byte lines they lie in, and their count by source file (code from HBM costs about 8 cycles an
instruction more than from L2, perf-notes v3.20 and v3.44).
--jumps N prints the kernel's forward branches of N bytes or more (not BRA.DIV, the divergent
fallback), with their source lines; with the ncu table also the warp instructions executed at the
branch, at the instruction after it and at its target, which tell the branches that the profiled
rows took. A taken one lands on code that no warp may have fetched (perf-notes v3.47: three of them
after stage 2's last barrier cost about 0.5 us): to lay the common path out straight.

  scripts/sass_lines.py row_stage2.sass [sass_B1.csv] --kernel row_stage2_kernelILNS0_5CallsE0 --jumps 2048

--fetch N prints the instructions with N or more "no instruction" stall samples (a warp waiting on
the fetch of its next instruction) and the branches that land on each, with their spans: under
ncu, whose default flushes the caches before the profiled pass, the code fetched cold. A sample
counts a waiting warp, so a target that many warps reach together weighs more than one on the
critical path (perf-notes v3.48: the common row's far jumps, 14-23 samples at each target).

  scripts/sass_lines.py row_stage2.sass sass_B1.csv --kernel row_stage2_kernelILNS0_5CallsE0 --fetch 4

--spills prints each chosen kernel's local-memory stores and loads (STL / LDL) with their source
lines and the innermost loop around each (between a backward branch's target and the branch), so
that a frame which `sass_fingerprint.sh --sizes` shows growing can be told apart: spills outside
the loops cost little, one in the screen's step loop a load a step (perf-notes v3.58). No ncu table.

  scripts/sass_lines.py fast.sass --spills [--kernel DTypeE1]
"""
import argparse
import collections
import csv
import re


def section_name(line):
    """The kernel a disassembly line's section header names, or None (not a header, or a lambda's
    section, which is not a kernel)."""
    if not (line.startswith("//-----") and ".text." in line):
        return None
    name = line.split(".text.")[1].split()[0]
    return None if name.endswith("clEi") else name


def read_sass(path, kernel, labels=None):
    """[(source line, instruction text, write sb, read sb, wait mask)] of the chosen kernel; with
    `labels` (a dict), each branch label's instruction index into it."""
    lines = open(path).read().splitlines()
    out, on, cur, i = [], False, None, 0
    while i < len(lines):
        l = lines[i]
        if l.startswith("//-----") and ".text." in l:
            name = section_name(l)
            on = name is not None and kernel in name
        m = re.match(r"(\.L_x_\d+):", l)
        if on and m and labels is not None:
            labels[m.group(1)] = len(out)
        m = re.search(r'//## File "([^"]+)", line (\d+)', l)
        if on and m:
            cur = m.group(1).split("/")[-1] + ":" + m.group(2)
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);\s*/\* (0x[0-9a-f]+) \*/", l)
        if on and m and i + 1 < len(lines):
            hi = re.search(r"/\* (0x[0-9a-f]+) \*/", lines[i + 1])
            c = int(hi.group(1), 16) >> 41 if hi else 0
            out.append((cur or "?", m.group(2).strip(), (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 0x3F))
            i += 2
            continue
        i += 1
    return out


def read_csv_columns(path, *names):
    """Columns of the ncu table by their headers, one list per name (0 where a row has no value or
    ncu did not write the column)."""
    rows = list(csv.reader(open(path, newline="")))
    header = next(r for r in rows if "Warp Stall Sampling (All Samples)" in r)
    data = [r for r in rows[rows.index(header) + 1:] if len(r) == len(header)]
    cols = [header.index(n) if n in header else None for n in names]
    return [[float(r[c] or 0) if c is not None else 0.0 for r in data] for c in cols]


def read_csv(path):
    """(stall samples, warp instructions executed) of each instruction."""
    samples, executed = read_csv_columns(path, "Warp Stall Sampling (All Samples)", "Instructions Executed")
    return [(s, int(e)) for s, e in zip(samples, executed)]


def branch_target(text, labels):
    """The instruction index a branch lands on (not BRA.DIV, the divergent fallback), else None."""
    m = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", text)
    return labels.get(m.group(1)) if m and "BRA.DIV" not in text else None


def kernel_names(path):
    """The mangled names of a disassembly's kernels, in order."""
    return [name for name in map(section_name, open(path)) if name]


def print_spills(path, kernel):
    for name in kernel_names(path):
        if kernel not in name:
            continue
        labels = {}
        ins = read_sass(path, name, labels)
        loops = [(to, k) for k, (_, text, *_) in enumerate(ins)
                 if (to := branch_target(text, labels)) is not None and to <= k]
        spills = [k for k, (_, text, *_) in enumerate(ins) if re.match(r"(@!?U?P\w+ )?(STL|LDL)\b", text)]
        if not spills:
            continue
        print(name)
        for k in spills:
            spans = [16 * (hi - lo) for lo, hi in loops if lo <= k <= hi]
            where = f"in a loop of {min(spans)} bytes" if spans else "outside loops"
            print(f"  {16 * k:#8x}  {ins[k][1].split()[0]:7s} {ins[k][0]:32s} {where}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sass")
    ap.add_argument("csv", nargs="?")
    ap.add_argument("--kernel", default="")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--range", default="")
    ap.add_argument("--footprint", action="store_true")
    ap.add_argument("--jumps", type=int, default=0)
    ap.add_argument("--fetch", type=int, default=0)
    ap.add_argument("--spills", action="store_true")
    a = ap.parse_args()
    if a.spills:
        print_spills(a.sass, a.kernel)
        return
    if a.fetch:
        if not a.csv:
            ap.error("--fetch needs the ncu table")
        labels = {}
        ins = read_sass(a.sass, a.kernel, labels)
        (waits,) = read_csv_columns(a.csv, "stall_no_inst")
        into = collections.defaultdict(list)  # instruction -> the branches that land on it
        for k, (_, text, *_) in enumerate(ins):
            to = branch_target(text, labels)
            if to is not None:
                into[to].append(k)
        print(f"{int(sum(waits))} no-instruction samples; instructions with {a.fetch} or more:")
        for k, w in enumerate(waits[: len(ins)]):
            if w >= a.fetch:
                came = ", ".join(f"{16 * j:#x} {16 * (k - j):+d} [{ins[j][0]}]" for j in into.get(k, []))
                print(f"{16 * k:#8x} {int(w):4d}  {ins[k][1][:40]:40s} [{ins[k][0]}]  {'from ' + came if came else 'in sequence'}")
        return
    if a.jumps:
        labels = {}
        ins = read_sass(a.sass, a.kernel, labels)
        ran = [e for _, e in read_csv(a.csv)] if a.csv else None
        count = lambda k: f"{ran[k]:9d}" if ran and k < len(ran) else "        -"
        if ran:
            print(f"{'address':>8} {'span':>7}  {'branch':>9} {'next':>9} {'target':>9}  (warp instructions executed)")
        for k, (line, text, *_) in enumerate(ins):
            to = branch_target(text, labels)
            if to is not None:
                if 16 * (to - k) >= a.jumps:
                    runs = f"  {count(k)} {count(k + 1)} {count(to)}" if ran else ""
                    print(f"{16 * k:#8x} +{16 * (to - k):6d}{runs}  {text[:48]:48s}  [{line}]")
        return
    if not a.csv:
        ap.error("the ncu table is needed except with --jumps and --spills")
    ins, prof = read_sass(a.sass, a.kernel), read_csv(a.csv)
    if len(ins) != len(prof):
        print(f"warning: {len(ins)} instructions disassembled, {len(prof)} profiled: not the same build?")
    total = sum(s for s, _ in prof) or 1.0
    by_line, ex_line = collections.Counter(), collections.Counter()
    for (line, *_), (s, e) in zip(ins, prof):
        by_line[line] += s
        ex_line[line] += e
    print(f"{int(total)} samples, {sum(e for _, e in prof)} warp instructions executed")
    for line, s in by_line.most_common(a.top):
        print(f"{100 * s / total:5.1f}%  executed {ex_line[line]:10d}  {line}")
    if a.footprint:
        ran = [k for k, (_, e) in enumerate(prof[: len(ins)]) if e > 0]
        lines = {16 * k // 128 for k in ran}  # 16-byte instructions
        by_file = collections.Counter(ins[k][0].split(":")[0] for k in ran)
        print(f"footprint: {len(ran)} of {len(ins)} instructions executed, in {len(lines)} of "
              f"{(16 * len(ins) + 127) // 128} 128-byte lines ({16 * len(ran) / 1024:.1f} of {16 * len(ins) / 1024:.1f} KB)")
        for f, n in by_file.most_common():
            print(f"  {n:6d}  {f}")
    if a.range:
        lo, hi = (int(x) for x in a.range.split(":"))
        sb = lambda v: "-" if v == 7 else str(v)
        for k in range(lo, min(hi, len(ins), len(prof))):
            line, text, wb, rb, wait = ins[k]
            print(f"{k:6d} {int(prof[k][0]):6d} {prof[k][1]:9d}  wb={sb(wb)} rb={sb(rb)} wait={wait:06b}  {text[:60]}  [{line}]")


if __name__ == "__main__":
    main()
