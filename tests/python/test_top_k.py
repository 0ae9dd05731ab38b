"""sonic.top_k and Sampler.top_k: batched top-k of raw logits, value descending then id ascending,
NaN read as -inf, padding columns never returned; errors name the argument."""

import numpy as np
import pytest

import sonic
from conftest import make_sampler


def _oracle(row: np.ndarray, k: int):
    v = np.where(np.isnan(row), -np.inf, row)
    order = np.lexsort((np.arange(v.size), -v))  # by -value, then id
    return v[order[:k]].astype(np.float32), order[:k].astype(np.int32)


def test_matches_a_full_sort_with_ties_nan_and_inf(rng):
    R, V = 4, 777
    x = np.round(rng.normal(size=(R, V)) * 4) / 4  # many exact ties
    x[:, 5] = np.nan
    x[:, 9] = -np.inf
    x = x.astype(np.float32)
    for k in (1, 13, 200):
        vals, ids = sonic.top_k(x, k)
        assert vals.shape == (R, k) and ids.shape == (R, k)
        assert vals.dtype == np.float32 and ids.dtype == np.int32
        for r in range(R):
            want_v, want_i = _oracle(x[r], k)
            np.testing.assert_array_equal(ids[r], want_i)
            np.testing.assert_array_equal(vals[r], want_v)


def test_one_row_is_squeezed_and_values_are_optional():
    vals, ids = sonic.top_k(np.array([0.5, 2.0, 2.0, -1.0], dtype=np.float32), 3)
    assert ids.tolist() == [1, 2, 0] and vals.tolist() == [2.0, 2.0, 0.5]
    vals, ids = sonic.top_k(np.array([[0.5, 2.0, 2.0, -1.0]], dtype=np.float32), 2, values=False)
    assert vals is None and ids.tolist() == [[1, 2]]


def test_padding_columns_are_never_returned():
    x = np.array([[0.1, 0.3, 0.2, 9.0, 8.0]], dtype=np.float32)
    _, ids = sonic.top_k(x, 3, vocab_size=3)
    assert ids.tolist() == [[1, 2, 0]]
    s = make_sampler(vocab_size=3, max_slots=1)
    _, ids = s.top_k(x, 2)
    assert ids.tolist() == [[1, 2]]


def test_needs_no_admitted_slot():
    s = make_sampler(vocab_size=6, max_slots=2)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    vals, ids = s.top_k(x, 2)
    assert ids.tolist() == [[5, 4], [5, 4]]
    assert vals.tolist() == [[5.0, 4.0], [11.0, 10.0]]


@pytest.mark.parametrize("k", [0, 7, 2000])
def test_bad_k_names_the_argument(k):
    x = np.zeros((1, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="'k'"):
        sonic.top_k(x, k)


def test_k_must_be_an_integer():
    with pytest.raises(TypeError, match="'k'"):
        sonic.top_k(np.zeros((1, 6), dtype=np.float32), 2.5)
