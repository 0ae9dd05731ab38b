"""Bad arguments raise TypeError / ValueError naming the argument, before anything runs."""

import numpy as np
import pytest

import sonic
from conftest import make_sampler


@pytest.fixture
def s():
    s = make_sampler(vocab_size=8, max_slots=2, max_drafts=1)
    s.admit(0, temperature=0)
    s.admit(1, temperature=0)
    return s


X = np.zeros((2, 8), dtype=np.float32)


def test_wrong_dtype_is_a_type_error(s):
    with pytest.raises(TypeError, match=r"'logits'.*float64"):
        s.sample(np.zeros((2, 8)))
    with pytest.raises(TypeError, match=r"'slots'.*int32.*int64"):
        s.sample(X, slots=np.array([0, 1], dtype=np.int64))
    with pytest.raises(TypeError, match="'bitmask'"):
        s.sample(X, bitmask=np.zeros((2, 1), dtype=np.uint32))


def test_not_an_array_is_a_type_error(s):
    with pytest.raises(TypeError, match="'logits'"):
        s.sample([[0.0] * 8] * 2)
    with pytest.raises(TypeError, match="'logits'"):
        sonic.sample("logits")
    with pytest.raises(TypeError, match=r"'slots\[1\]'"):
        s.sample(X, slots=[0, 1.5])


def test_shapes_and_layouts_name_the_argument(s):
    with pytest.raises(ValueError, match="'logits'.*2-D"):
        s.sample(np.zeros(8, dtype=np.float32))
    with pytest.raises(ValueError, match=r"'slots'.*shape \(2,\)"):
        s.sample(X, slots=np.array([0], dtype=np.int32))
    wide = np.zeros((2, 16), dtype=np.float32)
    with pytest.raises(ValueError, match="'logits'.*row-contiguous"):
        s.sample(wide[:, ::2])
    with pytest.raises(ValueError, match="'bitmask_index'"):
        s.sample(X, bitmask_index=[0, 0])
    with pytest.raises(ValueError, match="'bitmask_index'.*shape"):
        s.sample(X, bitmask=np.zeros((1, 1), dtype=np.int32), bitmask_index=[0])


def test_library_checks_become_value_errors(s):
    with pytest.raises(ValueError, match="logits.rows"):
        s.sample(np.zeros((3, 8), dtype=np.float32))
    with pytest.raises(ValueError, match="logits.cols"):
        s.sample(np.zeros((2, 7), dtype=np.float32))
    with pytest.raises(ValueError, match="temperature"):
        s.admit(0, temperature=1e-7)
    with pytest.raises(ValueError, match="temperature"):
        s.admit(0, temperature=float("nan"))
    with pytest.raises(ValueError, match="top_p"):
        s.admit(0, top_p=0.0)
    with pytest.raises(ValueError, match="repetition_penalty"):
        s.admit(0, repetition_penalty=0.0)
    with pytest.raises(ValueError, match="slot"):
        s.admit(5)
    with pytest.raises(ValueError, match="banned_tokens"):
        s.admit(0, banned_tokens=[8])
    with pytest.raises(ValueError, match="logit_bias"):
        s.admit(0, logit_bias=[(1, 0.5), (1, 0.25)])
    with pytest.raises(ValueError, match="config.vocab_size"):
        sonic.Sampler(0, max_slots=1, backend="cpu")


def test_python_side_checks(s):
    with pytest.raises(TypeError, match="'temperature'"):
        s.admit(0, temperature="hot")
    with pytest.raises(ValueError, match="'seed'"):
        s.admit(0, seed=-1)
    with pytest.raises(TypeError, match=r"'prompt\[1\]'"):
        s.admit(0, prompt=[1, "a"])
    with pytest.raises(TypeError, match=r"'logit_bias\[0\]'"):
        s.admit(0, logit_bias=[3])
    with pytest.raises(ValueError, match="'backend'"):
        sonic.Sampler(8, max_slots=1, backend="gpu")
    with pytest.raises(TypeError, match="'max_slots'"):
        sonic.Sampler(8, max_slots=1.5, backend="cpu")
    with pytest.raises(ValueError, match="config.cpu_threads = -1"):
        sonic.Sampler(8, max_slots=1, backend="cpu", cpu_threads=-1)
    with pytest.raises(ValueError, match="'logprobs'"):
        s.sample(X, logprobs="bogus")
    with pytest.raises(ValueError, match="'top_logprobs'.*max_top_logprobs"):
        s.sample(X, top_logprobs=True)
    with pytest.raises(ValueError, match="'final_distribution'.*max_final_entries"):
        s.sample(X, final_distribution=True)
    with pytest.raises(TypeError, match="'stream'"):
        s.sample(X, stream="default")
    # Values a float32 cannot hold: 1e-300 would become 0 (greedy), 1e300 infinity.
    with pytest.raises(ValueError, match="'temperature' = 1e-300 underflows"):
        s.admit(0, temperature=1e-300)
    with pytest.raises(ValueError, match=r"'logit_bias\[0\] bias' = 1e\+300 does not fit"):
        s.admit(0, logit_bias={1: 1e300})


def test_verify_argument_errors(s):
    x = np.zeros((3, 8), dtype=np.float32)
    with pytest.raises(ValueError, match="'rules'"):
        s.verify(x[:2], [0, 2], [1], rules="bogus")
    with pytest.raises(ValueError, match=r"'rules\[1\]'"):
        s.verify(x[:2], [0, 1, 2], [], rules=["strict", 9])
    with pytest.raises(ValueError, match="'cu_rows'"):
        s.verify(x[:2], np.zeros((0,), dtype=np.int32), [])
    with pytest.raises(TypeError, match="'draft_tokens'.*int32"):
        s.verify(x[:2], [0, 2], np.array([1], dtype=np.int64))
    with pytest.raises(TypeError, match="'draft_sparse'"):
        s.verify(x[:2], [0, 2], [1], draft_sparse=5)
    with pytest.raises(ValueError, match="'draft_probs'.*2-D"):
        s.verify(x[:2], [0, 2], [1], draft_probs=np.zeros(8, dtype=np.float32))


def test_device_side_problems_are_status_bits(s):
    out = s.sample(X, slots=[0, 3])  # slot 3 out of range: flagged, not raised
    assert out.tokens[1] == -1 and out.status[1] & sonic.STATUS_INVALID_INPUT
    assert out.tokens[0] == 0


def test_cuda_backend_without_a_gpu():
    if sonic.cuda_available():
        pytest.skip("a GPU is present")
    with pytest.raises(RuntimeError):
        sonic.Sampler(8, max_slots=1, backend="cuda")


def test_max_final_entries():
    assert sonic.max_final_entries("cpu") == 2**31 - 1
    assert sonic.max_final_entries(backend="cpu", device=0) == 2**31 - 1
    with pytest.raises(ValueError, match="'backend'"):
        sonic.max_final_entries("gpu")
    with pytest.raises(ValueError, match="device = -1"):
        sonic.max_final_entries("cpu", -1)
    with pytest.raises(TypeError, match="'device'"):
        sonic.max_final_entries("cpu", 0.5)
    if sonic.cuda_available():
        assert 16384 <= sonic.max_final_entries() < 2**31 - 1
    else:
        with pytest.raises(RuntimeError):
            sonic.max_final_entries("cuda")
        assert sonic.max_final_entries("auto") == 2**31 - 1
