#!/usr/bin/env python3
"""Where each kernel's spills are: every local-memory store and load (STL / LDL) of a disassembly,
with its source line and whether it lies inside a loop (between a backward branch's target and the
branch; the innermost such span is printed, so a fast kernel's step loop shows apart from its loop
over work items). A frame that `sass_fingerprint.sh --sizes` shows growing costs little when its
spills sit outside the loops, and a load per step when one sits in the screen's loop (perf-notes
v3.58). No GPU needed:

  nvcc <the CMake line's flags> -cubin -lineinfo -x cu src/cuda/fast_sample.cu -o fast.cubin
  nvdisasm -g -hex -c fast.cubin > fast.sass
  scripts/sass_spills.py fast.sass [--kernel SUBSTRING]
"""
import argparse
import re


def kernels(path):
    """(mangled name, [(address, instruction, source file:line)], {label: address}) per kernel."""
    name, instrs, labels, pending, src = None, [], {}, [], "?"
    for line in open(path):
        m = re.match(r"\s*\.text\.(\S+):", line)
        if m:
            if name:
                yield name, instrs, labels
            name, instrs, labels, pending, src = m.group(1), [], {}, [], "?"
            continue
        if name is None:
            continue
        m = re.match(r"\s*(\.L_x_\d+):", line)
        if m:
            pending.append(m.group(1))
            continue
        m = re.search(r'//## File "([^"]+)", line (\d+)', line)
        if m:
            src = f"{m.group(1).split('/')[-1]}:{m.group(2)}"
            continue
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            address = int(m.group(1), 16)
            for label in pending:
                labels[label] = address
            pending = []
            instrs.append((address, m.group(2), src))
    if name:
        yield name, instrs, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass")
    ap.add_argument("--kernel", default="", help="only kernels whose mangled name contains this")
    args = ap.parse_args()
    for name, instrs, labels in kernels(args.sass):
        if args.kernel not in name or name.endswith("clEi"):  # lambdas' sections are not kernels
            continue
        loops = []
        for address, text, _ in instrs:
            m = re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", text)
            if m and labels.get(m.group(1), address + 1) <= address:
                loops.append((labels[m.group(1)], address))
        spills = [(a, t, s) for a, t, s in instrs if re.search(r"\b(STL|LDL)\b", t)]
        if not spills:
            continue
        print(name)
        for address, text, src in spills:
            spans = [hi - lo for lo, hi in loops if lo <= address <= hi]
            where = f"in a loop of {min(spans)} bytes" if spans else "outside loops"
            print(f"  {address:#8x}  {text.split()[0]:7s} {src:32s} {where}")


if __name__ == "__main__":
    main()
