"""Draws one benchmark run (time vs B per implementation, log scale) from a results file.

usage: plot.py RESULTS.jsonl OUT.png [--commit C]   (default: the last commit in the file)"""
import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

# ANCHORS.md (same GPU model and protocol, not measured in this run): FlashInfer, V=151936 fp32,
# drawn only for a run that has no FlashInfer line of its own.
ANCHOR_FLASHINFER = {
    "homog-peaked": {"flashinfer best: radix top-50 (ANCHORS.md)": [56, 57, 61, 67, 81, 143, 264],
                     "flashinfer per-row k (ANCHORS.md)": [91, 111, 140, 231, 319, 541, 1017]},
}
ANCHOR_B = [1, 8, 32, 64, 128, 256, 512]
TARGET = [6, 7, 11, 15, 25, 45, 85]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("png")
    ap.add_argument("--commit")
    ap.add_argument("--V", type=int, default=151936)
    ap.add_argument("--dtype", default="fp32")
    a = ap.parse_args()
    rows = [json.loads(line) for line in open(a.results) if line.strip()]
    commit = a.commit or rows[-1]["commit"]
    rows = [r for r in rows if r["commit"] == commit and r["suite"] == "sample" and r["mode"] == "graph"
            and r["V"] == a.V and r["dtype"] == a.dtype]
    gpus = sorted({r.get("gpu", "") for r in rows})
    on_h200 = any("H200" in g for g in gpus)
    cases = ["homog-peaked", "homog-flat", "hetero-peaked", "hetero-flat"]
    # One colour an implementation across the panels (the legend sits in the first panel only).
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colour = {impl: palette[i % len(palette)] for i, impl in enumerate(sorted({r["impl"] for r in rows}))}
    fig, axes = plt.subplots(1, 4, figsize=(20, 5), sharey=True)
    for ax, case in zip(axes, cases):
        impls = sorted({r["impl"] for r in rows if r["case"] == case})
        for impl in impls:
            pts = sorted((r["B"], r["us"]) for r in rows if r["case"] == case and r["impl"] == impl)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", color=colour[impl], label=impl)
        measured_fi = any(i.startswith("flashinfer") for i in impls)
        # ANCHORS.md measured on an H200: drawn beside an H200 run only.
        anchors = ANCHOR_FLASHINFER.get(case, {}) if on_h200 else {}
        for label, ys in anchors.items():
            # The radix top-50 route (FlashInfer's fastest) is not among the measured ones: its
            # anchor stays drawn beside them.
            if measured_fi and "best" not in label:
                continue
            ax.plot(ANCHOR_B, ys, linestyle=":", marker="x", label=label)
        ax.plot(ANCHOR_B, TARGET, linestyle="--", color="k",
                label="target (ANCHORS.md: heterogeneous batches, H200)")
        # One floor a B (sonic_bench and baselines.py each measure the read bandwidth: the last wins).
        floor = sorted({r["B"]: r["floor_us"] for r in rows if r["case"] == case}.items())
        if floor:
            ax.plot([p[0] for p in floor], [p[1] for p in floor], color="gray", label="one-read floor")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_title(f"{case}, V={a.V}, {a.dtype}, graph")
        ax.set_xlabel("B (rows)")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("µs per call")
    axes[0].legend(fontsize=7)
    fig.suptitle(f"sonic vs baselines, commit {commit} ({', '.join(gpus)})")
    fig.tight_layout()
    fig.savefig(a.png, dpi=110)
    print(f"plot: {a.png} ({len(rows)} points, commit {commit})")


if __name__ == "__main__":
    main()
