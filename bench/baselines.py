"""PyTorch baselines of BENCH.md, measured in the same run as sonic_bench.

vLLM-style sampling written from its documented semantics: temperature, sort the vocabulary,
top-k and top-p masks on the sorted logits, softmax, then the exponential race argmax(p / E).
Also torch.argmax (greedy) and torch.topk(k=128). FlashInfer's sampling routes (ANCHORS.md: the
top-k mask, softmax and top-p route vLLM takes, the joint rejection kernel, its radix top-k, and
chain_speculative_sampling after the softmax its inputs need) are timed when it imports
(scripts/flashinfer_wheels.sh fetches the wheels that carry it to the GPU machine).
Suite "verify" (--suite verify): a rejection sampler written from vLLM's documented semantics
(target probabilities after temperature / top-k / top-p, accept when u * q(d) <= p(d), recovered
token from max(p - q, 0), bonus token from the last row), for all-greedy, all-random (one-hot q) and
dense-q batches.
Appends JSON lines to --out. Timing: CUDA-graph replay of one captured call per rotating buffer
(mean per call) and eager launches (median of 100 after 25 warm-ups)."""
import argparse
import json
import math
import statistics

import torch

ROTATE_BYTES = 256 << 20
H200_READ_BW = 4.33e12  # ANCHORS.md's read-only reduction
READ_BW = H200_READ_BW  # set in main(): this GPU's (read_bandwidth)


def read_bandwidth(gpu):
    """The one-read floor's bandwidth: ANCHORS.md's figure on an H200 (BENCH.md), otherwise this
    GPU's own read-only reduction over 1 GiB (best of five), as sonic_bench measures it."""
    if "H200" in gpu:
        return H200_READ_BW
    x = torch.zeros(1 << 28, device="cuda")
    best = float("inf")
    for it in range(7):
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        x.sum()
        t1.record()
        t1.synchronize()
        if it >= 2:
            best = min(best, t0.elapsed_time(t1))
    bw = x.numel() * 4 / (best * 1e-3)
    print(f"read bandwidth: {gpu} reads at {bw * 1e-12:.2f} TB/s (the floors use it)")
    return bw


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


def truncated_probs(logits, temp, k, p):
    """vLLM's target probabilities: temperature, top-k and top-p masks on the sorted logits, softmax."""
    x = logits.float() / temp[:, None]
    srt, idx = x.sort(dim=-1, descending=False)
    V = srt.shape[1]
    kth = srt.gather(1, (V - k).long().clamp(0, V - 1)[:, None])
    srt = srt.masked_fill(srt < kth, float("-inf"))
    cum = srt.softmax(dim=-1).cumsum(dim=-1)
    drop = cum <= (1.0 - p)[:, None]
    drop[:, -1] = False
    srt = srt.masked_fill(drop, float("-inf"))
    return torch.empty_like(srt).scatter_(1, idx, srt).softmax(dim=-1)


# FlashInfer draws from the generator's state unless given a seed and an offset; reading that state
# is not allowed inside a CUDA graph capture, so every timed call passes fixed ones.
FI_RNG = {"seed": 1234, "offset": 0}


def flashinfer_sample_routes(fi, temp, k, p):
    """FlashInfer's top-k/top-p sampling from logits with per-row k and p tensors (fp32 in, as it
    requires): the top-k mask, softmax and top-p kernel (the route vLLM takes), and the joint
    rejection kernel over softmax(logits)."""
    def masked(b):
        return fi.sampling.top_k_top_p_sampling_from_logits(b.float() / temp[:, None], k, p, **FI_RNG)

    def joint(b):
        return fi.sampling.top_k_top_p_sampling_from_logits(b.float() / temp[:, None], k, p,
                                                             filter_apply_order="joint", **FI_RNG)
    return {"flashinfer-topk-mask-topp": masked, "flashinfer-joint": joint}


def flashinfer_chain(fi, B, n, V, temp, drafts, q):
    """FlashInfer's chain_speculative_sampling with the softmax its inputs need (temperature only: it
    has no top-k/top-p, penalties or greedy mode). q None: one-hot drafts."""
    d32 = drafts.to(torch.int32)
    dq = q if q is not None else torch.zeros(B, n, V, device="cuda").scatter_(2, drafts[..., None], 1.0)

    def chain(b):
        target = torch.softmax(b.view(B, n + 1, V) / temp.view(B, n + 1, 1), dim=-1)
        return fi.sampling.chain_speculative_sampling(dq, d32, target, **FI_RNG)[0]
    return chain


def time_or_report(name, fn, bufs):
    """time_fn, or None with the reason printed (a baseline that fails is reported, never hidden)."""
    try:
        return time_fn(fn, bufs)
    except Exception as e:  # noqa: BLE001
        print(f"{name}: not timed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})")
        torch.cuda.synchronize()
        return None


def rejection_sample(logits, drafts, q, temp, k, p, greedy):
    """vLLM-style rejection sampling of B requests with n drafts each. logits [B (n + 1), V] (each
    request's n target rows, then its bonus row), drafts [B, n] int64, q [B, n, V] or None (one-hot).
    Returns [B, n + 1] int64 with -1 after the emitted tokens."""
    B, n = drafts.shape
    V = logits.shape[1]
    if greedy:
        target = logits.view(B, n + 1, V).argmax(dim=-1)
        match = (target[:, :n] == drafts).int().cumprod(dim=1)
        acc = match.sum(dim=1)
        emitted = target.gather(1, acc[:, None])
    else:
        probs = truncated_probs(logits, temp, k, p).view(B, n + 1, V)
        pd = probs[:, :n].gather(2, drafts[..., None]).squeeze(-1)
        qd = q.gather(2, drafts[..., None]).squeeze(-1) if q is not None else torch.ones_like(pd)
        u = torch.rand(B, n, device=logits.device)
        acc = (u * qd <= pd).int().cumprod(dim=1).sum(dim=1)
        qq = q if q is not None else torch.zeros_like(probs[:, :n]).scatter_(2, drafts[..., None], 1.0)
        resid = (probs[:, :n] - qq).clamp_min_(0.0)
        resid = torch.cat([resid, probs[:, n:]], dim=1)  # the bonus row samples p_n itself
        race = torch.empty_like(resid).exponential_()
        pick = resid.div_(race).argmax(dim=-1)  # [B, n + 1]
        emitted = pick.gather(1, acc[:, None])
    out = torch.full((B, n + 1), -1, dtype=torch.int64, device=logits.device)
    pos = torch.arange(n + 1, device=logits.device)[None, :]
    out = torch.where(pos < acc[:, None], torch.cat([drafts, drafts[:, :1]], dim=1), out)
    return out.scatter_(1, acc[:, None], emitted)


def verify_suite(a, emit, gen, fi):
    for V in map(int, a.V.split(",")):
        named = [c for c in a.case.split(",") if c in ("all-greedy", "all-random", "dense-q")]
        for case in named or ("all-greedy", "all-random", "dense-q"):
            for n in map(int, a.drafts.split(",")):
                for B in map(int, a.B.split(",")):
                    rows = B * (n + 1)
                    nbytes = rows * V * 4
                    nb = min(64, max(2, math.ceil(ROTATE_BYTES / nbytes)))
                    bufs = [make_logits(rows, V, torch.float32, True, gen) for _ in range(nb)]
                    drafts = torch.randint(0, V, (B, n), device="cuda", generator=gen)
                    q = None
                    if case == "dense-q":
                        q = torch.full((B, n, V), 1.0 / V, device="cuda")
                    temp = torch.full((rows,), 0.7, device="cuda")
                    k = torch.full((rows,), 50, device="cuda", dtype=torch.int32)
                    p = torch.full((rows,), 0.9, device="cuda")
                    greedy = case == "all-greedy"
                    floor_us = 1e6 * nbytes / READ_BW
                    if not a.no_torch:
                        out = rejection_sample(bufs[0], drafts, q, temp, k, p, greedy)
                        if not bool(((out >= -1) & (out < V)).all()):
                            print(f"torch rejection check FAILED at {case} n={n} B={B}")
                            continue
                        g_us, e_us = time_fn(lambda b: rejection_sample(b, drafts, q, temp, k, p, greedy), bufs)
                        for mode, us in (("graph", g_us), ("eager", e_us)):
                            emit("torch-rejection-vllm-style", case, B, V, "fp32", mode, us, floor_us, suite="verify",
                                 extra={"drafts": n, "rows": rows})
                        print(f"verify {case:10s} n={n} B={B:4d} torch rejection graph {g_us:9.1f} eager {e_us:9.1f}")
                    if fi is not None and not greedy:
                        chain = flashinfer_chain(fi, B, n, V, temp, drafts, q)
                        fo = chain(bufs[0])
                        if not bool(((fo >= -1) & (fo < V)).all()):
                            print(f"flashinfer chain check FAILED at {case} n={n} B={B}")
                        else:
                            r = time_or_report("flashinfer-chain", chain, bufs)
                            if r is not None:
                                for mode, us in (("graph", r[0]), ("eager", r[1])):
                                    emit("flashinfer-softmax-chain", case, B, V, "fp32", mode, us, floor_us,
                                         suite="verify", extra={"drafts": n, "rows": rows})
                                print(f"verify {case:10s} n={n} B={B:4d} flashinfer softmax+chain graph {r[0]:9.1f} "
                                      f"eager {r[1]:9.1f}")
                        del chain
                    del bufs
                    torch.cuda.empty_cache()


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
    ap.add_argument("--suite", default="sample", choices=("sample", "verify"))
    ap.add_argument("--drafts", default="1,3,5,7")
    ap.add_argument("--no-torch", action="store_true",
                    help="verify suite: FlashInfer alone (the PyTorch rejection sampler takes ~20 ms a call at B = 256)")
    a = ap.parse_args()
    gpu = torch.cuda.get_device_name(0)
    global READ_BW
    READ_BW = read_bandwidth(gpu)
    try:
        import flashinfer  # noqa: F401
        fi = flashinfer
    except Exception as e:  # reported, not hidden
        fi = None
        print(f"flashinfer: not importable here ({type(e).__name__}: {e}); its figures come from ANCHORS.md")
    gen = torch.Generator(device="cuda")
    gen.manual_seed(7)
    with open(a.out, "a") as out:
        def emit(impl, case, B, V, dt, mode, us, floor_us, suite="sample", extra=None):
            line = {"suite": suite, "impl": impl, "case": case, "B": B, "V": V, "dtype": dt,
                    "mode": mode, "us": round(us, 2), "floor_us": round(floor_us, 2), "gpu": gpu,
                    "commit": a.commit, "date": a.date, "torch": torch.__version__}
            if fi is not None and impl.startswith("flashinfer"):
                line["flashinfer"] = getattr(fi, "__version__", "unknown")
            line.update(extra or {})
            out.write(json.dumps(line) + "\n")
            out.flush()
        if a.suite == "verify":
            verify_suite(a, emit, gen, fi)
            return
        for V in map(int, a.V.split(",")):
            for dt in a.dtype.split(","):
                tdt = torch.float32 if dt == "fp32" else torch.bfloat16
                for case in a.case.split(","):
                    peaked = "peaked" in case
                    for B in map(int, a.B.split(",")):
                        nbytes = B * V * (4 if dt == "fp32" else 2)
                        n = max(2, math.ceil(ROTATE_BYTES / nbytes))
                        # One captured call a buffer; 256 MiB in all (BENCH.md), at most 512 calls
                        # (once 64, which left B = 1 fp32's 39 MB inside the L2).
                        n = min(n, 512)
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
                        if fi is not None:
                            for name, fn in flashinfer_sample_routes(fi, temp, k, p).items():
                                ftok = fn(bufs[0]).long()
                                if not bool((top == ftok[:, None]).any(dim=-1).all()):
                                    print(f"{name} check FAILED at {case} {dt} B={B}")
                                    continue
                                r = time_or_report(name, fn, bufs)
                                if r is not None:
                                    emit(name, case, B, V, dt, "graph", r[0], floor_us)
                                    emit(name, case, B, V, dt, "eager", r[1], floor_us)
                                    print(f"{case:14s} {dt:5s} {V:7d} {B:4d}  {name} graph {r[0]:9.1f} eager {r[1]:9.1f}")
                            r = time_or_report("flashinfer-topk128", lambda b: fi.top_k(b, 128), bufs)
                            if r is not None:
                                emit("flashinfer-topk128", case, B, V, dt, "graph", r[0], floor_us, suite="topk")
                                print(f"{case:14s} {dt:5s} {V:7d} {B:4d}  flashinfer top_k(128) graph {r[0]:9.1f}")
                        del bufs
                        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
