"""sonic.torch_ops: the calls as torch custom ops. They give the Sampler's results, pass
torch.library.opcheck (schema, fake tensors, dispatch), trace under torch.compile with fullgraph,
and (on a GPU) run inside torch.cuda.graph capture: a captured decode step replays like eager calls.
Needs torch; the GPU machine runs these (CI has no torch)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sonic  # noqa: E402
import sonic.torch_ops as ops  # noqa: E402

V = 300


def _pair(backend="cpu", rows=4, **params):
    """Two samplers with the same requests: one driven by the ops, one by the Python API."""
    out = []
    for _ in range(2):
        s = sonic.Sampler(V, max_slots=rows, max_rows=3 * rows, max_drafts=2, backend=backend)
        for r in range(rows):
            s.admit(r, temperature=[0.0, 0.7, 1.0, 1.3][r % 4], top_k=[0, 20, 0, 5][r % 4], top_p=0.9,
                    seed=r + 11, **params)
        out.append(s)
    return out


def _logits(rows, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, V, generator=g) * 3).to(device)


def test_sample_op_matches_the_sampler():
    a, b = _pair()
    h = ops.register(a)
    try:
        for step in range(3):
            x = _logits(4, seed=step)
            tokens, status, lp = torch.ops.sonic.sample(ops.state(h), x, h, None, None, None, "processed", True, True)
            ref = b.sample(x, logprobs="processed")
            assert torch.equal(tokens, ref.tokens) and torch.equal(status, ref.status)
            assert torch.equal(lp, ref.logprob)
    finally:
        ops.unregister(h)


def test_top_k_op_matches_torch_topk_on_distinct_values():
    a, _ = _pair()
    h = ops.register(a)
    try:
        x = _logits(4)
        vals, ids = torch.ops.sonic.top_k(ops.state(h), x, h, 7)
        want = torch.topk(x, 7, dim=-1)
        assert torch.equal(ids.long(), want.indices) and torch.equal(vals, want.values)
    finally:
        ops.unregister(h)


def test_verify_op_matches_the_sampler():
    a, b = _pair()
    h = ops.register(a)
    try:
        cu = torch.tensor([0, 3, 4, 6, 7], dtype=torch.int32)  # 2, 0, 1, 0 drafts
        drafts = torch.tensor([5, 9, 17], dtype=torch.int32)
        x = _logits(7, seed=4)
        tokens, acc, status = torch.ops.sonic.verify(ops.state(h), x, h, cu, drafts, None, None, None, True, True)
        ref = b.verify(x, cu, drafts)
        assert torch.equal(tokens, ref.tokens) and torch.equal(acc, ref.num_accepted)
        assert torch.equal(status, ref.status)
    finally:
        ops.unregister(h)


def test_opcheck():
    a, _ = _pair()
    h = ops.register(a)
    try:
        x = _logits(4)
        # advance_step/append_to_history off: every run of the op gives the same answer.
        torch.library.opcheck(torch.ops.sonic.sample.default,
                              (ops.state(h), x, h, None, None, None, "raw", False, False))
        torch.library.opcheck(torch.ops.sonic.top_k.default, (ops.state(h), x, h, 5))
    finally:
        ops.unregister(h)


def test_compiled_step_matches_eager():
    a, b = _pair()
    ha, hb = ops.register(a), ops.register(b)
    w = torch.randn(16, V, generator=torch.Generator().manual_seed(3))

    def step(hidden, h):
        logits = hidden @ w
        tokens, _, _ = torch.ops.sonic.sample(ops.state(h), logits, h, None, None, None, "", True, True)
        return tokens

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    try:
        for i in range(3):
            hidden = torch.randn(4, 16, generator=torch.Generator().manual_seed(10 + i))
            assert torch.equal(compiled(hidden, ha), step(hidden, hb))
        assert a.step(0) == b.step(0) == 3  # every compiled call ran, none was merged or dropped
    finally:
        ops.unregister(ha)
        ops.unregister(hb)


@pytest.mark.skipif(not (torch.cuda.is_available() and sonic.cuda_available()), reason="needs a GPU")
def test_cuda_graph_capture_replays_like_eager():
    a, b = _pair(backend="cuda")
    ha, hb = ops.register(a), ops.register(b)
    dev = torch.device("cuda")
    w = torch.randn(16, V, device=dev)
    hidden = torch.zeros(4, 16, device=dev)
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up outside the capture (allocator, lazy init)
            torch.ops.sonic.sample(ops.state(ha), hidden @ w, ha, None, None, None, "", False, False)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            tokens, _, _ = torch.ops.sonic.sample(ops.state(ha), hidden @ w, ha, None, None, None, "", True, True)
        for i in range(20):
            hidden.copy_(torch.randn(4, 16, device=dev))
            graph.replay()
            want, _, _ = torch.ops.sonic.sample(ops.state(hb), hidden @ w, hb, None, None, None, "", True, True)
            assert torch.equal(tokens, want), f"replay {i}"
        torch.cuda.synchronize()
        assert a.step(1) == b.step(1) == 20
    finally:
        ops.unregister(ha)
        ops.unregister(hb)
