"""PyTorch baselines of BENCH.md, measured in the same run as sonic_bench.

vLLM-style sampling written from its documented semantics: temperature, sort the vocabulary,
top-k and top-p masks on the sorted logits, softmax, then the exponential race argmax(p / E).
Also torch.argmax (greedy) and torch.topk(k=128). FlashInfer is timed when it imports.
Appends JSON lines to --out. Timing: CUDA-graph replay of one captured call per rotating buffer
(mean per call) and eager launches (median of 100 after 25 warm-ups)."""
import argparse
import json
import math
import statistics

import torch

ROTATE_BYTES = 256 << 20
READ_BW = 4.33e12


def make_logits(B, V, dtype, peaked, gen):
    x = torch.randn(B, V, device="cuda", generator=gen)
    if peaked:
        x *= 3.0
        idx = torch.randint(0, V, (B, 5), device="cuda", generator=gen)
        x.scatter_add_(1, idx, torch.full((B, 5), 10.0, device="cuda"))
    return x.to(dtype)


def vllm_style(logits, temp, k, p):
    x = logits.float() / temp[:, None]
    srt, idx = x.sort(dim=-1, descending=False)
    V = srt.shape[1]
    kth = srt.gather(1, (V - k).long().clamp(0, V - 1)[:, None])  # k-th largest, ascending layout
    srt = srt.masked_fill(srt < kth, float("-inf"))
    cum = srt.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1.0 - p)[:, None]
    drop[:, -1] = False
    srt = srt.masked_fill(drop, float("-inf"))
    x = torch.empty_like(srt).scatter_(1, idx, srt)
    probs = x.softmax(dim=-1)
    q = torch.empty_like(probs).exponential_()
    return probs.div_(q).argmax(dim=-1)


def time_fn(fn, bufs, graph_reps=3):
    # Graph: one captured call per buffer, replayed.
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for b in bufs[:3]:
            fn(b)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        for b in bufs:
            fn(b)
    g.replay()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(graph_reps):
        g.replay()
    e1.record()
    torch.cuda.synchronize()
    graph_us = 1000.0 * e0.elapsed_time(e1) / (graph_reps * len(bufs))
    del g
    times = []
    for i in range(125):
        e0.record()
        fn(bufs[i % len(bufs)])
        e1.record()
        torch.cuda.synchronize()
        if i >= 25:
            times.append(1000.0 * e0.elapsed_time(e1))
    return graph_us, statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench.jsonl")
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--date", default="unknown")
    ap.add_argument("--B", default="1,8,32,64,128,256,512")
    ap.add_argument("--V", default="151936")
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--case", default="homog-peaked,homog-flat")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name(0)
    try:
        import flashinfer  # noqa: F401
        fi = flashinfer
    except Exception as e:  # reported, not hidden
        fi = None
        print(f"flashinfer: not importable here ({type(e).__name__}: {e}); its figures come from ANCHORS.md")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    with open(a.out, "a") as out:
        def emit(impl, case, B, V, dt, mode, us, floor_us, suite="sample"):
            out.write(json.dumps({"suite": suite, "impl": impl, "case": case, "B": B, "V": V, "dtype": dt,
                                  "mode": mode, "us": round(us, 2), "floor_us": round(floor_us, 2), "gpu": gpu,
                                  "commit": a.commit, "date": a.date}) + "\n")
            out.flush()
        for V in map(int, a.V.split(",")):
            for dt in a.dtype.split(","):
                tdt = torch.float32 if dt == "fp32" else torch.bfloat16
                for case in a.case.split(","):
                    peaked = "peaked" in case
                    for B in map(int, a.B.split(",")):
                        nbytes = B * V * (4 if dt == "fp32" else 2)
                        n = max(2, math.ceil(ROTATE_BYTES / nbytes))
                        n = min(n, 64)  # capture size; the rest of the rotation comes from replays
                        bufs = [make_logits(B, V, tdt, peaked, gen) for _ in range(n)]
                        temp = torch.full((B,), 0.7, device="cuda")
                        k = torch.full((B,), 50, device="cuda", dtype=torch.int32)
                        p = torch.full((B,), 0.9, device="cuda")
                        floor_us = 1e6 * nbytes / READ_BW
                        # check: tokens inside the top-50 of each row
                        tok = vllm_style(bufs[0], temp, k, p)
                        top = bufs[0].float().topk(50, dim=-1).indices
                        ok = bool((top == tok[:, None]).any(dim=-1).all())
                        if not ok:
                            print(f"torch vllm-style check FAILED at {case} B={B}")
                            continue
                        g_us, e_us = time_fn(lambda b: vllm_style(b, temp, k, p), bufs)
                        emit("torch-vllm-style", case, B, V, dt, "graph", g_us, floor_us)
                        emit("torch-vllm-style", case, B, V, dt, "eager", e_us, floor_us)
                        ga, ea = time_fn(lambda b: b.argmax(dim=-1), bufs)
                        emit("torch-argmax", case, B, V, dt, "graph", ga, floor_us)
                        gt, et = time_fn(lambda b: b.topk(128, dim=-1), bufs)
                        emit("torch-topk128", case, B, V, dt, "graph", gt, floor_us, suite="topk")
                        print(f"{case:14s} {dt:5s} {V:7d} {B:4d}  vllm-style graph {g_us:9.1f} eager {e_us:9.1f}"
                              f"  argmax {ga:7.1f}  topk128 {gt:8.1f}  floor {floor_us:6.1f}")
                        del bufs
                        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
