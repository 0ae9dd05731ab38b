"""The one-off form sonic.sample(logits, ...)."""

import numpy as np
import pytest

import sonic
from conftest import log_softmax, make_sampler


def test_one_row_is_squeezed():
    out = sonic.sample(np.array([1.0, 3.0, 3.0, 2.0], dtype=np.float32), temperature=0)
    assert int(out.tokens) == 1 and int(out.status) == 0
    assert out.logprob is None


def test_matches_a_sampler(rng):
    R, V = 5, 40
    x = rng.normal(size=(R, V)).astype(np.float32)
    temps = [0.0, 0.5, 1.0, 1.5, 0.7]
    out = sonic.sample(x, temperature=temps, top_k=[0, 5, 0, 10, 3], top_p=0.9, seed=[1, 2, 3, 4, 5],
                       step=3, logprobs="processed", top_logprobs=2)
    s = make_sampler(vocab_size=V, max_slots=R, max_top_logprobs=2)
    for r in range(R):
        s.admit(r, temperature=temps[r], top_k=[0, 5, 0, 10, 3][r], top_p=0.9, seed=r + 1,
                initial_step=3, top_logprobs=2)
    ref = s.sample(x, logprobs="processed", top_logprobs=True)
    for a, b in zip(out, ref):
        if a is None:
            assert b is None
        else:
            np.testing.assert_array_equal(a, b)
    assert out.top_ids.shape == (R, 2)


def test_history_lists_and_penalties():
    x = np.array([[2.0, 1.9, 0.0], [2.0, 1.9, 0.0]], dtype=np.float32)
    out = sonic.sample(x, temperature=0, repetition_penalty=2.0, output=[[0], []])
    assert out.tokens.tolist() == [1, 0]
    out = sonic.sample(x, temperature=0, presence_penalty=0.5, prompt=[0],
                       penalties_include_prompt=[True, False])
    assert out.tokens.tolist() == [1, 0]


def test_token_lists_for_all_rows_or_per_row():
    x = np.tile(np.arange(6, dtype=np.float32), (2, 1))
    assert sonic.sample(x, temperature=0, banned_tokens=[5, 4]).tokens.tolist() == [3, 3]
    assert sonic.sample(x, temperature=0, banned_tokens=[[5], [5, 4, 3]]).tokens.tolist() == [4, 2]
    assert sonic.sample(x, temperature=0, logit_bias={0: 10.0}).tokens.tolist() == [0, 0]


def test_final_distribution_and_vocab_size():
    x = np.array([[0.0, 1.0, 2.0, 50.0]], dtype=np.float32)
    out = sonic.sample(x, vocab_size=3, temperature=1.0, final_distribution=True, logprobs="raw")
    assert int(out.final_count[0]) == 3
    assert sorted(out.final_ids[0].tolist()) == [0, 1, 2]
    assert out.logprob[0] == pytest.approx(log_softmax(x[0, :3])[out.tokens[0]], abs=1e-5)


def test_bad_per_row_length():
    with pytest.raises(ValueError, match="'temperature'"):
        sonic.sample(np.zeros((2, 4), dtype=np.float32), temperature=[1.0, 1.0, 1.0])
