"""The Python API on the CUDA backend with device arrays: torch tensors (fp32, bf16, fp16, strided
rows), cupy and jax arrays through DLPack, results in the caller's framework and on its device,
the caller's current stream or an explicit one. Every result is compared with the CPU backend
(the reference) or torch.topk. Needs torch with a GPU and sonic built with CUDA: the GPU machine
runs these (scripts/device_check.sh pytest)."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import sonic  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() and sonic.cuda_available()), reason="needs a GPU and sonic with CUDA"
)

V = 1000
R = 16
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def _requests(s, rows=R):
    """A heterogeneous batch: greedy, top-k, top-p, min-p, penalties over a prompt, a bias."""
    for r in range(rows):
        kind = r % 4
        s.admit(
            r,
            temperature=[0.0, 0.7, 1.0, 1.3][kind],
            top_k=[0, 40, 0, 8][kind],
            top_p=[1.0, 0.9, 0.8, 1.0][kind],
            min_p=[0.0, 0.0, 0.0, 0.05][kind],
            repetition_penalty=1.2 if kind == 2 else 1.0,
            presence_penalty=0.3 if kind == 2 else 0.0,
            logit_bias={7: 2.0} if kind == 3 else None,
            seed=100 + r,
            prompt=[5, 7, 7, 11 + r],
        )


def _pair(rows=R, **kw):
    cpu = sonic.Sampler(V, max_slots=rows, backend="cpu", **kw)
    gpu = sonic.Sampler(V, max_slots=rows, backend="cuda", **kw)
    _requests(cpu, rows)
    _requests(gpu, rows)
    return cpu, gpu


def _logits(rows, seed, dtype=torch.float32, cols=V):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * 3).to(dtype)


def _host(t):
    """A CPU torch tensor with the same values (the CPU backend reads torch CPU tensors)."""
    return t.detach().to("cpu")


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_sample_matches_the_cpu_backend(dtype):
    cpu, gpu = _pair()
    for step in range(3):
        x = _logits(R, step, DTYPES[dtype])
        got = gpu.sample(x.cuda(), logprobs="processed")
        want = cpu.sample(x, logprobs="processed")
        assert got.tokens.is_cuda and got.tokens.dtype == torch.int32
        assert torch.equal(got.tokens.cpu(), want.tokens), f"step {step}"
        assert torch.equal(got.status.cpu(), want.status)
        torch.testing.assert_close(got.logprob.cpu(), want.logprob, rtol=1e-4, atol=1e-4)
        assert torch.equal(got.rank.cpu(), want.rank)


def test_strided_rows_read_in_place():
    cpu, gpu = _pair()
    wide = _logits(R, 5, cols=V + 24).cuda()
    x = wide[:, :V]  # rows of stride V + 24, as a model's padded head gives them
    assert not x.is_contiguous()
    got = gpu.sample(x)
    want = cpu.sample(_host(x).contiguous())
    assert torch.equal(got.tokens.cpu(), want.tokens)


def test_verify_matches_the_cpu_backend():
    cpu, gpu = _pair(max_rows=4 * R, max_drafts=3)
    g = torch.Generator().manual_seed(9)
    n = [int(v) for v in torch.randint(0, 4, (R,), generator=g)]
    cu = [0]
    for k in n:
        cu.append(cu[-1] + k + 1)
    x = _logits(cu[-1], 11)
    # Drafts: the target row's argmax half the time, so that some are accepted.
    drafts = []
    for b in range(R):
        for j in range(n[b]):
            row = x[cu[b] + j]
            drafts.append(int(row.argmax()) if (b + j) % 2 == 0 else int(torch.randint(0, V, (1,), generator=g)))
    cu_t = torch.tensor(cu, dtype=torch.int32)
    drafts_t = torch.tensor(drafts if drafts else [0], dtype=torch.int32)
    got = gpu.verify(x.cuda(), cu_t.cuda(), drafts_t.cuda(), rules="one_hot", logprobs="raw")
    want = cpu.verify(x, cu_t, drafts_t, rules="one_hot", logprobs="raw")
    assert torch.equal(got.tokens.cpu(), want.tokens)
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)
    assert torch.equal(got.status.cpu(), want.status)
    # The step and the history advanced on the device like on the host: a second call agrees too.
    y = _logits(R, 12)
    assert torch.equal(gpu.sample(y.cuda()).tokens.cpu(), cpu.sample(y).tokens)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_top_k_matches_torch_topk(dtype):
    _, gpu = _pair()
    # Distinct values, so torch.topk's order is the only one: a permutation of 0..V-1 in fp32, and
    # in bf16 a permutation of V consecutive bit patterns of positive numbers (integers above 256
    # would round to ties there).
    g = torch.Generator().manual_seed(3)
    perm = torch.stack([torch.randperm(V, generator=g) for _ in range(R)])
    if dtype == "f32":
        x = perm.float().cuda()
    else:
        x = (perm + 0x3C00).to(torch.int16).view(torch.bfloat16).cuda()
    vals, ids = gpu.top_k(x, 50)
    want = torch.topk(x.float(), 50, dim=-1)
    assert ids.is_cuda and torch.equal(ids.long(), want.indices)
    assert torch.equal(vals, want.values)


def test_current_and_explicit_streams():
    cpu, gpu = _pair()
    x = _logits(R, 21).cuda()
    opts = dict(advance_step=False, append_to_history=False)  # the same answer every call
    base = gpu.sample(x, **opts).tokens.clone()
    assert torch.equal(base.cpu(), cpu.sample(_host(x), **opts).tokens)  # and the reference's
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # the caller's current stream
        on_side = gpu.sample(x, **opts).tokens
    side.synchronize()
    assert torch.equal(on_side, base)
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    explicit = gpu.sample(x, stream=other, **opts).tokens
    other.synchronize()
    assert torch.equal(explicit, base)
    with pytest.raises(TypeError, match="stream"):
        gpu.sample(x, stream="default", **opts)


def test_explicit_stream_with_temporaries():
    # Python lists (cu_rows, drafts) and the default rules become device arrays inside the call: on
    # an explicit stream they are made and filled on that stream (A.on_stream), so the kernels see
    # them filled and the allocator keeps them until the stream is done with them.
    cpu, gpu = _pair(max_rows=2 * R, max_drafts=1)
    x = _logits(2 * R, 13)
    cu = list(range(0, 2 * R + 1, 2))
    drafts = [int(x[2 * b].argmax()) for b in range(R)]
    other = torch.cuda.Stream()
    other.wait_stream(torch.cuda.current_stream())
    xd = x.cuda()
    got = gpu.verify(xd, cu, drafts, stream=other)
    other.synchronize()
    want = cpu.verify(x, cu, drafts)
    assert torch.equal(got.tokens.cpu(), want.tokens)
    assert torch.equal(got.num_accepted.cpu(), want.num_accepted)


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    cpu, gpu = _pair()
    x = _logits(R, 31)
    got = gpu.sample(cupy.asarray(x.numpy()), logprobs="raw")
    want = cpu.sample(x.numpy(), logprobs="raw")
    assert isinstance(got.tokens, cupy.ndarray)
    np.testing.assert_array_equal(cupy.asnumpy(got.tokens), want.tokens)
    np.testing.assert_allclose(cupy.asnumpy(got.logprob), want.logprob, rtol=1e-4, atol=1e-4)


def test_jax_arrays():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave the GPU to the others
    jax = pytest.importorskip("jax")
    pytest.importorskip("cupy")  # outputs of jax inputs are allocated with cupy
    gpus = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpus:
        pytest.skip("jax sees no GPU")
    cpu, gpu = _pair()
    x = _logits(R, 41).numpy()
    got = gpu.sample(jax.device_put(x, gpus[0]))
    want = cpu.sample(x)
    import cupy

    np.testing.assert_array_equal(cupy.asnumpy(got.tokens), want.tokens)


def test_functional_call_on_device():
    x = _logits(4, 51).cuda()
    got = sonic.sample(x, temperature=0.0)
    assert got.tokens.is_cuda
    assert torch.equal(got.tokens.long().cpu(), x.argmax(dim=-1).cpu())


def test_functional_final_distribution_capacity_on_device():
    # final_distribution=True: capacity V, at most sonic.max_final_entries('cuda', device).
    limit = sonic.max_final_entries("cuda", torch.cuda.current_device())
    for cols in (V, limit + 1000):
        x = _logits(2, 52, cols=cols).cuda()
        got = sonic.sample(x, temperature=1.0, final_distribution=True)
        assert tuple(got.final_ids.shape) == (2, min(cols, limit))
